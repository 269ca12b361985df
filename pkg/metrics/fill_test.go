// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/dm"
	"github.com/tidecache/tidecache/pkg/engine"
	"github.com/tidecache/tidecache/pkg/pool"
)

// none marks a series the scrape must not have.
var none = math.NaN()

// wt is a write tier as dm-writecache reports it: a cache of total
// blocks with free free, and its counters.
type wt struct {
	total, free, alloc, around, blocked uint64
	noStats                             bool // dm-writecache before 1.6 (Linux 5.15): no counters
	err                                 int64
}

// fillVolume is a writeback volume of pool fast with write tier w.
func fillVolume(name string, w wt) engine.VolumeInfo {
	s := dm.WritecacheStatus{
		Error: w.err, TotalBlocks: w.total, FreeBlocks: w.free,
		WritesAllocate: w.alloc, WritesAround: w.around, WritesBlocked: w.blocked,
		HasStats: !w.noStats,
	}
	return engine.VolumeInfo{
		Name: name, Pool: "fast", Mode: pool.ModeWriteback, State: api.StateActive, Device: "/dev/mapper/tc-" + name,
		BlockSize: 4096, WriteCacheBytes: 40 << 20,
		WriteCache: &engine.WriteCacheStatus{WritecacheStatus: s, DirtyBlocks: s.DirtyBlocks(), DirtyBytes: s.DirtyBlocks() * 4096},
	}
}

// fillWant is what one volume's derived series must read: written back
// blocks and seconds to full, none when absent.
type fillWant struct{ writtenBack, timeToFull float64 }

// fillStep is one scrape: at this time since the first, the kernel
// reports these volumes, and the derived series read want (by volume).
type fillStep struct {
	name string
	at   time.Duration
	vols []engine.VolumeInfo
	want map[string]fillWant
}

// runFill scrapes a collector once per step, its clock set to the step's
// time, and checks the derived series against the step's want.
func runFill(t *testing.T, steps []fillStep) {
	t.Helper()
	src := &fakeSource{}
	c, err := newCollector(src, Options{})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	for _, s := range steps {
		src.vols = s.vols
		c.now = func() time.Time { return start.Add(s.at) }
		got := gatherFill(t, reg)
		for vol, w := range s.want {
			g, ok := got[vol]
			if !ok {
				g = fillWant{none, none}
			}
			if !sameValue(g.writtenBack, w.writtenBack) || !sameValue(g.timeToFull, w.timeToFull) {
				t.Errorf("%s (t=%v): volume %s: written back %v, time to full %v; want %v, %v",
					s.name, s.at, vol, g.writtenBack, g.timeToFull, w.writtenBack, w.timeToFull)
			}
			delete(got, vol)
		}
		for vol, g := range got {
			t.Errorf("%s: unexpected series for volume %s: %+v", s.name, vol, g)
		}
	}
}

// gatherFill returns the derived series of every volume, none for a
// series a volume lacks.
func gatherFill(t *testing.T, reg *prometheus.Registry) map[string]fillWant {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]fillWant{}
	for _, mf := range mfs {
		name := mf.GetName()
		if name != "tidecache_volume_written_back_blocks_total" && name != "tidecache_volume_write_cache_time_to_full_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			var vol string
			for _, l := range m.GetLabel() {
				if l.GetName() == "volume" {
					vol = l.GetValue()
				}
			}
			w, ok := out[vol]
			if !ok {
				w = fillWant{none, none}
			}
			if m.Counter != nil {
				w.writtenBack = m.GetCounter().GetValue()
			} else {
				w.timeToFull = m.GetGauge().GetValue()
			}
			out[vol] = w
		}
	}
	return out
}

func sameValue(a, b float64) bool {
	if math.IsNaN(a) || math.IsNaN(b) {
		return math.IsNaN(a) && math.IsNaN(b)
	}
	return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b))
}

