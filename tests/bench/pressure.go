// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tidecache/tidecache/pkg/dm"
	"github.com/tidecache/tidecache/tests/testbed"
)

// The pressure run (`go run ./tests/bench -pressure`, part of make bench):
// every system with a working set four times its cache, cold on the HDDs,
// driven past the point where its write cache is full. On each system, on
// a fresh volume and without a pause between phases:
//
//  1. 4k random writes (QD16) over the whole volume for several times the
//     time the write cache takes to fill;
//  2. an 8k 70/30 random read/write mix;
//  3. 4k random reads;
//  4. a short burst of 4k random writes, which fills the write cache again
//     (the mix and the reads let it write back down to its low watermark);
//  5. nothing: the idle volume, while the cache writes back what the burst
//     left (how fast it drains when nobody needs the HDDs);
//  6. a bulk load: twice the cache's size written sequentially in 1 MiB
//     writes, as a restore or a batch import writes;
//  7. the 70/30 mix again, right after it (the OLTP work that follows);
//
// then the cache is flushed, so that the next system finds the HDDs idle.
// Each phase logs its IOPS second by second; a sampler reads the cache's
// state every second beside it. The systems share the HDD RAID10 and the
// SSD, on partitions (systems.go), and run one after the other. The whole
// run is repeated on a fresh VM per HDD scheduler (mq-deadline, none).

// pressureProfile sizes a pressure run.
type pressureProfile struct {
	cache  int64 // each system's SSD cache; tc-wbr splits it between its tiers
	volume int64 // the working set: the fio phases cover the device's first volume bytes
	device int64 // each system's device, room for the database part too
	// Phase lengths; idle is the longest an idle drain is watched.
	write, mix, read, burst, idle, oltp time.Duration
	schedulers                          []string
	db                                  pressureDBProfile
	// tunes are more variants of tc-wb to measure beside it, each with
	// its own volume tune flags (-pressure-tune).
	tunes []pressureTune
}

// pressureTune is a variant of tc-wb the pressure run measures beside it:
// the same volume, then tidectl volume tune with args.
type pressureTune struct {
	name string
	args []string
}

// parsePressureTune reads -pressure-tune's NAME=FLAGS: a system key that
// no system of pp's run has (setUpPressureSystems' references and peers,
// the tidecache volumes and the tunes before it) and tidectl volume tune
// flags, e.g. "tc-wb-lw0=--low-watermark 0".
func parsePressureTune(v string, pp pressureProfile) (pressureTune, error) {
	taken := []string{keySSD, keyRAID10, keyLVMWritecache, keyLVMCache, keyBcache}
	for _, vol := range tidecachePressureVolumes(pp) {
		taken = append(taken, vol.name)
	}
	name, flags, ok := strings.Cut(v, "=")
	args := strings.Fields(flags)
	if !ok || name == "" || strings.ContainsAny(name, " ,") || len(args) == 0 {
		return pressureTune{}, fmt.Errorf("-pressure-tune %q: want NAME=FLAGS, e.g. tc-wb-lw0=--low-watermark 0", v)
	}
	if slices.Contains(taken, name) {
		return pressureTune{}, fmt.Errorf("-pressure-tune %q: system %s exists already", v, name)
	}
	return pressureTune{name: name, args: args}, nil
}

// pressureDefaults are the full run's lengths or, with quick, the short
// run's. Both give every system a 64 MiB cache and a 256 MiB device: the
// cache fills in 10-25 s under TCG, and the write phase lasts three to
// four times that; the full run has longer phases, both schedulers and
// MariaDB.
func pressureDefaults(quick bool) pressureProfile {
	if quick {
		return pressureProfile{cache: 64 << 20, volume: 256 << 20, device: 512 << 20,
			write: 60 * time.Second, mix: 25 * time.Second, read: 15 * time.Second, burst: 12 * time.Second,
			idle: 45 * time.Second, oltp: 15 * time.Second,
			schedulers: []string{testbed.SchedDeadline}}
	}
	return pressureProfile{cache: 64 << 20, volume: 256 << 20, device: 512 << 20,
		write: 90 * time.Second, mix: 35 * time.Second, read: 20 * time.Second, burst: 15 * time.Second,
		idle: 60 * time.Second, oltp: 25 * time.Second,
		schedulers: []string{testbed.SchedDeadline, testbed.SchedNone},
		db:         pressureDBDefaults()}
}

