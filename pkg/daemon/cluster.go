// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/placement"
	"github.com/tidecache/tidecache/pkg/policy"
	"github.com/tidecache/tidecache/pkg/pool"
	"github.com/tidecache/tidecache/pkg/store"
	"github.com/tidecache/tidecache/pkg/version"
)

// inventory builds this node's record: pools with free space and SSD
// health. A failing part is logged and left out; the record still goes out.
func (d *daemon) inventory(ctx context.Context, started time.Time) api.Node {
	n := api.Node{Name: d.cfg.Node, Instance: d.cfg.Instance, Address: d.cfg.Address, ReplicaAddress: d.cfg.ReplicaAddress, FaultDomain: d.cfg.FaultDomain,
		Version: version.Version, StartedAt: started, UpdatedAt: time.Now()}
	n.Addresses = localAddresses()
	if n.ReplicaAddress != "" {
		host, port, _ := replicaAddress(n.ReplicaAddress)
		n.ReplicaAddress = net.JoinHostPort(host, strconv.Itoa(port))
		n.NVMeUnauthenticated = d.nvmeUnauthenticated()
	}
	if d.keys != nil {
		n.NVMeAuthKey = d.keys.publicKey()
	}
	pools, err := d.eng.Pools(ctx)
	if err != nil {
		d.log.Warn("inventory: pools", "err", err)
	}
	poolOf := map[string]string{}
	sizeOf := map[string]uint64{}
	for _, p := range pools {
		inv := api.PoolInventory{Name: p.Name, UUID: p.UUID, Origin: p.Origin.Path, OriginFreeBytes: p.Origin.FreeBytes,
			NoSSDs: len(p.Members) == 0 && p.Origin.Path != "", SSDs: len(p.Members)}
		for _, m := range p.Members {
			inv.SSDFreeBytes += m.FreeBytes
			inv.SSDBytes += m.SizeBytes
			poolOf[m.Path], sizeOf[m.Path] = p.Name, m.SizeBytes
		}
		n.Pools = append(n.Pools, inv)
	}
	health, err := d.ssds.SSDs(ctx)
	if err != nil {
		d.log.Warn("inventory: SSD health", "err", err)
	}
	for _, h := range health {
		n.SSDs = append(n.SSDs, api.SSDInventory{
			Path: h.Path, Model: h.Model, Serial: h.Serial, Pool: poolOf[h.Path], SizeBytes: sizeOf[h.Path],
			WearPercent: h.WearPercent, MediaErrors: h.MediaErrors, CriticalWarning: h.CriticalWarning,
		})
	}
	d.mu.Lock()
	d.lastSSDs = n.SSDs
	n.Replicas = slices.Clone(d.replicas)
	n.FenceReleased = d.fenceReleased
	d.mu.Unlock()
	n.Exports, n.FencesApplied = d.exportRecord()
	return n
}

// inventorySSDs gives the controller the SSD health of the last inventory,
// so SMART tools run once per interval, not once per reconcile.
type inventorySSDs struct{ d *daemon }

func (s inventorySSDs) SSDs(context.Context) ([]api.SSDInventory, error) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	return append([]api.SSDInventory(nil), s.d.lastSSDs...), nil
}

