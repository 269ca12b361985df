// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/google/uuid"

	"github.com/tidecache/tidecache/pkg/blockdev"
	"github.com/tidecache/tidecache/pkg/mdraid"
	"github.com/tidecache/tidecache/pkg/nvmeof"
	"github.com/tidecache/tidecache/pkg/pool"
	"github.com/tidecache/tidecache/pkg/superblock"
)

// CreatePoolRequest describes a new pool: SSDs that will hold cache slices
// and the HDD array volumes are carved from, either an existing device
// (Origin) or disks to assemble into md RAID10 (RAID10).
type CreatePoolRequest struct {
	Name   string
	SSDs   []string
	Origin string
	RAID10 []string
	// Force allows devices that carry a filesystem, RAID or partition
	// signature. Their content is lost. It does not allow a device of
	// another tidecache pool: see DestroyPool.
	Force bool
	// DestroyPool names (by name or UUID) the one tidecache pool whose
	// devices may be taken: a device carrying a superblock of any pool, a
	// damaged one included, or a disk of a pool's md origin, is refused
	// otherwise, even with Force, because that pool's cache may hold the
	// only copy of recent writes even while it is not assembled. For a
	// damaged superblock that names no readable pool, the device's path
	// stands for the pool. A DestroyPool that no given device belongs to
	// is refused.
	DestroyPool string
	// AssumeClean skips the initial RAID10 resync; only correct on new,
	// zeroed disks.
	AssumeClean bool
}

// ErrPoolExists is returned when a pool of that name is already on the node.
var ErrPoolExists = errors.New("pool already exists")

// ErrPoolNotFound is returned for an unknown pool name.
var ErrPoolNotFound = errors.New("pool not found")

// ErrUnsafeDevice marks a device refused because it holds data or is used.
var ErrUnsafeDevice = errors.New("device is not safe to use")

// ErrOtherPool marks a device refused because it belongs to another
// tidecache pool; errors.Is also matches ErrUnsafeDevice.
var ErrOtherPool = errors.New("device belongs to another tidecache pool")

// otherPoolError is a device of another pool, refused without DestroyPool.
type otherPoolError struct{ msg string }

func (e *otherPoolError) Error() string { return e.msg }

func (e *otherPoolError) Is(target error) bool {
	return target == ErrOtherPool || target == ErrUnsafeDevice
}

