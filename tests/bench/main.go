// SPDX-License-Identifier: Apache-2.0

// Command bench is `make bench`: in one VM run (tests/testbed), on the
// same disk images, it sets up and measures
//
//  1. the bare HDD RAID10 (md RAID10 over four emulated 7,200 rpm disks):
//     the floor;
//  2. the SSD alone: the physical limit;
//  3. tidecache write-back with the write tier only, and with the read
//     tier;
//  4. the caches users would deploy instead, each as its documentation
//     sets it up: bcache in writeback mode, lvmcache (dm-cache,
//     --cachemode writeback) and lvm writecache (dm-writecache);
//
// with the enterprise fio profiles (4k random read and write, 8k 70/30,
// 128k sequential read and write, file-server and web-server mixes) at QD1
// and QD16 on a warm working set, and MariaDB + sysbench oltp_read_write
// with the datadir on ext4 on each system. With -variants it also builds
// tc-wb-old, tidecache's stack before the fuaflush target (a yardstick
// for what durable FUA writes cost), and on the SSD alone and tidecache
// it measures asynchronous O_DSYNC 4k random writes (FUA writes without a
// flush) against plain ones (fua.go). It reports absolute figures and
// ratios to the SSD alone and to the bare RAID10 measured in the same run,
// as markdown with PNG charts.
//
// Under TCG, and with other VMs sharing the host, a run's speed swings by
// tens of percent within a minute: each fio workload is one fio process
// that cycles through the systems in short time slices
// (testbed.Interleaved), so that every system is measured under the same
// conditions, and each ratio is the median of the per-slice ratios.
//
//	go run ./tests/bench [-quick] [-out docs/benchmarks.md] [-charts docs/bench] [-keep]
//
// Progress goes to stderr, the markdown report to stdout and, with -out,
// to a file, which it replaces. It is a benchmark, not a test: it fails
// only when something could not be measured, never on the numbers.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	goruntime "runtime"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/tidecache/tidecache/tests/testbed"
	"github.com/tidecache/tidecache/tests/vm/harness"
)

type options struct {
	quick         bool
	slice         time.Duration
	slices        int
	warmStep      time.Duration
	warmBudget    time.Duration
	db            dbOptions
	accounting    bool
	variants      bool
	skipFio       bool     // database benchmark only
	only          []string // system keys to measure; empty: all
	workloads     []string // fio workload keys to run; empty: all
	dbLinear      bool     // also run the database on SSD+linear
	replica       bool     // the replicated run (replica.go) instead
	pressure      bool     // the pressure run (pressure.go) instead
	press         pressureProfile
	pressTargeted bool // flags that make bench does not give: the report names them
	// writecacheKO is a dm-writecache module to load in the guest in
	// place of the kernel's (pressure run): a proposed kernel change
	// measured on the same model (docs/upstream).
	writecacheKO  string
	out           string
	charts        string
	keep          bool
	hddWriteCache bool
	ssdWriteCache bool
}

// defaults returns the run lengths of the full run or, with quick, of the
// short one (under 15 minutes; the full run is under 60).
func defaults(quick bool) options {
	if quick {
		return options{quick: true, slice: 2 * time.Second, slices: 1, warmStep: 4 * time.Second, warmBudget: 30 * time.Second,
			db: dbOptions{rounds: 1, cacheWarm: 10 * time.Second, warm: 5 * time.Second, time: 15 * time.Second}}
	}
	return options{slice: 3 * time.Second, slices: 3, warmStep: 5 * time.Second, warmBudget: 90 * time.Second,
		db:         dbOptions{rounds: 2, cacheWarm: 20 * time.Second, warm: 10 * time.Second, time: 40 * time.Second},
		accounting: true, variants: true}
}

func main() {
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if o.pressure {
		rep, err := runPressure(ctx, o)
		if err == nil {
			err = publishPressure(rep, o)
		}
		if err == nil {
			err = rep.failed()
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "\nbench failed: %v\n", err)
			os.Exit(1)
		}
		return
	}
	rep, err := run(ctx, o)
	if err != nil {
		fmt.Fprintf(os.Stderr, "\nbench failed: %v\n", err)
		os.Exit(1)
	}
	if err := publish(rep, o); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
}

