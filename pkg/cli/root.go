// SPDX-License-Identifier: Apache-2.0

// Package cli holds the tidectl command tree and what every tidecache
// command tree shares: the common flags, output formats, exit codes and
// progress display.
//
// Each tidectl command validates its input first, then picks one backend
// (see backend.go): this node's engine, or the cluster's etcd store when
// --etcd-endpoints is given. A command that cannot work in cluster mode
// says so instead of silently acting on the local node. Records are
// printed in one JSON schema per object whatever the backend (schema.go).
//
// tidecached's command tree lives in pkg/daemoncli, so that tidectl links
// no etcd server, raft or bbolt code.
package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/tidecache/tidecache/pkg/engine"
	"github.com/tidecache/tidecache/pkg/nvmeauth"
	"github.com/tidecache/tidecache/pkg/version"
)

// Globals are the flags and streams every command of a tree shares.
type Globals struct {
	// Output is the output format: table, json or yaml.
	Output string
	// Verbose logs every step at debug level to Stderr.
	Verbose bool
	// Lock overrides the engine's lock file.
	Lock           string
	Stdout, Stderr io.Writer
	// Stdin is where confirmations are read; nil: os.Stdin.
	Stdin io.Reader
	// Yes answers the confirmations of destructive commands (--yes).
	Yes bool
	// stdinTerminal reports whether a person can answer on Stdin; nil:
	// whether Stdin is a terminal (tests set it).
	stdinTerminal func() bool

	cl clusterFlags
	// getenv reads the environment; nil means os.Getenv (tests set it).
	getenv func(string) string
	// openNode opens the local backend's engine; nil means Engine. Host
	// tests set it to run local-mode commands without device-mapper.
	openNode func() (nodeEngine, error)
}

// Engine opens this node's engine with the shared flags applied. The
// caller closes it.
func (g *Globals) Engine() (*engine.Engine, error) {
	cfg := engine.DefaultConfig()
	cfg.Logger = g.Logger(slog.LevelWarn)
	if g.Lock != "" {
		cfg.LockPath = g.Lock
	}
	// The secrets the daemon keeps, for a peer leg attached or a replica
	// exported from here (NVMe in-band authentication).
	if local, ok, err := nvmeauth.OpenLocal(nvmeauth.DefaultDir); err != nil {
		return nil, fmt.Errorf("NVMe keyring: %w", err)
	} else if ok {
		cfg.NVMeAuth = local
	}
	return engine.New(cfg)
}

// Logger returns a text logger on Stderr at level, or at debug level with
// --verbose.
func (g *Globals) Logger(level slog.Level) *slog.Logger {
	if g.Verbose {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(g.Stderr, &slog.HandlerOptions{Level: level}))
}

// JSON reports whether records are printed as data (json or yaml) rather
// than as a table for people.
func (g *Globals) JSON() bool { return g.Output == "json" || g.Output == "yaml" }

// Print writes v in the chosen data format; callers use it when JSON()
// is true.
func (g *Globals) Print(v any) error {
	if g.Output == "yaml" {
		return printYAML(g.Stdout, v)
	}
	return PrintJSON(g.Stdout, v)
}

func (g *Globals) validateOutput() error {
	switch g.Output {
	case "table", "json", "yaml":
		return nil
	}
	return usageErrorf("invalid --output %q: use table, json or yaml", g.Output)
}

// NewRoot returns a binary's root command with the flags every tidecache
// command shares (output format, verbosity, lock file) and usage errors
// marked for their exit code.
func NewRoot(g *Globals, use, short, long string) *cobra.Command {
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
	root.SetOut(g.Stdout)
	root.SetErr(g.Stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.PersistentFlags().StringVarP(&g.Output, "output", "o", "table", "output format: table, json or yaml (one schema per object, docs/cli.md)")
	root.PersistentFlags().BoolVarP(&g.Verbose, "verbose", "v", false, "log every step (debug level) to stderr")
	root.PersistentFlags().StringVar(&g.Lock, "lock-file", "", "lock file serialising changes (default /run/tidecache/engine.lock)")
	_ = root.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"table", "json", "yaml"}, cobra.ShellCompDirectiveNoFileComp))
	return root
}

