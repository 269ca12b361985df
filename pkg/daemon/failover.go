// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/dm"
	"github.com/tidecache/tidecache/pkg/engine"
	"github.com/tidecache/tidecache/pkg/pool"
	"github.com/tidecache/tidecache/pkg/store"
)

// Failover of a volume on a shared origin, in the leader's rounds:
//
//  1. the volume's node has been gone (its record expired) for the
//     policy's FailoverAfter, the node keeping its replica is live, and
//     the replica held every acknowledged write when the node was last
//     heard of (its mirror whole, or nothing dirty);
//  2. the leader fences the node (fences/<node>), naming the volume;
//  3. every node that serves the fenced node storage, the origin's
//     exporting node and the replica's node, cuts it off and acknowledges
//     the fence's revision in its record;
//  4. only then the leader moves the spec to the replica's node
//     (FailedOverFrom), which takes the volume over from its replica.
//
// A fenced node that comes back finds its exports refused, so it cannot
// start the volume even at boot; its daemon releases its own stale copy
// and says so (Node.FenceReleased), and the leader lifts the fence.

// failoverAfter returns the policy's FailoverAfter for spec.
func (d *daemon) failoverAfter(ctx context.Context, spec api.VolumeSpec, pols *[]api.Policy) (time.Duration, error) {
	eff, err := d.effectivePolicy(ctx, spec, pols)
	if err != nil {
		return 0, err
	}
	return cmp.Or(time.Duration(eff.FailoverAfter), api.DefaultFailoverAfter), nil
}

// failover carries a volume on a shared origin through one step of its
// failover when its node is gone; gone remembers, for the leader's term,
// since when each such volume's node has been. It reports whether the
// spec was handled here (the caller places nothing else for it).
func (d *daemon) failover(ctx context.Context, it store.Item[api.VolumeSpec], view nodeView, pols *[]api.Policy, gone map[string]time.Time, now time.Time) bool {
	spec := it.Value
	if spec.SharedOrigin == nil || spec.Node == "" {
		return false
	}
	if view.live(spec.Node) {
		// Up: placed and re-protected as any peer-protected volume, a
		// failed-over one (no replica node) getting a new replica. A
		// fence written while it was gone no longer stands for this
		// volume: the failover it prepared will not happen. The round's
		// fence list (view.fenced) spares a read for every other node.
		delete(gone, spec.Name)
		if view.fenced[spec.Node] {
			d.unfence(ctx, spec)
		}
		return false
	}
	log := d.log.With("volume", spec.Name, "owner", spec.Node, "replica_node", spec.ReplicaNode)
	since, seen := gone[spec.Name]
	if !seen {
		gone[spec.Name] = now
		log.Warn("node of a volume on a shared origin is gone: it is fenced and the volume fails over if it stays gone")
		return true
	}
	after, err := d.failoverAfter(ctx, spec, pols)
	if err != nil || now.Sub(since) < after {
		return true
	}
	// Say why a failover waits once per interval, not every round.
	waitLog := func(msg string, args ...any) {
		if now.Sub(since) < after+d.cfg.PlacementInterval {
			log.Warn(msg, args...)
		}
	}
	if spec.ReplicaNode == "" || !view.live(spec.ReplicaNode) || view.drained[spec.ReplicaNode] {
		waitLog("cannot fail over: the node keeping the replica is not up; the volume waits for either node")
		return true
	}
	st, _, err := d.st.GetVolumeStatus(ctx, spec.Name)
	if err != nil {
		waitLog("cannot fail over: the volume's last status cannot be read", "err", err)
		return true
	}
	if why := replicaLacksWrites(spec, st); why != "" {
		waitLog("cannot fail over: "+why+"; waiting for the node to come back", "mirror_health", st.MirrorHealth, "mode", st.Mode)
		return true
	}
	fence, rev, ok := d.fence(ctx, spec, now)
	if !ok {
		return true
	}
	for _, server := range []string{spec.SharedOrigin.Node, spec.ReplicaNode} {
		if !fencedBy(view, server, fence.Node, rev) {
			waitLog("failover waits for the fence to be applied", "fence_revision", rev, "by", server)
			return true
		}
	}
	moved := spec
	moved.Node, moved.Pool = spec.ReplicaNode, spec.ReplicaPool
	moved.ReplicaNode, moved.ReplicaPool = "", ""
	moved.FailedOverFrom = spec.Node
	// A planned move asked for before the node was lost is superseded:
	// its target kept the replica, which is where the volume goes.
	moved.MoveTo, moved.MovedFrom, moved.MoveCalledOff = "", "", nil
	// Refused if the owner recorded its replica outdated meanwhile: it
	// went on writing without it (see guardPeerLegs).
	if _, err := d.st.FailOverVolumeSpec(ctx, moved, it.Meta.ModRevision); err != nil {
		if errors.Is(err, store.ErrReplicaOutdated) {
			waitLog("cannot fail over: the owner recorded the replica outdated before it was lost; waiting for the node to come back")
		} else {
			log.Warn("failover update failed", "err", err)
		}
		return true
	}
	delete(gone, spec.Name)
	log.Warn("volume failed over to the node keeping its replica", "to", moved.Node, "fence_revision", rev, "gone_for", now.Sub(since).Round(time.Second))
	return true
}

