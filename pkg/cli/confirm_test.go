// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// TestConfirm: a destructive command asks on a terminal and goes ahead
// only on yes; --yes, or a stdin that is no terminal (a script), is not
// asked. The fake engine refuses every delete with "fake": reaching it is
// how the test sees the command went ahead.
func TestConfirm(t *testing.T) {
	for _, c := range []struct {
		name     string
		terminal bool
		answer   string
		args     []string
		asked    bool
		ahead    bool
	}{
		{"yes", true, "y\n", []string{"volume", "delete", "db"}, true, true},
		{"YES in full", true, "Yes\n", []string{"volume", "delete", "db"}, true, true},
		{"no", true, "n\n", []string{"volume", "delete", "db"}, true, false},
		{"just enter", true, "\n", []string{"volume", "delete", "db"}, true, false},
		{"end of input", true, "", []string{"volume", "delete", "db"}, true, false},
		{"--yes", true, "", []string{"volume", "delete", "db", "--yes"}, false, true},
		{"-y", true, "", []string{"-y", "volume", "delete", "db", "--force"}, false, true},
		{"a script", false, "", []string{"volume", "delete", "db"}, false, true},
		{"force says what is lost", true, "n\n", []string{"volume", "delete", "db", "--force"}, true, false},
		{"pool delete", true, "n\n", []string{"pool", "delete", "fast"}, true, false},
		{"pool force-start", true, "n\n", []string{"pool", "force-start", "fast", "--accept-data-loss", "db"}, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			g := &Globals{Stdout: &out, Stderr: &errb, Stdin: strings.NewReader(c.answer)}
			g.stdinTerminal = func() bool { return c.terminal }
			node := &fakeNode{}
			g.openNode = func() (nodeEngine, error) { return node, nil }
			cmd := newTidectl(g)
			cmd.SetArgs(c.args)
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			code := Execute(ctx, cmd, &errb)
			asked := strings.Contains(errb.String(), "[y/N]")
			refused := strings.Contains(errb.String(), "not confirmed: nothing was changed")
			if asked != c.asked {
				t.Errorf("asked %v, want %v; stderr: %s", asked, c.asked, errb.String())
			}
			if refused == c.ahead || (refused && code != ExitUsage) {
				t.Errorf("exit %d, refused %v, want ahead %v; stderr: %s", code, refused, c.ahead, errb.String())
			}
			if strings.Contains(strings.Join(c.args, " "), "--force") && asked && !strings.Contains(errb.String(), "discarding the writes") {
				t.Errorf("the question for --force does not say what is lost: %s", errb.String())
			}
			if strings.Contains(strings.Join(c.args, " "), "--accept-data-loss") && asked && !strings.Contains(errb.String(), "db without the writes") {
				t.Errorf("the question for --accept-data-loss does not name the volume and the loss: %s", errb.String())
			}
		})
	}
}
