// SPDX-License-Identifier: Apache-2.0

//go:build vm

package vm_test

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidecache/tidecache/tests/vm/harness"
)

// The stack TestReadFirst builds: /dev/vda behind dm-delay (20 ms per
// read and write: a slow disk), readfirst over it, and dm-writecache (SSD
// mode, on /dev/vdb) over readfirst. Its high watermark is above what the
// test writes, so nothing is written back until the test asks for a flush.
const (
	rfOriginSectors = 131072 // 64 MiB
	rfCacheSectors  = 32768  // 16 MiB
	rfDev           = "/dev/mapper/tcrf"
	rfCache         = "/dev/mapper/tcrf-wc"
)

var rfTables = fmt.Sprintf(`set -e
dmsetup create tcrf-slow --table "0 %[1]d delay /dev/vda 0 20"
dmsetup create tcrf --table "0 %[1]d readfirst /dev/mapper/tcrf-slow 1000 50"
dmsetup create tcrf-ssd --table "0 %[2]d linear /dev/vdb 0"
dmsetup create tcrf-wc --table "0 %[1]d writecache s /dev/mapper/tcrf /dev/mapper/tcrf-ssd 4096 6 high_watermark 95 low_watermark 90 writeback_jobs 16"
`, rfOriginSectors, rfCacheSectors)

// rfStatus is the INFO status of a readfirst target.
type rfStatus struct{ reads, heldNow, heldTotal, releasedLate, maxHoldMs, idleMs int64 }

// readfirstStatus parses `dmsetup status` of a readfirst device: "0 <len>
// readfirst <reads_in_flight> <held_now> <held_total> <released_late>
// <max_hold_ms> <idle_ms>".
func readfirstStatus(t *testing.T, v *harness.VM, dev string) rfStatus {
	t.Helper()
	line := strings.TrimSpace(v.MustRun(t, "dmsetup status "+dev))
	f := strings.Fields(line)
	if len(f) != 9 || f[2] != "readfirst" {
		t.Fatalf("%s: status %q: want 0 <len> readfirst <reads> <held_now> <held_total> <released_late> <max_hold_ms> <idle_ms>", dev, line)
	}
	var n [6]int64
	for i := range n {
		var err error
		if n[i], err = strconv.ParseInt(f[3+i], 10, 64); err != nil {
			t.Fatalf("%s: status %q: field %d: %v", dev, line, 4+i, err)
		}
	}
	return rfStatus{n[0], n[1], n[2], n[3], n[4], n[5]}
}

// rfPattern writes (or with verify set, checks) size bytes at offset in
// 4 KiB blocks carrying fio's checksums, with direct I/O: writes with
// REQ_SYNC, which readfirst never holds.
func rfPattern(dev string, offset, size int64, verify bool) string {
	mode := "--do_verify=0"
	if verify {
		mode = "--verify_only=1"
	}
	return fmt.Sprintf("fio --name=rf --filename=%s --ioengine=libaio --direct=1 --rw=write --bs=4k --iodepth=8 --offset=%d --size=%d "+
		"--verify=crc32c --verify_fatal=1 %s --output-format=terse >/dev/null", dev, offset, size, mode)
}

// rfReads is a background random-read stream of secs seconds at QD4 over
// the 16 MiB of dev from 40 MiB on, which nothing writes: every read misses
// the write cache and waits on the slow disk.
func rfReads(dev string, secs int) string {
	return fmt.Sprintf("(fio --name=reads --filename=%s --ioengine=libaio --direct=1 --rw=randread --bs=4k --iodepth=4 "+
		"--offset=40m --size=16m --time_based --runtime=%d --output-format=terse >/run/rf-reads.out 2>&1; echo $? >/run/rf-reads.rc) &", dev, secs)
}

// rfFlush runs dm-writecache's flush in the background: it writes back
// every dirty block through kcopyd, whose writes carry no REQ_SYNC.
const rfFlush = "(s=$(date +%s%N); dmsetup message tcrf-wc 0 flush; r=$?; echo $r $((($(date +%s%N) - s) / 1000000))ms >/run/rf-flush.done) &"

