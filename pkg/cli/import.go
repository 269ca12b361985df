// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/spf13/cobra"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/reconcile"
	"github.com/tidecache/tidecache/pkg/store"
)

// newVolumeImportCmd brings volumes made on this node before it joined a
// cluster (volume create or adopt without etcd) under the daemon's
// management: it writes, for each, the spec that describes it as it is.
func newVolumeImportCmd(g *Globals) *cobra.Command {
	var (
		all  bool
		node string
	)
	cmd := &cobra.Command{
		Use:   "import [NAME...] [--all]",
		Short: "Write the cluster spec of volumes made on this node, so its daemon manages them",
		Long: `A volume made on this node without the cluster (tidectl volume create or
volume adopt, before tidecached ran here) has no spec: the daemon leaves it
as it is, never deletes it, and raises TidecacheUnmanagedVolumes. import
writes, for each named volume (--all: every volume on this node that has
no spec), the spec that describes it as it is now: its node, pool, size,
caches, mode and protection. Nothing on the node changes; from then on its
daemon manages the volume (mode changes, policies, growth, deletion) like
any other.

An adopted volume's spec records that it caches a device of this node
whole: the daemon never creates it from the spec.

Runs on the node that holds the volumes, in cluster mode. A volume that
already has a spec naming this node is left as it is (a second import does
nothing); one whose spec names another node is refused.`,
		Example: `  tidectl volume import --all
  tidectl volume import mysql --node db1`,
		ValidArgsFunction: g.completeVolumes,
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case !g.cluster():
				return usageErrorf("volume import writes cluster specs: give --etcd-endpoints (or TIDECACHE_ETCD_ENDPOINTS, or %s)", DefaultConfigFile)
			case all && len(args) > 0:
				return usageErrorf("give volume names or --all, not both")
			case !all && len(args) == 0:
				return usageErrorf("name the volumes to import, or give --all")
			}
			if node == "" {
				host, err := os.Hostname()
				if err != nil {
					return fmt.Errorf("this node's name: %w (give --node)", err)
				}
				node = host
			}
			if err := api.ValidateNodeName(node); err != nil {
				return usageErrorf("--node: %v", err)
			}
			local, err := g.openLocal()
			if err != nil {
				return err
			}
			defer local.Close()
			st, err := g.store(cmd.Context())
			if err != nil {
				return err
			}
			defer st.Close()
			imported, err := importVolumes(cmd.Context(), g, local.e, st, node, args)
			if g.JSON() && err == nil {
				return g.Print(map[string]any{"node": node, "imported": imported})
			}
			return err
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "import every volume on this node that has no spec")
	cmd.Flags().StringVar(&node, "node", "", "this node's name in the cluster, as its tidecached runs with --node (default: the host name)")
	return cmd
}

// importVolumes writes the spec of each local volume named (every one
// without a spec when names is empty) and returns the names it wrote.
func importVolumes(ctx context.Context, g *Globals, e nodeEngine, st *store.Store, node string, names []string) ([]string, error) {
	live, _, _, err := st.ListNodes(ctx)
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(live, func(it store.Item[api.Node]) bool { return it.Value.Name == node })
	if i < 0 {
		return nil, fmt.Errorf("node %s is not a live node of the cluster: start its tidecached first (systemctl enable --now tidecached), or give --node as the daemon names this node", node)
	}
	vols, err := e.Volumes(ctx)
	if err != nil {
		return nil, err
	}
	var have []string
	for _, v := range vols {
		have = append(have, v.Name)
	}
	for _, n := range names {
		if !slices.Contains(have, n) {
			return nil, didYouMean(volumeNotFound(n), n, have)
		}
	}
	var imported []string
	for _, v := range vols {
		if len(names) > 0 && !slices.Contains(names, v.Name) {
			continue
		}
		have, _, err := st.GetVolumeSpec(ctx, v.Name)
		switch {
		case err == nil && have.Node == node:
			if len(names) > 0 {
				fmt.Fprintf(g.Stderr, "volume %s: already managed on %s, nothing to do\n", v.Name, node)
			}
			continue
		case err == nil:
			return imported, fmt.Errorf("volume %s: its spec names node %s, not %s: a volume of that name is managed there; rename or delete one of them", v.Name, cmp.Or(have.Node, "(unplaced)"), node)
		case !errors.Is(err, store.ErrNotFound):
			return imported, err
		}
		spec := reconcile.SpecOf(v, node)
		if err := spec.Validate(); err != nil {
			return imported, fmt.Errorf("volume %s: %w", v.Name, err)
		}
		meta, err := st.CreateVolumeSpec(ctx, spec)
		if err != nil {
			return imported, fmt.Errorf("volume %s: %w", v.Name, err)
		}
		imported = append(imported, v.Name)
		if !g.JSON() {
			fmt.Fprintf(g.Stdout, "volume %s: spec written for node %s (revision %d): its daemon manages it now\n", v.Name, node, meta.ModRevision)
		}
	}
	if len(imported) == 0 && len(names) == 0 && !g.JSON() {
		fmt.Fprintf(g.Stdout, "every volume on %s has a spec: nothing to import\n", node)
	}
	return imported, nil
}
