// SPDX-License-Identifier: Apache-2.0

package reconcile

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/engine"
	"github.com/tidecache/tidecache/pkg/nvmeof"
	"github.com/tidecache/tidecache/pkg/policy"
	"github.com/tidecache/tidecache/pkg/pool"
	"github.com/tidecache/tidecache/pkg/store"
)

// A volume on a shared origin (spec.SharedOrigin) caches, whole, a device
// another node exports to every node (tidecached run --export), and
// mirrors its write cache to a peer's replica. Its node adopts the device
// with that peer leg. When the node is lost, the leader fences it and
// moves the spec to the replica's node (spec.FailedOverFrom), which takes
// the volume over from its replica: that copy holds every write the old
// node acknowledged, the origin holds the rest.

// attachSharedOrigin attaches the spec's shared origin on this node and
// returns its device, found by the identity the exporting node publishes
// (the namespace UUID, the device's wwid on every node). The error says
// what it waits for.
func (c *Controller) attachSharedOrigin(ctx context.Context, spec api.VolumeSpec) (string, error) {
	o := spec.SharedOrigin
	if c.cfg.SharedOrigins == nil {
		return "", Terminal(fmt.Errorf("volume %s caches a shared origin, which this node's daemon cannot attach", spec.Name))
	}
	sctx, cancel := c.storeCtx(ctx)
	n, _, err := c.store.GetNode(sctx, o.Node)
	cancel()
	if err != nil {
		return "", fmt.Errorf("waiting for node %s, which exports the shared origin %s: %w", o.Node, o.Export, err)
	}
	i := slices.IndexFunc(n.Exports, func(e api.ExportInventory) bool { return e.Name == o.Export })
	if i < 0 {
		return "", fmt.Errorf("node %s does not export %s", o.Node, o.Export)
	}
	exp := n.Exports[i]
	if !slices.Contains(exp.Hosts, c.cfg.Node) {
		return "", fmt.Errorf("node %s does not export %s to this node (yet, or this node is fenced): %s", o.Node, o.Export, exp.Error)
	}
	host, port, err := splitReplicaAddress(n.ReplicaAddress)
	if err != nil {
		return "", fmt.Errorf("node %s: %w", o.Node, err)
	}
	if _, err := c.cfg.SharedOrigins.AttachOrigin(ctx, o.Node, nvmeof.Remote{
		NQN: nvmeof.ExportNQN(o.Export, c.cfg.Node), HostNQN: nvmeof.HostNQN(c.cfg.Node), Addr: host, Port: port,
	}); err != nil {
		return "", err
	}
	dev, err := c.cfg.SharedOrigins.FindOrigin(ctx, "uuid."+exp.UUID)
	if err != nil {
		return "", fmt.Errorf("shared origin %s of node %s (uuid %s) attached but not found: %w", o.Export, o.Node, exp.UUID, err)
	}
	return dev, nil
}

