// Command bench is `make bench`: in one VM run (tests/testbed) it measures
// 4 KiB random writes at queue depth 1 (three durability semantics) and
// 4 KiB random reads at queue depth 1 and 16 on
//
//	(a) the raw SSD: a second SSD image, same qemu settings as the pool's,
//	    no pool on it (and the same SSD through one dm-linear, to show what
//	    a single device-mapper layer costs in this VM);
//	(b) the bare RAID10: a passthrough volume, dm-linear over md RAID10;
//	(c) a cached volume in writeback mode with the write tier only;
//	(d) a cached volume with the write tier and a warm read tier;
//
// and reports absolute figures and ratios to the raw SSD measured in the
// same run. Under TCG, and with other VMs sharing the host, a run's speed
// swings by tens of percent within a minute: each workload is one fio
// process that cycles through the devices in short time slices
// (testbed.Interleaved), so that every device is measured under the same
// conditions, and each ratio is the median of the per-slice ratios.
//
//	go run ./tests/bench [-slice 2s] [-slices 8] [-out docs/benchmarks.md] [-keep]
//
// Progress goes to stderr, the markdown report to stdout and, with -out,
// to a file, which it replaces: docs/benchmarks.md is this report followed
// by the control-plane section that `go run ./tests/bench/controlplane -out
// docs/benchmarks.md` appends, so run that one second. It is a benchmark,
// not a test: it fails only when something could not be measured, never on
// the numbers.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	goruntime "runtime"
	"strings"
	"syscall"
	"time"

	"github.com/tidecache/tidecache/tests/testbed"
)

// Sizes and regions; raw SSD, dm-linear SSD and volumes use the same
// offsets. Nothing but its own workloads touches a region:
//
//	  0-32 MiB  rewritten: the QD1 write workloads (after the first slice
//	            every block is in the write cache: an overwrite in place)
//	 32-128 MiB fresh, for the I/O accounting of first writes
//	128-144 MiB read: never written, so the write tier holds none of it;
//	            it fits the read cache
//	160-256 MiB fresh: "+ fsync, first write of each block"
//
// The writes stay well under the write cache's 50 % high watermark, so no
// write-back to the HDDs runs while measuring.
const (
	volumeSize     = "256M"
	writeCacheSize = "192M"
	readCacheSize  = "32M"

	rewriteOffset, rewriteRegion = 0, 32 << 20
	acctOffset, acctRegion       = 32 << 20, 96 << 20
	readOffset, readRegion       = 128 << 20, 16 << 20
	freshOffset, freshRegion     = 160 << 20, 96 << 20

	ssdSize = 640 << 20 // each SSD image: two 192 MiB write caches, a 32 MiB read cache and its metadata
)

// target is a device the workloads run on.
type target struct {
	key, label string
	dev        string
}

// workload is a job without its device.
type workload struct {
	key, label string
	job        testbed.Job
}

type options struct {
	slice         time.Duration
	slices        int
	out           string
	keep          bool
	hddWriteCache bool
	ssdWriteCache bool
}

func main() {
	var o options
	flag.DurationVar(&o.slice, "slice", 2*time.Second, "length of one time slice of one device (whole seconds)")
	flag.IntVar(&o.slices, "slices", 8, "time slices per device and workload")
	flag.StringVar(&o.out, "out", "", "also write the report to this file, replacing it (e.g. docs/benchmarks.md)")
	flag.BoolVar(&o.keep, "keep", false, "keep the disk images (under .cache/vm/bench) after the run")
	flag.BoolVar(&o.hddWriteCache, "hdd-write-cache", false, "emulate HDDs with their volatile write cache on (flushes cost as much as writes)")
	flag.BoolVar(&o.ssdWriteCache, "ssd-write-cache", false, "emulate SSDs with a volatile write cache (consumer drives) instead of power-loss protection")
	flag.Parse()
	if o.slice < time.Second || o.slice%time.Second != 0 || o.slices < 1 {
		fmt.Fprintln(os.Stderr, "bench: -slice wants whole seconds (at least 1s) and -slices at least 1")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := run(ctx, o)
	if err != nil {
		fmt.Fprintf(os.Stderr, "\nbench failed: %v\n", err)
		os.Exit(1)
	}
	var doc strings.Builder
	if err := rep.write(&doc); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
	fmt.Print(doc.String())
	if o.out != "" {
		if err := os.WriteFile(o.out, []byte(doc.String()), 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "bench: %v\n", err)
			os.Exit(1)
		}
		fmt.Fprintf(os.Stderr, "bench: wrote %s\n", o.out)
	}
}