// replicaLacksWrites says why the replica of a volume whose node is gone
// may lack writes that node acknowledged, "" if it holds them all: in
// writeback the last status must show both legs of the mirror in sync. A
// volume in another mode has nothing dirty, and its origin holds every
// write.
func replicaLacksWrites(spec api.VolumeSpec, st api.VolumeStatus) string {
	switch {
	case st.Node != spec.Node:
		return fmt.Sprintf("the last status is node %s's, not node %s's", st.Node, spec.Node)
	case st.Mode != string(pool.ModeWriteback):
		return ""
	case st.PeerNode != spec.ReplicaNode:
		return fmt.Sprintf("the write mirror's peer leg was on node %s, not on node %s", st.PeerNode, spec.ReplicaNode)
	case st.MirrorHealth != strings.Repeat(string(dm.LegInSync), 2):
		return fmt.Sprintf("the write mirror was not whole (health %q) when the node was last heard of", st.MirrorHealth)
	}
	return ""
}

// fence returns the fence of the spec's node naming the volume, and its
// revision, writing or extending it if needed; ok is false when the
// caller is to wait for the next round.
func (d *daemon) fence(ctx context.Context, spec api.VolumeSpec, now time.Time) (api.Fence, int64, bool) {
	f, meta, err := d.st.GetFence(ctx, spec.Node)
	switch {
	case errors.Is(err, store.ErrNotFound):
		f = api.Fence{Node: spec.Node, CreatedAt: now.UTC()}
	case err != nil:
		d.log.Warn("cannot read the fence", "fenced_node", spec.Node, "err", err)
		return f, 0, false
	case slices.Contains(f.Volumes, spec.Name):
		return f, meta.ModRevision, true
	}
	f.Volumes = append(f.Volumes, spec.Name)
	f.Reason = fmt.Sprintf("node gone; failing over %s", strings.Join(f.Volumes, ", "))
	m, err := d.st.PutFence(ctx, f, meta.ModRevision)
	if err != nil {
		d.log.Warn("fencing failed", "fenced_node", spec.Node, "err", err)
		return f, 0, false
	}
	d.log.Warn("node fenced: nodes serving it storage cut it off before its volumes fail over", "fenced_node", spec.Node, "volumes", f.Volumes, "revision", m.ModRevision)
	// The acknowledgements come in later rounds.
	return f, m.ModRevision, false
}

