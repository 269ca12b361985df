// SPDX-License-Identifier: Apache-2.0

//go:build vm

package vm_test

import (
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidecache/tidecache/tests/vm/harness"
)

// waitMirror polls the volume until its write mirror is idle with the
// given health ("AA": both legs in sync), failing after a minute.
func (n *node) waitMirror(name, health string) volumeJSON {
	n.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		v := n.volume(name)
		if v.Mirror != nil && v.Mirror.Health == health && v.Mirror.SyncAction == "idle" {
			return v
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("volume %s: mirror %+v, want %s and idle", name, v.Mirror, health)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// waitOutOfSync polls until the layout records exactly the given mirror
// legs as out of sync (the daemon records them within seconds).
func (n *node) waitOutOfSync(name string, want []int) {
	n.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		v := n.volume(name)
		if v.Mirror != nil && slices.Equal(v.Mirror.OutOfSync, want) {
			return
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("volume %s: mirror %+v, want legs %v recorded out of sync\ndaemon log:\n%s", name, v.Mirror, want, n.sh("tail -20 /run/daemon.log").Stdout)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// failLeg makes one leg of a volume's write mirror return I/O errors, as
// an SSD that dies under it does: its metadata and data devices get an
// error table (their linear tables are kept in /run for restoreLeg).
// tidectl volume repair loads the linear tables back.
func (n *node) failLeg(name string, leg int) {
	n.t.Helper()
	for _, role := range []string{"wmeta", "wleg"} {
		dev := "tc-" + name + "-" + role + string(rune('0'+leg))
		n.mustSh("dmsetup table " + dev + " > /run/" + dev + ".table && size=$(blockdev --getsz /dev/mapper/" + dev + ") && dmsetup load " + dev +
			" --table \"0 $size error\" && dmsetup suspend " + dev + " && dmsetup resume " + dev)
	}
}

// restoreLeg puts back the tables failLeg replaced, as an SSD that answers
// again after a transient fault: nothing of tidecache's runs.
func (n *node) restoreLeg(name string, leg int) {
	n.t.Helper()
	for _, role := range []string{"wmeta", "wleg"} {
		dev := "tc-" + name + "-" + role + string(rune('0'+leg))
		n.mustSh("dmsetup load " + dev + " /run/" + dev + ".table && dmsetup suspend " + dev + " && dmsetup resume " + dev)
	}
}

// TestReplicaLocalMirror checks --protect local on the real kernel: the
// write cache is a dm-raid RAID1 of slices on two SSDs. It writes under fio
// with verify, fails one SSD under running I/O (no verify error, volume
// degraded with one copy), cuts the power while degraded, boots without
// that SSD (the pool comes up degraded on the other leg, every write
// there), boots again with the stale SSD back (dm-raid rebuilds it from
// its bitmap), fails it for a moment at run time (volume repair gives it
// back and it resyncs), and finally fails the other SSD: the data read
// back from the rebuilt leg alone proves it holds every acknowledged
// write.
func TestReplicaLocalMirror(t *testing.T) {
	besideAnother(t, 80*time.Second)
	bin, err := binaries()
	if err != nil {
		t.Fatal(err)
	}
	dir := harness.TestDir(t)
	n := bootNodeIn(t, dir, bin, twoSSDs)
	n.createPool("tank")
	out := n.mustTidectl("volume create m --size 64M --write-cache 48M --protect local")
	if !strings.Contains(out, "protection: local") {
		t.Fatalf("volume create --protect local does not show the protection:\n%s", out)
	}
	res := n.tidectl("volume create plain --size 64M --write-cache 16M --protect none")
	if res.ExitCode != 0 || !strings.Contains(res.Stderr, "the write cache has one copy") {
		t.Fatalf("an unprotected write cache is created without a warning: exit %d\n%s%s", res.ExitCode, res.Stdout, res.Stderr)
	}
	if p := n.volume("plain").Protection; p != "none" {
		t.Fatalf("plain volume protection %q, want none", p)
	}
	// Without --protect, a pool with two SSDs with room mirrors.
	if out := n.mustTidectl("volume create auto --size 32M --write-cache 16M"); !strings.Contains(out, "protection: local") {
		t.Fatalf("a write cache on a pool with two SSDs is not mirrored by default:\n%s", out)
	}
	// The two legs are on the two SSDs.
	leg0 := strings.Fields(n.mustSh("dmsetup table tc-m-wleg0"))
	leg1 := strings.Fields(n.mustSh("dmsetup table tc-m-wleg1"))
	if len(leg0) != 5 || len(leg1) != 5 || leg0[3] == leg1[3] {
		t.Fatalf("mirror legs are not linear slices of two devices: %v and %v", leg0, leg1)
	}
	n.waitMirror("m", "AA")

	first := fioJob("/dev/mapper/tc-m", "first", "randwrite", "0", "16M")
	second := fioJob("/dev/mapper/tc-m", "second", "randwrite", "24M", "16M")
	n.fio(first + " --do_verify=1 --fsync_on_close=1")

	// A mode round trip: writethrough drains the write tier and removes
	// the mirror with it; writeback builds a new one, both legs zeroed.
	n.mustTidectl("volume set-mode m writethrough")
	if devs := strings.Join(n.dmDevices(), " "); strings.Contains(devs, "tc-m-wleg") || strings.Contains(devs, "tc-m-wdata") {
		t.Fatalf("writethrough left mirror devices: %s", devs)
	}
	n.fio(first + " --verify_only")
	n.mustTidectl("volume set-mode m writeback")
	n.waitMirror("m", "AA")
	n.fio(first + " --verify_only")

	// One SSD fails under I/O: the writes go on to the other leg, verified.
	{
		n.failLeg("m", 1)
		n.fio(second + " --do_verify=1 --fsync_on_close=1")
		n.fio(first + " --verify_only")
		v := n.volume("m")
		if v.Mirror == nil || !v.Mirror.Degraded || v.Mirror.Copies != 1 || v.Mirror.Health != "AD" {
			t.Fatalf("after a leg failed: mirror %+v, want degraded, 1 copy, health AD", v.Mirror)
		}
		if v.State != "active" || v.WriteCache == nil || v.WriteCache.Error != 0 {
			t.Fatalf("volume not serving after a leg failed: state %s, error %q, write cache %+v", v.State, v.Error, v.WriteCache)
		}
		if v.WriteCache.DirtyBlocks == 0 {
			t.Fatal("no dirty blocks: the power cut below would prove nothing")
		}
		if out := n.mustTidectl("volume show m"); !strings.Contains(out, "DEGRADED") {
			t.Fatalf("volume show does not say the mirror is degraded:\n%s", out)
		}
	}
	if err := n.Kill(); err != nil {
		t.Fatal(err)
	}

	t.Run("boot without the failed SSD", func(t *testing.T) {
		n := bootWithout(t, dir, bin, twoSSDs, 1)
		// Leg 0 went to the first SSD, leg 1 to the second, and plain's
		// cache to the first (the one listed first of two equally free):
		// the missing SSD holds only a mirror leg.
		out := n.sh("tidecached assemble")
		if out.ExitCode != 0 || !strings.Contains(out.Stdout, "DEGRADED") || !strings.Contains(out.Stdout, "/dev/mapper/tc-m") {
			t.Fatalf("assemble without the SSD of a mirror leg: exit %d, want 0 and DEGRADED\n%s%s", out.ExitCode, out.Stdout, out.Stderr)
		}
		n.fio(first + " --verify_only")
		n.fio(second + " --verify_only")
		v := n.volume("m")
		if v.Mirror == nil || v.Mirror.Copies != 1 || !slices.Equal(v.Mirror.OutOfSync, []int{1}) {
			t.Fatalf("degraded assembly: mirror %+v, want 1 copy and leg 1 recorded out of sync", v.Mirror)
		}
		n.Kill()
	})

	t.Run("only the stale SSD: refused", func(t *testing.T) {
		// The first SSD is gone now, the second (whose leg missed the
		// second job) is back alone: its own superblocks cannot tell, the
		// origin's newer layout can. Serving it would return old blocks.
		n := bootWithout(t, dir, bin, twoSSDs, 0)
		res := n.sh("tidecached assemble")
		if res.ExitCode == 0 || !strings.Contains(res.Stdout, "REFUSED") || !strings.Contains(res.Stdout, `volume m write mirror`) || !strings.Contains(res.Stdout, "missed writes") {
			t.Fatalf("assemble with only the stale leg's SSD: exit %d, want REFUSED naming the stale leg\n%s%s", res.ExitCode, res.Stdout, res.Stderr)
		}
		if devs := n.dmDevices(); len(devs) != 0 {
			t.Fatalf("devices created on a stale leg: %v", devs)
		}
		n.Kill()
	})

	t.Run("stale SSD back, resynced", func(t *testing.T) {
		n := bootNodeIn(t, dir, bin, twoSSDs)
		// dm-raid finds leg 1 behind leg 0 and rebuilds the regions its
		// bitmap marks, on its own, as soon as the mirror is loaded.
		n.mustSh("tidecached assemble")
		n.waitMirror("m", "AA")
		// md says "recovery" up to 6.1, "recover" on 6.12.
		if out := n.mustSh("dmesg"); !regexp.MustCompile(`md: recover(y)? of RAID array`).MatchString(out) {
			t.Fatalf("no recovery of the stale leg in the kernel log:\n%s", out)
		}
		if out := n.mustTidectl("volume repair m"); !strings.Contains(out, "nothing to repair") {
			t.Fatalf("repair of a whole mirror changed something:\n%s", out)
		}
		if v := n.volume("m"); len(v.Mirror.OutOfSync) != 0 {
			t.Fatalf("mirror back in sync, but legs %v still recorded out of sync", v.Mirror.OutOfSync)
		}
		n.fio(first + " --verify_only")
		n.fio(second + " --verify_only")

		// A transient fault of the same SSD at run time, with the daemon
		// running: it records the leg out of sync within seconds; repair
		// reloads the leg's devices and gives the leg back to dm-raid,
		// which resyncs what was written meanwhile, and the record goes.
		n.startDaemon("--embedded-etcd --etcd-data-dir /run/etcd --leg-retry 3s")
		third := fioJob("/dev/mapper/tc-m", "third", "randwrite", "44M", "16M")
		n.failLeg("m", 1)
		n.fio(third + " --do_verify=1 --fsync_on_close=1")
		if v := n.volume("m"); v.Mirror == nil || v.Mirror.Health != "AD" {
			t.Fatalf("after a transient fault: mirror %+v, want AD", v.Mirror)
		}
		n.waitOutOfSync("m", []int{1})
		start := time.Now()
		out := n.mustTidectl("volume repair m")
		if !strings.Contains(out, "tc-m-wleg1") || !strings.Contains(out, "tc-m-wdata") {
			t.Fatalf("repair did not reload the failed leg and the mirror:\n%s", out)
		}
		n.waitMirror("m", "AA")
		t.Logf("repair to both legs in sync: %.1fs", time.Since(start).Seconds())
		n.waitOutOfSync("m", nil)

		// Another transient fault, and the SSD answers again by itself:
		// the daemon gives the leg back (after --leg-retry, doubling while
		// it keeps failing) and dm-raid resyncs it, with no operator.
		fourth := fioJob("/dev/mapper/tc-m", "fourth", "randwrite", "16M", "8M")
		n.failLeg("m", 1)
		n.fio(fourth + " --do_verify=1 --fsync_on_close=1")
		n.waitOutOfSync("m", []int{1})
		n.restoreLeg("m", 1)
		start = time.Now()
		n.waitMirror("m", "AA")
		t.Logf("daemon gave the leg back, in sync %.1fs after the SSD answered", time.Since(start).Seconds())
		n.waitOutOfSync("m", nil)
		if log := n.mustSh("cat /run/daemon.log"); !strings.Contains(log, "failed write mirror leg given back") {
			t.Fatalf("the mirror is whole again, but not by the daemon:\n%s", log)
		}

		// Leg 1 missed the second and third jobs' writes; with leg 0 gone
		// every read of a cached block is served by leg 1 alone.
		n.failLeg("m", 0)
		n.fio(first + " --verify_only")
		n.fio(second + " --verify_only")
		n.fio(third + " --verify_only")
		n.fio(fourth + " --verify_only")
		if v := n.volume("m"); v.Mirror == nil || v.Mirror.Health != "DA" || v.WriteCache == nil || v.WriteCache.Error != 0 {
			t.Fatalf("after failing leg 0: mirror %+v, write cache %+v; want health DA and no write cache error", v.Mirror, v.WriteCache)
		}
	})
}
