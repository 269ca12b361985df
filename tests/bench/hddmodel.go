// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/tidecache/tidecache/tests/testbed"
)

// writeHDDModel is the "HDD model" section of docs/benchmarks.md: how the
// benchmarks emulate a spindle, and what the emulation gets wrong. The
// pressure report links to it.
func writeHDDModel(b *strings.Builder, hdd testbed.HDD) {
	pf := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	pf("## HDD model\n\n")
	pf("Every benchmark here emulates each HDD of the RAID10 (%s) with three parts\n"+
		"(tests/testbed; `make demo` uses the same):\n\n", hdd.Model)
	pf("- **Service time:** dm-delay in the guest holds every read and write for %d ms before passing it on: a\n"+
		"  short seek within a hot extent plus half a rotation at 7,200 rpm, ~120 IOPS at queue depth 1.\n", hdd.Latency.Milliseconds())
	pf("- **One actuator:** qemu throttles each disk image on the host to %d IOPS (`throttling.iops-total`),\n"+
		"  reads and writes together, in arrival order: dm-delay delays I/Os independently, so without the cap\n"+
		"  one disk would serve hundreds of IOPS at depth. 150 is the conservative end of what NCQ reordering\n"+
		"  gives a 7,200 rpm drive (150-200).\n", hdd.IOPS)
	pf("- **The drive's queue:** each disk is its own virtio-blk device with one request queue of %d entries\n"+
		"  (`num-queues=1,queue-size=%d`): the guest keeps at most %d commands in flight on it, as a SATA drive's\n"+
		"  NCQ accepts 32. With a single queue the guest kernel puts an I/O scheduler in front of the disk, and\n"+
		"  the model sets it on every raw disk: **mq-deadline**, what Linux runs SATA disks under md with (reads\n"+
		"  preferred, writes expire after 5 s; it holds up to twice the tags, 64 requests), or **none**, as\n"+
		"  behind a hardware RAID controller that reorders in its own queue. The runs here use %s; the\n"+
		"  pressure run measures both, and checks one disk's QD1 latency and IOPS cap each time. Before the\n"+
		"  pressure benchmark (issue 23) the disks had qemu's defaults instead: one queue per vCPU of 256\n"+
		"  entries, no scheduler, up to 512 commands in flight per disk.\n",
		hdd.QueueDepth, hdd.QueueDepth, hdd.QueueDepth, hdd.Scheduler)
	pf("- The disks' volatile write cache is %s.\n\n", map[bool]string{
		false: "off (write-through, as database servers run HDDs): the kernel sends them no flushes",
		true:  "on: the kernel sends them flushes, which dm-delay delays like writes"}[hdd.WriteCache])
	pf("**What the model gets wrong.** dm-delay is bio-based and sits *above* the disk's queue: it keeps every\n" +
		"bio it is given on a list, without bound, and one worker per disk submits the expired bios in arrival\n" +
		"order. When the disk's tags (and mq-deadline's requests) are all taken, that worker blocks, and every\n" +
		"bio behind it waits in dm-delay's list. On real disks the submitters (md, dm-writecache's write-back,\n" +
		"the application) block on tags each for itself, and mq-deadline keeps part of its requests for\n" +
		"synchronous I/O, so a read reaches the scheduler ahead of a flood of asynchronous writes. In the model\n" +
		"a read queues behind every write submitted before it, and the scheduler only chooses among the 64\n" +
		"requests below the delay line. So:\n\n" +
		"- waits behind a write flood are **longer than on real disks**, on both schedulers: the more I/O a\n" +
		"  system keeps in flight on the array, the more the model overstates its readers' waits (dm-writecache\n" +
		"  at the kernel's default keeps tens of thousands of blocks in write-back, a bounded write-back a few\n" +
		"  per disk, which the model barely penalises);\n" +
		"- the model **understates the difference between mq-deadline and none**: read preference only acts on\n" +
		"  the requests that got past the delay line;\n" +
		"- the delay is paid before the queue, not as service time within it: a request's latency is the delay\n" +
		"  plus its wait for the throttle, and the disk does not get faster by reordering a deeper queue (the\n" +
		"  150 IOPS cap stands for that).\n\n" +
		"Measured on one emulated disk (2026-11-28, tests/testbed/doc.go): 4k random reads at QD1 ran at ~70\n" +
		"IOPS (mean ~14 ms: dm-delay counts its 8 ms in the guest kernel's 4 ms ticks, emulation adds the rest)\n" +
		"and at QD32 at ~150 IOPS, the same with the old queues and with this one; the pressure report repeats\n" +
		"the check every run. A QD1 reader beside a QD1024 random-write flood on\n" +
		"one emulated disk waited 5.6 s on average with the old queues and 5.3 s with one queue of 32: the\n" +
		"flood sits above the queue either way. Ratios between systems measured on the same model stay\n" +
		"comparable; absolute waits under a flood are an upper bound. How much shorter a real array's would be\n" +
		"the model cannot say (issue 23 expects seconds where the model showed minutes).\n\n")
}

// writePressureTargets embeds the "Targets" section of the pressure
// report found beside outPath, like writeReplicaGoals; nothing when there
// is none.
func (r *report) writePressureTargets(b *strings.Builder, outPath string) {
	if outPath == "" {
		return
	}
	data, err := os.ReadFile(filepath.Join(filepath.Dir(outPath), pressureReportFile))
	if err != nil {
		return
	}
	targets, ok := markdownSection(string(data), "## Targets")
	if !ok {
		return
	}
	when := ""
	if _, rest, found := strings.Cut(string(data), ") on "); found {
		when, _, _ = strings.Cut(rest, ",")
	}
	// Its subsections become this report's third level.
	targets = strings.ReplaceAll("\n"+targets, "\n### ", "\n#### ")
	fmt.Fprintf(b, "## Under pressure: a working set four times the cache\n\n"+
		"From [%s](%s), the pressure run (%s): every system with a working set four times its cache,\n"+
		"cold on the HDDs, driven past the point where its write cache is full, on both HDD schedulers; its\n"+
		"set-up, the charts of IOPS over time and the figures per phase are there.\n%s\n",
		pressureReportFile, pressureReportFile, when, targets)
}
