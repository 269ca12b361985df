// SPDX-License-Identifier: Apache-2.0

package main

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tidecache/tidecache/tests/testbed"
)

func TestPairedRatios(t *testing.T) {
	rs := func(iops ...float64) []testbed.Result {
		var out []testbed.Result
		for _, v := range iops {
			out = append(out, slice(v, time.Millisecond))
		}
		return out
	}
	tests := []struct {
		name string
		a, b []testbed.Result
		want []float64
	}{
		{"sorted, slice by slice", rs(90, 50, 120), rs(100, 100, 100), []float64{0.5, 0.9, 1.2}},
		{"b shorter", rs(50, 60), rs(100), []float64{0.5}},
		{"a shorter", rs(50), rs(100, 100), []float64{0.5}},
		{"b slice of 0 skipped", rs(50, 60), rs(0, 120), []float64{0.5}},
		{"nothing measured", nil, rs(100), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := pairedRatios(tt.a, tt.b, iops)
			if len(got) != len(tt.want) {
				t.Fatalf("pairedRatios = %v, want %v", got, tt.want)
			}
			for i := range got {
				if math.Abs(got[i]-tt.want[i]) > 1e-9 {
					t.Fatalf("pairedRatios = %v, want %v", got, tt.want)
				}
			}
		})
	}
}

// fuaSlice is a one-second slice of the O_DSYNC workload: IOPS, mean total
// latency and mean completion latency.
func fuaSlice(iops float64, mean, clat time.Duration) testbed.Result {
	r := slice(iops, mean)
	r.Total.Clat = testbed.Latency{Mean: clat, Percentiles: map[float64]time.Duration{99: 3 * clat},
		Hist: map[time.Duration]uint64{clat: uint64(iops)}}
	r.Write = r.Total
	return r
}

// fakeFUA is an O_DSYNC run at queue depth qd: per system, per slice, the
// plain and the O_DSYNC mean latency (IOPS follow at QD1: 1 s / latency).
func fakeFUA(t *testing.T, qd int, plain, dsync map[string][]time.Duration) *fuaRun {
	t.Helper()
	f := &fuaRun{qd: qd, job: fuaJob(qd, testbed.DataSync), plain: map[string]testbed.InterleavedResult{},
		dsync: map[string]testbed.InterleavedResult{}}
	ir := func(lats []time.Duration) testbed.InterleavedResult {
		var r testbed.InterleavedResult
		for _, l := range lats {
			r.Slices = append(r.Slices, fuaSlice(float64(time.Second)/float64(l), l, l*9/10))
		}
		m, err := testbed.Merge(r.Slices)
		if err != nil {
			t.Fatal(err)
		}
		r.Merged = m
		return r
	}
	for _, k := range fuaSystems {
		if _, ok := dsync[k]; ok {
			f.systems = append(f.systems, k)
			f.plain[k], f.dsync[k] = ir(plain[k]), ir(dsync[k])
		}
	}
	return f
}