// unfence takes a volume out of its node's fence when the node came back
// before the volume failed over: the node owns it still, and the storage
// cut off from it is served again once no volume is left in the fence (the
// fence deleted) or at the fence's new revision. The write holds only
// while both the fence and the spec are as read, so a failover that moved
// the spec meanwhile (a leader of another term) keeps its fence. A fenced node never lifts its own fence this way: it
// waits for the leader (releaseFenced).
func (d *daemon) unfence(ctx context.Context, spec api.VolumeSpec) {
	f, meta, err := d.st.GetFence(ctx, spec.Node)
	if err != nil || !slices.Contains(f.Volumes, spec.Name) {
		return
	}
	cur, smeta, err := d.st.GetVolumeSpec(ctx, spec.Name)
	if err != nil || cur.Node != spec.Node {
		return // moved meanwhile: the fence stands
	}
	f.Volumes = slices.DeleteFunc(f.Volumes, func(v string) bool { return v == spec.Name })
	f.Reason = fmt.Sprintf("node gone; failing over %s", strings.Join(f.Volumes, ", "))
	if err := d.st.UnfenceVolume(ctx, f, meta.ModRevision, spec.Name, smeta.ModRevision); err != nil {
		d.log.Warn("taking a volume out of the fence of its node, back before the failover, failed", "volume", spec.Name, "fenced_node", spec.Node, "err", err)
		return
	}
	d.log.Warn("node back before its volume failed over: the volume is out of its fence, the node keeps it", "volume", spec.Name, "node", spec.Node, "volumes_left_in_fence", f.Volumes)
}

// fencedBy reports whether node server acknowledged the fence of node
// fenced at revision rev (or a later one of the same node).
func fencedBy(view nodeView, server, fenced string, rev int64) bool {
	i := slices.IndexFunc(view.nodes, func(n api.Node) bool { return n.Name == server })
	if i < 0 {
		return false
	}
	return slices.ContainsFunc(view.nodes[i].FencesApplied, func(a api.FenceAck) bool { return a.Node == fenced && a.Revision >= rev })
}

// liftFences lifts the fence of every node that came back and released
// the volumes that failed over (Node.FenceReleased at the fence's
// revision): it no longer holds anything it could write behind the
// volumes' new nodes, and may be served storage again.
func (d *daemon) liftFences(ctx context.Context, fences []store.Item[api.Fence], view nodeView) {
	for _, f := range fences {
		i := slices.IndexFunc(view.nodes, func(n api.Node) bool { return n.Name == f.Value.Node })
		if i < 0 || view.nodes[i].FenceReleased != f.Meta.ModRevision {
			continue
		}
		if err := d.st.DeleteFence(ctx, f.Value.Node, f.Meta.ModRevision); err != nil {
			d.log.Warn("lifting the fence failed", "fenced_node", f.Value.Node, "err", err)
			continue
		}
		d.log.Info("fence lifted: the node released the volumes that failed over", "fenced_node", f.Value.Node, "volumes", f.Value.Volumes)
	}
}

// Releaser drops a volume that failed over to another node (see
// engine.Engine.ReleaseVolume).
type Releaser interface {
	Volume(ctx context.Context, name string) (engine.VolumeInfo, error)
	ReleaseVolume(ctx context.Context, name string) error
}

// releaseFenced complies with a fence of this node: each volume the fence
// names that now runs elsewhere (or was deleted) is released here, its
// stale copy dropped; once none is left the fence's revision is reported
// released (Node.FenceReleased), so the leader can lift it. It returns
// that revision, 0 while the node is not fenced or something is left.
func (d *daemon) releaseFenced(ctx context.Context, rel Releaser) int64 {
	f, meta, err := d.st.GetFence(ctx, d.cfg.Node)
	if err != nil {
		if !errors.Is(err, store.ErrNotFound) {
			d.log.Warn("cannot read this node's fence", "err", err)
		}
		return 0
	}
	left := 0
	for _, name := range f.Volumes {
		spec, _, err := d.st.GetVolumeSpec(ctx, name)
		switch {
		case err == nil && spec.Node == d.cfg.Node:
			// Not failed over (yet). Reporting the fence released now
			// would let the leader lift it after a failover that comes
			// later, with this node's stack still up: it waits until
			// the volume moved, or until the leader, seeing this node
			// back first, takes the volume out of the fence (unfence).
			left++
			continue
		case err != nil && !errors.Is(err, store.ErrNotFound):
			left++
			continue
		}
		if _, err := rel.Volume(ctx, name); errors.Is(err, engine.ErrVolumeNotFound) {
			continue
		}
		if err := rel.ReleaseVolume(ctx, name); err != nil {
			d.log.Warn("this node is fenced and volume runs elsewhere, but releasing its stale copy failed", "volume", name, "err", err)
			left++
			continue
		}
		d.log.Warn("this node was fenced and the volume failed over: its stale copy here is released", "volume", name, "now_on", spec.Node)
	}
	if left > 0 {
		return 0
	}
	return meta.ModRevision
}

