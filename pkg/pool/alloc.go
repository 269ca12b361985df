// SPDX-License-Identifier: Apache-2.0

package pool

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// VolumeRequest asks for a new volume. Sizes are in bytes and are rounded
// up to Alignment.
type VolumeRequest struct {
	Name string
	// Size of the volume (its origin extent); at least MinVolumeBytes.
	Size uint64
	// WriteCache is the size of the write-tier slice; 0 means none, else at
	// least MinWriteCacheBytes.
	WriteCache uint64
	// ReadCache is the size of the read-tier data slice; 0 means no read
	// tier, else at least MinReadCacheBytes. The metadata slice is sized by
	// ReadMetaSectors.
	ReadCache uint64
	// Mode defaults to writeback with a write cache, else writethrough with
	// a read cache, else passthrough.
	Mode Mode
	// BlockSize is the dm-writecache block size; 0 means DefaultBlockSize.
	BlockSize uint32
	// ReadBlockSize is the dm-cache block size in bytes; 0 means the
	// node's default. It needs a read cache, must be a power of two from
	// MinReadBlockSize to MaxReadBlockSize, and the read cache must hold at
	// least MinReadCacheBlocks of it.
	ReadBlockSize uint32
	// FUAWindow builds the write tier without the fuaflush target; see
	// Volume.FUAWindow. It needs a write cache.
	FUAWindow bool
	// Protect says whether the write cache is mirrored; "" means
	// ProtectNone. ProtectLocal needs a write cache and two SSDs,
	// ProtectPeer a write cache and Peer.
	Protect Protection
	// Peer is the attached replica that becomes leg 1 of a ProtectPeer
	// mirror.
	Peer *RemoteLeg
	// Peer0, with ProtectPeer, is a second attached replica, on another
	// node than Peer's, that becomes leg 0: the write cache is then on
	// peers alone (a node without SSDs; see OnPeers) and takes no room in
	// this pool.
	Peer0 *RemoteLeg
	// Adopt, when set, makes the volume cache this existing device, whole,
	// instead of an extent of the pool's origin; Size is then 0.
	Adopt *Adopted
}

