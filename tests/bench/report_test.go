// SPDX-License-Identifier: Apache-2.0

package main

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidecache/tidecache/tests/testbed"
)

// slice makes a one-second result with the given IOPS and mean latency.
func slice(iops float64, mean time.Duration) testbed.Result {
	s := testbed.Stats{IOs: uint64(iops), IOPS: iops, BytesPerSec: 4096 * iops, Mean: mean,
		Percentiles: map[float64]time.Duration{99: 2 * mean}, Hist: map[time.Duration]uint64{mean: uint64(iops)}}
	return testbed.Result{Runtime: time.Second, Write: s, Total: s}
}

// fakeReport has every workload and a system per entry of rel, whose
// IOPS per slice are given relative to the SSD's 1000; every workload gets
// the same numbers. db holds TPS per system.
func fakeReport(t *testing.T, rel map[string][]float64, db map[string]float64) *report {
	t.Helper()
	r := &report{
		opts:   defaults(false),
		cfg:    testbed.Config{Name: "bench", HDD: testbed.Nearline7200(), HDDs: 4, SSDSize: ssdBytes, RawSSDSize: rawSSDBytes, MemoryMiB: 3072},
		kernel: "6.1.0-test", fio: "fio-3.33", host: "test CPU, 2 CPUs", qemu: "QEMU 7.2", database: "MariaDB 10.11",
		date:      time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC),
		elapsed:   40 * time.Minute,
		workloads: workloads(),
		results:   map[string]map[string]testbed.InterleavedResult{},
		warm:      map[string]string{"tc-wbr": "100 % read hits"},
	}
	kinds := map[string]kind{"SSD": reference, "RAID10": reference, "tc-wb": tidecache, "tc-wbr": tidecache,
		"bcache": peer, "lvm-wc": peer, "tc-wbr-256k": variant}
	for _, k := range []string{"SSD", "RAID10", "tc-wb", "tc-wbr", "bcache", "lvm-wc", "tc-wbr-256k"} {
		if _, ok := rel[k]; !ok {
			continue
		}
		s := &system{key: k, kind: kinds[k], label: k + " system", dev: "/dev/" + k, setup: "`" + k + "`"}
		if s.kind == variant {
			s.fioOnly, s.base = true, "tc-wbr"
		}
		r.systems = append(r.systems, s)
	}
	for _, w := range r.workloads {
		r.results[w.key] = map[string]testbed.InterleavedResult{}
		for _, s := range r.systems {
			var ir testbed.InterleavedResult
			for _, f := range rel[s.key] {
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
	if db != nil {
		r.db = map[string]*dbResult{}
		for k, tps := range db {
			r.db[k] = &dbResult{runs: []testbed.SysbenchResult{{TPS: tps, LatencyPct: time.Duration(float64(time.Second) / tps)}}}
		}
	}
	return r
}

func TestRatioIsMedianOfSliceRatios(t *testing.T) {
	r := fakeReport(t, map[string][]float64{
		"SSD":    {1, 1, 1},
		"RAID10": {0.1, 0.1, 0.1},
		"tc-wb":  {0.5, 0.9, 1.2},
	}, nil)
	for _, tt := range []struct {
		sys, ref string
		want     float64
	}{
		{"tc-wb", "SSD", 0.9},
		{"RAID10", "SSD", 0.1},
		{"tc-wb", "RAID10", 9},
		{"SSD", "SSD", 1},
	} {
		if got := r.ratio("rr4k-qd1", tt.sys, tt.ref); got < tt.want-1e-9 || got > tt.want+1e-9 {
			t.Errorf("ratio(%s, %s) = %v, want %v", tt.sys, tt.ref, got, tt.want)
		}
	}
	if got := r.ratioCell("rr4k-qd1", "tc-wb", "SSD"); got != "0.90× (0.50–1.20)" {
		t.Errorf("ratioCell = %q", got)
	}
}

func TestReportTargets(t *testing.T) {
	tests := []struct {
		name     string
		rel      map[string][]float64
		db       map[string]float64
		want     []string
		dontWant []string
	}{
		{
			name: "all met",
			rel: map[string][]float64{"SSD": {1, 1}, "RAID10": {0.05, 0.05}, "tc-wb": {0.96, 0.97},
				"tc-wbr": {0.95, 0.99}, "bcache": {0.8, 0.8}, "lvm-wc": {0.9, 0.9}},
			db: map[string]float64{"SSD": 100, "RAID10": 20, "tc-wb": 96, "tc-wbr": 97, "bcache": 80, "lvm-wc": 90},
			want: []string{
				"| MariaDB oltp_read_write TPS ≥ 0.95× SSD alone | 0.96× | 0.97× | met |",
				"| MariaDB TPS ahead of every peer (× best peer, lvm-wc) | 1.07× | 1.08× | met |",
				"| every fio profile, warm, ≥ 0.90× SSD alone |",
				"| 4k random write QD1 ≥ 0.95× SSD alone IOPS |",
				"## MariaDB + sysbench oltp_read_write",
			},
			dontWant: []string{"**missed**", "below 0.90×"},
		},
		{
			name: "missed, named",
			rel: map[string][]float64{"SSD": {1, 1}, "RAID10": {0.05, 0.05}, "tc-wb": {0.5, 0.5},
				"tc-wbr": {0.85, 0.85}, "bcache": {0.8, 0.8}, "lvm-wc": {0.9, 0.9}, "tc-wbr-256k": {0.88, 0.88}},
			db: map[string]float64{"SSD": 100, "RAID10": 20, "tc-wb": 85, "tc-wbr": 89, "bcache": 80, "lvm-wc": 90},
			want: []string{"| 0.85× | 0.89× | **missed** |", "tc-wbr below 0.90× the SSD alone: 4k random read QD1 0.85×",
				"## Tuning experiments", "| tc-wbr-256k ÷ tc-wbr |", "1.04× (1.04–1.04)"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			if err := fakeReport(t, tt.rel, tt.db).write(&b, nil, ""); err != nil {
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

func TestWriteChartsAndLinks(t *testing.T) {
	r := fakeReport(t, map[string][]float64{"SSD": {1}, "RAID10": {0.05}, "tc-wb": {0.9}, "tc-wbr": {0.95},
		"bcache": {0.8}, "lvm-wc": {0.9}, "tc-wbr-256k": {0.9}},
		map[string]float64{"SSD": 100, "RAID10": 20, "tc-wb": 96, "tc-wbr": 97, "bcache": 80, "lvm-wc": 90})
	dir := t.TempDir()
	charts, err := r.writeCharts(filepath.Join(dir, "docs", "bench"))
	if err != nil {
		t.Fatal(err)
	}
	if len(charts) != 3 {
		t.Fatalf("got %d charts, want fio QD1, fio QD16 and MariaDB", len(charts))
	}
	for _, c := range charts {
		if st, err := os.Stat(c.path); err != nil || st.Size() == 0 {
			t.Errorf("chart %s: %v", c.path, err)
		}
	}
	var b strings.Builder
	if err := r.write(&b, charts, filepath.Join(dir, "docs", "benchmarks.md")); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "](bench/fio-qd1.png)") || !strings.Contains(b.String(), "](bench/mariadb.png)") {
		t.Errorf("chart links are not relative to the report:\n%s", b.String())
	}
}

// A run of QD1 workloads only (-workloads) draws no QD16 chart.
func TestChartsSkipAQueueDepthWithoutWorkloads(t *testing.T) {
	r := fakeReport(t, map[string][]float64{"SSD": {1}, "RAID10": {0.05}, "tc-wb": {0.9}, "tc-wbr": {0.95}}, nil)
	var err error
	if r.workloads, err = selectWorkloads(workloads(), []string{"rw4k-qd1"}); err != nil {
		t.Fatal(err)
	}
	charts, err := r.writeCharts(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if len(charts) != 1 || !strings.HasSuffix(charts[0].path, "fio-qd1.png") {
		t.Errorf("charts %v, want the QD1 one only", charts)
	}
}

func TestParseFlags(t *testing.T) {
	tests := []struct {
		args    []string
		check   func(options) bool
		wantErr bool
	}{
		{args: nil, check: func(o options) bool {
			return !o.quick && o.slices == 3 && o.db.rounds == 2 && o.accounting && o.variants
		}},
		{args: []string{"-quick"}, check: func(o options) bool {
			return o.quick && o.slices == 1 && o.db.rounds == 1 && !o.accounting && !o.variants
		}},
		{args: []string{"-quick", "-slices", "2", "-variants"}, check: func(o options) bool {
			return o.quick && o.slices == 2 && o.variants && o.db.time == 15*time.Second
		}},
		{args: []string{"-out", "docs/benchmarks.md"}, check: func(o options) bool { return o.charts == filepath.Join("docs", "bench") }},
		{args: []string{"-workloads", "rw4k-qd1, rw4k-qd16"}, check: func(o options) bool { return len(o.workloads) == 2 }},
		{args: []string{"-workloads", "rw4k-qd2"}, wantErr: true},
		{args: []string{"-slice", "1500ms"}, wantErr: true},
		{args: []string{"-db-time", "0s"}, wantErr: true},
	}
	for _, tt := range tests {
		o, err := parseFlags(tt.args)
		if (err != nil) != tt.wantErr {
			t.Errorf("parseFlags(%q): err %v, want error %v", tt.args, err, tt.wantErr)
			continue
		}
		if err == nil && !tt.check(o) {
			t.Errorf("parseFlags(%q) = %+v", tt.args, o)
		}
	}
}

func TestDatabaseOnlyReport(t *testing.T) {
	r := fakeReport(t, map[string][]float64{"SSD": {1}, "RAID10": {0.05}, "tc-wbr": {0.9}},
		map[string]float64{"SSD": 100, "RAID10": 20, "tc-wbr": 80})
	r.results = nil // -skip-fio
	var b strings.Builder
	if err := r.write(&b, nil, ""); err != nil {
		t.Fatal(err)
	}
	doc := b.String()
	for _, w := range []string{"| MariaDB oltp_read_write TPS ≥ 0.95× SSD alone | NaN× | 0.80× | **missed** |", "| tc-wbr | 80.0 | 80.0 |"} {
		if !strings.Contains(doc, w) {
			t.Errorf("report lacks %q:\n%s", w, doc)
		}
	}
	if strings.Contains(doc, "fio results per workload") || strings.Contains(doc, "ahead of every peer") {
		t.Errorf("a database-only run without peers reports fio or peers:\n%s", doc)
	}
}

// A database-only run with a variant still reports the variant against
// its default, the MariaDB row only.
func TestDatabaseOnlyTuning(t *testing.T) {
	r := fakeReport(t, map[string][]float64{"SSD": {1}, "RAID10": {0.05}, "tc-wbr": {0.9}, "tc-wbr-256k": {0.9}},
		map[string]float64{"SSD": 100, "RAID10": 20, "tc-wbr": 80, "tc-wbr-256k": 88})
	r.results = nil // -skip-fio
	var b strings.Builder
	if err := r.write(&b, nil, ""); err != nil {
		t.Fatal(err)
	}
	doc := b.String()
	for _, w := range []string{"| workload | tc-wbr-256k ÷ tc-wbr |", "| MariaDB oltp_read_write TPS | 1.10× |", "| SSD | 100.0 | 100.0 | 10.0 ms | 1.00× | 5.00× |"} {
		if !strings.Contains(doc, w) {
			t.Errorf("report lacks %q:\n%s", w, doc)
		}
	}
	if strings.Contains(doc, "4k random read QD1 |") {
		t.Errorf("a database-only run has fio rows in its tuning table:\n%s", doc)
	}
}

func TestSelectSystems(t *testing.T) {
	all := []*system{{key: "SSD"}, {key: "RAID10"}, {key: "SSD+linear", fioOnly: true}, {key: "tc-wbr"}}
	got, err := selectSystems(all, options{only: []string{"SSD", "RAID10", "SSD+linear"}, dbLinear: true})
	if err != nil || len(got) != 3 || got[2].fioOnly {
		t.Errorf("selectSystems = %v, %v; want SSD, RAID10 and SSD+linear in the database run", got, err)
	}
	if _, err := selectSystems(all, options{only: []string{"SSD", "tc-wbr"}}); err == nil || !strings.Contains(err.Error(), "RAID10") {
		t.Errorf("dropping RAID10: %v", err)
	}
	if _, err := selectSystems(all, options{only: []string{"SSD", "RAID10", "zfs"}}); err == nil || !strings.Contains(err.Error(), "zfs") {
		t.Errorf("unknown key: %v", err)
	}
}

func TestRoundRatios(t *testing.T) {
	runs := func(tps ...float64) *dbResult {
		d := &dbResult{}
		for _, x := range tps {
			d.runs = append(d.runs, testbed.SysbenchResult{TPS: x})
		}
		return d
	}
	tests := []struct {
		name      string
		sys, base *dbResult
		want      []float64
		cell      string
	}{
		// The VM sped up in round 2 and the ratio of means would say
		// 0.91×; per round the system kept 0.95×, 0.80×, 1.00×.
		{"paired by round", runs(19, 24, 25), runs(20, 30, 25), []float64{0.8, 0.95, 1}, "0.95× (0.80–1.00)"},
		{"one round", runs(80), runs(100), []float64{0.8}, "0.80×"},
		{"base lacks a round", runs(10, 20), runs(20), []float64{0.5}, "0.50×"},
		{"base round of 0 TPS skipped", runs(10, 20), runs(0, 40), []float64{0.5}, "0.50×"},
		{"system not measured", nil, runs(20), nil, "NaN×"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.sys.roundRatios(tt.base)
			if len(got) != len(tt.want) {
				t.Fatalf("roundRatios = %v, want %v", got, tt.want)
			}
			for i := range got {
				if math.Abs(got[i]-tt.want[i]) > 1e-9 {
					t.Fatalf("roundRatios = %v, want %v", got, tt.want)
				}
			}
			if cell := ratiosCell(got); cell != tt.cell {
				t.Errorf("cell = %q, want %q", cell, tt.cell)
			}
		})
	}
}
