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

// The stacks TestFUAFlush builds on two disks: /dev/vda holds two 64 MiB
// origins, /dev/vdb two 16 MiB caches (dm-linear slices). Stack A is
// dm-writecache (SSD mode) with fuaflush on top; stack B is the same
// dm-writecache alone. Autocommit is pushed to its maximum (1 hour) so that
// only flushes commit the caches' metadata.
const (
	fuaOriginSectors = 131072
	fuaCacheSectors  = 32768
	fuaTop           = "/dev/mapper/tcff-a"    // fuaflush over writecache A
	fuaBareWC        = "/dev/mapper/tcff-wc-b" // writecache B, nothing on top
)

var fuaTables = fmt.Sprintf(`set -e
dmsetup create tcff-origin-a --table "0 %[1]d linear /dev/vda 0"
dmsetup create tcff-origin-b --table "0 %[1]d linear /dev/vda %[1]d"
dmsetup create tcff-ssd-a --table "0 %[2]d linear /dev/vdb 0"
dmsetup create tcff-ssd-b --table "0 %[2]d linear /dev/vdb %[2]d"
for s in a b; do
	dmsetup create tcff-wc-$s --table "0 %[1]d writecache s /dev/mapper/tcff-origin-$s /dev/mapper/tcff-ssd-$s 4096 4 autocommit_blocks 65536 autocommit_time 3600000"
done
dmsetup create tcff-a --table "0 %[1]d fuaflush /dev/mapper/tcff-wc-a"
`, fuaOriginSectors, fuaCacheSectors)

// fuaWrite is fio writing FUA-only bios: O_DIRECT|O_DSYNC through libaio on
// a block device sends each write with REQ_FUA and, being asynchronous, no
// flush after it (a synchronous O_DSYNC write would be followed by one).
// The buffers hold the byte 0x5a.
func fuaWrite(dev string, offset, size int64, extra string) string {
	return fmt.Sprintf("fio --name=fua --filename=%s --ioengine=libaio --direct=1 --sync=dsync "+
		"--rw=write --bs=4k --iodepth=8 --offset=%d --size=%d --buffer_pattern=0x5a --scramble_buffers=0 "+
		"--output-format=terse %s >/dev/null", dev, offset, size, extra)
}

// fuaStatus is the INFO status of a fuaflush target.
type fuaStatus struct{ fuaWrites, flushes, flushErrors int64 }

var fuaTableLine = regexp.MustCompile(`^0 (\d+) fuaflush (\d+:\d+)$`)

// fuaflushStatus parses `dmsetup status` of a fuaflush device:
// "0 <len> fuaflush <fua_writes> <flushes> <flush_errors>".
func fuaflushStatus(t *testing.T, v *harness.VM, dev string) fuaStatus {
	t.Helper()
	line := strings.TrimSpace(v.MustRun(t, "dmsetup status "+dev))
	f := strings.Fields(line)
	if len(f) != 6 || f[2] != "fuaflush" {
		t.Fatalf("%s: status %q: want 0 <len> fuaflush <fua_writes> <flushes> <flush_errors>", dev, line)
	}
	var n [3]int64
	for i := range n {
		var err error
		if n[i], err = strconv.ParseInt(f[3+i], 10, 64); err != nil {
			t.Fatalf("%s: status %q: field %d: %v", dev, line, 4+i, err)
		}
	}
	return fuaStatus{n[0], n[1], n[2]}
}

// writecacheFlushes returns the flushes counter of a dm-writecache status
// (the 13th of its 14 fields on 6.x).
func writecacheFlushes(t *testing.T, v *harness.VM, dev string) int64 {
	t.Helper()
	line := strings.TrimSpace(v.MustRun(t, "dmsetup status "+dev))
	f := strings.Fields(line)
	if len(f) != 3+14 || f[2] != "writecache" || f[3] != "0" {
		t.Fatalf("%s: status %q: want a healthy writecache with 14 fields", dev, line)
	}
	n, err := strconv.ParseInt(f[3+12], 10, 64)
	if err != nil {
		t.Fatalf("%s: status %q: %v", dev, line, err)
	}
	return n
}

