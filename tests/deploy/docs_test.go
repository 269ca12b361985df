// SPDX-License-Identifier: Apache-2.0

package deploy_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tidecache/tidecache/pkg/cli"
	"github.com/tidecache/tidecache/pkg/daemoncli"
)

// TestDocsNameRealCommands reads every tidectl and tidecached command line
// in the README and docs/*.md (fenced blocks and inline code) and checks it
// against the command trees: each subcommand and each flag must exist, so
// a renamed flag or command cannot leave the docs behind.
func TestDocsNameRealCommands(t *testing.T) {
	files, _ := filepath.Glob("../../docs/*.md")
	files = append(files, "../../README.md", "../../deploy/man/tidecache.7")
	roots := commandTrees()
	checked := 0
	for _, f := range files {
		text, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range commandLines(string(text)) {
			for _, cmdline := range invocations(line, roots) {
				checked++
				if err := checkInvocation(roots, cmdline); err != nil {
					t.Errorf("%s: %q: %v", filepath.Base(f), cmdline, err)
				}
			}
		}
	}
	// The README alone names some twenty commands: finding fewer means the
	// extraction broke, not that the docs are right.
	if checked < 100 {
		t.Errorf("checked %d command lines in the docs, want at least 100", checked)
	}
}

// commandTrees returns both programs' trees with the commands cobra adds
// only when it executes (completion, help).
func commandTrees() map[string]*cobra.Command {
	roots := map[string]*cobra.Command{"tidectl": cli.NewTidectl(nil, nil), "tidecached": daemoncli.NewTidecached(nil, nil)}
	for _, r := range roots {
		r.InitDefaultHelpCmd()
		r.InitDefaultCompletionCmd()
	}
	return roots
}

var (
	fence       = regexp.MustCompile("(?s)```[a-z]*\n(.*?)```")
	inlineCode  = regexp.MustCompile("`([^`\n]+)`")
	roffExample = regexp.MustCompile(`(?s)\n\.nf\n(.*?)\n\.fi\n`)
	roffBold    = regexp.MustCompile(`(?m)^\.BR? "([^"]+)"`)
	// roffEscape undoes the man page's escapes of dashes.
	roffEscape = strings.NewReplacer(`\-`, "-", `\e`, `\`)
)

// commandLines returns the code of a Markdown or man page: the lines of
// its fenced blocks and its inline code spans (a man page: its examples
// and the commands it sets in bold).
func commandLines(text string) []string {
	if strings.HasPrefix(text, `.\"`) {
		// A man page: its examples (.nf to .fi) and quoted bold commands.
		var lines []string
		for _, m := range roffExample.FindAllStringSubmatch(roffEscape.Replace(text), -1) {
			lines = append(lines, strings.Split(m[1], "\n")...)
		}
		for _, m := range roffBold.FindAllStringSubmatch(roffEscape.Replace(text), -1) {
			lines = append(lines, m[1])
		}
		return lines
	}
	var lines []string
	for _, m := range fence.FindAllStringSubmatch(text, -1) {
		lines = append(lines, strings.Split(m[1], "\n")...)
	}
	for _, m := range inlineCode.FindAllStringSubmatch(fence.ReplaceAllString(text, ""), -1) {
		lines = append(lines, m[1])
	}
	return lines
}

// invocations cuts the command lines of the given programs out of a line
// of code: from the program's name to the end of that shell command.
func invocations(line string, roots map[string]*cobra.Command) [][]string {
	// Shell comments and diagrams (box drawing) name programs in prose.
	if strings.HasPrefix(strings.TrimSpace(line), "#") || strings.ContainsFunc(line, func(r rune) bool { return r >= 0x2500 && r <= 0x25ff }) {
		return nil
	}
	if i := strings.Index(line, " #"); i >= 0 {
		line = line[:i]
	}
	fields := strings.Fields(line)
	var out [][]string
	for i := 0; i < len(fields); i++ {
		name := strings.TrimLeft(fields[i], "($")
		if _, ok := roots[filepath.Base(name)]; !ok || (name != filepath.Base(name) && !strings.HasPrefix(name, "/usr/sbin/")) {
			continue
		}
		cmd := []string{filepath.Base(name)}
		for i++; i < len(fields); i++ {
			f := fields[i]
			if f == "|" || f == "&&" || f == "||" || f == ";" || f == "&" || strings.HasPrefix(f, ">") || strings.HasPrefix(f, "2>") {
				break
			}
			end := strings.HasSuffix(f, ";") || strings.HasSuffix(f, ")")
			cmd = append(cmd, strings.TrimRight(f, ";)"))
			if end {
				break
			}
		}
		out = append(out, cmd)
	}
	return out
}