// parseFlags reads the command line: -quick picks the short defaults, and
// any other flag given explicitly overrides them.
func parseFlags(args []string) (options, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	var f options
	full := defaults(false)
	fs.BoolVar(&f.quick, "quick", false, "short profile: one slice per system and workload, one short MariaDB round, no accounting (under 15 minutes)")
	fs.DurationVar(&f.slice, "slice", full.slice, "length of one time slice of one system (whole seconds; -quick: 2s)")
	fs.IntVar(&f.slices, "slices", full.slices, "time slices per system and workload (-quick: 1)")
	fs.IntVar(&f.db.rounds, "db-rounds", full.db.rounds, "MariaDB rounds over all systems, 0 to skip MariaDB (-quick: 1)")
	fs.DurationVar(&f.db.time, "db-time", full.db.time, "measured sysbench time per system and round (-quick: 15s)")
	fs.DurationVar(&f.db.warm, "db-warm", full.db.warm, "sysbench warm-up before each measurement (-quick: 5s)")
	fs.DurationVar(&f.db.cacheWarm, "db-cache-warm", full.db.cacheWarm, "random reads over the datadir before the server starts, 0 for none (-quick: 10s)")
	fs.BoolVar(&f.accounting, "accounting", full.accounting, "also count the SSD I/O per application write on the raw SSD and tidecache (-quick: off)")
	fs.BoolVar(&f.variants, "variants", full.variants, "also measure tidecache with the tunings under test and tc-wb-old, the stack before fuaflush (a yardstick; -quick: off)")
	fs.BoolVar(&f.skipFio, "skip-fio", false, "skip the fio profiles (and their warm-up and the accounting): the database benchmark only")
	fs.BoolVar(&f.replica, "replica", false, "the replicated run instead: two more VMs as peers, tidecache with the write cache mirrored to one of them, and on both from a pool without SSDs, over NVMe/TCP, against the same cache unmirrored, and planned moves (docs/benchmarks-replica.md)")
	fs.BoolVar(&f.pressure, "pressure", false, "the pressure run instead: every system with a working set 4× its cache, driven past the point where the write cache is full, on each HDD scheduler (docs/benchmarks-pressure.md)")
	scheds := fs.String("schedulers", "", "pressure run: comma-separated HDD schedulers to run on, mq-deadline and/or none (default: both; -quick: mq-deadline)")
	phaseScale := fs.Float64("phase-scale", 1, "pressure run: multiply every phase's length by this (e.g. 0.25 for a smoke test; the figures then mean little)")
	dbRows := fs.Int("pressure-db-rows", 0, "pressure run: rows per sysbench table (default 56000: tables over 2.5x each system's cache; smaller for a smoke test)")
	pressDB := fs.Bool("pressure-db", false, "pressure run: also run MariaDB under pressure (default: on in the full run, off with -quick)")
	fs.BoolVar(&f.dbLinear, "db-linear", false, "also run the database benchmark on SSD+linear: what one device-mapper layer costs MariaDB")
	wl := fs.String("workloads", "", "comma-separated fio workload keys to run (e.g. rw4k-qd1,rw4k-qd16; default: all fourteen)")
	only := fs.String("only", "", "comma-separated system keys to measure (e.g. SSD,SSD+linear,tc-wbr); the others are still built")
	var tunes []string
	fs.Func("pressure-tune", "pressure run: also measure a variant of tc-wb, NAME=FLAGS for tidectl volume tune (e.g. 'tc-wb-lw0=--low-watermark 0'); repeat for more", func(v string) error {
		tunes = append(tunes, v)
		return nil
	})
	fs.StringVar(&f.writecacheKO, "writecache-ko", "", "pressure run: a dm-writecache.ko built for the guest kernel, loaded in place of the kernel's, to measure a proposed change (docs/upstream/writeback-pause-on-reads.md)")
	fs.StringVar(&f.out, "out", "", "also write the report to this file, replacing it (e.g. docs/benchmarks.md)")
	fs.StringVar(&f.charts, "charts", "", "write the PNG charts to this directory (default: bench/ beside -out)")
	fs.BoolVar(&f.keep, "keep", false, "keep the disk images (under .cache/vm/bench) after the run")
	fs.BoolVar(&f.hddWriteCache, "hdd-write-cache", false, "emulate HDDs with their volatile write cache on (flushes cost as much as writes)")
	fs.BoolVar(&f.ssdWriteCache, "ssd-write-cache", false, "emulate SSDs with a volatile write cache (consumer drives) instead of power-loss protection")
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	o := defaults(f.quick)
	o.out, o.charts, o.keep, o.hddWriteCache, o.ssdWriteCache = f.out, f.charts, f.keep, f.hddWriteCache, f.ssdWriteCache
	o.skipFio, o.dbLinear, o.replica, o.pressure = f.skipFio, f.dbLinear, f.replica, f.pressure
	if f.writecacheKO != "" {
		if !o.pressure {
			return options{}, fmt.Errorf("-writecache-ko belongs to the pressure run: give -pressure too")
		}
		ko, err := filepath.Abs(f.writecacheKO)
		if err != nil {
			return options{}, err
		}
		if _, err := os.Stat(ko); err != nil {
			return options{}, fmt.Errorf("-writecache-ko: %w", err)
		}
		o.writecacheKO = ko
	}
	o.press = pressureDefaults(o.quick)
	if o.pressure && o.replica {
		return options{}, fmt.Errorf("-pressure and -replica are two runs: give one")
	}
	if o.replica {
		// Two systems to compare, on their own partitions: the accounting
		// and the tuning variants belong to the main run.
		o.accounting, o.variants = false, false
	}
	if *only != "" {
		o.only = strings.Split(*only, ",")
	}
	if *wl != "" {
		o.workloads = strings.Split(*wl, ",")
		if _, err := selectWorkloads(workloads(), o.workloads); err != nil {
			return options{}, err
		}
	}
	fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "slice":
			o.slice = f.slice
		case "slices":
			o.slices = f.slices
		case "db-rounds":
			o.db.rounds = f.db.rounds
		case "db-time":
			o.db.time = f.db.time
		case "db-warm":
			o.db.warm = f.db.warm
		case "db-cache-warm":
			o.db.cacheWarm = f.db.cacheWarm
		case "accounting":
			o.accounting = f.accounting
		case "variants":
			o.variants = f.variants
		case "schedulers":
			o.press.schedulers = strings.Split(*scheds, ",")
			o.pressTargeted = true
		case "phase-scale", "only", "pressure-db-rows", "writecache-ko", "pressure-tune":
			o.pressTargeted = true
		case "pressure-db":
			o.pressTargeted = true
			if *pressDB && o.press.db.rounds == 0 {
				o.press.db = pressureDBDefaults()
			} else if !*pressDB {
				o.press.db.rounds = 0
			}
		}
	})
	if o.pressure {
		if *phaseScale <= 0 || *phaseScale > 10 {
			return options{}, fmt.Errorf("-phase-scale %v: want more than 0, at most 10", *phaseScale)
		}
		o.press = o.press.scaled(*phaseScale)
		if *dbRows < 0 {
			return options{}, fmt.Errorf("-pressure-db-rows %d: want a positive count", *dbRows)
		}
		if *dbRows > 0 {
			o.press.db.rows = *dbRows
		}
		for _, v := range tunes {
			t, err := parsePressureTune(v, o.press)
			if err != nil {
				return options{}, err
			}
			o.press.tunes = append(o.press.tunes, t)
		}
		if o.charts == "" && o.out != "" {
			o.charts = filepath.Join(filepath.Dir(o.out), "bench-pressure")
		}
		for _, s := range o.press.schedulers {
			if s != testbed.SchedDeadline && s != testbed.SchedNone {
				return options{}, fmt.Errorf("-schedulers: %q: want %s or %s", s, testbed.SchedDeadline, testbed.SchedNone)
			}
		}
		return o, nil
	}
	if o.charts == "" && o.out != "" && !o.replica {
		o.charts = filepath.Join(filepath.Dir(o.out), "bench")
	}
	return o, o.validate()
}

