// SPDX-License-Identifier: Apache-2.0

// Package reconciletest provides an in-memory engine for tests and
// benchmarks of the reconcile controller and the metrics collectors: the
// reconcile package's tests and tests/bench/controlplane use the same one.
// Nothing here touches a device.
package reconciletest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/dm"
	"github.com/tidecache/tidecache/pkg/engine"
	"github.com/tidecache/tidecache/pkg/pool"
)

// Engine is an in-memory engine: volumes with a mode, dirty blocks, a
// writecache error field and a drift flag. It records every call that
// would change the kernel, so tests can assert what the controller did
// and, as important, what it did not do. It implements reconcile.Engine,
// metrics.Source and metrics.PoolSource.
type Engine struct {
	// SetModeHook, if set, runs at the start of SetMode (to block it).
	// Set it before the engine is used.
	SetModeHook func(name string, mode pool.Mode)
	// ReadyDelay is how long CreateVolume waits, the time device-mapper
	// would take to load and resume the tables.
	ReadyDelay time.Duration
	// Decorate, if set, edits what the engine reports about a volume (a
	// benchmark fills in the counters of a busy node). It runs under the
	// engine's lock on a copy.
	Decorate func(*engine.VolumeInfo)

	mu    sync.Mutex
	pools []string
	// originOnly are the pools without SSDs (SetOriginOnly).
	originOnly map[string]bool
	// noSpaceAbove, if set, is the largest size ResizeVolume grants.
	noSpaceAbove uint64
	// replicas are the replicas kept (HostReplica), by volume.
	replicas map[string]pool.ReplicaRequest
	vols     map[string]*Volume
	calls    []string
	scans    int
}

// Volume is one volume of the fake engine. Tests change it through With.
type Volume struct {
	Info engine.VolumeInfo
	// Dirty are the write tier's dirty blocks (in writeback).
	Dirty uint64
	// WCError is dm-writecache's error field; non-zero fails the volume.
	WCError int64
	// Drift makes Observe report drift (when asked), until a repair.
	Drift bool
	// Open makes DeleteVolume refuse with engine.ErrInUse.
	Open bool
}

// NewEngine returns an engine with the named pools and no volume.
func NewEngine(pools ...string) *Engine {
	return &Engine{pools: pools, vols: map[string]*Volume{}}
}

// SetOriginOnly makes the named pool one of its origin alone, as on a
// node without SSDs: Observe reports it with an origin and no member, and
// CreateVolume refuses a write cache in it that is not on two peers, as
// the engine does.
func (f *Engine) SetOriginOnly(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.originOnly == nil {
		f.originOnly = map[string]bool{}
	}
	f.originOnly[name] = true
}

func (f *Engine) record(format string, a ...any) {
	f.calls = append(f.calls, fmt.Sprintf(format, a...))
}

// Calls returns the recorded mutating calls.
func (f *Engine) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// Count returns how many recorded calls start with prefix.
func (f *Engine) Count(prefix string) int {
	n := 0
	for _, c := range f.Calls() {
		if strings.HasPrefix(c, prefix) {
			n++
		}
	}
	return n
}

// With runs fn on a volume under the lock; it panics if there is no such
// volume.
func (f *Engine) With(name string, fn func(v *Volume)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.vols[name]
	if !ok {
		panic("fake engine: no volume " + name)
	}
	fn(v)
}

// Mode returns a volume's mode, "" if it does not exist.
func (f *Engine) Mode(name string) pool.Mode {
	f.mu.Lock()
	defer f.mu.Unlock()
	if v, ok := f.vols[name]; ok {
		return v.Info.Mode
	}
	return ""
}

// Exists reports whether a volume exists.
func (f *Engine) Exists(name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.vols[name]
	return ok
}

// AddLocal puts a volume on the node without going through CreateVolume,
// as if tidectl had made it by hand.
func (f *Engine) AddLocal(name, poolName string, mode pool.Mode) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.vols[name] = &Volume{Info: engine.VolumeInfo{Name: name, Pool: poolName, Mode: mode, State: api.StateActive,
		SizeBytes: 1 << 30, WriteCacheBytes: 64 << 20, BlockSize: 4096}}
}

func (f *Engine) view(v *Volume) engine.VolumeInfo {
	info := v.Info
	if info.Mode == pool.ModeWriteback {
		info.WriteCache = &engine.WriteCacheStatus{DirtyBlocks: v.Dirty, DirtyBytes: v.Dirty * 4096, ReadHitRatio: 0.5, WriteHitRatio: 0.25}
		info.WriteCache.Error = v.WCError
		if v.WCError != 0 {
			info.State, info.Error = api.StateError, fmt.Sprintf("dm-writecache reports error %d", v.WCError)
		}
	}
	if f.Decorate != nil {
		f.Decorate(&info)
	}
	return info
}

