// SPDX-License-Identifier: Apache-2.0

//go:build vm

package vm_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidecache/tidecache/tests/vm/harness"
)

// The pressure tests put a volume whose working set is 7× its write cache
// under a sustained random-write burst on an emulated HDD RAID10 (qemu
// caps each disk at 100 IOPS, dm-delay adds 8 ms to every I/O), the regime
// every database reaches and where the kernel's default write-back
// (writeback_jobs of tens of thousands of blocks) made reads and writes
// wait for tens of seconds here (minutes on a bigger cache). They assert
// generous bounds, so that a slow machine does not fail them but such
// waits do.
//
// The HDDs are virtio disks with qemu's default queues and no I/O
// scheduler in the guest: qemu's throttle serves requests in arrival
// order, like a RAID controller's queue (DESIGN.md 9).
const (
	pressureHDDIOPS  = 100
	pressureHDDDelay = 8 // ms, dm-delay
	// pressureBound is what no probe read, no burst write and no
	// interrupted command may take.
	pressureBound = 10 * time.Second
	// pressureVolume and pressureCache size the volume; the burst writes
	// the first pressureHot bytes, the probes read the rest, which nothing
	// writes before them (cold: every probe is a miss of the write tier).
	pressureVolume = 512 << 20
	pressureCache  = 64 << 20
	pressureHot    = 448 << 20
	// pressureRecords is what each interrupted command must keep: random
	// 4 KiB records, each with fio's crc32c header, written just before.
	pressureRecords = 8 << 20
	// pressureFill is how many dirty blocks the cache holds before the
	// records are written: about 40 s of write-back on this array.
	pressureFill = 8000
)

// TestPressure boots one node for three scenarios: reads under a write
// burst past the cache, then an interrupted flush and an interrupted
// drain, each of a cache holding the burst's dirty blocks and records
// written just before.
func TestPressure(t *testing.T) {
	// Its bounds are 40 times the longest wait it sees (a 0.26 s read,
	// a 0.21 s write in CI): it runs beside another scenario, on one
	// vCPU, as the README's does with its watchdog.
	besideAnother(t, 2*time.Minute)
	began := time.Now()
	n := bootNode(t, nodeSpec{HDDs: 4, HDDSize: 1 << 30, HDDIOPS: pressureHDDIOPS, SSDs: []int64{256 << 20}})
	var hdds []string
	for i, d := range n.hdds() {
		n.mustSh(fmt.Sprintf(`dmsetup create phdd%d --table "0 $(blockdev --getsz %s) delay %s 0 %d"`, i, d, d, pressureHDDDelay))
		hdds = append(hdds, fmt.Sprintf("/dev/mapper/phdd%d", i))
	}
	// No scheduler, as the model has it (the kernel picks mq-deadline for
	// a disk with one hardware queue, which a VM with one vCPU gives).
	n.mustSh(`for d in ` + strings.Join(n.hdds(), " ") + `; do echo none > /sys/block/${d#/dev/}/queue/scheduler; done`)
	n.mustTidectl("pool create tank --assume-clean --raid10 " + strings.Join(hdds, ",") + " --ssd " + n.ssds()[0])
	n.mustTidectl(fmt.Sprintf("volume create db --size %dM --write-cache %dM", pressureVolume>>20, pressureCache>>20))
	t.Logf("HDD queues (scheduler, hardware queues): %s",
		strings.Join(strings.Fields(n.mustSh(`for d in `+strings.Join(n.hdds(), " ")+`; do d=${d#/dev/}; echo "$d:$(sed 's/ /,/g' /sys/block/$d/queue/scheduler)/$(ls /sys/block/$d/mq | wc -l)"; done`)), " "))
	t.Logf("set up in %v", time.Since(began).Round(time.Second))

	stuck := false
	t.Run("ReadUnderWriteBurst", func(t *testing.T) {
		stuck = pressureReadUnderWriteBurst(t, n.on(t))
	})
	if stuck {
		t.Fatal("the burst could not be stopped: the interrupted commands cannot be tried")
	}
	t.Run("InterruptedFlush", func(t *testing.T) {
		pressureInterrupted(t, n.on(t), "volume flush db", "flush interrupted", 1, 480<<20)
	})
	t.Run("InterruptedDrain", func(t *testing.T) {
		pressureInterrupted(t, n.on(t), "volume set-mode db writethrough", "drain interrupted", 2, 488<<20)
	})
	t.Logf("TestPressure took %v", time.Since(began).Round(time.Second))
}

