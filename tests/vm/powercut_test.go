// SPDX-License-Identifier: Apache-2.0

//go:build vm

package vm_test

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidecache/tidecache/tests/vm/harness"
)

var (
	crashCycles = flag.Int("crash-cycles", 4, "power-cut cycles TestCrashSuite runs (make test-crash N=100)")
	// CI runs TestCrashSuite for 4 cycles: each of its four kinds of cut
	// once (during a flush, after every cache was flushed, during a drain
	// to writethrough, during the change back to writeback). make
	// test-crash runs it, and TestPowerCut, for N. TestPowerCut's
	// fdatasync'd raw records are also written, with O_DSYNC and AIO
	// besides, by TestCrashSuite's raw workloads; make test-vm-all runs it
	// for a few cycles.
	powerCutCycles = flag.Int("powercut-cycles", 4, "power-cut cycles TestPowerCut runs (make test-crash N=100)")
)

// crashSpec is a node whose write cache is small (16 MiB) so that every
// cycle also drives dm-writecache past its high watermark: the power is
// cut while blocks are being written back, not only while they are cached.
var crashSpec = nodeSpec{HDDs: 4, HDDSize: 256 << 20, SSDs: []int64{256 << 20}, MemoryMB: 1024}

const (
	crashDev    = "/dev/mapper/tc-crash"
	crashBlocks = 32768 // 128 MiB volume / 4 KiB records
)

// lastAck returns the highest sequence number acknowledged for a cycle on
// the ack channel, or -1. Lines are "ACK <cycle> <seq>", written by the
// guest only after fdatasync returned; the writer drains the serial port
// (tcdrain) before its next batch, so the last acks before a cut are in the
// file.
func lastAck(acks []byte, cycle int) int64 {
	last := int64(-1)
	sc := bufio.NewScanner(bytes.NewReader(acks))
	for sc.Scan() {
		f := strings.Fields(strings.TrimSpace(sc.Text()))
		if len(f) != 3 || f[0] != "ACK" || f[1] != strconv.Itoa(cycle) {
			continue
		}
		if seq, err := strconv.ParseInt(f[2], 10, 64); err == nil && seq > last {
			last = seq
		}
	}
	return last
}

// TestPowerCut writes checksummed records to a cached volume, each batch
// acknowledged over a serial port only after fdatasync returned, kills qemu
// at a random moment, boots again, runs `tidecached assemble` and checks
// that every acknowledged record is present and intact. Some cycles also
// cut the power in the middle of a flush or of a drain to writethrough.
func TestPowerCut(t *testing.T) {
	bin, err := binaries()
	if err != nil {
		t.Fatal(err)
	}
	dir := harness.TestDir(t)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))

	n := bootNodeIn(t, dir, bin, crashSpec)
	n.createPool("crash")
	n.mustTidectl("volume create crash --size 128M --write-cache 16M")

	var prevAcks []byte
	totalAcked := int64(0)
	for cycle := 1; cycle <= *powerCutCycles; cycle++ {
		if cycle > 1 {
			n = bootNodeIn(t, dir, bin, crashSpec)
			out := n.mustSh("tidecached assemble")
			if !strings.Contains(out, "crash") {
				t.Fatalf("cycle %d: assemble did not bring up the volume:\n%s", cycle, out)
			}
			through := lastAck(prevAcks, cycle-1)
			totalAcked += through + 1
			res := n.sh(fmt.Sprintf("crashwriter verify -dev %s -cycle %d -through %d", crashDev, cycle-1, through))
			if res.ExitCode != 0 {
				t.Fatalf("cycle %d: acknowledged writes lost after power cut:\n%s%s", cycle-1, res.Stdout, res.Stderr)
			}
			t.Logf("cycle %d: %s", cycle-1, strings.TrimSpace(res.Stdout))
			if v := n.volume("crash"); v.Mode != "writeback" {
				// The previous cycle was cut during a drain; go back.
				n.mustTidectl("volume set-mode crash writeback")
			}
		}
		n.mustSh(fmt.Sprintf("crashwriter write -dev %s -ack %s -cycle %d -blocks %d >/run/writer.log 2>&1 &",
			crashDev, n.AckDevice(), cycle, crashBlocks))
		// Let the writer get going, then optionally start a write-back
		// that the power cut will interrupt.
		time.Sleep(time.Duration(500+rng.IntN(2500)) * time.Millisecond)
		switch cycle % 5 {
		case 2:
			n.mustSh("tidectl volume flush crash >/run/flush.log 2>&1 &")
		case 4:
			n.mustSh("tidectl volume set-mode crash writethrough >/run/mode.log 2>&1 &")
		}
		time.Sleep(time.Duration(rng.IntN(3000)) * time.Millisecond)
		if err := n.Kill(); err != nil {
			t.Fatalf("cycle %d: kill: %v", cycle, err)
		}
		if prevAcks, err = n.Acks(); err != nil {
			t.Fatal(err)
		}
		if lastAck(prevAcks, cycle) < 0 {
			t.Logf("cycle %d: no acknowledgement before the cut", cycle)
		}
	}

	// Final boot: check the last cycle, then write everything back and
	// check again from the origin alone (passthrough).
	n = bootNodeIn(t, dir, bin, crashSpec)
	n.mustSh("tidecached assemble")
	last := *powerCutCycles
	through := lastAck(prevAcks, last)
	totalAcked += through + 1
	verify := fmt.Sprintf("crashwriter verify -dev %s -cycle %d -through %d", crashDev, last, through)
	t.Logf("cycle %d: %s", last, strings.TrimSpace(n.mustSh(verify)))
	n.mustTidectl("volume set-mode crash passthrough")
	n.mustSh(verify)
	if totalAcked == 0 {
		t.Fatal("no record was ever acknowledged: the test checked nothing")
	}
	t.Logf("%d power cuts, %d acknowledged records verified", *powerCutCycles, totalAcked)
}