// AddVolume carves a new volume out of free space and adds it to the
// layout, bumping the generation. It returns the volume as stored.
//
// Placement: the origin extent is the first free extent of the origin large
// enough (first fit, lowest offset). The write cache slice goes to the
// member with the most free sectors that has a large enough free extent,
// first fit on that member; the read cache slice then the same way,
// counting the write slice just placed, so the tiers of a volume spread
// over the SSDs. The read meta slice goes on the read cache's member when
// it fits there, else on the member with the most free space. Ties go to
// the member listed first.
//
// Errors: ErrInvalidName, ErrVolumeExists, ErrInvalidRequest (sizes, uuid,
// block size), ErrInvalidMode, ErrNoWriteCache (writeback without a write
// cache) and ErrNoSpace, which names the device that ran out, what was
// asked and what was free. On error the layout is unchanged.
func (l *Layout) AddVolume(req VolumeRequest, uuid string, now time.Time) (Volume, error) {
	if err := ValidateName("volume", req.Name); err != nil {
		return Volume{}, err
	}
	if _, ok := l.Volume(req.Name); ok {
		return Volume{}, errorf(ErrVolumeExists, "volume %q already exists in pool %q", req.Name, l.Name)
	}
	invalid := func(format string, a ...any) (Volume, error) {
		return Volume{}, errorf(ErrInvalidRequest, "volume %q: %s", req.Name, fmt.Sprintf(format, a...))
	}
	if err := checkUUID(uuid); err != nil {
		return invalid("%v", err)
	}
	for _, v := range l.Volumes {
		if v.UUID == uuid {
			return invalid("uuid %s already belongs to volume %q", uuid, v.Name)
		}
	}

	mode := req.Mode
	switch {
	case mode != "":
		if _, err := ParseMode(string(mode)); err != nil {
			return Volume{}, fmt.Errorf("volume %q: %w", req.Name, err)
		}
	case req.WriteCache > 0:
		mode = ModeWriteback
	case req.ReadCache > 0:
		mode = ModeWritethrough
	default:
		mode = ModePassthrough
	}
	if mode == ModeWriteback && req.WriteCache == 0 {
		return Volume{}, errorf(ErrNoWriteCache, "volume %q cannot run in writeback without a write cache: ask for one", req.Name)
	}
	bs := req.BlockSize
	if bs == 0 {
		bs = DefaultBlockSize
	}
	if !ValidBlockSize(bs) {
		return invalid("block size %d: want a power of two from 512 to 4096", bs)
	}
	size := req.Size
	switch a := req.Adopt; {
	case a != nil && size != 0:
		return invalid("an adopted device is cached whole: give no size")
	case a != nil:
		if v, ok := l.AdoptedBy(a); ok {
			return invalid("device %s is already adopted by volume %q", a, v.Name)
		}
		if !a.HasIdentity() {
			return invalid("device %s has no stable identifier (md uuid, wwn, serial or partuuid) to find it by at boot", a.Path)
		}
		size = AdoptedSectors(a.SizeSectors) * SectorSize
	case !l.HasOrigin():
		return invalid("pool %q has no origin (SSDs only): it caches existing devices (tidectl volume adopt)", l.Name)
	}
	if size < MinVolumeBytes {
		return invalid("size %s is below the minimum of %s", FormatBytes(size), FormatBytes(MinVolumeBytes))
	}
	if req.WriteCache > 0 && req.WriteCache < MinWriteCacheBytes {
		return invalid("write cache %s is below the minimum of %s", FormatBytes(req.WriteCache), FormatBytes(MinWriteCacheBytes))
	}
	if req.ReadCache > 0 && req.ReadCache < MinReadCacheBytes {
		return invalid("read cache %s is below the minimum of %s", FormatBytes(req.ReadCache), FormatBytes(MinReadCacheBytes))
	}
	if req.ReadBlockSize != 0 {
		if err := checkReadBlockSize(BytesToSectors(req.ReadCache)*SectorSize, req.ReadBlockSize); err != nil {
			return invalid("%v", err)
		}
	}

	// A pool of its origin alone (a node without SSDs) keeps nothing of a
	// volume on the node but its origin extent: a write cache is on two
	// peers (Peer0 and Peer) or there is none, and a read cache never.
	if len(l.Members) == 0 && (req.ReadCache > 0 || req.WriteCache > 0 && req.Peer0 == nil) {
		return invalid("pool %q has no SSDs: a volume in it has no cache on this node; create it without a write or read cache (--mode passthrough), or on a node whose pool has SSDs", l.Name)
	}
	a := newAllocator(l)
	if req.FUAWindow && req.WriteCache == 0 {
		return Volume{}, fmt.Errorf("volume %s: the FUA window only concerns a write cache, and none was asked for", req.Name)
	}
	v := Volume{Name: req.Name, UUID: uuid, Mode: mode, BlockSize: bs, ReadBlockSize: req.ReadBlockSize, CreatedUnix: now.Unix(), FUAWindow: req.FUAWindow}
	var err error
	if ad := req.Adopt; ad != nil {
		v.Adopted = clonePtr(ad)
		v.Origin = Extent{Length: AdoptedSectors(ad.SizeSectors)}
	} else if v.Origin, err = a.onOrigin(BytesToSectors(req.Size), "volume "+quote(req.Name)); err != nil {
		return Volume{}, err
	}
	switch {
	case req.Protect == ProtectLocal:
		if req.WriteCache == 0 {
			return invalid("protection local mirrors the write cache, and none was asked for")
		}
		e, m, err := a.placeMirror(BytesToSectors(req.WriteCache), "write cache of volume "+quote(req.Name))
		if err != nil {
			return Volume{}, err
		}
		v.WriteCache, v.WriteMirror = &e, &m
	case req.Protect == ProtectPeer:
		if req.WriteCache == 0 || req.Peer == nil {
			return invalid("protection peer mirrors the write cache onto a peer's replica: it needs a write cache and the replica")
		}
		if req.Peer0 != nil {
			if req.Adopt != nil {
				return invalid("a write cache on peers alone is not available for an adopted device: adopt it on a node with an SSD")
			}
			if req.Peer0.Node == req.Peer.Node {
				return invalid("both legs of its write cache would be on node %s: a write cache on peers needs replicas on two other nodes", req.Peer.Node)
			}
			v.WriteCache = &Extent{Member: OnPeers, Length: BytesToSectors(req.WriteCache)}
			v.WriteMirror = &Mirror{Remote0: clonePtr(req.Peer0), Remote: clonePtr(req.Peer)}
			break
		}
		what := "write cache of volume " + quote(req.Name)
		e, err := a.onMember(BytesToSectors(req.WriteCache), "", what)
		if err != nil {
			return Volume{}, err
		}
		meta, err := a.onMember(MirrorMetaSectors, e.Member, what+" (leg 0 metadata)")
		if err != nil {
			return Volume{}, err
		}
		if meta.Member != e.Member {
			return Volume{}, errorf(ErrNoSpace, "%s: no room for leg 0's %s metadata slice next to its data on %s",
				what, formatSectors(MirrorMetaSectors), l.devicePath(e.Member))
		}
		v.WriteCache, v.WriteMirror = &e, &Mirror{Meta: meta, Remote: clonePtr(req.Peer)}
	case req.Peer0 != nil:
		return invalid("a peer leg 0 is for protection peer only")
	case req.Protect != "" && req.Protect != ProtectNone:
		if _, err := ParseProtection(string(req.Protect)); err != nil {
			return Volume{}, fmt.Errorf("volume %q: %w", req.Name, err)
		}
	}
	if req.WriteCache > 0 && v.WriteCache == nil {
		e, err := a.onMember(BytesToSectors(req.WriteCache), "", "write cache of volume "+quote(req.Name))
		if err != nil {
			return Volume{}, err
		}
		v.WriteCache = &e
	}
	if req.ReadCache > 0 {
		data := BytesToSectors(req.ReadCache)
		e, err := a.onMember(data, "", "read cache of volume "+quote(req.Name))
		if err != nil {
			return Volume{}, err
		}
		v.ReadCache = &e
		m, err := a.onMember(ReadMetaSectors(data), e.Member, "read meta of volume "+quote(req.Name))
		if err != nil {
			return Volume{}, err
		}
		v.ReadMeta = &m
	}

	next := l.Clone()
	next.Volumes = append(next.Volumes, v)
	next.Generation++
	if err := next.Validate(); err != nil {
		return Volume{}, fmt.Errorf("pool %q would be invalid after adding volume %q: %w", l.Name, req.Name, err)
	}
	*l = *next
	return v.clone(), nil
}

