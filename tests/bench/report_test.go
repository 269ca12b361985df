package main

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tidecache/tidecache/tests/testbed"
)

// slice makes a one-second result with the given IOPS and mean latency.
func slice(iops float64, mean time.Duration) testbed.Result {
	s := testbed.Stats{IOs: uint64(iops), IOPS: iops, Mean: mean,
		Percentiles: map[float64]time.Duration{99: 2 * mean}, Hist: map[time.Duration]uint64{mean: uint64(iops)}}
	return testbed.Result{Runtime: time.Second, Write: s, Total: s}
}

// fakeReport has every workload and target, with IOPS per cycle given
// relative to the raw SSD's 1000.
func fakeReport(t *testing.T, rel map[string][]float64) *report {
	t.Helper()
	r := &report{
		opts:   options{slices: 3, slice: time.Second},
		cfg:    testbed.Config{Name: "bench", HDD: testbed.Nearline7200(), HDDs: 4, SSDSize: ssdSize, MemoryMiB: 1536},
		kernel: "6.1.0-test", fio: "fio-3.33", host: "test CPU, 2 CPUs", qemu: "QEMU 7.2",
		date:      time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC),
		elapsed:   10 * time.Minute,
		workloads: workloads(),
		results:   map[string]map[string]testbed.InterleavedResult{},
	}
	for _, k := range []string{"raw", "lin", "bare", "wb", "wbr"} {
		r.targets = append(r.targets, target{key: k, label: "(" + k + ") " + k + " device", dev: "/dev/" + k})
	}
	for _, w := range r.workloads {
		r.results[w.key] = map[string]testbed.InterleavedResult{}
		for _, tg := range r.targets {
			var ir testbed.InterleavedResult
			for _, f := range rel[tg.key] {
				ir.Slices = append(ir.Slices, slice(1000*f, time.Duration(float64(time.Millisecond)/f)))
			}
			m, err := testbed.Merge(ir.Slices)
			if err != nil {
				t.Fatal(err)
			}
			ir.Merged = m
			r.results[w.key][tg.key] = ir
		}
	}
	for _, tg := range r.targets {
		if tg.key == "lin" || tg.key == "bare" {
			continue
		}
		r.accounting = append(r.accounting,
			accountRow{target: tg, what: "O_DIRECT, rewrites", appWrites: 100, ssd: testbed.DiskStats{Writes: 100}},
			accountRow{target: tg, what: "O_DIRECT + fsync, first writes", appWrites: 100, ssd: testbed.DiskStats{Writes: 300}, wcFlushes: 100})
	}
	return r
}

func TestRatioIsMedianOfCycleRatios(t *testing.T) {
	r := fakeReport(t, map[string][]float64{
		"raw": {1, 1, 1}, "lin": {1, 1, 1}, "bare": {0.05, 0.05, 0.05},
		"wb": {0.9, 1.2, 0.5}, "wbr": {0.96, 0.97, 0.99},
	})
	if got := r.ratio("write-direct", "wb"); got != 0.9 {
		t.Errorf("median ratio %v, want 0.9", got)
	}
	if lo, hi := r.ratioRange("write-direct", "wb"); lo != 0.5 || hi != 1.2 {
		t.Errorf("range %v–%v, want 0.5–1.2", lo, hi)
	}
	if v := r.verdict("write-direct"); !strings.Contains(v, "single cycles reach it") {
		t.Errorf("verdict %q: wb's median misses, its best cycle reaches the target", v)
	}
	r = fakeReport(t, map[string][]float64{
		"raw": {1, 1, 1}, "lin": {1, 1, 1}, "bare": {0.05, 0.05, 0.05}, "wb": {0.96, 1, 1}, "wbr": {0.95, 0.99, 1},
	})
	if v := r.verdict("write-direct"); v != "met" {
		t.Errorf("verdict %q, want met", v)
	}
}

func TestReportRenders(t *testing.T) {
	r := fakeReport(t, map[string][]float64{
		"raw": {1, 1, 1}, "lin": {0.98, 1, 1.01}, "bare": {0.05, 0.05, 0.05},
		"wb": {0.8, 0.85, 0.9}, "wbr": {0.7, 0.75, 0.8},
	})
	var b strings.Builder
	if err := r.write(&b); err != nil {
		t.Fatal(err)
	}
	doc := b.String()
	for _, want := range []string{
		"# Benchmarks", "## Summary", "## Set-up", "## Results", "## Ratios to the raw SSD",
		"## Target: cached 4 KiB QD1 write ≥ 0.95× raw SSD IOPS", "## What one application write costs on the SSD",
		"## Analysis", "0.85× (0.80–0.90)", "**missed**", "3.00", "O_DIRECT\\|O_SYNC",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if strings.Contains(doc, "%!") {
		t.Errorf("report has a formatting error:\n%s", doc)
	}
	if os.Getenv("BENCH_SHOW_REPORT") != "" {
		t.Log(doc)
	}
}
