// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/tidecache/tidecache/pkg/blockdev"
	"github.com/tidecache/tidecache/pkg/pool"
	"github.com/tidecache/tidecache/pkg/stack"
	"github.com/tidecache/tidecache/pkg/superblock"
)

// poolState is one pool as found on this node's devices.
type poolState struct {
	Layout *pool.Layout
	// Members maps member UUID to the device path it was found at.
	Members map[string]string
	// Generations maps member UUID to the generation its superblock holds;
	// a member behind the newest generation missed an update.
	Generations map[string]uint64
	// Remote maps the UUID of each attached peer leg of the pool's
	// volumes to its block device.
	Remote map[string]string
	// Adopted maps the UUID of each adopted volume whose device was found
	// to the device's path; AdoptedErr says why each other one was not.
	Adopted    map[string]string
	AdoptedErr map[string]error
}

// missing returns the UUIDs of members the layout names but no device holds.
func (p *poolState) missing() []string {
	var out []string
	for _, m := range p.Layout.Members {
		if _, ok := p.Members[m.UUID]; !ok {
			out = append(out, m.UUID)
		}
	}
	return out
}

// devices returns the resolved paths of the pool's SSDs for stack building.
func (p *poolState) devices(origin string) stack.Devices {
	return stack.Devices{Origin: origin, Members: p.Members, Remote: p.Remote, Adopted: p.Adopted}
}

// CorruptDevice is a device whose tidecache superblock exists but cannot be
// trusted.
type CorruptDevice struct {
	Path string
	Err  error
}

// scanResult is what a scan of every block device found.
type scanResult struct {
	Pools   map[string]*poolState // by pool UUID
	Corrupt []CorruptDevice
}

func (r scanResult) byName(name string) (*poolState, bool) {
	for _, p := range r.Pools {
		if p.Layout.Name == name {
			return p, true
		}
	}
	return nil, false
}

func (r scanResult) sortedPools() []*poolState {
	out := make([]*poolState, 0, len(r.Pools))
	for _, p := range r.Pools {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Layout.Name < out[j].Layout.Name })
	return out
}