func (o options) validate() error {
	if o.slice < time.Second || o.slice%time.Second != 0 || o.slices < 1 {
		return fmt.Errorf("-slice wants whole seconds (at least 1s) and -slices at least 1")
	}
	if o.replica && (len(o.only) > 0 || o.dbLinear) {
		return fmt.Errorf("-replica measures its own systems: -only and -db-linear do not apply")
	}
	if o.skipFio && o.db.rounds == 0 {
		return fmt.Errorf("-skip-fio with -db-rounds 0 measures nothing")
	}
	if o.db.rounds < 0 || o.db.time < time.Second || o.db.time%time.Second != 0 || o.db.warm%time.Second != 0 ||
		o.db.cacheWarm < 0 || o.db.cacheWarm%time.Second != 0 {
		return fmt.Errorf("-db-rounds wants 0 or more, -db-time, -db-warm and -db-cache-warm whole seconds (-db-time at least 1s)")
	}
	return nil
}

// publishPressure writes the pressure run's charts and report.
func publishPressure(rep *pressureReport, o options) error {
	charts := map[string][]chartFile{}
	if o.charts != "" {
		var err error
		if charts, err = rep.writeCharts(o.charts); err != nil {
			return err
		}
		for _, cs := range charts {
			for _, c := range cs {
				fmt.Fprintf(os.Stderr, "bench: wrote %s\n", c.path)
			}
		}
	}
	var doc strings.Builder
	if err := rep.write(&doc, charts, o.out); err != nil {
		return err
	}
	fmt.Print(doc.String())
	if o.out != "" {
		if err := os.WriteFile(o.out, []byte(doc.String()), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "bench: wrote %s\n", o.out)
	}
	return nil
}

