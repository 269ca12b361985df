// SPDX-License-Identifier: Apache-2.0

//go:build vm

package vm_test

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidecache/tidecache/tests/vm/harness"
)

var crashFUAWindow = flag.Bool("crash-fua-window", false,
	"TestCrashSuite: create the volumes with --allow-fua-window (the stack without FUA protection); the suite must then fail")

// suiteSpec holds six volumes: 2×96M ext4, 2×128M XFS, 2×64M raw on a
// 768M RAID10; 112M of write caches and 32M of read caches on the SSD.
var suiteSpec = nodeSpec{HDDs: 4, HDDSize: 384 << 20, SSDs: []int64{256 << 20}, MemoryMB: 1024}

// crashWorkload is one writer of the suite on its own volume. The volume
// name is also the writer's ack tag.
type crashWorkload struct {
	name   string
	fs     string // "ext4", "xfs", or "" for a raw workload
	raw    string // crashwriter workload for raw volumes: raw-dsync, raw-aio
	create string // volume create flags
	blocks int    // raw: 4 KiB blocks of the volume

	cycles, acked, lost, lossCycles int
}

func (w *crashWorkload) dev() string { return "/dev/mapper/tc-" + w.name }
func (w *crashWorkload) mnt() string { return "/mnt/" + w.name }

func crashWorkloads() []*crashWorkload {
	return []*crashWorkload{
		{name: "e4", fs: "ext4", create: "--size 96M --write-cache 16M"},
		{name: "e4r", fs: "ext4", create: "--size 96M --write-cache 16M --read-cache 16M"},
		{name: "xf", fs: "xfs", create: "--size 128M --write-cache 24M"},
		{name: "xfr", fs: "xfs", create: "--size 128M --write-cache 24M --read-cache 16M"},
		{name: "rd", raw: "raw-dsync", create: "--size 64M --write-cache 16M", blocks: 64 << 20 / 4096},
		{name: "ra", raw: "raw-aio", create: "--size 64M --write-cache 16M", blocks: 64 << 20 / 4096},
	}
}

