// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/tidecache/tidecache/tests/testbed"
)

// accountRow is what one application write cost on the SSD below it.
type accountRow struct {
	system    *system
	what      string
	appWrites uint64 // writes fio completed
	ssd       testbed.DiskStats
	wcFlushes uint64 // dm-writecache's flush counter (REQ_PREFLUSH seen)
}

// account runs short QD1 write jobs on the raw SSD and the two tidecache
// volumes and reads the SSD's block-layer counters before and after: how
// many requests reach the SSD per application write is the cost a write
// cache adds, independent of how fast this VM is. Last, it puts ext4 on
// the write-tier volume and measures O_DSYNC overwrites of a file, which
// the filesystem sends as FUA writes without a flush. It runs after the
// fio profiles, in regions they have finished with.
func account(ctx context.Context, bed *testbed.Bed, systems []*system) ([]accountRow, error) {
	const runtime = 4 * time.Second
	cases := []struct {
		what string
		job  testbed.Job
	}{
		{"O_DIRECT, rewrites", testbed.Job{Writes: testbed.Direct, Offset: writeOffset, Size: writeSet}},
		{"O_DIRECT|O_SYNC, rewrites", testbed.Job{Writes: testbed.DSync, Offset: writeOffset, Size: writeSet}},
		{"O_DIRECT + fsync, rewrites", testbed.Job{Writes: testbed.Fsync, Offset: writeOffset, Size: writeSet}},
		{"O_DIRECT + fsync, first writes", testbed.Job{Writes: testbed.Fsync, Offset: writeOffset + writeSet, Size: 256 << 20}},
	}
	var rows []accountRow
	var wb *system
	for _, s := range systems {
		ssd := bed.SSD()
		switch s.key {
		case keySSD:
			ssd = bed.RawSSD()
		case keyWB:
			wb = s
		case keyWBR:
		default:
			continue
		}
		for _, c := range cases {
			job := c.job
			job.Name, job.Device, job.RW, job.Runtime = "account", s.dev, "randwrite", runtime
			row, err := measure(ctx, bed, s, c.what, ssd, job)
			if err != nil {
				return nil, err
			}
			rows = append(rows, row)
		}
	}
	if wb == nil {
		return nil, fmt.Errorf("accounting: no tc-wb system")
	}

	const mnt, file = "/mnt/tc-bench", "/mnt/tc-bench/data"
	for _, argv := range [][]string{
		{"mkfs.ext4", "-q", "-F", "-E", "nodiscard", wb.dev},
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
func measure(ctx context.Context, bed *testbed.Bed, s *system, what, ssd string, job testbed.Job) (accountRow, error) {
	before, err := bed.DiskStats(ctx, ssd)
	if err != nil {
		return accountRow{}, err
	}
	wcBefore, err := writecacheFlushes(ctx, bed, s.key)
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
	wcAfter, err := writecacheFlushes(ctx, bed, s.key)
	if err != nil {
		return accountRow{}, err
	}
	return accountRow{system: s, what: what, appWrites: r.Write.IOs, ssd: after.Sub(before), wcFlushes: wcAfter - wcBefore}, nil
}

// writecacheFlushes reads a tidecache volume's dm-writecache flush
// counter; 0 for other systems.
func writecacheFlushes(ctx context.Context, bed *testbed.Bed, key string) (uint64, error) {
	if !strings.HasPrefix(key, "tc-") {
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

// writeAccounting prints what reached the SSD per application write.
func (r *report) writeAccounting(b *strings.Builder) error {
	if len(r.accounting) == 0 {
		return nil
	}
	fmt.Fprintf(b, "## What one application write costs on the SSD\n\n")
	fmt.Fprintf(b, "Block-layer counters (`/sys/block/<ssd>/stat`) read around a 4 s QD1 random-write run per\n"+
		"device and case, after the fio profiles. Requests are counted where they reach the SSD, below every\n"+
		"device-mapper layer. The SSDs are write-through, so the kernel drops flushes above them and the SSD\n"+
		"flush column stays 0; \"dm-writecache flushes\" counts the REQ_PREFLUSH requests the write tier itself\n"+
		"received (each one commits its metadata). The last row puts ext4 on `tc-wb` and overwrites a file with\n"+
		"O_DIRECT|O_DSYNC: ext4 sends those as FUA writes without a flush, which dm-writecache does not commit\n"+
		"(0 flushes per write); docs/architecture.md explains the durability consequence.\n\n")
	t := testbed.Table{Header: []string{"device", "writes", "app writes", "SSD writes / app write", "SSD flushes / app write", "dm-writecache flushes / app write"}}
	for _, a := range r.accounting {
		wc := "-"
		if a.system.key != keySSD {
			wc = perWrite(a.wcFlushes, a.appWrites)
		}
		t.Add(a.system.key, a.what, fmt.Sprint(a.appWrites), perWrite(a.ssd.Writes, a.appWrites), perWrite(a.ssd.Flushes, a.appWrites), wc)
	}
	if err := t.WriteMarkdown(b); err != nil {
		return err
	}
	fmt.Fprintln(b)
	return nil
}

func perWrite(n, writes uint64) string {
	if writes == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", float64(n)/float64(writes))
}