// TestFillHistory scrapes one volume of 10000 blocks every 15 s through a
// fill, a burst, a drain, a table reload, the cache filling up, a
// concurrent scrape, a gap in the scrapes and the volume leaving and coming
// back. Written back = allocated - growth of the dirty blocks between
// scrapes; the forecast is free / (growth of the dirty blocks over the
// last minute).
func TestFillHistory(t *testing.T) {
	v := func(w wt) []engine.VolumeInfo { w.total = 10000; return []engine.VolumeInfo{fillVolume("db", w)} }
	runFill(t, []fillStep{
		{"first reading: no rate yet", 0, v(wt{free: 6000, alloc: 1000}), map[string]fillWant{"db": {0, none}}},
		// +300 allocated, +150 dirty: 150 written back; 10 blocks/s net.
		{"filling", 15 * time.Second, v(wt{free: 5850, alloc: 1300}), map[string]fillWant{"db": {150, 5850.0 / 10}}},
		{"filling", 30 * time.Second, v(wt{free: 5700, alloc: 1600}), map[string]fillWant{"db": {300, 570}}},
		{"filling", 45 * time.Second, v(wt{free: 5550, alloc: 1900}), map[string]fillWant{"db": {450, 555}}},
		// The reference is still the first reading, 60 s old.
		{"filling", 60 * time.Second, v(wt{free: 5400, alloc: 2200}), map[string]fillWant{"db": {600, 540}}},
		// A burst: +1200 allocated, +900 dirty in 15 s (60 blocks/s). The
		// forecast takes the last minute (from t=15 s, 4150 dirty): 1350
		// blocks in 60 s, 22.5/s, 4500 free: 200 s.
		{"burst, smoothed over a minute", 75 * time.Second, v(wt{free: 4500, alloc: 3400}), map[string]fillWant{"db": {900, 200}}},
		// Write-back catches up: +100 allocated, -1500 dirty: 1600
		// written back. Fewer dirty than a minute ago: no forecast.
		{"draining", 90 * time.Second, v(wt{free: 6000, alloc: 3500}), map[string]fillWant{"db": {2500, none}}},
		// The table was reloaded: the kernel's counters restarted. The
		// counter keeps its value, the history restarts here.
		{"table reloaded", 105 * time.Second, v(wt{free: 6000, alloc: 50}), map[string]fillWant{"db": {2500, none}}},
		{"after the reload", 120 * time.Second, v(wt{free: 5850, alloc: 350}), map[string]fillWant{"db": {2650, 585}}},
		{"full", 135 * time.Second, v(wt{free: 0, alloc: 6350}), map[string]fillWant{"db": {2800, 0}}},
		// Write-back freed 40 blocks the next writes will take; 500 went
		// around it since the reference (t=105 s): still full.
		{"full, writes going around", 150 * time.Second, v(wt{free: 40, alloc: 6450, around: 500}), map[string]fillWant{"db": {2940, 0}}},
		// A concurrent scrape that read the kernel before the last one:
		// nothing changes.
		{"out of order", 150 * time.Second, v(wt{free: 30, alloc: 6460, around: 510}), map[string]fillWant{"db": {2940, 0}}},
		// No scrape for 12.5 minutes: the counter adds what left the
		// cache meanwhile (+550 allocated, -4960 dirty), the forecast has
		// no recent reference.
		{"after a gap", 900 * time.Second, v(wt{free: 5000, alloc: 7000, around: 500}), map[string]fillWant{"db": {8450, none}}},
		{"next scrape after the gap", 915 * time.Second, v(wt{free: 4970, alloc: 7060, around: 500}), map[string]fillWant{"db": {8480, 4970.0 / 2}}},
		{"volume gone", 930 * time.Second, nil, nil},
		{"volume back: a new counter", 945 * time.Second, v(wt{free: 4970, alloc: 7060}), map[string]fillWant{"db": {0, none}}},
	})
}