// TestCrashSuite cuts the power under filesystem and raw-device workloads
// that make data durable in every way applications do (fsync, fdatasync,
// O_DSYNC, O_DIRECT|O_DSYNC, rename, Linux AIO), all at once on six
// writeback volumes of one pool: ext4 and XFS with and without a read
// tier, raw O_DIRECT|O_DSYNC at QD1 and through AIO at QD8. Each writer
// acknowledges an operation on the serial port (drained) only after its
// syscalls returned. After each cut the VM boots again on the same images,
// `tidecached assemble` brings the volumes up, each filesystem is mounted
// (journal replay), every acknowledged operation is checked, and the
// filesystem is unmounted and must pass fsck; then the raw devices are
// checked. Some cuts land in the middle of a flush, of a drain to
// writethrough, or of the mode change back to writeback; the others come
// shortly after every cache was flushed (emptied) under the running
// writers.
func TestCrashSuite(t *testing.T) {
	besideAnother(t, 140*time.Second)
	bin, err := binaries()
	if err != nil {
		t.Fatal(err)
	}
	dir := harness.TestDir(t)
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 2))
	t.Logf("seed %d", seed)
	ws := crashWorkloads()

	start := time.Now()
	n := bootNodeIn(t, dir, bin, suiteSpec)
	n.createPool("crash")
	n.mustSh("modprobe xfs")
	for _, w := range ws {
		args := "volume create " + w.name + " " + w.create
		if *crashFUAWindow {
			args += " --allow-fua-window"
		}
		n.mustTidectl(args)
		switch w.fs {
		case "ext4":
			n.mustSh("mkfs.ext4 -q -F -b 4096 " + w.dev())
		case "xfs":
			// mkfs.xfs refuses filesystems under 300 MB unless run by
			// fstests (these variables); the small size keeps the cache
			// cycling through the log.
			n.mustSh("TEST_DIR=1 TEST_DEV=1 QA_CHECK_FS=1 mkfs.xfs -q -f " + w.dev())
		}
	}

	var prevAcks []byte
	var cycleTimes []time.Duration
	for cycle := 1; cycle <= *crashCycles; cycle++ {
		target := ws[(cycle/5)%len(ws)]
		var booted, checked time.Duration
		if cycle > 1 {
			start = time.Now()
			n = bootNodeIn(t, dir, bin, suiteSpec)
			booted = time.Since(start)
			n.mustSh("modprobe xfs")
			n.crashCheck(dir, ws, cycle-1, prevAcks)
			checked = time.Since(start) - booted
		}
		// The mode each volume starts the cycle in: writeback, except the
		// target of a mode change back from writethrough.
		for _, w := range ws {
			want := "writeback"
			if cycle%5 == 4 && w == target {
				want = "writethrough"
			}
			if m := n.volume(w.name).Mode; m != want {
				n.mustTidectl("volume set-mode " + w.name + " " + want)
			}
		}
		n.crashStart(ws, cycle)
		if err := n.waitAcks(ws, cycle, 5, 2*time.Minute); err != nil {
			t.Fatalf("cycle %d: %v", cycle, err)
		}
		acked := time.Since(start)
		var what string
		if op := map[int]string{1: "flush", 3: "set-mode %s writethrough", 4: "set-mode %s writeback"}[cycle%5]; op != "" {
			time.Sleep(time.Duration(rng.IntN(1500)) * time.Millisecond)
			if op == "flush" {
				op = "flush %s"
			}
			what = fmt.Sprintf(op, target.name)
			n.mustSh("tidectl volume " + what + " >/run/disrupt.log 2>&1 &")
			time.Sleep(time.Duration(200+rng.IntN(1800)) * time.Millisecond)
		} else {
			// Write every cache back and free it, as a scheduled flush
			// does, with the writers running: their next writes to
			// blocks the cache held (journal blocks, overwrites) land in
			// new cache blocks, where a FUA write is at risk. Without
			// this the fs workloads mostly rewrite committed cache
			// blocks in place, which survives.
			var sh strings.Builder
			for _, w := range ws {
				fmt.Fprintf(&sh, "timeout 30 tidectl volume flush %s >/dev/null & ", w.name)
			}
			n.sh(sh.String() + "wait")
			time.Sleep(time.Duration(rng.IntN(3000)) * time.Millisecond)
		}
		if err := n.Kill(); err != nil {
			t.Fatalf("cycle %d: kill: %v", cycle, err)
		}
		cycleTimes = append(cycleTimes, time.Since(start))
		if prevAcks, err = n.Acks(); err != nil {
			t.Fatal(err)
		}
		if what != "" {
			what = " during `tidectl volume " + what + "`"
		}
		t.Logf("cycle %d: power cut%s after %.1fs (boot %.1fs, checks %.1fs, writers started and all acked at %.1fs)",
			cycle, what, cycleTimes[len(cycleTimes)-1].Seconds(), booted.Seconds(), checked.Seconds(), acked.Seconds())
	}

	// Final boot: check the last cycle, then write everything back and
	// check again from the origin alone (passthrough).
	n = bootNodeIn(t, dir, bin, suiteSpec)
	n.mustSh("modprobe xfs")
	n.crashCheck(dir, ws, *crashCycles, prevAcks)
	for _, w := range ws {
		n.mustTidectl("volume set-mode " + w.name + " passthrough")
	}
	n.crashVerifyAll(dir, ws, *crashCycles, false)

	var total time.Duration
	for _, d := range cycleTimes {
		total += d
	}
	t.Logf("%d power cuts, %.1fs per cycle on average (boot, checks, writers, cut)", len(cycleTimes), total.Seconds()/float64(len(cycleTimes)))
	sum := 0
	for _, w := range ws {
		t.Logf("%-4s %-9s %3d cycles checked, %6d acknowledged ops checked, %4d lost (in %d cycles)",
			w.name, w.kind(), w.cycles, w.acked, w.lost, w.lossCycles)
		sum += w.acked
	}
	if sum == 0 {
		t.Fatal("no operation was ever acknowledged: the test checked nothing")
	}
}

