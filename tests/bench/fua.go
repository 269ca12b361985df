// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/tidecache/tidecache/tests/testbed"
)

// The O_DSYNC workload: what durable FUA writes cost. fio's libaio with
// --sync=dsync makes every write an asynchronous O_DIRECT|O_DSYNC write,
// which the kernel sends as a FUA write with no flush after it (a
// synchronous one on a raw block device is followed by a flush; ext4 and
// XFS send O_DSYNC overwrites as FUA writes too). On tidecache the
// fuaflush target completes such a write only after the write and then a
// flush of the write tier (a dm-writecache metadata commit, the flush
// forwarded to the origin) have completed; the stack before fuaflush
// (tc-wb-old) acknowledged it with its mapping only in RAM.
//
// Each system runs the same 4k random writes twice, plain (O_DIRECT) and
// O_DSYNC, all in one fio process cycling through the jobs in time slices
// (testbed.InterleavedJobs): the plain job is the reference the O_DSYNC
// job's latency is divided by, slice by slice.

// fuaSystems are the systems the O_DSYNC workload measures, in report
// order: the SSD alone (its own FUA writes), tidecache with and without
// the read tier, the stack before fuaflush, and (-replica) tidecache with
// the write cache mirrored to a peer and on two peers.
var fuaSystems = []string{keySSD, keyWB, keyWBR, "tc-wb-old", "tc-wbp", "tc-wb2p"}

// targetFUACost is the most fuaflush may cost plain 4k random writes at
// QD1 (tc-wb's IOPS against tc-wb-old's), and targetDSyncLatency how much
// longer an O_DSYNC write on the cached volume may take than a plain one.
const (
	targetFUACost      = 0.95
	targetDSyncLatency = 2.0
)

// fuaRun is the O_DSYNC workload at one queue depth.
type fuaRun struct {
	qd      int
	job     testbed.Job // the O_DSYNC job (without device), for its description
	systems []string    // keys measured, in report order
	// plain and dsync hold each system's share of the interleaved run.
	plain, dsync map[string]testbed.InterleavedResult
}

// fuaJob is the O_DSYNC workload's job at queue depth qd.
func fuaJob(qd int, w testbed.Durability) testbed.Job {
	return testbed.Job{Name: fmt.Sprintf("dsync-qd%d", qd), RW: "randwrite", BlockSize: 4096, IODepth: qd, Engine: "libaio",
		Writes: w, Offset: writeOffset, Size: writeSet}
}

// fuaBench runs the O_DSYNC workload at QD1 and deepQueue on the systems
// of fuaSystems the run has, after the fio profiles (the write set is in
// every cache already).
func fuaBench(ctx context.Context, bed *testbed.Bed, rep *report, o options) error {
	var keys []string
	devs := map[string]string{}
	for _, k := range fuaSystems {
		for _, s := range rep.systems {
			if s.key == k {
				keys = append(keys, k)
				devs[k] = s.dev
			}
		}
	}
	if len(keys) == 0 {
		return nil
	}
	p := bed.Progress()
	for _, qd := range []int{1, deepQueue} {
		var jobs []testbed.Job
		for _, k := range keys {
			for _, w := range []testbed.Durability{testbed.Direct, testbed.DataSync} {
				j := fuaJob(qd, w)
				j.Device = devs[k]
				jobs = append(jobs, j)
			}
		}
		p.Step("O_DSYNC 4k random write QD%d (libaio), plain and O_DSYNC on %s, %d × %v slices each…",
			qd, strings.Join(keys, ", "), o.slices, o.slice)
		res, err := bed.InterleavedJobs(ctx, jobs, o.slices, o.slice)
		if err != nil {
			return err
		}
		run := &fuaRun{qd: qd, job: fuaJob(qd, testbed.DataSync), systems: keys,
			plain: map[string]testbed.InterleavedResult{}, dsync: map[string]testbed.InterleavedResult{}}
		for i, k := range keys {
			run.plain[k], run.dsync[k] = res[2*i], res[2*i+1]
		}
		rep.fua = append(rep.fua, run)
		for _, k := range keys {
			st := run.dsync[k].Merged.Total
			p.Step("  %-9s %9s IOPS  clat mean %8s  p99 %8s  O_DSYNC ÷ plain latency %s", k, testbed.FormatIOPS(st.IOPS),
				testbed.FormatLatency(st.Clat.Mean), testbed.FormatLatency(st.Clat.P99()), ratiosCell(run.latencyCost(k)))
		}
	}
	return nil
}

// pairedRatios divides a per-slice figure of a by b's in the same slice,
// slice by slice, and returns the ratios sorted; slices where b's figure
// is not positive, or either is missing, are left out.
func pairedRatios(a, b []testbed.Result, f func(testbed.Stats) float64) []float64 {
	var rs []float64
	for i := range a {
		if i < len(b) {
			if d := f(b[i].Commit()); d > 0 {
				rs = append(rs, f(a[i].Commit())/d)
			}
		}
	}
	sort.Float64s(rs)
	return rs
}

