// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/tidecache/tidecache/pkg/dm"
	"github.com/tidecache/tidecache/tests/testbed"
)

// What the pressure run reads from a cache while fio runs beside it, and
// what it derives from that: when the write cache filled, how fast it
// drained when the volume was idle, the write rate once it was full. Pure
// functions of the samples, tested on the host.

// cacheState is one sample of a cache.
type cacheState struct {
	at    time.Time
	dirty int64 // bytes not yet on the HDDs (dm-writecache: every block not free)
	size  int64 // bytes of cache
	// free, around and blocked are dm-writecache's free blocks, writes
	// that went around it and writes that waited for a free block; free
	// is -1 for the other caches.
	free            int64
	around, blocked uint64
}

// Kinds of cache a probe reads.
const (
	probeWritecache = "writecache" // dm-writecache: dmsetup status
	probeDMCache    = "cache"      // dm-cache: dmsetup status
	probeBcache     = "bcache"     // bcache: sysfs dirty_data
)

// cacheProbe says how to read one system's cache.
type cacheProbe struct {
	kind string
	// target is the device-mapper name (writecache, cache) or the bcache
	// device's sysfs directory (/sys/block/bcache0/bcache).
	target string
	// blockBytes is dm-writecache's block size; size is bcache's cache
	// (the others report theirs).
	blockBytes, size int64
}

// snippet is the shell that prints the cache's state, one line.
func (p cacheProbe) snippet() string {
	if p.kind == probeBcache {
		return "cat " + p.target + "/dirty_data"
	}
	return "dmsetup status " + p.target
}

// fills reports whether the cache has a "full" the samples can see: only
// dm-writecache counts free blocks and writes that went around it.
func (p cacheProbe) fills() bool { return p.kind == probeWritecache }

// parse reads one sample of the probe's snippet.
func (p cacheProbe) parse(s testbed.Sample) (cacheState, error) {
	st := cacheState{at: s.At, free: -1}
	switch p.kind {
	case probeWritecache:
		params, err := targetParams(s.Out, "writecache")
		if err != nil {
			return st, err
		}
		w, err := dm.ParseWritecacheStatus(params, dm.Version{})
		if err != nil {
			return st, err
		}
		if p.blockBytes <= 0 {
			return st, fmt.Errorf("writecache probe of %s: no block size", p.target)
		}
		st.size = int64(w.TotalBlocks) * p.blockBytes
		st.dirty = int64(w.TotalBlocks-w.FreeBlocks) * p.blockBytes
		st.free, st.around, st.blocked = int64(w.FreeBlocks), w.WritesAround, w.WritesBlocked
	case probeDMCache:
		params, err := targetParams(s.Out, "cache")
		if err != nil {
			return st, err
		}
		c, err := dm.ParseCacheStatus(params, dm.Version{})
		if err != nil {
			return st, err
		}
		block := int64(c.BlockSize) * 512
		st.size, st.dirty = int64(c.Total)*block, int64(c.Dirty)*block
	case probeBcache:
		n, err := parseBcacheSize(s.Out)
		if err != nil {
			return st, err
		}
		st.size, st.dirty = p.size, n
	default:
		return st, fmt.Errorf("cache probe kind %q", p.kind)
	}
	return st, nil
}

// parseBcacheSize reads bcache's human-readable sizes (sysfs dirty_data):
// "0", "512", "4.0k", "12.3M", "1.5G", powers of 1024.
func parseBcacheSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, fmt.Errorf("bcache size: empty")
	}
	mult := 1.0
	if i := strings.IndexByte("kMGTPEZY", s[len(s)-1]); i >= 0 {
		mult = math.Pow(1024, float64(i+1))
		s = s[:len(s)-1]
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("bcache size %q: want a number with an optional k, M, G… suffix", s)
	}
	return int64(math.Round(v * mult)), nil
}