// pressureReadUnderWriteBurst writes 4k blocks at random over the hot part
// of the volume at QD16 until well past the cache, and times single reads
// of cold blocks while it runs. It returns true if the burst could not be
// stopped.
func pressureReadUnderWriteBurst(t *testing.T, n *node) (stuck bool) {
	began := time.Now()
	before := pressureStatus(t, n)
	n.mustSh(fmt.Sprintf("rm -f /run/burst.stop; fio --name=burst --filename=/dev/mapper/tc-db --direct=1 --ioengine=libaio --iodepth=16 --rw=randwrite --bs=4k "+
		"--size=%d --norandommap --randrepeat=0 --time_based --runtime=600 --output-format=json --output=/run/burst.json --trigger-file=/run/burst.stop "+
		">/run/burst.log 2>&1 & echo $! > /run/burst.pid", pressureHot))
	var levels []string
	level := func(at time.Time, s pressureWC) {
		levels = append(levels, fmt.Sprintf("%.0fs:%d/%d", at.Sub(began).Seconds(), s.dirty, s.free))
	}

	// Until the cache is full: from then on a new block goes around it to
	// the HDDs, queued with whatever write-back has in flight.
	deadline := time.Now().Add(90 * time.Second)
	var full pressureWC
	for {
		full = pressureStatus(t, n)
		level(time.Now(), full)
		if full.free <= full.total/100 {
			break
		}
		if time.Now().After(deadline) {
			n.sh("touch /run/burst.stop")
			t.Fatalf("the write cache did not fill in 90 s: %+v; dirty/free over time: %s", full, strings.Join(levels, " "))
		}
		time.Sleep(time.Second)
	}
	fullAt := time.Now()
	t.Logf("write cache full %v after the burst began: %+v", fullAt.Sub(began).Round(time.Second), full)

	// Single O_DIRECT reads of random cold blocks, each timed in the
	// guest, for at least 15 s and 20 reads. A read stuck behind the
	// write-back queue is not waited for past probeGuard: the probe phase
	// fails then, whatever the read would have taken.
	const probeGuard = 3 * pressureBound
	probeEnd := time.Now().Add(150 * time.Second)
	var reads []time.Duration
	var stuckRead string
	hot, cold := pressureHot/4096, (pressureVolume-pressureHot)/4096
	for len(reads) < 100 && (len(reads) < 20 || time.Since(fullAt) < 15*time.Second) {
		guard := min(probeGuard, time.Until(probeEnd))
		if guard <= 0 {
			stuckRead = fmt.Sprintf("the probe phase ran out of its 150 s after %d reads", len(reads))
			break
		}
		res, err := pressureSh(n, guard, fmt.Sprintf(`off=$(( %d + $(od -An -N4 -tu4 /dev/urandom | tr -d ' ') %% %d ))
			s=$(date +%%s%%N)
			dd if=/dev/mapper/tc-db of=/dev/null bs=4k count=1 skip=$off iflag=direct status=none || exit 3
			e=$(date +%%s%%N)
			echo $(( (e - s) / 1000000 ))
			dmsetup status tc-db-wtier`, hot, cold))
		if err != nil {
			stuckRead = fmt.Sprintf("read %d waited > %v: write-back floods the origin (%v)", len(reads)+1, guard.Round(time.Second), err)
			break
		}
		lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
		if res.ExitCode != 0 || len(lines) != 2 {
			t.Fatalf("probe read: exit %d\n%s%s", res.ExitCode, res.Stdout, res.Stderr)
		}
		ms, err := strconv.Atoi(lines[0])
		if err != nil {
			t.Fatalf("probe output %q: %v", res.Stdout, err)
		}
		reads = append(reads, time.Duration(ms)*time.Millisecond)
		level(time.Now(), pressureParse(t, lines[1]))
	}
	probing := time.Since(fullAt)

	// Stop the burst: fio sees its trigger file, ends its job and writes
	// its report (not SIGINT: see liveWriter.stop); on a flooded origin
	// its last writes are still queued.
	stopAt := time.Now()
	if _, err := pressureSh(n, 120*time.Second, fioStopCmd("/run/burst.stop", "/run/burst.pid")); err != nil {
		t.Errorf("the burst did not stop within 120 s of its trigger file: %v", err)
		return true
	}
	stopped := time.Since(stopAt)
	after := pressureStatus(t, n)
	level(time.Now(), after)
	var burst struct {
		Jobs []struct {
			Error int `json:"error"`
			Write struct {
				IOPS    float64 `json:"iops"`
				TotalIO uint64  `json:"total_ios"`
				Clat    struct {
					Max        float64            `json:"max"`
					Percentile map[string]float64 `json:"percentile"`
				} `json:"clat_ns"`
			} `json:"write"`
		} `json:"jobs"`
	}
	report := n.mustSh("cat /run/burst.json")
	if err := json.Unmarshal([]byte(report[strings.Index(report, "{"):]), &burst); err != nil || len(burst.Jobs) != 1 {
		t.Fatalf("fio report: %v\n%s\n%s", err, report, n.sh("cat /run/burst.log").Stdout)
	}
	w := burst.Jobs[0]
	writeMax := time.Duration(w.Write.Clat.Max)
	writeP99 := time.Duration(w.Write.Clat.Percentile["99.000000"])
	// Every block allocated took a free one; every block written back
	// gave one back.
	freed := int64(after.allocated-before.allocated) + int64(after.free) - int64(before.free)
	v := n.volume("db")

	t.Logf("%d probe reads of cold blocks over %v with the cache full: p50 %v, p90 %v, p99 %v, max %v; all: %v",
		len(reads), probing.Round(time.Second), pct(reads, 50), pct(reads, 90), pct(reads, 99), pct(reads, 100), reads)
	t.Logf("burst: %d writes, %.0f IOPS, p99 %v, max %v; stopped %v after the trigger; write tier %+v -> %+v: %d blocks allocated, %d written back, %d around, %d blocked on the free list",
		w.Write.TotalIO, w.Write.IOPS, writeP99.Round(time.Millisecond), writeMax.Round(time.Millisecond), stopped.Round(100*time.Millisecond),
		before, after, after.allocated-before.allocated, freed, after.around-before.around, after.blocked-before.blocked)
	t.Logf("dirty/free blocks over time (of %d): %s", after.total, strings.Join(levels, " "))

	if stuckRead != "" {
		t.Errorf("%s", stuckRead)
	}
	if len(reads) < 20 {
		t.Errorf("%d probe reads timed, want 20", len(reads))
	}
	if slow := pct(reads, 100); slow > pressureBound {
		t.Errorf("a read waited %v under the write burst (bound %v): write-back floods the HDD array's queue", slow, pressureBound)
	}
	if w.Error != 0 || writeMax > pressureBound {
		t.Errorf("burst: fio error %d, slowest write %v (bound %v): writes wait behind write-back", w.Error, writeMax.Round(time.Millisecond), pressureBound)
	}
	if after.allocated-before.allocated < after.total {
		t.Errorf("the burst allocated %d blocks, fewer than the cache's %d: it never filled the cache", after.allocated-before.allocated, after.total)
	}
	if freed <= 0 {
		t.Errorf("no block was written back during the burst: %+v -> %+v", before, after)
	}
	if after.error != 0 || v.Mode != "writeback" || v.State != "active" {
		t.Errorf("after the burst: write tier error %d, volume mode %q state %q (%s), want writeback and active", after.error, v.Mode, v.State, v.Error)
	}
	// What bounds it: the write tier's writeback_jobs, a few per disk of
	// the 4-disk RAID10, which volume show reports with its reason.
	table := n.mustSh("dmsetup table tc-db-wtier")
	jobs := pressureTableJobs(table)
	var show struct {
		Jobs   uint64 `json:"writeback_jobs"`
		Reason string `json:"writeback_limit_reason"`
	}
	if err := json.Unmarshal([]byte(n.mustTidectl("-o json volume show db")), &show); err != nil {
		t.Fatal(err)
	}
	t.Logf("write tier: %s; volume show: writeback_jobs %d (%s)", strings.TrimSpace(table), show.Jobs, show.Reason)
	if jobs < 4 || jobs > 64 {
		t.Errorf("write tier table %q: writeback_jobs %d, want a few per disk of the 4-disk array (4..64)", strings.TrimSpace(table), jobs)
	}
	if show.Jobs != jobs || !strings.Contains(show.Reason, "raid10") {
		t.Errorf("volume show says writeback_jobs %d (%q), the table runs %d", show.Jobs, show.Reason, jobs)
	}
	t.Logf("ReadUnderWriteBurst took %v", time.Since(began).Round(time.Second))
	return false
}

