// SPDX-License-Identifier: Apache-2.0

// Command gendocs writes the man pages and shell completion scripts of
// tidectl and tidecached from their command trees, so `make install` and
// `make deb` ship documentation that cannot drift from the flags.
//
//	go run ./internal/cmd/gendocs -out build/share
//
// writes man/man8/tidectl.8, tidectl-volume-create.8, … and
// completion/{bash,zsh,fish}/tidectl and tidecached.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"

	"github.com/tidecache/tidecache/pkg/cli"
	"github.com/tidecache/tidecache/pkg/daemoncli"
	"github.com/tidecache/tidecache/pkg/version"
)

func main() {
	out := flag.String("out", "build/share", "directory to write man/ and completion/ into")
	flag.Parse()
	if err := generate(*out); err != nil {
		fmt.Fprintln(os.Stderr, "gendocs:", err)
		os.Exit(1)
	}
}

// trees are the binaries whose documentation is generated.
var trees = []struct {
	name  string
	build func(stdout, stderr io.Writer) *cobra.Command
}{
	{"tidectl", cli.NewTidectl},
	{"tidecached", daemoncli.NewTidecached},
}

func generate(out string) error {
	manDir := filepath.Join(out, "man", "man8")
	if err := os.MkdirAll(manDir, 0o755); err != nil {
		return err
	}
	for _, t := range trees {
		root := t.build(io.Discard, io.Discard)
		root.DisableAutoGenTag = true
		header := &doc.GenManHeader{Title: t.name, Section: "8", Source: "tidecache " + version.Version, Manual: "tidecache"}
		if err := doc.GenManTree(root, header, manDir); err != nil {
			return fmt.Errorf("man pages of %s: %w", t.name, err)
		}
		if err := completions(root, t.name, filepath.Join(out, "completion")); err != nil {
			return err
		}
	}
	return nil
}

// completions writes the bash, zsh and fish scripts of one binary.
func completions(root *cobra.Command, name, dir string) error {
	for shell, gen := range map[string]func(io.Writer) error{
		"bash": func(w io.Writer) error { return root.GenBashCompletionV2(w, true) },
		"zsh":  root.GenZshCompletion,
		"fish": func(w io.Writer) error { return root.GenFishCompletion(w, true) },
	} {
		var b bytes.Buffer
		if err := gen(&b); err != nil {
			return fmt.Errorf("%s completion of %s: %w", shell, name, err)
		}
		if err := os.MkdirAll(filepath.Join(dir, shell), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, shell, name), b.Bytes(), 0o644); err != nil {
			return err
		}
	}
	return nil
}
