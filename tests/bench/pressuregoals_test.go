// SPDX-License-Identifier: Apache-2.0

package main

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tidecache/tidecache/tests/testbed"
)

// fakeClass is one I/O class of a phase: IOPS and completion latencies.
type fakeClass struct {
	iops           float64
	p99, p999, max time.Duration
}

func (c fakeClass) stats() testbed.Stats {
	if c.iops == 0 {
		return testbed.Stats{}
	}
	return testbed.Stats{IOs: uint64(c.iops * 10), IOPS: c.iops, BytesPerSec: 4096 * c.iops,
		Clat: testbed.Latency{Mean: c.p99 / 3, Max: c.max, Percentiles: map[float64]time.Duration{99: c.p99, 99.9: c.p999}}}
}

// fakeSystem is a system's pressure figures: per phase its read and write
// class; writes of the write phase per second; its cache (nil: none) with
// a fill at fillAt seconds and an idle drain of drained blocks in
// drainFor seconds.
type fakeSystem struct {
	key      string
	kind     kind
	phases   map[string][2]fakeClass // read, write
	perSec   []float64               // write IOPS of the write phase, second by second
	cache    bool
	fillAt   float64 // 0: never fills
	drained  int64   // 4 KiB blocks written back while idle
	drainFor float64
}

// fakePhaseStart is when each phase of the fixture starts, in seconds
// after the write phase; the idle phase runs from 100 s.
var fakePhaseStart = map[string]float64{phWrite: 0, phMix: 30, phRead: 60, phBurst: 80, phBulk: 130, phOLTP: 150}

// fakeSchedRun builds a schedRun from fake systems, with the samples the
// figures are derived from.
func fakeSchedRun(systems ...fakeSystem) *schedRun {
	sr := &schedRun{sched: testbed.SchedDeadline, runs: map[string]*systemRun{}, writeback: map[string]string{}}
	for _, f := range systems {
		s := &pressureSystem{system: &system{key: f.key, kind: f.kind, label: f.key + " system", setup: "`" + f.key + "`"}}
		run := &systemRun{phases: map[string]*phaseRun{}, start: t0}
		for ph, c := range f.phases {
			res := testbed.Result{Read: c[0].stats(), Write: c[1].stats()}
			pr := &phaseRun{res: res, took: 10 * time.Second, timeline: testbed.Timeline{Start: at(fakePhaseStart[ph])}}
			if ph == phWrite {
				pr.timeline.Start = t0
				for i, v := range f.perSec {
					pr.timeline.Points = append(pr.timeline.Points, testbed.IOPSPoint{At: time.Duration(i+1) * time.Second, Dur: time.Second, Write: v})
				}
				pr.took = time.Duration(len(f.perSec)) * time.Second
			}
			run.phases[ph] = pr
		}
		if f.cache {
			s.probe = &cacheProbe{kind: probeWritecache, target: f.key, blockBytes: 4096}
			if f.kind == peer && f.key != "lvm-wc" {
				s.probe.kind = probeDMCache
			}
			free := int64(1000)
			for i := 0; i <= len(f.perSec); i++ {
				if f.fillAt > 0 && float64(i) >= f.fillAt {
					free = 0
				} else if f.fillAt > 0 {
					free = 1000 - int64(1000*float64(i)/f.fillAt)
				}
				run.states = append(run.states, cacheState{at: at(float64(i)), size: 1000 * 4096, dirty: (1000 - free) * 4096, free: free})
			}
			run.idleStart, run.idleEnd = at(100), at(100+f.drainFor+10)
			run.states = append(run.states,
				cacheState{at: at(100), size: 1000 * 4096, dirty: 1000 * 4096, free: 0},
				cacheState{at: at(100 + f.drainFor), size: 1000 * 4096, dirty: (1000 - f.drained) * 4096, free: f.drained},
				cacheState{at: at(100 + f.drainFor + 10), size: 1000 * 4096, dirty: (1000 - f.drained) * 4096, free: f.drained})
		}
		sr.systems = append(sr.systems, s)
		sr.runs[f.key] = run
	}
	return sr
}

