package main

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/tidecache/tidecache/pkg/dm"
	"github.com/tidecache/tidecache/pkg/engine"
	"github.com/tidecache/tidecache/pkg/pool"
)

// fakeEngine is the benchmark's stand-in for *engine.Engine: volumes live
// in a map, and what the kernel would report about them is made up but
// shaped like a busy node's (every counter the metrics read is set).
// CreateVolume waits readyDelay, the time device-mapper would take to load
// and resume the tables. Nothing here touches a device.
type fakeEngine struct {
	pool       string
	readyDelay time.Duration

	mu   sync.Mutex
	vols map[string]engine.VolumeInfo
}

func newFakeEngine(poolName string, readyDelay time.Duration) *fakeEngine {
	return &fakeEngine{pool: poolName, readyDelay: readyDelay, vols: map[string]engine.VolumeInfo{}}
}

// blockSize is the write tier's block size and the read tier's is
// readBlockSectors.
const (
	blockSize        = 4096
	readBlockSectors = 128 // 64 KiB
)

// create adds a volume in writeback mode, or passthrough without a write
// tier.
func (f *fakeEngine) create(poolName, name string, size, writeCache, readCache uint64) (engine.VolumeInfo, error) {
	if poolName == "" {
		poolName = f.pool
	}
	if poolName != f.pool {
		return engine.VolumeInfo{}, fmt.Errorf("pool %s: %w", poolName, engine.ErrPoolNotFound)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.vols[name]; ok {
		return engine.VolumeInfo{}, fmt.Errorf("volume %s: %w", name, pool.ErrVolumeExists)
	}
	mode := pool.ModePassthrough
	if writeCache > 0 {
		mode = pool.ModeWriteback
	}
	v := engine.VolumeInfo{
		Name: name, UUID: "TIDECACHE-bench-" + name, Pool: poolName, Mode: mode,
		Device: "/dev/mapper/tc-" + name, SizeBytes: size, WriteCacheBytes: writeCache,
		ReadCacheBytes: readCache, BlockSize: blockSize, State: "active",
	}
	n := uint64(len(f.vols))
	if writeCache > 0 {
		total := writeCache / blockSize
		dirty := total / 8 * (1 + n%3)
		v.WriteCache = &engine.WriteCacheStatus{
			WritecacheStatus: dm.WritecacheStatus{
				TotalBlocks: total, FreeBlocks: total - dirty, WritebackBlocks: n % 17,
				Reads: 1_000_000 + n, ReadHits: 400_000, Writes: 2_000_000 + n,
				WriteHitsUncommitted: 300_000, WriteHitsCommitted: 200_000, WritesAround: 1_000,
				WritesAllocate: 1_500_000, Flushes: 50_000, Discards: 10, HasStats: true,
			},
			DirtyBlocks: dirty, DirtyBytes: dirty * blockSize,
			UsedPercent: 100 * float64(dirty) / float64(total), ReadHitRatio: 0.4, WriteHitRatio: 0.25,
		}
	}
	if readCache > 0 {
		total := readCache / (readBlockSectors * 512)
		v.ReadCache = &engine.ReadCacheStatus{
			CacheStatus: dm.CacheStatus{
				MetadataBlockSize: 8, MetadataUsed: 1_000, MetadataTotal: 16_384,
				BlockSize: readBlockSectors, Used: total / 2, Total: total,
				ReadHits: 900_000, ReadMisses: 100_000, WriteHits: 10_000, WriteMisses: 5_000,
				Demotions: 2_000, Promotions: 3_000, Features: []string{"metadata2", "writethrough"},
				Policy: "smq", MetadataMode: "rw",
			},
			ReadHitRatio: 0.9,
		}
	}
	f.vols[name] = v
	return v, nil
}

func (f *fakeEngine) Volumes(ctx context.Context) ([]engine.VolumeInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]engine.VolumeInfo, 0, len(f.vols))
	for _, v := range f.vols {
		out = append(out, v)
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
	return v, nil
}

func (f *fakeEngine) CreateVolume(ctx context.Context, poolName string, req pool.VolumeRequest) (engine.VolumeInfo, error) {
	if f.readyDelay > 0 {
		t := time.NewTimer(f.readyDelay)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return engine.VolumeInfo{}, ctx.Err()
		case <-t.C:
		}
	}
	v, err := f.create(poolName, req.Name, req.Size, req.WriteCache, req.ReadCache)
	if err != nil {
		return v, err
	}
	if req.Mode != "" && req.Mode != v.Mode {
		f.mu.Lock()
		v.Mode = req.Mode
		if req.Mode != pool.ModeWriteback {
			v.WriteCache = nil
		}
		f.vols[req.Name] = v
		f.mu.Unlock()
	}
	return v, nil
}

func (f *fakeEngine) DeleteVolume(ctx context.Context, name string, force bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.vols[name]; !ok {
		return fmt.Errorf("volume %s: %w", name, engine.ErrVolumeNotFound)
	}
	delete(f.vols, name)
	return nil
}

func (f *fakeEngine) SetMode(ctx context.Context, name string, mode pool.Mode, progress engine.ProgressFunc) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.vols[name]
	if !ok {
		return fmt.Errorf("volume %s: %w", name, engine.ErrVolumeNotFound)
	}
	v.Mode = mode
	f.vols[name] = v
	return nil
}

func (f *fakeEngine) Flush(ctx context.Context, name string, progress engine.ProgressFunc) (uint64, error) {
	_, err := f.Volume(ctx, name)
	return 0, err
}

func (f *fakeEngine) CheckVolume(ctx context.Context, name string) error {
	_, err := f.Volume(ctx, name)
	return err
}

func (f *fakeEngine) RepairVolume(ctx context.Context, name string) ([]string, error) {
	_, err := f.Volume(ctx, name)
	return nil, err
}

// SetTuning accepts any tuning; the benchmark's policies set none.
func (f *fakeEngine) SetTuning(ctx context.Context, name string, t *pool.Tuning) (bool, error) {
	_, err := f.Volume(ctx, name)
	return false, err
}