// TestFillCases: volumes that get no forecast or no counter, and the two
// ways a full cache shows.
func TestFillCases(t *testing.T) {
	for _, tc := range []struct {
		name          string
		before, after wt // 15 s apart
		want          fillWant
	}{
		{"steady", wt{free: 5000, alloc: 100}, wt{free: 5000, alloc: 400}, fillWant{300, none}},
		// Linux before 5.15: no counters, the forecast from the free blocks.
		{"no counters", wt{free: 5000, noStats: true}, wt{free: 4850, noStats: true}, fillWant{none, 485}},
		// A write tier in error takes no writes: no forecast.
		{"error", wt{free: 5000, alloc: 100}, wt{free: 4000, alloc: 1100, err: -5}, fillWant{0, none}},
		// Full at once: 0 without a rate.
		{"full at the first reading", wt{free: 0, alloc: 100}, wt{free: 0, alloc: 100}, fillWant{0, 0}},
		// A rewrite waited for a block under write-back: full, though the
		// reading found 10 free.
		{"writes blocked", wt{free: 10, alloc: 100}, wt{free: 10, alloc: 150, blocked: 3}, fillWant{50, 0}},
		// Writes go around a cache being drained (cleaner): not full.
		{"drained by the cleaner", wt{free: 2000, alloc: 100}, wt{free: 3000, alloc: 100, around: 800}, fillWant{1000, none}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.before.total, tc.after.total = 10000, 10000
			first := fillWant{0, none}
			switch {
			case tc.before.noStats:
				first.writtenBack = none
			case tc.before.free == 0:
				first.timeToFull = 0
			}
			runFill(t, []fillStep{
				{"before", 0, []engine.VolumeInfo{fillVolume("v", tc.before)}, map[string]fillWant{"v": first}},
				{"after", 15 * time.Second, []engine.VolumeInfo{fillVolume("v", tc.after)}, map[string]fillWant{"v": tc.want}},
			})
		})
	}
}

// TestFillExposition: the derived series as scraped, with their help and
// type, for the test volumes (db has a write tier; broken's is in error).
func TestFillExposition(t *testing.T) {
	src := &fakeSource{vols: testVolumes(t)}
	c, err := newCollector(src, Options{})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)
	c.now = func() time.Time { return start }
	testutil.CollectAndCount(c) // the first reading
	// 30 s later db has 60 more dirty blocks (2 a second) and allocated
	// 100 more: 40 written back; 7904 - 60 blocks free.
	src.vols = testVolumes(t)
	wc := src.vols[0].WriteCache
	wc.FreeBlocks -= 60
	wc.WritesAllocate += 100
	c.now = func() time.Time { return start.Add(30 * time.Second) }
	const want = `
# HELP tidecache_volume_written_back_blocks_total Write-tier blocks freed since tidecached started watching the volume: written back to the HDD array, or discarded. dm-writecache has no such counter: tidecached adds, from one scrape to the next, the growth of <#writes allocated> minus the growth of the dirty blocks. Its rate is the write-back rate; the cache fills while the rate of tidecache_volume_writes_allocated_total stays above it.
# TYPE tidecache_volume_written_back_blocks_total counter
tidecache_volume_written_back_blocks_total{pool="fast",volume="db"} 40
tidecache_volume_written_back_blocks_total{pool="slow",volume="broken"} 0
# HELP tidecache_volume_write_cache_time_to_full_seconds Seconds until the write tier has no free block, at its net fill rate (allocated minus written back) over the last minute of scrapes. 0 when it is full: no free block, or writes went around it or waited for a block in the last minute while it was 95 % used or more. Absent while it drains or holds steady, and until the second scrape after tidecached starts or the table is reloaded.
# TYPE tidecache_volume_write_cache_time_to_full_seconds gauge
tidecache_volume_write_cache_time_to_full_seconds{pool="fast",volume="db"} 3922
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want),
		"tidecache_volume_written_back_blocks_total", "tidecache_volume_write_cache_time_to_full_seconds"); err != nil {
		t.Error(err)
	}
}