// steady is n seconds of v IOPS.
func steady(n int, v float64) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = v
	}
	return out
}

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// pressureFixture: a bare RAID10, a tidecache that meets every target, a
// tidecache that floods the array, and two peers.
func pressureFixture() *schedRun {
	bare := fakeSystem{key: "RAID10", kind: reference, perSec: steady(20, 200), phases: map[string][2]fakeClass{
		phWrite: {{}, {iops: 200, p99: ms(200), p999: ms(250), max: ms(300)}},
		phMix:   {{iops: 200, p99: ms(200), p999: ms(250), max: ms(300)}, {iops: 90, p99: ms(200), p999: ms(250), max: ms(300)}},
		phRead:  {{iops: 600, p99: ms(60), p999: ms(80), max: ms(100)}, {}},
	}}
	good := fakeSystem{key: "tc-wb", kind: tidecache, cache: true, fillAt: 5, drained: 550, drainFor: 2.5,
		perSec: append(steady(5, 2000), steady(15, 300)...), phases: map[string][2]fakeClass{
			phWrite: {{}, {iops: 800, p99: ms(100), p999: ms(300), max: ms(600)}},
			phMix:   {{iops: 220, p99: ms(220), p999: ms(300), max: ms(400)}, {iops: 95, p99: ms(20), p999: ms(50), max: ms(100)}},
			phRead:  {{iops: 650, p99: ms(55), p999: ms(70), max: ms(90)}, {}},
		}}
	flood := fakeSystem{key: "tc-wbr", kind: tidecache, cache: true, fillAt: 2, drained: 550, drainFor: 5,
		perSec: append(steady(2, 2000), steady(18, 10)...), phases: map[string][2]fakeClass{
			phWrite: {{}, {iops: 210, p99: 17 * time.Second, p999: 60 * time.Second, max: 155 * time.Second}},
			phMix:   {{iops: 4, p99: 17 * time.Second, p999: 100 * time.Second, max: 179 * time.Second}, {iops: 3, p99: ms(5), p999: ms(9), max: ms(20)}},
			phRead:  {{iops: 500, p99: ms(80), p999: ms(90), max: ms(95)}, {}},
		}}
	lvmwc := fakeSystem{key: "lvm-wc", kind: peer, cache: true, fillAt: 5, drained: 550, drainFor: 2.5,
		perSec: append(steady(5, 2000), steady(15, 10)...), phases: map[string][2]fakeClass{
			phWrite: {{}, {iops: 700, p99: 10 * time.Second, p999: 100 * time.Second, max: 153 * time.Second}},
			phMix:   {{iops: 3, p99: 17 * time.Second, p999: 100 * time.Second, max: 212 * time.Second}, {iops: 2, p99: ms(5), p999: ms(9), max: ms(20)}},
			phRead:  {{iops: 400, p99: ms(90), p999: ms(100), max: ms(120)}, {}},
		}}
	bcache := fakeSystem{key: "bcache", kind: peer, cache: true, drained: 300, drainFor: 5, perSec: append(steady(10, 1000), steady(10, 150)...), phases: map[string][2]fakeClass{
		phWrite: {{}, {iops: 1000, p99: ms(500), p999: ms(800), max: ms(940)}},
		phMix:   {{iops: 70, p99: ms(470), p999: ms(550), max: ms(590)}, {iops: 30, p99: ms(50), p999: ms(90), max: ms(100)}},
		phRead:  {{iops: 300, p99: ms(100), p999: ms(150), max: ms(200)}, {}},
	}}
	return fakeSchedRun(bare, good, flood, lvmwc, bcache)
}

