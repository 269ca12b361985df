// SPDX-License-Identifier: Apache-2.0

package pool

import (
	"errors"
	"fmt"
	"slices"
)

// Units and fixed geometry.
const (
	// SectorSize is the unit of every offset and length in a Layout.
	SectorSize = 512
	// Alignment is the boundary, in sectors, every extent starts and ends
	// on: 1 MiB, a multiple of every SSD erase/program unit and RAID chunk
	// size in practice.
	Alignment = 2048
	// ReservedSectors is the head of every member and of the origin that no
	// extent may use: the first 4 MiB hold the two superblock slots.
	ReservedSectors = 8192
)

// Minimum sizes in bytes. They apply when a pool is created or a volume is
// added; Validate does not enforce them, so a layout written by a release
// with other minimums still loads.
const (
	// MinMemberBytes is the smallest SSD tidecache accepts as a member: the
	// reserved head plus room for a few slices.
	MinMemberBytes = 64 << 20
	// MinOriginBytes is the smallest origin array: the reserved head plus
	// room for a few volumes.
	MinOriginBytes = 64 << 20
	// MinVolumeBytes is the smallest volume (origin extent).
	MinVolumeBytes = 16 << 20
	// MinWriteCacheBytes is the smallest write-tier (dm-writecache) slice.
	MinWriteCacheBytes = 16 << 20
	// MinReadCacheBytes is the smallest read-tier (dm-cache) data slice.
	MinReadCacheBytes = 16 << 20
	// MinReadMetaBytes is the smallest read-tier metadata slice; see
	// ReadMetaSectors.
	MinReadMetaBytes = 8 << 20
)

// MaxOriginExtents bounds the extents of one volume on the origin (Origin
// and OriginTail). Every growth past a neighbour adds one; the bound keeps
// a volume's dm-linear table and its share of the superblock small, and a
// volume that reaches it is better copied to a fresh volume than split
// further. Validate enforces it, so it can only be raised.
const MaxOriginExtents = 64

// ReadMetaBaseBytes, ReadMetaBytesPerBlock and ReadMetaBlockSectors define
// the size of a read tier's metadata slice. dm-cache needs about 4 MiB plus
// 16 bytes per cache block (kernel documentation, admin-guide/device-mapper/
// cache). The block count is taken at dm-cache's smallest block size,
// 32 KiB (MinReadBlockSize), so the slice is large enough for every block
// size a volume may choose: a larger block only means fewer blocks to
// track (the node default of 256 KiB leaves an 8x margin, 1 MiB a 32x one).
// Sizing for the smallest block also keeps the slice's size independent of
// the block size, so the two never have to be changed together.
const (
	ReadMetaBaseBytes     = 4 << 20
	ReadMetaBytesPerBlock = 16
	ReadMetaBlockSectors  = MinReadBlockSize / SectorSize
)

// Read-tier (dm-cache) block sizes a volume may choose, in bytes. dm-cache
// itself accepts any multiple of 32 KiB up to 1 GiB; tidecache keeps to
// powers of two up to 1 MiB, so a block always divides the 1 MiB-aligned
// slices and origin extents exactly and no partial block is left at the
// end of a device.
const (
	MinReadBlockSize = 32 << 10
	MaxReadBlockSize = 1 << 20
	// MinReadCacheBlocks is the fewest blocks a read cache must hold at the
	// chosen block size: below that smq has too few blocks to tell hot
	// from cold, and the tier caches next to nothing.
	MinReadCacheBlocks = 16
)

// Bounds of Tuning.AutocommitTimeMs, in milliseconds. dm-writecache takes
// up to an hour; above a minute a FUA-only write could stay uncommitted for
// longer than any database expects, so tidecache stops there.
const (
	MinAutocommitTimeMs = 1
	MaxAutocommitTimeMs = 60000
)

// DefaultBlockSize is the dm-writecache block size used when a request
// leaves it zero.
const DefaultBlockSize = 4096

// Sentinel errors; every returned error wraps one of them with context.
var (
	ErrNoSpace        = errors.New("not enough free space")
	ErrVolumeExists   = errors.New("volume already exists")
	ErrVolumeNotFound = errors.New("volume not found")
	ErrNoWriteCache   = errors.New("volume has no write cache slice")
	ErrTooSmall       = errors.New("device too small")
	ErrInvalidName    = errors.New("invalid name")
	ErrInvalidMode    = errors.New("invalid mode")
	ErrInvalidRequest = errors.New("invalid volume request")
	// ErrDirtyCacheLost refuses to start a pool without an SSD whose
	// writeback cache may hold acknowledged writes, unless accepted.
	ErrDirtyCacheLost = errors.New("dirty write cache would be lost")
)