// scaled multiplies every phase's length by f, to whole seconds (at least
// one).
func (pp pressureProfile) scaled(f float64) pressureProfile {
	if f == 1 {
		return pp
	}
	for _, d := range []*time.Duration{&pp.write, &pp.mix, &pp.read, &pp.burst, &pp.idle, &pp.oltp, &pp.db.time, &pp.db.warm} {
		*d = max(time.Duration(float64(*d)*f).Round(time.Second), time.Second)
	}
	return pp
}

// Keys of the pressure phases, in run order.
const (
	phWrite = "write"
	phMix   = "mix"
	phRead  = "read"
	phBurst = "burst"
	phBulk  = "bulk"
	phOLTP  = "oltp"
)

// pressurePhase is one fio phase of the run.
type pressurePhase struct {
	key, label string
	job        testbed.Job
}

// phases are the fio phases on a device, in run order; the idle drain
// sits between burst and bulk.
func (pp pressureProfile) phases(dev string) []pressurePhase {
	mix := func(name string, d time.Duration) testbed.Job {
		return testbed.Job{Name: name, Device: dev, RW: "randrw", RWMixRead: 70, BlockSize: 8192, IODepth: deepQueue, Size: pp.volume, Runtime: d}
	}
	return []pressurePhase{
		{key: phWrite, label: "4k random write QD16", job: testbed.Job{Name: phWrite, Device: dev, RW: "randwrite", BlockSize: 4096,
			IODepth: deepQueue, Size: pp.volume, Runtime: pp.write}},
		{key: phMix, label: "8k random 70/30 read/write QD16", job: mix(phMix, pp.mix)},
		{key: phRead, label: "4k random read QD16", job: testbed.Job{Name: phRead, Device: dev, RW: "randread", BlockSize: 4096,
			IODepth: deepQueue, Size: pp.volume, Runtime: pp.read}},
		{key: phBurst, label: "4k random write QD16, a burst that fills the write cache again", job: testbed.Job{Name: phBurst, Device: dev,
			RW: "randwrite", BlockSize: 4096, IODepth: deepQueue, Size: pp.volume, Runtime: pp.burst}},
		{key: phBulk, label: fmt.Sprintf("bulk load: %s sequential in 1 MiB writes QD4", testbed.FormatBytes(2*pp.cache)),
			job: fillOnce(testbed.Job{Name: phBulk, Device: dev, RW: "write", BlockSize: 1 << 20, IODepth: 4, Size: 2 * pp.cache})},
		{key: phOLTP, label: "8k random 70/30 read/write QD16 after the bulk load", job: mix(phOLTP, pp.oltp)},
	}
}

// pressureSystem is a system of the pressure run: the common description
// and how to read its cache.
type pressureSystem struct {
	*system
	probe *cacheProbe // nil: nothing caches (SSD alone, bare RAID10)
}

// phaseRun is one phase as one system ran it.
type phaseRun struct {
	res      testbed.Result
	timeline testbed.Timeline
	took     time.Duration // wall time, fio's start to its exit (stalled I/O makes it overrun)
}

// systemRun is everything one system did in the pressure run.
type systemRun struct {
	phases    map[string]*phaseRun
	start     time.Time    // the guest's clock when the write phase began
	states    []cacheState // the cache, about every second, over the whole run
	idleStart time.Time    // guest clock
	idleEnd   time.Time
	flush     time.Duration // the final flush
	flushErr  string
	// wall is how long the system's phases took in all.
	wall time.Duration
}