// checkReadBlockSize checks a chosen read block size against the read
// cache slice it will divide (readCache bytes as allocated, 0 for none).
// With today's minimums the block count can only fall short if
// MinReadCacheBytes is lowered, but the rule is kept here, where it is
// enforced, rather than left implicit in two constants.
func checkReadBlockSize(readCache uint64, rbs uint32) error {
	switch {
	case readCache == 0:
		return fmt.Errorf("read block size %s given without a read cache: ask for one, or leave the read block size unset", FormatBytes(uint64(rbs)))
	case !ValidReadBlockSize(rbs):
		return fmt.Errorf("read block size %s: want a power of two from %s to %s", FormatBytes(uint64(rbs)), FormatBytes(MinReadBlockSize), FormatBytes(MaxReadBlockSize))
	case readCache < MinReadCacheBlocks*uint64(rbs):
		return fmt.Errorf("read cache %s holds fewer than %d blocks of %s: use a read cache of at least %s or a smaller read block size",
			FormatBytes(readCache), MinReadCacheBlocks, FormatBytes(uint64(rbs)), FormatBytes(MinReadCacheBlocks*uint64(rbs)))
	}
	return nil
}

func quote(s string) string { return fmt.Sprintf("%q", s) }

// Free returns the free sectors of the origin and of every member, keyed
// by member UUID. Free space is what lies after ReservedSectors and before
// the device's size rounded down to Alignment, minus every extent.
func (l *Layout) Free() (origin uint64, members map[string]uint64) {
	a := newAllocator(l)
	members = make(map[string]uint64, len(l.Members))
	for _, m := range l.Members {
		members[m.UUID] = a.freeTotal(m.UUID)
	}
	return a.freeTotal(""), members
}

// FreeExtents returns the free extents of a device in offset order: member
// is a member UUID, or "" for the origin. An unknown member has none.
func (l *Layout) FreeExtents(member string) []Extent {
	return newAllocator(l).free(member)
}

// allocator tracks the used extents of every device while one request is
// placed, without touching the layout.
type allocator struct {
	l    *Layout
	used map[string][]Extent // device ("" = origin) -> extents
}