// membership keeps this node registered under a lease and its inventory
// fresh; when the lease is lost (etcd outage longer than the TTL) it
// registers again with backoff.
//
// A daemon that held its record and finds the name taken by another
// machine when it registers again (its lease ran out in an etcd outage
// and a clone registered meanwhile) returns ErrNodeNameInUse: serve then
// ends, rather than run the same volumes as the other daemon.
func (d *daemon) membership(ctx context.Context) error {
	started := time.Now()
	backoff := time.Second
	for ctx.Err() == nil {
		reg, err := d.st.Register(ctx, d.inventory(ctx, started), d.cfg.LeaseTTL)
		if err != nil {
			if errors.Is(err, store.ErrNodeNameInUse) && d.isRegistered() {
				return fmt.Errorf("node %s: re-registering after the lease was lost: %w", d.cfg.Node, err)
			}
			d.setRegistered(err)
			if errors.Is(err, store.ErrNodeNameInUse) {
				d.log.Error("node name in use by a daemon on another machine: this one reconciles nothing until the name is free; retrying",
					"node", d.cfg.Node, "err", err, "retry_in", backoff)
			} else {
				d.log.Warn("node registration failed, retrying", "err", err, "retry_in", backoff)
			}
			if !sleep(ctx, backoff) {
				return nil
			}
			backoff = min(2*backoff, 30*time.Second)
			continue
		}
		backoff = time.Second
		d.setRegistered(nil)
		d.log.Info("node registered", "lease_ttl", d.cfg.LeaseTTL, "instance", d.cfg.Instance)
		t := time.NewTicker(d.cfg.InventoryInterval)
	refresh:
		for {
			select {
			case <-ctx.Done():
				t.Stop()
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				reg.Close(cctx)
				cancel()
				return nil
			case <-reg.Lost():
				d.log.Warn("node lease lost; registering again")
				break refresh
			case <-t.C:
			case <-d.inventoryNow:
			}
			if err := reg.Update(ctx, d.inventory(ctx, started)); err != nil {
				d.log.Warn("inventory update failed", "err", err)
				if errors.Is(err, store.ErrLeaseLost) {
					break refresh
				}
			}
		}
		t.Stop()
	}
	return nil
}

// setRegistered records the outcome of a registration: nil opens the
// gate awaitRegistered waits at (for good: a lease lost later, in an
// etcd outage, does not stop the controller, whose volumes run on).
func (d *daemon) setRegistered(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err != nil {
		d.registerErr = err.Error()
		return
	}
	d.registerErr = ""
	if !d.isRegistered() {
		close(d.registered)
	}
}

// isRegistered reports whether the daemon has held its node record.
func (d *daemon) isRegistered() bool {
	select {
	case <-d.registered:
		return true
	default:
		return false
	}
}

// awaitRegistered waits until the daemon first holds its node record;
// false if ctx ended first.
func (d *daemon) awaitRegistered(ctx context.Context) bool {
	select {
	case <-d.registered:
		return true
	case <-ctx.Done():
		return false
	}
}

// leadership campaigns for leadership; while leader, it places volumes
// whose spec names no node. Losing the term (resign, lease lost) just
// starts a new campaign.
func (d *daemon) leadership(ctx context.Context) {
	for ctx.Err() == nil {
		l, err := d.st.Campaign(ctx, d.cfg.Node, d.cfg.LeaseTTL)
		if err != nil {
			if ctx.Err() == nil {
				d.log.Warn("campaign failed, retrying", "err", err)
				sleep(ctx, 2*time.Second)
			}
			continue
		}
		d.setLeader(true)
		d.log.Info("elected leader")
		t := time.NewTicker(d.cfg.PlacementInterval)
		// When each replica's node, and each shared-origin volume's
		// node, was first seen gone, this term.
		lost, gone := map[string]time.Time{}, map[string]time.Time{}
	term:
		for {
			select {
			case <-ctx.Done():
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				l.Resign(cctx)
				cancel()
				break term
			case <-l.Done():
				d.log.Warn("leadership lost")
				break term
			case <-t.C:
				d.placeUnassigned(ctx, lost, gone, time.Now())
			}
		}
		t.Stop()
		d.setLeader(false)
	}
}

