// SPDX-License-Identifier: Apache-2.0

// Command demo is `make demo`: tidecache's job in a few minutes, on any
// Linux host with qemu. It boots a VM (tests/testbed) with four emulated
// 7,200 rpm HDDs and one SSD, lets tidecache build an md RAID10 over the
// HDDs and a pool on it, creates a cached volume (SSD write cache and read
// cache) and a passthrough volume of the same size (the bare RAID10 through
// dm-linear), runs the same fio workloads on both and prints what a user
// wants to know: IOPS and latency bare vs cached, the speed-up, the cache's
// hits and dirty blocks, and that a flush writes everything back.
//
//	go run ./tests/demo [-runtime 15s] [-keep]
//
// Progress goes to stderr, results to stdout. It exits non-zero, saying
// which step failed and why, when anything goes wrong.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/tidecache/tidecache/tests/testbed"
)

// The demo's volumes and the regions its workloads touch. The regions fit
// well under the write cache's high watermark (50 % of 128 MiB) and in the
// read cache, the way a database's hot set fits the cache it was sized
// for: the demo shows the cache working, not the cache being too small.
const (
	volumeSize     = "256M"
	writeCacheSize = "128M"
	readCacheSize  = "32M"

	writeOffset, writeRegion = 0, 32 << 20         // the commit workload
	readOffset, readRegion   = 128 << 20, 16 << 20 // the hot read set (and the mix)
)

func main() {
	keep := flag.Bool("keep", false, "keep the disk images (under .cache/vm/demo) after the run")
	runtime := flag.Duration("runtime", 15*time.Second, "measured time of each fio job (whole seconds)")
	flag.Parse()
	if *runtime < time.Second || *runtime%time.Second != 0 {
		fmt.Fprintln(os.Stderr, "demo: -runtime wants whole seconds, at least 1s")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Stdout, os.Stderr, *keep, *runtime); err != nil {
		fmt.Fprintf(os.Stderr, "\ndemo failed: %v\n", err)
		os.Exit(1)
	}
}

// workload is one row of the result table: the same fio job run on the
// bare RAID10 and on the cached volume.
type workload struct {
	what string
	job  testbed.Job
	warm bool // warm the read cache on the region first
}