// errorf returns an error with the formatted message that also matches
// sentinel with errors.Is, so messages read naturally ("volume "db" already
// exists in pool "fast"") instead of starting with the sentinel's text.
// A %w in format is unwrapped as usual.
func errorf(sentinel error, format string, a ...any) error {
	return &sentinelError{sentinel, fmt.Errorf(format, a...)}
}

type sentinelError struct {
	sentinel error
	err      error
}

func (e *sentinelError) Error() string   { return e.err.Error() }
func (e *sentinelError) Unwrap() []error { return []error{e.sentinel, e.err} }

// Mode is the caching mode of a volume.
type Mode string

// The modes a volume can run in.
const (
	// ModeWriteback acknowledges writes once they are on the write tier.
	// Only a volume with a WriteCache slice can be in writeback.
	ModeWriteback Mode = "writeback"
	// ModeWritethrough keeps nothing dirty on SSD: writes go to the origin,
	// the read tier (if any) serves hot reads. Without a read tier it
	// behaves like passthrough.
	ModeWritethrough Mode = "writethrough"
	// ModePassthrough maps the origin extent only.
	ModePassthrough Mode = "passthrough"
)

// Modes lists every valid mode.
var Modes = []Mode{ModeWriteback, ModeWritethrough, ModePassthrough}

// ParseMode parses a mode name exactly as written in Modes.
func ParseMode(s string) (Mode, error) {
	m := Mode(s)
	if !slices.Contains(Modes, m) {
		return "", errorf(ErrInvalidMode, "invalid mode %q: want writeback, writethrough or passthrough", s)
	}
	return m, nil
}

// Origin is the slow device of the pool, normally an HDD RAID10 array.
type Origin struct {
	Path        string // hint only, e.g. /dev/md/tc-data; the engine resolves the device
	MDUUID      string // md array UUID if the origin is an md array, else ""
	SizeSectors uint64
}

// Member is one SSD of the pool.
type Member struct {
	UUID        string // generated by tidecache when the SSD joins; the identity of the member
	Path        string // hint only: device names change between boots
	SizeSectors uint64
}

// Extent is a contiguous, aligned range of sectors on one device.
type Extent struct {
	Member string // member UUID; "" means the origin
	Offset uint64 // sectors
	Length uint64 // sectors
}

// End returns the first sector after the extent.
func (e Extent) End() uint64 { return e.Offset + e.Length }

func (e Extent) String() string {
	dev := "origin"
	if e.Member != "" {
		dev = "member " + e.Member
	}
	return fmt.Sprintf("%s [%d+%d)", dev, e.Offset, e.Length)
}

// Volume is one cached block device.
type Volume struct {
	Name string
	UUID string
	Mode Mode
	// Origin is the volume's first extent of the origin; Origin.Member is
	// "". For an adopted volume it is the whole of the Adopted device
	// instead ([0, AdoptedSectors)), not an extent of the pool's origin.
	Origin Extent
	// OriginTail are the further extents of the origin a volume got when
	// it grew and the space right after its last extent was taken: the
	// volume's sectors map onto Origin, then onto each of these in order,
	// as the lines of one dm-linear table (LVM's segments). Empty for a
	// volume that never grew past a neighbour, and for adopted volumes.
	OriginTail []Extent
	// Adopted, when set, is the device the volume caches: one that held
	// data before (tidectl volume adopt), which the pool does not own.
	Adopted *Adopted
	// WriteCache is the dm-writecache cache slice; nil means the volume has
	// no write tier and can never be in writeback. On a node without SSDs
	// it is on no device of the pool: its Member is OnPeers, its Length
	// the cache's, and both legs of WriteMirror are peers' replicas.
	WriteCache *Extent
	// WriteMirror, when set, is a second copy of WriteCache on another SSD
	// (protection local): the write tier caches on a RAID1 of the two.
	WriteMirror *Mirror
	// ReadCache and ReadMeta are the dm-cache data and metadata slices of
	// the read tier; both nil means no read tier.
	ReadCache, ReadMeta *Extent
	// BlockSize is the dm-writecache block size in bytes: a power of two
	// from 512 to 4096.
	BlockSize uint32
	// ReadBlockSize is the dm-cache block size in bytes, chosen when the
	// volume is created (dm-cache cannot change it without dropping the
	// cache): a power of two from MinReadBlockSize to MaxReadBlockSize.
	// 0 means 64 KiB: volumes made before this field existed have 0 and
	// all used that size, while the engine records the node's default in
	// every new volume with a read tier, so a later change of that default
	// cannot change the block size under existing metadata. Only a volume
	// with a read tier may set it.
	ReadBlockSize uint32
	CreatedUnix   int64
	// Tuning holds the write tier's knobs chosen by policy; nil keeps the
	// node's defaults. It is part of the layout so boot assembly rebuilds
	// exactly the table that was running.
	Tuning *Tuning
	// FUAWindow records that the operator chose to run the write tier
	// without tidecache's fuaflush target (tidectl volume create
	// --allow-fua-window), when that kernel module cannot be loaded. Such a
	// volume acknowledges FUA-only writes (O_DSYNC, ext4/XFS journal
	// commits) before dm-writecache has committed their mapping: a power
	// cut within its autocommit time can lose them. It is shown by
	// `volume show`, exported as a metric and alerted on.
	FUAWindow bool
	// DataLoss records that the volume's write cache was given up with the
	// dirty blocks it may have held: its SSD was dead or missing and the
	// operator started the pool without it (tidectl pool force-start
	// --accept-data-loss). It stays with the volume, shown by volume show.
	DataLoss *DataLoss
	// FailedOver records that the volume was taken over from another node
	// whose replica of its write cache this node kept (the origin is
	// shared): it runs on that copy alone until it is protected again.
	FailedOver *FailedOver
}