// placeUnassigned gives every spec without a node the node placement
// chooses, and every peer-protected spec without a replica node the
// replica placement chooses, each with a revision-checked update (a
// concurrent user edit wins and the spec is looked at again next round).
// It also re-protects (see reprotect), fails volumes on a shared origin
// over (see failover) and lifts the fences of nodes that released what
// failed over; lost and gone remember, for the leader's term, since when
// each replica's node and each such volume's node has been gone.
func (d *daemon) placeUnassigned(ctx context.Context, lost, gone map[string]time.Time, now time.Time) {
	specs, _, _, err := d.st.ListVolumeSpecs(ctx)
	if err != nil {
		return
	}
	// The nodes are read once a spec needs them, as most rounds have
	// nothing to place.
	var view *nodeView
	nodes := func() bool {
		if view == nil {
			view, err = d.nodeView(ctx)
		}
		return err == nil
	}
	var pols []api.Policy
	if fences, _, _, err := d.st.ListFences(ctx); err == nil && len(fences) > 0 && nodes() {
		for _, f := range fences {
			view.fenced[f.Value.Node] = true
		}
		d.liftFences(ctx, fences, *view)
	}
	for _, it := range specs {
		if it.Value.SharedOrigin != nil {
			if !nodes() {
				return
			}
			if d.failover(ctx, it, *view, &pols, gone, now) {
				continue
			}
		}
		switch {
		case it.Value.ReplicaNode != "":
			if !nodes() {
				return
			}
			if it.Value.ReplicaNode0 == "" && placement.CacheOnPeers(it.Value, view.nodes) {
				// The user named leg 1's node; leg 0 is still to place.
				d.placeReplica(ctx, it, view)
				continue
			}
			// One leg a round: each move is its own revision-checked
			// update, and leg 1's goes first.
			if !d.reprotect(ctx, it, 1, *view, &pols, lost, now) && it.Value.ReplicaNode0 != "" {
				d.reprotect(ctx, it, 0, *view, &pols, lost, now)
			}
			continue
		case it.Value.Node != "":
			if d.wantsReplica(ctx, it.Value, &pols) {
				if !nodes() {
					return
				}
				d.placeReplica(ctx, it, view)
			}
			continue
		}
		if !nodes() {
			return
		}
		choice, err := placement.Place(it.Value, view.candidates())
		if err != nil {
			d.log.Warn("cannot place volume", "volume", it.Value.Name, "err", err)
			continue
		}
		spec := it.Value
		spec.Node, spec.Pool = choice.Node, choice.Pool
		if _, err := d.st.UpdateVolumeSpec(ctx, spec, it.Meta.ModRevision); err != nil {
			d.log.Warn("placement update failed", "volume", spec.Name, "err", err)
			continue
		}
		d.log.Info("volume placed", "volume", spec.Name, "on", choice.Node, "pool", choice.Pool)
	}
}

// wantsReplica reports whether a placed spec needs its replica placed:
// protect peer, or (peer being the default) a write cache whose spec and
// policy name no protection on a volume not created yet. pols caches the
// policies for the round.
func (d *daemon) wantsReplica(ctx context.Context, spec api.VolumeSpec, pols *[]api.Policy) bool {
	switch {
	case spec.ReplicaNode != "" || spec.WriteCacheBytes == 0:
		return false
	case spec.Protect == string(pool.ProtectPeer):
		return true
	case spec.Protect != "":
		return false
	}
	if eff, err := d.effectivePolicy(ctx, spec, pols); err != nil || eff.Protect != "" {
		return false
	}
	// A volume that exists keeps the protection it was created with.
	st, _, err := d.st.GetVolumeStatus(ctx, spec.Name)
	return errors.Is(err, store.ErrNotFound) || (err == nil && st.Protection == "")
}

// effectivePolicy returns the policy that applies to spec. pols caches
// the policies for the round.
func (d *daemon) effectivePolicy(ctx context.Context, spec api.VolumeSpec, pols *[]api.Policy) (api.Policy, error) {
	if *pols == nil {
		items, _, _, err := d.st.ListPolicies(ctx)
		if err != nil {
			return api.Policy{}, err
		}
		*pols = []api.Policy{}
		for _, it := range items {
			*pols = append(*pols, it.Value)
		}
	}
	var def, named *api.Policy
	for i := range *pols {
		switch p := &(*pols)[i]; p.Name {
		case api.DefaultPolicy:
			def = p
		case spec.Policy:
			named = p
		}
	}
	return policy.Effective(def, named), nil
}

