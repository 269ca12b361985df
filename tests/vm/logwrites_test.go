// SPDX-License-Identifier: Apache-2.0

//go:build vm

package vm_test

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidecache/tidecache/tests/vm/harness"
)

var logWritesFUAWindow = flag.Bool("logwrites-fua-window", false,
	"TestLogWritesReplay: create the volumes with --allow-fua-window (the stack without FUA protection); acknowledged writes should then be lost at some mark")

// logReplayBinary builds tests/tools/logreplay once per test process, into
// its own directory (the shared binaries() list is not this test's file).
var logReplayBinary = sync.OnceValues(func() (string, error) {
	cache, err := harness.CacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, "bin-logreplay")
	if err := harness.BuildBinaries(contextBackground(), dir, "./tests/tools/logreplay"); err != nil {
		return "", err
	}
	return filepath.Join(dir, "logreplay"), nil
})

// logWritesSpec: /dev/vda is the origin (a plain disk: the pool is made
// with --origin, so no md array sits between the log and the pool),
// /dev/vdb the SSD, /dev/vdc and /dev/vdd their logs.
var logWritesSpec = nodeSpec{HDDs: 1, HDDSize: 320 << 20, SSDs: []int64{96 << 20}, Spares: []int64{1 << 30, 1 << 30}, SparesHostCached: true, MemoryMB: 1024}

const (
	lwOrigin, lwSSD       = "/dev/vda", "/dev/vdb"
	lwOriginLog, lwSSDLog = "/dev/vdd", "/dev/vdc"
)

// lwMarks is how many marks TestLogWritesReplay takes and replays: one of
// each kind in .ci/run (a replay and its checks take about 17 s of a CI
// lane), two of each with -all-cases (make test-vm-all) or
// -logwrites-fua-window, whose losses came at one or two marks of six.
func lwMarks() int {
	if *allCases || *logWritesFUAWindow {
		return 6
	}
	return 3
}