func TestFUATargets(t *testing.T) {
	ms := func(v ...float64) []time.Duration {
		var out []time.Duration
		for _, x := range v {
			out = append(out, time.Duration(x*float64(time.Millisecond)))
		}
		return out
	}
	plain := map[string][]time.Duration{"SSD": ms(0.4, 0.4, 0.4), "tc-wb": ms(0.5, 0.5, 0.5), "tc-wbr": ms(0.5, 0.5, 0.5), "tc-wb-old": ms(0.5, 0.5, 0.5)}
	tests := []struct {
		name     string
		wb, old  []float64 // 4k random write QD1 IOPS per slice, × SSD
		dsync    map[string][]time.Duration
		noFUA    bool // the run has no O_DSYNC workload
		want     []string
		dontWant []string
	}{
		{
			name: "both met",
			wb:   []float64{0.95, 0.97, 1.0}, old: []float64{1, 1, 1},
			dsync: map[string][]time.Duration{"SSD": ms(0.4, 0.4, 0.4), "tc-wb": ms(0.9, 1.0, 0.8), "tc-wbr": ms(1.1, 1.1, 1.1), "tc-wb-old": ms(0.5, 0.5, 0.5)},
			want: []string{
				"| fuaflush costs ≤ 5 % on 4k random write QD1: tc-wb ÷ tc-wb-old (old stack) IOPS ≥ 0.95× (tc-wb) | 0.97× (0.95–1.00) | - | met |",
				"| O_DSYNC 4k random write QD1 mean latency ≤ 2× plain 4k random write QD1 (tc-wb) | 1.80× (1.60–2.00) | 2.20× (2.20–2.20) | met |",
				"Verdicts judge tc-wbr, except where the target names tc-wb",
				"## Cost of durable FUA writes (fuaflush)",
				"### O_DSYNC 4k random write QD1",
				"`4 KiB randwrite QD1 libaio O_DIRECT|O_DSYNC over 64 MiB`",
				// clat is 9/10 of the total latency; its p99 comes from the
				// merged histogram.
				"| tc-wb-old | 2,000 | 0.45 ms | 0.45 ms | 0.50 ms | 0.80× (0.80–0.80) | 1.00× | 2,000 | 1.00× (1.00–1.00) |",
				"| tc-wb | 1,120 | 0.80 ms | 0.90 ms | 0.89 ms | 0.44× (0.40–0.50) | 0.56× (0.50–0.62) | 2,000 | 1.80× (1.60–2.00) |",
				"### O_DSYNC 4k random write QD16",
				"| 4k random write QD1 | 0.97× (0.95–1.00) |",
				"**An O_DSYNC write on the cached volume is a commit, not a bare SSD write.**",
				"the old stack took 0.50 ms (1.00× its plain writes): it was faster because it did not make the write",
				"its O_DSYNC write is a plain write",
			},
			dontWant: []string{"**missed**"},
		},
		{
			name: "both missed",
			wb:   []float64{0.85, 0.9, 0.96}, old: []float64{1, 1, 1},
			dsync: map[string][]time.Duration{"SSD": ms(0.4, 0.4, 0.4), "tc-wb": ms(1.5, 1.5, 0.9), "tc-wb-old": ms(0.5, 0.5, 0.5)},
			want: []string{
				"(tc-wb) | 0.90× (0.85–0.96) | - | **missed** |",
				"(tc-wb) | 3.00× (1.80–3.00) | - | **missed** |",
			},
		},
		{
			name: "no old stack, no O_DSYNC run: no fuaflush rows",
			wb:   []float64{1, 1}, noFUA: true,
			dontWant: []string{"fuaflush costs", "O_DSYNC 4k random write QD1 mean latency", "Cost of durable FUA writes", "Verdicts judge"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rel := map[string][]float64{"SSD": {1, 1, 1}, "RAID10": {0.05, 0.05, 0.05}, "tc-wb": tt.wb, "tc-wbr": {0.96, 0.96, 0.96}}
			r := fakeReport(t, rel, nil)
			if tt.old != nil {
				addSystem(t, r, &system{key: "tc-wb-old", kind: legacy, base: "tc-wb", label: "old", dev: "/dev/old", setup: "`old`"}, tt.old)
			}
			if !tt.noFUA {
				r.fua = []*fuaRun{fakeFUA(t, 1, plain, tt.dsync), fakeFUA(t, deepQueue, plain, tt.dsync)}
			}
			var b strings.Builder
			if err := r.write(&b, nil, ""); err != nil {
				t.Fatal(err)
			}
			doc := b.String()
			for _, w := range tt.want {
				if !strings.Contains(doc, w) {
					t.Errorf("report lacks %q", w)
				}
			}
			for _, w := range tt.dontWant {
				if strings.Contains(doc, w) {
					t.Errorf("report has %q", w)
				}
			}
			if t.Failed() {
				t.Logf("report:\n%s", doc)
			}
		})
	}
}

// addSystem adds a system to a fake report with the same IOPS per slice,
// relative to the SSD's 1000, on every workload.
func addSystem(t *testing.T, r *report, s *system, rel []float64) {
	t.Helper()
	r.systems = append(r.systems, s)
	for _, w := range r.workloads {
		var ir testbed.InterleavedResult
		for _, f := range rel {
			ir.Slices = append(ir.Slices, slice(1000*f, time.Duration(float64(time.Millisecond)/f)))
		}
		m, err := testbed.Merge(ir.Slices)
		if err != nil {
			t.Fatal(err)
		}
		ir.Merged = m
		r.results[w.key][s.key] = ir
	}
}

func TestOldStackVolume(t *testing.T) {
	var old *tidecacheVolume
	for _, v := range tidecacheVolumes(true) {
		if v.oldStack {
			if old != nil {
				t.Fatalf("two old-stack volumes: %s, %s", old.name, v.name)
			}
			v := v
			old = &v
		}
	}
	if old == nil || old.name != "tc-wb-old" || old.kind != legacy || old.base != "tc-wb" {
		t.Fatalf("old-stack volume = %+v, want tc-wb-old, a legacy system based on tc-wb", old)
	}
	for _, v := range tidecacheVolumes(true) {
		if v.name == old.base && strings.Join(v.create, " ") != strings.Join(old.create, " ") {
			t.Errorf("tc-wb-old is created with %q, tc-wb with %q: they must differ in the stack only", old.create, v.create)
		}
	}
	for _, v := range tidecacheVolumes(false) {
		if v.oldStack {
			t.Errorf("without variants the old stack %s is built", v.name)
		}
	}
	// The script swaps the write tier out before loading it on top: two
	// dm-writecache targets never run on one cache slice.
	remove := strings.Index(oldStackScript, "dmsetup remove $top-wtier")
	load := strings.Index(oldStackScript, `dmsetup load $top --table "0 $sz $wc"`)
	if remove < 0 || load < 0 || remove > load {
		t.Errorf("oldStackScript must remove the wtier before loading its table on top:\n%s", oldStackScript)
	}
}
