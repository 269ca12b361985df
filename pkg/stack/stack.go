// SPDX-License-Identifier: Apache-2.0

package stack

import (
	"errors"
	"fmt"
	"slices"

	"github.com/tidecache/tidecache/pkg/dm"
	"github.com/tidecache/tidecache/pkg/pool"
)

// Devices tells where the volume's extents live on this node right now.
// Paths change between boots (/dev/nvme0n1 may become /dev/nvme1n1), so
// the layout stores member UUIDs and the engine resolves them here.
type Devices struct {
	Origin  string            // path of the pool's origin array
	Members map[string]string // member UUID -> path of that SSD
	// Remote maps a peer leg's UUID to the block device its NVMe/TCP
	// export is attached as; a peer leg not attached is absent.
	Remote map[string]string
	// Adopted maps an adopted volume's UUID to the path of its device,
	// found and checked against the layout's identifiers.
	Adopted map[string]string
	// WritebackLimits maps an origin device path (Origin, or an adopted
	// device) to the write-back bound derived from that array
	// (pkg/writeback): the writeback_jobs of a write tier over it when
	// neither the node's nor the volume's tuning sets one. A path absent
	// keeps the kernel's default, which floods an HDD array's queue.
	WritebackLimits map[string]uint64
}

// WritebackLimit returns the bound derived for the origin device v
// writes back to, 0 when none was derived.
func (d Devices) WritebackLimit(v pool.Volume) uint64 {
	dev := d.Origin
	if v.Adopted != nil {
		dev = d.Adopted[v.UUID]
	}
	return d.WritebackLimits[dev]
}

func (d Devices) path(e pool.Extent) (string, error) {
	if e.Member == "" {
		if d.Origin == "" {
			return "", fmt.Errorf("origin device not resolved")
		}
		return d.Origin, nil
	}
	p, ok := d.Members[e.Member]
	if !ok || p == "" {
		return "", fmt.Errorf("SSD member %s not found on this node", e.Member)
	}
	return p, nil
}

// Tuning holds the knobs of the cache targets. A nil pointer keeps the
// kernel's default, so a table only names what tidecache chose to change.
type Tuning struct {
	// Writecache options (dm-writecache); watermarks are percent of the
	// cache in use at which writeback starts and stops.
	HighWatermark, LowWatermark *int
	WritebackJobs               *uint64
	AutocommitBlocks            *uint64
	AutocommitTimeMs            *uint64

	// ReadBlockSectors is the dm-cache block size in 512-byte sectors
	// that new volumes record when their request names none (see
	// ReadBlockSectors); volumes keep theirs for life, so changing it
	// changes no existing table.
	ReadBlockSectors uint64
	// ReadPolicyArgs are dm-cache policy arguments as key/value pairs.
	ReadPolicyArgs []string

	// ReadFirstMaxHoldMs is the longest tidecache's dm-readfirst, put
	// between the write tier and the device it writes back to, holds one
	// write-back I/O while reads are waiting on that device; 0 puts no
	// such layer in the stack. A volume's own tuning overrides it
	// (pool.Tuning.ReadFirstMaxHoldMs). ReadFirstIdleMs is how long reads
	// must have paused before held writes go.
	ReadFirstMaxHoldMs, ReadFirstIdleMs uint64

	// MirrorMinRecoveryRate (KiB/s per leg) is the speed below which a
	// write-cache mirror's resync or rebuild is never throttled for
	// other I/O; 0 keeps the node's speed_limit_min.
	MirrorMinRecoveryRate uint64
}