// scan reads the superblock of every block device on the node and groups
// SSD members into pools, keeping the newest layout of each pool. Origin
// superblocks only reveal pools none of whose SSDs is present; otherwise
// the origin is located from the layout and verified when it is needed.
func (e *Engine) scan(ctx context.Context) (scanResult, error) {
	res := scanResult{Pools: map[string]*poolState{}}
	origins := map[string]*pool.Layout{}
	err := e.eachSuperblock(ctx, func(path string, sb superblock.Superblock, err error) error {
		var corrupt *superblock.CorruptError
		var newer *superblock.VersionError
		switch {
		case err == nil:
		case isNoSuperblock(err):
			return nil
		case errors.As(err, &corrupt), errors.As(err, &newer):
			// Damaged, or written by a newer tidecache: either way this
			// build must not guess, and the pool it belongs to is refused.
			res.Corrupt = append(res.Corrupt, CorruptDevice{Path: path, Err: err})
			return nil
		default:
			// Unreadable devices (empty loop devices, ejected media) are
			// not pool members; note them for debugging only.
			e.log.Debug("scan: skip unreadable device", "device", path, "err", err)
			return nil
		}
		if sb.Role == superblock.RoleOrigin {
			if o, ok := origins[sb.Layout.UUID]; !ok || sb.Layout.Generation > o.Generation {
				origins[sb.Layout.UUID] = sb.Layout.Clone()
			}
			return nil
		}
		if sb.Role != superblock.RoleSSD {
			return nil
		}
		l := sb.Layout
		p, ok := res.Pools[l.UUID]
		if !ok {
			p = &poolState{Members: map[string]string{}, Generations: map[string]uint64{}}
			res.Pools[l.UUID] = p
		}
		if prev, dup := p.Members[sb.DeviceUUID]; dup {
			return fmt.Errorf("pool %s: member %s found on both %s and %s (cloned disk?); remove one", l.Name, sb.DeviceUUID, prev, path)
		}
		p.Members[sb.DeviceUUID] = path
		p.Generations[sb.DeviceUUID] = l.Generation
		if p.Layout == nil || l.Generation > p.Layout.Generation {
			p.Layout = l.Clone()
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	for uuid, l := range origins {
		p, ok := res.Pools[uuid]
		switch {
		case !ok:
			// An origin whose pool has no SSD here: every member is
			// missing. The pool is reported (and refused by assembly)
			// rather than ignored, since its cache may hold writes this
			// origin lacks.
			res.Pools[uuid] = &poolState{Layout: l, Members: map[string]string{}, Generations: map[string]uint64{}}
		case l.Generation > p.Layout.Generation:
			// The origin is written after every member, so it is ahead
			// only when the newest superblock of every SSD was damaged
			// (or the SSDs were rolled back). Its layout is then the
			// pool's newest record; the SSDs' older one may lack volumes
			// whose cache slices hold dirty data. Assembly rewrites the
			// members from it.
			e.log.Warn("origin superblock is newer than every SSD superblock; using its layout",
				"pool", l.Name, "generation", l.Generation, "ssd_generation", p.Layout.Generation)
			p.Layout = l
		}
	}
	for _, p := range res.Pools {
		p.Remote = e.remoteDevices(p.Layout)
		p.Adopted, p.AdoptedErr = e.findAdopted(ctx, p.Layout)
	}
	return res, nil
}

// skipScan reports devices whose superblock must not be read: tidecache's
// own dm devices (their content is user data), attached peer legs
// (another node's replica, which may hang while that node is down), md
// components (the array
// is what matters), whole disks with partitions (their content belongs to
// the partitions: a pool member on the first partition, at the usual
// 1 MiB alignment, would also be read through the disk, its slot A at the
// disk's slot B) and optical/floppy drives that may block on read.
func (e *Engine) skipScan(path string) bool {
	name := filepath.Base(path)
	if strings.HasPrefix(name, "sr") || strings.HasPrefix(name, "fd") || e.isReplicaExport(name) {
		return true
	}
	if parts, err := blockdev.Partitions(e.cfg.SysRoot, name); err == nil && len(parts) > 0 {
		return true
	}
	sys := filepath.Join(e.cfg.SysRoot, "class", "block", name)
	if uuid, err := os.ReadFile(filepath.Join(sys, "dm", "uuid")); err == nil && stack.Owned(strings.TrimSpace(string(uuid))) {
		return true
	}
	holders, _ := os.ReadDir(filepath.Join(sys, "holders"))
	for _, h := range holders {
		if strings.HasPrefix(h.Name(), "md") {
			return true
		}
	}
	return false
}

// resolveOrigin finds the pool's origin array on this node and proves it is
// the one the layout was made on: its own superblock must name the pool.
// An md origin is assembled if it is not running yet.
//
// A pool of SSDs alone has no origin: "" and no error.
func (e *Engine) resolveOrigin(ctx context.Context, l *pool.Layout) (string, error) {
	if !l.HasOrigin() {
		return "", nil
	}
	path := l.Origin.Path
	if l.Origin.MDUUID != "" {
		arr, err := e.md.AssembleByUUID(ctx, l.Origin.MDUUID, mdName(l.Origin.Path))
		if err != nil {
			return "", fmt.Errorf("pool %s: assemble origin array %s: %w", l.Name, l.Origin.MDUUID, err)
		}
		path = arr.Path
	}
	sb, err := readSuperblock(path)
	if l.Origin.MDUUID == "" && (err != nil || sb.Role != superblock.RoleOrigin || sb.Layout.UUID != l.UUID) {
		// A plain device or partition (say a partition of an md array
		// that came back under another number) has no identity but its
		// superblock: look for it under any name.
		if moved, ok := e.findOrigin(ctx, l); ok {
			e.log.Warn("pool origin found under another name", "pool", l.Name, "recorded", path, "found", moved)
			path = moved
			sb, err = readSuperblock(path)
		}
	}
	if err != nil {
		return "", fmt.Errorf("pool %s: origin %s: %w", l.Name, path, err)
	}
	if sb.Role != superblock.RoleOrigin || sb.Layout.UUID != l.UUID {
		return "", fmt.Errorf("pool %s: %s is not this pool's origin (its superblock names pool %q)", l.Name, path, sb.Layout.Name)
	}
	if sb.Layout.Generation > l.Generation {
		// scan adopts a newer origin layout when it sees the origin; here
		// it did not (the array was not assembled yet). Acting on the
		// older layout could drop volumes, or reuse their extents.
		return "", fmt.Errorf("pool %s: origin %s holds layout generation %d, newer than the %d on the SSDs (their newest superblocks are damaged or older copies); run the command again now that the origin is assembled",
			l.Name, path, sb.Layout.Generation, l.Generation)
	}
	size, err := blockdev.Size(path)
	if err != nil {
		return "", fmt.Errorf("pool %s: origin %s: %w", l.Name, path, err)
	}
	if size/pool.SectorSize < l.Origin.SizeSectors {
		return "", fmt.Errorf("pool %s: origin %s shrank: %d sectors, layout needs %d", l.Name, path, size/pool.SectorSize, l.Origin.SizeSectors)
	}
	return path, nil
}

// mdName returns the array name from a /dev/md/<name> path.
func mdName(path string) string {
	if rest, ok := strings.CutPrefix(path, "/dev/md/"); ok {
		return rest
	}
	return ""
}

// writeLayout records a layout on every member and on the origin. Members
// are written first: they are what boot assembly reads. A device that
// fails is reported; the others keep the newer generation, which wins on
// the next read.
func (e *Engine) writeLayout(p *poolState, origin string, l *pool.Layout) error {
	return e.recordLayout(p, origin, l, false)
}

// writeLayoutPresent records a layout on the members that are on the node
// and on the origin, for a pool with a member missing: the missing member
// keeps its older generation, and assembly rewrites it from the newest
// when it is back. Only the record of a write mirror's legs is written
// this way (see mirror.go).
func (e *Engine) writeLayoutPresent(p *poolState, origin string, l *pool.Layout) error {
	return e.recordLayout(p, origin, l, true)
}

func (e *Engine) recordLayout(p *poolState, origin string, l *pool.Layout, skipMissing bool) error {
	if err := l.Validate(); err != nil {
		return fmt.Errorf("pool %s: refusing to write an invalid layout: %w", l.Name, err)
	}
	for _, m := range l.Members {
		path, ok := p.Members[m.UUID]
		switch {
		case !ok && skipMissing:
			continue
		case !ok:
			return fmt.Errorf("pool %s: member %s is missing; cannot record the change", l.Name, m.UUID)
		}
		if err := e.writeSuperblock(path, superblock.Superblock{Role: superblock.RoleSSD, DeviceUUID: m.UUID, Layout: *l}); err != nil {
			return fmt.Errorf("pool %s: %w", l.Name, err)
		}
		p.Generations[m.UUID] = l.Generation
	}
	switch {
	case !l.HasOrigin():
		// SSDs only: the members hold every copy.
	case origin == "":
		return fmt.Errorf("pool %s: origin not resolved; cannot record the change", l.Name)
	default:
		if err := e.writeSuperblock(origin, superblock.Superblock{Role: superblock.RoleOrigin, DeviceUUID: l.UUID, Layout: *l}); err != nil {
			return fmt.Errorf("pool %s: %w", l.Name, err)
		}
	}
	p.Layout = l
	e.log.Info("layout written", "pool", l.Name, "generation", l.Generation, "missing_members", len(l.Members)-len(p.Members))
	e.updateExpected(l.UUID, l)
	return nil
}

// findOrigin looks through every block device for the one device that
// holds the origin superblock of pool l. It reports false when none or
// more than one does: two copies (a cloned disk) must not be guessed
// between.
func (e *Engine) findOrigin(ctx context.Context, l *pool.Layout) (string, bool) {
	var found []string
	err := e.eachSuperblock(ctx, func(path string, sb superblock.Superblock, err error) error {
		if err == nil && sb.Role == superblock.RoleOrigin && sb.Layout.UUID == l.UUID {
			found = append(found, path)
		}
		return nil
	})
	if err != nil || len(found) != 1 {
		return "", false
	}
	return found[0], true
}

// eachSuperblock reads the superblock of every block device scan may read
// (see skipScan) and hands each path with the result to fn, read error
// included: what an error means is the caller's call. It stops at the
// first error fn returns, or when ctx ends.
func (e *Engine) eachSuperblock(ctx context.Context, fn func(path string, sb superblock.Superblock, err error) error) error {
	devs, err := e.disks.list()
	if err != nil {
		return fmt.Errorf("scan block devices: %w", err)
	}
	for _, path := range devs {
		if err := ctx.Err(); err != nil {
			return err
		}
		if e.skipScan(path) {
			continue
		}
		sb, err := readSuperblock(path)
		if err := fn(path, sb, err); err != nil {
			return err
		}
	}
	return nil
}