// placeholder reports words the docs use for "something goes here":
// <name>, …, [flags], a|b alternatives, check/repair.
func placeholder(word string) bool {
	return strings.ContainsAny(word, "<>[]{}|/…*$\"'") || strings.Contains(word, "...")
}

// checkInvocation walks a command line down the tree of its program: each
// word is a subcommand while the command is a group that takes no
// arguments of its own, and every flag must be one the command (or a parent) takes.
func checkInvocation(roots map[string]*cobra.Command, words []string) error {
	c := roots[words[0]]
	for i := 1; i < len(words); i++ {
		w := words[i]
		if placeholder(w) {
			// A placeholder subcommand leaves nothing to check; a
			// placeholder argument, the flags after it.
			if c.HasSubCommands() && c.ValidateArgs([]string{w}) != nil {
				return nil
			}
			continue
		}
		if w == "--help" || w == "-h" {
			continue // cobra adds it to every command
		}
		if strings.HasPrefix(w, "-") && w != "-" {
			name, _, hasValue := strings.Cut(strings.TrimLeft(w, "-"), "=")
			fl := lookupFlag(c, name, !strings.HasPrefix(w, "--"))
			if fl == nil {
				return fmt.Errorf("%s has no flag %s", c.CommandPath(), w)
			}
			if !hasValue && fl.Value.Type() != "bool" {
				i++ // its value
			}
			continue
		}
		if c.HasSubCommands() {
			sub, _, err := c.Find([]string{w})
			switch {
			case err == nil && sub != c:
				c = sub
			case c.ValidateArgs([]string{w}) != nil:
				// A group (volume, pool): its words are subcommands.
				return fmt.Errorf("%s has no subcommand %q", c.CommandPath(), w)
			}
		}
	}
	return nil
}

// lookupFlag finds a flag of c by its long name, or by its one-letter
// shorthand: among c's own flags, its persistent ones (not merged into
// Flags until cobra executes) and those it inherits.
func lookupFlag(c *cobra.Command, name string, short bool) *pflag.Flag {
	for _, fs := range []*pflag.FlagSet{c.Flags(), c.PersistentFlags(), c.InheritedFlags()} {
		switch {
		case !short:
			if f := fs.Lookup(name); f != nil {
				return f
			}
		case len(name) == 1:
			if f := fs.ShorthandLookup(name); f != nil {
				return f
			}
		}
	}
	return nil
}

// The checker itself: it must refuse what does not exist, or the docs test
// above could never fail.
func TestCheckInvocation(t *testing.T) {
	roots := commandTrees()
	for _, c := range []struct {
		line string
		want string // "" for accepted, else part of the error
	}{
		{"tidectl volume create db --size 1G --write-cache 64M", ""},
		{"tidectl -o json volume show db", ""},
		{"tidectl --etcd-endpoints http://127.0.0.1:2389 node list", ""},
		{"tidectl volume <command> --help", ""},
		{"tidecached run --embedded-etcd --export lun0=/dev/md0", ""},
		{"tidectl volume creat db", `no subcommand "creat"`},
		{"tidectl volume create db --sise 1G", "no flag --sise"},
		{"tidectl pool create fast --raid6 a,b,c,d --ssd x", "no flag --raid6"},
		{"tidecached --embedded-etcd", "no flag --embedded-etcd"},
		{"tidectl volume flush db -z", "no flag -z"},
	} {
		for _, words := range invocations(c.line, roots) {
			err := checkInvocation(roots, words)
			switch {
			case c.want == "" && err != nil:
				t.Errorf("%q: %v, want accepted", c.line, err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Errorf("%q: %v, want an error with %q", c.line, err, c.want)
			}
		}
	}
}
