// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/tidecache/tidecache/pkg/dm"
	"github.com/tidecache/tidecache/pkg/pool"
	"github.com/tidecache/tidecache/pkg/stack"
)

// CheckVolume compares the running devices of a volume with the stack its
// layout describes and returns every difference as a *DriftError (joined),
// nil when they match. It changes nothing. A device that is missing
// altogether is reported as drift too.
func (e *Engine) CheckVolume(ctx context.Context, name string) error {
	found, err := e.scan(ctx)
	if err != nil {
		return err
	}
	p, v, err := findVolume(found, name)
	if err != nil {
		return err
	}
	return e.checkStack(ctx, p, v)
}

// RepairVolume brings a volume's devices back to the stack its layout
// describes: missing devices are created and devices whose table drifted
// are reloaded with the wanted one (suspend, load, resume). A drifted top
// device that is a writecache is only reloaded, never replaced by a table
// without the cache, so dirty blocks stay reachable. It returns the names
// of the devices it changed.
func (e *Engine) RepairVolume(ctx context.Context, name string) ([]string, error) {
	unlock, p, v, err := e.lockVolume(ctx, name)
	if err != nil {
		return nil, err
	}
	defer unlock()
	origin, err := e.resolveOrigin(ctx, p.Layout)
	if err != nil {
		return nil, err
	}
	// A volume that can fail over starts only with both legs: its
	// local SSD missing, leg 1 alone may be a replica that lacks writes
	// (recorded in etcd, not yet in the layout; see FailPeerLeg).
	if v.CanFailOver() && !v.CacheOnPeers() && v.Mode == pool.ModeWriteback && !e.running(ctx, name) {
		if _, ok := p.Members[v.WriteCache.Member]; !ok {
			return nil, fmt.Errorf("volume %s: its local leg's SSD %s is missing, and a volume on a shared origin starts only with both legs (its replica may lack writes); bring the SSD back (docs/runbook.md, \"A node died\")",
				name, v.WriteCache.Member)
		}
	}
	// A peer leg that is not attached is tried once: if its peer
	// answers, the mirror gets it back below; if not, it runs without.
	if peerLegsMissing(p, *v) {
		if failed, err := e.attachPeerLegs(ctx, p, *v); err != nil {
			if v.CanFailOver() && v.Mode == pool.ModeWriteback && !e.running(ctx, name) {
				// Started on one leg, it would acknowledge writes its
				// replica lacks before anything told the cluster, which
				// may fail the volume over to that replica: it starts
				// with both legs, or its daemon records the replica
				// outdated first when the running mirror loses it.
				return nil, fmt.Errorf("volume %s: a peer leg does not answer, and a volume on a shared origin starts only with both legs: %w",
					name, err)
			}
			e.log.Warn("peer legs not attached; the mirror runs without them", "volume", name, "legs", failed, "err", err)
		}
	}
	st, err := stack.Build(*v, e.devices(p, origin), e.cfg.Tuning)
	if err != nil {
		return nil, err
	}
	// Legs left out miss every write from now on: recorded before the
	// mirror runs without them, as boot assembly does, so that a crash
	// right after the start cannot leave a record calling them whole.
	if err := e.markAbsentLegs(ctx, p, *v, st); err != nil {
		return nil, fmt.Errorf("volume %s: %w", name, err)
	}
	if _, err := e.upgradeStack(ctx, p, *v, st, nil); err != nil {
		return nil, err
	}
	if err := e.requireTargets(ctx, st); err != nil {
		return nil, err
	}
	var changed []string
	for _, d := range st.Devices {
		created, err := e.ensure(ctx, d)
		var drift *DriftError
		switch {
		case errors.As(err, &drift):
			if rerr := e.reload(ctx, d.Name, d.Table, nil); rerr != nil {
				return changed, fmt.Errorf("volume %s: repair %s: %w", name, d.Name, rerr)
			}
			e.log.Warn("drift repaired", "volume", name, "dm_name", d.Name, "was", drift.Got, "now", drift.Want)
			changed = append(changed, d.Name)
		case err != nil:
			return changed, fmt.Errorf("volume %s: repair: %w", name, err)
		case created:
			changed = append(changed, d.Name)
		}
	}
	if refreshed, err := e.refreshMirror(ctx, *v, st); err != nil {
		return changed, fmt.Errorf("volume %s: repair: %w", name, err)
	} else if refreshed {
		changed = append(changed, stack.DeviceName(name, stack.RoleWriteData))
	}
	// Keep the record of out-of-sync legs in step (a leg back in sync is
	// cleared; a leg still being rebuilt stays recorded).
	if ms, running, err := e.mirrorStatus(ctx, name); err != nil {
		return changed, err
	} else if running {
		if err := e.recordOutOfSync(ctx, p, name, ms.RaidStatus); err != nil {
			return changed, err
		}
	}
	return changed, nil
}

// refreshMirror gives a failed leg of the write mirror back to dm-raid when
// the stack has its devices (its SSD is present): the same table is loaded
// again, and dm-raid takes the leg back and resyncs the regions its bitmap
// says were written while the leg was out, in the background. It reports
// whether it reloaded. A leg whose SSD still fails is marked failed again
// at its first error; the other leg serves I/O throughout.
func (e *Engine) refreshMirror(ctx context.Context, v pool.Volume, st stack.Stack) (bool, error) {
	raid, ok := st.Find(stack.RoleWriteData)
	if !ok || v.WriteMirror == nil {
		return false, nil
	}
	ms, running, err := e.mirrorStatus(ctx, v.Name)
	if err != nil || !running {
		return false, err
	}
	absent := absentLegs(st)
	dead := false
	for i, h := range ms.Health {
		if h == dm.LegDead && !slices.Contains(absent, i) {
			dead = true
		}
	}
	// A leg the running table leaves out whose device is here now (a
	// peer's export attached after boot) joins with the new table.
	joins := false
	if !dead && len(absent) < len(ms.Health)-ms.Copies {
		live, err := e.dm.Table(ctx, raid.Name)
		if err != nil {
			return false, fmt.Errorf("table of %s: %w", raid.Name, err)
		}
		joins = len(absent) < len(absentLegs(stack.Stack{Devices: []stack.Device{{Role: stack.RoleWriteData, Table: live}}}))
	}
	if !dead && !joins {
		return false, nil
	}
	if err := e.reload(ctx, raid.Name, raid.Table, nil); err != nil {
		return false, fmt.Errorf("refresh write mirror %s: %w", raid.Name, err)
	}
	e.log.Warn("write mirror leg given back to dm-raid, resyncing", "volume", v.Name, "dm_name", raid.Name, "health_was", ms.Health)
	return true, nil
}