func (w *crashWorkload) kind() string {
	if w.fs != "" {
		return w.fs
	}
	return w.raw
}

// crashStart mounts the filesystems, removes the previous cycle's
// directories and starts every writer in the background.
func (n *node) crashStart(ws []*crashWorkload, cycle int) {
	n.t.Helper()
	var cmds, mounts []string
	for _, w := range ws {
		if w.fs != "" {
			mounts = append(mounts, fmt.Sprintf("mkdir -p %[1]s && mount %[2]s %[1]s && rm -rf %[1]s/c*", w.mnt(), w.dev()))
			cmds = append(cmds, fmt.Sprintf("crashwriter fs write -dir %s/c%d -ack %s -tag %s -cycle %d",
				w.mnt(), cycle, n.AckDevice(), w.name, cycle))
		} else {
			cmds = append(cmds, fmt.Sprintf("crashwriter %s write -dev %s -ack %s -tag %s -cycle %d -blocks %d",
				w.raw, w.dev(), n.AckDevice(), w.name, cycle, w.blocks))
		}
	}
	n.mustSh("set -e; " + strings.Join(mounts, "; "))
	var sh strings.Builder
	for i, c := range cmds {
		fmt.Fprintf(&sh, "%s >/run/%s.log 2>&1 &\n", c, ws[i].name)
	}
	n.mustSh(sh.String())
}

// waitAcks waits until every writer has acknowledged at least min
// operations in this cycle, so that each cut has something to check.
func (n *node) waitAcks(ws []*crashWorkload, cycle, min int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		acks, err := n.Acks()
		if err != nil {
			return err
		}
		count := map[string]int{}
		for _, l := range strings.Split(string(acks), "\n") {
			if f := strings.Fields(l); len(f) > 2 && f[1] == strconv.Itoa(cycle) {
				count[f[0]]++
			}
		}
		var missing []string
		for _, w := range ws {
			if count[w.name] < min {
				missing = append(missing, fmt.Sprintf("%s (%d)", w.name, count[w.name]))
			}
		}
		if len(missing) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			logs := n.sh("tail -n 5 /run/*.log").Stdout
			return fmt.Errorf("fewer than %d acknowledgements from %v within %v; writer logs:\n%s", min, missing, timeout, logs)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// crashCheck runs after a power cut: assemble, then for each filesystem
// mount (journal replay), verify, umount and fsck; then the raw devices.
func (n *node) crashCheck(dir string, ws []*crashWorkload, cycle int, acks []byte) {
	n.t.Helper()
	out := n.mustSh("tidecached assemble")
	for _, w := range ws {
		if !strings.Contains(out, w.name) {
			n.t.Fatalf("cycle %d: assemble did not bring up volume %s:\n%s", cycle, w.name, out)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("acks-%d.log", cycle)), acks, 0o644); err != nil {
		n.t.Fatal(err)
	}
	n.crashVerifyAll(dir, ws, cycle, true)
}

var verifiedRE = regexp.MustCompile(`verified (\d+) acknowledged \S+ .*: (\d+) lost`)

// crashVerifyAll checks every workload's acknowledged operations of a
// cycle; count adds them to the totals (false for a re-check). The
// workloads are checked at once (each on its own volume; the agent runs
// requests concurrently), then their results are judged in order.
func (n *node) crashVerifyAll(dir string, ws []*crashWorkload, cycle int, count bool) {
	n.t.Helper()
	acks := filepath.Join(dir, fmt.Sprintf("acks-%d.log", cycle))
	results := make([]crashCheckResult, len(ws))
	var wg sync.WaitGroup
	for i, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = n.crashCheckOne(w, cycle, acks)
		}()
	}
	wg.Wait()
	for i, w := range ws {
		r := results[i]
		if r.err != nil {
			n.t.Fatalf("cycle %d: %s: %v", cycle, w.name, r.err)
		}
		if r.fsck.ExitCode != 0 {
			n.t.Errorf("cycle %d: %s (%s): %s not clean after the power cut (exit %d):\n%s%s",
				cycle, w.name, w.fs, r.fsckCmd, r.fsck.ExitCode, tailLines(r.fsck.Stdout, 30), tailLines(r.fsck.Stderr, 10))
			repair := "e2fsck -fy " + w.dev()
			if w.fs == "xfs" {
				repair = "xfs_repair " + w.dev()
			}
			n.sh(repair) // go on with the next cycles on a repaired filesystem
		}
		res := r.verify
		m := verifiedRE.FindStringSubmatch(res.Stdout)
		if m == nil {
			n.t.Fatalf("cycle %d: %s: verify failed to run (exit %d):\n%s%s", cycle, w.name, res.ExitCode, res.Stdout, res.Stderr)
		}
		acked, _ := strconv.Atoi(m[1])
		lost, _ := strconv.Atoi(m[2])
		if count {
			w.cycles++
			w.acked += acked
			w.lost += lost
			if lost > 0 {
				w.lossCycles++
			}
		}
		last := res.Stdout[strings.LastIndex(strings.TrimSpace(res.Stdout), "\n")+1:]
		if res.ExitCode != 0 {
			n.t.Errorf("cycle %d: %s (%s): ACKNOWLEDGED OPERATIONS LOST after the power cut:\n%s%s",
				cycle, w.name, w.kind(), tailLines(res.Stdout, 25), res.Stderr)
		} else {
			n.t.Logf("cycle %d: %s (%s): %s", cycle, w.name, w.kind(), strings.TrimSpace(last))
		}
	}
}

