// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"context"
	"fmt"
	"slices"

	"github.com/tidecache/tidecache/pkg/blockdev"
	"github.com/tidecache/tidecache/pkg/pool"
	"github.com/tidecache/tidecache/pkg/stack"
	"github.com/tidecache/tidecache/pkg/superblock"
)

// RemoveSSD takes an SSD out of a pool. Each volume with a cache slice on
// it is moved first, one at a time and live: drained to passthrough (with
// progress), its slices given new places on the other SSDs, then brought
// back to its mode on them (the new slices start empty). Then the layout
// without the SSD is written to the other SSDs and the origin, and the
// SSD's superblock is wiped last: it is a plain device again.
//
// A write cache mirrored on two SSDs of the pool gets both legs placed
// anew on two other SSDs, so a pool of two needs a third first
// (replace-ssd adds it). Nothing is changed unless every affected volume
// fits on the other SSDs (checked first on a copy of the layout).
// Refused: a write cache mirrored on a peer node with its local leg on
// the SSD, a replica kept there for a peer, the last SSD of a pool of
// SSDs alone, and a pool with a missing SSD.
//
// Crash-safe: each move is recorded before its live change (the new
// slices zeroed before the layout names them), so assembly after a cut
// builds the volume on its new slices; the SSD leaves the layout before
// its superblock is wiped, so a cut in between leaves a stale superblock
// that the pool ignores and that running the command again wipes.
func (e *Engine) RemoveSSD(ctx context.Context, poolName, device string, progress ProgressFunc) (PoolInfo, error) {
	dev, err := blockdev.LookupBlock(device)
	if err != nil {
		return PoolInfo{}, fmt.Errorf("pool %s: remove SSD: %w", poolName, err)
	}
	member, affected, done, err := e.planRemoveSSD(ctx, poolName, dev.Path)
	if err != nil || done {
		if err == nil {
			return e.poolByName(ctx, poolName)
		}
		return PoolInfo{}, err
	}
	for _, name := range affected {
		if err := e.moveVolumeOff(ctx, name, member, progress); err != nil {
			return PoolInfo{}, fmt.Errorf("pool %s: move volume %s off %s: %w", poolName, name, dev.Path, err)
		}
	}
	unlock, _, p, err := e.lockPool(ctx, poolName)
	if err != nil {
		return PoolInfo{}, err
	}
	defer unlock()
	origin, err := e.resolveOrigin(ctx, p.Layout)
	if err != nil {
		return PoolInfo{}, err
	}
	next := p.Layout.Clone()
	if err := next.RemoveMember(member); err != nil {
		return PoolInfo{}, err
	}
	delete(p.Members, member)
	if err := e.writeLayout(p, origin, next); err != nil {
		return PoolInfo{}, err
	}
	if err := e.pause(ctx, "remove-ssd:layout-written"); err != nil {
		return PoolInfo{}, err
	}
	if err := e.wipeSuperblock(dev.Path); err != nil {
		return PoolInfo{}, fmt.Errorf("pool %s: SSD %s left the pool, but: %w", poolName, dev.Path, err)
	}
	e.log.Info("SSD removed", "pool", poolName, "device", dev.Path, "member", member, "moved", affected)
	return e.poolInfo(p, origin), nil
}

// planRemoveSSD checks a removal and returns the member, the volumes to
// move off it, and done when the device had already left the pool (its
// stale superblock is wiped then).
func (e *Engine) planRemoveSSD(ctx context.Context, poolName, path string) (member string, affected []string, done bool, err error) {
	unlock, _, p, err := e.lockPool(ctx, poolName)
	if err != nil {
		return "", nil, false, err
	}
	defer unlock()
	for uuid, at := range p.Members {
		if at == path {
			member = uuid
		}
	}
	if member == "" {
		return "", nil, false, fmt.Errorf("pool %s: %s is not one of its SSDs", poolName, path)
	}
	if _, listed := p.Layout.Member(member); !listed {
		// Cut after the layout left it: finish.
		sb, rerr := readSuperblock(path)
		if rerr != nil || sb.Layout.UUID != p.Layout.UUID || sb.Role != superblock.RoleSSD {
			return "", nil, false, fmt.Errorf("pool %s: %s is not one of its SSDs", poolName, path)
		}
		if err := e.wipeSuperblock(path); err != nil {
			return "", nil, false, err
		}
		e.log.Info("stale superblock of a removed SSD wiped", "pool", poolName, "device", path)
		return member, nil, true, nil
	}
	if missing := p.missing(); len(missing) > 0 {
		return "", nil, false, fmt.Errorf("pool %s: SSD members %v are missing: bring them back or force-start the pool first", poolName, missing)
	}
	// Every move, then the removal, on a copy: nothing starts unless all
	// of it fits.
	trial := p.Layout.Clone()
	for _, v := range p.Layout.Volumes {
		if !slices.ContainsFunc(v.Extents(), func(r pool.RoleExtent) bool { return r.Extent.Member == member }) {
			continue
		}
		if err := trial.SetMode(v.Name, pool.ModePassthrough); err != nil {
			return "", nil, false, err
		}
		if err := trial.MoveOff(v.Name, member); err != nil {
			return "", nil, false, fmt.Errorf("pool %s: %w", poolName, err)
		}
		affected = append(affected, v.Name)
	}
	if err := trial.RemoveMember(member); err != nil {
		return "", nil, false, fmt.Errorf("pool %s: %w", poolName, err)
	}
	return member, affected, false, nil
}