// TestLogWritesReplay models SSDs and HDDs WITH a volatile write cache,
// which a qemu kill (TestCrashSuite) does not: such a drive, when the
// power goes, keeps only what a FLUSH or a FUA write made durable. The
// pool is built on dm-log-writes devices (the SSD and the origin each
// logged to their own disk from the moment they were empty); an ext4
// volume (`crashwriter fs`) and a raw volume (`crashwriter raw-aio`,
// O_DIRECT|O_DSYNC AIO at QD8: FUA-only writes) run their writers, and
// at lwMarks() moments the writers are stopped (SIGSTOP) and a mark is put
// in both logs at once, SSD first (the origin's state is then at
// least as new as the SSD's: dm-writecache flushes the origin before it
// commits the freeing of written-back blocks, so this order cannot invent
// a loss). The marks come in three kinds, taken in turn: while the writers
// run; shortly after `tidectl volume flush` emptied both caches (FUA
// writes then land in new cache blocks); during a flush. Then, for every
// mark, both logs are replayed with `logreplay -volatile -zero` onto the
// original disks, `tidecached assemble` builds the volumes from the
// replayed superblocks, and every operation acknowledged before the mark
// is checked (and the ext4 must pass e2fsck -fn).
func TestLogWritesReplay(t *testing.T) {
	besideAnother(t, 90*time.Second)
	bin, err := binaries()
	if err != nil {
		t.Fatal(err)
	}
	lr, err := logReplayBinary()
	if err != nil {
		t.Fatal(err)
	}
	dir := harness.TestDir(t)
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 8))
	t.Logf("seed %d", seed)
	ws := []*crashWorkload{
		{name: "e4", fs: "ext4", create: "--size 96M --write-cache 16M"},
		{name: "ra", raw: "raw-aio", create: "--size 64M --write-cache 16M", blocks: 64 << 20 / 4096},
	}

	start := time.Now()
	n := bootNodeIn(t, dir, bin, logWritesSpec)
	booted := time.Since(start)
	n.mustSh(fmt.Sprintf(`set -e
dmsetup create lwssd --table "0 $(blockdev --getsz %[1]s) log-writes %[1]s %[2]s"
dmsetup create lworigin --table "0 $(blockdev --getsz %[3]s) log-writes %[3]s %[4]s"
dmsetup message lwssd 0 mark start
dmsetup message lworigin 0 mark start`, lwSSD, lwSSDLog, lwOrigin, lwOriginLog))
	n.mustTidectl("pool create lw --origin /dev/mapper/lworigin --ssd /dev/mapper/lwssd")
	for _, w := range ws {
		args := "volume create " + w.name + " " + w.create
		if *logWritesFUAWindow {
			args += " --allow-fua-window"
		}
		n.mustTidectl(args)
		if w.fs == "ext4" {
			n.mustSh("mkfs.ext4 -q -F -b 4096 " + w.dev())
		}
	}
	n.lwStart(ws)
	if err := n.waitAcks(ws, 1, 5, 2*time.Minute); err != nil {
		t.Fatal(err)
	}

	// Take the marks.
	type markInfo struct {
		name, kind string
		acked      map[string]int
	}
	var marks []markInfo
	if lwMarks() < 6 {
		t.Logf("marks m4 to m6 (a second one of each kind) left to make test-vm-all (-all-cases)")
	}
	for k := 1; k <= lwMarks(); k++ {
		kind := [3]string{"writers running", "after a flush", "during a flush"}[(k-1)%3]
		switch kind {
		case "writers running":
			time.Sleep(time.Duration(500+rng.IntN(1500)) * time.Millisecond)
		case "after a flush":
			n.sh("for v in e4 ra; do timeout 30 tidectl volume flush $v >/dev/null & done; wait")
			time.Sleep(time.Duration(rng.IntN(1000)) * time.Millisecond)
		case "during a flush":
			n.mustSh("for v in e4 ra; do timeout 30 tidectl volume flush $v >/dev/null 2>&1 & done")
			time.Sleep(time.Duration(100+rng.IntN(700)) * time.Millisecond)
		}
		name := "m" + strconv.Itoa(k)
		// Stop the writers between syscalls and mark both logs in the same
		// guest command, within milliseconds (a pause before the marks
		// would let dm-writecache's 1 s autocommit make everything
		// durable, which hides the FUA window); then read the acks, all
		// drained before the stop. Every op in them completed before the
		// marks; at most the op after each writer's last ack is in flight,
		// as at a power cut.
		n.mustSh(fmt.Sprintf("kill -STOP $(cat /run/lw-*.pid) && dmsetup message lwssd 0 mark %[1]s && dmsetup message lworigin 0 mark %[1]s", name))
		time.Sleep(300 * time.Millisecond)
		acks, err := n.Acks()
		if err != nil {
			t.Fatal(err)
		}
		n.mustSh("kill -CONT $(cat /run/lw-*.pid)")
		if err := os.WriteFile(filepath.Join(dir, "acks-"+name+".log"), acks, 0o644); err != nil {
			t.Fatal(err)
		}
		m := markInfo{name: name, kind: kind, acked: ackCounts(acks)}
		marks = append(marks, m)
		t.Logf("mark %s (%s) at %.1fs: acked before it: e4 %d, ra %d", name, kind, time.Since(start).Seconds(), m.acked["e4"], m.acked["ra"])
	}
	workload := time.Since(start)

	// Stop the writers and take the stack down; removing a log-writes
	// device writes its last entries and the log's super.
	n.mustSh(`pids=$(cat /run/lw-*.pid); kill $pids
for i in $(seq 50); do kill -0 $pids 2>/dev/null || break; sleep 0.2; done
umount /mnt/e4`)
	for _, d := range []string{"lwssd", "lworigin"} {
		t.Logf("%s status: %s", d, strings.TrimSpace(n.mustSh("dmsetup status "+d)))
	}
	n.lwTeardown()
	if out := n.sh("dmesg | grep -i 'log-writes\\|logdev'").Stdout; strings.Contains(out, "out of space") || strings.Contains(out, "Error") {
		t.Fatalf("dm-log-writes stopped logging:\n%s", out)
	}
	for _, l := range []string{lwSSDLog, lwOriginLog} {
		t.Logf("log %s: %s", l, strings.TrimSpace(n.mustSh(lr+" list -log "+l+" | sed -n '1p;$p'")))
	}

	// Replay every mark, oldest first, and check.
	replayStart := time.Now()
	for _, m := range marks {
		out := n.mustSh(fmt.Sprintf("%[1]s replay -log %[2]s -dev %[3]s -mark %[6]s -volatile -zero && %[1]s replay -log %[4]s -dev %[5]s -mark %[6]s -volatile -zero",
			lr, lwSSDLog, lwSSD, lwOriginLog, lwOrigin, m.name))
		t.Logf("mark %s (%s):\n%s", m.name, m.kind, strings.TrimSpace(out))
		// crashVerifyAll reads acks-<cycle>.log; the writers ran as cycle
		// 1. Copied in the guest (into its overlay): the guest caches the
		// host's files (9p cache=loose), so a file the host rewrote
		// after the guest read it would be read stale.
		n.mustSh(fmt.Sprintf("cp %s %s", filepath.Join(dir, "acks-"+m.name+".log"), filepath.Join(dir, "acks-1.log")))
		out = n.mustSh("tidecached assemble 2>&1")
		for _, w := range ws {
			if !strings.Contains(out, w.name) {
				t.Fatalf("mark %s: assemble did not bring up volume %s:\n%s", m.name, w.name, out)
			}
		}
		n.crashVerifyAll(dir, ws, 1, true)
		n.lwTeardown()
	}
	replay := time.Since(replayStart)

	t.Logf("VM time %.1fs: boot %.1fs, set-up and writers with %d marks %.1fs, teardown %.1fs, replay and checks %.1fs (%.1fs per mark)",
		time.Since(start).Seconds(), booted.Seconds(), len(marks), (workload - booted).Seconds(), (replayStart.Sub(start) - workload).Seconds(),
		replay.Seconds(), replay.Seconds()/float64(len(marks)))
	sum := 0
	for _, w := range ws {
		t.Logf("%-3s %-8s %d marks replayed, %5d acknowledged ops checked, %3d lost (at %d marks)",
			w.name, w.kind(), w.cycles, w.acked, w.lost, w.lossCycles)
		sum += w.acked
	}
	if sum == 0 {
		t.Fatal("no operation was ever acknowledged: the test checked nothing")
	}
}

