//go:build vm

package vm_test

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The pressure tests put a volume whose working set is 8× its write cache
// under a sustained random-write burst on an emulated HDD RAID10 (qemu
// caps each disk at 100 IOPS, dm-delay adds 8 ms to every I/O), the regime
// every database reaches and where the kernel's default write-back
// (writeback_jobs of tens of thousands of blocks) made a read wait 27 s
// and a write 43 s in this setup. They assert generous bounds, so that a
// slow machine does not fail them but minutes do.
const (
	pressureHDDIOPS  = 100
	pressureHDDDelay = 8 // ms, dm-delay
	// pressureBound is what no probe read, no burst write and no
	// interrupted command may take.
	pressureBound = 10 * time.Second
)

// TestPressure boots one node for three scenarios that share its burst:
// reads under it, then an interrupted flush and an interrupted drain of
// the dirty cache it leaves.
func TestPressure(t *testing.T) {
	n := bootNode(t, nodeSpec{HDDs: 4, HDDSize: 1 << 30, HDDIOPS: pressureHDDIOPS, SSDs: []int64{256 << 20}})
	var hdds []string
	for i, d := range n.hdds() {
		n.mustSh(fmt.Sprintf(`dmsetup create phdd%d --table "0 $(blockdev --getsz %s) delay %s 0 %d"`, i, d, d, pressureHDDDelay))
		hdds = append(hdds, fmt.Sprintf("/dev/mapper/phdd%d", i))
	}
	n.mustTidectl("pool create tank --assume-clean --raid10 " + strings.Join(hdds, ",") + " --ssd " + n.ssds()[0])
	n.mustTidectl("volume create db --size 512M --write-cache 64M")

	t.Run("ReadUnderWriteBurst", func(t *testing.T) { pressureReadUnderWriteBurst(t, n.on(t)) })
	// The records the interrupted commands must keep: written now, while
	// the cache is still full of the burst's dirty blocks.
	n.mustSh("head -c 8M /dev/urandom > /root/records && dd if=/root/records of=/dev/mapper/tc-db bs=1M seek=100 oflag=direct,dsync status=none")
	records := strings.Fields(n.mustSh("sha256sum /root/records"))[0]
	t.Run("InterruptedFlush", func(t *testing.T) {
		pressureInterrupted(t, n.on(t), "volume flush db", "flush interrupted", records)
	})
	t.Run("InterruptedDrain", func(t *testing.T) {
		pressureInterrupted(t, n.on(t), "volume set-mode db writethrough", "interrupted", records)
	})
}