// Volumes returns every volume, by name.
func (f *Engine) Volumes(ctx context.Context) ([]engine.VolumeInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []engine.VolumeInfo
	for _, v := range f.vols {
		out = append(out, f.view(v))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (f *Engine) Volume(ctx context.Context, name string) (engine.VolumeInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.vols[name]
	if !ok {
		return engine.VolumeInfo{}, fmt.Errorf("volume %s: %w", name, engine.ErrVolumeNotFound)
	}
	return f.view(v), nil
}

func alignUp(b uint64) uint64 {
	const a = pool.Alignment * pool.SectorSize
	return (b + a - 1) / a * a
}

func (f *Engine) CreateVolume(ctx context.Context, poolName string, req pool.VolumeRequest) (engine.VolumeInfo, error) {
	if f.ReadyDelay > 0 {
		t := time.NewTimer(f.ReadyDelay)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return engine.VolumeInfo{}, ctx.Err()
		case <-t.C:
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	call := fmt.Sprintf("create %s pool=%s mode=%s", req.Name, poolName, req.Mode)
	if req.ReadBlockSize != 0 {
		call += fmt.Sprintf(" read-block-size=%d", req.ReadBlockSize)
	}
	if req.Protect != "" {
		call += " protect=" + string(req.Protect)
	}
	if r := req.Peer0; r != nil {
		call += fmt.Sprintf(" peer0=%s@%s:%d/%s", r.Node, r.Addr, r.Port, r.NQN)
	}
	if r := req.Peer; r != nil {
		call += fmt.Sprintf(" peer=%s@%s:%d/%s", r.Node, r.Addr, r.Port, r.NQN)
	}
	f.record("%s", call)
	if poolName == "" && len(f.pools) == 1 {
		poolName = f.pools[0]
	}
	if !slices.Contains(f.pools, poolName) {
		return engine.VolumeInfo{}, fmt.Errorf("pool %s: %w", poolName, engine.ErrPoolNotFound)
	}
	if _, ok := f.vols[req.Name]; ok {
		return engine.VolumeInfo{}, fmt.Errorf("volume %s: %w", req.Name, pool.ErrVolumeExists)
	}
	if f.originOnly[poolName] && (req.ReadCache > 0 || req.WriteCache > 0 && req.Peer0 == nil) {
		return engine.VolumeInfo{}, fmt.Errorf("volume %q: pool %q has no SSDs: %w", req.Name, poolName, pool.ErrInvalidRequest)
	}
	mode := req.Mode
	if mode == "" {
		mode = pool.ModePassthrough
		if req.WriteCache > 0 {
			mode = pool.ModeWriteback
		}
	}
	v := &Volume{Info: engine.VolumeInfo{Name: req.Name, Pool: poolName, Mode: mode, State: api.StateActive,
		SizeBytes: alignUp(req.Size), WriteCacheBytes: alignUp(req.WriteCache), ReadCacheBytes: alignUp(req.ReadCache), BlockSize: 4096}}
	if req.ReadCache > 0 {
		// Like the engine: the volume records the node default (64 KiB)
		// when the request chose none.
		v.Info.ReadBlockSize = cmp.Or(req.ReadBlockSize, 64<<10)
	}
	v.Info.Protection = req.Protect
	if req.Peer != nil {
		v.Info.PeerNode = req.Peer.Node
	}
	if req.Peer0 != nil {
		v.Info.PeerNode0 = req.Peer0.Node
	}
	f.vols[req.Name] = v
	return f.view(v), nil
}

// MovePeerLeg records the move and points the volume's leg index at leg
// (peer= for leg 1, peer0= for leg 0 in the record).
func (f *Engine) MovePeerLeg(ctx context.Context, name string, index int, leg pool.RemoteLeg) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := map[int]string{0: "peer0", 1: "peer"}[index]
	f.record("move-peer-leg %s %s=%s@%s:%d/%s", name, key, leg.Node, leg.Addr, leg.Port, leg.NQN)
	v, ok := f.vols[name]
	if !ok {
		return fmt.Errorf("volume %s: %w", name, engine.ErrVolumeNotFound)
	}
	node := map[int]*string{0: &v.Info.PeerNode0, 1: &v.Info.PeerNode}[index]
	if node == nil || *node == "" {
		return fmt.Errorf("volume %s has no peer leg %d to move", name, index)
	}
	*node = leg.Node
	return nil
}

func (f *Engine) DeleteVolume(ctx context.Context, name string, force bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("delete %s force=%v", name, force)
	v, ok := f.vols[name]
	switch {
	case !ok:
		return fmt.Errorf("volume %s: %w", name, engine.ErrVolumeNotFound)
	case v.Open:
		return fmt.Errorf("volume %s: %w", name, engine.ErrInUse)
	case v.Info.Mode == pool.ModeWriteback && v.Dirty > 0 && !force:
		return fmt.Errorf("volume %s: %w: %d blocks", name, engine.ErrDirty, v.Dirty)
	}
	delete(f.vols, name)
	return nil
}

func (f *Engine) SetMode(ctx context.Context, name string, mode pool.Mode, progress engine.ProgressFunc) error {
	f.mu.Lock()
	hook := f.SetModeHook
	f.mu.Unlock()
	if hook != nil {
		hook(name, mode)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("setmode %s %s", name, mode)
	v, ok := f.vols[name]
	switch {
	case !ok:
		return fmt.Errorf("volume %s: %w", name, engine.ErrVolumeNotFound)
	case v.Drift:
		return &engine.DriftError{Device: "tc-" + name, Want: "x", Got: "y"}
	case mode == pool.ModeWriteback && v.Info.WriteCacheBytes == 0:
		return fmt.Errorf("volume %s: has no write cache slice, cannot switch to writeback", name)
	case v.Info.Mode == pool.ModeWriteback && mode != pool.ModeWriteback && v.WCError != 0:
		// Like the engine: an errored write tier cannot be drained.
		return fmt.Errorf("volume %s: drain: write cache in error state (%d): the SSD failed; dirty data cannot be written back", name, v.WCError)
	}
	if v.Info.Mode == pool.ModeWriteback && mode != pool.ModeWriteback && progress != nil {
		progress(engine.Progress{Volume: name, Phase: "drain", DirtyBlocks: v.Dirty, BlockSize: 4096})
	}
	if mode != pool.ModeWriteback {
		v.Dirty, v.WCError = 0, 0
	}
	// Like the engine: a write mirror exists only in writeback, and a new
	// one starts whole.
	switch {
	case mode != pool.ModeWriteback:
		v.Info.Mirror = nil
	case v.Info.Mode != pool.ModeWriteback && v.Info.Protection != "" && v.Info.Protection != pool.ProtectNone:
		v.Info.Mirror = &engine.MirrorStatus{RaidStatus: dm.RaidStatus{Health: []dm.LegHealth{dm.LegInSync, dm.LegInSync}}, Copies: 2}
	}
	v.Info.Mode = mode
	return nil
}

func (f *Engine) Flush(ctx context.Context, name string, progress engine.ProgressFunc) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("flush %s", name)
	v, ok := f.vols[name]
	if !ok {
		return 0, fmt.Errorf("volume %s: %w", name, engine.ErrVolumeNotFound)
	}
	if v.WCError != 0 {
		return v.Dirty, fmt.Errorf("volume %s: flush: write cache in error state (%d)", name, v.WCError)
	}
	v.Dirty = 0
	return 0, nil
}

func (f *Engine) RepairVolume(ctx context.Context, name string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("repair %s", name)
	v, ok := f.vols[name]
	if !ok {
		return nil, fmt.Errorf("volume %s: %w", name, engine.ErrVolumeNotFound)
	}
	if !v.Drift {
		return nil, nil
	}
	v.Drift = false
	return []string{"tc-" + name}, nil
}

// LimitSize makes ResizeVolume refuse sizes above n bytes, as a pool
// without room would.
func (f *Engine) LimitSize(n uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.noSpaceAbove = n
}

// ResizeVolume records the growth and grows the volume; like the engine
// it refuses to shrink, and refuses growth past LimitSize with
// pool.ErrNoSpace.
func (f *Engine) ResizeVolume(ctx context.Context, name string, size uint64) (engine.VolumeInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.vols[name]
	switch {
	case !ok:
		return engine.VolumeInfo{}, fmt.Errorf("volume %s: %w", name, engine.ErrVolumeNotFound)
	case alignUp(size) < v.Info.SizeBytes:
		return engine.VolumeInfo{}, fmt.Errorf("volume %s: shrinking: %w", name, pool.ErrInvalidRequest)
	case f.noSpaceAbove != 0 && size > f.noSpaceAbove:
		return engine.VolumeInfo{}, fmt.Errorf("volume %s: not enough free space: %w", name, pool.ErrNoSpace)
	}
	f.record("resize %s %d", name, alignUp(size))
	v.Info.SizeBytes = alignUp(size)
	return f.view(v), nil
}

func (f *Engine) SetTuning(ctx context.Context, name string, t *pool.Tuning) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.vols[name]
	if !ok {
		return false, fmt.Errorf("volume %s: %w", name, engine.ErrVolumeNotFound)
	}
	if v.Info.Tuning.Equal(t) {
		return false, nil
	}
	f.record("tune %s %s", name, TuningString(t))
	v.Info.Tuning = t
	return true, nil
}

// TuningString prints a tuning for call records: "hw=30 lw=20 jobs=-".
func TuningString(t *pool.Tuning) string {
	if t.Empty() {
		return "defaults"
	}
	i := func(p *int) string {
		if p == nil {
			return "-"
		}
		return fmt.Sprint(*p)
	}
	u := "-"
	if t.WritebackJobs != nil {
		u = fmt.Sprint(*t.WritebackJobs)
	}
	s := fmt.Sprintf("hw=%s lw=%s jobs=%s", i(t.HighWatermark), i(t.LowWatermark), u)
	if t.AutocommitTimeMs != nil {
		s += fmt.Sprintf(" autocommit=%d", *t.AutocommitTimeMs)
	}
	return s
}

// Observe returns the pools and the volumes asked for, with drift when
// asked, as one engine read; it counts as one scan (Scans).
func (f *Engine) Observe(ctx context.Context, req engine.ObserveRequest) (engine.Observation, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.scans++
	var obs engine.Observation
	for _, p := range f.pools {
		pi := engine.PoolInfo{Name: p, Volumes: []string{}}
		if f.originOnly[p] {
			pi.Origin.Path = "/dev/md/tc-" + p
		}
		for _, v := range f.vols {
			if v.Info.Pool == p {
				pi.Volumes = append(pi.Volumes, v.Info.Name)
			}
		}
		slices.Sort(pi.Volumes)
		obs.Pools = append(obs.Pools, pi)
	}
	for name, v := range f.vols {
		if req.Volumes != nil && !slices.Contains(req.Volumes, name) {
			continue
		}
		vo := engine.VolumeObservation{Info: f.view(v)}
		if req.Drift && v.Drift {
			vo.Drift = driftError(name)
		}
		obs.Volumes = append(obs.Volumes, vo)
	}
	sort.Slice(obs.Volumes, func(i, j int) bool { return obs.Volumes[i].Info.Name < obs.Volumes[j].Info.Name })
	return obs, nil
}

// Pools lists the engine's pools with their volumes.
func (f *Engine) Pools(ctx context.Context) ([]engine.PoolInfo, error) {
	obs, err := f.Observe(ctx, engine.ObserveRequest{Volumes: []string{}})
	return obs.Pools, err
}

// RecordMirrors does nothing: the fake has no write mirrors.
func (f *Engine) RecordMirrors(context.Context) ([]string, error) { return nil, nil }

// GiveBackLeg does nothing: the fake has no write mirrors.
func (f *Engine) GiveBackLeg(context.Context, string) (bool, error) { return false, nil }

// Scans returns how many times Observe (or Pools) read the whole node.
func (f *Engine) Scans() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.scans
}