// publish writes the charts and the report.
func publish(rep *report, o options) error {
	var charts []chartFile
	if o.charts != "" {
		var err error
		if charts, err = rep.writeCharts(o.charts); err != nil {
			return err
		}
		for _, c := range charts {
			fmt.Fprintf(os.Stderr, "bench: wrote %s\n", c.path)
		}
	}
	var doc strings.Builder
	write := func() error { return rep.write(&doc, charts, o.out) }
	if o.replica {
		write = func() error { return rep.writeReplica(&doc) }
	}
	if err := write(); err != nil {
		return err
	}
	fmt.Print(doc.String())
	if o.out != "" {
		if err := os.WriteFile(o.out, []byte(doc.String()), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "bench: wrote %s\n", o.out)
	}
	return nil
}

func run(ctx context.Context, o options) (_ *report, err error) {
	p := testbed.NewProgress(os.Stderr)
	hdd := testbed.Nearline7200()
	hdd.WriteCache = o.hddWriteCache
	cfg := testbed.Config{
		Name: "bench", HDD: hdd, HDDSize: hddBytes, SSDSize: ssdBytes, RawSSDSize: rawSSDBytes,
		SSDWriteCache: o.ssdWriteCache, MemoryMiB: 3072, Keep: o.keep, Progress: p,
	}
	var hub string
	if o.replica {
		// The bench VM leaves the peer VMs memory and listens for them
		// on a virtual hub.
		if hub, err = freeHub(); err != nil {
			return nil, err
		}
		cfg.MemoryMiB = 2048
		cfg.Network = &harness.Network{Addr: benchAddr + "/24", Listen: hub}
	}
	bed, err := testbed.Start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer bed.Finish(ctx, &err)

	rep := &report{opts: o, cfg: bed.Config(), kernel: bed.Kernel(), date: time.Now()}
	if rep.workloads, err = selectWorkloads(workloads(), o.workloads); err != nil {
		return nil, err
	}
	if o.skipFio || o.dbLinear || len(o.only) > 0 || len(o.workloads) > 0 {
		rep.args = os.Args[1:]
	}
	if rep.fio, err = bed.Run(ctx, "fio", "--version"); err != nil {
		return nil, err
	}
	rep.fio = strings.TrimSpace(rep.fio)
	rep.host = hostInfo()
	rep.qemu = qemuVersion(ctx)

	var peers []*peerVM
	if o.replica {
		p.Step("booting the two peer VMs (1 CPU, 768 MiB each) on the bench VM's network…")
		if peers, err = bootPeers(ctx, bed, hub); err != nil {
			return nil, err
		}
		defer func() {
			for _, peer := range peers {
				peer.vm.Kill()
			}
		}()
		if rep.systems, err = setUpReplica(ctx, bed, peers); err != nil {
			return nil, err
		}
	} else {
		if rep.systems, err = setUpSystems(ctx, bed, o.variants); err != nil {
			return nil, err
		}
		if rep.systems, err = selectSystems(rep.systems, o); err != nil {
			return nil, err
		}
	}
	if o.db.rounds > 0 {
		p.Step("MariaDB: making the sysbench tables (%d × %d rows) in guest RAM…", sbTables, sbTableSize)
		if rep.database, err = prepareTemplate(ctx, bed); err != nil {
			return nil, err
		}
	}

	if !o.skipFio {
		if err := fioBench(ctx, bed, rep, o); err != nil {
			return nil, err
		}
	}
	for _, s := range rep.systems {
		if s.retire != nil {
			if err := s.retire(ctx); err != nil {
				return nil, fmt.Errorf("retire %s: %w", s.key, err)
			}
		}
	}
	if o.db.rounds > 0 {
		if rep.db, err = databaseBench(ctx, bed, rep.systems, o.db); err != nil {
			return nil, err
		}
	}
	if peers != nil {
		if rep.replica, err = measureResync(ctx, bed, peers[0]); err != nil {
			return nil, err
		}
		if rep.replica.moves, err = measureMoves(ctx, bed, peers); err != nil {
			return nil, err
		}
	}
	p.Step("done in %v", p.Elapsed().Round(time.Second))
	rep.elapsed = p.Elapsed()
	return rep, nil
}

