// SPDX-License-Identifier: Apache-2.0

package reconcile

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/dm"
	"github.com/tidecache/tidecache/pkg/engine"
	"github.com/tidecache/tidecache/pkg/policy"
	"github.com/tidecache/tidecache/pkg/pool"
)

// observation is everything decide needs about one volume: the desired
// state read from the store and the actual state from one engine read.
// It holds values only, so a test can write one by hand.
type observation struct {
	spec     api.VolumeSpec
	revision int64 // the spec's ModRevision
	// policy is the effective policy; drain the node's drain flag.
	policy api.Policy
	drain  bool
	// exists says whether the engine knows the volume; actual and drift
	// are its state and the result of comparing its live tables with its
	// layout (nil, joined *engine.DriftError, or the error that stopped
	// the comparison).
	exists bool
	actual engine.VolumeInfo
	drift  error
	// noSSDs says the volume's pool is its origin alone (no SSD member).
	noSSDs bool
	// facts are the health facts the policy rules read; latch is the SSD
	// error latched by the previous decision, nil if none.
	facts policy.Facts
	latch *policy.Latch
}

// actualPtr is the volume's actual state for the status, nil when the
// engine does not know it (or was not read).
func (o observation) actualPtr() *engine.VolumeInfo {
	if !o.exists {
		return nil
	}
	a := o.actual
	return &a
}

// observe reads the desired state of spec's volume and the actual state,
// and returns what the controller remembers of the volume. The engine is
// read once (engine.Observe: one scan of the superblocks for
// the volume, its drift and its pool's origin) however many facts the
// rules need. On error the observation holds what was read so far.
func (c *Controller) observe(ctx context.Context, spec api.VolumeSpec, rev int64) (observation, *volState, error) {
	o := observation{spec: spec, revision: rev}
	var err error
	if o.policy, o.drain, err = c.desired(ctx, spec); err != nil {
		return o, nil, err
	}
	node, err := c.engine.Observe(ctx, engine.ObserveRequest{Volumes: []string{spec.Name}, Drift: true})
	if err != nil {
		return o, nil, fmt.Errorf("read volume: %w", err)
	}
	vo, exists := node.Volume(spec.Name)
	o.exists, o.actual, o.drift = exists, vo.Info, vo.Drift

	now := time.Now()
	vs, err := c.state(ctx, spec.Name, now)
	if err != nil {
		return o, nil, err
	}
	poolName := spec.Pool
	if exists {
		poolName = o.actual.Pool
	}
	acked := vs.latch != nil && rev > vs.latch.Revision
	o.latch = vs.latch
	o.facts = policy.Facts{Now: now, LastFlush: vs.lastFlush}
	o.facts.SSDs = c.ssdFacts(ctx, spec.Name, poolName, vs, acked)
	pi, ok := node.Pool(poolName)
	o.noSSDs = ok && len(pi.Members) == 0 && pi.Origin.Path != ""
	o.facts.Origin = c.originFacts(spec.Name, pi, ok)
	o.facts.Mirror = c.mirrorFacts(ctx, o.actual, exists, pi, ok, vs, now)
	if m := o.facts.Mirror; m != nil && spec.MovedFrom != "" && spec.MovedFrom == o.actual.FailedOverFrom && o.actual.Protection == pool.ProtectNone {
		// Taken over in a planned move by a release that recorded it as a
		// failover (before format 3's planned record): running on the
		// one copy until the new replica (failedOverFacts).
		m.Detail = fmt.Sprintf("moved from node %s onto its replica, the only copy of the write cache until the leader places a new replica", spec.MovedFrom)
	}
	if exists && o.actual.WriteCache != nil {
		o.facts.WritecacheError = o.actual.WriteCache.Error
		o.facts.DirtyBlocks = o.actual.WriteCache.DirtyBlocks
	}
	return o, vs, nil
}

// mirrorFacts reads what the mirror rule needs of a volume's write mirror:
// the legs out of a running mirror (dm-raid's health), or, for a mirror
// not running, the legs whose device is not there to build it again (an
// SSD of the pool missing; a peer not exporting the replica, from its
// node record). vs keeps when the legs were first seen out. nil: the
// volume has no mirror.
func (c *Controller) mirrorFacts(ctx context.Context, v engine.VolumeInfo, exists bool, p engine.PoolInfo, havePool bool, vs *volState, now time.Time) *policy.Mirror {
	if exists && v.TakenOverFrom() != "" && v.Protection == pool.ProtectNone {
		return failedOverFacts(v, vs, now)
	}
	if !exists || v.Protection == "" || v.Protection == pool.ProtectNone {
		vs.mirrorSince = time.Time{}
		return nil
	}
	m := &policy.Mirror{Running: v.Mirror != nil}
	var out []string
	switch {
	case v.Mirror != nil:
		for i, h := range v.Mirror.Health {
			if h != dm.LegDead && h != dm.LegMissing {
				continue
			}
			leg := fmt.Sprintf("leg %d", i)
			if i == 1 && v.PeerNode != "" {
				leg += " (node " + v.PeerNode + ")"
			}
			out = append(out, leg+map[dm.LegHealth]string{dm.LegDead: " failed", dm.LegMissing: " absent"}[h])
		}
	case v.Mode == pool.ModeWriteback:
		// Not running yet (assembly pending): nothing to judge.
	case v.Protection == pool.ProtectPeer:
		if why := c.peerExports(ctx, v); why != "" {
			out = append(out, why)
		}
	case havePool:
		for _, mb := range p.Members {
			if !mb.Present {
				out = append(out, "SSD "+mb.Path+" of the pool missing")
			}
		}
	}
	m.LegsOut = len(out)
	m.Detail = strings.Join(out, ", ")
	switch {
	case m.LegsOut == 0:
		vs.mirrorSince = time.Time{}
	case vs.mirrorSince.IsZero():
		vs.mirrorSince = now
	}
	m.Since = vs.mirrorSince
	return m
}

// peerExports says why the peer of a peer mirror cannot take its leg
// back: its node record is gone, or does not list the replica exported;
// "" when it can.
func (c *Controller) peerExports(ctx context.Context, v engine.VolumeInfo) string {
	sctx, cancel := c.storeCtx(ctx)
	n, _, err := c.store.GetNode(sctx, v.PeerNode)
	cancel()
	if err != nil {
		return fmt.Sprintf("node %s not reachable through the cluster (%v)", v.PeerNode, err)
	}
	if !slices.ContainsFunc(n.Replicas, func(r api.ReplicaInventory) bool { return r.Volume == v.Name && r.Exported }) {
		return fmt.Sprintf("node %s does not export the replica", v.PeerNode)
	}
	return ""
}