// schedRun is the pressure run on one HDD scheduler: its own VM.
type schedRun struct {
	sched   string
	cfg     testbed.Config
	queue   testbed.QueueInfo
	systems []*pressureSystem
	runs    map[string]*systemRun
	// writeback says what bounds each write tier's write-back: tidecache's
	// volume show lines, and the tables of the dm-writecache systems.
	writeback map[string]string
	model     modelCheck // one emulated disk, measured before the RAID is built
	db        map[string]*pressureDBRun
	// dbErr is why the database part failed: the fio figures are still
	// published, and the run then fails.
	dbErr   error
	elapsed time.Duration
}

// pressureReport is the whole pressure run.
type pressureReport struct {
	opts              options
	prof              pressureProfile
	date              time.Time
	elapsed           time.Duration
	kernel, fio, host string
	qemu              string
	// writecache says which dm-writecache ran: the kernel's, or the
	// module given with -writecache-ko (its path and a hash of it).
	writecache string
	database   string
	scheds     []*schedRun
	// targeted is a run with flags make bench does not give (-only,
	// -phase-scale, -schedulers…); args are its flags, for the report.
	targeted bool
	args     []string
}

// runPressure is the pressure run: one VM per scheduler.
func runPressure(ctx context.Context, o options) (*pressureReport, error) {
	p := testbed.NewProgress(os.Stderr)
	rep := &pressureReport{opts: o, prof: o.press, date: time.Now(), host: hostInfo(), qemu: qemuVersion(ctx),
		targeted: o.pressTargeted, args: os.Args[1:]}
	for i, sched := range o.press.schedulers {
		p.Step("pressure run %d/%d: HDDs under %s", i+1, len(o.press.schedulers), sched)
		sr, err := runPressureSched(ctx, o, rep, sched, p, i == 0)
		if err != nil {
			return nil, fmt.Errorf("pressure run under %s: %w", sched, err)
		}
		rep.scheds = append(rep.scheds, sr)
	}
	p.Step("done in %v", p.Elapsed().Round(time.Second))
	rep.elapsed = p.Elapsed()
	return rep, nil
}

// runPressureSched boots a VM with the HDDs under sched, builds every
// system and runs the phases on each; with db it also runs the database
// part (the first scheduler's run only).
func runPressureSched(ctx context.Context, o options, rep *pressureReport, sched string, p *testbed.Progress, first bool) (_ *schedRun, err error) {
	start := time.Now()
	pp := o.press
	hdd := testbed.Nearline7200()
	hdd.Scheduler = sched
	cfg := testbed.Config{
		Name: "bench-pressure", HDD: hdd, HDDSize: hddBytes, SSDSize: pressureSSDBytes(pp), RawSSDSize: pp.device,
		MemoryMiB: 3072, Keep: o.keep, Progress: p,
	}
	bed, err := testbed.Start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer bed.Finish(ctx, &err)
	sr := &schedRun{sched: sched, cfg: bed.Config(), runs: map[string]*systemRun{}, writeback: map[string]string{}}
	if rep.kernel == "" {
		rep.kernel = bed.Kernel()
		out, err := bed.Run(ctx, "fio", "--version")
		if err != nil {
			return nil, err
		}
		rep.fio = strings.TrimSpace(out)
	}
	if o.writecacheKO != "" {
		// Before any system exists: nothing holds the kernel's module.
		// An out-of-tree module taints the kernel with O: the one loaded
		// is this one, not the kernel's.
		out, err := bed.Run(ctx, "sh", "-c", "modprobe -r dm-writecache 2>/dev/null; insmod "+o.writecacheKO+
			" && grep -q O /sys/module/dm_writecache/taint && sha256sum "+o.writecacheKO+" | cut -c1-16")
		if err != nil {
			return nil, fmt.Errorf("load %s in the guest: %w", o.writecacheKO, err)
		}
		rep.writecache = fmt.Sprintf("`%s` (sha256 %s…), loaded in place of the kernel's", o.writecacheKO, strings.TrimSpace(out))
		p.Step("dm-writecache: %s", rep.writecache)
	}
	if sr.queue, err = bed.HDDQueue(ctx); err != nil {
		return nil, err
	}
	p.Step("HDD queue in the guest: scheduler %s, %d hardware queue(s) of %d tags, %d requests held, %d segments of at most %d KiB per request",
		sr.queue.Scheduler, sr.queue.HWQueues, sr.queue.Tags, sr.queue.NrRequests, sr.queue.MaxSegments, sr.queue.MaxKiB)
	if sr.model, err = checkModel(ctx, bed); err != nil {
		return nil, err
	}
	if sr.systems, err = setUpPressureSystems(ctx, bed, pp, o.only); err != nil {
		return nil, err
	}
	if err := sr.readWriteback(ctx, bed); err != nil {
		return nil, err
	}
	for i, s := range sr.systems {
		p.Step("[%s] system %d/%d: %s", sched, i+1, len(sr.systems), s.key)
		run, err := runPressureSystem(ctx, bed, s, pp)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.key, err)
		}
		sr.runs[s.key] = run
	}
	if first && pp.db.rounds > 0 {
		if sr.db, rep.database, sr.dbErr = pressureDatabase(ctx, bed, sr.systems, pp); sr.dbErr != nil {
			if ctx.Err() != nil {
				return nil, sr.dbErr
			}
			p.Step("MariaDB part failed, the report says so: %v", sr.dbErr)
		}
	}
	sr.elapsed = time.Since(start)
	return sr, nil
}

