package reconcile_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/engine"
	"github.com/tidecache/tidecache/pkg/pool"
)

// fakeEngine is an in-memory engine: volumes with a mode, dirty blocks, a
// writecache error field and a drift flag. It records every call that
// would change the kernel, so tests can assert what the controller did
// and, as important, what it did not do.
type fakeEngine struct {
	mu    sync.Mutex
	pools []string
	vols  map[string]*fakeVol
	calls []string
	// setModeHook, if set, runs at the start of SetMode (to block it).
	setModeHook func(name string, mode pool.Mode)
}

type fakeVol struct {
	info    engine.VolumeInfo
	dirty   uint64
	wcError int64
	drift   bool
	open    bool
}

func newFakeEngine(pools ...string) *fakeEngine {
	return &fakeEngine{pools: pools, vols: map[string]*fakeVol{}}
}

func (f *fakeEngine) record(format string, a ...any) {
	f.calls = append(f.calls, fmt.Sprintf(format, a...))
}

// Calls returns the recorded mutating calls.
func (f *fakeEngine) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// count returns how many recorded calls start with prefix.
func (f *fakeEngine) count(prefix string) int {
	n := 0
	for _, c := range f.Calls() {
		if strings.HasPrefix(c, prefix) {
			n++
		}
	}
	return n
}

// with runs fn on a volume under the lock.
func (f *fakeEngine) with(name string, fn func(v *fakeVol)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.vols[name]
	if !ok {
		panic("fake engine: no volume " + name)
	}
	fn(v)
}

func (f *fakeEngine) mode(name string) pool.Mode {
	f.mu.Lock()
	defer f.mu.Unlock()
	if v, ok := f.vols[name]; ok {
		return v.info.Mode
	}
	return ""
}

func (f *fakeEngine) exists(name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.vols[name]
	return ok
}

// addLocal puts a volume on the node without going through CreateVolume,
// as if tidectl had made it by hand.
func (f *fakeEngine) addLocal(name, poolName string, mode pool.Mode) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.vols[name] = &fakeVol{info: engine.VolumeInfo{Name: name, Pool: poolName, Mode: mode, State: api.StateActive,
		SizeBytes: 1 << 30, WriteCacheBytes: 64 << 20, BlockSize: 4096}}
}

func (f *fakeEngine) view(v *fakeVol) engine.VolumeInfo {
	info := v.info
	if info.Mode == pool.ModeWriteback {
		info.WriteCache = &engine.WriteCacheStatus{DirtyBlocks: v.dirty, DirtyBytes: v.dirty * 4096, ReadHitRatio: 0.5, WriteHitRatio: 0.25}
		info.WriteCache.Error = v.wcError
		if v.wcError != 0 {
			info.State, info.Error = api.StateError, fmt.Sprintf("dm-writecache reports error %d", v.wcError)
		}
	}
	return info
}