// moveVolumeOff moves a volume's cache slices off member, live: drain to
// passthrough, then one layout change that gives the slices new places
// and restores the mode (their heads zeroed first), then the running
// stack built to it.
func (e *Engine) moveVolumeOff(ctx context.Context, name, member string, progress ProgressFunc) error {
	before, err := e.volumeMode(ctx, name)
	if err != nil {
		return err
	}
	if err := e.SetMode(ctx, name, pool.ModePassthrough, progress); err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	unlock, p, v, err := e.lockVolume(ctx, name)
	if err != nil {
		return err
	}
	defer unlock()
	next := p.Layout.Clone()
	if err := next.MoveOff(name, member); err != nil {
		return err
	}
	if err := next.SetMode(name, before); err != nil {
		return err
	}
	moved, _ := next.Volume(name)
	origin, err := e.resolveOrigin(ctx, p.Layout)
	if err != nil {
		return err
	}
	st, err := stack.Build(*moved, e.devices(p, origin), e.cfg.Tuning)
	if err != nil {
		return err
	}
	if err := e.requireTargets(ctx, st); err != nil {
		return err
	}
	if err := e.zeroCacheHeads(p, *moved, moved.WriteCache != nil, moved.ReadCache != nil); err != nil {
		return err
	}
	if err := e.writeLayout(p, origin, next); err != nil {
		return err
	}
	if err := e.pause(ctx, "remove-ssd:moved"); err != nil {
		return err
	}
	for _, d := range st.Devices {
		if err := e.repoint(ctx, d); err != nil {
			return fmt.Errorf("volume %s moved in its layout, but its devices: %w (tidectl volume repair %s)", name, err, name)
		}
	}
	e.log.Info("volume moved off an SSD", "volume", name, "mode", before, "from", member, "write_cache_was", v.WriteCache)
	return nil
}

// volumeMode returns the recorded mode of a volume.
func (e *Engine) volumeMode(ctx context.Context, name string) (pool.Mode, error) {
	unlock, _, v, err := e.lockVolume(ctx, name)
	if err != nil {
		return "", err
	}
	defer unlock()
	return v.Mode, nil
}

// poolByName returns the info of one pool.
func (e *Engine) poolByName(ctx context.Context, name string) (PoolInfo, error) {
	pools, err := e.Pools(ctx)
	if err != nil {
		return PoolInfo{}, err
	}
	for _, p := range pools {
		if p.Name == name {
			return p, nil
		}
	}
	return PoolInfo{}, fmt.Errorf("pool %s: %w", name, ErrPoolNotFound)
}

// lockPool takes the change lock and finds a pool by name in a scan of
// the node's devices. On success the caller must call unlock.
func (e *Engine) lockPool(ctx context.Context, name string) (unlock func(), found scanResult, p *poolState, err error) {
	unlock, err = e.lock(ctx)
	if err != nil {
		return nil, scanResult{}, nil, err
	}
	found, err = e.scan(ctx)
	if err == nil {
		var ok bool
		if p, ok = found.byName(name); !ok {
			err = fmt.Errorf("pool %s: %w", name, ErrPoolNotFound)
		}
	}
	if err != nil {
		unlock()
		return nil, scanResult{}, nil, err
	}
	return unlock, found, p, nil
}