// writecacheUsed returns the blocks a dm-writecache holds: total minus
// free (the 2nd and 3rd status fields). It frees a block once written
// back, so for this stack it is the dirty count.
func writecacheUsed(t *testing.T, v *harness.VM, dev string) int64 {
	t.Helper()
	f := strings.Fields(v.MustRun(t, "dmsetup status "+dev))
	if len(f) < 6 || f[2] != "writecache" {
		t.Fatalf("%s: status %v: want a writecache", dev, f)
	}
	total, err1 := strconv.ParseInt(f[4], 10, 64)
	free, err2 := strconv.ParseInt(f[5], 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("%s: status %v: %v %v", dev, f, err1, err2)
	}
	return total - free
}

// waitFlush waits for rfFlush to finish and returns how long it took.
func waitFlush(t *testing.T, v *harness.VM) string {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		res, err := v.Run(t.Context(), "cat /run/rf-flush.done 2>/dev/null")
		if err == nil && res.ExitCode == 0 && strings.TrimSpace(res.Stdout) != "" {
			f := strings.Fields(res.Stdout)
			if len(f) != 2 || f[0] != "0" {
				t.Fatalf("dm-writecache flush: %q, want exit 0 and its time", res.Stdout)
			}
			v.MustRun(t, "rm -f /run/rf-flush.done")
			return f[1]
		}
		if time.Now().After(deadline) {
			t.Fatalf("dm-writecache flush not done in 3 minutes; readfirst %+v", readfirstStatus(t, v, rfDev))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// readsThenFlush starts rfReads for secs seconds on the write cache, waits
// until its reads are in flight below it (fio takes seconds to start under
// emulation), then starts rfFlush.
func readsThenFlush(t *testing.T, v *harness.VM, secs int) {
	t.Helper()
	v.MustRun(t, rfReads(rfCache, secs))
	v.MustRun(t, "for i in $(seq 300); do set -- $(dmsetup status tcrf); [ $4 -gt 0 ] && exit 0; sleep 0.1; done; echo no read in flight after 30 s; exit 1")
	v.MustRun(t, rfFlush)
}

// waitReads waits for rfReads to end and checks that fio saw no error.
func waitReads(t *testing.T, v *harness.VM) {
	t.Helper()
	v.MustRun(t, "while [ ! -s /run/rf-reads.rc ]; do sleep 0.2; done")
	if rc := strings.TrimSpace(v.MustRun(t, "cat /run/rf-reads.rc; rm -f /run/rf-reads.rc")); rc != "0" {
		t.Fatalf("background reads: fio exit %s\n%s", rc, v.MustRun(t, "cat /run/rf-reads.out"))
	}
}

// TestReadFirst checks the readfirst target (kernel/dm-readfirst) under
// dm-writecache, over a slow disk: writes that someone waits for (direct
// I/O) are never held; dm-writecache's write-back (kcopyd, no REQ_SYNC) is
// held while reads wait on the disk and released at max_hold_ms at the
// latest, so a flush under reads still ends; every block written back
// reaches the disk; "max_hold_ms 0" stops holding; a suspend releases what
// is held at once instead of after max_hold_ms; the table, status and
// message refuse bad arguments.
func TestReadFirst(t *testing.T) {
	besideAnother(t, 100*time.Second)
	dir := harness.TestDir(t)
	v := harness.MustBoot(t, harness.Config{Name: "readfirst", Dir: dir, MemoryMiB: 1024, CPUs: vmCPUs(t), Disks: []harness.Disk{
		{Path: filepath.Join(dir, "origin.img"), Size: rfOriginSectors * 512},
		{Path: filepath.Join(dir, "ssd.img"), Size: rfCacheSectors * 512},
	}})
	if out := v.MustRun(t, "dmsetup targets"); !regexp.MustCompile(`(?m)^readfirst\s+v1\.0\.0$`).MatchString(out) {
		t.Fatalf("readfirst v1.0.0 not among the guest's targets:\n%s", out)
	}
	v.MustRun(t, rfTables)

	slow := strings.TrimSpace(v.MustRun(t, "dmsetup info -c --noheadings -o major,minor --separator : tcrf-slow"))
	if got, want := strings.TrimSpace(v.MustRun(t, "dmsetup table tcrf")), fmt.Sprintf("0 %d readfirst %s 1000 50", rfOriginSectors, slow); got != want {
		t.Fatalf("table %q, want %q", got, want)
	}
	if s := readfirstStatus(t, v, rfDev); s != (rfStatus{maxHoldMs: 1000, idleMs: 50}) {
		t.Fatalf("fresh target: status %+v, want counters at zero and the table's settings", s)
	}
	for _, bad := range []struct{ what, cmd string }{
		{"two arguments", `dmsetup create tcrf-bad --table "0 8 readfirst /dev/mapper/tcrf-slow 1000"`},
		{"a bound past 60000 ms", `dmsetup create tcrf-bad --table "0 8 readfirst /dev/mapper/tcrf-slow 60001 50"`},
		{"a bound that is no number", `dmsetup create tcrf-bad --table "0 8 readfirst /dev/mapper/tcrf-slow 1s 50"`},
		{"an idle window past 60000 ms", `dmsetup create tcrf-bad --table "0 8 readfirst /dev/mapper/tcrf-slow 1000 60001"`},
		{"an unknown message", "dmsetup message tcrf 0 hold 5"},
		{"a message bound past 60000 ms", "dmsetup message tcrf 0 max_hold_ms 60001"},
		{"a message idle window that is no number", "dmsetup message tcrf 0 idle_ms x"},
	} {
		if res, err := v.Run(t.Context(), bad.cmd+" 2>&1; r=$?; dmsetup remove tcrf-bad 2>/dev/null; exit $r"); err != nil || res.ExitCode == 0 {
			t.Errorf("%s (%s): exit %d, %v; want a refusal", bad.what, bad.cmd, res.ExitCode, err)
		}
	}

	// Direct writes beside reads: someone waits for them, never held.
	v.MustRun(t, rfReads(rfDev, 6))
	v.MustRun(t, "for i in $(seq 300); do set -- $(dmsetup status tcrf); [ $4 -gt 0 ] && exit 0; sleep 0.1; done; echo no read in flight after 30 s; exit 1")
	v.MustRun(t, rfPattern(rfDev, 32<<20, 2<<20, false))
	waitReads(t, v)
	if s := readfirstStatus(t, v, rfDev); s.heldTotal != 0 || s.reads != 0 {
		t.Fatalf("after direct writes beside reads: status %+v, want nothing held and no read in flight", s)
	}
	v.MustRun(t, rfPattern(rfDev, 32<<20, 2<<20, true))

	// Write-back beside reads: held, released at max_hold_ms at the
	// latest, and the flush ends.
	v.MustRun(t, rfPattern(rfCache, 0, 8<<20, false))
	dirty := writecacheUsed(t, v, "tcrf-wc")
	if dirty < 2048 {
		t.Fatalf("after 8 MiB of writes: %d blocks in the write cache, want 2048 (no write-back yet)", dirty)
	}
	readsThenFlush(t, v, 10)
	var peak int64
	for i := 0; i < 12; i++ {
		time.Sleep(500 * time.Millisecond)
		peak = max(peak, readfirstStatus(t, v, rfDev).heldNow)
	}
	took := waitFlush(t, v)
	waitReads(t, v)
	s := readfirstStatus(t, v, rfDev)
	t.Logf("flush of %d blocks beside 10 s of reads: %s; readfirst %+v, at most %d writes held at once", dirty, took, s, peak)
	if s.heldTotal == 0 || peak == 0 || s.releasedLate == 0 {
		t.Errorf("write-back beside reads: status %+v, peak %d held; want writes held, some released at max_hold_ms", s, peak)
	}
	if s.heldNow != 0 || s.reads != 0 {
		t.Errorf("after the flush and the reads: status %+v, want nothing held or in flight", s)
	}
	if used := writecacheUsed(t, v, "tcrf-wc"); used != 0 {
		t.Errorf("after the flush: %d blocks in the write cache, want 0", used)
	}
	// Every block written back is on the disk under the stack.
	v.MustRun(t, rfPattern("/dev/mapper/tcrf-slow", 0, 8<<20, true))

	// max_hold_ms 0: nothing held, whatever the reads. The bound in
	// force changes, the table line keeps the table's.
	v.MustRun(t, "dmsetup message tcrf 0 max_hold_ms 0")
	if s, table := readfirstStatus(t, v, rfDev), strings.Fields(v.MustRun(t, "dmsetup table tcrf")); s.maxHoldMs != 0 || table[len(table)-2] != "1000" {
		t.Fatalf("after max_hold_ms 0: status %+v, table %v; want 0 in force, 1000 in the table", s, table)
	}
	before := readfirstStatus(t, v, rfDev)
	v.MustRun(t, rfPattern(rfCache, 8<<20, 4<<20, false))
	readsThenFlush(t, v, 4)
	waitFlush(t, v)
	waitReads(t, v)
	if s := readfirstStatus(t, v, rfDev); s.heldTotal != before.heldTotal {
		t.Errorf("with max_hold_ms 0: status %+v -> %+v, want nothing more held", before, s)
	}
	v.MustRun(t, rfPattern("/dev/mapper/tcrf-slow", 8<<20, 4<<20, true))

	// A suspend releases held writes at once, not after max_hold_ms (a
	// minute here).
	v.MustRun(t, "dmsetup message tcrf 0 max_hold_ms 60000")
	v.MustRun(t, rfPattern(rfCache, 12<<20, 4<<20, false))
	readsThenFlush(t, v, 15)
	v.MustRun(t, "for i in $(seq 300); do set -- $(dmsetup status tcrf); [ $5 -gt 0 ] && exit 0; sleep 0.1; done; echo no write held after 30 s; dmsetup status tcrf tcrf-wc; exit 1")
	start := time.Now()
	v.MustRun(t, "dmsetup suspend tcrf")
	suspended := time.Since(start)
	held := readfirstStatus(t, v, rfDev).heldNow
	v.MustRun(t, "dmsetup resume tcrf")
	t.Logf("suspend with writes held (max_hold_ms 60000): %v, %d held when suspended", suspended.Round(time.Millisecond), held)
	if suspended > 30*time.Second || held != 0 {
		t.Errorf("suspend with writes held: took %v and left %d held; want the held writes released at once", suspended, held)
	}
	v.MustRun(t, "dmsetup message tcrf 0 max_hold_ms 0")
	waitFlush(t, v)
	waitReads(t, v)
	v.MustRun(t, rfPattern("/dev/mapper/tcrf-slow", 0, 16<<20, true))
	v.MustRun(t, rfPattern(rfCache, 0, 16<<20, true))
}

// writeTierOrigin returns the device tc-<vol>-wtier writes back to, as
// "major:minor", and that of the device named dev.
func writeTierOrigin(t *testing.T, n *node, vol, dev string) (origin, want string) {
	t.Helper()
	f := strings.Fields(n.mustSh("dmsetup table tc-" + vol + "-wtier"))
	if len(f) < 6 || f[2] != "writecache" {
		t.Fatalf("tc-%s-wtier table %v: want a writecache", vol, f)
	}
	want = strings.TrimSpace(n.mustSh("dmsetup info -c --noheadings --separator : -o major,minor " + dev + " | tr -d ' '"))
	return f[4], want
}

// TestReadFirstLayer checks the readfirst layer of the product's stack: a
// new writeback volume gets tc-<vol>-rfirst between its write tier and the
// origin, and `volume show` and the status report it; `volume tune
// --readfirst-max-hold 0` takes it out and `--reset` puts it back, live,
// with dirty blocks in the cache and none of them lost or drained; a
// volume running the stack of a tidecache without the layer (made here by
// hand) gets it from `volume repair`, the same way.
func TestReadFirstLayer(t *testing.T) {
	besideAnother(t, 30*time.Second)
	n := bootNode(t, smallNode)
	n.createPool("tank")
	n.mustTidectl("volume create db --size 128M --write-cache 32M")
	hasLayer := func(when string, want bool) {
		t.Helper()
		got, layer := writeTierOrigin(t, n, "db", "tc-db-origin")
		if want {
			_, layer = writeTierOrigin(t, n, "db", "tc-db-rfirst")
		}
		if got != layer {
			t.Fatalf("%s: the write tier writes back to %s, want %s (layer %v)\n%s", when, got, layer, want, n.mustSh("dmsetup table"))
		}
		if running := n.mustSh("dmsetup info tc-db-rfirst >/dev/null 2>&1 && echo yes || echo no"); (strings.TrimSpace(running) == "yes") != want {
			t.Fatalf("%s: tc-db-rfirst running: %s, want %v", when, running, want)
		}
	}
	hasLayer("new volume", true)
	if tbl := n.mustSh("dmsetup table tc-db-rfirst"); !strings.HasSuffix(strings.TrimSpace(tbl), " 1000 50") {
		t.Fatalf("tc-db-rfirst table %q: want the default hold of 1000 ms and idle window of 50 ms", tbl)
	}
	if v := n.volume("db"); v.ReadFirst == nil || v.ReadFirst.MaxHoldMs != 1000 {
		t.Fatalf("volume show: read_first %+v, want the layer's status", v.ReadFirst)
	}
	if show := n.mustTidectl("volume show db"); !strings.Contains(show, "read-first: write-back held up to 1000 ms") {
		t.Fatalf("volume show does not describe the layer:\n%s", show)
	}

	// Dirty blocks, with checksums, that the changes below must keep.
	data := fioJob("/dev/mapper/tc-db", "rfl", "randwrite", "0", "16M")
	n.fio(data)
	dirty := func(when string) uint64 {
		t.Helper()
		v := n.volume("db")
		if v.WriteCache == nil || v.WriteCache.DirtyBlocks == 0 {
			t.Fatalf("%s: no dirty block left (%+v): the change drained the cache", when, v.WriteCache)
		}
		return v.WriteCache.DirtyBlocks
	}
	before := dirty("after the writes")

	n.mustTidectl("volume tune db --readfirst-max-hold 0")
	hasLayer("tuned to 0", false)
	if show := n.mustTidectl("volume show db"); !strings.Contains(show, "read-first: off") || !strings.Contains(show, "no read-first layer") {
		t.Fatalf("volume show after --readfirst-max-hold 0:\n%s", show)
	}
	n.fio(data + " --verify_only")
	n.mustTidectl("volume check db")

	n.mustTidectl("volume tune db --reset")
	hasLayer("reset", true)
	n.fio(data + " --verify_only")

	// The stack of a tidecache without the layer, as an upgrade finds it.
	n.mustSh(`set -e
o=$(dmsetup info -c --noheadings --separator : -o major,minor tc-db-origin | tr -d ' ')
wc=$(dmsetup table tc-db-wtier | awk -v o="$o" '{$5 = o; print}')
dmsetup suspend tc-db-wtier
dmsetup load tc-db-wtier --table "$wc"
dmsetup resume tc-db-wtier
dmsetup remove tc-db-rfirst`)
	hasLayer("hand-made old stack", false)
	if res := n.tidectl("volume check db"); res.ExitCode == 0 {
		t.Fatalf("volume check passes a stack without the layer:\n%s", res.Stdout)
	}
	n.mustTidectl("volume repair db")
	hasLayer("repair", true)
	n.mustTidectl("volume check db")
	n.fio(data + " --verify_only")
	if after := dirty("after the changes"); after > before {
		t.Fatalf("dirty blocks grew from %d to %d with no write", before, after)
	}
}