// reprotect moves the replica of leg index of a peer-protected volume
// (leg 1, or leg 0 of a write cache on peers) to another node once the
// node keeping it has been gone (its record expired) for the policy's
// ReprotectAfter while the volume's own node is up, or at once when that
// node is drained for maintenance: the owner then rebuilds the leg on the
// new node, and the old node drops its replica. While the owner is gone
// too the replica stays where it is: a replica elsewhere would be of no
// use to a volume that is not running, and its old node holds what the
// other leg may need to resync from. It reports whether it moved it.
func (d *daemon) reprotect(ctx context.Context, it store.Item[api.VolumeSpec], index int, view nodeView, pols *[]api.Policy, lost map[string]time.Time, now time.Time) bool {
	spec := it.Value
	node, key := spec.ReplicaNode, spec.Name
	if index == 0 {
		node, key = spec.ReplicaNode0, spec.Name+"#leg0"
	}
	drained := view.drained[node]
	if view.live(node) && !drained || !view.live(spec.Node) {
		delete(lost, key)
		return false
	}
	since, seen := lost[key]
	if !seen {
		since = now
		lost[key] = now
		if !drained {
			d.log.Warn("node keeping a replica is gone: the volume is re-protected elsewhere if it stays gone",
				"volume", spec.Name, "owner", spec.Node, "replica_node", node, "leg", index)
			return false
		}
	}
	after := time.Duration(0)
	if !drained {
		eff, err := d.effectivePolicy(ctx, spec, pols)
		if err != nil {
			return false
		}
		after = cmp.Or(time.Duration(eff.ReprotectAfter), api.DefaultReprotectAfter)
	}
	if now.Sub(since) < after {
		return false
	}
	// The other leg must hold every write: one being resynced from the
	// lost replica (health "a…" for leg 0, "…a" for leg 1) lacks writes
	// that only the lost node has, and that node must keep its replica
	// for when it returns. An owner that has written no status yet has
	// not said: wait for it.
	if st, _, err := d.st.GetVolumeStatus(ctx, spec.Name); err != nil {
		return false
	} else if h := st.MirrorHealth; h != "" && (len(h) <= 1-index || h[1-index] != 'A') {
		if now.Sub(since) < after+d.cfg.PlacementInterval {
			d.log.Warn("cannot re-protect: the other leg lacks writes that only the lost node's replica holds; waiting for that node",
				"volume", spec.Name, "replica_node", node, "leg", index, "mirror_health", h)
		}
		return false
	}
	moved := spec
	var choice placement.Choice
	var err error
	if index == 0 {
		moved.ReplicaNode0, moved.ReplicaPool0 = "", ""
		choice, err = placement.PlaceLeg0(moved, view.nodes, view.excluded())
	} else {
		moved.ReplicaNode, moved.ReplicaPool = "", ""
		choice, err = placement.PlaceReplica(moved, view.nodes, view.excluded())
	}
	if err != nil {
		if now.Sub(since) < after+d.cfg.PlacementInterval {
			d.log.Warn("cannot re-protect: no other node can keep the replica; it stays where it is until one can",
				"volume", spec.Name, "replica_node", node, "leg", index, "drained", drained, "err", err)
		}
		return false
	}
	if index == 0 {
		moved.ReplicaNode0, moved.ReplicaPool0 = choice.Node, choice.Pool
	} else {
		moved.ReplicaNode, moved.ReplicaPool = choice.Node, choice.Pool
	}
	if spec.MoveTo != "" && index == 1 {
		// A planned move goes to the replica's node, which is gone or
		// drained: it is called off with the replica's new place.
		moved.MoveTo = ""
		moved.MoveCalledOff = &api.CalledOffMove{To: spec.MoveTo, Why: fmt.Sprintf(
			"move to node %s called off: that node keeps the replica no more (gone or drained); the replica is re-protected on node %s", spec.MoveTo, choice.Node)}
		d.log.Warn("planned move called off: the node it went to keeps the replica no more", "volume", spec.Name, "move_to", spec.MoveTo)
	}
	if _, err := d.st.UpdateVolumeSpec(ctx, moved, it.Meta.ModRevision); err != nil {
		d.log.Warn("re-protection update failed", "volume", spec.Name, "err", err)
		return false
	}
	delete(lost, key)
	d.log.Warn("replica re-protected on another node", "volume", spec.Name, "owner", spec.Node, "leg", index,
		"from", node, "to", choice.Node, "pool", choice.Pool, "drained", drained, "gone_for", now.Sub(since).Round(time.Second))
	return true
}

