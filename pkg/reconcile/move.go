// SPDX-License-Identifier: Apache-2.0

package reconcile

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/engine"
	"github.com/tidecache/tidecache/pkg/store"
)

// A planned move (spec.MoveTo, tidectl volume move) hands a volume on a
// shared origin to the node keeping its replica without writing its
// cache back, in three steps, each safe to repeat after a crash:
//
//  1. the owner waits until the replica is on MoveTo and the mirror is
//     whole, then stops the volume once its device is closed
//     (engine.StopForMove: the write cache committed on both legs, the
//     peer leg detached, the layout kept);
//  2. it hands the spec over (Node = MoveTo, MovedFrom = itself) in a
//     transaction that holds only while the spec is as it read it and no
//     record says the replica is outdated, as a failover does; the new
//     node takes the volume over from its replica (createShared);
//  3. the old owner, seeing the spec name the new node and itself as
//     MovedFrom, drops its copy without writing it back
//     (engine.ReleaseVolume): the new node's copy is the volume now.
//
// Until step 2 commits, the owner owns the volume and its copy is whole:
// a move cancelled (MoveTo cleared) or refused starts it again here. Once
// it commits, only the new node starts it. No fence is needed: the old
// owner stopped the volume itself before giving it up.

// moveOut carries out a planned move of a volume this node owns when its
// replica is ready to take it: ok is false when the pass goes on as usual
// (the replica is still being built or resynced on MoveTo).
func (c *Controller) moveOut(ctx context.Context, o observation, st api.VolumeStatus) (outcome, bool) {
	spec, v := o.spec, o.actual
	switch {
	case !o.exists:
		return c.fail(ctx, st, Terminal(fmt.Errorf("move to node %s: the volume does not run on this node: nothing to hand over", spec.MoveTo)), nil), true
	case c.cfg.SharedOrigins == nil:
		return c.fail(ctx, st, Terminal(fmt.Errorf("move to node %s: this node's daemon runs no shared origins", spec.MoveTo)), &v), true
	}
	// A volume stopped by an earlier pass (or not started since a
	// reboot) is judged by its layout's record of the legs.
	stopped := v.State == api.StateInactive
	if v.PeerNode != spec.MoveTo || len(v.MirrorOutOfSync) > 0 || (!stopped && (v.Mirror == nil || v.Mirror.Degraded)) {
		c.log.Info("planned move waits until the replica on the target holds every write", "volume", spec.Name, "to", spec.MoveTo,
			"peer", v.PeerNode, "mirror", mirrorHealth(v))
		return outcome{}, false
	}
	st.State = api.StateMoving
	if err := c.putStatus(ctx, st, &v); err != nil {
		return outcome{err: err}, true
	}
	start := time.Now()
	c.log.Info("planned move: stopping the volume to hand it over", "volume", spec.Name, "to", spec.MoveTo)
	err := c.cfg.SharedOrigins.StopForMove(ctx, spec.Name, spec.MoveTo)
	switch {
	case errors.Is(err, engine.ErrInUse), errors.Is(err, engine.ErrMirrorNotWhole):
		// Looked at again soon: the caller closes the device, md
		// finishes a resync.
		st.Error = fmt.Sprintf("move to node %s waits: %v", spec.MoveTo, err)
		return outcome{res: Result{RequeueAfter: replicaWait}, err: c.putStatus(ctx, st, &v)}, true
	case err != nil:
		return c.fail(ctx, st, fmt.Errorf("stop the volume for its move to node %s: %w", spec.MoveTo, err), &v), true
	}
	moved := spec
	moved.Node, moved.Pool = spec.MoveTo, spec.ReplicaPool
	moved.ReplicaNode, moved.ReplicaPool = "", ""
	moved.MoveTo, moved.FailedOverFrom, moved.MovedFrom = "", "", spec.Node
	moved.MoveCalledOff = nil
	sctx, cancel := c.storeCtx(ctx)
	_, err = c.store.FailOverVolumeSpec(sctx, moved, o.revision)
	cancel()
	if errors.Is(err, store.ErrReplicaOutdated) {
		// The replica missed writes after all (the peer failed them
		// between the check and the stop): the volume stays, and starts
		// again here once the move is called off.
		c.log.Error("planned move refused: the replica is recorded outdated; the volume stays on this node", "volume", spec.Name, "to", spec.MoveTo)
		kept := spec
		kept.MoveTo = ""
		kept.MoveCalledOff = &api.CalledOffMove{To: spec.MoveTo, Why: fmt.Sprintf(
			"move to node %s refused at the handover: this node recorded the replica there outdated (it missed writes acknowledged here); the volume stays, and a move can be asked for again once the mirror is whole", spec.MoveTo)}
		sctx, cancel := c.storeCtx(ctx)
		_, uerr := c.store.UpdateVolumeSpec(sctx, kept, o.revision)
		cancel()
		st.State, st.Error = api.StateError, fmt.Sprintf("move to node %s refused: %v", spec.MoveTo, err)
		return outcome{res: Result{RequeueAfter: replicaWait}, err: errors.Join(uerr, c.putStatus(ctx, st, &v))}, true
	}
	if err != nil {
		// Stopped, not handed over: the next pass hands it over (the
		// stop is done), or starts it again if the move was called off.
		return outcome{err: fmt.Errorf("hand the volume over to node %s: %w", spec.MoveTo, err)}, true
	}
	c.log.Warn("volume handed over to the node keeping its replica, its write cache not written back",
		"volume", spec.Name, "to", spec.MoveTo, "stopped_and_handed_over_in", time.Since(start).Round(time.Millisecond))
	// The next pass sees the spec name the new node and drops this
	// node's copy.
	return outcome{res: Result{RequeueAfter: time.Millisecond}}, true
}

// releaseMoved drops this node's copy of a volume it handed over in a
// planned move, without writing it back: the new node took the volume
// over from its replica, which holds everything this copy holds. Once
// dropped (or found gone), later passes do nothing (Controller.released).
func (c *Controller) releaseMoved(ctx context.Context, spec api.VolumeSpec) error {
	if c.cfg.SharedOrigins == nil {
		return nil
	}
	c.mu.Lock()
	done := c.released[spec.Name]
	c.mu.Unlock()
	if done {
		return nil
	}
	err := c.cfg.SharedOrigins.ReleaseVolume(ctx, spec.Name)
	switch {
	case errors.Is(err, engine.ErrVolumeNotFound):
	case err != nil:
		return fmt.Errorf("drop this node's copy of volume %s, moved to node %s: %w", spec.Name, spec.Node, err)
	default:
		c.log.Info("this node's copy of a volume moved to another node dropped, not written back", "volume", spec.Name, "to", spec.Node)
	}
	c.mu.Lock()
	c.released[spec.Name] = true
	c.mu.Unlock()
	return nil
}

// mirrorHealth is a volume's write mirror health for the log.
func mirrorHealth(v engine.VolumeInfo) string {
	if v.Mirror == nil {
		return "not running"
	}
	return fmt.Sprintf("%s, %.1f%% in sync", v.Mirror.HealthString(), v.Mirror.SyncPercent)
}
