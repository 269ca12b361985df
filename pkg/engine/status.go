// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/dm"
	"github.com/tidecache/tidecache/pkg/pool"
	"github.com/tidecache/tidecache/pkg/stack"
	"github.com/tidecache/tidecache/pkg/writeback"
)

// VolumeInfo is the view of one volume: what the layout says and what the
// kernel reports right now.
type VolumeInfo struct {
	Name            string    `json:"name"`
	UUID            string    `json:"uuid"`
	Pool            string    `json:"pool"`
	Mode            pool.Mode `json:"mode"`
	Device          string    `json:"device"`
	SizeBytes       uint64    `json:"size_bytes"`
	WriteCacheBytes uint64    `json:"write_cache_bytes"`
	ReadCacheBytes  uint64    `json:"read_cache_bytes"`
	BlockSize       uint32    `json:"block_size"`
	// ReadBlockSize is the read tier's dm-cache block size in bytes: the
	// volume's own, or the node default for a volume that recorded none.
	// Absent without a read cache.
	ReadBlockSize uint32 `json:"read_block_size,omitempty"`
	// Tuning is the volume's own write-tier tuning; nil means node defaults.
	Tuning *pool.Tuning `json:"tuning,omitempty"`
	// FUAWindow is set when the operator accepted that FUA writes can be
	// lost (pool.Volume.FUAWindow): the write tier has no fuaflush above it.
	FUAWindow bool `json:"fua_window"`
	// LegacyStack is set when the running top device is dm-writecache
	// itself, the stack of tidecache before fuaflush; assemble migrates it.
	LegacyStack bool `json:"legacy_stack,omitempty"`
	// FUAFlush is the fuaflush target's status, when it runs.
	FUAFlush *dm.FUAFlushStatus `json:"fua_flush,omitempty"`
	// ReadFirst is the status of the readfirst layer under the write
	// tier, when it runs: how much write-back it held for reads.
	ReadFirst *dm.ReadFirstStatus `json:"read_first,omitempty"`
	// State is api.StateActive, StateSuspended, StateInactive (no
	// device) or StateError.
	State string `json:"state"`
	// Error holds the reason when State is api.StateError.
	Error      string            `json:"error,omitempty"`
	WriteCache *WriteCacheStatus `json:"write_cache,omitempty"`
	ReadCache  *ReadCacheStatus  `json:"read_cache,omitempty"`
	// Protection is how many copies the write cache keeps: none, local or peer
	// (mirrored on two SSDs).
	Protection pool.Protection `json:"protection"`
	// PeerNode is the node holding leg 1 of a peer mirror.
	PeerNode string `json:"peer_node,omitempty"`
	// PeerNode0 is the node holding leg 0 of a write cache on peers (a
	// node without SSDs); "" when leg 0 is on this node.
	PeerNode0 string `json:"peer_node0,omitempty"`
	// Mirror is the write mirror as dm-raid reports it, when it runs.
	Mirror *MirrorStatus `json:"mirror,omitempty"`
	// MirrorOutOfSync lists the mirror legs the layout records as lacking
	// writes: never built alone until dm-raid has resynced them.
	MirrorOutOfSync []int `json:"mirror_out_of_sync,omitempty"`
	// AdoptedDevice names the device an adopted volume caches, with the
	// identifiers it is found by; empty for a volume carved from its
	// pool's origin.
	AdoptedDevice string `json:"adopted_device,omitempty"`
	// CanFailOver says the volume can fail over to another node
	// (pool.Volume.CanFailOver): its peer leg holds the replica's errors
	// (dm-errhold) until the cluster records the replica behind.
	CanFailOver bool `json:"can_fail_over,omitempty"`
	// DataLoss says when the volume's write cache was given up with its
	// dirty blocks (pool force-start --accept-data-loss); "" if never.
	DataLoss string `json:"data_loss,omitempty"`
	// DataLossUnix is when that loss was recorded (Unix seconds); 0 if
	// never.
	DataLossUnix int64 `json:"data_loss_unix,omitempty"`
	// FailedOverFrom is the node the volume ran on before this node took
	// it over from its replica (its origin is shared) when that node was
	// fenced; "" otherwise.
	FailedOverFrom string `json:"failed_over_from,omitempty"`
	// FailedOverUnix is when (Unix seconds).
	FailedOverUnix int64 `json:"failed_over_unix,omitempty"`
	// MovedFrom is the node that handed the volume over to this one in a
	// planned move, this node taking it over from its replica the same
	// way; "" otherwise.
	MovedFrom string `json:"moved_from,omitempty"`
	// MovedUnix is when (Unix seconds).
	MovedUnix int64 `json:"moved_unix,omitempty"`
	// WritebackLimit is the write tier's bound on write-back I/Os in
	// flight (dm-writecache writeback_jobs), who chose it and why; absent
	// without a write cache.
	WritebackLimit *writeback.Limit `json:"writeback_limit,omitempty"`
}