// createShared brings up a volume on a shared origin that this node does
// not have: taken over from the replica this node keeps when the leader
// failed it over here or its old owner handed it over in a planned move
// (moveOut), else adopted with its peer leg.
func (c *Controller) createShared(ctx context.Context, spec api.VolumeSpec, d policy.Decision, st api.VolumeStatus) outcome {
	waiting := func(err error) outcome {
		if IsTerminal(err) {
			st.State, st.Error = api.StateError, err.Error()
			return outcome{err: errors.Join(err, c.putStatus(ctx, st, nil))}
		}
		st.State, st.Error = api.StateCreating, err.Error()
		c.log.Info("volume on a shared origin waits", "volume", spec.Name, "why", err)
		return outcome{res: Result{RequeueAfter: replicaWait}, err: c.putStatus(ctx, st, nil)}
	}
	var take *engine.TakeOverRequest
	var leg pool.RemoteLeg
	if from := cmp.Or(spec.FailedOverFrom, spec.MovedFrom); from != "" {
		// The mode the old node last reported, read before this node's
		// first status replaces it: writeback means the replica holds
		// dirty blocks, which the write tier must start on.
		mode := pool.ModeWriteback
		sctx, cancel := c.storeCtx(ctx)
		old, _, err := c.store.GetVolumeStatus(sctx, spec.Name)
		cancel()
		switch {
		case err == nil && old.Node == from && old.Mode != "":
			mode = pool.Mode(old.Mode)
		case err != nil && !errors.Is(err, store.ErrNotFound):
			return waiting(fmt.Errorf("read the status node %s left: %w", from, err))
		}
		take = &engine.TakeOverRequest{Volume: spec.Name, From: from, Mode: mode, Planned: spec.FailedOverFrom == ""}
	} else {
		var err error
		if leg, err = c.peerLeg(ctx, spec); err != nil {
			return waiting(err)
		}
	}
	dev, err := c.attachSharedOrigin(ctx, spec)
	if err != nil {
		return waiting(err)
	}
	st.State, st.Error = api.StateCreating, ""
	if err := c.putStatus(ctx, st, nil); err != nil {
		return outcome{err: err}
	}
	var info engine.VolumeInfo
	if take != nil {
		take.Origin = dev
		c.log.Warn("taking the volume over from its replica", "volume", spec.Name, "from", take.From, "mode", take.Mode, "origin", dev)
		info, err = c.cfg.SharedOrigins.TakeOver(ctx, *take)
	} else {
		c.log.Info("adopting the shared origin", "volume", spec.Name, "origin", dev, "peer", leg.Node, "mode", d.Mode)
		info, err = c.cfg.SharedOrigins.AdoptVolume(ctx, engine.AdoptRequest{Pool: spec.Pool, Device: dev, Replaceable: spec.SharedOrigin.Provisioned, Volume: pool.VolumeRequest{
			Name: spec.Name, WriteCache: spec.WriteCacheBytes, ReadCache: spec.ReadCacheBytes, Mode: d.Mode,
			BlockSize: spec.BlockSize, ReadBlockSize: spec.ReadBlockSize, FUAWindow: spec.AllowFUAWindow,
			Protect: pool.ProtectPeer, Peer: &leg,
		}})
	}
	if err != nil {
		err = classify(fmt.Errorf("create volume on shared origin: %w", err))
		st.State, st.Error = api.StateError, err.Error()
		return outcome{err: errors.Join(err, c.putStatus(ctx, st, nil))}
	}
	st.State = ""
	return outcome{res: Result{RequeueAfter: replicaWait}, err: c.putStatus(ctx, st, &info)}
}

// failedOverFacts is the mirror rule's view of a volume taken over from
// its replica, in a failover or a planned move: it runs on that one copy.
func failedOverFacts(v engine.VolumeInfo, vs *volState, now time.Time) *policy.Mirror {
	if vs.mirrorSince.IsZero() {
		vs.mirrorSince = now
	}
	how, from := "failed over", v.FailedOverFrom
	if v.MovedFrom != "" {
		how, from = "moved", v.MovedFrom
	}
	return &policy.Mirror{
		Running: v.Mode == pool.ModeWriteback, LegsOut: 1, Since: vs.mirrorSince,
		Detail: fmt.Sprintf("%s from node %s onto its replica, the only copy of the write cache until the leader places a new replica", how, from),
	}
}

// addPeer protects a volume that failed over, and runs on the one copy it
// took over, on the replica the leader placed for it: once that node
// keeps and exports the replica, the engine makes it leg 1 of a mirror
// and dm-raid copies the write cache onto it. Until then the volume runs
// on as it is and its status says what it waits for.
func (c *Controller) addPeer(ctx context.Context, spec api.VolumeSpec, st api.VolumeStatus, actual engine.VolumeInfo) outcome {
	if c.cfg.SharedOrigins == nil {
		return c.fail(ctx, st, Terminal(fmt.Errorf("volume %s cannot be protected again: this node's daemon runs no shared origins", spec.Name)), &actual)
	}
	leg, err := c.peerLeg(ctx, spec)
	if err != nil {
		st.Error = fmt.Sprintf("protecting the write cache again on node %s: %v", spec.ReplicaNode, err)
		c.log.Info("volume waits to be protected again on its new peer", "volume", spec.Name, "to", spec.ReplicaNode, "why", err)
		return outcome{res: Result{RequeueAfter: replicaWait}, err: c.putStatus(ctx, st, &actual)}
	}
	c.log.Warn("protecting the write cache of a volume that failed over on a new peer", "volume", spec.Name, "to", leg.Node)
	if err := c.cfg.SharedOrigins.AddPeerLeg(ctx, spec.Name, leg); err != nil {
		return c.fail(ctx, st, fmt.Errorf("protect again on node %s: %w", leg.Node, err), &actual)
	}
	if actual, err = c.engine.Volume(ctx, spec.Name); err != nil {
		return c.fail(ctx, st, fmt.Errorf("read volume: %w", err), nil)
	}
	return c.report(ctx, st, Result{RequeueAfter: replicaWait}, actual)
}