// selectSystems keeps the systems -only names (all without it), and
// includes SSD+linear in the database benchmark with -db-linear. The
// references the ratios need, SSD and RAID10, must stay.
func selectSystems(all []*system, o options) ([]*system, error) {
	keep := map[string]bool{}
	for _, k := range o.only {
		keep[strings.TrimSpace(k)] = true
	}
	var out []*system
	found := map[string]bool{}
	for _, s := range all {
		if len(keep) == 0 || keep[s.key] {
			if s.key == "SSD+linear" && o.dbLinear {
				s.fioOnly = false
			}
			out = append(out, s)
			found[s.key] = true
		}
	}
	var unknown []string
	for k := range keep {
		if !found[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return nil, fmt.Errorf("-only: no system %s (see the set-up table of docs/benchmarks.md for the keys)", strings.Join(unknown, ", "))
	}
	for _, need := range []string{keySSD, keyRAID10} {
		found := false
		for _, s := range out {
			found = found || s.key == need
		}
		if !found {
			return nil, fmt.Errorf("-only must keep %s: the report's ratios are to SSD alone and to bare RAID10", need)
		}
	}
	return out, nil
}

// selectWorkloads keeps the workloads keys names, in their usual order
// (all without keys).
func selectWorkloads(all []workload, keys []string) ([]workload, error) {
	if len(keys) == 0 {
		return all, nil
	}
	want := map[string]bool{}
	for _, k := range keys {
		want[strings.TrimSpace(k)] = true
	}
	var out []workload
	for _, w := range all {
		if want[w.key] {
			out = append(out, w)
			delete(want, w.key)
		}
	}
	if len(want) > 0 {
		var unknown []string
		for k := range want {
			unknown = append(unknown, k)
		}
		sort.Strings(unknown)
		return nil, fmt.Errorf("-workloads: no workload %s (keys: the profile, rr4k, sr128k, web, mix8k, file, rw4k or sw128k, then -qd1 or -qd%d)",
			strings.Join(unknown, ", "), deepQueue)
	}
	return out, nil
}

// fioBench is the warm-up, the fio profiles and the accounting.
func fioBench(ctx context.Context, bed *testbed.Bed, rep *report, o options) error {
	p := bed.Progress()
	var err error
	p.Step("warm-up: writing the %s write set, reading the %s read set until the read caches serve it…",
		testbed.FormatBytes(writeSet), testbed.FormatBytes(readSet))
	if rep.warm, err = warmUp(ctx, bed, rep.systems, o.warmStep, o.warmBudget); err != nil {
		return err
	}

	var devices []string
	for _, s := range rep.systems {
		devices = append(devices, s.dev)
	}
	rep.results = map[string]map[string]testbed.InterleavedResult{}
	for i, w := range rep.workloads {
		p.Step("fio %d/%d %s on %d systems, %d × %v slices each…", i+1, len(rep.workloads), w.label, len(devices), o.slices, o.slice)
		res, err := bed.Interleaved(ctx, w.job, devices, o.slices, o.slice)
		if err != nil {
			return err
		}
		rep.results[w.key] = map[string]testbed.InterleavedResult{}
		for i, s := range rep.systems {
			rep.results[w.key][s.key] = res[i]
		}
		for _, s := range rep.systems {
			st := rep.stats(w.key, s.key)
			p.Step("  %-9s %9s IOPS %9s/s  mean %8s  p99 %8s  %s SSD", s.key, testbed.FormatIOPS(st.IOPS),
				testbed.FormatBytes(int64(st.BytesPerSec)), testbed.FormatLatency(st.Mean), testbed.FormatLatency(st.P99()),
				testbed.FormatRatio(rep.ratio(w.key, s.key, keySSD)))
		}
	}
	if err := fuaBench(ctx, bed, rep, o); err != nil {
		return err
	}
	for _, s := range rep.systems {
		if strings.HasPrefix(s.key, "tc-") {
			v, err := bed.Volume(ctx, s.key)
			if err != nil {
				return err
			}
			rep.volumes = append(rep.volumes, v)
		}
	}
	if o.accounting {
		p.Step("counting the I/O each write costs (block-layer counters around short runs)…")
		if rep.accounting, err = account(ctx, bed, rep.systems); err != nil {
			return err
		}
	}
	return nil
}

// hostInfo describes the host for the report: CPU model and count.
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
