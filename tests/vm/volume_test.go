// SPDX-License-Identifier: Apache-2.0

//go:build vm

package vm_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidecache/tidecache/pkg/pool"
)

func contextBackground() context.Context { return context.Background() }

// smallNode is the node most engine tests use: four 512 MiB "HDDs" for the
// RAID10 origin and one 512 MiB SSD.
var smallNode = nodeSpec{HDDs: 4, HDDSize: 512 << 20, SSDs: []int64{512 << 20}}

// fioJob returns fio arguments for a verifiable job on a region of a device.
// The same arguments with --verify_only re-read and check what the job
// wrote (fio regenerates the same pattern from the same seed).
func fioJob(dev, name, rw string, offset, size string) string {
	return fmt.Sprintf("--name=%s --filename=%s --rw=%s --bs=4k --offset=%s --size=%s --direct=1 --ioengine=libaio --iodepth=4 --verify=crc32c --verify_fatal=1 --randseed=42",
		name, dev, rw, offset, size)
}

// liveJob returns fio arguments for a writer that runs in the background
// while a test changes the stack under it: random writes over size bytes
// at the start of tc-db for up to half an hour (a package upgrade, with
// its DKMS build under emulation, takes more than ten minutes), each
// batch of backlog writes read back and checked as it goes (verify_fatal ends the job on
// the first mismatch). serialize_overlap keeps fio from having a write and
// a read of the same block in flight at once: each pass over the region
// writes every block again, and without it fio may read a block for its
// backlog check while its next write of that block is still queued, and
// report its own race as corruption.
func liveJob(name, size string, backlog int) string {
	return fioJob("/dev/mapper/tc-db", name, "randwrite", "0", size) +
		fmt.Sprintf(" --verify_backlog=%d --serialize_overlap=1 --time_based --runtime=1800", backlog)
}

// liveWriter is a liveJob running in the background in the VM. Its
// report, exit code and pid are files under /run.
type liveWriter struct {
	n    *node
	name string
}

// startLiveWriter starts liveJob(name, size, backlog) in the background.
func (n *node) startLiveWriter(name, size string, backlog int) *liveWriter {
	n.t.Helper()
	w := &liveWriter{n: n, name: name}
	n.mustSh(fmt.Sprintf("rm -f %s; (fio --output=%s --trigger-file=%s %s 2>%s; echo $? > %s) >/dev/null 2>&1 & echo $! > %s",
		w.file("stop"), w.file("out"), w.file("stop"), liveJob(name, size, backlog), w.file("err"), w.file("rc"), w.file("pid")))
	return w
}

func (w *liveWriter) file(ext string) string { return "/run/fio-" + w.name + "." + ext }

// requireRunning fails the test if the writer has stopped: only a
// verification mismatch or an I/O error ends it before its half hour.
// when says what the test was doing ("during the switch to writeback").
func (w *liveWriter) requireRunning(when string) {
	w.n.t.Helper()
	if w.n.sh("kill -0 $(cat "+w.file("pid")+")").ExitCode == 0 {
		return
	}
	w.n.t.Fatalf("background fio %s stopped %s (exit %s)%s", w.name, when,
		strings.TrimSpace(w.n.sh("cat "+w.file("rc")).Stdout), w.evidence(w.n.sh("cat "+w.file("out")).Stdout))
}

// stop ends the writer and fails the test unless it ended cleanly. It
// creates fio's trigger file: fio's main loop sees it, ends the job,
// prints its report and exits 0. A verification failure would have ended
// it earlier (verify_fatal), with a non-zero err= in the report. SIGINT
// would do the same, but fio 3.33 formats its "terminating on signal"
// message with malloc inside the handler: a signal that lands while fio
// is in malloc can abort it (exit 134, no report), seen once in CI.
func (w *liveWriter) stop() {
	w.n.t.Helper()
	w.n.mustSh(fioStopCmd(w.file("stop"), w.file("pid")))
	rc := strings.TrimSpace(w.n.mustSh("cat " + w.file("rc")))
	out := w.n.mustSh("cat " + w.file("out"))
	if rc != "0" || !strings.Contains(out, "err= 0") || strings.Contains(out, "verify") {
		w.n.t.Fatalf("background fio %s exit %s%s", w.name, rc, w.evidence(out))
	}
}

