// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/tidecache/tidecache/pkg/blockdev"
	"github.com/tidecache/tidecache/pkg/pool"
	"github.com/tidecache/tidecache/pkg/stack"
)

// Adopting a device puts a cache in front of data that is already there
// (an md array with the database on it) instead of a new, empty extent of
// the pool's origin. Nothing is written to the device but through the
// cache; the layout, on the pool's SSDs, is its only record, and names the
// device by identifiers that survive a reboot (pool.Adopted).

// ErrNoIdentity is returned for a device tidecache could not find again
// after a reboot: it has no md UUID, WWN, serial or partition UUID.
var ErrNoIdentity = errors.New("device has no stable identifier")

// AdoptRequest asks to cache an existing device.
type AdoptRequest struct {
	Pool   string // "" for the node's only pool
	Device string
	// Volume holds the name and the caches; its Size is left 0 (the
	// device is cached whole) and its Adopt is filled in here.
	Volume pool.VolumeRequest
	// Replaceable says the device's content is not data to keep but an
	// earlier tenant's, to be wiped by whoever makes a filesystem on the
	// cached device (a CSI claim's export, api.SharedOrigin.Provisioned):
	// the write cache then takes the pool's block size unless one is
	// asked, whatever unit the device or an old filesystem on it has.
	Replaceable bool
}

// AdoptVolume caches an existing device: it checks that the device is a
// block device no one uses and no pool owns, records its identity, carves
// the cache slices, records the layout and activates the stack. The
// device's content is untouched; /dev/mapper/tc-<name> shows it, cached.
func (e *Engine) AdoptVolume(ctx context.Context, req AdoptRequest) (VolumeInfo, error) {
	name := req.Volume.Name
	if err := pool.ValidateName("volume", name); err != nil {
		return VolumeInfo{}, err
	}
	if req.Volume.Size != 0 || req.Volume.Adopt != nil {
		return VolumeInfo{}, fmt.Errorf("volume %s: an adopted device is cached whole: %w", name, pool.ErrInvalidRequest)
	}
	if req.Volume.Protect == pool.ProtectPeer && req.Volume.Peer == nil {
		return VolumeInfo{}, fmt.Errorf("volume %s: protection peer is placed by the cluster; adopt with --protect local or none: %w", name, pool.ErrInvalidRequest)
	}
	dev, err := blockdev.LookupBlock(req.Device)
	if err != nil {
		return VolumeInfo{}, fmt.Errorf("volume %s: %w", name, err)
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
		if _, ok := p.Layout.Volume(name); ok {
			return VolumeInfo{}, fmt.Errorf("volume %s: %w in pool %s", name, pool.ErrVolumeExists, p.Layout.Name)
		}
	}
	p, err := pickPool(found, req.Pool)
	if err != nil {
		return VolumeInfo{}, err
	}
	if missing := p.missing(); len(missing) > 0 {
		return VolumeInfo{}, fmt.Errorf("pool %s: SSD members %v are missing; repair the pool before adopting a device", p.Layout.Name, missing)
	}
	if _, err := e.dm.Info(ctx, stack.DeviceName(name, stack.RoleTop)); err == nil {
		return VolumeInfo{}, fmt.Errorf("volume %s: a device named %s already exists", name, stack.DeviceName(name, stack.RoleTop))
	}
	if err := e.checkAdoptable(ctx, name, dev.Path); err != nil {
		return VolumeInfo{}, err
	}
	adopted, err := e.identify(ctx, dev.Path)
	if err != nil {
		return VolumeInfo{}, fmt.Errorf("volume %s: %w", name, err)
	}
	if req.Volume.WriteCache > 0 {
		if req.Volume.BlockSize, err = e.adoptBlockSize(ctx, dev.Path, req.Volume.BlockSize, req.Replaceable); err != nil {
			return VolumeInfo{}, fmt.Errorf("volume %s: %w", name, err)
		}
	}
	origin, err := e.resolveOrigin(ctx, p.Layout)
	if err != nil {
		return VolumeInfo{}, err
	}
	if r := req.Volume.Peer; req.Volume.Protect == pool.ProtectPeer {
		// As for a created volume: the peer leg must answer before
		// anything is recorded (a shared origin, adopted through the
		// cluster, mirrors to a peer's replica).
		dev, err := e.attachRemote(ctx, *r, pool.BytesToSectors(req.Volume.WriteCache), FailoverLegTimeouts)
		if err != nil {
			return VolumeInfo{}, fmt.Errorf("volume %s: %w", name, err)
		}
		p.Remote[r.UUID] = dev
	}
	vreq := withReadBlockSize(req.Volume, e.cfg.Tuning)
	vreq.Adopt = &adopted
	next, v, err := addVolume(p.Layout, vreq)
	if err != nil {
		return VolumeInfo{}, fmt.Errorf("pool %s: %w", p.Layout.Name, err)
	}
	if p.Adopted == nil {
		p.Adopted = map[string]string{}
	}
	p.Adopted[v.UUID] = dev.Path
	st, err := e.recordAndActivate(ctx, p, origin, next, v)
	if err != nil {
		return VolumeInfo{}, err
	}
	if err := e.syncAdoptedRules(ctx, layoutsWith(found, p, next), "", dev.Path); err != nil {
		// The volume is up; the bare device keeps its links until the
		// next assembly writes the rules. Say so, do not undo.
		e.log.Warn("adopted device keeps its /dev/disk links", "volume", name, "device", dev.Path, "err", err)
	}
	e.log.Info("device adopted", "volume", name, "pool", p.Layout.Name, "device", adopted.String(), "mode", v.Mode, "top", st.Top().Path())
	return e.volumeInfo(ctx, p, v), nil
}

