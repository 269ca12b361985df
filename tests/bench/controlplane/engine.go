// SPDX-License-Identifier: Apache-2.0

package main

import (
	"hash/fnv"
	"time"

	"github.com/tidecache/tidecache/pkg/dm"
	"github.com/tidecache/tidecache/pkg/engine"
	"github.com/tidecache/tidecache/pkg/reconcile/reconciletest"
)

// newFakeEngine returns the benchmark's stand-in for *engine.Engine: the
// in-memory engine the reconcile tests use, whose CreateVolume waits
// readyDelay (the time device-mapper would take to load and resume the
// tables), and whose volumes report what a busy node's would (every
// counter the metrics read is set). Nothing here touches a device.
func newFakeEngine(poolName string, readyDelay time.Duration) *reconciletest.Engine {
	e := reconciletest.NewEngine(poolName)
	e.ReadyDelay = readyDelay
	e.Decorate = busy
	return e
}

// blockSize is the write tier's block size and the read tier's is
// readBlockSectors.
const (
	blockSize        = 4096
	readBlockSectors = 128 // 64 KiB
)

// busy fills in the kernel's counters of a busy volume, made up but stable
// for a volume (they depend on its name only).
func busy(v *engine.VolumeInfo) {
	h := fnv.New64a()
	h.Write([]byte(v.Name))
	n := h.Sum64() % 1000
	v.UUID, v.Device = "TIDECACHE-bench-"+v.Name, "/dev/mapper/tc-"+v.Name
	if v.WriteCache != nil {
		total := v.WriteCacheBytes / blockSize
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
	if v.ReadCacheBytes > 0 {
		total := v.ReadCacheBytes / (readBlockSectors * 512)
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
}