// parseStates reads a sampler's samples with p; a sample that does not
// parse is an error (the probe is wrong, and every figure with it).
func parseStates(p cacheProbe, samples []testbed.Sample) ([]cacheState, error) {
	out := make([]cacheState, 0, len(samples))
	for _, s := range samples {
		st, err := p.parse(s)
		if err != nil {
			return nil, fmt.Errorf("cache sample at %s: %w", s.At.Format(time.TimeOnly), err)
		}
		out = append(out, st)
	}
	return out, nil
}

// timeToFull is how long after start the write cache first had no room:
// no free block, or writes that went around it or waited for a free block
// since start (dm-writecache keeps a few blocks free and sends writes
// around or makes them wait instead). The counters' baseline is the last
// sample at or before start (the first one after it without one). ok is
// false when it did not fill before end.
func timeToFull(states []cacheState, start, end time.Time) (time.Duration, bool) {
	base := -1
	for i, s := range states {
		if !s.at.After(start) {
			base = i
		}
	}
	if base < 0 {
		for i, s := range states {
			if s.at.After(start) {
				base = i
				break
			}
		}
	}
	if base < 0 {
		return 0, false
	}
	b := states[base]
	for _, s := range states[base:] {
		if s.at.Before(start) || s.at.After(end) {
			continue
		}
		if s.free == 0 || s.around > b.around || s.blocked > b.blocked {
			return s.at.Sub(start), true
		}
	}
	return 0, false
}

// meanIOPS is a timeline's reads or writes per second from from to its
// end: each window counts for the part of it after from, by length. It
// also returns the length that counted.
func meanIOPS(points []testbed.IOPSPoint, from time.Duration, writes bool) (float64, time.Duration) {
	var ios float64
	var span time.Duration
	for _, p := range points {
		start := max(p.At-p.Dur, from)
		if p.At <= start {
			continue
		}
		v := p.Read
		if writes {
			v = p.Write
		}
		d := p.At - start
		ios += v * d.Seconds()
		span += d
	}
	if span == 0 {
		return math.NaN(), 0
	}
	return ios / span.Seconds(), span
}

// drain is how a cache emptied while the volume was idle.
type drain struct {
	watched    time.Duration // the idle time observed
	start, end int64         // dirty bytes at the start, and where the drain stopped
	took       time.Duration // from the start to where it stopped
	clean      bool          // nothing dirty left
}

// rate is the drain's speed in bytes per second; 0 when nothing drained.
func (d drain) rate() float64 {
	if d.took <= 0 || d.start <= d.end {
		return 0
	}
	return float64(d.start-d.end) / d.took.Seconds()
}

// measureDrain reads the drain from the samples between from and to: it
// starts at the first sample, stops where the dirty bytes first come
// within 1 % of the drop (at least a block) of the lowest level seen, so
// a cache that stops at its low watermark is measured over the time it
// was writing back, not over the wait after. ok is false without two
// samples.
func measureDrain(states []cacheState, from, to time.Time) (drain, bool) {
	var win []cacheState
	for _, s := range states {
		if !s.at.Before(from) && !s.at.After(to) {
			win = append(win, s)
		}
	}
	if len(win) < 2 {
		return drain{}, false
	}
	d := drain{watched: win[len(win)-1].at.Sub(win[0].at), start: win[0].dirty, end: win[0].dirty}
	low := win[0].dirty
	for _, s := range win {
		low = min(low, s.dirty)
	}
	tol := max((d.start-low)/100, 4096)
	for _, s := range win {
		if s.dirty <= low+tol {
			d.end, d.took = s.dirty, s.at.Sub(win[0].at)
			break
		}
	}
	if d.start-low < 4096 {
		// Nothing drained: the whole window was a wait.
		d.end, d.took = d.start, 0
	}
	d.clean = d.end == 0
	return d, true
}

// drainSettled reports whether an idle cache has stopped draining: it is
// clean, or its dirty bytes have not fallen over the last window.
func drainSettled(states []cacheState, window time.Duration) bool {
	if len(states) == 0 {
		return false
	}
	last := states[len(states)-1]
	if last.dirty == 0 {
		return true
	}
	for i := len(states) - 1; i >= 0; i-- {
		if last.at.Sub(states[i].at) >= window {
			return states[i].dirty <= last.dirty
		}
	}
	return false
}
