// SPDX-License-Identifier: Apache-2.0

package reconcile

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/engine"
	"github.com/tidecache/tidecache/pkg/nvmeof"
	"github.com/tidecache/tidecache/pkg/placement"
	"github.com/tidecache/tidecache/pkg/pool"
	"github.com/tidecache/tidecache/pkg/store"
)

// A peer-protected volume (protect peer) involves two nodes. The spec's
// node owns the volume and reconciles it as any other; the spec's
// ReplicaNode keeps the replica that becomes the mirror's second leg:
//
//  1. the leader places the replica (spec.ReplicaNode, ReplicaPool);
//  2. the replica node keeps a slice for it (reconcileReplica), exports it
//     to the owner alone and publishes it in its node record;
//  3. the owner reads that record (peerLeg), attaches the export and
//     creates the volume with it as leg 1.
//
// The replica node drops its slice when the spec is deleted or places the
// replica elsewhere. When the replica's node is lost, the leader places
// the replica on another node (re-protection) and the owner moves its
// leg 1 there (movePeer).

// replicaWait is how soon a volume waiting for its replica is looked at
// again.
const replicaWait = 2 * time.Second

// reconcileReplica keeps the replica spec places on this node, or drops
// one this node kept that the spec no longer places here.
func (c *Controller) reconcileReplica(ctx context.Context, spec api.VolumeSpec) outcome {
	if !spec.KeepsReplica(c.cfg.Node) || spec.Node == "" {
		if c.ownerUsesReplica(ctx, spec) {
			// Moved elsewhere (re-protection, a drain), but the owner's
			// mirror still runs on this copy: dropping it now would fail
			// the owner's leg under its writes. The owner swaps legs in
			// one reload once the new replica is exported; its status
			// then names the new peer.
			return outcome{res: Result{RequeueAfter: replicaWait}}
		}
		out, _ := c.dropReplica(ctx, spec.Name)
		return out
	}
	c.mu.Lock()
	c.replicas[spec.Name] = true
	c.mu.Unlock()
	if c.cfg.Replicas == nil {
		return outcome{err: Terminal(fmt.Errorf("volume %s places its replica on this node, which keeps none: start tidecached with --replica-address", spec.Name))}
	}
	r, err := c.cfg.Replicas.HostReplica(ctx, spec.ReplicaPool, pool.ReplicaRequest{
		Volume: spec.Name, Owner: spec.Node, HostNQN: nvmeof.HostNQN(spec.Node), WriteCache: spec.WriteCacheBytes,
	})
	if err != nil {
		return outcome{err: classify(fmt.Errorf("keep replica of volume %s for node %s: %w", spec.Name, spec.Node, err))}
	}
	c.log.Debug("replica kept", "volume", spec.Name, "owner", spec.Node, "pool", r.Pool, "nqn", r.NQN)
	if c.cfg.ReplicaKept != nil {
		c.cfg.ReplicaKept(ctx)
	}
	return outcome{}
}

// ownerUsesReplica reports whether the owner of a volume whose replica
// this node keeps still reports this node as its peer. Only a spec that
// names another peer asks: a deleted spec drops the replica at once (the
// owner flushes and deletes the volume), and a volume not placed has no
// owner to ask.
func (c *Controller) ownerUsesReplica(ctx context.Context, spec api.VolumeSpec) bool {
	c.mu.Lock()
	kept := c.replicas[spec.Name]
	c.mu.Unlock()
	if !kept || spec.Node == "" || spec.ReplicaNode == "" && spec.ReplicaNode0 == "" {
		return false
	}
	sctx, cancel := c.storeCtx(ctx)
	st, _, err := c.store.GetVolumeStatus(sctx, spec.Name)
	cancel()
	switch {
	case errors.Is(err, store.ErrNotFound):
		return false
	case err != nil:
		return true // cannot tell: keep it, and look again
	}
	return st.Node == spec.Node && (st.PeerNode == c.cfg.Node || st.PeerNode0 == c.cfg.Node)
}

// dropReplica drops the replica this node kept for the named volume, if
// it kept one; kept says whether it did.
func (c *Controller) dropReplica(ctx context.Context, name string) (out outcome, kept bool) {
	c.mu.Lock()
	kept = c.replicas[name]
	c.mu.Unlock()
	if !kept || c.cfg.Replicas == nil {
		return outcome{done: true}, kept
	}
	if err := c.cfg.Replicas.DropReplica(ctx, name); err != nil {
		return outcome{err: fmt.Errorf("drop replica of volume %s: %w", name, err)}, true
	}
	c.log.Info("replica dropped: the volume's spec no longer places it here", "volume", name)
	c.mu.Lock()
	delete(c.replicas, name)
	c.mu.Unlock()
	return outcome{done: true}, true
}

// peerLeg returns the peer leg of a peer-protected volume about to be
// created, from the replica node's record; the error says what it waits
// for.
func (c *Controller) peerLeg(ctx context.Context, spec api.VolumeSpec) (pool.RemoteLeg, error) {
	if spec.ReplicaNode == "" {
		return pool.RemoteLeg{}, fmt.Errorf("waiting for the leader to place the replica of its write cache on another node")
	}
	return c.replicaLeg(ctx, spec, spec.ReplicaNode)
}

