// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/etcdauth"
	"github.com/tidecache/tidecache/pkg/pool"
	"github.com/tidecache/tidecache/pkg/store"
)

// clusterFlags select cluster mode: with endpoints set, volume commands
// edit specs in etcd (the daemons apply them) instead of driving this
// node's engine directly.
type clusterFlags struct {
	endpoints             string
	cert, key, ca, prefix string
	// user and passwordFile name a credential of etcd's authentication;
	// authDir is where the local member keeps its own (etcdauth).
	user, passwordFile, authDir string
	wait                        bool
	timeout                     time.Duration
	// replicaNode is volume create's --replica-node.
	replicaNode string
	// source says where endpoints came from: --etcd-endpoints, an
	// environment variable or the config file (clusterconfig.go).
	source string
}

func (g *Globals) cluster() bool { return g.cl.endpoints != "" }

// clusterDialTimeout bounds tidectl's first connection to etcd, which
// with a user includes authenticating: a bcrypt check and a raft round
// in etcd. On a busy node that took longer than the daemon's 5 s (two CI
// runs under load failed with "cannot authenticate as root: etcd
// unavailable" while etcd was up and serving the daemon), and a command
// that fails against a slow but healthy etcd is worse than one that
// takes longer to say an absent etcd is absent. A connection lost later
// (a --wait watching etcd die) is still noticed within the store's
// keep-alive, not this.
const clusterDialTimeout = 15 * time.Second

