// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidecache/tidecache/pkg/engine"
)

// How fast each write cache fills and empties, and when it will be full.
//
// dm-writecache reports the blocks in use and counts the blocks that took
// a new cache block (<#writes allocated>), but it has no counter of blocks
// written back and no notion of a rate. Between two readings of a volume,
// every block that left the cache was freed by write-back (or by a
// discard), and every block that entered it was counted as allocated, so
//
//	written back = allocated - (dirty now - dirty before)
//
// The collector keeps each volume's recent readings (fillTracker, one per
// collector) to export that as a counter and to forecast when the cache is
// full. This is the one state the package keeps between scrapes; everything
// else is read from the kernel at scrape time.

var (
	volumeWrittenBackDesc = volumeDesc("written_back_blocks_total",
		"Write-tier blocks freed since tidecached started watching the volume: written back to the HDD array, or discarded. "+
			"dm-writecache has no such counter: tidecached adds, from one scrape to the next, the growth of <#writes allocated> minus the growth of the dirty blocks. "+
			"Its rate is the write-back rate; the cache fills while the rate of tidecache_volume_writes_allocated_total stays above it.")
	volumeTimeToFullDesc = volumeDesc("write_cache_time_to_full_seconds",
		"Seconds until the write tier has no free block, at its net fill rate (allocated minus written back) over the last minute of scrapes. "+
			"0 when it is full: no free block, or writes went around it or waited for a block in the last minute while it was 95 % used or more. "+
			"Absent while it drains or holds steady, and until the second scrape after tidecached starts or the table is reloaded.")
)

func describeFill(ch chan<- *prometheus.Desc) {
	ch <- volumeWrittenBackDesc
	ch <- volumeTimeToFullDesc
}

const (
	// fillWindow is how far back the forecast looks for its rate: long
	// enough to smooth a database's checkpoint bursts over several
	// scrapes, short enough that the forecast is the current rate.
	fillWindow = time.Minute
	// fillStale is the oldest a reading may be to serve as the forecast's
	// reference: after a longer gap in the scrapes, the average rate over
	// the gap is not the current one, so the forecast waits for new
	// readings.
	fillStale = 10 * time.Minute
	// fullUsedRatio is how used a cache must be for writes that went
	// around it to mean it is full: they also go around a cache that is
	// being drained (dm-writecache's cleaner mode, during a switch to
	// writethrough or passthrough), which is then emptying.
	fullUsedRatio = 0.95
)

// fillKey names a volume's tracked state.
type fillKey struct{ pool, volume string }

// fillSample is one reading of a write tier.
type fillSample struct {
	at                         time.Time
	total, free                uint64
	allocated, around, blocked uint64
	hasStats                   bool
}

func (s fillSample) dirty() uint64 {
	if s.free > s.total {
		return 0
	}
	return s.total - s.free
}

// continues reports whether s can follow prev in one history: same cache
// size, and no counter went backwards. A table reload (a mode change, a
// tune, drift repair, a re-assembly) or a clear_stats message restarts
// dm-writecache's counters at 0; the history then restarts at s.
func (s fillSample) continues(prev fillSample) bool {
	return s.total == prev.total && s.hasStats == prev.hasStats &&
		s.allocated >= prev.allocated && s.around >= prev.around && s.blocked >= prev.blocked
}

// fillReading is what the collector exports for one volume.
type fillReading struct {
	writtenBack    uint64
	hasWrittenBack bool
	timeToFull     float64
	hasTimeToFull  bool
}

// fillState is the tracked history of one volume.
type fillState struct {
	// samples are the readings of the last fillWindow, oldest first,
	// plus the newest one older than that (the forecast's reference).
	samples     []fillSample
	writtenBack uint64
	last        fillReading
}

// fillTracker keeps, per volume, the readings the written-back counter
// and the forecast are derived from. Scrapes may run concurrently (two
// Prometheus servers), so it has its own lock.
type fillTracker struct {
	mu   sync.Mutex
	vols map[fillKey]*fillState
}

func newFillTracker() *fillTracker {
	return &fillTracker{vols: map[fillKey]*fillState{}}
}