// modelCheck is what one emulated HDD does on its own: 4k random reads at
// QD1 (the service time) and at QD32 (the IOPS cap).
type modelCheck struct {
	qd1, deep testbed.Stats
	depth     int
}

// checkModel measures the first emulated HDD before anything is built on
// it: the report shows that the model has the QD1 latency and the IOPS
// cap it claims under this queue and scheduler.
func checkModel(ctx context.Context, bed *testbed.Bed) (modelCheck, error) {
	m := modelCheck{depth: 32}
	dev := bed.HDDs()[0]
	for _, j := range []struct {
		st *testbed.Stats
		qd int
	}{{&m.qd1, 1}, {&m.deep, m.depth}} {
		res, err := bed.Fio(ctx, testbed.Job{Name: fmt.Sprintf("model-qd%d", j.qd), Device: dev, RW: "randread", BlockSize: 4096,
			IODepth: j.qd, Size: 1 << 30, Runtime: 6 * time.Second})
		if err != nil {
			return m, fmt.Errorf("HDD model check: %w", err)
		}
		*j.st = res.Read
	}
	bed.Progress().Step("one emulated HDD: 4k random read QD1 %s IOPS (mean %s), QD%d %s IOPS (mean %s)",
		testbed.FormatIOPS(m.qd1.IOPS), testbed.FormatLatency(m.qd1.Clat.Mean), m.depth,
		testbed.FormatIOPS(m.deep.IOPS), testbed.FormatLatency(m.deep.Clat.Mean))
	return m, nil
}

// pressureSSDBytes is the pool SSD image: the partitions
// setUpPressureSystems makes, and slack for the partition table.
func pressureSSDBytes(pp pressureProfile) int64 {
	mibs := int64(0)
	for _, m := range pressureSSDMiB(pp) {
		mibs += int64(m)
	}
	return (mibs + 16) << 20
}

// pressureSSDMiB are the pool SSD's partitions: tidecache (tc-wb's write
// cache, tc-wbr's two tiers, metadata and superblocks), bcache's cache
// set, and lvm's PV for the two cachevols.
func pressureSSDMiB(pp pressureProfile) []int {
	c := int(pp.cache >> 20)
	return []int{len(tidecachePressureVolumes(pp))*c + 96, c, 2*c + 64}
}