// CreatePool checks every device, assembles the RAID10 if asked, and
// writes the first superblock to each SSD and to the origin. Nothing is
// written until every check has passed.
func (e *Engine) CreatePool(ctx context.Context, req CreatePoolRequest) (PoolInfo, error) {
	if err := pool.ValidateName("pool", req.Name); err != nil {
		return PoolInfo{}, err
	}
	if len(req.SSDs) == 0 && req.Origin == "" && len(req.RAID10) == 0 {
		return PoolInfo{}, fmt.Errorf("pool %s: give SSDs, an origin (an HDD array or the disks of a RAID10), or both", req.Name)
	}
	if req.Origin != "" && len(req.RAID10) > 0 {
		return PoolInfo{}, fmt.Errorf("pool %s: give either an origin device or the disks for a RAID10, not both", req.Name)
	}
	unlock, err := e.lock(ctx)
	if err != nil {
		return PoolInfo{}, err
	}
	defer unlock()

	found, err := e.scan(ctx)
	if err != nil {
		return PoolInfo{}, err
	}
	if _, ok := found.byName(req.Name); ok {
		return PoolInfo{}, fmt.Errorf("pool %s: %w", req.Name, ErrPoolExists)
	}

	type arg struct{ flag, path string }
	var all []arg
	for _, p := range req.SSDs {
		all = append(all, arg{"--ssd", p})
	}
	for _, p := range req.RAID10 {
		all = append(all, arg{"--raid10", p})
	}
	if req.Origin != "" {
		all = append(all, arg{"--origin", req.Origin})
	}
	// Regular files, directories and the like first: a typo or a disk
	// image must not get as far as the other checks' messages.
	seen := map[string]string{}
	for _, a := range all {
		dev, err := blockdev.LookupBlock(a.path)
		if errors.Is(err, blockdev.ErrNotBlockDevice) {
			return PoolInfo{}, fmt.Errorf("pool %s: %s %w; tidecache takes block devices only (losetup makes one of a disk image)", req.Name, a.flag, err)
		}
		if err != nil {
			return PoolInfo{}, fmt.Errorf("pool %s: %w", req.Name, err)
		}
		if prev, dup := seen[dev.Path]; dup {
			return PoolInfo{}, fmt.Errorf("pool %s: %s and %s are the same device", req.Name, prev, a.path)
		}
		seen[dev.Path] = a.path
	}
	destroyed := false
	for _, a := range all {
		took, err := e.checkFree(ctx, a.path, req, found)
		if err != nil {
			return PoolInfo{}, fmt.Errorf("pool %s: %w", req.Name, err)
		}
		destroyed = destroyed || took
	}
	if req.DestroyPool != "" && !destroyed {
		return PoolInfo{}, fmt.Errorf("pool %s: --destroy-pool %s: none of the devices given belongs to pool %s; nothing was written",
			req.Name, req.DestroyPool, req.DestroyPool)
	}

	l := &pool.Layout{Name: req.Name, UUID: newUUID(), Generation: 1}
	ps := &poolState{Members: map[string]string{}, Generations: map[string]uint64{}}
	for _, p := range req.SSDs {
		size, err := blockdev.Size(p)
		if err != nil {
			return PoolInfo{}, fmt.Errorf("pool %s: %w", req.Name, err)
		}
		if err := pool.CheckMemberSize(p, size); err != nil {
			return PoolInfo{}, fmt.Errorf("pool %s: %w", req.Name, err)
		}
		m := pool.Member{UUID: newUUID(), Path: p, SizeSectors: size / pool.SectorSize}
		l.Members = append(l.Members, m)
		ps.Members[m.UUID] = p
	}

	origin := pool.Origin{Path: req.Origin}
	if req.Origin != "" || len(req.RAID10) > 0 {
		if origin, err = e.makeOrigin(ctx, req); err != nil {
			return PoolInfo{}, err
		}
	}
	l.Origin = origin

	// Every check passed. Old tidecache superblocks (allowed by --force, or
	// left on disks an earlier pool's RAID10 was built from) go first, so
	// the new pool's first generation is the only record on its devices.
	devs := slices.Collect(maps.Values(ps.Members))
	if origin.Path != "" {
		devs = append(devs, origin.Path)
	}
	for _, dev := range devs {
		if err := e.wipeSuperblock(dev); err != nil {
			return PoolInfo{}, fmt.Errorf("pool %s: %w", req.Name, err)
		}
	}
	if err := e.writeLayout(ps, origin.Path, l); err != nil {
		return PoolInfo{}, err
	}
	e.log.Info("pool created", "pool", l.Name, "uuid", l.UUID, "ssds", len(l.Members), "origin", origin.Path)
	return e.poolInfo(ps, origin.Path), nil
}

// makeOrigin assembles the RAID10 a pool request asks for, or describes
// the origin device it names, checked against the minimum size.
func (e *Engine) makeOrigin(ctx context.Context, req CreatePoolRequest) (pool.Origin, error) {
	origin := pool.Origin{Path: req.Origin}
	if len(req.RAID10) > 0 {
		arr, err := e.md.Create(ctx, mdraid.CreateOptions{
			Name: "tc-" + req.Name, Level: "10", Devices: req.RAID10,
			AssumeClean: req.AssumeClean, Force: req.Force,
		})
		if err != nil {
			return pool.Origin{}, fmt.Errorf("pool %s: create RAID10: %w", req.Name, err)
		}
		origin = pool.Origin{Path: arr.Path, MDUUID: arr.UUID}
		e.log.Info("RAID10 created", "pool", req.Name, "device", arr.Path, "md_uuid", arr.UUID)
	} else if arr, err := e.md.Detail(ctx, req.Origin); err == nil && arr.UUID != "" {
		// An existing md array: remember its UUID so boot assembly finds it
		// whatever its /dev/mdN number becomes.
		origin.MDUUID = arr.UUID
		if arr.Path != "" {
			origin.Path = arr.Path
		}
	}
	size, err := blockdev.Size(origin.Path)
	if err != nil {
		return pool.Origin{}, fmt.Errorf("pool %s: origin: %w", req.Name, err)
	}
	if err := pool.CheckOriginSize(origin.Path, size); err != nil {
		return pool.Origin{}, fmt.Errorf("pool %s: %w", req.Name, err)
	}
	origin.SizeSectors = size / pool.SectorSize
	return origin, nil
}

