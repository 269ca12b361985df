// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tidecache/tidecache/pkg/dm"
	"github.com/tidecache/tidecache/pkg/nvmeof"
	"github.com/tidecache/tidecache/pkg/pool"
	"github.com/tidecache/tidecache/pkg/stack"
)

// ErrVolumeNotFound is returned for an unknown volume name; it is the
// layout's own sentinel so callers test one error whichever layer failed.
var ErrVolumeNotFound = pool.ErrVolumeNotFound

// ErrDirty is returned when an operation would drop a write cache that
// still holds data not yet written to the origin.
var ErrDirty = errors.New("write cache holds dirty data")

// ErrInUse is returned when a volume's device is open (mounted, or used by
// a database or another device).
var ErrInUse = errors.New("volume is in use")

// CreateVolume carves a volume out of a pool and activates its stack. The
// new cache slices are zeroed and the layout is recorded on every device
// before the volume's devices exist, so a crash at any point leaves either
// no volume or one boot assembly can bring up.
func (e *Engine) CreateVolume(ctx context.Context, poolName string, req pool.VolumeRequest) (VolumeInfo, error) {
	if err := pool.ValidateName("volume", req.Name); err != nil {
		return VolumeInfo{}, err
	}
	unlock, err := e.lock(ctx)
	if err != nil {
		return VolumeInfo{}, err
	}
	defer unlock()

	found, err := e.scan(ctx)
	if err != nil {
		return VolumeInfo{}, err
	}
	for _, p := range found.Pools {
		if _, ok := p.Layout.Volume(req.Name); ok {
			return VolumeInfo{}, fmt.Errorf("volume %s: %w in pool %s", req.Name, pool.ErrVolumeExists, p.Layout.Name)
		}
	}
	p, err := pickPool(found, poolName)
	if err != nil {
		return VolumeInfo{}, err
	}
	if missing := p.missing(); len(missing) > 0 {
		return VolumeInfo{}, fmt.Errorf("pool %s: SSD members %v are missing; repair the pool before creating volumes", p.Layout.Name, missing)
	}
	if _, err := e.dm.Info(ctx, stack.DeviceName(req.Name, stack.RoleTop)); err == nil {
		return VolumeInfo{}, fmt.Errorf("volume %s: a device named %s already exists", req.Name, stack.DeviceName(req.Name, stack.RoleTop))
	}
	origin, err := e.resolveOrigin(ctx, p.Layout)
	if err != nil {
		return VolumeInfo{}, err
	}

	if req.Protect == pool.ProtectPeer {
		// The peer leg must answer before anything is recorded: a
		// volume is never created with a leg it could not reach.
		if req.Peer == nil {
			return VolumeInfo{}, fmt.Errorf("volume %s: protection peer needs the peer's replica: %w", req.Name, pool.ErrInvalidRequest)
		}
		for _, r := range []*pool.RemoteLeg{req.Peer0, req.Peer} {
			if r == nil {
				continue
			}
			dev, err := e.attachRemote(ctx, *r, pool.BytesToSectors(req.WriteCache), nvmeof.PeerLegTimeouts)
			if err != nil {
				return VolumeInfo{}, fmt.Errorf("volume %s: %w", req.Name, err)
			}
			p.Remote[r.UUID] = dev
		}
	}
	next, v, err := addVolume(p.Layout, withReadBlockSize(req, e.cfg.Tuning))
	if err != nil {
		return VolumeInfo{}, fmt.Errorf("pool %s: %w", p.Layout.Name, err)
	}
	st, err := e.recordAndActivate(ctx, p, origin, next, v)
	if err != nil {
		return VolumeInfo{}, err
	}
	e.log.Info("volume created", "volume", v.Name, "pool", p.Layout.Name, "mode", v.Mode, "device", st.Top().Path())
	return e.volumeInfo(ctx, p, v), nil
}

