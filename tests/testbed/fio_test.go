// SPDX-License-Identifier: Apache-2.0

package testbed

import (
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The testdata files are fio 3.33 output captured in the test VM, with the
// command lines Job.Args and Job.InterleavedArgs build:
//
//	fio-randwrite-fsync-qd1.json    psync, randwrite, fsync=1, on a cached volume
//	fio-randrw-qd4.json             libaio QD4, randrw 70/30, on a cached volume
//	fio-interleaved-randread.json   randread, 2 devices × 2 slices of 1 s
func readTestdata(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func parseOne(t *testing.T, name string) Result {
	t.Helper()
	rs, err := ParseFio(readTestdata(t, name))
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 {
		t.Fatalf("%s: %d results, want 1", name, len(rs))
	}
	return rs[0]
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-6*math.Max(math.Abs(a), math.Abs(b)) }

func TestParseFioWriteFsync(t *testing.T) {
	r := parseOne(t, "fio-randwrite-fsync-qd1.json")
	if r.Job != "commit" || r.Runtime != 2001*time.Millisecond {
		t.Errorf("job %q runtime %v, want commit 2.001s", r.Job, r.Runtime)
	}
	if r.Read.IOs != 0 || r.Write.IOs != 807 || !near(r.Write.IOPS, 403.298351) {
		t.Errorf("read %d, write %d at %v IOPS; want 0, 807 at 403.298351", r.Read.IOs, r.Write.IOs, r.Write.IOPS)
	}
	if r.Write.Mean != 840216*time.Nanosecond || r.Write.P99() != 2342912*time.Nanosecond {
		t.Errorf("write mean %v p99 %v, want 840.216µs and 2.342912ms", r.Write.Mean, r.Write.P99())
	}
	if c := r.Write.Clat; c.Mean != 833459*time.Nanosecond || c.P99() != 2310144*time.Nanosecond || histCount(c.Hist) != 807 {
		t.Errorf("write clat mean %v p99 %v (%d in histogram), want 833.459µs, 2.310144ms, 807", c.Mean, c.P99(), histCount(c.Hist))
	}
	if r.Total.IOs != r.Write.IOs || r.Total.P99() != r.Write.P99() {
		t.Errorf("total %+v differs from write %+v", r.Total, r.Write)
	}
	if r.Sync.IOs != 807 || r.Sync.Mean != 1549102*time.Nanosecond || r.Sync.P99() != 5144576*time.Nanosecond {
		t.Errorf("sync %d mean %v p99 %v, want 807, 1.549102ms, 5.144576ms", r.Sync.IOs, r.Sync.Mean, r.Sync.P99())
	}
	c := r.Commit()
	if c.Mean != r.Write.Mean+r.Sync.Mean || c.P99() != r.Write.P99()+r.Sync.P99() || c.IOPS != r.Write.IOPS {
		t.Errorf("commit %v/%v at %v IOPS: want write+sync latencies at the write rate", c.Mean, c.P99(), c.IOPS)
	}
	if got := histCount(r.Write.Hist); got != 807 {
		t.Errorf("write histogram holds %d I/Os, want 807", got)
	}
}

func TestParseFioMixed(t *testing.T) {
	r := parseOne(t, "fio-randrw-qd4.json")
	if r.Read.IOs != 1084 || r.Write.IOs != 464 || r.Total.IOs != 1548 {
		t.Errorf("I/Os read %d write %d total %d, want 1084, 464, 1548", r.Read.IOs, r.Write.IOs, r.Total.IOs)
	}
	if !near(r.Total.IOPS, 771.300448) || r.Total.P99() != 18219008*time.Nanosecond {
		t.Errorf("total %v IOPS p99 %v, want 771.300448 and 18.219008ms", r.Total.IOPS, r.Total.P99())
	}
	// The slowest I/O of each class: fio's lat_ns and clat_ns max.
	if r.Read.Max != 42316590 || r.Read.Clat.Max != 42239610 || r.Write.Max != 10475520 || r.Write.Clat.Max != 8163900 || r.Total.Max != r.Read.Max {
		t.Errorf("max latency read %v (clat %v), write %v (clat %v), total %v; want 42.31659ms (42.23961ms), 10.47552ms (8.1639ms), 42.31659ms",
			r.Read.Max, r.Read.Clat.Max, r.Write.Max, r.Write.Clat.Max, r.Total.Max)
	}
	if r.Sync.IOs != 0 || r.Commit().Mean != r.Total.Mean {
		t.Errorf("a job without fsync has sync stats %+v", r.Sync)
	}
}

func TestParseFioPreambleAndErrors(t *testing.T) {
	doc := readTestdata(t, "fio-randrw-qd4.json")
	withNote := append([]byte("fio: file hash not empty on exit\n"), doc...)
	if _, err := ParseFio(withNote); err != nil {
		t.Errorf("a warning line before the JSON: %v", err)
	}
	for name, in := range map[string]string{
		"empty":     "",
		"not json":  "fio: no such file\n",
		"no jobs":   `{"fio version": "fio-3.33", "jobs": []}`,
		"job error": `{"jobs": [{"jobname": "x", "error": 5, "read": {"total_ios": 1}}]}`,
		"no I/O":    `{"jobs": [{"jobname": "x", "read": {"total_ios": 0}, "write": {"total_ios": 0}}]}`,
		"bad pct":   `{"jobs": [{"jobname": "x", "read": {"total_ios": 1, "lat_ns": {"percentile": {"x": 1}}}}]}`,
	} {
		if _, err := ParseFio([]byte(in)); err == nil {
			t.Errorf("%s: parsed without error", name)
		}
	}
}

// TestHistPercentilesMatchFio checks that percentiles recomputed from a
// histogram are the ones fio itself printed: Merge relies on it.
func TestHistPercentilesMatchFio(t *testing.T) {
	for _, name := range []string{"fio-randwrite-fsync-qd1.json", "fio-randrw-qd4.json", "fio-interleaved-randread.json"} {
		rs, err := ParseFio(readTestdata(t, name))
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			for dir, s := range map[string]Stats{"read": r.Read, "write": r.Write, "total": r.Total, "sync": r.Sync} {
				if s.IOs == 0 {
					continue
				}
				got := histPercentiles(s.Hist, reportedPercentiles())
				for _, p := range reportedPercentiles() {
					if got[p] != s.Percentiles[p] {
						t.Errorf("%s %s %s: p%v from histogram %v, fio says %v", name, r.Job, dir, p, got[p], s.Percentiles[p])
					}
				}
			}
		}
	}
}

func TestMergeInterleaved(t *testing.T) {
	rs, err := ParseFio(readTestdata(t, "fio-interleaved-randread.json"))
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]Result{}
	for _, r := range rs {
		byName[r.Job] = r
	}
	// Device 1 (the bare RAID10) ran in the second place of slice 0 and
	// the first of slice 1.
	a, b := byName[sliceName("read", 0, 1)], byName[sliceName("read", 1, 1)]
	if a.Total.IOs == 0 || b.Total.IOs == 0 {
		t.Fatalf("missing slices in %v", slices.Sorted(maps.Keys(byName)))
	}
	m, err := Merge([]Result{a, b})
	if err != nil {
		t.Fatal(err)
	}
	ios := a.Total.IOs + b.Total.IOs
	if m.Total.IOs != ios || m.Runtime != a.Runtime+b.Runtime {
		t.Errorf("merged %d I/Os in %v, want %d in %v", m.Total.IOs, m.Runtime, ios, a.Runtime+b.Runtime)
	}
	if want := float64(ios) / (a.Runtime + b.Runtime).Seconds(); !near(m.Total.IOPS, want) {
		t.Errorf("merged IOPS %v, want %v", m.Total.IOPS, want)
	}
	wantMean := (float64(a.Total.Mean)*float64(a.Total.IOs) + float64(b.Total.Mean)*float64(b.Total.IOs)) / float64(ios)
	if math.Abs(float64(m.Total.Mean)-wantMean) > 1 {
		t.Errorf("merged mean %v, want %v", m.Total.Mean, time.Duration(wantMean))
	}
	if want := max(a.Total.Max, b.Total.Max); m.Total.Max != want || m.Total.Clat.Max != max(a.Total.Clat.Max, b.Total.Clat.Max) || want == 0 {
		t.Errorf("merged max %v (clat %v), want the slower slice's %v", m.Total.Max, m.Total.Clat.Max, want)
	}
	if histCount(m.Total.Hist) != ios {
		t.Errorf("merged histogram holds %d I/Os, want %d", histCount(m.Total.Hist), ios)
	}
	// Completion latencies merge the same way.
	wantClat := (float64(a.Total.Clat.Mean)*float64(a.Total.IOs) + float64(b.Total.Clat.Mean)*float64(b.Total.IOs)) / float64(ios)
	if a.Total.Clat.Mean == 0 || math.Abs(float64(m.Total.Clat.Mean)-wantClat) > 1 || histCount(m.Total.Clat.Hist) != ios {
		t.Errorf("merged clat mean %v (want %v), histogram %d I/Os (want %d)", m.Total.Clat.Mean, time.Duration(wantClat),
			histCount(m.Total.Clat.Hist), ios)
	}
	if p := m.Total.Clat.P99(); p < min(a.Total.Clat.P99(), b.Total.Clat.P99()) || p > max(a.Total.Clat.P99(), b.Total.Clat.P99()) {
		t.Errorf("merged clat p99 %v outside the parts' %v and %v", p, a.Total.Clat.P99(), b.Total.Clat.P99())
	}
	// A part without a completion-latency histogram leaves clat unknown.
	noClat := b
	noClat.Total.Clat.Hist = nil
	if m, err := Merge([]Result{a, noClat}); err != nil || m.Total.Clat.Mean != 0 || m.Total.Clat.Hist != nil {
		t.Errorf("merge with a part lacking clat bins: clat %+v, err %v; want none", m.Total.Clat, err)
	}
	if p := m.Total.P99(); p < min(a.Total.P99(), b.Total.P99()) || p > max(a.Total.P99(), b.Total.P99()) {
		t.Errorf("merged p99 %v outside the parts' %v and %v", p, a.Total.P99(), b.Total.P99())
	}

	// One part merged alone is itself.
	one, err := Merge([]Result{a})
	if err != nil {
		t.Fatal(err)
	}
	if one.Total.IOs != a.Total.IOs || one.Total.Mean != a.Total.Mean || one.Total.P99() != a.Total.P99() {
		t.Errorf("Merge of one result changed it: %+v vs %+v", one.Total, a.Total)
	}

	if _, err := Merge(nil); err == nil {
		t.Error("Merge(nil): no error")
	}
	noHist := a
	noHist.Total.Hist = nil
	if _, err := Merge([]Result{noHist}); err == nil {
		t.Error("Merge without histograms: no error")
	}
}