func run(ctx context.Context, stdout, stderr io.Writer, keep bool, runtime time.Duration) (err error) {
	p := testbed.NewProgress(stderr)
	hdd := testbed.Nearline7200()
	bed, err := testbed.Start(ctx, testbed.Config{Name: "demo", HDD: hdd, Keep: keep, Progress: p})
	if err != nil {
		return err
	}
	defer func() {
		bed.Finish(ctx, &err)
		if keep {
			p.Step("images kept in %s", bed.Dir())
		}
	}()

	p.Step("creating RAID10 (md, 4 emulated HDDs) and pool \"demo\" with the SSD…")
	if err := bed.CreatePool(ctx, "demo"); err != nil {
		return fmt.Errorf("create pool: %w", err)
	}
	p.Step("creating volume \"db\" (%s, write cache %s, read cache %s) and \"bare\" (%s, passthrough)…",
		volumeSize, writeCacheSize, readCacheSize, volumeSize)
	cached, err := bed.CreateVolume(ctx, testbed.VolumeSpec{Name: "db", Size: volumeSize, WriteCache: writeCacheSize, ReadCache: readCacheSize})
	if err != nil {
		return fmt.Errorf("create volume db: %w", err)
	}
	bare, err := bed.CreateVolume(ctx, testbed.VolumeSpec{Name: "bare", Size: volumeSize, Mode: "passthrough"})
	if err != nil {
		return fmt.Errorf("create volume bare: %w", err)
	}

	workloads := []workload{
		{what: "commit: 4k random write QD1, O_DIRECT + fsync each", job: testbed.Job{
			Name: "commit", RW: "randwrite", IODepth: 1, Writes: testbed.Fsync,
			Offset: writeOffset, Size: writeRegion}},
		{what: "hot reads: 4k random read QD4, 16 MiB warm set", warm: true, job: testbed.Job{
			Name: "hotread", RW: "randread", IODepth: 4,
			Offset: readOffset, Size: readRegion}},
		{what: "OLTP mix: 4k random 70% read / 30% write QD4", job: testbed.Job{
			Name: "mix", RW: "randrw", RWMixRead: 70, IODepth: 4, Writes: testbed.Direct,
			Offset: readOffset, Size: readRegion}},
	}
	type pair struct{ bare, cached testbed.Result }
	results := make([]pair, len(workloads))
	for i, w := range workloads {
		w.job.Runtime, w.job.Ramp = runtime, time.Second
		if w.warm {
			p.Step("warming the read cache of db on the %s set (smq promotes blocks after repeated hits)…", testbed.FormatBytes(w.job.Size))
			warm := w.job
			warm.Device, warm.IODepth = cached, 16
			if _, err := bed.WarmReadCache(ctx, "db", warm, 4*time.Second, 40*time.Second); err != nil {
				return err
			}
		}
		for _, t := range []struct {
			name, dev string
			out       *testbed.Result
		}{{"bare RAID10", bare, &results[i].bare}, {"cached volume db", cached, &results[i].cached}} {
			job := w.job
			job.Device = t.dev
			p.Step("fio %s on %s (%v)…", job.Describe(), t.name, runtime)
			r, err := bed.Fio(ctx, job)
			if err != nil {
				return err
			}
			*t.out = r
		}
	}

	// The cache's side of the story, before the flush empties it.
	vol, err := bed.Volume(ctx, "db")
	if err != nil {
		return fmt.Errorf("volume show db: %w", err)
	}
	if vol.WriteCache == nil || vol.ReadCache == nil {
		return errors.New("volume db: tidectl shows no write or read cache status")
	}

	fmt.Fprintf(stdout, "\ntidecache demo: bare HDD RAID10 vs the same RAID10 behind tidecache (%v per job)\n\n", runtime)
	t := testbed.Table{Header: []string{"workload", "bare IOPS", "mean", "p99", "cached IOPS", "mean", "p99", "speed-up"}}
	for i, w := range workloads {
		b, c := results[i].bare.Commit(), results[i].cached.Commit()
		t.Add(w.what,
			testbed.FormatIOPS(b.IOPS), testbed.FormatLatency(b.Mean), testbed.FormatLatency(b.P99()),
			testbed.FormatIOPS(c.IOPS), testbed.FormatLatency(c.Mean), testbed.FormatLatency(c.P99()),
			testbed.FormatRatio(c.IOPS/b.IOPS))
	}
	if err := t.WriteText(stdout); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "\nlatency: submission to completion; for the commit row, the write plus its fsync (p99: sum of both p99s).")

	wc, rc := vol.WriteCache, vol.ReadCache
	fmt.Fprintf(stdout, "\ncache of volume db (tidectl -o json volume show db):\n")
	fmt.Fprintf(stdout, "  write cache: %d writes (%d rewrote a cached block), %d flushes; %d of %d blocks dirty (%s) waiting for the HDDs\n",
		wc.Writes, wc.WriteHitsUncommitted+wc.WriteHitsCommitted, wc.Flushes, wc.DirtyBlocks, wc.TotalBlocks, testbed.FormatBytes(int64(wc.DirtyBytes)))
	fmt.Fprintf(stdout, "               %d reads, %d served from it (%.0f%%: blocks written and not yet written back)\n",
		wc.Reads, wc.ReadHits, 100*wc.ReadHitRatio)
	fmt.Fprintf(stdout, "  read cache:  %d hits, %d misses (%.0f%% hit), %d blocks promoted, %d of %d blocks (%s each) used\n",
		rc.ReadHits, rc.ReadMisses, 100*rc.ReadHitRatio, rc.Promotions, rc.Used, rc.Total, testbed.FormatBytes(int64(rc.BlockSize)*512))

	p.Step("flushing db: writing %d dirty blocks back to the RAID10 (tidectl volume flush db)…", wc.DirtyBlocks)
	start := time.Now()
	after, err := bed.Flush(ctx, "db")
	if err != nil {
		return fmt.Errorf("flush db: %w", err)
	}
	if after.WriteCache == nil || after.WriteCache.DirtyBlocks != 0 {
		return fmt.Errorf("flush db: still dirty afterwards: %+v", after.WriteCache)
	}
	fmt.Fprintf(stdout, "\nflush: dirty blocks %d → %d in %v; the HDDs now hold every write.\n",
		wc.DirtyBlocks, after.WriteCache.DirtyBlocks, time.Since(start).Round(100*time.Millisecond))
	fmt.Fprintf(stdout, "\nHDD model: %s.\nThe VM is software-emulated (qemu TCG, kernel %s): every I/O costs guest CPU time,\n"+
		"which shrinks the SSD side of each ratio; on real NVMe the gaps are far wider.\n", hdd, bed.Kernel())
	p.Step("done in %v", p.Elapsed().Round(time.Second))
	return nil
}