// DefaultTuning returns the tuning tidecache ships with.
func DefaultTuning() Tuning {
	// 256 KiB read-tier blocks: a 64 KiB block splits every larger read
	// and each piece pays its own lookup and remap; in the benchmark
	// (docs/benchmarks.md, tuning experiments) 256 KiB blocks served
	// 128k sequential reads 1.5× as fast at QD16, while 64 KiB blocks led
	// on small random reads by less than that run's noise. The cost is
	// coarser promotion, which matters when the hot set is sparse and
	// larger than the cache (--read-block-size 64K).
	//
	// 64 MiB/s for a write-cache mirror's resync: md's default minimum, 1
	// MB/s, is meant for large HDD arrays, but a cache mirror is small and
	// every second it rebuilds, its dirty blocks have one copy. Under
	// application I/O, 1 MB/s left a 32 MiB cache unprotected for 30 s
	// in the VM tests; a 32 GiB cache would take 9 hours. At 64 MiB/s it
	// is 9 minutes at worst, on SSDs that do 1 GB/s and more.
	//
	// dm-readfirst under every write tier, holding write-back for at most
	// 1 s while reads wait, released after 50 ms without a read: bounding
	// writeback_jobs alone still left reads after a write burst at 0.68×
	// the bare RAID10 (p99 2.36×) in the full pressure run, because every
	// read queued behind the write-back already in the disks' queues; with
	// the layer they ran at 1.25× (p99 1.12×), writes once the cache was
	// full at 1.10× and the idle drain at 0.93× the array's write rate
	// (docs/benchmarks-pressure.md, tc-wb against tc-wb-norf). A
	// 50 ms idle window is longer than the gap between two reads of a
	// reader (a disk service time) and shorter than a user notices.
	//
	// Write-back down to 10 % of the write cache in use, not the kernel's
	// 45 % (pool.DefaultLowWatermark): in a quick pressure run (tc-wb
	// against the same volume tuned to 45 % and 0 %, one run), the idle
	// cache wrote back to 21 % in 45 s where it stopped at 45 %, and the
	// sequential load after it (128 MiB in 1 MiB writes over blocks still
	// dirty) ran 2.6× as fast (41 against 16 writes/s) with its longest
	// wait 0.27 s against 0.51 s; the 70/30 mix after it read 8 % more,
	// and the phases before it did not change beyond the run's noise.
	// 0 % gave the same, with 10 % of the cache kept for the newest writes.
	low := pool.DefaultLowWatermark
	return Tuning{LowWatermark: &low,
		ReadBlockSectors: 512, MirrorMinRecoveryRate: 64 << 10, ReadFirstMaxHoldMs: 1000, ReadFirstIdleMs: 50}
}

// Device is one dm device of a stack: its name, ownership UUID and table.
type Device struct {
	Name  string
	UUID  string
	Role  Role
	Table dm.Table
}

// Path returns the block device node of the dm device.
func (d Device) Path() string { return dm.DevicePath(d.Name) }

// Stack is the ordered list of dm devices of one volume, bottom-up: every
// device only refers to devices before it. Create in order, remove in
// reverse.
type Stack struct {
	Volume  string
	Devices []Device
}

// Top returns the user-facing device, always the last one.
func (s Stack) Top() Device { return s.Devices[len(s.Devices)-1] }

// Find returns the device with the given role, if the stack has one.
func (s Stack) Find(r Role) (Device, bool) {
	for _, d := range s.Devices {
		if d.Role == r {
			return d, true
		}
	}
	return Device{}, false
}

// Build returns the stack for the volume in its current mode. The read
// tier is present in writeback and writethrough when the volume has read
// slices; the write slice device only in writeback. In passthrough the top
// is a plain linear mapping of the origin extent: the read tier is torn
// down so nothing can ever serve stale blocks after writes that bypassed it.
func Build(v pool.Volume, devs Devices, t Tuning) (Stack, error) {
	return BuildMode(v, v.Mode, devs, t)
}