// checkAdoptable refuses a device that tidecache owns (a pool's SSD or
// origin, a superblock of any kind) or that something uses: adopting a
// mounted filesystem would put a second writer beside the first.
func (e *Engine) checkAdoptable(ctx context.Context, name, path string) error {
	switch sb, err := readSuperblock(path); {
	case err == nil:
		return fmt.Errorf("volume %s: %s holds a tidecache superblock (pool %s): it is a pool's device, not data to adopt: %w", name, path, sb.Layout.Name, ErrUnsafeDevice)
	case !isNoSuperblock(err):
		return fmt.Errorf("volume %s: %s: %w", name, path, err)
	}
	// A device another volume adopted is held by that volume's origin
	// device, and refused just below as in use.
	if err := e.checker.CheckUnused(ctx, path); err != nil {
		if errors.Is(err, blockdev.ErrInUse) {
			return fmt.Errorf("volume %s: %w\nAdopt a device nothing uses: stop the service that writes to it (e.g. systemctl stop mariadb), "+
				"umount it, run this again, then mount %s in its place and change its /etc/fstab line to that device "+
				"(docs/runbook.md, \"Cache a device that already holds data\")", name, err, "/dev/mapper/"+stack.DeviceName(name, stack.RoleTop))
		}
		return fmt.Errorf("volume %s: %w", name, err)
	}
	return nil
}

// adoptBlockSize returns the write cache's block size for an adopted
// device; asked is the one the user gave, 0 for none. dm-writecache makes
// its block size the logical block size of the device it presents, and a
// filesystem whose own unit is smaller cannot be mounted on it: ext4 with
// 1 KiB blocks, or XFS made on a disk with 512-byte sectors, which every
// 512e HDD array has. So the block size never exceeds the unit of the
// filesystem on the device (blkid's BLOCK_SIZE). On a device without a
// filesystem blkid knows, the default is the device's own logical block
// size, what its users could address, and the user may ask for more. A
// replaceable device (AdoptRequest.Replaceable) holds nothing to mount or
// address: it takes the pool's block size unless asked otherwise.
func (e *Engine) adoptBlockSize(ctx context.Context, path string, asked uint32, replaceable bool) (uint32, error) {
	if replaceable {
		if asked == 0 {
			return pool.DefaultBlockSize, nil
		}
		return asked, nil
	}
	sigs, err := e.prober.Probe(ctx, path)
	if err != nil {
		return 0, err
	}
	for _, s := range sigs {
		if s.Usage != "filesystem" || s.BlockSize == 0 {
			continue
		}
		limit := min(s.BlockSize, pool.DefaultBlockSize)
		switch {
		case asked == 0:
			return limit, nil
		case asked > limit:
			return 0, fmt.Errorf("%w: write-cache block size %d is larger than the %d-byte unit of the %s filesystem on %s, which could not be mounted through the cache; give --block-size %d, or leave it out",
				pool.ErrInvalidRequest, asked, s.BlockSize, s.Type, path, limit)
		}
		return asked, nil
	}
	if asked != 0 {
		return asked, nil
	}
	return blockdev.LogicalBlockSize(path)
}