// tidecachePressureVolumes are tc-wb, whose whole cache is its write
// tier, and tc-wbr, whose cache is split between a write and a read tier
// (as in the first measurement: half each), both at tidecache's
// defaults, and tc-wb-norf: tc-wb without the readfirst layer under its
// write tier, which is how every write tier ran before the layer, so the
// run shows what the layer does.
func tidecachePressureVolumes(pp pressureProfile) []tidecacheVolume {
	size, half := mib(pp.device), mib(pp.cache/2)
	vols := []tidecacheVolume{
		{name: keyWB, kind: tidecache, label: "tidecache write-back (write tier: dm-writecache over dm-readfirst)",
			create: []string{"--size", size, "--write-cache", mib(pp.cache)}},
		{name: keyWBR, kind: tidecache, label: "tidecache write-back + read tier (dm-writecache over dm-readfirst over dm-cache), the cache split in half",
			create: []string{"--size", size, "--write-cache", half, "--read-cache", half}},
		{name: "tc-wb-norf", base: keyWB, kind: variant,
			label:  "tc-wb without the readfirst layer (--readfirst-max-hold 0): write-back competes with reads for the HDDs, as before the layer",
			create: []string{"--size", size, "--write-cache", mib(pp.cache)}, tune: []string{"--readfirst-max-hold", "0"}},
	}
	for _, t := range pp.tunes {
		vols = append(vols, tidecacheVolume{name: t.name, base: keyWB, kind: variant,
			label:  "tc-wb tuned with `tidectl volume tune " + strings.Join(t.args, " ") + "`",
			create: []string{"--size", size, "--write-cache", mib(pp.cache)}, tune: t.args})
	}
	return vols
}

// setUpPressureSystems builds the RAID10, the partitions and the systems,
// in report order: SSD alone, bare RAID10, tc-wb, tc-wbr, lvm writecache,
// lvmcache, bcache. only, when set, keeps those systems (and RAID10).
func setUpPressureSystems(ctx context.Context, bed *testbed.Bed, pp pressureProfile, only []string) ([]*pressureSystem, error) {
	p := bed.Progress()
	p.Step("building md RAID10 over %s…", strings.Join(bed.HDDs(), " "))
	args := append([]string{"mdadm", "--create", raidDev, "--run", "--metadata=1.2", "--homehost=any",
		"--name=bench", "--level=10", "--raid-devices=4", "--chunk=512K", "--layout=n2", "--assume-clean"}, bed.HDDs()...)
	if _, err := bed.Run(ctx, args...); err != nil {
		return nil, err
	}
	vol := int(pp.device >> 20)
	vols := tidecachePressureVolumes(pp)
	hdd, err := partitions(ctx, bed, raidDev, vol, len(vols)*vol+64, vol+64, 2*vol+64)
	if err != nil {
		return nil, err
	}
	ssd, err := partitions(ctx, bed, bed.SSD(), pressureSSDMiB(pp)...)
	if err != nil {
		return nil, err
	}
	var out []*pressureSystem
	out = append(out,
		&pressureSystem{system: &system{key: keySSD, kind: reference, label: "SSD alone (for scale)", dev: bed.RawSSD(),
			setup: "the second SSD image, whole: " + testbed.FormatBytes(pp.device)}},
		&pressureSystem{system: &system{key: keyRAID10, kind: reference, label: "bare HDD RAID10, no cache (the floor)", dev: hdd[0],
			setup: fmt.Sprintf("`%s`: a partition of the md RAID10", hdd[0])}})

	p.Step("tidecache: pool on %s + %s…", hdd[1], ssd[0])
	tc, err := setUpTidecache(ctx, bed, hdd[1], ssd[0], vols)
	if err != nil {
		return nil, err
	}
	for _, s := range tc {
		probe, err := writecacheProbe(ctx, bed, "tc-"+s.key+"-wtier")
		if err != nil {
			return nil, err
		}
		out = append(out, &pressureSystem{system: s, probe: probe})
	}

	p.Step("lvm2: lvm writecache and lvmcache on %s + %s…", hdd[3], ssd[2])
	lv, err := setUpLVM(ctx, bed, hdd[3], ssd[2], pp.device, pp.cache)
	if err != nil {
		return nil, err
	}
	var lvmcache, lvmwc *system
	for _, s := range lv {
		switch s.key {
		case keyLVMCache:
			lvmcache = s
		case keyLVMWritecache:
			lvmwc = s
		}
	}
	wcProbe, err := writecacheProbe(ctx, bed, vgName+"-lvmwc")
	if err != nil {
		return nil, err
	}
	out = append(out, &pressureSystem{system: lvmwc, probe: wcProbe},
		&pressureSystem{system: lvmcache, probe: &cacheProbe{kind: probeDMCache, target: vgName + "-lvmcache"}})

	p.Step("bcache: %s backing, %s cache, writeback…", hdd[2], ssd[1])
	bc, err := setUpBcache(ctx, bed, hdd[2], ssd[1], bcacheBucket(pp.cache))
	if err != nil {
		return nil, err
	}
	out = append(out, &pressureSystem{system: bc, probe: &cacheProbe{kind: probeBcache, target: "/sys/block/bcache0/bcache", size: pp.cache}})
	return selectPressureSystems(out, only)
}

