// SPDX-License-Identifier: Apache-2.0

// Package daemoncli holds tidecached's command tree: boot assembly
// (assemble), the node daemon (run) and the embeddable etcd (etcd). It is
// a package of its own so that tidectl, which shares pkg/cli's flags,
// output and exit codes, does not link the etcd server the daemon embeds.
package daemoncli

import (
	"io"

	"github.com/spf13/cobra"

	"github.com/tidecache/tidecache/pkg/cli"
)

// NewTidecached returns the tidecached command tree writing to the given
// streams.
func NewTidecached(stdout, stderr io.Writer) *cobra.Command {
	g := &cli.Globals{Stdout: stdout, Stderr: stderr}
	root := cli.NewRoot(g, "tidecached", "tidecache node daemon: boot assembly, cluster reconcile, metrics", `tidecached runs on every tidecache node.

  assemble  rebuild every volume from the SSD superblocks (boot, before
            local filesystems are mounted; no network, no etcd)
  run       the node daemon: reconcile the cluster's volume specs from
            etcd into device-mapper, apply policies, serve metrics
  etcd      run only the etcd member that 'run --embedded-etcd' embeds
            (alone, or one of a multi-member cluster)

Exit status: 0 success, 1 error, 2 usage error, 3 assemble refused or
failed a pool or volume (the report says which and why).`)
	root.AddCommand(newAssembleCmd(g), newRunCmd(g), newEtcdCmd(g))
	cli.MarkUsageErrors(root)
	return root
}
