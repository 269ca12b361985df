package cli

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tidecache/tidecache/pkg/pool"
	"github.com/tidecache/tidecache/pkg/store"
)

// clusterFlags select cluster mode: with endpoints set, volume commands
// edit specs in etcd (the daemons apply them) instead of driving this
// node's engine directly.
type clusterFlags struct {
	endpoints             string
	cert, key, ca, prefix string
	wait                  bool
	timeout               time.Duration
}

func (g *globals) cluster() bool { return g.cl.endpoints != "" }

// store opens the cluster store. The caller closes it.
func (g *globals) store(ctx context.Context) (*store.Store, error) {
	cfg := store.DefaultConfig()
	cfg.Endpoints = strings.Split(g.cl.endpoints, ",")
	cfg.CertFile, cfg.KeyFile, cfg.CAFile = g.cl.cert, g.cl.key, g.cl.ca
	if g.cl.prefix != "" {
		cfg.Prefix = g.cl.prefix
	}
	st, err := store.Open(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := st.Healthy(ctx); err != nil {
		st.Close()
		return nil, fmt.Errorf("etcd at %s: %w", g.cl.endpoints, err)
	}
	return st, nil
}

func addClusterFlags(cmd *cobra.Command, g *globals) {
	f := cmd.PersistentFlags()
	f.StringVar(&g.cl.endpoints, "etcd-endpoints", "", "work on the cluster through etcd (e.g. http://127.0.0.1:2379, the local daemon's embedded etcd) instead of this node's devices")
	f.StringVar(&g.cl.cert, "etcd-cert", "", "client certificate for etcd mutual TLS")
	f.StringVar(&g.cl.key, "etcd-key", "", "client key for etcd mutual TLS")
	f.StringVar(&g.cl.ca, "etcd-ca", "", "CA of the etcd server certificate")
	f.StringVar(&g.cl.prefix, "etcd-prefix", "", "key prefix of tidecache's records (default /tidecache/v1/)")
	f.BoolVar(&g.cl.wait, "wait", false, "cluster mode: wait until the owning node reports the change applied")
	f.DurationVar(&g.cl.timeout, "timeout", 5*time.Minute, "cluster mode: how long --wait waits")
}

// clusterCreate writes a new volume spec.
func clusterCreate(cmd *cobra.Command, g *globals, spec store.VolumeSpec) error {
	ctx := cmd.Context()
	st, err := g.store(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	meta, err := st.CreateVolumeSpec(ctx, spec)
	if err != nil {
		return err
	}
	fmt.Fprintf(g.stderr, "volume %s: spec written (revision %d)\n", spec.Name, meta.ModRevision)
	return waitApplied(ctx, g, st, spec.Name, meta.ModRevision, spec.Mode)
}

// clusterSetMode changes the mode in a volume's spec.
func clusterSetMode(cmd *cobra.Command, g *globals, name string, mode pool.Mode) error {
	ctx := cmd.Context()
	st, err := g.store(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	spec, meta, err := st.GetVolumeSpec(ctx, name)
	if err != nil {
		return err
	}
	spec.Mode = string(mode)
	meta, err = st.UpdateVolumeSpec(ctx, spec, meta.ModRevision)
	if err != nil {
		return err
	}
	fmt.Fprintf(g.stderr, "volume %s: mode %s written (revision %d)\n", name, mode, meta.ModRevision)
	return waitApplied(ctx, g, st, name, meta.ModRevision, spec.Mode)
}

// clusterDelete removes a volume's spec; its node deletes the volume once
// the write cache is clean.
func clusterDelete(cmd *cobra.Command, g *globals, name string) error {
	ctx := cmd.Context()
	st, err := g.store(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	_, meta, err := st.GetVolumeSpec(ctx, name)
	if err != nil {
		return err
	}
	if err := st.DeleteVolumeSpec(ctx, name, meta.ModRevision); err != nil {
		return err
	}
	fmt.Fprintf(g.stdout, "volume %s: spec deleted; its node removes the volume once its cache is clean\n", name)
	return nil
}

// waitApplied polls the volume's status until its node reports the spec
// revision applied (in the wanted mode), printing progress.
func waitApplied(ctx context.Context, g *globals, st *store.Store, name string, rev int64, mode string) error {
	if !g.cl.wait {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, g.cl.timeout)
	defer cancel()
	last := ""
	for {
		s, _, err := st.GetVolumeStatus(ctx, name)
		switch {
		case errors.Is(err, store.ErrNotFound):
			if last != "pending" {
				fmt.Fprintf(g.stderr, "volume %s: waiting for a node to pick it up\n", name)
				last = "pending"
			}
		case err != nil:
			return err
		default:
			line := fmt.Sprintf("volume %s on %s: %s, %s, revision %d/%d, %d dirty blocks", name, s.Node, s.Mode, s.State, s.ObservedRevision, rev, s.DirtyBlocks)
			if s.Error != "" {
				line += ", error: " + s.Error
			}
			if line != last {
				fmt.Fprintln(g.stderr, line)
				last = line
			}
			if s.ObservedRevision >= rev && s.State == "active" && (mode == "" || s.Mode == mode) {
				fmt.Fprintf(g.stdout, "volume %s applied on %s: %s\n", name, s.Node, s.Mode)
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("volume %s: not applied after %s (last: %s): %w", name, g.cl.timeout, last, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// clusterVolume is the spec and status of one volume, side by side.
type clusterVolume struct {
	Spec   store.VolumeSpec    `json:"spec"`
	Status *store.VolumeStatus `json:"status,omitempty"`
}

func clusterVolumes(ctx context.Context, g *globals) ([]clusterVolume, error) {
	st, err := g.store(ctx)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	specs, _, invalid, err := st.ListVolumeSpecs(ctx)
	if err != nil {
		return nil, err
	}
	for _, bad := range invalid {
		fmt.Fprintf(g.stderr, "warning: skipping invalid record %s: %v\n", bad.Key, bad.Err)
	}
	stats, _, _, err := st.ListVolumeStatuses(ctx)
	if err != nil {
		return nil, err
	}
	byName := map[string]store.VolumeStatus{}
	for _, s := range stats {
		byName[s.Value.Name] = s.Value
	}
	out := []clusterVolume{}
	for _, s := range specs {
		cv := clusterVolume{Spec: s.Value}
		if st, ok := byName[s.Value.Name]; ok {
			cv.Status = &st
		}
		out = append(out, cv)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Spec.Name < out[j].Spec.Name })
	return out, nil
}

func printClusterVolumes(g *globals, vols []clusterVolume) error {
	if g.output == "json" {
		return printJSON(g.stdout, vols)
	}
	t := newTable(g.stdout, "NAME", "NODE", "SIZE", "MODE (SPEC)", "MODE (NOW)", "STATE", "DIRTY", "HIT (W/R)", "ERROR")
	for _, v := range vols {
		now, state, dirty, hits, errs := "-", "pending", "-", "-", ""
		if s := v.Status; s != nil {
			now, state, dirty = s.Mode, s.State, size(s.DirtyBytes)
			hits = fmt.Sprintf("%s/%s", percent(s.WriteHitRatio), percent(s.ReadHitRatio))
			errs = s.Error
		}
		node := v.Spec.Node
		if node == "" {
			node = "(unplaced)"
		}
		t.row(v.Spec.Name, node, size(v.Spec.SizeBytes), v.Spec.Mode, now, state, dirty, hits, errs)
	}
	return t.flush()
}

func newNodeCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "node", Short: "Cluster nodes: list, drain for maintenance (needs --etcd-endpoints)"}
	list := &cobra.Command{
		Use:   "list",
		Short: "List live nodes with their pools, free space and SSD health",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if !g.cluster() {
				return errors.New("node list needs --etcd-endpoints")
			}
			st, err := g.store(cmd.Context())
			if err != nil {
				return err
			}
			defer st.Close()
			nodes, _, _, err := st.ListNodes(cmd.Context())
			if err != nil {
				return err
			}
			leader, _ := st.Leader(cmd.Context())
			if g.output == "json" {
				out := []store.Node{}
				for _, n := range nodes {
					out = append(out, n.Value)
				}
				return printJSON(g.stdout, map[string]any{"leader": leader, "nodes": out})
			}
			t := newTable(g.stdout, "NODE", "LEADER", "VERSION", "POOLS", "ORIGIN FREE", "SSD FREE", "SSD WEAR", "UPDATED")
			for _, it := range nodes {
				n := it.Value
				var pools []string
				var ofree, sfree uint64
				for _, p := range n.Pools {
					pools = append(pools, p.Name)
					ofree += p.OriginFreeBytes
					sfree += p.SSDFreeBytes
				}
				wear := "-"
				for _, s := range n.SSDs {
					if s.WearPercent != nil {
						wear = fmt.Sprintf("%d%%", *s.WearPercent)
					}
				}
				isLeader := ""
				if n.Name == leader {
					isLeader = "*"
				}
				t.row(n.Name, isLeader, n.Version, strings.Join(pools, ","), size(ofree), size(sfree), wear, n.UpdatedAt.Format(time.RFC3339))
			}
			return t.flush()
		},
	}
	drain := func(use, short string, on bool) *cobra.Command {
		return &cobra.Command{
			Use:   use + " NODE",
			Short: short,
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				if !g.cluster() {
					return fmt.Errorf("node %s needs --etcd-endpoints", use)
				}
				st, err := g.store(cmd.Context())
				if err != nil {
					return err
				}
				defer st.Close()
				_, meta, err := st.GetNodeSpec(cmd.Context(), args[0])
				if err != nil && !errors.Is(err, store.ErrNotFound) {
					return err
				}
				if _, err := st.PutNodeSpec(cmd.Context(), store.NodeSpec{Name: args[0], Drain: on}, meta.ModRevision); err != nil {
					return err
				}
				fmt.Fprintf(g.stdout, "node %s: drain=%v written; its volumes follow (watch with `tidectl volume list`)\n", args[0], on)
				return nil
			},
		}
	}
	cmd.AddCommand(list,
		drain("drain", "Put every volume of a node in passthrough with clean caches (maintenance)", true),
		drain("undrain", "Return a drained node's volumes to their spec modes", false))
	return cmd
}

// showClusterVolume prints one volume's spec next to its observed status.
func showClusterVolume(ctx context.Context, g *globals, name string) error {
	vols, err := clusterVolumes(ctx, g)
	if err != nil {
		return err
	}
	for _, v := range vols {
		if v.Spec.Name != name {
			continue
		}
		if g.output == "json" {
			return printJSON(g.stdout, v)
		}
		w := g.stdout
		fmt.Fprintf(w, "Volume:        %s\n", name)
		readBlock := ""
		if v.Spec.ReadBlockSize != 0 {
			readBlock = ", read block size " + size(uint64(v.Spec.ReadBlockSize))
		}
		fmt.Fprintf(w, "Spec:          node %q, pool %q, %s, mode %s, write cache %s, read cache %s%s\n",
			v.Spec.Node, v.Spec.Pool, size(v.Spec.SizeBytes), v.Spec.Mode, size(v.Spec.WriteCacheBytes), size(v.Spec.ReadCacheBytes), readBlock)
		s := v.Status
		if s == nil {
			fmt.Fprintln(w, "Status:        none yet (no node has applied it)")
			return nil
		}
		fmt.Fprintf(w, "Status:        on %s, mode %s, state %s, spec revision %d applied, updated %s\n",
			s.Node, s.Mode, s.State, s.ObservedRevision, s.UpdatedAt.Format(time.RFC3339))
		fmt.Fprintf(w, "Dirty:         %d blocks (%s)\n", s.DirtyBlocks, size(s.DirtyBytes))
		fmt.Fprintf(w, "Hit ratios:    reads %s, writes %s\n", percent(s.ReadHitRatio), percent(s.WriteHitRatio))
		if s.Error != "" {
			fmt.Fprintf(w, "Last error:    %s\n", s.Error)
		}
		for _, a := range s.Alerts {
			fmt.Fprintf(w, "Alert:         %s\n", a)
		}
		return nil
	}
	return fmt.Errorf("volume %s: %w", name, store.ErrNotFound)
}