// bcacheBucket is the bucket size for a bcache cache of size bytes: the
// largest power of two from 32 KiB to 512 KiB (the default) that still
// gives it 2,048 buckets; bcache refuses a cache of fewer than about 1,000.
func bcacheBucket(size int64) string {
	b := int64(512 << 10)
	for b > 32<<10 && size/b < 2048 {
		b /= 2
	}
	return strconv.FormatInt(b>>10, 10) + "k"
}

// selectPressureSystems keeps the systems only names (all without it);
// the bare RAID10, which every ratio needs, always stays.
func selectPressureSystems(all []*pressureSystem, only []string) ([]*pressureSystem, error) {
	if len(only) == 0 {
		return all, nil
	}
	keep := map[string]bool{keyRAID10: true}
	for _, k := range only {
		keep[strings.TrimSpace(k)] = true
	}
	var out []*pressureSystem
	for _, s := range all {
		if keep[s.key] {
			out = append(out, s)
			delete(keep, s.key)
		}
	}
	delete(keep, keyRAID10)
	if len(keep) > 0 {
		var unknown []string
		for k := range keep {
			unknown = append(unknown, k)
		}
		return nil, fmt.Errorf("-only: no pressure system %s", strings.Join(unknown, ", "))
	}
	return out, nil
}

// writecacheProbe reads a dm-writecache device's block size from its
// table.
func writecacheProbe(ctx context.Context, bed *testbed.Bed, name string) (*cacheProbe, error) {
	out, err := bed.Run(ctx, "dmsetup", "table", name)
	if err != nil {
		return nil, err
	}
	params, err := targetParams(out, "writecache")
	if err != nil {
		return nil, err
	}
	wp, err := dm.ParseWritecacheParams(params)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return &cacheProbe{kind: probeWritecache, target: name, blockBytes: int64(wp.BlockSize)}, nil
}

// readWriteback records what bounds each dm-writecache's write-back:
// tidecache's own account (volume show) and the loaded tables.
func (sr *schedRun) readWriteback(ctx context.Context, bed *testbed.Bed) error {
	for _, s := range sr.systems {
		if s.probe == nil || s.probe.kind != probeWritecache {
			continue
		}
		table, err := bed.Run(ctx, "dmsetup", "table", s.probe.target)
		if err != nil {
			return err
		}
		note := "`" + s.probe.target + "`: `" + strings.TrimSpace(table) + "`"
		if s.kind == tidecache {
			show, err := bed.Run(ctx, "tidectl", "volume", "show", s.key)
			if err != nil {
				return err
			}
			for _, line := range strings.Split(show, "\n") {
				if strings.Contains(line, "write-back:") {
					note += "; `volume show`: " + strings.TrimSpace(line)
				}
			}
		}
		sr.writeback[s.key] = note
	}
	return nil
}

