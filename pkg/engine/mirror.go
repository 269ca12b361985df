// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/tidecache/tidecache/pkg/dm"
	"github.com/tidecache/tidecache/pkg/pool"
	"github.com/tidecache/tidecache/pkg/stack"
)

// A write mirror leg that misses writes (its SSD failed, or was absent
// when the volume was assembled) holds a stale copy, and nothing on that
// SSD says so: its dm-raid superblock is the one it had. If the other SSD
// then dies, a mirror built on the stale leg alone would serve old blocks
// as current. The layout records such legs (pool.Mirror.OutOfSync), on
// every device still there and on the origin, so that assembly refuses to
// build on them alone (stack.ErrStaleLeg), and clears the record once
// dm-raid reports the leg back in sync.

// outOfSync returns the legs of a running mirror that lack writes: failed
// or absent, or being rebuilt ("recover"). During a resync after creation
// or an unclean stop every leg has every acknowledged write.
func outOfSync(ms dm.RaidStatus) []int {
	var legs []int
	for i, h := range ms.Health {
		switch {
		case h == dm.LegDead, h == dm.LegMissing:
			legs = append(legs, i)
		case h == dm.LegSyncing && ms.SyncAction != "resync":
			legs = append(legs, i)
		}
	}
	return legs
}

// RecordMirrors brings the layout's record of out-of-sync mirror legs in
// step with what dm-raid reports for every running mirror, and returns the
// volumes whose mirror has a failed leg (see GiveBackLeg). It reads only
// device-mapper status while nothing changed since its last call, so the
// daemon can call it every second; the superblocks are read and written
// only when a mirror's health changed.
func (e *Engine) RecordMirrors(ctx context.Context) (failed []string, err error) {
	running, err := e.runningMirrors(ctx)
	if err != nil {
		return nil, err
	}
	for vol, legs := range running {
		if len(legs) > 0 {
			failed = append(failed, vol)
		}
	}
	slices.Sort(failed)
	e.mu.Lock()
	same := maps.EqualFunc(running, e.mirrors, slices.Equal)
	e.mu.Unlock()
	if same {
		return failed, nil
	}
	unlock, err := e.lock(ctx)
	if err != nil {
		return failed, err
	}
	defer unlock()
	found, err := e.scan(ctx)
	if err != nil {
		return failed, err
	}
	var errs []error
	for _, p := range found.sortedPools() {
		for _, v := range p.Layout.Volumes {
			legs, ok := running[v.Name]
			if !ok || v.WriteMirror == nil {
				continue
			}
			if err := e.setOutOfSync(ctx, p, v.Name, legs); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return failed, err
	}
	e.mu.Lock()
	e.mirrors = running
	e.mu.Unlock()
	return failed, nil
}

// GiveBackLeg loads a volume's write mirror again when one of its legs has
// failed, or was left out, and that leg's device is on the node, as
// `volume repair` does: if the device answers again, dm-raid takes the leg
// back and resyncs it from its bitmap; if it does not, dm-raid fails the
// leg again at once and the other leg serves on. A peer leg is attached
// first (its export may have come back under another device name, which
// its two slices then follow). It reports whether it reloaded.
func (e *Engine) GiveBackLeg(ctx context.Context, name string) (bool, error) {
	unlock, p, v, err := e.lockVolume(ctx, name)
	if err != nil {
		return false, err
	}
	defer unlock()
	origin, err := e.resolveOrigin(ctx, p.Layout)
	if err != nil {
		return false, err
	}
	if _, err := e.attachPeerLegs(ctx, p, *v); err != nil {
		return false, err
	}
	st, err := stack.Build(*v, e.devices(p, origin), e.cfg.Tuning)
	if err != nil {
		return false, err
	}
	// The leg's own devices may have been replaced since (a drifted
	// table is for repair to look at): only a mirror whose local devices
	// all match the layout is reloaded here. A leg left out gets its
	// devices now; a peer leg's follow its export.
	for _, d := range st.Devices {
		switch d.Role {
		case stack.RoleWriteMeta0, stack.RoleWriteLeg0, stack.RoleWriteMeta1, stack.RoleWriteLeg1:
		default:
			continue
		}
		if peerLegRole(*v, d.Role) {
			err = e.repoint(ctx, d)
		} else {
			_, err = e.ensure(ctx, d)
		}
		if err != nil {
			return false, err
		}
	}
	return e.refreshMirror(ctx, *v, st)
}

// peerLegRole reports whether role is a slice of one of v's peer legs.
func peerLegRole(v pool.Volume, role stack.Role) bool {
	m := v.WriteMirror
	switch role {
	case stack.RoleWriteMeta0, stack.RoleWriteLeg0:
		return m != nil && m.Remote0 != nil
	case stack.RoleWriteMeta1, stack.RoleWriteLeg1:
		return m != nil && m.Remote != nil
	}
	return false
}

// repoint creates d, or loads d's table when the device exists with
// another one. It is for a peer leg's slices only: their table names the
// attached controller's namespace, which changes each time the export is
// attached anew, so a table that differs is expected there and not drift.
func (e *Engine) repoint(ctx context.Context, d stack.Device) error {
	_, err := e.ensure(ctx, d)
	var drift *DriftError
	if errors.As(err, &drift) {
		return e.reload(ctx, d.Name, d.Table, nil)
	}
	return err
}

// runningMirrors returns the out-of-sync legs of every running write
// mirror (tc-<volume>-wdata with a raid table), by volume name.
func (e *Engine) runningMirrors(ctx context.Context) (map[string][]int, error) {
	devs, err := e.dm.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("list dm devices: %w", err)
	}
	out := map[string][]int{}
	suffix := "-" + string(stack.RoleWriteData)
	for _, d := range devs {
		vol, ok := strings.CutSuffix(strings.TrimPrefix(d.Name, stack.NamePrefix), suffix)
		if !ok || !strings.HasPrefix(d.Name, stack.NamePrefix) {
			continue
		}
		ms, running, err := e.mirrorStatus(ctx, vol)
		if err != nil {
			return nil, err
		}
		if running {
			out[vol] = outOfSync(ms.RaidStatus)
		}
	}
	return out, nil
}