// BuildMode is Build for a mode other than the one recorded in the volume,
// used to compute the target of a live mode change.
func BuildMode(v pool.Volume, mode pool.Mode, devs Devices, t Tuning) (Stack, error) {
	s := Stack{Volume: v.Name}
	length := v.SizeSectors()
	if length == 0 {
		return Stack{}, fmt.Errorf("volume %s: empty origin extent", v.Name)
	}
	add := func(role Role, table dm.Table) Device {
		d := Device{Name: DeviceName(v.Name, role), UUID: DeviceUUID(v.UUID, role), Role: role, Table: table}
		s.Devices = append(s.Devices, d)
		return d
	}
	slice := func(role Role, e pool.Extent) (Device, error) {
		p, err := devs.path(e)
		if err != nil {
			return Device{}, fmt.Errorf("volume %s %s slice: %w", v.Name, role, err)
		}
		lp := dm.LinearParams{Device: p, Offset: e.Offset}
		return add(role, dm.Table{lp.Target(0, e.Length)}), nil
	}

	// concat maps extents one after the other, one dm-linear line each:
	// a volume that grew past a neighbour has several on the origin.
	concat := func(role Role, extents []pool.Extent) (Device, error) {
		var table dm.Table
		var start uint64
		for _, e := range extents {
			p, err := devs.path(e)
			if err != nil {
				return Device{}, fmt.Errorf("volume %s %s slice: %w", v.Name, role, err)
			}
			table = append(table, dm.LinearParams{Device: p, Offset: e.Offset}.Target(start, e.Length))
			start += e.Length
		}
		return add(role, table), nil
	}

	var origin Device
	var err error
	if a := v.Adopted; a != nil {
		// The whole device; the origin device name is the same as for a
		// carved volume, so the stack above it is too.
		p := devs.Adopted[v.UUID]
		if p == "" {
			return Stack{}, fmt.Errorf("volume %s: adopted device %s not found on this node", v.Name, a)
		}
		origin = add(RoleOrigin, dm.Table{dm.LinearParams{Device: p}.Target(0, v.Origin.Length)})
	} else if origin, err = concat(RoleOrigin, v.OriginExtents()); err != nil {
		return Stack{}, err
	}
	lower := origin

	readTier := v.ReadCache != nil && v.ReadMeta != nil && mode != pool.ModePassthrough
	if readTier {
		meta, err := slice(RoleReadMeta, *v.ReadMeta)
		if err != nil {
			return Stack{}, err
		}
		data, err := slice(RoleReadData, *v.ReadCache)
		if err != nil {
			return Stack{}, err
		}
		cp := dm.CacheParams{
			Metadata:   meta.Path(),
			Cache:      data.Path(),
			Origin:     origin.Path(),
			BlockSize:  ReadBlockSectors(v),
			Features:   []string{"metadata2", "writethrough"},
			Policy:     "smq",
			PolicyArgs: t.ReadPolicyArgs,
		}
		lower = add(RoleReadTier, dm.Table{cp.Target(0, length)})
	}

	var top dm.Table
	switch mode {
	case pool.ModeWriteback:
		if v.WriteCache == nil {
			return Stack{}, fmt.Errorf("volume %s: writeback needs a write cache slice", v.Name)
		}
		var wdata Device
		if v.WriteMirror != nil {
			wdata, err = mirror(v, devs, t, slice, add)
		} else {
			wdata, err = slice(RoleWriteData, *v.WriteCache)
		}
		if err != nil {
			return Stack{}, err
		}
		if t.WritebackJobs == nil {
			if jobs := devs.WritebackLimit(v); jobs > 0 {
				t.WritebackJobs = &jobs
			}
		}
		if rf, ok := ReadFirstParams(v, lower.Path(), t); ok {
			lower = add(RoleReadFirst, dm.Table{rf.Target(0, length)})
		}
		wtier := add(RoleWriteTier, dm.Table{WritecacheParams(v, lower.Path(), wdata.Path(), t).Target(0, length)})
		top = dm.Table{fuaBarrier(v, wtier.Path(), length)}
	case pool.ModeWritethrough, pool.ModePassthrough:
		top = dm.Table{dm.LinearParams{Device: lower.Path()}.Target(0, length)}
	default:
		return Stack{}, fmt.Errorf("volume %s: unknown mode %q", v.Name, mode)
	}
	add(RoleTop, top)
	return s, nil
}

// ErrStaleLeg is returned when the only write mirror leg on the node is one
// that missed writes: building on it would serve stale data.
var ErrStaleLeg = errors.New("the write mirror's only present leg is stale")

// ErrNoLeg is returned when no leg of the write mirror is on the node:
// for a write cache on peers, neither peer's replica is attached.
var ErrNoLeg = errors.New("no leg of the write mirror is on this node")