// readPattern reports whether the 4 KiB block at offset reads back as the
// 0x5a bytes fuaWrite wrote, and what it holds otherwise.
func readPattern(t *testing.T, v *harness.VM, dev string, offset int64) (bool, string) {
	t.Helper()
	out := v.MustRun(t, fmt.Sprintf("dd if=%s bs=4096 skip=%d count=1 iflag=direct status=none | od -An -v -tx1 | "+
		"awk '{for (i = 1; i <= NF; i++) n[$i]++} END {for (b in n) print n[b], b}' | sort -rn | head -3",
		dev, offset/4096))
	got := strings.Join(strings.Fields(out), " ")
	return got == "4096 5a", got
}

// TestFUAFlush checks the fuaflush target (kernel/dm-fuaflush) over
// dm-writecache in SSD mode: each FUA write is followed by a flush that
// reaches dm-writecache (its metadata commit), plain writes are not, the
// table and status lines have the documented shape, a reload under FUA
// load works, a failed data write is not flushed, and an acknowledged
// FUA-only write into a new cache block survives a power cut. The same
// write to dm-writecache without fuaflush is expected to be lost: that
// side is logged, not asserted.
func TestFUAFlush(t *testing.T) {
	besideAnother(t, 30*time.Second)
	dir := harness.TestDir(t)
	cfg := harness.Config{Name: "fuaflush", Dir: dir, MemoryMiB: 1024, Disks: []harness.Disk{
		{Path: filepath.Join(dir, "origin.img"), Size: 2 * fuaOriginSectors * 512},
		{Path: filepath.Join(dir, "ssd.img"), Size: 2 * fuaCacheSectors * 512},
	}}
	v := harness.MustBoot(t, cfg)
	if out := v.MustRun(t, "dmsetup targets"); !regexp.MustCompile(`(?m)^fuaflush\s+v1\.0\.0$`).MatchString(out) {
		t.Fatalf("fuaflush v1.0.0 not among the guest's targets:\n%s", out)
	}
	v.MustRun(t, fuaTables)

	// Table line: the device below as major:minor.
	table := strings.TrimSpace(v.MustRun(t, "dmsetup table "+fuaTop))
	m := fuaTableLine.FindStringSubmatch(table)
	if m == nil || m[1] != strconv.Itoa(fuaOriginSectors) {
		t.Fatalf("table %q: want 0 %d fuaflush <major:minor>", table, fuaOriginSectors)
	}
	below := strings.TrimSpace(v.MustRun(t, "dmsetup info -c --noheadings -o major,minor --separator : tcff-wc-a"))
	if m[2] != below {
		t.Fatalf("table %q names %s, writecache A is %s", table, m[2], below)
	}
	if s := fuaflushStatus(t, v, fuaTop); s != (fuaStatus{}) {
		t.Fatalf("fresh target: status %+v, want all zero", s)
	}

	// Plain writes: neither counted nor flushed.
	wcBefore := writecacheFlushes(t, v, "tcff-wc-a")
	v.MustRun(t, fmt.Sprintf("fio --name=plain --filename=%s --ioengine=libaio --direct=1 --rw=write --bs=4k --iodepth=8 --size=256k --output-format=terse >/dev/null", fuaTop))
	if s := fuaflushStatus(t, v, fuaTop); s != (fuaStatus{}) {
		t.Errorf("after 64 plain writes: status %+v, want all zero", s)
	}
	if n := writecacheFlushes(t, v, "tcff-wc-a"); n != wcBefore {
		t.Errorf("after 64 plain writes: writecache flushes %d -> %d, want unchanged", wcBefore, n)
	}

	// FUA-only writes: every one counted, each completed after a flush
	// that dm-writecache saw; concurrent ones may share a flush.
	v.MustRun(t, fuaWrite(fuaTop, 1<<20, 256<<10, ""))
	s := fuaflushStatus(t, v, fuaTop)
	wcAfter := writecacheFlushes(t, v, "tcff-wc-a")
	t.Logf("64 FUA writes at iodepth 8: fuaflush status %+v, writecache flushes %d -> %d", s, wcBefore, wcAfter)
	if s.fuaWrites != 64 || s.flushes < 1 || s.flushes > 64 || s.flushErrors != 0 {
		t.Errorf("after 64 FUA writes: status %+v, want 64 fua_writes, 1-64 flushes, no errors", s)
	}
	if wcAfter-wcBefore != s.flushes {
		t.Errorf("fuaflush issued %d flushes, writecache saw %d", s.flushes, wcAfter-wcBefore)
	}

	// A FUA write whose data write fails completes with the error at once,
	// without a flush.
	v.MustRun(t, `dmsetup create tcff-err --table "0 8 error" && dmsetup create tcff-errtop --table "0 8 fuaflush /dev/mapper/tcff-err"`)
	if res, err := v.Run(t.Context(), "dd if=/dev/zero of=/dev/mapper/tcff-errtop bs=4096 count=1 oflag=direct,dsync"); err != nil || res.ExitCode == 0 {
		t.Errorf("FUA write to fuaflush over the error target: exit %d, %v; want a failure", res.ExitCode, err)
	}
	if s := fuaflushStatus(t, v, "tcff-errtop"); s != (fuaStatus{fuaWrites: 1}) {
		t.Errorf("after a failed FUA write: status %+v, want 1 fua_write and no flush", s)
	}

	// Suspend, reload and resume the fuaflush device again and again while
	// FUA writes are in flight: fio sees no error (it exits non-zero on
	// one), and the reloaded target counts and flushes.
	start := time.Now()
	out := v.MustRun(t, fmt.Sprintf(`set -e
%s &
fio=$!
n=0
while sleep 0.3 && kill -0 $fio 2>/dev/null; do
	dmsetup suspend tcff-a
	dmsetup reload tcff-a --table "0 %d fuaflush /dev/mapper/tcff-wc-a"
	dmsetup resume tcff-a
	n=$((n + 1))
done
wait $fio
echo $n`, fuaWrite(fuaTop, 2<<20, 4<<20, "--rw=randwrite --iodepth=16 --time_based --runtime=3"), fuaOriginSectors))
	reloads, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil || reloads < 2 {
		t.Fatalf("reloads under FUA load: %q, want a count of at least 2", out)
	}
	before := fuaflushStatus(t, v, fuaTop)
	v.MustRun(t, fuaWrite(fuaTop, 8<<20, 64<<10, ""))
	after := fuaflushStatus(t, v, fuaTop)
	t.Logf("%d reloads under FUA load in %v; then 16 FUA writes: status %+v -> %+v",
		reloads, time.Since(start).Round(time.Millisecond), before, after)
	if after.fuaWrites-before.fuaWrites != 16 || after.flushes == before.flushes || after.flushErrors != 0 {
		t.Errorf("16 FUA writes after the reloads: status %+v -> %+v, want 16 more fua_writes, more flushes, no errors", before, after)
	}

	// Power cut right after an acknowledged FUA-only write into a block
	// neither cache holds yet, on both stacks.
	const cutOffset = 16 << 20
	v.MustRun(t, fuaWrite(fuaTop, cutOffset, 4096, ""))
	v.MustRun(t, fuaWrite(fuaBareWC, cutOffset, 4096, ""))
	if n := writecacheFlushes(t, v, "tcff-wc-b"); n != 0 {
		t.Fatalf("writecache B saw %d flushes: the power cut would test nothing", n)
	}
	// What the kernel says of B before the cut, to explain a survival:
	// the queue's FUA and write-cache flags (whether O_DSYNC becomes FUA
	// or a flush) and the writecache's own counters.
	kernelSaid := v.MustRun(t, `d=$(dmsetup info -c --noheadings -o blkdevname tcff-wc-b); echo "$d: fua=$(cat /sys/block/$d/queue/fua) write_cache=$(cat /sys/block/$d/queue/write_cache); status: $(dmsetup status tcff-wc-b)"`)
	if err := v.Kill(); err != nil {
		t.Fatal(err)
	}
	v = harness.MustBoot(t, v.Config())
	v.MustRun(t, fuaTables)
	if ok, got := readPattern(t, v, fuaTop, cutOffset); !ok {
		t.Errorf("with fuaflush: the acknowledged FUA write is lost after the power cut (block holds: %s)", got)
	}
	if ok, got := readPattern(t, v, fuaBareWC, cutOffset); ok {
		t.Logf("without fuaflush: the FUA write survived the power cut (not expected on 6.1: a kernel with the dm-writecache fix?); before the cut B had: %s", strings.TrimSpace(kernelSaid))
	} else {
		t.Logf("without fuaflush: the acknowledged FUA write was lost in the power cut, as expected on 6.1 (block holds: %s); before the cut B had: %s", got, strings.TrimSpace(kernelSaid))
	}
}