func run(ctx context.Context, o options) (_ *report, err error) {
	p := testbed.NewProgress(os.Stderr)
	hdd := testbed.Nearline7200()
	hdd.WriteCache = o.hddWriteCache
	cfg := testbed.Config{
		Name: "bench", HDD: hdd, SSDSize: ssdSize, RawSSDSize: ssdSize,
		SSDWriteCache: o.ssdWriteCache, Keep: o.keep, Progress: p,
	}
	bed, err := testbed.Start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err != nil {
			p.Step("the VM's console log and qemu output are in %s", bed.VM().BootDir())
		}
		if cerr := bed.Close(cctx); cerr != nil && err == nil {
			err = fmt.Errorf("shut down the VM: %w", cerr)
		}
	}()

	rep := &report{opts: o, cfg: bed.Config(), kernel: bed.Kernel(), date: time.Now()}
	if rep.fio, err = bed.Run(ctx, "fio", "--version"); err != nil {
		return nil, err
	}
	rep.fio = strings.TrimSpace(rep.fio)
	rep.host = hostInfo()
	rep.qemu = qemuVersion(ctx)

	p.Step("creating the pool (md RAID10 over the emulated HDDs + SSD) and volumes…")
	if err := bed.CreatePool(ctx, "bench"); err != nil {
		return nil, fmt.Errorf("create pool: %w", err)
	}
	specs := []testbed.VolumeSpec{
		{Name: "bare", Size: volumeSize, Mode: "passthrough"},
		{Name: "wb", Size: volumeSize, WriteCache: writeCacheSize},
		{Name: "wbr", Size: volumeSize, WriteCache: writeCacheSize, ReadCache: readCacheSize},
	}
	devs := map[string]string{}
	for _, s := range specs {
		if devs[s.Name], err = bed.CreateVolume(ctx, s); err != nil {
			return nil, fmt.Errorf("create volume %s: %w", s.Name, err)
		}
	}
	lin, err := linearOver(ctx, bed, bed.RawSSD(), "rawlin")
	if err != nil {
		return nil, err
	}
	rep.targets = []target{
		{"raw", "(a) raw SSD", bed.RawSSD()},
		{"lin", "(a′) raw SSD via one dm-linear", lin},
		{"bare", "(b) bare RAID10 (passthrough volume)", devs["bare"]},
		{"wb", "(c) cached: write tier", devs["wb"]},
		{"wbr", "(d) cached: write tier + warm read tier", devs["wbr"]},
	}
	rep.workloads = workloads()

	p.Step("warming the read tier of wbr on its %s read set…", testbed.FormatBytes(readRegion))
	warm := testbed.Job{Name: "warm", Device: devs["wbr"], RW: "randread", IODepth: 16, Offset: readOffset, Size: readRegion}
	if _, err := bed.WarmReadCache(ctx, "wbr", warm, 4*time.Second, time.Minute); err != nil {
		return nil, err
	}

	var devices []string
	for _, t := range rep.targets {
		devices = append(devices, t.dev)
	}
	rep.results = map[string]map[string]testbed.InterleavedResult{}
	for _, w := range rep.workloads {
		p.Step("fio %s on %d devices, %d × %v slices each (%v)…", w.label, len(devices), o.slices, o.slice,
			time.Duration(o.slices*len(devices))*o.slice)
		res, err := bed.Interleaved(ctx, w.job, devices, o.slices, o.slice)
		if err != nil {
			return nil, err
		}
		rep.results[w.key] = map[string]testbed.InterleavedResult{}
		for i, t := range rep.targets {
			rep.results[w.key][t.key] = res[i]
			c := res[i].Merged.Commit()
			p.Step("  %-40s %8s IOPS  mean %8s  p99 %8s", t.label,
				testbed.FormatIOPS(c.IOPS), testbed.FormatLatency(c.Mean), testbed.FormatLatency(c.P99()))
		}
	}

	for _, name := range []string{"wb", "wbr"} {
		v, err := bed.Volume(ctx, name)
		if err != nil {
			return nil, err
		}
		rep.volumes = append(rep.volumes, v)
	}
	p.Step("counting the I/O each write costs (block-layer counters around short runs)…")
	if rep.accounting, err = account(ctx, bed, rep.targets); err != nil {
		return nil, err
	}
	p.Step("done in %v", p.Elapsed().Round(time.Second))
	rep.elapsed = p.Elapsed()
	return rep, nil
}