func iops(s testbed.Stats) float64        { return s.IOPS }
func meanLatency(s testbed.Stats) float64 { return float64(s.Mean) }

// iopsRatios are s's O_DSYNC IOPS over ref's, per slice, sorted.
func (f *fuaRun) iopsRatios(s, ref string) []float64 {
	return pairedRatios(f.dsync[s].Slices, f.dsync[ref].Slices, iops)
}

// latencyCost is, per slice, s's mean O_DSYNC latency (submission to
// completion) over its mean plain write latency in the same slice, sorted:
// what making the write durable costs on that system.
func (f *fuaRun) latencyCost(s string) []float64 {
	return pairedRatios(f.dsync[s].Slices, f.plain[s].Slices, meanLatency)
}

// has reports whether the run measured system key.
func (f *fuaRun) has(key string) bool {
	for _, k := range f.systems {
		if k == key {
			return true
		}
	}
	return false
}

// fuaAt returns the O_DSYNC run at queue depth qd, nil when there is none.
func (r *report) fuaAt(qd int) *fuaRun {
	for _, f := range r.fua {
		if f.qd == qd {
			return f
		}
	}
	return nil
}

// fuaCostRatios are tc-wb's IOPS over tc-wb-old's on 4k random write QD1,
// per slice: what the fuaflush layer costs writes that ask for no
// durability. Nil when the run did not measure both.
func (r *report) fuaCostRatios() []float64 {
	if !r.hasFio() || !r.has(keyWB) || !r.has("tc-wb-old") {
		return nil
	}
	return r.sliceRatios("rw4k-qd1", keyWB, "tc-wb-old")
}

// fuaTargets are the target-table rows of the fuaflush targets: the cost
// of the layer on plain writes, and the O_DSYNC latency on tc-wb. Both
// judge tc-wb, whose stack the old one was; tc-wbr's column shows its own
// figure where it has one.
func (r *report) fuaTargets() [][]string {
	var rows [][]string
	if rs := r.fuaCostRatios(); len(rs) > 0 {
		rows = append(rows, []string{
			fmt.Sprintf("fuaflush costs ≤ %.0f %% on 4k random write QD1: tc-wb ÷ tc-wb-old (old stack) IOPS ≥ %.2f× (tc-wb)",
				100*(1-targetFUACost), targetFUACost),
			ratiosCell(rs), "-", verdict(median(rs) >= targetFUACost)})
	}
	if f := r.fuaAt(1); f != nil && f.has(keyWB) {
		rs := f.latencyCost(keyWB)
		wbr := "-"
		if f.has(keyWBR) {
			wbr = ratiosCell(f.latencyCost(keyWBR))
		}
		rows = append(rows, []string{
			fmt.Sprintf("O_DSYNC 4k random write QD1 mean latency ≤ %.0f× plain 4k random write QD1 (tc-wb)", targetDSyncLatency),
			ratiosCell(rs), wbr, verdict(median(rs) <= targetDSyncLatency)})
	}
	return rows
}

// writeFUA is the section on what durable FUA writes cost: the O_DSYNC
// workload per system, and tc-wb against the stack before fuaflush on
// every fio profile.
func (r *report) writeFUA(b *strings.Builder) error {
	pf := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	old := r.hasFio() && r.has(keyWB) && r.has("tc-wb-old")
	if len(r.fua) == 0 && !old {
		return nil
	}
	pf("## Cost of durable FUA writes (fuaflush)\n\n")
	pf("`tc-wb-old` is tc-wb on the stack tidecache built before the fuaflush target, kept only as a yardstick:\n" +
		"dm-writecache is the top device and acknowledges a FUA write (O_DSYNC, a journal commit block) before its\n" +
		"mapping is committed, so a power cut can lose it. The current stack puts fuaflush on top, which completes a\n" +
		"FUA write only after the write and then a flush of the write tier below (a dm-writecache metadata commit;\n" +
		"dm-writecache also forwards the flush to the HDD array) have completed; concurrent FUA writes share a flush.\n\n")
	for _, f := range r.fua {
		pf("### O_DSYNC 4k random write QD%d\n\n`%s`, each system also with plain O_DIRECT writes (`--sync=none`) in the same\n"+
			"fio process; fio's completion latency (clat: from io_submit's return to completion) and its total\n"+
			"latency (from submission), ratios medians of per-slice ratios with their range.\n\n", f.qd, f.job.Describe())
		hdr := []string{"system", "IOPS", "clat mean", "clat p99", "mean latency", "× SSD alone", "× tc-wb-old", "plain IOPS", "O_DSYNC ÷ plain, mean latency"}
		t := testbed.Table{Header: hdr}
		for _, k := range f.systems {
			st, pl := f.dsync[k].Merged.Total, f.plain[k].Merged.Total
			ssd, oldCell := "-", "-"
			if f.has(keySSD) {
				ssd = ratioOrOne(k, keySSD, f.iopsRatios(k, keySSD))
			}
			if f.has("tc-wb-old") {
				oldCell = ratioOrOne(k, "tc-wb-old", f.iopsRatios(k, "tc-wb-old"))
			}
			t.Add(k, testbed.FormatIOPS(st.IOPS), testbed.FormatLatency(st.Clat.Mean), testbed.FormatLatency(st.Clat.P99()),
				testbed.FormatLatency(st.Mean), ssd, oldCell, testbed.FormatIOPS(pl.IOPS), ratiosCell(f.latencyCost(k)))
		}
		if err := t.WriteMarkdown(b); err != nil {
			return err
		}
		pf("\n")
	}
	if old {
		pf("### tc-wb against the old stack on the fio profiles\n\n")
		pf("IOPS of tc-wb divided by tc-wb-old's in the same slice, median over slices, range in brackets; below\n" +
			"1.00× the current stack is slower. Only FUA writes wait for a flush; the other requests pass fuaflush\n" +
			"untouched, so these ratios are the layer's own cost.\n\n")
		t := testbed.Table{Header: []string{"workload", "tc-wb ÷ tc-wb-old"}}
		for _, w := range r.workloads {
			t.Add(w.label, r.ratioCell(w.key, keyWB, "tc-wb-old"))
		}
		if d, base := r.db[keyWB], r.db["tc-wb-old"]; d != nil && base != nil {
			t.Add("MariaDB oltp_read_write TPS", ratiosCell(d.roundRatios(base)))
		}
		if err := t.WriteMarkdown(b); err != nil {
			return err
		}
		pf("\n")
	}
	return nil
}