// checkFree refuses a device that is missing, in use, holds data, or
// belongs to another tidecache pool. Being in use is never forgiven:
// writing under a mounted filesystem or a running array corrupts it. Data
// is forgiven by req.Force; another pool's device only by req.DestroyPool
// naming that pool, in which case took is true.
func (e *Engine) checkFree(ctx context.Context, path string, req CreatePoolRequest, found scanResult) (took bool, err error) {
	if err := e.checker.CheckUnused(ctx, path); err != nil {
		return false, fmt.Errorf("%w: %w", ErrUnsafeDevice, err)
	}
	sigs, err := e.prober.Probe(ctx, path)
	if err != nil {
		return false, fmt.Errorf("probe %s: %w", path, err)
	}
	claims, err := e.poolClaims(path, sigs, found)
	if err != nil {
		return false, err
	}
	for _, c := range claims {
		if !c.namedBy(req.DestroyPool, path) {
			return false, c.refusal(path)
		}
		e.log.Warn("destroying a device of another pool (--destroy-pool)", "device", c.dev, "pool", c.name, "pool_uuid", c.uuid, "role", c.role)
		took = true
	}
	var held []string
	for _, s := range sigs {
		held = append(held, fmt.Sprintf("%s (%s)", s.Type, s.Usage))
	}
	if len(held) > 0 && !req.Force {
		return false, fmt.Errorf("%w: %s holds %s; use --force to overwrite it (its data will be lost)", ErrUnsafeDevice, path, strings.Join(held, ", "))
	}
	if len(held) > 0 {
		e.log.Warn("overwriting device with signatures (--force)", "device", path, "signatures", strings.Join(held, ", "))
	}
	return took, nil
}

// poolClaim says that a device belongs to a tidecache pool.
type poolClaim struct {
	dev        string // the device, or its partition, that says so
	role       string // "SSD member", "origin", "RAID10 disk of the origin"
	name, uuid string // the pool; "" when it cannot be told
	damaged    error  // the read error of a damaged superblock
}

// namedBy reports whether --destroy-pool value names the claimed pool: by
// name or UUID, or, for a pool that cannot be identified, by the path of
// the device given or of the one carrying the superblock.
func (c poolClaim) namedBy(value, path string) bool {
	switch {
	case value == "":
		return false
	case c.name != "" || c.uuid != "":
		return value == c.name || value == c.uuid
	default:
		return value == path || value == c.dev
	}
}

func (c poolClaim) refusal(path string) error {
	what := path
	if c.dev != path {
		what += " (through " + c.dev + ")"
	}
	const why = "--force does not overwrite another pool's device: its cache may hold that pool's only copy of recent writes, even while the pool is not assembled"
	var msg string
	switch {
	case c.damaged != nil && c.name == "":
		msg = fmt.Sprintf("%s holds a damaged tidecache superblock of a pool that cannot be identified (%v); %s. To destroy it anyway, add --destroy-pool %s",
			what, c.damaged, why, path)
	case c.damaged != nil:
		msg = fmt.Sprintf("%s holds a damaged tidecache superblock (%v); pool %q (uuid %s) lists it as its %s; %s. To destroy pool %q and reuse the device, add --destroy-pool %s",
			what, c.damaged, c.name, c.uuid, c.role, why, c.name, c.name)
	default:
		uuid := c.uuid
		if uuid == "" {
			uuid = "unknown"
		}
		msg = fmt.Sprintf("%s is the %s of tidecache pool %q (uuid %s); %s. To destroy pool %q and reuse the device, add --destroy-pool %s",
			what, c.role, c.name, uuid, why, c.name, c.name)
	}
	return &otherPoolError{msg: ErrUnsafeDevice.Error() + ": " + msg}
}