// recordOutOfSync records the legs of a volume's running mirror that lack
// writes, if the layout says otherwise, on every device of the pool still
// there.
func (e *Engine) recordOutOfSync(ctx context.Context, p *poolState, volume string, ms dm.RaidStatus) error {
	return e.setOutOfSync(ctx, p, volume, outOfSync(ms))
}

// setOutOfSync records the given legs as the volume's out-of-sync ones.
func (e *Engine) setOutOfSync(ctx context.Context, p *poolState, volume string, legs []int) error {
	next := p.Layout.Clone()
	changed, err := next.SetMirrorOutOfSync(volume, legs)
	if err != nil || !changed {
		return err
	}
	origin, err := e.resolveOrigin(ctx, p.Layout)
	if err != nil {
		return fmt.Errorf("volume %s: record mirror legs out of sync %v: %w", volume, legs, err)
	}
	if err := e.writeLayoutPresent(p, origin, next); err != nil {
		return fmt.Errorf("volume %s: record mirror legs out of sync %v: %w", volume, legs, err)
	}
	if len(legs) > 0 {
		e.log.Warn("write mirror legs recorded out of sync: never built alone until resynced", "volume", volume, "legs", legs)
	} else {
		e.log.Info("write mirror back in sync", "volume", volume)
	}
	return nil
}

// absentLegs returns the legs a built stack leaves out of the volume's
// mirror ("- -" in the raid table): their SSD is not on the node.
func absentLegs(st stack.Stack) []int {
	raid, ok := st.Find(stack.RoleWriteData)
	if !ok || raid.Table[0].Type != dm.RaidTarget {
		return nil
	}
	p, err := dm.ParseRaid1Params(raid.Table[0].Params)
	if err != nil {
		return nil
	}
	var legs []int
	for i, l := range p.Legs {
		if l.Data == dm.MissingLeg {
			legs = append(legs, i)
		}
	}
	return legs
}

// markAbsentLegs records, before a mirror is started without some of its
// legs, that those legs will miss every write from now on.
func (e *Engine) markAbsentLegs(ctx context.Context, p *poolState, v pool.Volume, st stack.Stack) error {
	absent := absentLegs(st)
	if len(absent) == 0 || v.WriteMirror == nil {
		return nil
	}
	legs := slices.Sorted(slices.Values(append(slices.Clone(v.WriteMirror.OutOfSync), absent...)))
	return e.setOutOfSync(ctx, p, v.Name, slices.Compact(legs))
}