// observe records the write tiers of vols, read at time at, and returns
// what to export for each. Volumes without a write tier are forgotten, so a
// volume deleted, or switched out of writeback, starts afresh if it comes
// back. A reading not newer than the last one recorded (a concurrent scrape
// that read the kernel earlier but got here later) changes nothing: its
// volume gets the values of the last reading.
func (t *fillTracker) observe(at time.Time, vols []engine.VolumeInfo) map[fillKey]fillReading {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[fillKey]fillReading, len(vols))
	seen := make(map[fillKey]bool, len(vols))
	for _, v := range vols {
		wc := v.WriteCache
		if wc == nil {
			continue
		}
		k := fillKey{v.Pool, v.Name}
		seen[k] = true
		s := fillSample{
			at: at, total: wc.TotalBlocks, free: wc.FreeBlocks,
			allocated: wc.WritesAllocate, around: wc.WritesAround, blocked: wc.WritesBlocked,
			hasStats: wc.HasStats,
		}
		st := t.vols[k]
		if st == nil {
			st = &fillState{}
			t.vols[k] = st
		}
		if n := len(st.samples); n > 0 && !at.After(st.samples[n-1].at) {
			out[k] = st.last
			continue
		}
		st.record(s)
		st.last = st.reading(s, wc.Error != 0)
		out[k] = st.last
	}
	for k := range t.vols {
		if !seen[k] {
			delete(t.vols, k)
		}
	}
	return out
}

// record adds s to the history: it counts the blocks written back since
// the previous reading, restarts the history when s does not continue it,
// and drops the readings the forecast no longer needs.
func (st *fillState) record(s fillSample) {
	if n := len(st.samples); n > 0 {
		prev := st.samples[n-1]
		if !s.continues(prev) {
			st.samples = st.samples[:0]
		} else if s.hasStats {
			// Every block that entered was counted as allocated; those
			// that did not stay dirty left the cache. dm-writecache prints
			// its status without taking its lock, so the fields of one
			// reading can be a few blocks apart: clamp at 0.
			in := int64(s.allocated - prev.allocated)
			grew := int64(s.dirty()) - int64(prev.dirty())
			if out := in - grew; out > 0 {
				st.writtenBack += uint64(out)
			}
		}
	}
	st.samples = append(st.samples, s)
	// Keep as the reference the newest reading at least fillWindow old
	// (or the oldest there is), unless it is stale; s itself stays.
	drop, last := 0, len(st.samples)-1
	for drop < last && (!st.samples[drop+1].at.After(s.at.Add(-fillWindow)) || s.at.Sub(st.samples[drop].at) > fillStale) {
		drop++
	}
	st.samples = append(st.samples[:0], st.samples[drop:]...)
}

// reading derives what to export after recording s, the newest sample.
// A write tier in error takes no writes, so it gets no forecast.
func (st *fillState) reading(s fillSample, failed bool) fillReading {
	r := fillReading{writtenBack: st.writtenBack, hasWrittenBack: s.hasStats}
	if failed || s.total == 0 {
		return r
	}
	if s.free == 0 {
		r.hasTimeToFull = true // full now
		return r
	}
	if len(st.samples) < 2 {
		return r // no rate yet
	}
	ref := st.samples[0]
	wentAround := s.hasStats && (s.around > ref.around || s.blocked > ref.blocked)
	if wentAround && float64(s.dirty()) >= fullUsedRatio*float64(s.total) {
		// The free list ran empty since ref: writes went around the
		// cache or waited for a block. Write-back frees a few blocks at a
		// time that the next writes take, so a reading rarely finds the
		// free count at exactly 0 while the cache is full.
		r.hasTimeToFull = true
		return r
	}
	// The net fill rate: allocated minus written back is exactly the
	// growth of the dirty blocks.
	rate := (float64(s.dirty()) - float64(ref.dirty())) / s.at.Sub(ref.at).Seconds()
	if rate <= 0 {
		return r // draining or steady: never full at this rate
	}
	r.timeToFull, r.hasTimeToFull = float64(s.free)/rate, true
	return r
}

// emitFill sends the derived series of one volume.
func emitFill(ch chan<- prometheus.Metric, v engine.VolumeInfo, r fillReading) {
	if r.hasWrittenBack {
		counter(ch, volumeWrittenBackDesc, r.writtenBack, v.Name, v.Pool)
	}
	if r.hasTimeToFull {
		gauge(ch, volumeTimeToFullDesc, r.timeToFull, v.Name, v.Pool)
	}
}