// TakenOverFrom is the node the volume ran on before this node took it
// over from its replica, in a failover or a planned move alike; "" if
// it never was.
func (v VolumeInfo) TakenOverFrom() string { return cmp.Or(v.FailedOverFrom, v.MovedFrom) }

// MirrorStatus is the state of a mirrored write cache.
type MirrorStatus struct {
	dm.RaidStatus
	// Copies counts the legs alive and in sync: 2 when protected, 1 when
	// a single SSD holds the only copy of the dirty blocks.
	Copies int `json:"copies"`
	// Degraded is set while fewer than every leg holds every acknowledged
	// write: a leg failed, is absent, or is being rebuilt.
	Degraded bool `json:"degraded"`
	// SyncPercent is the share of the resync or rebuild done.
	SyncPercent float64 `json:"sync_percent"`
	// PeerHeld counts the I/Os the peer failed that the peer leg holds
	// (dm-errhold, on a volume that can fail over): writes that wait,
	// unacknowledged, until the peer takes them or the daemon records the
	// replica outdated.
	PeerHeld uint64 `json:"peer_held,omitempty"`
}

// WriteCacheStatus is the write tier as dm-writecache reports it.
type WriteCacheStatus struct {
	dm.WritecacheStatus
	DirtyBlocks  uint64  `json:"dirty_blocks"`
	DirtyBytes   uint64  `json:"dirty_bytes"`
	UsedPercent  float64 `json:"used_percent"`
	ReadHitRatio float64 `json:"read_hit_ratio"`
	// WriteHitRatio counts writes that landed on a block already cached.
	WriteHitRatio float64 `json:"write_hit_ratio"`
}

// ReadCacheStatus is the read tier as dm-cache reports it.
type ReadCacheStatus struct {
	dm.CacheStatus
	ReadHitRatio float64 `json:"read_hit_ratio"`
}