// DataLoss is when, and with which SSD, a volume lost the writes its
// write cache held.
type DataLoss struct {
	Unix   int64  // when the pool was force-started
	Member string // the UUID of the SSD member that held them
}

// DefaultHighWatermark and DefaultLowWatermark are the watermarks
// (percent of the write cache in use) a write tier runs with when its
// tuning sets none: write-back starts at the high one and stops at the low
// one. The high one is dm-writecache's own default. The low one is 10
// where the kernel's is 45: a cache that stops writing back at 45 % keeps
// almost half of itself dirty through every idle hour, so the next burst
// finds 55 % of it free, and a sequential load over blocks it still holds
// is cut into a write around the cache per dirty block (stack.DefaultTuning
// has the measurement). Down to 10 %, the idle HDDs do that write-back
// while no one waits, and the readfirst layer and pause_writeback keep it
// off the I/O someone does wait for.
const (
	DefaultHighWatermark = 50
	DefaultLowWatermark  = 10
)

// Tuning are the dm-writecache options a policy may set per volume. A nil
// field keeps the node default.
type Tuning struct {
	// HighWatermark and LowWatermark are the percentages of the write
	// cache in use at which write-back starts and stops.
	HighWatermark *int `json:"high_watermark,omitempty"`
	LowWatermark  *int `json:"low_watermark,omitempty"`
	// WritebackJobs bounds the blocks in flight during write-back.
	WritebackJobs *uint64 `json:"writeback_jobs,omitempty"`
	// AutocommitTimeMs is dm-writecache's autocommit_time: how often, in
	// milliseconds, it commits its metadata without being asked (kernel
	// default 1000). A write with FUA but no flush (O_DSYNC on ext4/XFS,
	// journal commit blocks) is durable only at the next commit, so a
	// shorter time narrows that window, at the cost of more metadata
	// writes to the SSD. MinAutocommitTimeMs to MaxAutocommitTimeMs.
	AutocommitTimeMs *uint64 `json:"autocommit_time_ms,omitempty"`
	// ReadFirstMaxHoldMs is the longest the readfirst layer under the
	// write tier holds a write-back I/O while reads wait on the HDDs
	// (stack.Tuning.ReadFirstMaxHoldMs); 0 runs the volume without the
	// layer. At most MaxReadFirstHoldMs.
	ReadFirstMaxHoldMs *uint64 `json:"readfirst_max_hold_ms,omitempty"`
}

// MaxReadFirstHoldMs is the largest Tuning.ReadFirstMaxHoldMs: the
// kernel target's limit (dm.ReadFirstMaxMs).
const MaxReadFirstHoldMs = 60000

// Empty reports whether the tuning sets nothing.
func (t *Tuning) Empty() bool {
	return t == nil || (t.HighWatermark == nil && t.LowWatermark == nil && t.WritebackJobs == nil && t.AutocommitTimeMs == nil &&
		t.ReadFirstMaxHoldMs == nil)
}

