// SPDX-License-Identifier: Apache-2.0

package main

import (
	"math"
	"testing"
	"time"

	"github.com/tidecache/tidecache/tests/testbed"
)

var t0 = time.Unix(1_800_000_000, 0)

// at is t0 plus s seconds.
func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

func TestCacheProbeParse(t *testing.T) {
	for name, tc := range map[string]struct {
		probe cacheProbe
		out   string
		want  cacheState
	}{
		"dm-writecache, 6.1: 14 fields": {
			probe: cacheProbe{kind: probeWritecache, target: "tc-tc-wb-wtier", blockBytes: 4096},
			out:   "0 524288 writecache 0 16384 75 16 20 0 24418 0 0 16 24418 3 0 0",
			want:  cacheState{dirty: (16384 - 75) * 4096, size: 16384 * 4096, free: 75, around: 16, blocked: 3},
		},
		"dm-cache (lvmcache, 64 KiB blocks)": {
			probe: cacheProbe{kind: probeDMCache, target: "bench-lvmcache"},
			out:   "0 524288 cache 8 27/4096 128 200/1024 10 20 30 40 0 5 12 1 writeback 2 migration_threshold 2048 smq 0 rw -",
			want:  cacheState{dirty: 12 * 128 * 512, size: 1024 * 128 * 512, free: -1},
		},
		"bcache, MiB with a decimal": {
			probe: cacheProbe{kind: probeBcache, target: "/sys/block/bcache0/bcache", size: 64 << 20},
			out:   "12.5M",
			want:  cacheState{dirty: 12<<20 + 512<<10, size: 64 << 20, free: -1},
		},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := tc.probe.parse(testbed.Sample{At: t0, Out: tc.out})
			if err != nil {
				t.Fatal(err)
			}
			tc.want.at = t0
			if got != tc.want {
				t.Errorf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
	for name, tc := range map[string]struct {
		probe cacheProbe
		out   string
	}{
		"wrong target":          {cacheProbe{kind: probeWritecache, blockBytes: 4096}, "0 8 linear"},
		"no block size":         {cacheProbe{kind: probeWritecache}, "0 524288 writecache 0 16384 75 16 20 0 24418 0 0 16 24418 3 0 0"},
		"bcache says something": {cacheProbe{kind: probeBcache}, "no such file"},
		"unknown kind":          {cacheProbe{kind: "flashcache"}, "x"},
	} {
		if _, err := tc.probe.parse(testbed.Sample{At: t0, Out: tc.out}); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestParseBcacheSize(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "512": 512, "0.0k": 0, "4.0k": 4096, "12.3M": int64(math.Round(12.3 * (1 << 20))), "1.5G\n": 3 << 29} {
		if got, err := parseBcacheSize(in); err != nil || got != want {
			t.Errorf("parseBcacheSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "M", "-1k", "twelve"} {
		if _, err := parseBcacheSize(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// wc is a dm-writecache sample: free blocks of 1000, writes around and
// blocked so far.
func wc(s float64, free int64, around, blocked uint64) cacheState {
	return cacheState{at: at(s), size: 1000 * 4096, dirty: (1000 - free) * 4096, free: free, around: around, blocked: blocked}
}

func TestTimeToFull(t *testing.T) {
	for name, tc := range map[string]struct {
		states []cacheState
		start  float64
		want   time.Duration
		ok     bool
	}{
		"free blocks reach 0": {
			states: []cacheState{wc(-0.5, 1000, 0, 0), wc(1, 600, 0, 0), wc(2, 200, 0, 0), wc(3, 0, 0, 0), wc(4, 0, 5, 0)},
			want:   3 * time.Second, ok: true,
		},
		"writes go around with blocks still free (a few are kept)": {
			states: []cacheState{wc(0, 1000, 7, 0), wc(1, 500, 7, 0), wc(2, 75, 16, 0)},
			want:   2 * time.Second, ok: true,
		},
		"writes wait for a free block": {
			states: []cacheState{wc(0.2, 1000, 0, 2), wc(1.2, 300, 0, 2), wc(2.2, 10, 0, 9)},
			want:   2200 * time.Millisecond, ok: true,
		},
		"counters from before the phase do not count": {
			states: []cacheState{wc(-3, 1000, 50, 50), wc(-1, 1000, 60, 60), wc(1, 500, 60, 60), wc(2, 400, 60, 60)},
		},
		"after the phase does not count": {
			states: []cacheState{wc(0, 1000, 0, 0), wc(5, 500, 0, 0), wc(11, 0, 0, 0)},
		},
		"no samples": {},
	} {
		t.Run(name, func(t *testing.T) {
			got, ok := timeToFull(tc.states, at(tc.start), at(10))
			if got != tc.want || ok != tc.ok {
				t.Errorf("timeToFull = %v, %v; want %v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestMeanIOPS(t *testing.T) {
	sec := time.Second
	pts := []testbed.IOPSPoint{
		{At: 1 * sec, Dur: sec, Read: 10, Write: 2000},
		{At: 2 * sec, Dur: sec, Read: 10, Write: 1800},
		{At: 5 * sec, Dur: 3 * sec, Read: 20, Write: 4}, // a stall: one window of three seconds
		{At: 6 * sec, Dur: sec, Read: 30, Write: 200},
	}
	for name, tc := range map[string]struct {
		from   time.Duration
		writes bool
		want   float64
		span   time.Duration
	}{
		"every window, by length":              {0, true, (2000 + 1800 + 3*4 + 200) / 6.0, 6 * sec},
		"after the fill at 2 s":                {2 * sec, true, (3*4 + 200) / 4.0, 4 * sec},
		"from inside the stall":                {4 * sec, false, (20 + 30) / 2.0, 2 * sec},
		"from inside the first window (0.5 s)": {500 * time.Millisecond, true, (0.5*2000 + 1800 + 12 + 200) / 5.5, 5500 * time.Millisecond},
	} {
		got, span := meanIOPS(pts, tc.from, tc.writes)
		if math.Abs(got-tc.want) > 1e-9 || span != tc.span {
			t.Errorf("%s: %v over %v, want %v over %v", name, got, span, tc.want, tc.span)
		}
	}
	if v, span := meanIOPS(pts, time.Minute, true); !math.IsNaN(v) || span != 0 {
		t.Errorf("past the end: %v, %v", v, span)
	}
}

// dirty is a sample of a 1000-block cache with n blocks dirty.
func dirty(s float64, n int64) cacheState {
	return cacheState{at: at(s), size: 1000 * 4096, dirty: n * 4096, free: -1}
}

func TestMeasureDrain(t *testing.T) {
	for name, tc := range map[string]struct {
		states []cacheState
		want   drain
		rate   float64 // blocks per second
	}{
		"drains to the low watermark, then waits": {
			states: []cacheState{dirty(0, 1000), dirty(1, 700), dirty(2, 450), dirty(3, 450), dirty(4, 450), dirty(5, 450)},
			want:   drain{watched: 5 * time.Second, start: 1000 * 4096, end: 450 * 4096, took: 2 * time.Second},
			rate:   275,
		},
		"drains clean": {
			states: []cacheState{dirty(0, 300), dirty(1, 200), dirty(2, 100), dirty(3, 0)},
			want:   drain{watched: 3 * time.Second, start: 300 * 4096, took: 3 * time.Second, clean: true},
			rate:   100,
		},
		"a last block lingers: the drain ends within 1 % of the drop": {
			states: []cacheState{dirty(0, 10000), dirty(10, 5000), dirty(20, 60), dirty(30, 50)},
			want:   drain{watched: 30 * time.Second, start: 10000 * 4096, end: 60 * 4096, took: 20 * time.Second},
			rate:   497,
		},
		"already at its watermark: nothing drains": {
			states: []cacheState{dirty(0, 450), dirty(1, 450), dirty(2, 450)},
			want:   drain{watched: 2 * time.Second, start: 450 * 4096, end: 450 * 4096},
		},
	} {
		t.Run(name, func(t *testing.T) {
			got, ok := measureDrain(tc.states, at(0), at(60))
			if !ok || got != tc.want {
				t.Errorf("got %+v, %v\nwant %+v", got, ok, tc.want)
			}
			if r := got.rate() / 4096; math.Abs(r-tc.rate) > 1e-9 {
				t.Errorf("rate %v blocks/s, want %v", r, tc.rate)
			}
		})
	}
	// Samples outside the window are not the drain's.
	states := []cacheState{dirty(-5, 1000), dirty(0, 800), dirty(1, 700), dirty(9, 0)}
	got, ok := measureDrain(states, at(0), at(2))
	if !ok || got.start != 800*4096 || got.end != 700*4096 || got.took != time.Second {
		t.Errorf("window 0-2 s: %+v", got)
	}
	if _, ok := measureDrain(states[:1], at(-10), at(10)); ok {
		t.Error("one sample makes a drain")
	}
}

func TestDrainSettled(t *testing.T) {
	for name, tc := range map[string]struct {
		states []cacheState
		want   bool
	}{
		"clean":                        {[]cacheState{dirty(0, 10), dirty(1, 0)}, true},
		"flat for the window":          {[]cacheState{dirty(0, 500), dirty(5, 450), dirty(10, 450), dirty(16, 450)}, true},
		"still falling":                {[]cacheState{dirty(0, 500), dirty(5, 480), dirty(10, 470), dirty(16, 460)}, false},
		"not watched for a window yet": {[]cacheState{dirty(0, 500), dirty(5, 500)}, false},
		"no samples":                   {nil, false},
	} {
		if got := drainSettled(tc.states, 10*time.Second); got != tc.want {
			t.Errorf("%s: %v, want %v", name, got, tc.want)
		}
	}
}

func TestBcacheBucket(t *testing.T) {
	for size, want := range map[int64]string{64 << 20: "32k", 128 << 20: "64k", 512 << 20: "256k", 4 << 30: "512k", 16 << 20: "32k"} {
		if got := bcacheBucket(size); got != want {
			t.Errorf("bcacheBucket(%s) = %s, want %s", testbed.FormatBytes(size), got, want)
		}
	}
}