func histCount(h map[time.Duration]uint64) uint64 {
	var n uint64
	for _, c := range h {
		n += c
	}
	return n
}

func TestJobArgs(t *testing.T) {
	args, err := Job{Name: "c", Device: "/dev/x", RW: "randwrite", Writes: Fsync, Offset: 4096, Size: 1 << 20, Runtime: 5 * time.Second, Ramp: time.Second}.Args()
	if err != nil {
		t.Fatal(err)
	}
	line := strings.Join(args, " ")
	for _, want := range []string{"fio ", "--ioengine=psync", "--direct=1", "--rw=randwrite", "--bs=4096", "--iodepth=1",
		"--runtime=5", "--ramp_time=1", "--offset=4096", "--size=1048576", "--fsync=1", "--output-format=json+",
		"--lat_percentiles=1", "--unified_rw_reporting=both", "--name=c --filename=/dev/x"} {
		if !strings.Contains(line, want) {
			t.Errorf("args lack %q: %s", want, line)
		}
	}
	if !strings.HasSuffix(line, "--name=c --filename=/dev/x") {
		t.Errorf("job options must follow the global ones: %s", line)
	}

	args, _ = Job{Name: "r", Device: "/dev/x", RW: "randread", IODepth: 16, Runtime: time.Second}.Args()
	line = strings.Join(args, " ")
	if !strings.Contains(line, "--ioengine=libaio") || !strings.Contains(line, "--iodepth=16") || strings.Contains(line, "--size=") {
		t.Errorf("QD16 read: %s", line)
	}
	for d, flag := range map[Durability]string{DSync: "--sync=1", DataSync: "--sync=dsync"} {
		args, _ := Job{Name: "w", Device: "/dev/x", RW: "randwrite", Writes: d, Runtime: time.Second}.Args()
		if !slices.Contains(args, flag) {
			t.Errorf("%v: args lack %s: %v", d, flag, args)
		}
	}

	for name, j := range map[string]Job{
		"no device":        {Name: "x", RW: "read", Runtime: time.Second},
		"no rw":            {Name: "x", Device: "/dev/x", Runtime: time.Second},
		"short runtime":    {Name: "x", Device: "/dev/x", RW: "read", Runtime: 500 * time.Millisecond},
		"fractional":       {Name: "x", Device: "/dev/x", RW: "read", Runtime: 1500 * time.Millisecond},
		"bad durability":   {Name: "x", Device: "/dev/x", RW: "write", Runtime: time.Second, Writes: Durability(9)},
		"fractional ramp ": {Name: "x", Device: "/dev/x", RW: "read", Runtime: time.Second, Ramp: time.Millisecond},
	} {
		if _, err := j.Args(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestInterleavedArgs(t *testing.T) {
	j := Job{Name: "w", RW: "randwrite", Writes: Fsync, Offset: 1 << 20, Size: 8 << 20, SplitRegion: true, Runtime: time.Minute, Ramp: time.Second}
	args, err := j.InterleavedArgs([]string{"/dev/a", "/dev/b"}, 2, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	line := strings.Join(args, " ")
	if !strings.Contains(line, "--runtime=3") || strings.Contains(line, "--ramp_time") {
		t.Errorf("slices run 3 s with no ramp: %s", line)
	}
	// Slice 0: a then b; slice 1: b then a, each in its half of the region.
	want := " --name=w.s0.d0 --filename=/dev/a --stonewall --randseed=1 --offset=1048576 --size=4194304" +
		" --name=w.s0.d1 --filename=/dev/b --stonewall --randseed=1 --offset=1048576 --size=4194304" +
		" --name=w.s1.d1 --filename=/dev/b --stonewall --randseed=2 --offset=5242880 --size=4194304" +
		" --name=w.s1.d0 --filename=/dev/a --stonewall --randseed=2 --offset=5242880 --size=4194304"
	if !strings.HasSuffix(line, want) {
		t.Errorf("interleaved jobs:\n got %s\nwant suffix %s", line, want)
	}
	if _, err := j.InterleavedArgs([]string{"/dev/a"}, 3, time.Second); err == nil {
		t.Error("a region that does not split into whole blocks: no error")
	}
	if _, err := j.InterleavedArgs(nil, 2, time.Second); err == nil {
		t.Error("no devices: no error")
	}
}

func TestInterleavedJobsArgs(t *testing.T) {
	plain := Job{Name: "d", Device: "/dev/a", RW: "randwrite", Engine: "libaio", Offset: 4096, Size: 1 << 20, Runtime: time.Minute}
	dsync := plain
	dsync.Writes, dsync.Device = DataSync, "/dev/b"
	args, err := InterleavedJobsArgs([]Job{plain, dsync}, 2, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	line := strings.Join(args, " ")
	opts := " --ioengine=libaio --direct=1 --rw=randwrite --bs=4096 --iodepth=1 --runtime=2 --offset=4096" +
		" --lat_percentiles=1 --percentile_list=50:99:99.9 --unified_rw_reporting=both --time_based --size=1048576"
	// Every job carries its own options; only the O_DSYNC one syncs.
	// Slice 0: plain then O_DSYNC; slice 1: O_DSYNC then plain.
	want := "fio --output-format=json+" +
		" --name=d.s0.d0 --filename=/dev/a" + opts + " --stonewall --randseed=1" +
		" --name=d.s0.d1 --filename=/dev/b" + opts + " --sync=dsync --stonewall --randseed=1" +
		" --name=d.s1.d1 --filename=/dev/b" + opts + " --sync=dsync --stonewall --randseed=2" +
		" --name=d.s1.d0 --filename=/dev/a" + opts + " --stonewall --randseed=2"
	if line != want {
		t.Errorf("interleaved jobs:\n got %s\nwant %s", line, want)
	}
	for name, jobs := range map[string][]Job{
		"no jobs":      nil,
		"no device":    {{Name: "d", RW: "randwrite"}},
		"split region": {{Name: "d", Device: "/dev/a", RW: "randwrite", SplitRegion: true, Size: 1 << 20}},
		"no rw":        {{Name: "d", Device: "/dev/a"}},
	} {
		if _, err := InterleavedJobsArgs(jobs, 2, time.Second); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestJobEngine(t *testing.T) {
	for _, c := range []struct {
		j    Job
		want string
	}{
		{Job{IODepth: 1}, "psync"},
		{Job{IODepth: 16}, "libaio"},
		{Job{IODepth: 1, Engine: "libaio"}, "libaio"},
		{Job{IODepth: 16, Engine: "io_uring"}, "io_uring"},
	} {
		if got := c.j.withDefaults().engine(); got != c.want {
			t.Errorf("engine of %+v = %q, want %q", c.j, got, c.want)
		}
	}
}

func TestDescribe(t *testing.T) {
	for _, c := range []struct {
		j    Job
		want string
	}{
		{Job{RW: "randwrite", Writes: Fsync, Size: 32 << 20}, "4 KiB randwrite QD1 O_DIRECT + fsync over 32 MiB"},
		{Job{RW: "randread", IODepth: 16}, "4 KiB randread QD16"},
		{Job{RW: "randrw", RWMixRead: 70, IODepth: 4}, "4 KiB randrw QD4 70/30 read/write O_DIRECT"},
		{Job{RW: "randwrite", Engine: "libaio", Writes: DataSync, Size: 64 << 20}, "4 KiB randwrite QD1 libaio O_DIRECT|O_DSYNC over 64 MiB"},
	} {
		if got := c.j.Describe(); got != c.want {
			t.Errorf("Describe() = %q, want %q", got, c.want)
		}
	}
}