// pressureInterrupted writes records onto a cache still holding the
// burst's dirty blocks, starts a long write-back command (flush, or a mode
// change that drains) and interrupts it with SIGINT while dirty blocks
// remain. The command must stop within pressureBound with a non-zero exit
// saying so, and leave the volume in writeback, its write tier under its
// normal table (no cleaner) caching new writes, and every record intact.
// seed tells this scenario's records from another's; probe is a cold
// offset for the new writes.
func pressureInterrupted(t *testing.T, n *node, args, says string, seed int, probe int64) {
	began := time.Now()
	table := n.mustSh("dmsetup table tc-db-wtier")
	// Blocks to write back ahead of the records, older than they are (so
	// write-back takes them first): what the burst left, or, after a
	// command that wrote everything back, new ones.
	if s := pressureStatus(t, n); s.dirty < pressureFill {
		n.fio(fmt.Sprintf("--name=fill%d --filename=/dev/mapper/tc-db --rw=randwrite --bs=4k --size=%d --io_size=%d --randrepeat=0 --direct=1 --ioengine=libaio --iodepth=16",
			seed, pressureHot, (pressureFill-s.dirty)*4096))
	}
	// Room for the records in the cache: what is left of the burst is
	// written back down to the low watermark.
	recBlocks := uint64(pressureRecords / 4096)
	deadline := time.Now().Add(120 * time.Second)
	for s := pressureStatus(t, n); s.free < recBlocks+512; s = pressureStatus(t, n) {
		if time.Now().After(deadline) {
			t.Fatalf("the write cache has no room for the records after 120 s: %+v", s)
		}
		time.Sleep(time.Second)
	}
	waited := time.Since(began)
	records := fmt.Sprintf("--name=records%d --filename=/dev/mapper/tc-db --rw=randwrite --bs=4k --size=%d --io_size=%d "+
		"--direct=1 --ioengine=libaio --iodepth=16 --verify=crc32c --verify_fatal=1 --do_verify=0 --randseed=%d",
		seed, pressureHot, pressureRecords, 4200+seed)
	wrote, pre := time.Now(), pressureStatus(t, n)
	n.fio(records)
	wrote2 := time.Since(wrote)
	start := pressureStatus(t, n)
	t.Logf("records: %d blocks in %v, %d allocated in the cache, %d around it; cache now %+v",
		recBlocks, wrote2.Round(100*time.Millisecond), start.allocated-pre.allocated, start.around-pre.around, start)
	if start.dirty < 4000 {
		t.Fatalf("only %d dirty blocks: nothing long to interrupt", start.dirty)
	}

	n.mustSh("rm -f /run/cmd.*; ( tidectl " + args + " >/run/cmd.out 2>&1 & echo $! >/run/cmd.pid; wait $!; rc=$?; date +%s%N >/run/cmd.end; echo $rc >/run/cmd.rc ) >/dev/null 2>&1 &")
	// Its write-back has begun once it reports progress; 3 s later, with
	// most of the dirty blocks still to go, it is interrupted.
	phase := strings.Fields(says)[0] + " db:"
	if _, err := pressureSh(n, 60*time.Second, "while ! grep -q '"+phase+"' /run/cmd.out && ! test -e /run/cmd.rc; do sleep 0.1; done"); err != nil {
		t.Fatalf("tidectl %s did not report its progress (%q) within 60 s: %v\n%s", args, phase, err, n.sh("cat /run/cmd.out").Stdout)
	}
	if strings.HasPrefix(args, "volume flush") {
		// The flush holds the node lock for its reloads only: a repair
		// meanwhile takes the lock at once and leaves the flushing
		// table alone (it is not drift while the flush lives).
		began := time.Now()
		res := n.sh("timeout 20 tidectl volume repair db")
		took := time.Since(began)
		if res.ExitCode != 0 {
			t.Errorf("tidectl volume repair db during a flush: exit %d after %v\n%s%s", res.ExitCode, took.Round(100*time.Millisecond), res.Stdout, res.Stderr)
		}
		if live := n.mustSh("dmsetup table tc-db-wtier"); !strings.Contains(live, "high_watermark 0 low_watermark 0") {
			t.Errorf("a repair during the flush replaced its flushing table: %s", live)
		}
		t.Logf("volume repair during the flush: exit %d in %v", res.ExitCode, took.Round(100*time.Millisecond))
	}
	time.Sleep(3 * time.Second)
	if n.sh("test -e /run/cmd.rc").ExitCode == 0 {
		t.Fatalf("tidectl %s ended within 3 s, nothing to interrupt (exit %s):\n%s", args, n.mustSh("cat /run/cmd.rc"), n.mustSh("cat /run/cmd.out"))
	}
	atSignal := pressureStatus(t, n)
	// The guest times the exit from the signal; the host gives up on it
	// after pressureBound and waits for the end only to report it.
	n.mustSh("date +%s%N >/run/cmd.int; kill -INT $(cat /run/cmd.pid)")
	_, err := pressureSh(n, pressureBound+time.Second, "while ! test -e /run/cmd.rc; do sleep 0.1; done")
	if err != nil {
		waitStart := time.Now()
		_, werr := pressureSh(n, 300*time.Second, "while ! test -e /run/cmd.rc; do sleep 1; done")
		ended := "it ended " + (pressureBound + time.Second + time.Since(waitStart)).Round(time.Second).String() + " after SIGINT"
		if werr != nil {
			ended = "it had not ended 5 minutes later"
		}
		t.Errorf("tidectl %s still running %v after SIGINT with %d dirty blocks (%s): a write-back the user cannot stop",
			args, pressureBound, atSignal.dirty, ended)
	}
	rc := strings.TrimSpace(n.sh("cat /run/cmd.rc").Stdout)
	exitIn := time.Duration(0)
	if times := strings.Fields(n.sh("cat /run/cmd.int /run/cmd.end").Stdout); len(times) == 2 {
		i, _ := strconv.ParseInt(times[0], 10, 64)
		e, _ := strconv.ParseInt(times[1], 10, 64)
		exitIn = time.Duration(e - i)
	}
	out := n.sh("cat /run/cmd.out").Stdout
	after := pressureStatus(t, n)
	t.Logf("waited %v for room; tidectl %s started with %d dirty blocks, SIGINT after 3 s with %d; exit %s %v after it, %d dirty left:\n%s",
		waited.Round(time.Second), args, start.dirty, atSignal.dirty, rc, exitIn.Round(10*time.Millisecond), after.dirty, tailLines(out, 6))
	if err == nil && exitIn > pressureBound {
		t.Errorf("tidectl %s exited %v after SIGINT (bound %v)", args, exitIn, pressureBound)
	}
	if rc == "0" || rc == "" {
		t.Errorf("tidectl %s exit status %q after SIGINT, want a failure", args, rc)
	}
	if !strings.Contains(out, says) {
		t.Errorf("tidectl %s output does not say %q:\n%s", args, says, out)
	}

	// The volume is as it was: writeback, its normal write tier.
	if v := n.volume("db"); v.Mode != "writeback" || v.State != "active" {
		t.Errorf("after the interrupted %s: mode %q state %q (%s), want writeback and active", args, v.Mode, v.State, v.Error)
	}
	now := n.mustSh("dmsetup table tc-db-wtier")
	if now != table || strings.Contains(now, "cleaner") {
		t.Errorf("write tier table after the interrupted %s:\n%s\nwant the normal one:\n%s", args, now, table)
	}
	// It still caches new writes: 256 blocks never written before are
	// allocated in the cache, none goes around it.
	s0 := pressureStatus(t, n)
	if s0.free < 512 {
		t.Fatalf("cannot check that the cache takes writes: only %d free blocks: %+v", s0.free, s0)
	}
	n.fio(fmt.Sprintf("--name=new%d --filename=/dev/mapper/tc-db --rw=write --bs=4k --offset=%d --size=1M --direct=1 --ioengine=libaio --iodepth=4 --verify=crc32c --verify_fatal=1", seed, probe))
	s1 := pressureStatus(t, n)
	if s1.allocated-s0.allocated < 256 || s1.around != s0.around {
		t.Errorf("256 new blocks after the interrupted %s: %d allocated in the cache, %d went around it: %+v -> %+v",
			args, s1.allocated-s0.allocated, s1.around-s0.around, s0, s1)
	}
	// Every record reads back with its header and checksum.
	check := time.Now()
	if res := n.sh("fio --output-format=normal " + records + " --verify_only"); res.ExitCode != 0 || !strings.Contains(res.Stdout, "err= 0") {
		t.Errorf("records after the interrupted %s: fio verify exit %d:\n%s\n%s", args, res.ExitCode, fioErrors(res.Stdout), res.Stderr)
	}
	t.Logf("records verified in %v; %s took %v", time.Since(check).Round(100*time.Millisecond), t.Name(), time.Since(began).Round(time.Second))
}