// pressureReadUnderWriteBurst writes 4k blocks at random over the whole
// volume at QD16 until well past the cache, and times single reads of cold
// blocks while it runs.
func pressureReadUnderWriteBurst(t *testing.T, n *node) {
	before := pressureStatus(t, n)
	n.mustSh("fio --name=burst --filename=/dev/mapper/tc-db --direct=1 --ioengine=libaio --iodepth=16 --rw=randwrite --bs=4k " +
		"--time_based --runtime=50 --randrepeat=0 --output-format=json --output=/root/burst.json >/dev/null 2>&1 & echo $! > /root/burst.pid")
	// Wait until the cache has no free block left: from then on the
	// writes go around it or wait, and write-back runs against them.
	deadline := time.Now().Add(40 * time.Second)
	for pressureStatus(t, n).free > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the write cache did not fill in 40 s: %+v", pressureStatus(t, n))
		}
		time.Sleep(time.Second)
	}
	full := pressureStatus(t, n)
	t.Logf("write cache full after the burst began: %+v", full)

	// 20 single O_DIRECT reads of random 4 KiB blocks, each timed in the
	// guest; the volume is 131072 blocks, the burst touches a fraction.
	out := n.mustSh(`for i in $(seq 1 20); do
		off=$(( $(od -An -N4 -tu4 /dev/urandom | tr -d ' ') % 131072 ))
		s=$(date +%s%N)
		timeout 120 dd if=/dev/mapper/tc-db of=/dev/null bs=4k count=1 skip=$off iflag=direct status=none || echo failed
		echo $(( ($(date +%s%N) - s) / 1000000 ))
	done`)
	var reads []time.Duration
	for _, f := range strings.Fields(out) {
		if f == "failed" {
			t.Fatalf("a probe read failed:\n%s", out)
		}
		ms, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("probe output %q: %v", out, err)
		}
		reads = append(reads, time.Duration(ms)*time.Millisecond)
	}
	slowest := maxDuration(reads)
	n.mustSh("while kill -0 $(cat /root/burst.pid) 2>/dev/null; do sleep 1; done")
	var burst struct {
		Jobs []struct {
			Error int `json:"error"`
			Write struct {
				IOPS float64 `json:"iops"`
				Clat struct {
					Max float64 `json:"max"`
				} `json:"clat_ns"`
			} `json:"write"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal([]byte(n.mustSh("cat /root/burst.json")), &burst); err != nil || len(burst.Jobs) != 1 {
		t.Fatalf("fio report: %v", err)
	}
	w := burst.Jobs[0]
	writeMax := time.Duration(w.Write.Clat.Max)
	after := pressureStatus(t, n)
	t.Logf("%d probe reads under the burst: slowest %v (all: %v); burst: %.0f write IOPS, slowest write %v; write tier %+v",
		len(reads), slowest, reads, w.Write.IOPS, writeMax.Round(time.Millisecond), after)

	if len(reads) != 20 {
		t.Fatalf("%d probe reads timed, want 20:\n%s", len(reads), out)
	}
	if slowest > pressureBound {
		t.Errorf("a read waited %v under the write burst (bound %v): write-back floods the HDD array's queue", slowest, pressureBound)
	}
	if w.Error != 0 || writeMax > pressureBound {
		t.Errorf("burst: fio error %d, slowest write %v (bound %v)", w.Error, writeMax, pressureBound)
	}
	if after.around == before.around && after.allocated == before.allocated {
		t.Errorf("the burst neither filled the cache nor went around it: %+v -> %+v", before, after)
	}
	// What bounds it: the write tier runs with the bound derived from the
	// 4-disk RAID10 (8 I/Os per disk, 2 copies).
	if table := n.mustSh("dmsetup table tc-db-wtier"); !strings.Contains(table, "writeback_jobs 16") {
		t.Errorf("write tier table %q: want writeback_jobs 16, derived from the 4-disk RAID10", strings.TrimSpace(table))
	}
	if show := n.mustTidectl("volume show db"); !strings.Contains(show, "write-back: at most 16 blocks in flight") || !strings.Contains(show, "raid10 of 4 rotating disks") {
		t.Errorf("volume show does not say the write-back bound and why:\n%s", show)
	}
}

// pressureInterrupted starts a long write-back command (flush, or a mode
// change that drains), interrupts it with SIGINT while dirty blocks remain,
// and checks that it stops within pressureBound, fails saying so, and
// leaves the volume in writeback with its normal write tier table and
// every record written before.
func pressureInterrupted(t *testing.T, n *node, args, says, records string) {
	table := n.mustSh("dmsetup table tc-db-wtier")
	if d := pressureStatus(t, n).dirty; d < 2000 {
		t.Fatalf("only %d dirty blocks: nothing long to interrupt", d)
	}
	n.mustSh("tidectl " + args + " >/root/cmd.out 2>&1 & echo $! > /root/cmd.pid")
	time.Sleep(3 * time.Second)
	if res := n.sh("kill -0 $(cat /root/cmd.pid)"); res.ExitCode != 0 {
		t.Fatalf("tidectl %s ended within 3 s, nothing to interrupt:\n%s", args, n.mustSh("cat /root/cmd.out"))
	}
	dirtyAtSignal := pressureStatus(t, n).dirty
	start := time.Now()
	n.mustSh("kill -INT $(cat /root/cmd.pid)")
	limit := int(pressureBound / (100 * time.Millisecond))
	res := n.sh(fmt.Sprintf("i=0; while kill -0 $(cat /root/cmd.pid) 2>/dev/null; do i=$((i+1)); [ $i -gt %d ] && exit 1; sleep 0.1; done", limit))
	stopped := time.Since(start)
	out := n.mustSh("cat /root/cmd.out")
	t.Logf("tidectl %s: interrupted with %d dirty blocks, stopped %v after SIGINT:\n%s", args, dirtyAtSignal, stopped.Round(10*time.Millisecond), out)
	if res.ExitCode != 0 {
		// Wait for it anyway, so the next scenario starts clean.
		n.sh("while kill -0 $(cat /root/cmd.pid) 2>/dev/null; do sleep 1; done")
		t.Fatalf("tidectl %s still running %v after SIGINT (it took %v in all): a write-back the user cannot stop", args, pressureBound, time.Since(start).Round(time.Second))
	}
	if !strings.Contains(out, says) {
		t.Errorf("tidectl %s output does not say %q:\n%s", args, says, out)
	}
	var v struct {
		Mode string `json:"mode"`
	}
	if err := json.Unmarshal([]byte(n.mustTidectl("volume show db -o json")), &v); err != nil || v.Mode != "writeback" {
		t.Errorf("after the interrupted %s: mode %q (%v), want writeback", args, v.Mode, err)
	}
	if now := n.mustSh("dmsetup table tc-db-wtier"); now != table {
		t.Errorf("write tier table after the interrupted %s:\n%s\nwant the normal one:\n%s", args, now, table)
	}
	if got := strings.Fields(n.mustSh("dd if=/dev/mapper/tc-db bs=1M skip=100 count=8 iflag=direct status=none | sha256sum"))[0]; got != records {
		t.Errorf("records after the interrupted %s: sha256 %s, want %s", args, got, records)
	}
}

// pressureWC is what the write tier's status says.
type pressureWC struct {
	dirty, free, allocated, around uint64
}

func pressureStatus(t *testing.T, n *node) pressureWC {
	t.Helper()
	// <start> <len> writecache <error> <#blocks> <#free> <#writeback>
	// <reads> <read hits> <writes> <hits uncommitted> <hits committed>
	// <around> <allocate> <blocked> <flushes> <discards>
	f := strings.Fields(n.mustSh("dmsetup status tc-db-wtier"))
	if len(f) != 17 || f[2] != "writecache" {
		t.Fatalf("write tier status %q", f)
	}
	num := func(i int) uint64 {
		v, err := strconv.ParseUint(f[i], 10, 64)
		if err != nil {
			t.Fatalf("write tier status %q: field %d: %v", f, i, err)
		}
		return v
	}
	return pressureWC{dirty: num(4) - num(5), free: num(5), allocated: num(13), around: num(12)}
}

func maxDuration(ds []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}
