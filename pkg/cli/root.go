// Package cli holds the command trees of tidectl and tidecached: flag
// parsing, input validation that needs no device, human and JSON output,
// and progress display. The work itself is done by pkg/engine; this
// package only translates between a terminal and the engine.
package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/tidecache/tidecache/pkg/engine"
	"github.com/tidecache/tidecache/pkg/version"
)

// globals are the flags every command shares.
type globals struct {
	output  string
	verbose bool
	lock    string
	stdout  io.Writer
	stderr  io.Writer
	cl      clusterFlags
}

// engine opens the engine with the shared flags applied. The caller closes it.
func (g *globals) engine() (*engine.Engine, error) {
	cfg := engine.DefaultConfig()
	level := slog.LevelWarn
	if g.verbose {
		level = slog.LevelDebug
	}
	cfg.Logger = slog.New(slog.NewTextHandler(g.stderr, &slog.HandlerOptions{Level: level}))
	if g.lock != "" {
		cfg.LockPath = g.lock
	}
	return engine.New(cfg)
}

func (g *globals) validateOutput() error {
	switch g.output {
	case "table", "json":
		return nil
	}
	return fmt.Errorf("invalid --output %q: use table or json", g.output)
}

// newRoot returns a binary's root command with the flags every tidecache
// command shares (output format, verbosity, lock file).
func newRoot(g *globals, use, short, long string) *cobra.Command {
	root := &cobra.Command{
		Use:           use,
		Short:         short,
		Long:          long,
		Version:       version.Version,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			return g.validateOutput()
		},
	}
	root.SetOut(g.stdout)
	root.SetErr(g.stderr)
	root.PersistentFlags().StringVarP(&g.output, "output", "o", "table", "output format: table or json")
	root.PersistentFlags().BoolVarP(&g.verbose, "verbose", "v", false, "log every step (debug level) to stderr")
	root.PersistentFlags().StringVar(&g.lock, "lock-file", "", "lock file serialising changes (default /run/tidecache/engine.lock)")
	return root
}

// NewTidectl returns the tidectl command tree writing to the given streams.
func NewTidectl(stdout, stderr io.Writer) *cobra.Command {
	g := &globals{stdout: stdout, stderr: stderr}
	root := newRoot(g, "tidectl", "Manage tidecache pools and SSD-cached volumes on this node", `tidectl manages tidecache: SSDs in front of an HDD RAID10 as a write-back
cache built from the kernel's device-mapper targets (dm-writecache for
writes, dm-cache for reads).

A pool is one HDD array (the origin) plus one or more SSDs. Volumes are
carved from a pool; each appears as /dev/mapper/tc-<name> and can be
switched live between writeback, writethrough and passthrough.

Run as root: tidectl talks to device-mapper and writes superblocks.

With --etcd-endpoints, the volume commands work on the cluster instead:
they write volume specs to etcd, the tidecached daemon of the owning node
applies them, and --wait follows its progress. 'tidectl node' lists and
drains nodes.`)
	addClusterFlags(root, g)
	root.AddCommand(newPoolCmd(g), newVolumeCmd(g), newNodeCmd(g), newPolicyCmd(g))
	return root
}

// NewTidecached returns the tidecached command tree.
func NewTidecached(stdout, stderr io.Writer) *cobra.Command {
	g := &globals{stdout: stdout, stderr: stderr}
	root := newRoot(g, "tidecached", "tidecache node daemon: boot assembly, cluster reconcile, metrics", "")
	root.AddCommand(newAssembleCmd(g), newRunCmd(g), newEtcdCmd(g))
	return root
}

// Execute runs a command tree and turns its error into an exit status.
func Execute(ctx context.Context, cmd *cobra.Command, stderr io.Writer) int {
	if err := cmd.ExecuteContext(ctx); err != nil {
		fmt.Fprintf(stderr, "error: %v\n", err)
		return 1
	}
	return 0
}

// Main is the body of a binary's main: it runs the tree with os streams.
func Main(ctx context.Context, build func(stdout, stderr io.Writer) *cobra.Command) int {
	return Execute(ctx, build(os.Stdout, os.Stderr), os.Stderr)
}