// recordAndActivate brings a volume just added to next (a copy of p's
// layout) to life: it builds the stack, checks that the kernel has every
// target before anything is written, zeroes the new cache slices, records
// next on the pool's devices, then activates the stack. A crash at any
// point leaves either no volume or one boot assembly can bring up.
func (e *Engine) recordAndActivate(ctx context.Context, p *poolState, origin string, next *pool.Layout, v pool.Volume) (stack.Stack, error) {
	st, err := stack.Build(v, e.devices(p, origin), e.cfg.Tuning)
	if err != nil {
		return stack.Stack{}, err
	}
	if err := e.requireTargets(ctx, st); err != nil {
		return stack.Stack{}, err
	}
	if err := e.zeroCacheHeads(p, v, true, true); err != nil {
		return stack.Stack{}, err
	}
	if err := e.wipeOriginEnds(origin, v); err != nil {
		return stack.Stack{}, err
	}
	if err := e.writeLayout(p, origin, next); err != nil {
		return stack.Stack{}, err
	}
	if err := e.activate(ctx, st); err != nil {
		// Leave the layout as written: the volume exists on disk and the
		// next assemble or create-retry finishes it. Report what broke.
		return stack.Stack{}, fmt.Errorf("volume %s recorded but not active: %w", v.Name, err)
	}
	return st, nil
}

// addVolume adds the volume to a copy of the layout. A request that names
// no protection gets the safest the pool can give: a write cache mirrored
// on two SSDs when the pool has two with room for it (with the rest of
// the volume), else one copy.
func addVolume(l *pool.Layout, req pool.VolumeRequest) (*pool.Layout, pool.Volume, error) {
	if req.Protect == "" && req.WriteCache > 0 {
		mirrored := req
		mirrored.Protect = pool.ProtectLocal
		next := l.Clone()
		v, err := next.AddVolume(mirrored, newUUID(), time.Now())
		if err == nil || !errors.Is(err, pool.ErrNoSpace) {
			return next, v, err
		}
	}
	next := l.Clone()
	v, err := next.AddVolume(req, newUUID(), time.Now())
	return next, v, err
}

// withReadBlockSize fills the node's read block size into a request for a
// read cache that chose none, so the volume records the block size its
// dm-cache metadata is formatted with. dm-cache refuses to load a table
// whose block size differs from the one in its metadata, and boot
// assembly reuses that metadata: a volume that followed the node default
// would lose its read tier (and fail to assemble) the day the default
// changed.
func withReadBlockSize(req pool.VolumeRequest, t stack.Tuning) pool.VolumeRequest {
	if req.ReadCache > 0 && req.ReadBlockSize == 0 {
		req.ReadBlockSize = uint32(stack.NewReadBlockSectors(t) * pool.SectorSize)
	}
	return req
}

// pickPool returns the named pool, or the only pool when name is empty.
func pickPool(found scanResult, name string) (*poolState, error) {
	if name != "" {
		p, ok := found.byName(name)
		if !ok {
			return nil, fmt.Errorf("pool %s: %w", name, ErrPoolNotFound)
		}
		return p, nil
	}
	switch len(found.Pools) {
	case 0:
		return nil, fmt.Errorf("no pool on this node: create one with `tidectl pool create`: %w", ErrPoolNotFound)
	case 1:
		for _, p := range found.Pools {
			return p, nil
		}
	}
	return nil, fmt.Errorf("%d pools on this node: say which one with --pool", len(found.Pools))
}

// zeroCacheHeads zeroes the metadata head of a volume's write slice and/or
// read metadata slice, so the cache targets built on them start empty.
func (e *Engine) zeroCacheHeads(p *poolState, v pool.Volume, write, read bool) error {
	var extents []pool.Extent
	if write && v.WriteCache != nil && !v.CacheOnPeers() {
		extents = append(extents, *v.WriteCache)
		// Both legs of a mirror, and their dm-raid metadata: a raid1 that
		// finds no superblock on either leg starts as a new array.
		if m := v.WriteMirror; m != nil {
			extents = append(extents, m.Meta)
			if m.Remote == nil {
				extents = append(extents, m.Leg, m.LegMeta)
			}
		}
	}
	if read && v.ReadMeta != nil {
		extents = append(extents, *v.ReadMeta)
	}
	// A peer leg's metadata heads its replica, on the attached export;
	// for a write cache on peers, leg 0's data after it heads the cache.
	for _, r := range v.PeerLegs() {
		if !write {
			break
		}
		path, ok := p.Remote[r.UUID]
		if !ok {
			return fmt.Errorf("volume %s: peer leg %d on node %s not attached", v.Name, r.Index, r.Node)
		}
		heads := []pool.Extent{{Length: pool.MirrorMetaSectors}}
		if r.Index == 0 {
			heads = append(heads, pool.Extent{Offset: pool.MirrorMetaSectors, Length: v.WriteCache.Length})
		}
		for _, h := range heads {
			if err := e.zeroHead(path, h); err != nil {
				return fmt.Errorf("volume %s: peer leg %d: %w", v.Name, r.Index, err)
			}
		}
	}
	for _, x := range extents {
		path, ok := p.Members[x.Member]
		if !ok {
			return fmt.Errorf("volume %s: SSD member %s missing", v.Name, x.Member)
		}
		if err := e.zeroHead(path, x); err != nil {
			return fmt.Errorf("volume %s: %w", v.Name, err)
		}
	}
	return nil
}