// Equal reports whether two tunings set the same values (nil and empty are
// equal).
func (t *Tuning) Equal(o *Tuning) bool {
	if t.Empty() || o.Empty() {
		return t.Empty() == o.Empty()
	}
	eqi := func(a, b *int) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }
	equ := func(a, b *uint64) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }
	return eqi(t.HighWatermark, o.HighWatermark) && eqi(t.LowWatermark, o.LowWatermark) &&
		equ(t.WritebackJobs, o.WritebackJobs) && equ(t.AutocommitTimeMs, o.AutocommitTimeMs) &&
		equ(t.ReadFirstMaxHoldMs, o.ReadFirstMaxHoldMs)
}

// Validate checks the ranges dm-writecache accepts.
func (t *Tuning) Validate() error {
	if t == nil {
		return nil
	}
	for _, w := range []*int{t.HighWatermark, t.LowWatermark} {
		if w != nil && (*w < 0 || *w > 100) {
			return fmt.Errorf("watermark %d%%: want 0 to 100", *w)
		}
	}
	// dm-writecache refuses a table whose low watermark is above its high
	// one, and a watermark left unset takes the default: a high watermark
	// of 5 alone would meet the default low of 10.
	high, low := DefaultHighWatermark, DefaultLowWatermark
	if t.HighWatermark != nil {
		high = *t.HighWatermark
	}
	if t.LowWatermark != nil {
		low = *t.LowWatermark
	}
	if low > high {
		switch {
		case t.HighWatermark == nil:
			return fmt.Errorf("low watermark %d%% is above the default high watermark %d%%: set the high watermark too", low, high)
		case t.LowWatermark == nil:
			return fmt.Errorf("high watermark %d%% is below the default low watermark %d%%: set the low watermark too", high, low)
		}
		return fmt.Errorf("low watermark %d%% is above high watermark %d%%", low, high)
	}
	if t.WritebackJobs != nil && *t.WritebackJobs == 0 {
		return fmt.Errorf("writeback jobs: want at least 1")
	}
	if a := t.AutocommitTimeMs; a != nil && (*a < MinAutocommitTimeMs || *a > MaxAutocommitTimeMs) {
		return fmt.Errorf("autocommit time %d ms: want %d to %d ms", *a, MinAutocommitTimeMs, MaxAutocommitTimeMs)
	}
	if h := t.ReadFirstMaxHoldMs; h != nil && *h > MaxReadFirstHoldMs {
		return fmt.Errorf("read-first hold %d ms: want 0 (no read-first layer) to %d ms", *h, MaxReadFirstHoldMs)
	}
	return nil
}

func (t *Tuning) clone() *Tuning {
	if t.Empty() {
		return nil
	}
	c := *t
	c.HighWatermark = clonePtr(t.HighWatermark)
	c.LowWatermark = clonePtr(t.LowWatermark)
	c.WritebackJobs = clonePtr(t.WritebackJobs)
	c.AutocommitTimeMs = clonePtr(t.AutocommitTimeMs)
	c.ReadFirstMaxHoldMs = clonePtr(t.ReadFirstMaxHoldMs)
	return &c
}

// OriginExtents returns the extents the volume's sectors map onto, in
// order: Origin, then OriginTail.
func (v *Volume) OriginExtents() []Extent {
	return append([]Extent{v.Origin}, v.OriginTail...)
}

// SizeSectors is the size of the volume: the sum of its origin extents.
func (v *Volume) SizeSectors() uint64 {
	n := v.Origin.Length
	for _, e := range v.OriginTail {
		n += e.Length
	}
	return n
}

// HasReadTier reports whether the volume has read-tier slices.
func (v *Volume) HasReadTier() bool { return v.ReadCache != nil && v.ReadMeta != nil }

// Extents returns every extent of the volume with the role it plays, in
// stack order: origin, write cache (and its mirror), read cache, read
// meta.
//
// An adopted volume's origin is a device of its own, not an extent of the
// pool's devices, so it is not listed.
func (v *Volume) Extents() []RoleExtent {
	var out []RoleExtent
	if v.Adopted == nil {
		for _, e := range v.OriginExtents() {
			out = append(out, RoleExtent{"origin extent", e})
		}
	}
	if v.WriteCache != nil && !v.CacheOnPeers() {
		out = append(out, RoleExtent{"write cache", *v.WriteCache})
	}
	if m := v.WriteMirror; m != nil {
		if m.Remote0 == nil {
			out = append(out, RoleExtent{"write mirror meta", m.Meta})
		}
		if m.Remote == nil {
			out = append(out, RoleExtent{"write mirror", m.Leg}, RoleExtent{"write mirror leg meta", m.LegMeta})
		}
	}
	if v.ReadCache != nil {
		out = append(out, RoleExtent{"read cache", *v.ReadCache})
	}
	if v.ReadMeta != nil {
		out = append(out, RoleExtent{"read meta", *v.ReadMeta})
	}
	return out
}