// mirror adds the devices of a mirrored write cache and returns the one
// dm-writecache caches on: a dm-raid raid1 over the two legs, each leg a
// metadata and a data slice. A leg whose SSD is not on this node is left
// out ("- -"): the mirror runs degraded on the other, which holds every
// acknowledged write, and dm-raid's bitmap records what the absent leg
// misses. Both legs absent is an error.
func mirror(v pool.Volume, devs Devices, t Tuning, slice func(Role, pool.Extent) (Device, error), add func(Role, dm.Table) Device) (Device, error) {
	m := v.WriteMirror
	type leg struct {
		meta, data Role
		// path resolves the leg's two slices (metadata, data).
		path func() (meta, data pool.Extent, dev string, err error)
	}
	local := func(metaExt, dataExt pool.Extent) func() (pool.Extent, pool.Extent, string, error) {
		return func() (pool.Extent, pool.Extent, string, error) {
			_, errMeta := devs.path(metaExt)
			_, errData := devs.path(dataExt)
			return metaExt, dataExt, "", errors.Join(errMeta, errData)
		}
	}
	// A peer's replica holds the leg's metadata, then its data.
	remote := func(r *pool.RemoteLeg) func() (pool.Extent, pool.Extent, string, error) {
		return func() (pool.Extent, pool.Extent, string, error) {
			dev, ok := devs.Remote[r.UUID]
			if !ok || dev == "" {
				return pool.Extent{}, pool.Extent{}, "", fmt.Errorf("peer leg on node %s (%s at %s:%d) not attached", r.Node, r.NQN, r.Addr, r.Port)
			}
			return pool.Extent{Offset: 0, Length: pool.MirrorMetaSectors},
				pool.Extent{Offset: pool.MirrorMetaSectors, Length: v.WriteCache.Length}, dev, nil
		}
	}
	legs := []leg{
		{RoleWriteMeta0, RoleWriteLeg0, local(m.Meta, *v.WriteCache)},
		{RoleWriteMeta1, RoleWriteLeg1, local(m.LegMeta, m.Leg)},
	}
	if m.Remote0 != nil {
		legs[0].path = remote(m.Remote0)
	}
	if m.Remote != nil {
		legs[1].path = remote(m.Remote)
	}
	params := dm.Raid1Params{MinRecoveryRate: t.MirrorMinRecoveryRate}
	var absent []error
	var remoteLegs []int
	for _, l := range legs {
		metaExt, dataExt, dev, err := l.path()
		if err != nil {
			absent = append(absent, err)
			params.Legs = append(params.Legs, dm.RaidLeg{Meta: dm.MissingLeg, Data: dm.MissingLeg})
			continue
		}
		var meta, data Device
		if dev != "" {
			meta = add(l.meta, dm.Table{peerSlice(v, dev, metaExt)})
			data = add(l.data, dm.Table{peerSlice(v, dev, dataExt)})
		} else {
			if meta, err = slice(l.meta, metaExt); err != nil {
				return Device{}, err
			}
			if data, err = slice(l.data, dataExt); err != nil {
				return Device{}, err
			}
		}
		params.Legs = append(params.Legs, dm.RaidLeg{Meta: meta.Path(), Data: data.Path()})
		if dev != "" {
			remoteLegs = append(remoteLegs, len(params.Legs)-1)
		}
	}
	// md reads from either in-sync leg; a peer's leg costs a network
	// round trip per read (per write-cache block: dm-writecache cuts a
	// read of cached data at each block), so with a leg on this node's
	// own SSD the peer's is write-mostly: written always, read only when
	// the local leg lacks the block (rebuilding, failed or absent).
	if local := len(params.Legs) - len(absent) - len(remoteLegs); local > 0 {
		params.WriteMostly = remoteLegs
	}
	if len(absent) == len(legs) {
		return Device{}, fmt.Errorf("volume %s: %w: %w", v.Name, ErrNoLeg, errors.Join(absent...))
	}
	// A leg that missed writes may run only beside the other, from which
	// dm-raid resyncs it; alone it would serve stale blocks as current.
	if len(absent) > 0 {
		for i, l := range params.Legs {
			if l.Data != dm.MissingLeg && slices.Contains(m.OutOfSync, i) {
				return Device{}, fmt.Errorf("volume %s write mirror: %w: leg %d is the only one on this node and it missed writes while it was out; bring back the SSD of the other leg (%w)",
					v.Name, ErrStaleLeg, i, errors.Join(absent...))
			}
		}
	}
	return add(RoleWriteData, dm.Table{params.Target(0, v.WriteCache.Length)}), nil
}