// ratioOrOne is a ratios cell, or 1.00× for a system against itself.
func ratioOrOne(s, ref string, rs []float64) string {
	if s == ref {
		return "1.00×"
	}
	return ratiosCell(rs)
}

// writeFUAFinding is the paragraph of "What the numbers say" on durable
// FUA writes.
func (r *report) writeFUAFinding(b *strings.Builder) {
	f := r.fuaAt(1)
	if f == nil || !f.has(keyWB) {
		return
	}
	x := testbed.FormatRatio
	lat := func(k string) time.Duration { return f.dsync[k].Merged.Total.Mean }
	fmt.Fprintf(b, "**An O_DSYNC write on the cached volume is a commit, not a bare SSD write.** fuaflush completes a FUA\n"+
		"write only after an empty flush of the write tier has completed behind it. dm-writecache hands every\n"+
		"flush to its own thread, which commits its metadata to the SSD when blocks were written into new cache\n"+
		"blocks since the last commit (for rewrites of committed blocks, which it writes in place, it waits for\n"+
		"the writes in flight), and forwards the flush to the HDD array, the origin: ")
	if r.cfg.HDD.WriteCache {
		fmt.Fprintf(b, "here the HDDs have their volatile cache on, so every O_DSYNC write also waits for the\n"+
			"spindles to flush it. ")
	} else {
		fmt.Fprintf(b, "here the HDDs are emulated write-through, so that flush ends at the array's queue at\n"+
			"once; with HDD write caches on, every O_DSYNC write (like every fsync already) would also wait for the\n"+
			"spindles' cache flush. ")
	}
	fmt.Fprintf(b, "O_DSYNC 4k random writes at QD1 took %s on tc-wb, %s its plain writes in the same slices",
		testbed.FormatLatency(lat(keyWB)), x(median(f.latencyCost(keyWB))))
	if f.has("tc-wb-old") {
		fmt.Fprintf(b, "; the old stack took %s (%s its plain writes): it was faster because it did not make the write\n"+
			"durable, its dm-writecache acknowledged the FUA write with the new mapping in RAM only", testbed.FormatLatency(lat("tc-wb-old")),
			x(median(f.latencyCost("tc-wb-old"))))
	}
	if f.has(keySSD) {
		fmt.Fprintf(b, ". The SSD alone took %s", testbed.FormatLatency(lat(keySSD)))
		if !r.cfg.SSDWriteCache {
			fmt.Fprintf(b, ": it is emulated write-through (power-loss protection), so the kernel drops its FUA\n"+
				"flag and its O_DSYNC write is a plain write")
		}
	}
	fmt.Fprintf(b, ".")
	if d := r.fuaAt(deepQueue); d != nil && d.has(keyWB) {
		fmt.Fprintf(b, " At QD%d concurrent FUA writes share a flush: tc-wb's O_DSYNC writes took %s its plain ones.",
			deepQueue, x(median(d.latencyCost(keyWB))))
	}
	if rs := r.fuaCostRatios(); len(rs) > 0 {
		fmt.Fprintf(b, " Writes that ask for no durability pass fuaflush untouched: 4k random write QD1 on tc-wb ran %s the\n"+
			"old stack's IOPS.", ratiosCell(rs))
	}
	fmt.Fprintf(b, "\n\n")
}