// poolClaims finds the tidecache pools the device at path belongs to:
//   - a superblock on the device or on one of its partitions, in either
//     slot; a damaged or newer-format one counts too, identified through
//     the layout of another device of its pool (found) when it can be;
//   - an md signature (sigs) of the array a pool's RAID10 origin was
//     built as: the md UUID a known layout records, or the array name
//     "tc-<pool>" tidecache gives it.
func (e *Engine) poolClaims(path string, sigs []blockdev.Signature, found scanResult) ([]poolClaim, error) {
	devs := []string{path}
	if name, err := blockdev.Name(e.cfg.SysRoot, path); err == nil {
		parts, err := blockdev.Partitions(e.cfg.SysRoot, name)
		if err != nil {
			return nil, fmt.Errorf("check %s for tidecache superblocks: %w", path, err)
		}
		for _, p := range parts {
			devs = append(devs, "/dev/"+strings.ReplaceAll(p, "!", "/"))
		}
	}
	// On a disk of a stopped md array, a superblock read at the disk's
	// head may be the array's, seen through md's data offset.
	mdMember := slices.ContainsFunc(sigs, func(s blockdev.Signature) bool { return s.Type == "linux_raid_member" })
	var claims []poolClaim
	add := func(c poolClaim) {
		for _, prev := range claims {
			if c.name != "" && prev.name == c.name && prev.uuid == c.uuid || c.name == "" && prev.dev == c.dev {
				return
			}
		}
		claims = append(claims, c)
	}
	for _, d := range devs {
		sb, err := readSuperblock(d)
		var corrupt *superblock.CorruptError
		var newer *superblock.VersionError
		switch {
		case err == nil:
			role := "SSD member"
			switch {
			case sb.Role == superblock.RoleOrigin && mdMember:
				role = "RAID10 disk of the origin"
			case sb.Role == superblock.RoleOrigin:
				role = "origin"
			}
			add(poolClaim{dev: d, role: role, name: sb.Layout.Name, uuid: sb.Layout.UUID})
		case isNoSuperblock(err):
		case errors.As(err, &corrupt), errors.As(err, &newer):
			c := poolClaim{dev: d, damaged: err}
			if p, role, ok := found.listing(d); ok {
				c.name, c.uuid, c.role = p.Layout.Name, p.Layout.UUID, role
			}
			add(c)
		default:
			return nil, fmt.Errorf("cannot tell whether %s belongs to a tidecache pool: %w", path, err)
		}
	}
	for _, s := range sigs {
		if s.Type != "linux_raid_member" {
			continue
		}
		c := poolClaim{dev: path, role: "RAID10 disk of the origin"}
		for _, p := range found.Pools {
			if md := p.Layout.Origin.MDUUID; md != "" && hexOnly(md) == hexOnly(s.UUID) {
				c.name, c.uuid = p.Layout.Name, p.Layout.UUID
			}
		}
		if _, array, ok := strings.Cut(s.Label, ":"); c.name == "" && ok {
			if name, ok := strings.CutPrefix(array, "tc-"); ok {
				c.name = name
				if p, ok := found.byName(name); ok {
					c.uuid = p.Layout.UUID
				}
			}
		}
		if c.name != "" {
			add(c)
		}
	}
	return claims, nil
}

// listing returns the pool whose layout records dev as a member or as its
// origin, and the role; dev and the recorded paths are compared with
// symlinks resolved.
func (r scanResult) listing(dev string) (*poolState, string, bool) {
	real, err := filepath.EvalSymlinks(dev)
	if err != nil {
		return nil, "", false
	}
	same := func(p string) bool {
		r, err := filepath.EvalSymlinks(p)
		return err == nil && r == real
	}
	for _, p := range r.sortedPools() {
		for _, m := range p.Layout.Members {
			if same(m.Path) {
				return p, "SSD member", true
			}
		}
		if same(p.Layout.Origin.Path) {
			return p, "origin", true
		}
	}
	return nil, "", false
}