// workloads are the jobs of the benchmark: 4 KiB random writes at QD1 with
// each durability semantics, then 4 KiB random reads at QD1 and QD16.
func workloads() []workload {
	write := func(name string, d testbed.Durability, off, size int64) testbed.Job {
		return testbed.Job{Name: name, RW: "randwrite", IODepth: 1, Writes: d, Offset: off, Size: size}
	}
	read := func(name string, qd int) testbed.Job {
		return testbed.Job{Name: name, RW: "randread", IODepth: qd, Offset: readOffset, Size: readRegion}
	}
	fresh := write("write-fsync-new", testbed.Fsync, freshOffset, freshRegion)
	fresh.SplitRegion = true
	return []workload{
		{"write-direct", "4k randwrite QD1 O_DIRECT", write("write-direct", testbed.Direct, rewriteOffset, rewriteRegion)},
		{"write-dsync", "4k randwrite QD1 O_DIRECT|O_SYNC", write("write-dsync", testbed.DSync, rewriteOffset, rewriteRegion)},
		{"write-fsync", "4k randwrite QD1 O_DIRECT + fsync, rewrites", write("write-fsync", testbed.Fsync, rewriteOffset, rewriteRegion)},
		{"write-fsync-new", "4k randwrite QD1 O_DIRECT + fsync, first writes", fresh},
		{"read-qd1", "4k randread QD1", read("read-qd1", 1)},
		{"read-qd16", "4k randread QD16", read("read-qd16", 16)},
	}
}

// linearOver creates a dm-linear device spanning dev and returns its path.
func linearOver(ctx context.Context, bed *testbed.Bed, dev, name string) (string, error) {
	out, err := bed.Run(ctx, "blockdev", "--getsz", dev)
	if err != nil {
		return "", err
	}
	table := fmt.Sprintf("0 %s linear %s 0", strings.TrimSpace(out), dev)
	if _, err := bed.Run(ctx, "dmsetup", "create", name, "--table", table); err != nil {
		return "", err
	}
	return "/dev/mapper/" + name, nil
}

// accountRow is what one application write cost on the SSD below it.
type accountRow struct {
	target    target
	what      string
	appWrites uint64 // writes fio completed
	ssd       testbed.DiskStats
	wcFlushes uint64 // dm-writecache's flush counter (REQ_PREFLUSH seen)
}