// Volumes lists every volume of every pool on the node.
func (e *Engine) Volumes(ctx context.Context) ([]VolumeInfo, error) {
	found, err := e.scan(ctx)
	if err != nil {
		return nil, err
	}
	var out []VolumeInfo
	for _, p := range found.sortedPools() {
		for _, v := range p.Layout.Volumes {
			out = append(out, e.volumeInfo(ctx, p, v))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Volume returns one volume by name.
func (e *Engine) Volume(ctx context.Context, name string) (VolumeInfo, error) {
	found, err := e.scan(ctx)
	if err != nil {
		return VolumeInfo{}, err
	}
	p, v, err := findVolume(found, name)
	if err != nil {
		return VolumeInfo{}, err
	}
	return e.volumeInfo(ctx, p, *v), nil
}

func (e *Engine) volumeInfo(ctx context.Context, p *poolState, v pool.Volume) VolumeInfo {
	top := stack.DeviceName(v.Name, stack.RoleTop)
	info := VolumeInfo{
		Name: v.Name, UUID: v.UUID, Pool: p.Layout.Name, Mode: v.Mode,
		Device: dm.DevicePath(top), SizeBytes: v.SizeSectors() * pool.SectorSize,
		BlockSize: blockSize(v), Tuning: v.Tuning, FUAWindow: v.FUAWindow,
		Protection: v.Protection(),
	}
	if v.WriteCache != nil {
		info.WriteCacheBytes = v.WriteCache.Length * pool.SectorSize
	}
	if v.Adopted != nil {
		info.AdoptedDevice = v.Adopted.String()
	}
	info.CanFailOver = v.CanFailOver()
	if l := e.writebackLimit(p, v); l != nil {
		l.HighWatermark, l.LowWatermark, l.WatermarkSource = e.watermarks(v)
		info.WritebackLimit = l
	}
	if d := v.DataLoss; d != nil {
		info.DataLossUnix = d.Unix
		info.DataLoss = fmt.Sprintf("the writes its write cache held were lost on %s: SSD %s was missing and the pool was force-started without it",
			time.Unix(d.Unix, 0).UTC().Format(time.RFC3339), d.Member)
	}
	switch f := v.FailedOver; {
	case f == nil:
	case f.Planned:
		info.MovedFrom, info.MovedUnix = f.From, f.Unix
	default:
		info.FailedOverFrom, info.FailedOverUnix = f.From, f.Unix
	}
	if v.WriteMirror != nil {
		info.MirrorOutOfSync = v.WriteMirror.OutOfSync
		if r := v.WriteMirror.Remote; r != nil {
			info.PeerNode = r.Node
		}
		if r := v.WriteMirror.Remote0; r != nil {
			info.PeerNode0 = r.Node
		}
	}
	if v.ReadCache != nil {
		info.ReadCacheBytes = v.ReadCache.Length * pool.SectorSize
		info.ReadBlockSize = uint32(stack.ReadBlockSectors(v) * pool.SectorSize)
	}
	di, err := e.dm.Info(ctx, top)
	switch {
	case errors.Is(err, dm.ErrNotFound):
		info.State = api.StateInactive
		return info
	case err != nil:
		info.State, info.Error = api.StateError, err.Error()
		return info
	case di.Suspended:
		info.State = api.StateSuspended
	default:
		info.State = api.StateActive
	}
	wtier, wc, ok, err := e.writeTier(ctx, v.Name)
	if err != nil {
		info.State, info.Error = api.StateError, err.Error()
		return info
	}
	info.LegacyStack = ok && wtier == top
	if ff, fok, err := e.fuaFlushStatus(ctx, top); err != nil {
		info.State, info.Error = api.StateError, err.Error()
		return info
	} else if fok {
		info.FUAFlush = &ff
	}
	if rf, rok, err := e.readFirstStatus(ctx, stack.DeviceName(v.Name, stack.RoleReadFirst)); err != nil {
		info.State, info.Error = api.StateError, err.Error()
		return info
	} else if rok {
		info.ReadFirst = &rf
	}
	if ok {
		s := WriteCacheStatus{WritecacheStatus: wc, DirtyBlocks: wc.DirtyBlocks()}
		s.DirtyBytes = s.DirtyBlocks * uint64(info.BlockSize)
		s.UsedPercent = ratio(s.DirtyBlocks, wc.TotalBlocks) * 100
		s.ReadHitRatio = ratio(wc.ReadHits, wc.Reads)
		s.WriteHitRatio = ratio(wc.WriteHitsUncommitted+wc.WriteHitsCommitted, wc.Writes)
		info.WriteCache = &s
		if wc.Error != 0 {
			info.State, info.Error = api.StateError, fmt.Sprintf("dm-writecache reports error %d: the SSD failed; writes are refused until the volume is repaired", wc.Error)
		}
	}
	if ms, ok, err := e.mirrorStatus(ctx, v.Name); err != nil {
		info.State, info.Error = api.StateError, err.Error()
		return info
	} else if ok {
		if v.CanFailOver() {
			if ms.PeerHeld, _, err = e.peerSlices(ctx, v.Name); err != nil {
				info.State, info.Error = api.StateError, err.Error()
				return info
			}
		}
		info.Mirror = &ms
	}
	rc, ok, err := e.cacheStatus(ctx, stack.DeviceName(v.Name, stack.RoleReadTier))
	if err != nil {
		info.State, info.Error = api.StateError, err.Error()
		return info
	}
	if ok {
		info.ReadCache = &ReadCacheStatus{CacheStatus: rc, ReadHitRatio: ratio(rc.ReadHits, rc.ReadHits+rc.ReadMisses)}
		if rc.Failed {
			info.State, info.Error = api.StateError, "dm-cache read tier failed"
		}
	}
	return info
}

func ratio(a, b uint64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// targetStatus returns the status parameters of a device whose table is
// one target of type target; ok is false when the device does not exist
// or runs another table.
func (e *Engine) targetStatus(ctx context.Context, name, target string) (params string, ok bool, err error) {
	st, err := e.dm.Status(ctx, name)
	if errors.Is(err, dm.ErrNotFound) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("status of %s: %w", name, err)
	}
	if len(st) != 1 || st[0].Type != target {
		return "", false, nil
	}
	return st[0].Params, true, nil
}

// writecacheStatus reads the dm-writecache status of a device; ok is false
// when the device does not exist or its table is not a writecache.
func (e *Engine) writecacheStatus(ctx context.Context, name string) (dm.WritecacheStatus, bool, error) {
	params, ok, err := e.targetStatus(ctx, name, "writecache")
	if err != nil || !ok {
		return dm.WritecacheStatus{}, false, err
	}
	ver, err := e.targetVersion(ctx, "writecache")
	if err != nil {
		return dm.WritecacheStatus{}, false, err
	}
	wc, err := dm.ParseWritecacheStatus(params, ver)
	if err != nil {
		return dm.WritecacheStatus{}, false, fmt.Errorf("status of %s: %w", name, err)
	}
	return wc, true, nil
}

// fuaFlushStatus reads the status of a fuaflush device; ok is false when
// the device does not exist or its table is not a fuaflush.
func (e *Engine) fuaFlushStatus(ctx context.Context, name string) (dm.FUAFlushStatus, bool, error) {
	return parsedStatus(ctx, e, name, dm.FUAFlushTarget, dm.ParseFUAFlushStatus)
}

// readFirstStatus reads the status of a readfirst device; ok is false when
// the device does not exist or its table is not a readfirst.
func (e *Engine) readFirstStatus(ctx context.Context, name string) (dm.ReadFirstStatus, bool, error) {
	return parsedStatus(ctx, e, name, dm.ReadFirstTarget, dm.ParseReadFirstStatus)
}

// parsedStatus reads the status of a device running target (see
// targetStatus) and parses it with parse; ok is false when the device does
// not exist or runs another target.
func parsedStatus[T any](ctx context.Context, e *Engine, name, target string, parse func(string) (T, error)) (T, bool, error) {
	var zero T
	params, ok, err := e.targetStatus(ctx, name, target)
	if err != nil || !ok {
		return zero, false, err
	}
	st, err := parse(params)
	if err != nil {
		return zero, false, fmt.Errorf("status of %s: %w", name, err)
	}
	return st, true, nil
}

// cacheStatus reads the dm-cache status of a device; ok is false when the
// device does not exist.
func (e *Engine) cacheStatus(ctx context.Context, name string) (dm.CacheStatus, bool, error) {
	params, ok, err := e.targetStatus(ctx, name, "cache")
	if err != nil || !ok {
		return dm.CacheStatus{}, false, err
	}
	ver, err := e.targetVersion(ctx, "cache")
	if err != nil {
		return dm.CacheStatus{}, false, err
	}
	cs, err := dm.ParseCacheStatus(params, ver)
	if err != nil {
		return dm.CacheStatus{}, false, fmt.Errorf("status of %s: %w", name, err)
	}
	return cs, true, nil
}

// mirrorStatus reads the dm-raid status of a volume's write mirror; ok is
// false when the volume runs no mirror.
func (e *Engine) mirrorStatus(ctx context.Context, volume string) (MirrorStatus, bool, error) {
	name := stack.DeviceName(volume, stack.RoleWriteData)
	params, ok, err := e.targetStatus(ctx, name, dm.RaidTarget)
	if err != nil || !ok {
		return MirrorStatus{}, false, err
	}
	rs, err := dm.ParseRaidStatus(params)
	if err != nil {
		return MirrorStatus{}, false, fmt.Errorf("status of %s: %w", name, err)
	}
	return MirrorStatus{RaidStatus: rs, Copies: rs.Copies(), Degraded: rs.Copies() < len(rs.Health), SyncPercent: ratio(rs.SyncDone, rs.SyncTotal) * 100}, true, nil
}