// fioStopCmd is a shell line that stops a background fio started with
// --trigger-file=trigger (see liveWriter.stop) and waits for it, its pid
// in pidFile, to exit.
func fioStopCmd(trigger, pidFile string) string {
	return "touch " + trigger + "; while kill -0 $(cat " + pidFile + ") 2>/dev/null; do sleep 0.2; done"
}

// evidence is what a failure of the writer shows: the error lines of its
// report, what fio wrote to stderr (an assertion that aborted it goes
// there, not to the report) and the end of the guest kernel log.
func (w *liveWriter) evidence(report string) string {
	return "; what it reported:\n" + fioErrors(report) +
		"\nits stderr:\n" + w.n.sh("cat "+w.file("err")).Stdout +
		"\nkernel log:\n" + w.n.sh("dmesg | tail -40").Stdout
}

// fioErrors keeps, of an fio report, its first lines (the job and its
// error, if it stopped on one) and every line about an error or a
// verification, without the per-disk statistics that end it.
func fioErrors(report string) string {
	var keep []string
	for i, l := range strings.Split(report, "\n") {
		low := strings.ToLower(l)
		if i < 8 || strings.Contains(low, "err") || strings.Contains(low, "verify") || strings.Contains(low, "fio:") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

// TestVolumeLifecycle creates a pool and a volume, writes with fio and reads
// it back verified through the cache, flushes to zero dirty blocks, proves
// the data reached the origin by verifying the origin extent directly, then
// deletes and recreates the volume, then deletes the pool.
func TestVolumeLifecycle(t *testing.T) {
	besideAnother(t, 40*time.Second)
	n := bootNode(t, smallNode)
	n.createPool("tank")
	n.mustTidectl("volume create db --size 256M --write-cache 64M --read-cache 32M")

	v := n.volume("db")
	if v.Mode != "writeback" || v.State != "active" || v.Device != "/dev/mapper/tc-db" || v.SizeBytes != 256<<20 {
		t.Fatalf("new volume: %+v", v)
	}
	wantDevs := []string{"tc-db", "tc-db-origin", "tc-db-rdata", "tc-db-rfirst", "tc-db-rmeta", "tc-db-rtier", "tc-db-wdata", "tc-db-wtier"}
	if got := n.dmDevices(); !slices.Equal(got, wantDevs) {
		t.Fatalf("dm devices = %v, want %v", got, wantDevs)
	}
	if top := n.mustSh("dmsetup table tc-db"); !strings.Contains(top, " fuaflush ") {
		t.Fatalf("top table is not fuaflush: %s", top)
	}
	if wtier := n.mustSh("dmsetup table tc-db-wtier"); !strings.Contains(wtier, " writecache s ") {
		t.Fatalf("write tier table is not a writecache: %s", wtier)
	}

	job := fioJob("/dev/mapper/tc-db", "lifecycle", "randwrite", "0", "32M")
	n.fio(job + " --do_verify=1")
	v = n.volume("db")
	if v.WriteCache == nil || v.WriteCache.DirtyBlocks == 0 || v.WriteCache.Writes == 0 {
		t.Fatalf("after 32 MiB of writes the write cache should hold dirty blocks: %+v", v.WriteCache)
	}
	t.Logf("after write: %d dirty blocks, %d writes", v.WriteCache.DirtyBlocks, v.WriteCache.Writes)
	n.fio(job + " --verify_only")

	out := n.mustTidectl("volume flush db")
	if !strings.Contains(out, "0 dirty blocks left") {
		t.Fatalf("flush output: %s", out)
	}
	if d := n.volume("db").WriteCache.DirtyBlocks; d != 0 {
		t.Fatalf("after flush: %d dirty blocks, want 0", d)
	}
	// The origin extent alone now holds every block.
	n.fio(fioJob("/dev/mapper/tc-db-origin", "lifecycle", "randwrite", "0", "32M") + " --verify_only")

	list := n.mustTidectl("volume list")
	if !strings.Contains(list, "db") || !strings.Contains(list, "writeback") {
		t.Fatalf("volume list: %s", list)
	}
	n.mustTidectl("volume delete db")
	if got := n.dmDevices(); len(got) != 0 {
		t.Fatalf("after delete, dm devices left: %v", got)
	}
	n.wantFail("volume show db", "not found")

	// Recreate with the same name: a fresh, working volume on reused space.
	n.mustTidectl("volume create db --size 256M --write-cache 64M")
	if v := n.volume("db"); v.State != "active" || v.Mode != "writeback" {
		t.Fatalf("recreated volume: %+v", v)
	}
	n.fio(fioJob("/dev/mapper/tc-db", "again", "randwrite", "0", "16M") + " --do_verify=1")

	// The pool goes last: refused while it has a volume, then deleted:
	// no superblock left, its RAID10 stopped, the devices free for a new
	// pool without --force or --destroy-pool.
	n.wantFail("pool delete tank", "still has 1 volume(s): db")
	n.mustTidectl("volume flush db")
	n.mustTidectl("volume delete db")
	out = n.mustTidectl("pool delete tank")
	if !strings.Contains(out, "pool tank deleted") || !strings.Contains(out, "RAID10 /dev/md/tc-tank stopped") {
		t.Fatalf("pool delete: %s", out)
	}
	if pools := strings.TrimSpace(n.mustTidectl("-o json pool show")); pools != "[]" {
		t.Fatalf("pools after delete: %s", pools)
	}
	if md := n.mustSh("cat /proc/mdstat"); strings.Contains(md, "active raid10") {
		t.Fatalf("the pool's RAID10 still runs after pool delete:\n%s", md)
	}
	n.mustTidectl("pool create again --origin " + n.hdds()[0] + " --ssd " + n.ssds()[0])
	n.wantFail("pool delete nosuch", "nosuch", "not found")
}

// TestLiveModeChanges switches a volume writeback → writethrough →
// passthrough → writeback while fio writes and verifies in the background,
// and re-verifies a region written before the first switch after each one.
func TestLiveModeChanges(t *testing.T) {
	besideAnother(t, 50*time.Second)
	n := bootNode(t, smallNode)
	n.createPool("tank")
	n.mustTidectl("volume create db --size 256M --write-cache 64M --read-cache 32M")

	static := fioJob("/dev/mapper/tc-db", "static", "write", "128M", "32M")
	n.fio(static + " --do_verify=1")

	// Background writer with continuous verification of what it wrote.
	live := n.startLiveWriter("live", "48M", 512)
	time.Sleep(3 * time.Second)

	steps := []struct {
		mode, topTarget string
		devices         []string
	}{
		{"writethrough", "linear", []string{"tc-db", "tc-db-origin", "tc-db-rdata", "tc-db-rmeta", "tc-db-rtier"}},
		{"passthrough", "linear", []string{"tc-db", "tc-db-origin"}},
		{"writeback", "fuaflush", []string{"tc-db", "tc-db-origin", "tc-db-rdata", "tc-db-rfirst", "tc-db-rmeta", "tc-db-rtier", "tc-db-wdata", "tc-db-wtier"}},
	}
	for _, s := range steps {
		start := time.Now()
		n.mustTidectl("volume set-mode db " + s.mode)
		t.Logf("switched to %s in %s", s.mode, time.Since(start).Round(time.Millisecond))
		v := n.volume("db")
		if v.Mode != s.mode || v.State != "active" {
			t.Fatalf("after set-mode %s: %+v", s.mode, v)
		}
		if tbl := n.mustSh("dmsetup table tc-db"); !strings.Contains(tbl, " "+s.topTarget+" ") {
			t.Fatalf("mode %s: top table %q, want target %s", s.mode, tbl, s.topTarget)
		}
		if got := n.dmDevices(); !slices.Equal(got, s.devices) {
			t.Fatalf("mode %s: devices %v, want %v", s.mode, got, s.devices)
		}
		live.requireRunning("during the switch to " + s.mode)
		n.fio(static + " --verify_only")
		time.Sleep(2 * time.Second)
	}
	live.stop()
	// After a flush and a switch to passthrough, the static region is
	// read from the origin alone.
	n.mustTidectl("volume flush db")
	n.mustTidectl("volume set-mode db passthrough")
	n.fio(static + " --verify_only")
}

// TestDriftCheckRepair changes a volume's top table behind tidecache's back
// with dmsetup and checks that `volume check` reports it, `volume repair`
// restores the layout's table, and the data is intact.
func TestDriftCheckRepair(t *testing.T) {
	besideAnother(t, 10*time.Second)
	n := bootNode(t, smallNode)
	n.createPool("tank")
	n.mustTidectl("volume create db --size 128M --write-cache 32M")
	job := fioJob("/dev/mapper/tc-db", "drift", "randwrite", "0", "8M")
	n.fio(job + " --do_verify=1")
	if out := n.mustTidectl("volume check db"); !strings.Contains(out, "matches its layout") {
		t.Fatalf("fresh volume: %s", out)
	}
	n.mustTidectl("volume flush db")
	n.mustSh("dmsetup load tc-db --table \"0 $(blockdev --getsz /dev/mapper/tc-db) linear /dev/mapper/tc-db-origin 0\" && dmsetup suspend tc-db && dmsetup resume tc-db")
	stderr := n.wantFail("volume check db", "has drifted", "tc-db", "fuaflush")
	t.Logf("check reported:\n%s", stderr)
	out := n.mustTidectl("volume repair db")
	if !strings.Contains(out, "repaired tc-db") {
		t.Fatalf("repair: %s", out)
	}
	if tbl := n.mustSh("dmsetup table tc-db"); !strings.Contains(tbl, " fuaflush ") {
		t.Fatalf("after repair the top table is %q", tbl)
	}
	n.mustTidectl("volume check db")
	n.fio(job + " --verify_only")
	if out := n.mustTidectl("volume repair db"); !strings.Contains(out, "nothing to repair") {
		t.Fatalf("second repair: %s", out)
	}
}

// TestTuneWatermarks lowers a volume's watermarks live: the writecache table
// is reloaded in place with the new options, write-back starts and brings
// the dirty blocks under the new low watermark, the data stays intact, and
// the tuning is part of the layout (check and assemble see no drift).
func TestTuneWatermarks(t *testing.T) {
	besideAnother(t, 20*time.Second)
	n := bootNode(t, smallNode)
	n.createPool("tank")
	n.mustTidectl("volume create db --size 128M --write-cache 64M")
	job := fioJob("/dev/mapper/tc-db", "tune", "randwrite", "0", "16M")
	n.fio(job + " --do_verify=1")
	before := n.volume("db").WriteCache.DirtyBlocks
	if before < 3000 {
		t.Fatalf("only %d dirty blocks before tuning; the test needs a cache well above 10%% full", before)
	}
	n.mustTidectl("volume tune db --high-watermark 10 --low-watermark 5")
	if tbl := n.mustSh("dmsetup table tc-db-wtier"); !strings.Contains(tbl, "high_watermark 10") || !strings.Contains(tbl, "low_watermark 5") {
		t.Fatalf("table after tune: %s", tbl)
	}
	// dm-writecache looks at its watermarks when it allocates a block: a
	// few new writes (elsewhere on the volume) start the write-back.
	n.mustSh("dd if=/dev/urandom of=/dev/mapper/tc-db bs=4k count=16 seek=24576 oflag=direct 2>/dev/null")
	n.eventually(90*time.Second, fmt.Sprintf("tidectl -o json volume show db | grep -o '\"dirty_blocks\": [0-9]*' | awk '{print ($2 < %d) ? \"below\" : \"above \" $2}'", before/2), "below")
	t.Logf("dirty blocks %d before tuning, %d after write-back to the new low watermark", before, n.volume("db").WriteCache.DirtyBlocks)
	n.fio(job + " --verify_only")
	n.mustTidectl("volume check db")
	n.mustSh("tidecached assemble")
	if out := n.mustTidectl("volume tune db --high-watermark 10 --low-watermark 5"); !strings.Contains(out, "unchanged") {
		t.Fatalf("same tuning again: %s", out)
	}
	// Reset goes back to the node defaults: the kernel's high watermark
	// (left out of the table) and tidecache's low one.
	n.mustTidectl("volume tune db --reset")
	want := fmt.Sprintf("low_watermark %d ", pool.DefaultLowWatermark)
	if tbl := n.mustSh("dmsetup table tc-db-wtier"); strings.Contains(tbl, "high_watermark") || !strings.Contains(tbl, want) {
		t.Fatalf("table after reset is not the defaults (%q, no high_watermark): %s", want, tbl)
	}
	n.mustTidectl("volume check db")
}