// crashCheckResult is what checking one workload found.
type crashCheckResult struct {
	verify  harness.Result
	fsck    harness.Result // exit 0 for a raw workload
	fsckCmd string
	err     error // a step that could not run: mount, umount, transport
}

// crashCheckOne checks one workload: for a filesystem mount (journal
// replay), verify, umount and fsck; for a raw device verify. It runs in
// its own goroutine, so it reports instead of failing the test.
func (n *node) crashCheckOne(w *crashWorkload, cycle int, acks string) crashCheckResult {
	run := func(cmd string) (harness.Result, error) {
		return n.Run(n.t.Context(), "export PATH="+n.bin+":$PATH; "+cmd)
	}
	must := func(cmd string) error {
		res, err := run(cmd)
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("%q: exit %d: %s%s", cmd, res.ExitCode, res.Stdout, res.Stderr)
		}
		return err
	}
	var r crashCheckResult
	if w.fs == "" {
		r.verify, r.err = run(fmt.Sprintf("crashwriter %s verify -dev %s -acks %s -tag %s -cycle %d", w.raw, w.dev(), acks, w.name, cycle))
		return r
	}
	if r.err = must(fmt.Sprintf("mkdir -p %[1]s && mount %[2]s %[1]s", w.mnt(), w.dev())); r.err != nil {
		return r
	}
	if r.verify, r.err = run(fmt.Sprintf("crashwriter fs verify -dir %s/c%d -acks %s -tag %s -cycle %d", w.mnt(), cycle, acks, w.name, cycle)); r.err != nil {
		return r
	}
	if r.err = must("umount " + w.mnt()); r.err != nil {
		return r
	}
	r.fsckCmd = "e2fsck -fn " + w.dev()
	if w.fs == "xfs" {
		r.fsckCmd = "xfs_repair -n " + w.dev()
	}
	r.fsck, r.err = run(r.fsckCmd)
	return r
}

// tailLines returns the last k lines of s, without its final newline.
func tailLines(s string, k int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > k {
		lines = lines[len(lines)-k:]
	}
	return strings.Join(lines, "\n")
}