// identify returns what the layout records of a device to adopt: its
// size and the identifiers that find it again. An md array is known by
// its array UUID; a disk, LUN or partition by its WWN, serial or
// partition UUID.
func (e *Engine) identify(ctx context.Context, path string) (pool.Adopted, error) {
	size, err := blockdev.Size(path)
	if err != nil {
		return pool.Adopted{}, err
	}
	a := pool.Adopted{Path: path, SizeSectors: size / pool.SectorSize}
	if arr, err := e.md.Detail(ctx, path); err == nil && arr.UUID != "" {
		a.MDUUID = arr.UUID
		if arr.Path != "" {
			a.Path = arr.Path
		}
		return a, nil
	}
	id, err := e.prober.Identify(ctx, e.cfg.SysRoot, path)
	if err != nil {
		return pool.Adopted{}, err
	}
	a.WWN, a.Serial, a.PartUUID = id.WWN, id.Serial, id.PartUUID
	if !a.HasIdentity() {
		return pool.Adopted{}, fmt.Errorf("%s: %w that tidecache could find it by after a reboot (no md uuid, wwn, serial or partition uuid); "+
			"adopt a GPT partition of it, or give the disk a serial", path, ErrNoIdentity)
	}
	return a, nil
}

// findAdopted locates the devices of a layout's adopted volumes on this
// node: the path of each one found, by volume UUID, and why each other
// one was not.
func (e *Engine) findAdopted(ctx context.Context, l *pool.Layout) (map[string]string, map[string]error) {
	paths, errs := map[string]string{}, map[string]error{}
	for _, v := range l.Volumes {
		if v.Adopted == nil {
			continue
		}
		path, err := e.locate(ctx, *v.Adopted)
		if err != nil {
			errs[v.UUID] = fmt.Errorf("volume %s: adopted device %s: %w", v.Name, v.Adopted, err)
			e.log.Warn("adopted device not found", "volume", v.Name, "device", v.Adopted.String(), "err", err)
			continue
		}
		paths[v.UUID] = path
	}
	return paths, errs
}

// locate finds the device a names: an md array is assembled by its UUID
// if it is not running; any other device is looked for among every block
// device by its identifiers. More than one match, or a device smaller
// than the one adopted, is refused rather than guessed at.
func (e *Engine) locate(ctx context.Context, a pool.Adopted) (string, error) {
	var path string
	if a.MDUUID != "" {
		arr, err := e.md.AssembleByUUID(ctx, a.MDUUID, mdName(a.Path))
		if err != nil {
			return "", err
		}
		path = arr.Path
	} else {
		devs, err := blockdev.ListBlockDevices(e.cfg.SysRoot)
		if err != nil {
			return "", err
		}
		var matches []string
		for _, d := range devs {
			if e.skipScan(d) {
				continue
			}
			id, err := e.prober.Identify(ctx, e.cfg.SysRoot, d)
			if err != nil {
				continue
			}
			if (&pool.Adopted{WWN: id.WWN, Serial: id.Serial, PartUUID: id.PartUUID}).Same(&a) {
				matches = append(matches, d)
			}
		}
		switch len(matches) {
		case 0:
			return "", errors.New("no device on this node has its identifiers")
		case 1:
			path = matches[0]
		default:
			return "", fmt.Errorf("devices %v all carry its identifiers (a cloned disk?); disconnect the copies", matches)
		}
	}
	size, err := blockdev.Size(path)
	if err != nil {
		return "", err
	}
	if size/pool.SectorSize < a.SizeSectors {
		return "", fmt.Errorf("%s has %d sectors, fewer than the %d it had when it was adopted: not the same device, or it lost its end", path, size/pool.SectorSize, a.SizeSectors)
	}
	return path, nil
}

// DetachVolume ends the caching of an adopted device and leaves it a plain
// device again: the volume is drained to passthrough first (every dirty
// block written back, with progress), then its devices are removed and
// its slices freed. Its device must not be open (unmount it first).
func (e *Engine) DetachVolume(ctx context.Context, name string, progress ProgressFunc) error {
	if err := e.checkAdopted(ctx, name); err != nil {
		return err
	}
	if err := e.SetMode(ctx, name, pool.ModePassthrough, progress); err != nil {
		return fmt.Errorf("volume %s: drain before detaching: %w", name, err)
	}
	return e.deleteVolume(ctx, name, false, true)
}

// checkAdopted refuses a volume that did not adopt its device.
func (e *Engine) checkAdopted(ctx context.Context, name string) error {
	unlock, _, v, err := e.lockVolume(ctx, name)
	if err != nil {
		return err
	}
	defer unlock()
	if v.Adopted == nil {
		return fmt.Errorf("volume %s was carved from its pool's origin, not adopted: there is no device to give back; "+
			"copy its data off, then `tidectl volume delete %s`", name, name)
	}
	return nil
}