// peerLeg0 returns leg 0 of a write cache on peers (the node has no SSD),
// from the record of spec.ReplicaNode0, as peerLeg does for leg 1.
func (c *Controller) peerLeg0(ctx context.Context, spec api.VolumeSpec) (pool.RemoteLeg, error) {
	if spec.ReplicaNode0 == "" {
		return pool.RemoteLeg{}, fmt.Errorf("waiting for the leader to place both legs of its write cache on two other nodes (this node's pool has no SSD)")
	}
	leg, err := c.replicaLeg(ctx, spec, spec.ReplicaNode0)
	if err != nil {
		return pool.RemoteLeg{}, fmt.Errorf("leg 0: %w", err)
	}
	return leg, nil
}

// replicaLeg reads how to attach the replica that node keeps of spec's
// volume for this node from that node's record.
func (c *Controller) replicaLeg(ctx context.Context, spec api.VolumeSpec, node string) (pool.RemoteLeg, error) {
	sctx, cancel := c.storeCtx(ctx)
	n, _, err := c.store.GetNode(sctx, node)
	cancel()
	if err != nil {
		return pool.RemoteLeg{}, fmt.Errorf("waiting for replica node %s: %w", node, err)
	}
	for _, r := range n.Replicas {
		if r.Volume != spec.Name || r.Owner != c.cfg.Node {
			continue
		}
		if !r.Exported {
			return pool.RemoteLeg{}, fmt.Errorf("node %s keeps the replica but does not export it yet: %s", n.Name, r.Error)
		}
		host, port, err := splitReplicaAddress(n.ReplicaAddress)
		if err != nil {
			return pool.RemoteLeg{}, fmt.Errorf("node %s: %w", n.Name, err)
		}
		return pool.RemoteLeg{Node: n.Name, NQN: r.NQN, HostNQN: nvmeof.HostNQN(c.cfg.Node), Addr: host, Port: port, UUID: r.UUID}, nil
	}
	return pool.RemoteLeg{}, fmt.Errorf("waiting for node %s to keep and export the replica", node)
}

// movePeer re-protects an existing peer-protected volume on the node its
// spec now places leg index's replica on (the leader moved it after the
// old peer was lost): leg 1, or leg 0 of a write cache on peers. Once that
// node keeps and exports the replica, the engine moves the leg there and
// dm-raid rebuilds it from the other, the volume online throughout. Until
// then the volume runs on as it is and its status says what it waits for.
// The pass ends after the move and the volume is looked at again soon,
// its mirror now built on the new leg.
func (c *Controller) movePeer(ctx context.Context, spec api.VolumeSpec, st api.VolumeStatus, actual engine.VolumeInfo, index int) outcome {
	from, to, find := actual.PeerNode, spec.ReplicaNode, c.peerLeg
	if index == 0 {
		from, to, find = actual.PeerNode0, spec.ReplicaNode0, c.peerLeg0
	}
	leg, err := find(ctx, spec)
	if err != nil {
		st.Error = fmt.Sprintf("re-protecting the write mirror on node %s: %v", to, err)
		c.log.Info("volume waits to re-protect on its new peer", "volume", spec.Name, "leg", index, "from", from, "to", to, "why", err)
		return outcome{res: Result{RequeueAfter: replicaWait}, err: c.putStatus(ctx, st, &actual)}
	}
	c.log.Warn("re-protecting the write mirror on another node", "volume", spec.Name, "leg", index, "from", from, "to", leg.Node)
	if err := c.engine.MovePeerLeg(ctx, spec.Name, index, leg); err != nil {
		return c.fail(ctx, st, fmt.Errorf("re-protect leg %d on node %s: %w", index, leg.Node, err), &actual)
	}
	if actual, err = c.engine.Volume(ctx, spec.Name); err != nil {
		return c.fail(ctx, st, fmt.Errorf("read volume: %w", err), nil)
	}
	return c.report(ctx, st, Result{RequeueAfter: replicaWait}, actual)
}

// defaultPeer reports whether a new volume whose spec and policy name no
// protection is to be peer-protected: when the leader has placed its
// replica, or another live node could keep one (the leader, deciding the
// same from the same records, is about to place it). Otherwise the node
// chooses local or none.
func (c *Controller) defaultPeer(ctx context.Context, spec api.VolumeSpec) (bool, error) {
	if spec.ReplicaNode != "" {
		return true, nil
	}
	sctx, cancel := c.storeCtx(ctx)
	items, _, _, err := c.store.ListNodes(sctx)
	cancel()
	if err != nil {
		return false, fmt.Errorf("list nodes for the default protection: %w", err)
	}
	// A drained node gets no replica from the leader: it does not count.
	nodes := make([]api.Node, 0, len(items))
	drained := map[string]bool{}
	for _, it := range items {
		sctx, cancel := c.storeCtx(ctx)
		ns, _, err := c.store.GetNodeSpec(sctx, it.Value.Name)
		cancel()
		switch {
		case err == nil && ns.Drain:
			drained[it.Value.Name] = true
		case err != nil && !errors.Is(err, store.ErrNotFound):
			return false, fmt.Errorf("read node spec %s for the default protection: %w", it.Value.Name, err)
		}
		nodes = append(nodes, it.Value)
	}
	_, err = placement.PlaceReplica(spec, nodes, drained)
	return err == nil, nil
}

// splitReplicaAddress splits a node's replica address, "IPv4:port".
func splitReplicaAddress(s string) (string, int, error) {
	host, p, err := net.SplitHostPort(s)
	if err != nil {
		return "", 0, fmt.Errorf("replica address %q: %w", s, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port <= 0 || port > 65535 {
		return "", 0, fmt.Errorf("replica address %q: bad port", s)
	}
	return host, port, nil
}