// originWipeBytes is how much of each end of a new volume's origin extent
// is zeroed: where filesystems, partition tables and RAID members keep
// their signatures (ext4 and XFS at the start, GPT's backup and md's
// 0.90/1.0 superblocks at the end).
const originWipeBytes = 1 << 20

// wipeOriginEnds zeroes both ends of a new volume's extent of the pool's
// origin, so that a volume carved where a deleted one was does not come up
// with that volume's filesystem (mounted by a CSI node or an fstab entry
// by UUID, it would hand one user's data to another), as lvcreate wipes
// signatures. The rest of the extent keeps its old bytes, as with lvm: a
// raw reader of a new volume must not expect zeros. The extent is not in
// the layout yet, so nothing reads it; an adopted device is never written.
func (e *Engine) wipeOriginEnds(origin string, v pool.Volume) error {
	if v.Adopted != nil || origin == "" {
		return nil
	}
	size := v.Origin.Length * pool.SectorSize
	n := min(uint64(originWipeBytes), size)
	start := int64(v.Origin.Offset) * pool.SectorSize
	return e.wipeOrigin(origin, v.Name, n, start, start+int64(size-n))
}

// wipeGrownEnd zeroes the last originWipeBytes of a volume that grew from
// had sectors, at its new end: space no volume used a moment ago, where a
// deleted volume may have left a GPT backup or an md superblock that would
// now sit at the end of this one. The filesystem grows into the space only
// after the growth returns, so nothing of the volume's is there yet.
func (e *Engine) wipeGrownEnd(origin string, v pool.Volume, had uint64) error {
	exts := v.OriginExtents()
	last := exts[len(exts)-1]
	n := min(uint64(originWipeBytes), (v.SizeSectors()-had)*pool.SectorSize, last.Length*pool.SectorSize)
	if v.Adopted != nil || origin == "" || n == 0 {
		return nil
	}
	return e.wipeOrigin(origin, v.Name, n, int64(last.End()*pool.SectorSize-n))
}

// wipeOrigin writes n zero bytes at each offset of the origin and syncs.
func (e *Engine) wipeOrigin(origin, volume string, n uint64, offsets ...int64) error {
	f, err := e.disks.openForWrite(origin)
	if err != nil {
		return fmt.Errorf("volume %s: wipe the signatures of its origin extent: %w", volume, err)
	}
	defer f.Close()
	zeros := make([]byte, n)
	for _, off := range offsets {
		if _, err := f.WriteAt(zeros, off); err != nil {
			return fmt.Errorf("volume %s: wipe the signatures of its origin extent on %s at byte %d: %w", volume, origin, off, err)
		}
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("volume %s: sync %s: %w", volume, origin, err)
	}
	return f.Close()
}

// activate brings every device of a stack up, bottom-up, once the kernel
// is known to have every target it needs.
func (e *Engine) activate(ctx context.Context, st stack.Stack) error {
	if err := e.requireTargets(ctx, st); err != nil {
		return err
	}
	for _, d := range st.Devices {
		if _, err := e.ensure(ctx, d); err != nil {
			return err
		}
	}
	return nil
}

// DeleteVolume removes a volume's devices and frees its extents. A volume
// whose write cache holds dirty blocks is refused unless force is set:
// those blocks were acknowledged to the writer and exist nowhere else.
// A volume that is open is always refused.
//
// An adopted volume is refused: its device holds the user's data, and
// DetachVolume gives it back.
func (e *Engine) DeleteVolume(ctx context.Context, name string, force bool) error {
	return e.deleteVolume(ctx, name, force, false)
}

