package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/google/uuid"

	"github.com/tidecache/tidecache/pkg/blockdev"
	"github.com/tidecache/tidecache/pkg/mdraid"
	"github.com/tidecache/tidecache/pkg/pool"
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
	// signature, or an old tidecache superblock. Their content is lost.
	Force bool
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

// CreatePool checks every device, assembles the RAID10 if asked, and
// writes the first superblock to each SSD and to the origin. Nothing is
// written until every check has passed.
func (e *Engine) CreatePool(ctx context.Context, req CreatePoolRequest) (PoolInfo, error) {
	if err := pool.ValidateName("pool", req.Name); err != nil {
		return PoolInfo{}, err
	}
	if len(req.SSDs) == 0 {
		return PoolInfo{}, fmt.Errorf("pool %s: at least one SSD is needed", req.Name)
	}
	if (req.Origin == "") == (len(req.RAID10) == 0) {
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

	seen := map[string]string{}
	all := append(append([]string{}, req.SSDs...), req.RAID10...)
	if req.Origin != "" {
		all = append(all, req.Origin)
	}
	for _, p := range all {
		real, err := blockdev.Resolve(p)
		if err != nil {
			return PoolInfo{}, fmt.Errorf("pool %s: %w", req.Name, err)
		}
		if prev, dup := seen[real]; dup {
			return PoolInfo{}, fmt.Errorf("pool %s: %s and %s are the same device", req.Name, prev, p)
		}
		seen[real] = p
		if err := e.checkFree(ctx, p, req.Force); err != nil {
			return PoolInfo{}, fmt.Errorf("pool %s: %w", req.Name, err)
		}
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
	if len(req.RAID10) > 0 {
		arr, err := e.md.Create(ctx, mdraid.CreateOptions{
			Name: "tc-" + req.Name, Level: "10", Devices: req.RAID10,
			AssumeClean: req.AssumeClean, Force: req.Force,
		})
		if err != nil {
			return PoolInfo{}, fmt.Errorf("pool %s: create RAID10: %w", req.Name, err)
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
		return PoolInfo{}, fmt.Errorf("pool %s: origin: %w", req.Name, err)
	}
	if err := pool.CheckOriginSize(origin.Path, size); err != nil {
		return PoolInfo{}, fmt.Errorf("pool %s: %w", req.Name, err)
	}
	origin.SizeSectors = size / pool.SectorSize
	l.Origin = origin

	// Every check passed. Old tidecache superblocks (allowed by --force, or
	// left on disks an earlier pool's RAID10 was built from) go first, so
	// the new pool's first generation is the only record on its devices.
	for _, dev := range append(slices.Collect(maps.Values(ps.Members)), origin.Path) {
		if err := wipeSuperblock(dev); err != nil {
			return PoolInfo{}, fmt.Errorf("pool %s: %w", req.Name, err)
		}
	}
	if err := e.writeLayout(ps, origin.Path, l); err != nil {
		return PoolInfo{}, err
	}
	e.log.Info("pool created", "pool", l.Name, "uuid", l.UUID, "ssds", len(l.Members), "origin", origin.Path)
	return e.poolInfo(ps, origin.Path), nil
}

// checkFree refuses a device that is missing, in use, or holds data, unless
// force allows the data part. Being in use is never forgiven: writing
// under a mounted filesystem or a running array corrupts it.
func (e *Engine) checkFree(ctx context.Context, path string, force bool) error {
	if err := e.checker.CheckUnused(ctx, path); err != nil {
		return fmt.Errorf("%w: %w", ErrUnsafeDevice, err)
	}
	sigs, err := e.prober.Probe(ctx, path)
	if err != nil {
		return fmt.Errorf("probe %s: %w", path, err)
	}
	var found []string
	for _, s := range sigs {
		found = append(found, fmt.Sprintf("%s (%s)", s.Type, s.Usage))
	}
	sb, err := readSuperblock(path)
	switch {
	case err == nil:
		found = append(found, fmt.Sprintf("tidecache superblock of pool %q", sb.Layout.Name))
	case !isNoSuperblock(err):
		found = append(found, fmt.Sprintf("damaged tidecache superblock (%v)", err))
	}
	if len(found) > 0 && !force {
		return fmt.Errorf("%w: %s holds %s; use --force to overwrite it (its data will be lost)", ErrUnsafeDevice, path, strings.Join(found, ", "))
	}
	if len(found) > 0 {
		e.log.Warn("overwriting device with signatures (--force)", "device", path, "signatures", strings.Join(found, ", "))
	}
	return nil
}

// PoolInfo is the view of one pool shown by `tidectl pool show`.
type PoolInfo struct {
	Name       string       `json:"name"`
	UUID       string       `json:"uuid"`
	Generation uint64       `json:"generation"`
	Origin     OriginInfo   `json:"origin"`
	Members    []MemberInfo `json:"members"`
	Volumes    []string     `json:"volumes"`
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
	return info
}

// newUUID returns a random RFC 4122 version 4 UUID.
func newUUID() string { return uuid.NewString() }