// NewTidectl returns the tidectl command tree writing to the given streams.
func NewTidectl(stdout, stderr io.Writer) *cobra.Command {
	return newTidectl(&Globals{Stdout: stdout, Stderr: stderr})
}

func newTidectl(g *Globals) *cobra.Command {
	root := NewRoot(g, "tidectl", "Manage tidecache pools and SSD-cached volumes", `tidectl manages tidecache: SSDs in front of an HDD RAID10 as a write-back
cache built from the kernel's device-mapper targets (dm-writecache for
writes, dm-cache for reads).

A pool is one HDD array (the origin) plus one or more SSDs. Volumes are
carved from a pool; each appears as /dev/mapper/tc-<name> and can be
switched live between writeback, writethrough and passthrough.

Without --etcd-endpoints, tidectl works on this node's devices: run it as
root, it talks to device-mapper and writes superblocks. With
--etcd-endpoints, the volume commands work on the cluster instead: they
write volume specs to etcd, the tidecached daemon of the owning node
applies them, and --wait follows its progress. 'tidectl node' and
'tidectl policy' work on the cluster only; 'tidectl pool' and the volume
commands that act on one node's devices (flush, check, repair, tune)
work locally only, and say so when given --etcd-endpoints.

Without --etcd-endpoints, the cluster may also come from the environment
(TIDECACHE_ETCD_ENDPOINTS, TIDECACHE_ETCD_CERT, _KEY, _CA, _PREFIX, _USER,
_PASSWORD_FILE, _AUTH_DIR) or the config file (TIDECACHE_CONFIG, default
/etc/tidecache/tidectl.yaml: keys etcdEndpoints, etcdCert, etcdKey,
etcdCA, etcdPrefix, etcdUser, etcdPasswordFile, etcdAuthDir); a flag wins
over the environment, the environment over the file (docs/cli.md).

The embedded etcd (tidecached --embedded-etcd) has etcd's authentication
on: on its node, tidectl run as root uses root's password and may change
everything; run as another user it uses the read-only viewer's, so
'volume list' works and 'volume delete' is refused. --etcd-user and
--etcd-password-file choose another credential (docs/security.md).

Exit status: 0 success, 1 error, 2 usage error (bad flag or argument,
nothing was touched), 3 'volume check' found drift.

Shell completion (volume, pool, node and policy names, modes):
  source <(tidectl completion bash)`)
	addClusterFlags(root, g)
	pre := root.PersistentPreRunE
	root.PersistentPreRunE = func(cmd *cobra.Command, args []string) error {
		if err := pre(cmd, args); err != nil {
			return err
		}
		return g.resolveCluster(cmd.Flags())
	}
	root.PersistentFlags().BoolVarP(&g.Yes, "yes", "y", false, "answer yes to the question a destructive command asks on a terminal (volume delete, pool delete, pool force-start)")
	root.AddCommand(newPoolCmd(g), newVolumeCmd(g), newNodeCmd(g), newPolicyCmd(g))
	MarkUsageErrors(root)
	return root
}

// Execute runs a command tree and turns its error into an exit status
// (see ExitCode).
func Execute(ctx context.Context, cmd *cobra.Command, stderr io.Writer) int {
	err := cmd.ExecuteContext(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "error: %v\n", err)
	}
	return ExitCode(err)
}

// Main is the body of a binary's main: it runs the tree with os streams.
func Main(ctx context.Context, build func(stdout, stderr io.Writer) *cobra.Command) int {
	return Execute(ctx, build(os.Stdout, os.Stderr), os.Stderr)
}