// lwStart starts the writers as cycle 1, each with a pid file so that the
// test can stop and resume exactly the processes it started.
func (n *node) lwStart(ws []*crashWorkload) {
	n.t.Helper()
	var sh strings.Builder
	for _, w := range ws {
		var c string
		if w.fs != "" {
			n.mustSh(fmt.Sprintf("mkdir -p %[1]s && mount %[2]s %[1]s", w.mnt(), w.dev()))
			c = fmt.Sprintf("crashwriter fs write -dir %s/c1 -ack %s -tag %s -cycle 1", w.mnt(), n.AckDevice(), w.name)
		} else {
			c = fmt.Sprintf("crashwriter %s write -dev %s -ack %s -tag %s -cycle 1 -blocks %d", w.raw, w.dev(), n.AckDevice(), w.name, w.blocks)
		}
		fmt.Fprintf(&sh, "%s >/run/%s.log 2>&1 & echo $! >/run/lw-%s.pid\n", c, w.name, w.name)
	}
	n.mustSh(sh.String())
}

// lwTeardown removes every dm device, tops first (a device still held by
// another fails and is retried on the next pass).
func (n *node) lwTeardown() {
	n.t.Helper()
	n.mustSh(`for i in 1 2 3 4 5 6; do
  names=$(dmsetup ls | awk '$1 != "No" {print $1}')
  [ -z "$names" ] && exit 0
  for d in $names; do dmsetup remove "$d" 2>/dev/null; done
done
echo "dm devices left: $(dmsetup ls)" >&2; exit 1`)
}

// ackCounts counts the ack lines of cycle 1 per tag.
func ackCounts(acks []byte) map[string]int {
	count := map[string]int{}
	for _, l := range strings.Split(string(acks), "\n") {
		if f := strings.Fields(l); len(f) > 2 && f[1] == "1" {
			count[f[0]]++
		}
	}
	return count
}