// driftError is the drift the fake reports: the top device runs a linear
// table instead of its writecache.
func driftError(name string) error {
	return errors.Join(&engine.DriftError{Device: "tc-" + name, Want: "0 2097152 writecache s ...", Got: "0 2097152 linear 253:0 0"})
}

// HostReplica records the call and keeps the replica in memory.
func (f *Engine) HostReplica(_ context.Context, poolName string, req pool.ReplicaRequest) (engine.ReplicaInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("host-replica %s owner=%s host=%s pool=%s", req.Volume, req.Owner, req.HostNQN, poolName)
	if f.replicas == nil {
		f.replicas = map[string]pool.ReplicaRequest{}
	}
	f.replicas[req.Volume] = req
	return engine.ReplicaInfo{Pool: poolName, Replica: pool.Replica{Volume: req.Volume, Owner: req.Owner, HostNQN: req.HostNQN}}, nil
}

// DropReplica records the call and forgets the replica.
func (f *Engine) DropReplica(_ context.Context, volume string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("drop-replica %s", volume)
	delete(f.replicas, volume)
	return nil
}

// KeptReplicas names the replicas kept, sorted.
func (f *Engine) KeptReplicas(context.Context) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Sorted(maps.Keys(f.replicas)), nil
}

// KeepReplica makes the engine keep a replica as if an earlier run had
// (HostReplica), without recording a call: what a restarted node finds on
// its disks.
func (f *Engine) KeepReplica(req pool.ReplicaRequest) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.replicas == nil {
		f.replicas = map[string]pool.ReplicaRequest{}
	}
	f.replicas[req.Volume] = req
}

// ServeReplicas reports the replicas kept, all exported.
func (f *Engine) ServeReplicas(context.Context, string, int) ([]engine.ReplicaInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []engine.ReplicaInfo
	for _, r := range f.replicas {
		out = append(out, engine.ReplicaInfo{Replica: pool.Replica{Volume: r.Volume, Owner: r.Owner, HostNQN: r.HostNQN}, Exported: true})
	}
	return out, nil
}