// account runs short QD1 write jobs on the raw SSD and the two cached
// volumes and reads the SSD's block-layer counters before and after: how
// many requests reach the SSD per application write is the cost a write
// cache adds, independent of how fast this VM is. Last, it puts ext4 on
// the write-tier volume and measures O_DSYNC overwrites of a file, which
// the filesystem sends as FUA writes without a flush.
func account(ctx context.Context, bed *testbed.Bed, targets []target) ([]accountRow, error) {
	const runtime = 4 * time.Second
	cases := []struct {
		what string
		job  testbed.Job
	}{
		{"O_DIRECT, rewrites", testbed.Job{Writes: testbed.Direct, Offset: rewriteOffset, Size: rewriteRegion}},
		{"O_DIRECT|O_SYNC, rewrites", testbed.Job{Writes: testbed.DSync, Offset: rewriteOffset, Size: rewriteRegion}},
		{"O_DIRECT + fsync, rewrites", testbed.Job{Writes: testbed.Fsync, Offset: rewriteOffset, Size: rewriteRegion}},
		{"O_DIRECT + fsync, first writes", testbed.Job{Writes: testbed.Fsync, Offset: acctOffset, Size: acctRegion}},
	}
	var rows []accountRow
	for _, t := range targets {
		if t.key != "raw" && t.key != "wb" && t.key != "wbr" {
			continue
		}
		ssd := bed.SSD()
		if t.key == "raw" {
			ssd = bed.RawSSD()
		}
		for _, c := range cases {
			job := c.job
			job.Name, job.Device, job.RW, job.Runtime = "account", t.dev, "randwrite", runtime
			row, err := measure(ctx, bed, t, c.what, ssd, job)
			if err != nil {
				return nil, err
			}
			rows = append(rows, row)
		}
	}

	// ext4 on the write-tier volume (its raw measurements are done).
	var wb target
	for _, t := range targets {
		if t.key == "wb" {
			wb = t
		}
	}
	const mnt, file = "/mnt/tc-bench", "/mnt/tc-bench/data"
	for _, argv := range [][]string{
		{"mkfs.ext4", "-q", "-F", wb.dev},
		{"mkdir", "-p", mnt},
		{"mount", wb.dev, mnt},
		{"dd", "if=/dev/zero", "of=" + file, "bs=1M", "count=32", "oflag=direct", "status=none"},
		{"sync"},
	} {
		if _, err := bed.Run(ctx, argv...); err != nil {
			return nil, fmt.Errorf("ext4 on %s: %w", wb.dev, err)
		}
	}
	job := testbed.Job{Name: "account", Device: file, RW: "randwrite", Writes: testbed.DataSync, Size: 32 << 20, Runtime: runtime}
	row, err := measure(ctx, bed, wb, "O_DIRECT|O_DSYNC, rewrites of a file on ext4", bed.SSD(), job)
	if err != nil {
		return nil, err
	}
	if _, err := bed.Run(ctx, "umount", mnt); err != nil {
		return nil, err
	}
	return append(rows, row), nil
}

// measure runs job and counts what reached ssd meanwhile.
func measure(ctx context.Context, bed *testbed.Bed, t target, what, ssd string, job testbed.Job) (accountRow, error) {
	before, err := bed.DiskStats(ctx, ssd)
	if err != nil {
		return accountRow{}, err
	}
	wcBefore, err := writecacheFlushes(ctx, bed, t.key)
	if err != nil {
		return accountRow{}, err
	}
	r, err := bed.Fio(ctx, job)
	if err != nil {
		return accountRow{}, err
	}
	after, err := bed.DiskStats(ctx, ssd)
	if err != nil {
		return accountRow{}, err
	}
	wcAfter, err := writecacheFlushes(ctx, bed, t.key)
	if err != nil {
		return accountRow{}, err
	}
	return accountRow{target: t, what: what, appWrites: r.Write.IOs, ssd: after.Sub(before), wcFlushes: wcAfter - wcBefore}, nil
}

// writecacheFlushes reads a volume's dm-writecache flush counter; 0 for
// devices that are not volumes.
func writecacheFlushes(ctx context.Context, bed *testbed.Bed, key string) (uint64, error) {
	if key != "wb" && key != "wbr" {
		return 0, nil
	}
	v, err := bed.Volume(ctx, key)
	if err != nil {
		return 0, err
	}
	if v.WriteCache == nil {
		return 0, fmt.Errorf("volume %s has no write cache status", key)
	}
	return v.WriteCache.Flushes, nil
}

// hostInfo describes the host for the report: CPU model and count, qemu.
func hostInfo() string {
	cpu := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.TrimSpace(v)
				break
			}
		}
	}
	return fmt.Sprintf("%s, %d CPUs", cpu, goruntime.NumCPU())
}

// qemuVersion is the first line of `qemu-system-x86_64 --version`.
func qemuVersion(ctx context.Context) string {
	out, err := exec.CommandContext(ctx, "qemu-system-x86_64", "--version").Output()
	if err != nil {
		return "qemu (version unknown)"
	}
	line, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(line)
}