// RoleExtent is an extent with the role it plays in a volume.
type RoleExtent struct {
	Role string
	Extent
}

func (v Volume) clone() Volume {
	c := v
	c.OriginTail = slices.Clone(v.OriginTail)
	c.WriteCache = cloneExtent(v.WriteCache)
	if v.WriteMirror != nil {
		m := *v.WriteMirror
		m.OutOfSync = slices.Clone(m.OutOfSync)
		m.Remote = clonePtr(m.Remote)
		m.Remote0 = clonePtr(m.Remote0)
		c.WriteMirror = &m
	}
	c.ReadCache = cloneExtent(v.ReadCache)
	c.ReadMeta = cloneExtent(v.ReadMeta)
	c.Tuning = v.Tuning.clone()
	c.Adopted = clonePtr(v.Adopted)
	c.DataLoss = clonePtr(v.DataLoss)
	c.FailedOver = clonePtr(v.FailedOver)
	return c
}

func cloneExtent(e *Extent) *Extent {
	if e == nil {
		return nil
	}
	c := *e
	return &c
}

// Layout is the complete, persistent description of a pool. It is stored
// with its Generation in the superblock of every member and of the origin.
//
// A pool without an origin (Origin zero: SSDs only) holds adopted volumes
// only; see HasOrigin.
type Layout struct {
	Name, UUID string
	Generation uint64 // bumped on every change
	Origin     Origin
	Members    []Member
	Volumes    []Volume
	// Replicas are slices of this pool's SSDs kept for other nodes'
	// mirrors (see Replica).
	Replicas []Replica
}

// New returns the layout of a new, empty pool at generation 1. It checks
// the name, the device sizes against the minimums and the UUIDs.
//
// A zero origin makes a pool of SSDs alone, for adopted volumes.
func New(name, uuid string, origin Origin, members []Member) (*Layout, error) {
	if origin != (Origin{}) {
		if err := CheckOriginSize(origin.Path, origin.SizeSectors*SectorSize); err != nil {
			return nil, err
		}
	}
	for _, m := range members {
		if err := CheckMemberSize(m.Path, m.SizeSectors*SectorSize); err != nil {
			return nil, err
		}
	}
	l := &Layout{
		Name:       name,
		UUID:       uuid,
		Generation: 1,
		Origin:     origin,
		Members:    slices.Clone(members),
	}
	if err := l.Validate(); err != nil {
		return nil, err
	}
	return l, nil
}

// HasOrigin reports whether the pool has an origin array to carve volumes
// from; a pool of SSDs alone caches adopted devices only.
func (l *Layout) HasOrigin() bool { return l.Origin != (Origin{}) }

// AdoptedBy returns the volume that has adopted the device a, if any.
func (l *Layout) AdoptedBy(a *Adopted) (*Volume, bool) {
	for i := range l.Volumes {
		if o := l.Volumes[i].Adopted; o != nil && o.Same(a) {
			return &l.Volumes[i], true
		}
	}
	return nil, false
}

// Clone returns a deep copy: changing the copy never changes l.
func (l *Layout) Clone() *Layout {
	c := *l
	c.Members = slices.Clone(l.Members)
	c.Replicas = slices.Clone(l.Replicas)
	if l.Volumes != nil {
		c.Volumes = make([]Volume, len(l.Volumes))
		for i, v := range l.Volumes {
			c.Volumes[i] = v.clone()
		}
	}
	return &c
}

// Volume returns the named volume. The pointer aliases the layout's slice:
// it is valid until the next AddVolume or RemoveVolume, and writing through
// it changes the layout without bumping the generation.
func (l *Layout) Volume(name string) (*Volume, bool) {
	for i := range l.Volumes {
		if l.Volumes[i].Name == name {
			return &l.Volumes[i], true
		}
	}
	return nil, false
}