// peerSlice returns the target of one slice of a peer leg on dev, the
// attached export of the peer's replica. On a volume that can fail over
// it is errhold, not linear: an I/O error from the peer (its SSD failing
// writes, its namespace disabled, the controller deleted) is held rather
// than passed up, where md would drop the leg and acknowledge the write
// on the local leg alone, possibly while this node cannot record in etcd
// that the replica is behind and a failover may promote it. The daemon
// resubmits held I/O, or, once the replica is recorded outdated, fails it
// (engine.FailPeerLeg).
func peerSlice(v pool.Volume, dev string, ext pool.Extent) dm.Target {
	if v.CanFailOver() {
		return dm.ErrHoldParams{Device: dev, Offset: ext.Offset}.Target(0, ext.Length)
	}
	return dm.LinearParams{Device: dev, Offset: ext.Offset}.Target(0, ext.Length)
}

// fuaBarrier returns the target that sits on the write tier: fuaflush,
// which completes a FUA write only after a flush of the write tier has
// committed dm-writecache's metadata (in SSD mode dm-writecache commits on
// a flush but not on FUA, so a FUA write into a new cache block would be
// acknowledged with its mapping only in RAM), or, for a volume whose
// operator accepted that window (FUAWindow), a plain linear mapping.
func fuaBarrier(v pool.Volume, wtier string, length uint64) dm.Target {
	if v.FUAWindow {
		return dm.LinearParams{Device: wtier}.Target(0, length)
	}
	return dm.FUAFlushParams{Device: wtier}.Target(0, length)
}

// ReadBlockSectors returns the dm-cache block size of a volume's read tier
// in sectors: the volume's own, recorded at creation. The block size is
// fixed for the life of the cache (dm-cache refuses a table with another
// one over existing metadata), which is why the volume records its choice
// rather than following the node's setting; volumes made before volumes
// recorded it all used 64 KiB.
func ReadBlockSectors(v pool.Volume) uint64 {
	if v.ReadBlockSize != 0 {
		return uint64(v.ReadBlockSize) / pool.SectorSize
	}
	return legacyReadBlockSectors
}

// legacyReadBlockSectors is the read-tier block size of volumes that
// recorded none: 64 KiB, the only size tidecache used before.
const legacyReadBlockSectors = 128

// NewReadBlockSectors is the read-tier block size a new volume gets when
// its request names none: the node's tuning, else tidecache's default.
func NewReadBlockSectors(t Tuning) uint64 {
	if t.ReadBlockSectors != 0 {
		return t.ReadBlockSectors
	}
	return DefaultTuning().ReadBlockSectors
}

// ReadFirstParams returns the parameters of the readfirst layer between a
// volume's write tier and lower, the device it writes back to, and false
// when the volume gets no such layer: the node's tuning with the volume's
// own on top, a hold bound of 0 meaning none.
func ReadFirstParams(v pool.Volume, lower string, t Tuning) (dm.ReadFirstParams, bool) {
	hold := t.ReadFirstMaxHoldMs
	if vt := v.Tuning; vt != nil && vt.ReadFirstMaxHoldMs != nil {
		hold = *vt.ReadFirstMaxHoldMs
	}
	if hold == 0 {
		return dm.ReadFirstParams{}, false
	}
	return dm.ReadFirstParams{Device: lower, MaxHoldMs: hold, IdleMs: t.ReadFirstIdleMs}, true
}

// WritecacheParams returns the dm-writecache parameters of a volume's write
// tier over the given lower and cache devices: the node's tuning, with the
// volume's own tuning on top.
func WritecacheParams(v pool.Volume, lower, cache string, t Tuning) dm.WritecacheParams {
	bs := v.BlockSize
	if bs == 0 {
		bs = 4096
	}
	p := dm.WritecacheParams{
		Mode:             's',
		Origin:           lower,
		Cache:            cache,
		BlockSize:        bs,
		HighWatermark:    t.HighWatermark,
		LowWatermark:     t.LowWatermark,
		WritebackJobs:    t.WritebackJobs,
		AutocommitBlocks: t.AutocommitBlocks,
		AutocommitTimeMs: t.AutocommitTimeMs,
	}
	// The volume's own tuning (set by policy) overrides the node's.
	if vt := v.Tuning; vt != nil {
		if vt.HighWatermark != nil {
			p.HighWatermark = vt.HighWatermark
		}
		if vt.LowWatermark != nil {
			p.LowWatermark = vt.LowWatermark
		}
		if vt.WritebackJobs != nil {
			p.WritebackJobs = vt.WritebackJobs
		}
		if vt.AutocommitTimeMs != nil {
			p.AutocommitTimeMs = vt.AutocommitTimeMs
		}
	}
	return p
}