// hexOnly lower-cases an md UUID and drops its separators, so that mdadm's
// "3b2a4c1e:8f0d2b6a:..." and blkid's "3b2a4c1e-8f0d-2b6a-..." compare.
func hexOnly(uuid string) string {
	return strings.ToLower(strings.NewReplacer(":", "", "-", "").Replace(uuid))
}

// PoolInfo is the view of one pool shown by `tidectl pool show`.
type PoolInfo struct {
	Name       string       `json:"name"`
	UUID       string       `json:"uuid"`
	Generation uint64       `json:"generation"`
	Origin     OriginInfo   `json:"origin"`
	Members    []MemberInfo `json:"members"`
	Volumes    []string     `json:"volumes"`
	// Replicas are the slices the pool keeps for other nodes' mirrors.
	Replicas []PoolReplica `json:"replicas,omitempty"`
}

// PoolReplica is a replica slice a pool keeps for another node's mirror.
type PoolReplica struct {
	Volume    string `json:"volume"`
	Owner     string `json:"owner"`
	SizeBytes uint64 `json:"size_bytes"`
	Member    string `json:"member"`
	NQN       string `json:"nqn"`
}

// OriginInfo describes the pool's HDD array.
type OriginInfo struct {
	Path      string `json:"path"`
	MDUUID    string `json:"md_uuid,omitempty"`
	SizeBytes uint64 `json:"size_bytes"`
	FreeBytes uint64 `json:"free_bytes"`
}

// MemberInfo describes one SSD of the pool.
type MemberInfo struct {
	UUID       string `json:"uuid"`
	Path       string `json:"path"`
	Present    bool   `json:"present"`
	Generation uint64 `json:"generation"`
	SizeBytes  uint64 `json:"size_bytes"`
	FreeBytes  uint64 `json:"free_bytes"`
}

// Pools lists every pool found on the node's devices.
func (e *Engine) Pools(ctx context.Context) ([]PoolInfo, error) {
	found, err := e.scan(ctx)
	if err != nil {
		return nil, err
	}
	var out []PoolInfo
	for _, p := range found.sortedPools() {
		out = append(out, e.poolInfo(p, p.Layout.Origin.Path))
	}
	return out, nil
}

// Pool returns one pool by name.
func (e *Engine) Pool(ctx context.Context, name string) (PoolInfo, error) {
	found, err := e.scan(ctx)
	if err != nil {
		return PoolInfo{}, err
	}
	p, ok := found.byName(name)
	if !ok {
		return PoolInfo{}, fmt.Errorf("pool %s: %w", name, ErrPoolNotFound)
	}
	return e.poolInfo(p, p.Layout.Origin.Path), nil
}

func (e *Engine) poolInfo(p *poolState, origin string) PoolInfo {
	l := p.Layout
	freeOrigin, freeMembers := l.Free()
	info := PoolInfo{
		Name: l.Name, UUID: l.UUID, Generation: l.Generation,
		Origin: OriginInfo{
			Path: origin, MDUUID: l.Origin.MDUUID,
			SizeBytes: l.Origin.SizeSectors * pool.SectorSize, FreeBytes: freeOrigin * pool.SectorSize,
		},
		Volumes: []string{},
	}
	for _, m := range l.Members {
		path, ok := p.Members[m.UUID]
		if !ok {
			path = m.Path
		}
		info.Members = append(info.Members, MemberInfo{
			UUID: m.UUID, Path: path, Present: ok, Generation: p.Generations[m.UUID],
			SizeBytes: m.SizeSectors * pool.SectorSize, FreeBytes: freeMembers[m.UUID] * pool.SectorSize,
		})
	}
	for _, v := range l.Volumes {
		info.Volumes = append(info.Volumes, v.Name)
	}
	for _, r := range l.Replicas {
		info.Replicas = append(info.Replicas, PoolReplica{Volume: r.Volume, Owner: r.Owner, SizeBytes: r.Extent.Length * pool.SectorSize,
			Member: r.Extent.Member, NQN: nvmeof.ReplicaNQN(r.UUID)})
	}
	return info
}

// newUUID returns a random RFC 4122 version 4 UUID.
func newUUID() string { return uuid.NewString() }
