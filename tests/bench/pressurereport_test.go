// SPDX-License-Identifier: Apache-2.0

package main

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidecache/tidecache/tests/testbed"
)

func TestParsePressureFlags(t *testing.T) {
	for _, tt := range []struct {
		args    []string
		check   func(options) bool
		wantErr bool
	}{
		{args: []string{"-pressure"}, check: func(o options) bool {
			p := o.press
			return o.pressure && !o.pressTargeted && p.cache == 64<<20 && p.volume == 4*p.cache && p.write == 90*time.Second &&
				len(p.schedulers) == 2 && p.db.rounds == 1 && p.write > 2*p.burst
		}},
		{args: []string{"-pressure", "-quick", "-out", "x/benchmarks-pressure.md"}, check: func(o options) bool {
			p := o.press
			return p.cache == 64<<20 && p.volume == 4*p.cache && len(p.schedulers) == 1 && p.schedulers[0] == testbed.SchedDeadline &&
				p.db.rounds == 0 && o.charts == filepath.Join("x", "bench-pressure") && !o.pressTargeted
		}},
		{args: []string{"-pressure", "-quick", "-pressure-db", "-schedulers", "none"}, check: func(o options) bool {
			return o.press.db.rounds == 1 && len(o.press.schedulers) == 1 && o.press.schedulers[0] == "none" && o.pressTargeted
		}},
		{args: []string{"-pressure", "-pressure-db=false"}, check: func(o options) bool { return o.press.db.rounds == 0 }},
		{args: []string{"-pressure", "-quick", "-phase-scale", "0.5"}, check: func(o options) bool {
			return o.press.write == 30*time.Second && o.press.idle == 23*time.Second && o.pressTargeted
		}},
		{args: []string{"-pressure", "-quick", "-only", "RAID10,tc-wb,tc-wb-norf"}, check: func(o options) bool {
			vols := tidecachePressureVolumes(o.press)
			last := vols[len(vols)-1]
			return o.pressTargeted && len(vols) == 3 && last.name == "tc-wb-norf" && last.base == "tc-wb" &&
				slices.Equal(last.tune, []string{"--readfirst-max-hold", "0"}) && pressureSSDMiB(o.press)[0] == 3*64+96
		}},
		{args: []string{"-pressure", "-quick", "-pressure-tune", "tc-wb-lw0=--low-watermark 0", "-pressure-tune", "tc-wb-j64=--writeback-jobs 64"}, check: func(o options) bool {
			vols := tidecachePressureVolumes(o.press)
			last := vols[len(vols)-1]
			return o.pressTargeted && len(vols) == 5 && vols[3].name == "tc-wb-lw0" && last.name == "tc-wb-j64" && last.base == "tc-wb" &&
				last.kind == variant && slices.Equal(last.tune, []string{"--writeback-jobs", "64"}) && pressureSSDMiB(o.press)[0] == 5*64+96
		}},
		{args: []string{"-pressure", "-pressure-tune", "tc-wb-norf=--low-watermark 0"}, wantErr: true},
		{args: []string{"-pressure", "-pressure-tune", "tc-wb-lw0"}, wantErr: true},
		{args: []string{"-pressure", "-pressure-tune", "x=", "-quick"}, wantErr: true},
		{args: []string{"-pressure", "-readfirst-ms", "1000"}, wantErr: true},
		{args: []string{"-pressure", "-schedulers", "bfq"}, wantErr: true},
		{args: []string{"-pressure", "-phase-scale", "0"}, wantErr: true},
		{args: []string{"-pressure", "-replica"}, wantErr: true},
	} {
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

// fakePressureReport is the fixture's run as a whole report.
func fakePressureReport() *pressureReport {
	sr := pressureFixture()
	sr.cfg = testbed.Config{Name: "bench-pressure", HDD: testbed.Nearline7200(), HDDs: 4, HDDSize: hddBytes, MemoryMiB: 3072}
	sr.queue = testbed.QueueInfo{Scheduler: "mq-deadline", HWQueues: 1, Tags: 32, NrRequests: 64, MaxSegments: 126, MaxKiB: 1280}
	sr.model = modelCheck{depth: 32, qd1: testbed.Stats{IOPS: 110, Clat: testbed.Latency{Mean: 9 * time.Millisecond}},
		deep: testbed.Stats{IOPS: 150, Clat: testbed.Latency{Mean: 210 * time.Millisecond}}}
	sr.writeback["tc-wb"] = "`tc-tc-wb-wtier`: `0 524288 writecache s 253:4 253:5 4096 2 writeback_jobs 16`"
	sr.elapsed = 20 * time.Minute
	for _, ph := range allPhases[1:] {
		for _, run := range sr.runs {
			if run.phases[ph] == nil {
				run.phases[ph] = &phaseRun{res: testbed.Result{Read: fakeClass{iops: 100, p99: ms(50), p999: ms(60), max: ms(70)}.stats()},
					timeline: testbed.Timeline{Start: at(fakePhaseStart[ph]), Points: []testbed.IOPSPoint{{At: time.Second, Dur: time.Second, Read: 100}}}, took: 10 * time.Second}
			}
		}
	}
	return &pressureReport{opts: options{pressure: true, quick: true}, prof: pressureDefaults(true),
		date: time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC), elapsed: 25 * time.Minute,
		kernel: "6.1.0-test", fio: "fio-3.33", host: "test CPU, 2 CPUs", qemu: "QEMU 7.2", scheds: []*schedRun{sr}}
}

func TestPressureReport(t *testing.T) {
	r := fakePressureReport()
	dir := t.TempDir()
	out := filepath.Join(dir, pressureReportFile)
	charts, err := r.writeCharts(filepath.Join(dir, "bench-pressure"))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(charts[testbed.SchedDeadline]); n != 5 {
		t.Errorf("%d charts, want one per system (5)", n)
	}
	var b strings.Builder
	if err := r.write(&b, charts, out); err != nil {
		t.Fatal(err)
	}
	doc := b.String()
	for _, want := range []string{
		"Generated by `make bench-pressure QUICK=1` (`go run ./tests/bench -pressure`) on 2026-11-28 09:00 UTC, the short profile (`-quick`); the run took 25m0s.",
		"### HDDs under mq-deadline: SATA disks under md",
		"| target | tc-wb | tc-wbr | verdict |",
		"| no I/O waits more than 1.00 s (max) in any phase | 600.0 ms (writes, 4k random write) | 179.00 s (reads, 8k 70/30 mix) | **missed** (tc-wbr) |",
		"at most 126 segments and 1280 KiB per request. One emulated disk, measured before the RAID was built:\n    4k random reads at QD1 110 IOPS (mean 9.00 ms), at QD32 150 IOPS (mean 210.0 ms).",
		"writeback_jobs 16",
		"![tc-wb under pressure, HDDs under mq-deadline: IOPS per second across the phases](bench-pressure/mq-deadline-tc-wb.png)",
		"| tc-wb | 800 | 4.00× | 5s | 300 (from 5s) | 1.50× |",
		"| tc-wb | 3.9 MiB (100 %) | 1.8 MiB (45 %) | 3s | 13s | 0.86 MiB/s | 220 | 1.10× | 0s |",
		"| figure | tc-wb ÷ lvm-wc | tc-wb ÷ bcache | tc-wbr ÷ lvm-wc | tc-wbr ÷ bcache |",
		"## MariaDB under pressure\n\nNot measured in this run",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if t.Failed() {
		t.Log(doc)
	}
	// The idle phase's sorted marks: the fill comes before the mix.
	c, ok := r.scheds[0].timeChartOf(r.scheds[0].system("tc-wb"))
	if !ok {
		t.Fatal("no chart for tc-wb")
	}
	var labels []string
	for _, m := range c.Marks {
		labels = append(labels, m.Label)
	}
	if got, want := strings.Join(labels, ", "), "4k random write, write cache full, 8k 70/30 mix, 4k random read, write burst, idle, bulk load, 70/30 mix after the load"; got != want {
		t.Errorf("marks %s, want %s", got, want)
	}
	if len(c.Panels) != 2 || c.Panels[1].YLabel != "dirty % of cache" {
		t.Errorf("panels %+v, want IOPS and the dirty share", c.Panels)
	}
	// Between phases the lines break.
	breaks := 0
	for _, p := range c.Panels[0].Series[1].Points {
		if math.IsNaN(p.Y) {
			breaks++
		}
	}
	if breaks < 5 {
		t.Errorf("%d breaks in the write line, want one before each phase and the idle time", breaks)
	}
}

func TestWritePressureTargets(t *testing.T) {
	dir := t.TempDir()
	var b strings.Builder
	if err := fakePressureReport().write(&b, nil, filepath.Join(dir, pressureReportFile)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, pressureReportFile), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	var main strings.Builder
	(&report{}).writePressureTargets(&main, filepath.Join(dir, "benchmarks.md"))
	got := main.String()
	for _, want := range []string{"## Under pressure: a working set four times the cache", "(2026-11-28 09:00 UTC)",
		"\n#### HDDs under mq-deadline", "| target | tc-wb | tc-wbr | verdict |"} {
		if !strings.Contains(got, want) {
			t.Errorf("section lacks %q:\n%s", want, got)
		}
	}
	for _, dont := range []string{"## Set-up", "\n### HDDs"} {
		if strings.Contains(got, dont) {
			t.Errorf("section holds %q:\n%s", dont, got)
		}
	}
	main.Reset()
	(&report{}).writePressureTargets(&main, filepath.Join(t.TempDir(), "benchmarks.md"))
	if main.Len() != 0 {
		t.Errorf("without a pressure report: %q", main.String())
	}
}

func TestHDDModelSection(t *testing.T) {
	var b strings.Builder
	writeHDDModel(&b, testbed.Nearline7200())
	doc := b.String()
	for _, want := range []string{"## HDD model\n", "holds every read and write for 8 ms", "to 150 IOPS", "one request queue of 32 entries",
		"`num-queues=1,queue-size=32`", "The runs here use mq-deadline", "**What the model gets wrong.**", "above* the disk's queue"} {
		if !strings.Contains(doc, want) {
			t.Errorf("HDD model section lacks %q:\n%s", want, doc)
		}
	}
}

func TestPressureDatabase(t *testing.T) {
	r := fakePressureReport()
	sr := r.scheds[0]
	res := func(pareto, uniform float64) *pressureDBRun {
		d := &pressureDBRun{load: 20 * time.Second, flush: 5 * time.Second, results: map[string]testbed.SysbenchResult{},
			intervals: map[string][]testbed.SysbenchInterval{}}
		for a, tps := range map[string]float64{"pareto": pareto, "uniform": uniform} {
			d.results[a] = testbed.SysbenchResult{TPS: tps, LatencyPct: time.Duration(float64(time.Second) / tps), LatencyMax: 3 * time.Second}
			d.intervals[a] = []testbed.SysbenchInterval{{At: time.Second, TPS: tps}, {At: 2 * time.Second, TPS: tps / 2}}
		}
		return d
	}
	sr.db = map[string]*pressureDBRun{"RAID10": res(4, 4), "tc-wb": res(8, 5), "tc-wbr": res(6, 3), "lvm-wc": res(2, 2), "bcache": res(7, 4)}
	r.database = "MariaDB 10.11; sysbench tables 200 MiB (3.1× each system's 64 MiB of SSD)"
	r.prof.db = pressureDBDefaults()
	var db pressureTarget
	for _, tg := range sr.targets() {
		if strings.HasPrefix(tg.name, "MariaDB") {
			db = tg
		}
	}
	if !db.met["tc-wb"] || db.met["tc-wbr"] || db.cells["tc-wb"] != "pareto 1.14× × best peer (bcache); uniform 1.25× × best peer (bcache)" {
		t.Errorf("MariaDB target: met %v, cells %q", db.met, db.cells)
	}
	var b strings.Builder
	if err := r.write(&b, nil, ""); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## MariaDB under pressure (HDDs under mq-deadline)", "| tc-wb | 20s | 5s | 8.0 | 2.00× | 125.0 ms | 3.00 s | 5.0 | 1.25× |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if c, ok := sr.dbChart(); !ok || len(c.Panels) != 2 || len(c.Panels[0].Series) != 5 {
		t.Errorf("database chart: %v, %+v", ok, c.Panels)
	}
	sr.dbErr = errors.New("sysbench: exit code 1")
	b.Reset()
	if err := r.write(&b, nil, ""); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "## MariaDB under pressure\n\n**Failed** (HDDs under mq-deadline): sysbench: exit code 1") || r.failed() == nil {
		t.Errorf("a failed database part: report %q, failed() %v", b.String()[strings.Index(b.String(), "## MariaDB"):], r.failed())
	}
}