// store opens the cluster store. The caller closes it.
func (g *Globals) store(ctx context.Context) (*store.Store, error) {
	cfg := store.DefaultConfig()
	cfg.DialTimeout = clusterDialTimeout
	cfg.Endpoints = strings.Split(g.cl.endpoints, ",")
	cfg.CertFile, cfg.KeyFile, cfg.CAFile = g.cl.cert, g.cl.key, g.cl.ca
	if g.cl.prefix != "" {
		cfg.Prefix = g.cl.prefix
	}
	cred, err := etcdauth.Choose(etcdauth.Request{User: g.cl.user, PasswordFile: g.cl.passwordFile, Dir: g.cl.authDir,
		Endpoints: cfg.Endpoints, ClientCert: cfg.CertFile != ""})
	if err != nil {
		return nil, usageError{err}
	}
	cfg.Username, cfg.Password = cred.User, cred.Password
	st, err := store.Open(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := st.Healthy(ctx); err != nil {
		st.Close()
		if errors.Is(err, store.ErrPermissionDenied) {
			return nil, fmt.Errorf("etcd at %s: %w", g.describeEndpoints(), err)
		}
		return nil, fmt.Errorf("etcd at %s: %w (is the daemon's etcd up and reachable from here? `tidectl` without cluster settings works on this node's devices)", g.describeEndpoints(), err)
	}
	return st, nil
}

// needCluster refuses a cluster-only command run without --etcd-endpoints.
func (g *Globals) needCluster(what string) error {
	if g.cluster() {
		return nil
	}
	return usageErrorf("%s works on the cluster: give --etcd-endpoints (e.g. http://127.0.0.1:2389 for the local daemon's embedded etcd)", what)
}

func addClusterFlags(cmd *cobra.Command, g *Globals) {
	f := cmd.PersistentFlags()
	f.StringVar(&g.cl.endpoints, "etcd-endpoints", "", "work on the cluster through etcd (e.g. http://127.0.0.1:2389, the local daemon's embedded etcd) instead of this node's devices")
	f.StringVar(&g.cl.cert, "etcd-cert", "", "client certificate for etcd mutual TLS")
	f.StringVar(&g.cl.key, "etcd-key", "", "client key for etcd mutual TLS")
	f.StringVar(&g.cl.ca, "etcd-ca", "", "CA of the etcd server certificate")
	f.StringVar(&g.cl.prefix, "etcd-prefix", "", "key prefix of tidecache's records (default /tidecache/v1/)")
	f.StringVar(&g.cl.user, "etcd-user", "", "user of etcd's password authentication (default on loopback endpoints: root if its password in --etcd-auth-dir is readable, else the read-only viewer)")
	f.StringVar(&g.cl.passwordFile, "etcd-password-file", "", "file holding --etcd-user's password (default for root and viewer: theirs in --etcd-auth-dir)")
	f.StringVar(&g.cl.authDir, "etcd-auth-dir", etcdauth.DefaultDir, "where this node's etcd member (tidecached --embedded-etcd) keeps its root and viewer passwords")
	f.BoolVar(&g.cl.wait, "wait", false, "cluster mode: wait until the owning node reports the change applied, showing drain progress")
	f.DurationVar(&g.cl.timeout, "timeout", 5*time.Minute, "cluster mode: how long --wait waits without progress (a drain that keeps writing back is followed to its end; 0: no limit)")
}

// clusterBackend works on volume specs in etcd; each node's daemon applies
// the specs that name it and writes back a status.
type clusterBackend struct {
	g  *Globals
	st *store.Store
}

func (b *clusterBackend) Close() error { return b.st.Close() }

func (b *clusterBackend) CreateVolume(ctx context.Context, req pool.VolumeRequest, poolName, node string) (Volume, error) {
	if err := b.checkPlacement(ctx, node, poolName); err != nil {
		return Volume{}, err
	}
	spec := api.VolumeSpec{
		Name: req.Name, Node: node, Pool: poolName, SizeBytes: req.Size,
		WriteCacheBytes: req.WriteCache, ReadCacheBytes: req.ReadCache,
		Mode: string(req.Mode), BlockSize: req.BlockSize, ReadBlockSize: req.ReadBlockSize,
		AllowFUAWindow: req.FUAWindow, Protect: string(req.Protect), ReplicaNode: b.g.cl.replicaNode,
	}
	meta, err := b.st.CreateVolumeSpec(ctx, spec)
	if err != nil {
		return Volume{}, err
	}
	fmt.Fprintf(b.g.Stderr, "volume %s: spec written (revision %d)\n", spec.Name, meta.ModRevision)
	if err := b.waitApplied(ctx, spec.Name, meta.ModRevision, spec.Mode); err != nil {
		return Volume{}, err
	}
	return b.Volume(ctx, spec.Name)
}

// checkPlacement refuses a --node that is not a live node and a --pool no
// live node (or not the named one) has, before anything is written: the
// spec would otherwise wait for ever.
func (b *clusterBackend) checkPlacement(ctx context.Context, node, poolName string) error {
	if node == "" && poolName == "" {
		return nil
	}
	nodes, _, _, err := b.st.ListNodes(ctx)
	if err != nil {
		return err
	}
	// names are the live nodes, pools those of --node (every live
	// node's without it).
	var names, pools []string
	nodeFound := node == ""
	for _, it := range nodes {
		n := it.Value
		names = append(names, n.Name)
		if node != "" && n.Name != node {
			continue
		}
		nodeFound = true
		for _, p := range n.Pools {
			pools = append(pools, p.Name)
		}
	}
	sort.Strings(names)
	live := strings.Join(names, ", ")
	if live == "" {
		live = "none"
	}
	poolFound := poolName == "" || slices.Contains(pools, poolName)
	switch {
	case !nodeFound:
		return didYouMean(usageErrorf("--node %s: no such live node (live nodes: %s)", node, live), node, names)
	case !poolFound && node != "":
		return didYouMean(usageErrorf("--pool %s: node %s has no pool of that name (see `tidectl node list`)", poolName, node), poolName, pools)
	case !poolFound:
		return didYouMean(usageErrorf("--pool %s: no live node has a pool of that name (see `tidectl node list`)", poolName), poolName, pools)
	}
	return nil
}

// volumeNotFound says that the cluster has no volume name, suggesting
// the closest names it has.
func (b *clusterBackend) volumeNotFound(ctx context.Context, name string) error {
	return suggestListed(volumeNotFound(name), name, func() ([]string, error) { return clusterVolumeNames(ctx, b.st) })
}

func (b *clusterBackend) Volumes(ctx context.Context) ([]Volume, error) {
	specs, _, invalid, err := b.st.ListVolumeSpecs(ctx)
	if err != nil {
		return nil, err
	}
	for _, bad := range invalid {
		fmt.Fprintf(b.g.Stderr, "warning: skipping invalid record %s: %v\n", bad.Key, bad.Err)
	}
	stats, _, _, err := b.st.ListVolumeStatuses(ctx)
	if err != nil {
		return nil, err
	}
	byName := map[string]api.VolumeStatus{}
	for _, s := range stats {
		byName[s.Value.Name] = s.Value
	}
	out := make([]Volume, 0, len(specs))
	for _, s := range specs {
		var status *api.VolumeStatus
		if st, ok := byName[s.Value.Name]; ok {
			status = &st
		}
		out = append(out, clusterVolume(s.Value, s.Meta.ModRevision, status))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (b *clusterBackend) Volume(ctx context.Context, name string) (Volume, error) {
	spec, meta, err := b.st.GetVolumeSpec(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return Volume{}, b.volumeNotFound(ctx, name)
	}
	if err != nil {
		return Volume{}, err
	}
	var status *api.VolumeStatus
	switch st, _, err := b.st.GetVolumeStatus(ctx, name); {
	case err == nil:
		status = &st
	case !errors.Is(err, store.ErrNotFound):
		return Volume{}, err
	}
	return clusterVolume(spec, meta.ModRevision, status), nil
}

func (b *clusterBackend) DeleteVolume(ctx context.Context, name string, force bool) error {
	if force {
		return usageErrorf("--force is not available in cluster mode: the owning node deletes the volume only once its cache is clean")
	}
	_, meta, err := b.st.GetVolumeSpec(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return b.volumeNotFound(ctx, name)
	}
	if err != nil {
		return err
	}
	if err := b.st.DeleteVolumeSpec(ctx, name, meta.ModRevision); err != nil {
		return err
	}
	fmt.Fprintf(b.g.Stderr, "volume %s: spec deleted; its node removes the volume once its cache is clean\n", name)
	return nil
}

func (b *clusterBackend) SetMode(ctx context.Context, name string, mode pool.Mode) (Volume, error) {
	spec, meta, err := b.st.GetVolumeSpec(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return Volume{}, b.volumeNotFound(ctx, name)
	}
	if err != nil {
		return Volume{}, err
	}
	spec.Mode = string(mode)
	meta, err = b.st.UpdateVolumeSpec(ctx, spec, meta.ModRevision)
	if err != nil {
		return Volume{}, err
	}
	fmt.Fprintf(b.g.Stderr, "volume %s: mode %s written (revision %d)\n", name, mode, meta.ModRevision)
	if err := b.waitApplied(ctx, name, meta.ModRevision, spec.Mode); err != nil {
		return Volume{}, err
	}
	return b.Volume(ctx, name)
}

// Resize writes the larger size into the volume's spec; its node grows
// the volume live. --wait follows it until the node reports the size.
func (b *clusterBackend) Resize(ctx context.Context, name string, size uint64) (Volume, error) {
	spec, meta, err := b.st.GetVolumeSpec(ctx, name)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return Volume{}, b.volumeNotFound(ctx, name)
	case err != nil:
		return Volume{}, err
	case spec.SharedOrigin != nil:
		return Volume{}, fmt.Errorf("volume %s caches the device %s of node %s whole: grow that device instead", name, spec.SharedOrigin.Export, spec.SharedOrigin.Node)
	case size < spec.SizeBytes:
		return Volume{}, fmt.Errorf("volume %s is %s: shrinking it to %s would cut off the end of its filesystem; tidecache only grows volumes",
			name, pool.FormatBytes(spec.SizeBytes), pool.FormatBytes(size))
	case size > spec.SizeBytes:
		spec.SizeBytes = size
		if meta, err = b.st.UpdateVolumeSpec(ctx, spec, meta.ModRevision); err != nil {
			return Volume{}, err
		}
		fmt.Fprintf(b.g.Stderr, "volume %s: size %s written (revision %d)\n", name, pool.FormatBytes(size), meta.ModRevision)
	}
	if err := b.waitSize(ctx, name, meta.ModRevision, size); err != nil {
		return Volume{}, err
	}
	return b.Volume(ctx, name)
}

// waitSize is waitApplied for a growth: done once the node reports the
// volume at size bytes or more.
func (b *clusterBackend) waitSize(ctx context.Context, name string, rev int64, size uint64) error {
	return b.waitFor(ctx, name, rev, func(s api.VolumeStatus) bool { return s.SizeBytes >= size })
}

// waitApplied follows the volume's status until its node reports the spec
// revision applied (in the wanted mode), printing progress with the share
// written back and an ETA while a drain runs. --timeout bounds the time
// without progress, so a long drain that keeps moving is followed to its
// end.
func (b *clusterBackend) waitApplied(ctx context.Context, name string, rev int64, mode string) error {
	return b.waitFor(ctx, name, rev, func(s api.VolumeStatus) bool { return mode == "" || s.Mode == mode })
}

// waitFor is waitApplied with its own test of the status: applied once
// the node reports revision rev or later, active, and applied(status).
func (b *clusterBackend) waitFor(ctx context.Context, name string, rev int64, applied func(api.VolumeStatus) bool) error {
	if !b.g.cl.wait {
		return nil
	}
	var (
		last     string
		progress drainTracker
		stall    = newStallClock()
	)
	for {
		s, _, err := b.st.GetVolumeStatus(ctx, name)
		var line, key string
		switch {
		case errors.Is(err, store.ErrNotFound):
			line = fmt.Sprintf("volume %s: waiting for a node to pick it up", name)
			key = line
		case err != nil:
			return err
		default:
			if s.ObservedRevision >= rev && s.State == api.StateActive && applied(s) {
				fmt.Fprintf(b.g.Stdout, "volume %s applied on %s: %s\n", name, s.Node, s.Mode)
				return nil
			}
			line = fmt.Sprintf("volume %s on %s: %s, %s, revision %d/%d", name, s.Node, s.Mode, s.State, s.ObservedRevision, rev)
			key = fmt.Sprintf("%s|%d|%s", line, s.DirtyBlocks, s.Error)
			if s.DirtyBlocks > 0 || progress.started() {
				progress.observe(time.Now(), s.DirtyBlocks)
				line += ", " + progress.String()
			}
			if s.Error != "" {
				line += ", error: " + s.Error
			}
		}
		// A dirty count that fell or a new state is progress; a new rate
		// or ETA alone is not (it is not in key).
		stall.observe(key)
		if line != last {
			fmt.Fprintln(b.g.Stderr, line)
			last = line
		}
		if stall.stalled(b.g.cl.timeout) {
			return fmt.Errorf("volume %s: no progress for %s (last: %s); the change stays in etcd and its node goes on applying it: "+
				"follow it with `tidectl volume show %s --etcd-endpoints …`, or wait again with a longer --timeout", name, b.g.cl.timeout, last, name)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("volume %s: stopped waiting (%w); the change stays in etcd and its node goes on applying it", name, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// stallClock measures how long a --wait has gone without progress: a
// status not seen before is progress; one seen before is not, so a node
// retrying a change that fails the same way (creating, then the error,
// again) does not hold the wait for ever.
type stallClock struct {
	seen  map[string]bool
	since time.Time // when the last new status came
}

func newStallClock() *stallClock {
	return &stallClock{seen: map[string]bool{}, since: time.Now()}
}

// observe notes a status, as a key that holds what counts as progress.
func (c *stallClock) observe(status string) {
	if !c.seen[status] {
		c.seen[status], c.since = true, time.Now()
	}
}

// stalled says whether no new status came for longer than timeout (0:
// never).
func (c *stallClock) stalled(timeout time.Duration) bool {
	return timeout > 0 && time.Since(c.since) > timeout
}

// drainTracker turns a series of dirty-block counts into the share
// written back, a rate and an ETA.
type drainTracker struct {
	start, now uint64
	t0, tNow   time.Time
	seen       bool
}

func (d *drainTracker) started() bool { return d.seen }

// observe records a dirty-block count seen at t. A count above the first
// one (writes still arriving) starts the measurement again.
func (d *drainTracker) observe(t time.Time, dirty uint64) {
	if !d.seen || dirty > d.start {
		d.start, d.now, d.t0, d.tNow, d.seen = dirty, dirty, t, t, true
		return
	}
	d.now, d.tNow = dirty, t
}

func (d *drainTracker) String() string {
	if d.start == 0 {
		return "0 dirty blocks"
	}
	done := d.start - min(d.now, d.start)
	s := fmt.Sprintf("%d dirty blocks left, %.0f%% written back", d.now, 100*float64(done)/float64(d.start))
	elapsed := d.tNow.Sub(d.t0)
	if done == 0 || elapsed <= 0 {
		return s + ", ETA unknown"
	}
	rate := float64(done) / elapsed.Seconds()
	eta := time.Duration(float64(d.now) / rate * float64(time.Second))
	return s + fmt.Sprintf(", %.0f blocks/s, ETA %s", rate, eta.Round(time.Second))
}

// printServed prints what each node serves the others: a line per
// replica slice it keeps of another node's write cache, and per device it
// exports to them, with the nodes it reaches and the volume that caches
// it.
func printServed(w io.Writer, nodes []store.Item[api.Node], specs []store.Item[api.VolumeSpec]) {
	cachedBy := map[api.SharedOrigin]string{}
	for _, it := range specs {
		if o := it.Value.SharedOrigin; o != nil {
			cachedBy[*o] = it.Value.Name
		}
	}
	for _, it := range nodes {
		n := it.Value
		for _, r := range n.Replicas {
			state := "exported"
			if !r.Exported {
				state = "not exported: " + cmp.Or(r.Error, "pending")
			}
			fmt.Fprintf(w, "replica: %s keeps the write-cache replica of volume %s of node %s (%s, pool %s), %s\n",
				n.Name, r.Volume, r.Owner, size(r.SizeBytes), r.Pool, state)
		}
		for _, e := range n.Exports {
			state := "to " + cmp.Or(strings.Join(e.Hosts, ", "), "no node yet")
			if e.Error != "" {
				state = "not exported: " + e.Error
			}
			volume := "no volume caches it"
			if v, ok := cachedBy[api.SharedOrigin{Node: n.Name, Export: e.Name}]; ok {
				volume = "cached by volume " + v
			}
			fmt.Fprintf(w, "export: %s exports %s (%s) %s; %s\n", n.Name, e.Name, size(e.SizeBytes), state, volume)
		}
	}
}

func newNodeCmd(g *Globals) *cobra.Command {
	cmd := &cobra.Command{Use: "node", Short: "Cluster nodes: list, drain for maintenance (needs --etcd-endpoints)"}
	list := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List live nodes with their pools, free space and SSD health",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := g.needCluster("node list"); err != nil {
				return err
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
			fenceItems, _, _, err := st.ListFences(cmd.Context())
			if err != nil {
				return err
			}
			fences := []api.Fence{}
			for _, f := range fenceItems {
				fences = append(fences, f.Value)
			}
			if g.JSON() {
				out := []api.Node{}
				for _, n := range nodes {
					out = append(out, n.Value)
				}
				v, err := snakeCase(map[string]any{"leader": leader, "nodes": out, "fences": fences})
				if err != nil {
					return err
				}
				return g.Print(v)
			}
			t := newTable(g.Stdout, "NODE", "LEADER", "VERSION", "POOLS", "ORIGIN FREE", "SSD FREE", "SSD WEAR", "UPDATED")
			var clusterOrigin, clusterSSD uint64
			for _, it := range nodes {
				n := it.Value
				var pools []string
				var ofree, sfree uint64
				for _, p := range n.Pools {
					pools = append(pools, p.Name)
					ofree += p.OriginFreeBytes
					sfree += p.SSDFreeBytes
				}
				clusterOrigin, clusterSSD = clusterOrigin+ofree, clusterSSD+sfree
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
			if err := t.flush(); err != nil {
				return err
			}
			fmt.Fprintf(g.Stdout, "cluster: %d nodes, %s free on their HDD arrays, %s free on their SSDs\n", len(nodes), size(clusterOrigin), size(clusterSSD))
			specs, _, _, err := st.ListVolumeSpecs(cmd.Context())
			if err != nil {
				return err
			}
			printServed(g.Stdout, nodes, specs)
			// Fenced nodes, live or not: cut off from shared origins and
			// replicas until they come back and release what failed over.
			for _, f := range fences {
				fmt.Fprintf(g.Stdout, "fenced: %s since %s (%s); lifted once it is back and has released %s\n",
					f.Node, f.CreatedAt.Format(time.RFC3339), f.Reason, strings.Join(f.Volumes, ", "))
			}
			for _, it := range nodes {
				if it.Value.NVMeUnauthenticated {
					fmt.Fprintf(g.Stdout, "nvme: %s serves NVMe/TCP on %s admitting hosts by their declared NQN and source address alone (--insecure-nvme, or a kernel without in-band authentication; docs/security.md)\n",
						it.Value.Name, it.Value.ReplicaAddress)
				}
			}
			return nil
		},
	}
	drain := func(use, short string, on bool) *cobra.Command {
		return &cobra.Command{
			Use:               use + " NODE",
			Short:             short,
			Args:              cobra.ExactArgs(1),
			ValidArgsFunction: g.completeNodeArg,
			RunE: func(cmd *cobra.Command, args []string) error {
				if err := g.needCluster("node " + use); err != nil {
					return err
				}
				if err := api.ValidateNodeName(args[0]); err != nil {
					return usageError{err}
				}
				ctx := cmd.Context()
				st, err := g.store(ctx)
				if err != nil {
					return err
				}
				defer st.Close()
				_, err = updateNodeSpec(ctx, st, args[0], func(spec *api.NodeSpec, stored bool) error {
					// A node with a spec already is known, live or not
					// (undrain of a node that is down is fine); else it
					// must be live.
					if !stored {
						if _, _, err := st.GetNode(ctx, args[0]); errors.Is(err, store.ErrNotFound) {
							return suggestListed(usageErrorf("node %s: no such node (see `tidectl node list`)", args[0]), args[0],
								func() ([]string, error) { return knownNodeNames(ctx, st) })
						} else if err != nil {
							return err
						}
					}
					spec.Drain = on
					return nil
				})
				if err != nil {
					return err
				}
				if g.JSON() {
					return g.Print(map[string]any{"node": args[0], "drain": on})
				}
				if on {
					fmt.Fprintf(g.Stdout, "node %s: drain=true written; its volumes follow and the leader moves the replicas it keeps to other nodes (watch with `tidectl volume list` and `tidectl node list`)\n", args[0])
				} else {
					fmt.Fprintf(g.Stdout, "node %s: drain=false written; its volumes follow (watch with `tidectl volume list`)\n", args[0])
				}
				return nil
			},
		}
	}
	cmd.AddCommand(list, newRotateNVMeSecretsCmd(g),
		drain("drain", "Put every volume of a node in passthrough with clean caches, and move the replicas it keeps for other nodes elsewhere (maintenance)", true),
		drain("undrain", "Return a drained node's volumes to their spec modes (moved replicas stay where they went)", false))
	return cmd
}

// updateNodeSpec reads the spec of node name (an empty one when it has
// none), lets change edit it, and writes it back only if it is still the
// one read: a change made meanwhile fails the write (store's revision
// check) instead of being lost. change is told whether a spec was stored;
// when it returns an error nothing is written. It returns the spec
// written.
func updateNodeSpec(ctx context.Context, st *store.Store, name string, change func(spec *api.NodeSpec, stored bool) error) (api.NodeSpec, error) {
	spec, meta, err := st.GetNodeSpec(ctx, name)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return api.NodeSpec{}, err
	}
	spec.Name = name
	if err := change(&spec, err == nil); err != nil {
		return api.NodeSpec{}, err
	}
	if _, err := st.PutNodeSpec(ctx, spec, meta.ModRevision); err != nil {
		return api.NodeSpec{}, err
	}
	return spec, nil
}