// Member returns the member with the given UUID.
func (l *Layout) Member(uuid string) (*Member, bool) {
	for i := range l.Members {
		if l.Members[i].UUID == uuid {
			return &l.Members[i], true
		}
	}
	return nil, false
}

// RemoveVolume drops the named volume and frees its extents. It does not
// touch any device: the caller tears the stack down (and makes sure the
// write tier is clean) before it persists the new layout.
func (l *Layout) RemoveVolume(name string) error {
	i := slices.IndexFunc(l.Volumes, func(v Volume) bool { return v.Name == name })
	if i < 0 {
		return errorf(ErrVolumeNotFound, "volume %q not found in pool %q", name, l.Name)
	}
	l.Volumes = slices.Delete(l.Volumes, i, i+1)
	l.Generation++
	return nil
}

// SetMode changes the mode of the named volume and bumps the generation.
// Setting the mode a volume already has is a no-op that leaves the
// generation alone, so callers can re-apply desired state freely.
// Writeback needs a write cache slice (ErrNoWriteCache).
func (l *Layout) SetMode(name string, m Mode) error {
	if _, err := ParseMode(string(m)); err != nil {
		return fmt.Errorf("volume %q: %w", name, err)
	}
	v, ok := l.Volume(name)
	if !ok {
		return errorf(ErrVolumeNotFound, "volume %q not found in pool %q", name, l.Name)
	}
	if m == ModeWriteback && v.WriteCache == nil {
		return errorf(ErrNoWriteCache, "volume %q cannot run in writeback: it has no write cache slice (created without one, or uncached)", name)
	}
	if v.Mode == m {
		return nil
	}
	v.Mode = m
	l.Generation++
	return nil
}

// Uncache drops the caches of the named volume: its write-cache slice,
// the slice's mirror and its read-cache slices go back to the free space,
// and the volume keeps its origin extent (its data) and runs in
// passthrough for good. It must be in passthrough already, where no tier
// runs: then no cache slice holds a block the origin lacks. A volume
// without caches is left alone (no new generation). An adopted volume is
// refused (detach gives its device back), and so is a write cache
// mirrored on a peer node, whose replica the cluster places.
func (l *Layout) Uncache(name string) error {
	v, ok := l.Volume(name)
	switch {
	case !ok:
		return errorf(ErrVolumeNotFound, "volume %q not found in pool %q", name, l.Name)
	case v.WriteCache == nil && v.ReadCache == nil && v.ReadMeta == nil:
		return nil
	case v.Adopted != nil:
		return errorf(ErrInvalidRequest, "volume %q caches the device %s: detach it instead, which gives the device back", name, v.Adopted)
	case v.WriteMirror != nil && v.WriteMirror.Remote != nil:
		return errorf(ErrInvalidRequest, "volume %q mirrors its write cache on node %s: uncache is not supported for a peer-protected volume", name, v.WriteMirror.Remote.Node)
	case v.Mode != ModePassthrough:
		return errorf(ErrInvalidRequest, "volume %q is in %s: drain it to passthrough first, so that its caches hold nothing the origin lacks", name, v.Mode)
	}
	v.WriteCache, v.WriteMirror = nil, nil
	v.ReadCache, v.ReadMeta, v.ReadBlockSize = nil, nil, 0
	v.Tuning, v.FUAWindow = nil, false
	l.Generation++
	return nil
}

// SetTuning records a volume's write-tier tuning (nil for the node
// defaults) and bumps the generation; the same tuning again is a no-op.
func (l *Layout) SetTuning(name string, t *Tuning) error {
	v, ok := l.Volume(name)
	if !ok {
		return errorf(ErrVolumeNotFound, "volume %q not found in pool %q", name, l.Name)
	}
	if err := t.Validate(); err != nil {
		return errorf(ErrInvalidRequest, "volume %q: %v", name, err)
	}
	if v.Tuning.Equal(t) {
		return nil
	}
	v.Tuning = t.clone()
	l.Generation++
	return nil
}

// devicePath returns a human name for a device: its path hint and, for a
// member, its UUID.
func (l *Layout) devicePath(member string) string {
	if member == "" {
		if l.Origin.Path == "" {
			return "origin"
		}
		return "origin " + l.Origin.Path
	}
	if m, ok := l.Member(member); ok && m.Path != "" {
		return fmt.Sprintf("SSD %s (member %s)", m.Path, member)
	}
	return "SSD member " + member
}

// clonePtr returns a pointer to a copy of *p, nil for nil: a cloned
// layout must share no memory with the original.
func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}