func newAllocator(l *Layout) *allocator {
	a := &allocator{l: l, used: map[string][]Extent{}}
	for i := range l.Volumes {
		for _, re := range l.Volumes[i].Extents() {
			a.used[re.Member] = append(a.used[re.Member], re.Extent)
		}
	}
	for _, r := range l.Replicas {
		a.used[r.Extent.Member] = append(a.used[r.Extent.Member], r.Extent)
	}
	return a
}

func (a *allocator) size(dev string) uint64 {
	if dev == "" {
		return a.l.Origin.SizeSectors
	}
	if m, ok := a.l.Member(dev); ok {
		return m.SizeSectors
	}
	return 0
}

// free returns the gaps between used extents inside the usable range of the
// device. It tolerates overlapping extents (an invalid layout) by never
// moving the cursor backwards.
func (a *allocator) free(dev string) []Extent {
	end := alignDown(a.size(dev))
	if end <= ReservedSectors {
		return nil
	}
	used := slices.Clone(a.used[dev])
	slices.SortFunc(used, func(x, y Extent) int { return cmp.Compare(x.Offset, y.Offset) })
	var out []Extent
	cur := uint64(ReservedSectors)
	for _, e := range used {
		if e.Offset > cur {
			out = append(out, Extent{Member: dev, Offset: cur, Length: min(e.Offset, end) - cur})
		}
		cur = max(cur, e.End())
		if cur >= end {
			return out
		}
	}
	return append(out, Extent{Member: dev, Offset: cur, Length: end - cur})
}

func (a *allocator) freeTotal(dev string) uint64 {
	var n uint64
	for _, e := range a.free(dev) {
		n += e.Length
	}
	return n
}

// firstFit returns the lowest free extent of the device at least length
// long, cut to length.
func (a *allocator) firstFit(dev string, length uint64) (Extent, bool) {
	for _, e := range a.free(dev) {
		if e.Length >= length {
			e.Length = length
			return e, true
		}
	}
	return Extent{}, false
}

// largest returns the longest free extent of the device and the total.
func (a *allocator) largest(dev string) (largest, total uint64) {
	for _, e := range a.free(dev) {
		largest = max(largest, e.Length)
		total += e.Length
	}
	return largest, total
}

func (a *allocator) take(e Extent) { a.used[e.Member] = append(a.used[e.Member], e) }

func (a *allocator) onOrigin(length uint64, what string) (Extent, error) {
	if e, ok := a.firstFit("", length); ok {
		a.take(e)
		return e, nil
	}
	largest, total := a.largest("")
	return Extent{}, errorf(ErrNoSpace, "not enough free space on %s: %s needs %s, the largest free extent is %s (%s free in total)",
		a.l.devicePath(""), what, formatSectors(length), formatSectors(largest), formatSectors(total))
}

// onMember places length sectors on the preferred member if it fits there,
// else on the member with the most free sectors that can hold it.
func (a *allocator) onMember(length uint64, prefer, what string) (Extent, error) {
	if prefer != "" {
		if e, ok := a.firstFit(prefer, length); ok {
			a.take(e)
			return e, nil
		}
	}
	if len(a.l.Members) == 0 {
		return Extent{}, errorf(ErrNoSpace, "not enough free space: %s needs %s, pool %q has no SSD members",
			what, formatSectors(length), a.l.Name)
	}
	type cand struct {
		uuid           string
		largest, total uint64
	}
	cands := make([]cand, 0, len(a.l.Members))
	for _, m := range a.l.Members {
		lg, tot := a.largest(m.UUID)
		cands = append(cands, cand{m.UUID, lg, tot})
	}
	slices.SortStableFunc(cands, func(x, y cand) int { return cmp.Compare(y.total, x.total) })
	for _, c := range cands {
		if e, ok := a.firstFit(c.uuid, length); ok {
			a.take(e)
			return e, nil
		}
	}
	best := slices.MaxFunc(cands, func(x, y cand) int { return cmp.Compare(x.largest, y.largest) })
	var total uint64
	for _, c := range cands {
		total += c.total
	}
	return Extent{}, errorf(ErrNoSpace, "not enough free space on the SSDs: %s needs %s, the largest free extent is %s on %s (%s free on %d members in total)",
		what, formatSectors(length), formatSectors(best.largest), a.l.devicePath(best.uuid), formatSectors(total), len(cands))
}