func TestPressureTargets(t *testing.T) {
	sr := pressureFixture()
	got := map[string]pressureTarget{}
	var names []string
	for _, tg := range sr.targets() {
		got[tg.name] = tg
		names = append(names, tg.name)
	}
	want := []struct {
		prefix    string
		good, bad bool // met for tc-wb, for tc-wbr
		cell      string
	}{
		{"no I/O waits more than 1.00 s", true, false, "600.0 ms (writes, 4k random write)"},
		{"p99.9 ≤ 500.0 ms", true, false, "300.0 ms"},
		{"reads after the write burst ≥ 1.0×", true, false, "8k 70/30 mix 1.10× (220 vs 200); 4k random read 1.08× (650 vs 600)"},
		{"… and their p99 ≤ 1.2×", true, false, "8k 70/30 mix 1.10× (220.0 ms vs 200.0 ms)"},
		{"random writes once the cache is full ≥ 1.0×", true, false, "1.50× (300 vs 200 IOPS, from 5s on)"},
		{"time to fill the write cache ≥ 0.9× lvm writecache's", true, false, "1.00× (5s vs 5s)"},
		{"idle drain ≥ 0.8×", true, false, "1.10× (220 blocks/s vs 200 IOPS)"},
		{"ahead of lvm-wc, bcache on each figure above", true, false, "ahead on 16 of 16"},
	}
	if len(names) != len(want) {
		t.Fatalf("targets %q, want %d", names, len(want))
	}
	for i, w := range want {
		tg := got[names[i]]
		if !strings.HasPrefix(tg.name, w.prefix) {
			t.Errorf("target %d is %q, want it to start with %q", i, tg.name, w.prefix)
			continue
		}
		if tg.met["tc-wb"] != w.good || tg.met["tc-wbr"] != w.bad {
			t.Errorf("%s: met tc-wb %v, tc-wbr %v; want %v, %v (cells %q, %q)", tg.name, tg.met["tc-wb"], tg.met["tc-wbr"], w.good, w.bad,
				tg.cells["tc-wb"], tg.cells["tc-wbr"])
		}
		if !strings.Contains(tg.cells["tc-wb"], w.cell) {
			t.Errorf("%s: tc-wb cell %q lacks %q", tg.name, tg.cells["tc-wb"], w.cell)
		}
		if v := tg.verdictOf([]string{"tc-wb", "tc-wbr"}); v != "**missed** (tc-wbr)" {
			t.Errorf("%s: verdict %q", tg.name, v)
		}
		if v := tg.verdictOf([]string{"tc-wb"}); v != "met" {
			t.Errorf("%s: verdict for tc-wb alone %q", tg.name, v)
		}
	}
	// The flooding tidecache is behind its peers, and says on what.
	ahead := got[names[len(names)-1]].cells["tc-wbr"]
	for _, want := range []string{"behind ", "lvm-wc on idle drain rate (0.50×)", "bcache on longest wait, any phase (190×)"} {
		if !strings.Contains(ahead, want) {
			t.Errorf("tc-wbr's ahead cell %q lacks %q", ahead, want)
		}
	}
	// The time-to-fill target compares caches of the same size: tc-wbr
	// filled in 2 s; with a smaller write tier it is not applicable.
	if c := got[names[5]].cells["tc-wbr"]; !strings.HasPrefix(c, "0.40×") {
		t.Errorf("tc-wbr's fill cell %q, want 0.40×", c)
	}
	sr = pressureFixture()
	for i := range sr.runs["tc-wbr"].states {
		sr.runs["tc-wbr"].states[i].size /= 2
	}
	for _, tg := range sr.targets() {
		if !strings.HasPrefix(tg.name, "time to fill") {
			continue
		}
		if !tg.na["tc-wbr"] || tg.na["tc-wb"] || !strings.HasPrefix(tg.cells["tc-wbr"], "n/a: its write tier is 2.0 MiB, lvm-wc's 3.9 MiB") {
			t.Errorf("half-size write tier: na %v, cell %q", tg.na, tg.cells["tc-wbr"])
		}
		if v := tg.verdictOf([]string{"tc-wb", "tc-wbr"}); v != "met" {
			t.Errorf("verdict %q, want met (tc-wbr not applicable)", v)
		}
	}
}

func TestPressureTargetsWithoutPeersOrFills(t *testing.T) {
	sr := pressureFixture()
	var keep []*pressureSystem
	for _, s := range sr.systems {
		if s.key == "RAID10" || s.key == "tc-wb" {
			keep = append(keep, s)
		}
	}
	sr.systems = keep
	for _, tg := range sr.targets() {
		if strings.HasPrefix(tg.name, "time to fill") || strings.HasPrefix(tg.name, "ahead of") {
			t.Errorf("target %q without lvm-wc or any peer", tg.name)
		}
	}
}

func TestSteadyWrites(t *testing.T) {
	sr := pressureFixture()
	for sys, want := range map[string]struct {
		iops float64
		from time.Duration
	}{
		"tc-wb":  {300, 5 * time.Second},  // after its fill at 5 s
		"RAID10": {200, 10 * time.Second}, // no cache: the second half of the phase
		"bcache": {150, 10 * time.Second}, // no fill to see: the second half
	} {
		v, from, ok := sr.steadyWrites(sys)
		if !ok || math.Abs(v-want.iops) > 1e-9 || from != want.from {
			t.Errorf("%s: %v IOPS from %v (%v), want %v from %v", sys, v, from, ok, want.iops, want.from)
		}
	}
}

func TestMetricAhead(t *testing.T) {
	sr := pressureFixture()
	ms := map[string]metric{}
	for _, m := range comparedMetrics() {
		ms[m.name] = m
	}
	for _, tc := range []struct {
		metric, a, b string
		ahead        bool
	}{
		{"longest wait, any phase", "tc-wb", "bcache", true},
		{"longest wait, any phase", "tc-wbr", "bcache", false},
		{"read IOPS, 8k 70/30 mix", "tc-wb", "lvm-wc", true},
		{"read IOPS, 4k random read", "bcache", "tc-wb", false},
		{"read p99, 4k random read", "tc-wb", "RAID10", true},
		{"idle drain rate", "tc-wb", "bcache", true},
		{"idle drain rate", "tc-wb", "RAID10", false}, // the bare RAID10 has no cache: not known
	} {
		m, ok := ms[tc.metric]
		if !ok {
			t.Fatalf("no metric %q", tc.metric)
		}
		got, known := m.ahead(sr, tc.a, tc.b)
		if tc.b == "RAID10" && tc.metric == "idle drain rate" {
			if known {
				t.Errorf("%s: %s vs %s known without a drain of %s", tc.metric, tc.a, tc.b, tc.b)
			}
			continue
		}
		if !known || got != tc.ahead {
			t.Errorf("%s: %s ahead of %s = %v (known %v), want %v", tc.metric, tc.a, tc.b, got, known, tc.ahead)
		}
	}
}
