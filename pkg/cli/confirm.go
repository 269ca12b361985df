// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"
)

// confirm asks before a step that destroys or discards something, when a
// person is there to answer: stdin is a terminal. --yes answers for them;
// a script or a pipe (stdin not a terminal) is not asked, as with rm. An
// answer other than y or yes refuses, and nothing has been changed.
func (g *Globals) confirm(question string) error {
	if g.Yes {
		return nil
	}
	in := g.Stdin
	if in == nil {
		in = os.Stdin
	}
	terminal := g.stdinTerminal
	if terminal == nil {
		terminal = func() bool { return isTerminal(in) }
	}
	if !terminal() {
		return nil
	}
	fmt.Fprintf(g.Stderr, "%s [y/N] ", question)
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil && err != io.EOF {
		return fmt.Errorf("read the answer: %w", err)
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return nil
	}
	return usageErrorf("not confirmed: nothing was changed (--yes answers for you)")
}