func (f *fakeEngine) Volumes(ctx context.Context) ([]engine.VolumeInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []engine.VolumeInfo
	for _, v := range f.vols {
		out = append(out, f.view(v))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (f *fakeEngine) Volume(ctx context.Context, name string) (engine.VolumeInfo, error) {
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

func (f *fakeEngine) CreateVolume(ctx context.Context, poolName string, req pool.VolumeRequest) (engine.VolumeInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if req.ReadBlockSize != 0 {
		f.record("create %s pool=%s mode=%s read-block-size=%d", req.Name, poolName, req.Mode, req.ReadBlockSize)
	} else {
		f.record("create %s pool=%s mode=%s", req.Name, poolName, req.Mode)
	}
	if poolName == "" && len(f.pools) == 1 {
		poolName = f.pools[0]
	}
	if !slices.Contains(f.pools, poolName) {
		return engine.VolumeInfo{}, fmt.Errorf("pool %s: %w", poolName, engine.ErrPoolNotFound)
	}
	if _, ok := f.vols[req.Name]; ok {
		return engine.VolumeInfo{}, fmt.Errorf("volume %s: %w", req.Name, pool.ErrVolumeExists)
	}
	mode := req.Mode
	if mode == "" {
		mode = pool.ModePassthrough
		if req.WriteCache > 0 {
			mode = pool.ModeWriteback
		}
	}
	v := &fakeVol{info: engine.VolumeInfo{Name: req.Name, Pool: poolName, Mode: mode, State: api.StateActive,
		SizeBytes: alignUp(req.Size), WriteCacheBytes: alignUp(req.WriteCache), ReadCacheBytes: alignUp(req.ReadCache), BlockSize: 4096}}
	if req.ReadCache > 0 {
		// Like the engine: the volume records the node default (64 KiB)
		// when the request chose none.
		v.info.ReadBlockSize = cmp.Or(req.ReadBlockSize, 64<<10)
	}
	f.vols[req.Name] = v
	return f.view(v), nil
}

func (f *fakeEngine) DeleteVolume(ctx context.Context, name string, force bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("delete %s force=%v", name, force)
	v, ok := f.vols[name]
	switch {
	case !ok:
		return fmt.Errorf("volume %s: %w", name, engine.ErrVolumeNotFound)
	case v.open:
		return fmt.Errorf("volume %s: %w", name, engine.ErrInUse)
	case v.info.Mode == pool.ModeWriteback && v.dirty > 0 && !force:
		return fmt.Errorf("volume %s: %w: %d blocks", name, engine.ErrDirty, v.dirty)
	}
	delete(f.vols, name)
	return nil
}

func (f *fakeEngine) SetMode(ctx context.Context, name string, mode pool.Mode, progress engine.ProgressFunc) error {
	f.mu.Lock()
	hook := f.setModeHook
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
	case v.drift:
		return &engine.DriftError{Device: "tc-" + name, Want: "x", Got: "y"}
	case mode == pool.ModeWriteback && v.info.WriteCacheBytes == 0:
		return fmt.Errorf("volume %s: has no write cache slice, cannot switch to writeback", name)
	case v.info.Mode == pool.ModeWriteback && mode != pool.ModeWriteback && v.wcError != 0:
		// Like the engine: an errored write tier cannot be drained.
		return fmt.Errorf("volume %s: drain: write cache in error state (%d): the SSD failed; dirty data cannot be written back", name, v.wcError)
	}
	if v.info.Mode == pool.ModeWriteback && mode != pool.ModeWriteback && progress != nil {
		progress(engine.Progress{Volume: name, Phase: "drain", DirtyBlocks: v.dirty, BlockSize: 4096})
	}
	if mode != pool.ModeWriteback {
		v.dirty, v.wcError = 0, 0
	}
	v.info.Mode = mode
	return nil
}

func (f *fakeEngine) Flush(ctx context.Context, name string, progress engine.ProgressFunc) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("flush %s", name)
	v, ok := f.vols[name]
	if !ok {
		return 0, fmt.Errorf("volume %s: %w", name, engine.ErrVolumeNotFound)
	}
	if v.wcError != 0 {
		return v.dirty, fmt.Errorf("volume %s: flush: write cache in error state (%d)", name, v.wcError)
	}
	v.dirty = 0
	return 0, nil
}

func (f *fakeEngine) CheckVolume(ctx context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.vols[name]
	if !ok {
		return fmt.Errorf("volume %s: %w", name, engine.ErrVolumeNotFound)
	}
	if v.drift {
		return errors.Join(&engine.DriftError{Device: "tc-" + name, Want: "0 2097152 writecache s ...", Got: "0 2097152 linear 253:0 0"})
	}
	return nil
}

func (f *fakeEngine) RepairVolume(ctx context.Context, name string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("repair %s", name)
	v, ok := f.vols[name]
	if !ok {
		return nil, fmt.Errorf("volume %s: %w", name, engine.ErrVolumeNotFound)
	}
	if !v.drift {
		return nil, nil
	}
	v.drift = false
	return []string{"tc-" + name}, nil
}

func (f *fakeEngine) SetTuning(ctx context.Context, name string, t *pool.Tuning) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.vols[name]
	if !ok {
		return false, fmt.Errorf("volume %s: %w", name, engine.ErrVolumeNotFound)
	}
	if v.info.Tuning.Equal(t) {
		return false, nil
	}
	f.record("tune %s %s", name, tuningString(t))
	v.info.Tuning = t
	return true, nil
}

// tuningString prints a tuning for call records: "hw=30 lw=20 jobs=-".
func tuningString(t *pool.Tuning) string {
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

// fakeSSDs is a settable SSD inventory.
type fakeSSDs struct {
	mu   sync.Mutex
	ssds []api.SSDInventory
}

func (s *fakeSSDs) set(ssds ...api.SSDInventory) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ssds = ssds
}

func (s *fakeSSDs) SSDs(ctx context.Context) ([]api.SSDInventory, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.ssds), nil
}
