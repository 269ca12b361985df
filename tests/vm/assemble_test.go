// SPDX-License-Identifier: Apache-2.0

//go:build vm

package vm_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidecache/tidecache/tests/vm/harness"
)

// twoSSDs is a node with two SSD members, so one can go missing.
var twoSSDs = nodeSpec{HDDs: 4, HDDSize: 256 << 20, SSDs: []int64{256 << 20, 256 << 20}, MemoryMB: 1024}

// bootWithout boots the node's images with the SSDs at the given indexes
// replaced by blank disks of the same size, as if they had died; device
// names of the other disks do not move.
func bootWithout(t *testing.T, dir, bin string, spec nodeSpec, missing ...int) *node {
	t.Helper()
	disks := spec.disks(dir)
	for _, i := range missing {
		d := &disks[spec.HDDs+i]
		d.Path = filepath.Join(dir, "blank"+filepath.Base(d.Path))
		d.Size = spec.SSDs[i]
	}
	v := harness.MustBoot(t, harness.Config{Name: "node", Dir: dir, Disks: disks, MemoryMiB: spec.MemoryMB, CPUs: vmCPUs(t)})
	return &node{VM: v, t: t, bin: bin, dir: dir, spec: spec}
}

// TestAssembleAfterPowerCut checks boot assembly from the superblocks: with
// every SSD present it brings back both volumes with their dirty data; with
// one or all SSDs missing it refuses the pool, names what is missing, and
// creates no device, so no origin is ever exposed without its cache.
func TestAssembleAfterPowerCut(t *testing.T) {
	besideAnother(t, 50*time.Second)
	bin, err := binaries()
	if err != nil {
		t.Fatal(err)
	}
	dir := harness.TestDir(t)
	n := bootNodeIn(t, dir, bin, twoSSDs)
	n.createPool("tank")
	// Unprotected on purpose: one copy of each write cache, on one SSD
	// each (TestReplicaLocalMirror covers mirrored ones).
	n.mustTidectl("volume create a --size 64M --write-cache 32M --protect none")
	n.mustTidectl("volume create b --size 64M --write-cache 32M --protect none")
	jobA := fioJob("/dev/mapper/tc-a", "a", "randwrite", "0", "16M")
	jobB := fioJob("/dev/mapper/tc-b", "b", "randwrite", "0", "16M")
	n.fio(jobA + " --do_verify=1 --fsync_on_close=1")
	n.fio(jobB + " --do_verify=1 --fsync_on_close=1")
	for _, v := range []string{"a", "b"} {
		if d := n.volume(v).WriteCache.DirtyBlocks; d == 0 {
			t.Fatalf("volume %s: no dirty blocks before the power cut; the test would prove nothing", v)
		}
	}
	if err := n.Kill(); err != nil {
		t.Fatal(err)
	}

	t.Run("one SSD missing", func(t *testing.T) {
		n := bootWithout(t, dir, bin, twoSSDs, 1)
		res := n.sh("tidecached assemble")
		if res.ExitCode == 0 || !strings.Contains(res.Stdout, "REFUSED") || !strings.Contains(res.Stdout, "not found") || !strings.Contains(res.Stdout, "/dev/vdf") {
			t.Fatalf("assemble with a missing SSD: exit %d\n%s%s", res.ExitCode, res.Stdout, res.Stderr)
		}
		if devs := n.dmDevices(); len(devs) != 0 {
			t.Fatalf("devices created for a refused pool: %v", devs)
		}
		if out := n.mustTidectl("pool show tank"); !strings.Contains(out, "MISSING") {
			t.Fatalf("pool show does not flag the missing SSD:\n%s", out)
		}
		n.Kill()
	})

	t.Run("all SSDs missing", func(t *testing.T) {
		n := bootWithout(t, dir, bin, twoSSDs, 0, 1)
		n.mustSh("mdadm --assemble --scan --config=partitions") // as udev would at boot
		res := n.sh("tidecached assemble")
		if res.ExitCode == 0 || !strings.Contains(res.Stdout, "REFUSED") {
			t.Fatalf("assemble with no SSD: exit %d\n%s%s", res.ExitCode, res.Stdout, res.Stderr)
		}
		if devs := n.dmDevices(); len(devs) != 0 {
			t.Fatalf("devices created for a refused pool: %v", devs)
		}
		n.Kill()
	})

	t.Run("all SSDs back", func(t *testing.T) {
		n := bootNodeIn(t, dir, bin, twoSSDs)
		// One SSD is late, as a disk whose controller's driver loads
		// late at boot: its PCI device is removed, and rescanned 3 s
		// into the assembly, which waits for it instead of refusing
		// the pool.
		late := "/sys/block/" + strings.TrimPrefix(n.ssds()[1], "/dev/") + "/device"
		n.mustSh("echo 1 > $(readlink -f " + late + ")/../remove && ! test -e " + late)
		n.mustSh("(sleep 3; echo 1 > /sys/bus/pci/rescan) >/dev/null 2>&1 &")
		res := n.sh("tidecached assemble --wait-devices 60s")
		if res.ExitCode != 0 || !strings.Contains(res.Stderr, "waiting for devices") || !strings.Contains(res.Stderr, "pool tank: SSD") {
			t.Fatalf("assemble with an SSD 3 s late: exit %d, want 0 after waiting for it\nstdout:\n%s\nstderr:\n%s", res.ExitCode, res.Stdout, res.Stderr)
		}
		out := res.Stdout
		if !strings.Contains(out, "/dev/mapper/tc-a") || !strings.Contains(out, "/dev/mapper/tc-b") {
			t.Fatalf("assemble did not report both volumes:\n%s", out)
		}
		// Idempotent: a second run changes nothing and succeeds.
		n.mustSh("tidecached assemble")
		n.fio(jobA + " --verify_only")
		n.fio(jobB + " --verify_only")
		for _, v := range []string{"a", "b"} {
			if d := n.volume(v).WriteCache.DirtyBlocks; d == 0 {
				t.Errorf("volume %s: dirty blocks vanished over the power cut (they should still be cached)", v)
			}
		}
	})
}