// deleteVolume is DeleteVolume, and with detach the last step of
// DetachVolume: an adopted volume already drained to passthrough, so
// that no block of its device's data is left on the SSDs.
func (e *Engine) deleteVolume(ctx context.Context, name string, force, detach bool) error {
	unlock, p, v, err := e.lockVolume(ctx, name)
	if err != nil {
		return err
	}
	defer unlock()
	switch {
	case v.Adopted != nil && !detach:
		return fmt.Errorf("volume %s caches %s, which holds your data: `tidectl volume detach %s` writes the cache back and gives the device back as it is",
			name, v.Adopted, name)
	case detach && v.Mode != pool.ModePassthrough:
		return fmt.Errorf("volume %s: %w: it is in %s, not drained to passthrough; its device may lack cached writes", name, ErrDirty, v.Mode)
	case detach:
		force = false
	}
	top := stack.DeviceName(name, stack.RoleTop)
	info, err := e.dm.Info(ctx, top)
	switch {
	case errors.Is(err, dm.ErrNotFound):
		// Not running: its write cache cannot be inspected, so it may hold
		// dirty blocks nobody can see.
		if v.Mode == pool.ModeWriteback && !force {
			return fmt.Errorf("volume %s: %w: it is not active, so its write cache cannot be checked for dirty blocks; run `tidecached assemble` and flush it first, or --force to discard them",
				name, ErrDirty)
		}
	case err != nil:
		return fmt.Errorf("volume %s: %w", name, err)
	default:
		if info.OpenCount > 0 {
			return fmt.Errorf("volume %s: %w: %s is open %d time(s); unmount it first", name, ErrInUse, dm.DevicePath(top), info.OpenCount)
		}
		_, wc, ok, err := e.writeTier(ctx, name)
		if err != nil {
			return fmt.Errorf("volume %s: %w", name, err)
		}
		if ok && wc.DirtyBlocks() > 0 {
			if !force {
				return fmt.Errorf("volume %s: %w: %d blocks (%s) not yet on the origin; run `tidectl volume flush %s` first, or --force to discard them",
					name, ErrDirty, wc.DirtyBlocks(), pool.FormatBytes(wc.DirtyBlocks()*uint64(blockSize(*v))), name)
			}
			e.log.Warn("deleting volume with dirty cache blocks (--force): they are lost", "volume", name, "dirty_blocks", wc.DirtyBlocks())
		}
	}
	if err := e.removeStack(ctx, *v); err != nil {
		return err
	}
	origin, err := e.resolveOrigin(ctx, p.Layout)
	if err != nil {
		return err
	}
	next := p.Layout.Clone()
	if err := next.RemoveVolume(name); err != nil {
		return err
	}
	if err := e.writeLayout(p, origin, next); err != nil {
		return err
	}
	// The peer leg's export is no longer needed here; the peer drops
	// its replica once the cluster no longer places it there.
	e.detachPeerLegs(ctx, *v, "peer leg not detached")
	if detach {
		if err := e.syncAdoptedRules(ctx, []*pool.Layout{next}, p.Layout.Name+"/"+name, p.Adopted[v.UUID]); err != nil {
			e.log.Warn("detached device may lack its /dev/disk links until udev sees it again", "volume", name, "err", err)
		}
		e.log.Info("volume detached: its device is a plain device again", "volume", name, "pool", p.Layout.Name, "device", v.Adopted.String())
		return nil
	}
	e.log.Info("volume deleted", "volume", name, "pool", p.Layout.Name)
	return nil
}

// removeStack removes every device a volume may have, top-down, whatever
// its mode.
func (e *Engine) removeStack(ctx context.Context, v pool.Volume) error {
	for _, r := range stack.Roles {
		if err := e.removeDevice(ctx, stack.DeviceName(v.Name, r)); err != nil {
			return fmt.Errorf("volume %s: %w", v.Name, err)
		}
	}
	return nil
}

// lockVolume takes the change lock and finds a volume in the pools on the
// node's devices. On success the caller must call unlock.
func (e *Engine) lockVolume(ctx context.Context, name string) (unlock func(), p *poolState, v *pool.Volume, err error) {
	unlock, err = e.lock(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	found, err := e.scan(ctx)
	if err == nil {
		p, v, err = findVolume(found, name)
	}
	if err != nil {
		unlock()
		return nil, nil, nil, err
	}
	return unlock, p, v, nil
}

// findVolume finds a volume in any pool.
func findVolume(found scanResult, name string) (*poolState, *pool.Volume, error) {
	for _, p := range found.Pools {
		if v, ok := p.Layout.Volume(name); ok {
			return p, v, nil
		}
	}
	return nil, nil, fmt.Errorf("volume %s: %w", name, ErrVolumeNotFound)
}

func blockSize(v pool.Volume) uint32 {
	if v.BlockSize == 0 {
		return 4096
	}
	return v.BlockSize
}