// runPressureSystem runs the phases on one system, then flushes its cache.
func runPressureSystem(ctx context.Context, bed *testbed.Bed, s *pressureSystem, pp pressureProfile) (*systemRun, error) {
	p := bed.Progress()
	run := &systemRun{phases: map[string]*phaseRun{}}
	began := time.Now()
	var sampler *testbed.Sampler
	if s.probe != nil {
		var err error
		if sampler, err = bed.StartSampler(ctx, "cache-"+s.key, s.probe.snippet(), time.Second); err != nil {
			return nil, err
		}
		defer func() {
			if sampler != nil {
				sampler.Stop(context.WithoutCancel(ctx))
			}
		}()
	}
	phases := pp.phases(s.dev)
	// Phases run back to back in one fio process (FioSequence): write,
	// mix, read and burst; then the idle drain; then bulk and OLTP.
	do := func(seq []pressurePhase) error {
		jobs := make([]testbed.Job, len(seq))
		for i, ph := range seq {
			jobs[i] = ph.job
		}
		res, tls, err := bed.FioSequence(ctx, jobs)
		if err != nil {
			return err
		}
		for i, ph := range seq {
			pr := &phaseRun{res: res[i], timeline: tls[i]}
			// A phase lasts until the next one starts (stalled I/O makes
			// it overrun); the last one, until its last logged second.
			if i+1 < len(seq) {
				pr.took = tls[i+1].Start.Sub(tls[i].Start)
			} else {
				pr.took = max(ph.job.Runtime, tls[i].End())
			}
			run.phases[ph.key] = pr
			if ph.key == phWrite {
				run.start = tls[i].Start
			}
			for _, c := range []struct {
				name string
				st   testbed.Stats
			}{{"read", pr.res.Read}, {"write", pr.res.Write}} {
				if c.st.IOs > 0 {
					p.Step("  %-6s %-5s %8s IOPS  mean %8s  p99 %8s  p99.9 %8s  max %8s  (took %v)", ph.key, c.name,
						testbed.FormatIOPS(c.st.IOPS), testbed.FormatLatency(c.st.Clat.Mean), testbed.FormatLatency(c.st.Clat.P99()),
						testbed.FormatLatency(c.st.Clat.Percentiles[99.9]), testbed.FormatLatency(c.st.Clat.Max), pr.took.Round(time.Second))
				}
			}
		}
		return nil
	}
	if err := do(phases[:4]); err != nil {
		return nil, err
	}
	if sampler != nil {
		if err := idle(ctx, bed, s, sampler, pp, run); err != nil {
			return nil, err
		}
	}
	if err := do(phases[4:]); err != nil {
		return nil, err
	}
	if sampler != nil {
		samples, err := sampler.Stop(ctx)
		sampler = nil
		if err != nil {
			return nil, err
		}
		if run.states, err = parseStates(*s.probe, samples); err != nil {
			return nil, fmt.Errorf("%s: %w", s.key, err)
		}
		if ttf, ok := timeToFull(run.states, run.start, run.start.Add(run.phases[phWrite].took)); ok {
			p.Step("  write cache full %v after the write phase began", ttf.Round(time.Second))
		}
	}
	if s.flush != nil {
		t0 := time.Now()
		fctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
		err := s.flush(fctx)
		cancel()
		run.flush = time.Since(t0)
		if err != nil {
			// The next system would find the HDDs busy: the run cannot go on.
			return nil, fmt.Errorf("flush after the phases: %w", err)
		}
		p.Step("  flushed in %v", run.flush.Round(time.Second))
	}
	run.wall = time.Since(began)
	return run, nil
}

// idle leaves the volume alone while its cache writes back, until it is
// clean, has stopped draining for 10 s (a low watermark), or pp.idle has
// passed.
func idle(ctx context.Context, bed *testbed.Bed, s *pressureSystem, sampler *testbed.Sampler, pp pressureProfile, run *systemRun) error {
	out, err := bed.Run(ctx, "date", "+%s.%N")
	if err != nil {
		return err
	}
	if run.idleStart, err = testbed.ParseEpoch(out); err != nil {
		return err
	}
	t0 := time.Now()
	for time.Since(t0) < pp.idle {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Second):
		}
		samples, err := sampler.Peek(ctx)
		if err != nil {
			return err
		}
		states, err := parseStates(*s.probe, samples)
		if err != nil {
			return err
		}
		var since []cacheState
		for _, st := range states {
			if !st.at.Before(run.idleStart) {
				since = append(since, st)
			}
		}
		if drainSettled(since, 10*time.Second) {
			break
		}
	}
	if out, err = bed.Run(ctx, "date", "+%s.%N"); err != nil {
		return err
	}
	run.idleEnd, err = testbed.ParseEpoch(out)
	bed.Progress().Step("  idle %v", time.Since(t0).Round(time.Second))
	return err
}