// placeReplica records where a peer-protected volume's replica goes: or,
// for a volume whose node has no SSD, both legs of its write cache, in
// one update, so the owner never sees one leg placed and creates without
// the other.
func (d *daemon) placeReplica(ctx context.Context, it store.Item[api.VolumeSpec], view *nodeView) {
	spec := it.Value
	onPeers := placement.CacheOnPeers(spec, view.nodes)
	var leg0, choice placement.Choice
	var err error
	if onPeers {
		leg0, choice, err = placement.PlaceReplicas(spec, view.nodes, view.excluded())
	} else {
		choice, err = placement.PlaceReplica(spec, view.nodes, view.excluded())
	}
	if err != nil {
		if spec.Protect == string(pool.ProtectPeer) || onPeers {
			d.log.Warn("cannot place replica", "volume", spec.Name, "both_legs", onPeers, "err", err)
		}
		return
	}
	spec.ReplicaNode, spec.ReplicaPool = choice.Node, choice.Pool
	if onPeers {
		spec.ReplicaNode0, spec.ReplicaPool0 = leg0.Node, leg0.Pool
	}
	if _, err := d.st.UpdateVolumeSpec(ctx, spec, it.Meta.ModRevision); err != nil {
		d.log.Warn("replica placement update failed", "volume", spec.Name, "err", err)
		return
	}
	if onPeers {
		d.log.Info("replicas placed: the volume's node has no SSD, its write cache is on two peers", "volume", spec.Name, "owner", spec.Node,
			"leg0_on", leg0.Node, "leg0_pool", leg0.Pool, "leg1_on", choice.Node, "leg1_pool", choice.Pool)
		return
	}
	d.log.Info("replica placed", "volume", spec.Name, "owner", spec.Node, "on", choice.Node, "pool", choice.Pool)
}

// nodeView is what the leader knows of the nodes for one placement
// round: the live ones (registered), and which nodes are drained for
// maintenance (they get no new volume or replica, and the replicas they
// keep move elsewhere).
type nodeView struct {
	nodes   []api.Node
	drained map[string]bool
	// fenced are the nodes with a fence (see failover.go): like drained
	// nodes they get nothing new, until the fence is lifted.
	fenced map[string]bool
}

// live reports whether the named node is registered.
func (v nodeView) live(name string) bool {
	return slices.ContainsFunc(v.nodes, func(n api.Node) bool { return n.Name == name })
}

// candidates returns the live nodes that are neither drained nor fenced.
func (v nodeView) candidates() []api.Node {
	excluded := v.excluded()
	return slices.DeleteFunc(slices.Clone(v.nodes), func(n api.Node) bool { return excluded[n.Name] })
}

// excluded names the nodes that may not take a volume or a replica:
// drained or fenced.
func (v nodeView) excluded() map[string]bool {
	out := map[string]bool{}
	for _, m := range []map[string]bool{v.drained, v.fenced} {
		for n, ok := range m {
			if ok {
				out[n] = true
			}
		}
	}
	return out
}

// nodeView reads the registered nodes and the node specs.
func (d *daemon) nodeView(ctx context.Context) (*nodeView, error) {
	items, _, _, err := d.st.ListNodes(ctx)
	if err != nil {
		return nil, err
	}
	v := &nodeView{drained: map[string]bool{}, fenced: map[string]bool{}}
	for _, n := range items {
		v.nodes = append(v.nodes, n.Value)
	}
	specs, _, _, err := d.st.ListNodeSpecs(ctx)
	if err != nil {
		return nil, err
	}
	for _, s := range specs {
		v.drained[s.Value.Name] = s.Value.Drain
	}
	return v, nil
}

// sleep waits d or until ctx is done; it reports whether to go on.
func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// bootID returns the kernel's boot id, which identifies this boot of this
// machine (see Config.Instance); "" if it cannot be read, and then the
// name is not checked against other machines.
func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