// complyWithFence looks for a fence of this node every replicaInterval
// and releases what failed over (releaseFenced), publishing the fence's
// revision once it has.
func (d *daemon) complyWithFence(ctx context.Context, rel Releaser) {
	t := time.NewTicker(replicaInterval)
	defer t.Stop()
	for {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		rev := d.releaseFenced(sctx, rel)
		cancel()
		d.mu.Lock()
		changed := rev != d.fenceReleased
		d.fenceReleased = rev
		d.mu.Unlock()
		if changed {
			d.publishNow()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// legDownGrace is how long the peer leg of a volume that can fail over may
// be unattached, its writes waiting, before the daemon lets the volume go
// on without it: long enough for a reconnect after a blip, short enough
// that the writes stall for seconds (the keep-alive has taken 2 s
// already).
const legDownGrace = time.Second

// guardPoll is how often guardPeerLegs looks whether the peer legs it
// knows are attached (sysfs reads only).
const guardPoll = 250 * time.Millisecond

// heldRetryEvery is how often the guard resubmits the I/O a live peer
// leg failed and holds, while the replica cannot be recorded outdated:
// a replica whose SSD or namespace is back then takes the writes, and
// they complete on both legs.
const heldRetryEvery = 2 * time.Second

// PeerLegGuard is what guardPeerLegs needs of the engine.
type PeerLegGuard interface {
	PeerLegs(ctx context.Context) ([]engine.PeerLeg, error)
	FailPeerLeg(ctx context.Context, leg engine.PeerLeg) error
	// Attached reports whether a controller of the export is live.
	Attached(nqn string) (bool, error)
	// PeerLegHeld counts the I/Os the volume's peer leg failed and holds.
	PeerLegHeld(ctx context.Context, volume string) (uint64, error)
	// RetryPeerLeg resubmits them.
	RetryPeerLeg(ctx context.Context, leg engine.PeerLeg) error
	// RearmPeerLeg makes a leg failed on purpose hold errors again.
	RearmPeerLeg(ctx context.Context, leg engine.PeerLeg) error
}

// guardPeerLegs watches, every mirrorInterval, the peer legs of this
// node's volumes that can fail over. Their writes wait while the peer
// does not answer (engine.FailoverLegTimeouts), and while it fails them
// (the leg's errhold slices hold the I/O: its SSD or namespace errors);
// once it has not taken writes for legDownGrace, the daemon records the
// replica outdated in etcd, in a transaction that holds only while the
// spec still names this node, and only then fails the leg, so the writes
// complete on the local one. If the record cannot be made (etcd
// unreachable, or the volume failed over meanwhile) the writes go on
// waiting, the held ones resubmitted every heldRetryEvery: completing
// them would acknowledge writes the cluster could lose by failing over to
// the replica. The record is deleted once the leg is back in sync.
func (d *daemon) guardPeerLegs(ctx context.Context, g PeerLegGuard) {
	t := time.NewTicker(guardPoll)
	defer t.Stop()
	gs := newGuardState()
	var legs []engine.PeerLeg
	var scanned time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		if now.Sub(scanned) >= mirrorInterval {
			// A full look (a scan of the node's devices and the mirrors'
			// status) every mirrorInterval; in between only whether each
			// leg's controller is live, from sysfs: the writes are
			// waiting.
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			fresh, err := g.PeerLegs(rctx)
			cancel()
			if err != nil {
				continue
			}
			legs, scanned = fresh, now
		} else {
			for i := range legs {
				if live, err := g.Attached(legs[i].NQN); err == nil && !live {
					legs[i].Attached, legs[i].InSync = false, false
				}
				if held, err := g.PeerLegHeld(ctx, legs[i].Volume); err == nil {
					legs[i].Held = held
					if held > 0 {
						legs[i].InSync = false
					}
				}
			}
		}
		d.guardRound(ctx, g, gs, legs, now)
	}
}

// guardState is what guardPeerLegs remembers between rounds, per volume.
type guardState struct {
	down   map[string]time.Time // since when the leg has not answered
	marked map[string]bool      // whether the outdated mark may exist
	warned map[string]string    // the error last logged for this outage
	// goneOn are the volumes whose leg was failed after the mark: they go
	// on without it until it is attached again (dm-raid may show it
	// alive until the next write fails on it).
	goneOn map[string]bool
	// retried is when the I/O a leg holds was last resubmitted.
	retried map[string]time.Time
}

func newGuardState() *guardState {
	return &guardState{down: map[string]time.Time{}, marked: map[string]bool{}, warned: map[string]string{},
		goneOn: map[string]bool{}, retried: map[string]time.Time{}}
}

// warn reports whether err is news for the volume's outage, the first
// error or another than the last one logged: the guard logs each reason
// the writes keep waiting once, not every round.
func (gs *guardState) warn(volume string, err error) bool {
	if gs.warned[volume] == err.Error() {
		return false
	}
	gs.warned[volume] = err.Error()
	return true
}

// guardRound is one look of guardPeerLegs at the legs, at now.
func (d *daemon) guardRound(ctx context.Context, g PeerLegGuard, gs *guardState, legs []engine.PeerLeg, now time.Time) {
	for _, l := range legs {
		switch {
		case l.Attached && l.Held == 0:
			if since, was := gs.down[l.Volume]; was && !gs.goneOn[l.Volume] {
				// Back before the mark was made (a short cut, or etcd
				// without a leader meanwhile): the held writes were
				// resubmitted and reached both legs; nothing to resync.
				d.log.Info("peer leg answers again: the writes that waited reached both legs", "volume", l.Volume, "peer", l.Node,
					"writes_waited", now.Sub(since).Round(100*time.Millisecond))
			}
			delete(gs.down, l.Volume)
			delete(gs.warned, l.Volume)
			delete(gs.goneOn, l.Volume)
			delete(gs.retried, l.Volume)
			if !l.InSync {
				continue
			}
			// The mark goes only once the leg holds the peer's errors
			// again: without the mark, an error must not fail the leg.
			if l.Passing {
				if err := g.RearmPeerLeg(ctx, l); err != nil {
					d.log.Warn("peer leg back in sync, but its errors cannot be held again: its replica stays recorded outdated", "volume", l.Volume, "err", err)
					continue
				}
			}
			d.clearOutdated(ctx, l.Volume, gs.marked)
			continue
		case gs.goneOn[l.Volume] && l.Held == 0:
			continue // failed after the mark
		case l.Failed && l.Held == 0:
			// Out of the mirror without this loop (a stack whose peer
			// slices pass errors, built before errhold, or a leg
			// recorded out of sync): the writes go on, so the mark is
			// written at once; it stays until the leg is back in sync.
			// A leg that holds I/O (one recorded out of sync, attached
			// again, whose peer fails its resync writes) goes below:
			// its writes wait until it is failed after the mark.
			if err := d.markOutdated(ctx, l, now); err != nil {
				if gs.warn(l.Volume, err) {
					d.log.Error("peer leg failed, and its replica cannot be recorded outdated", "volume", l.Volume, "peer", l.Node, "err", err)
				}
				continue
			}
			d.log.Warn("peer leg out of the mirror: its replica is recorded outdated, and writes go on on the local leg",
				"volume", l.Volume, "peer", l.Node)
			gs.marked[l.Volume], gs.goneOn[l.Volume] = true, true
			continue
		}
		since, ok := gs.down[l.Volume]
		if !ok {
			gs.down[l.Volume] = now
			gs.retried[l.Volume] = now
			if l.Held > 0 {
				d.log.Warn("peer leg of a volume that can fail over fails I/O: it is held, and the volume's writes wait until the peer takes them or the replica is recorded outdated",
					"volume", l.Volume, "peer", l.Node, "held", l.Held)
			} else {
				d.log.Warn("peer leg of a volume that can fail over does not answer: its writes wait until the replica is recorded outdated",
					"volume", l.Volume, "peer", l.Node)
			}
			continue
		}
		if now.Sub(since) < legDownGrace {
			continue
		}
		if err := d.goOnWithoutPeer(ctx, g, l, now); err != nil {
			if gs.warn(l.Volume, err) {
				d.log.Error("writes to the volume keep waiting", "volume", l.Volume, "peer", l.Node, "err", err, "waiting_for", now.Sub(since).Round(time.Second))
			}
			if l.Attached && l.Held > 0 && now.Sub(gs.retried[l.Volume]) >= heldRetryEvery {
				gs.retried[l.Volume] = now
				if err := g.RetryPeerLeg(ctx, l); err != nil {
					d.log.Warn("cannot resubmit the I/O the peer leg holds", "volume", l.Volume, "err", err)
				}
			}
			continue
		}
		gs.marked[l.Volume], gs.goneOn[l.Volume] = true, true
		delete(gs.down, l.Volume)
		d.log.Warn("volume goes on without its peer leg, the replica recorded outdated", "volume", l.Volume, "peer", l.Node,
			"writes_waited", now.Sub(since).Round(100*time.Millisecond))
	}
}

// goOnWithoutPeer records a volume's replica outdated, then fails its
// peer leg.
func (d *daemon) goOnWithoutPeer(ctx context.Context, g PeerLegGuard, l engine.PeerLeg, now time.Time) error {
	if err := d.markOutdated(ctx, l, now); err != nil {
		return err
	}
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return g.FailPeerLeg(fctx, l)
}

// markOutdated records the replica of a volume of this node outdated,
// while the spec still names this node.
func (d *daemon) markOutdated(ctx context.Context, l engine.PeerLeg, now time.Time) error {
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	spec, meta, err := d.st.GetVolumeSpec(sctx, l.Volume)
	switch {
	case err != nil:
		return fmt.Errorf("cannot record the replica outdated: %w", err)
	case spec.Node != d.cfg.Node:
		return fmt.Errorf("the volume failed over to node %s: the writes waiting here never complete", spec.Node)
	}
	rec := api.ReplicaOutdated{Volume: l.Volume, Owner: d.cfg.Node, ReplicaNode: l.Node, Since: now.UTC()}
	if err := d.st.MarkReplicaOutdated(sctx, rec, meta.ModRevision); err != nil {
		return fmt.Errorf("cannot record the replica outdated: %w", err)
	}
	return nil
}

// clearOutdated deletes a volume's outdated mark, if marked says it may
// exist; marked is updated.
func (d *daemon) clearOutdated(ctx context.Context, volume string, marked map[string]bool) {
	if known, ok := marked[volume]; ok && !known {
		return
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, meta, err := d.st.GetReplicaOutdated(sctx, volume)
	switch {
	case errors.Is(err, store.ErrNotFound):
		marked[volume] = false
	case err != nil:
	default:
		if err := d.st.ClearReplicaOutdated(sctx, volume, meta.ModRevision); err == nil {
			marked[volume] = false
			d.log.Info("replica back in sync: its outdated mark is cleared", "volume", volume)
		}
	}
}