// pressureSh runs a shell command in the guest, giving up on it (and
// killing it there) after d.
func pressureSh(n *node, d time.Duration, cmd string) (harness.Result, error) {
	ctx, cancel := context.WithTimeout(n.t.Context(), d)
	defer cancel()
	return n.Run(ctx, "export PATH="+n.bin+":$PATH; "+cmd)
}

// pressureWC is what the write tier's status says.
type pressureWC struct {
	error, total, free, dirty, allocated, around, blocked uint64
}

func pressureStatus(t *testing.T, n *node) pressureWC {
	t.Helper()
	return pressureParse(t, n.mustSh("dmsetup status tc-db-wtier"))
}

// pressureParse reads a dm-writecache status line of kernel 6.x:
// <start> <len> writecache <error> <#blocks> <#free> <#writeback>
// <reads> <read hits> <writes> <hits uncommitted> <hits committed>
// <around> <allocate> <blocked> <flushes> <discards>
func pressureParse(t *testing.T, line string) pressureWC {
	t.Helper()
	f := strings.Fields(line)
	if len(f) != 17 || f[2] != "writecache" {
		t.Fatalf("write tier status %q", line)
	}
	num := func(i int) uint64 {
		v, err := strconv.ParseUint(f[i], 10, 64)
		if err != nil {
			t.Fatalf("write tier status %q: field %d: %v", line, i, err)
		}
		return v
	}
	return pressureWC{error: num(3), total: num(4), free: num(5), dirty: num(4) - num(5),
		around: num(12), allocated: num(13), blocked: num(14)}
}

// pressureTableJobs returns the writeback_jobs of a writecache table line,
// 0 if it has none (the kernel default).
func pressureTableJobs(table string) uint64 {
	f := strings.Fields(table)
	for i := 0; i+1 < len(f); i++ {
		if f[i] == "writeback_jobs" {
			v, _ := strconv.ParseUint(f[i+1], 10, 64)
			return v
		}
	}
	return 0
}

// pct is the p-th percentile (nearest rank) of ds, 0 for none.
func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(ds))
	return s[max((p*len(s)+99)/100-1, 0)]
}
