// SPDX-License-Identifier: Apache-2.0

//go:build vm

package vm_test

import (
	"strings"
	"testing"
	"time"

	"github.com/tidecache/tidecache/tests/vm/harness"
)

// startArrays starts the md arrays whose members are present, as udev's
// incremental assembly (64-md-raid-assembly.rules) does at boot.
const startArrays = "mdadm --assemble --scan >/dev/null 2>&1; cat /proc/mdstat | grep -q active"

// TestForceStart loses a pool's only SSD for good: a writethrough volume
// (nothing dirty on the SSD) and a writeback one (dirty blocks on it).
// Assembly refuses the pool; force-start refuses it too until the
// writeback volume's loss is accepted; then both come up on the origin in
// passthrough, the writethrough volume with all its data and the
// writeback one with what had been flushed, its loss recorded. After
// another power cut a plain assembly starts the pool.
func TestForceStart(t *testing.T) {
	besideAnother(t, 40*time.Second)
	bin, err := binaries()
	if err != nil {
		t.Fatal(err)
	}
	dir := harness.TestDir(t)
	withSSD := smallNode
	n := bootNodeIn(t, dir, bin, withSSD)
	n.createPool("tank")
	n.mustTidectl("volume create wt --size 64M --write-cache 16M --read-cache 16M --mode writethrough")
	n.mustTidectl("volume create wb --size 64M --write-cache 32M")
	wt := fioJob("/dev/mapper/tc-wt", "wt", "randwrite", "0", "16M")
	flushed := fioJob("/dev/mapper/tc-wb", "flushed", "randwrite", "0", "8M")
	dirty := fioJob("/dev/mapper/tc-wb", "dirty", "randwrite", "16M", "8M")
	n.fio(wt + " --do_verify=1")
	n.fio(flushed + " --do_verify=1")
	n.mustTidectl("volume flush wb")
	n.fio(dirty + " --do_verify=1")
	if d := n.volume("wb").WriteCache.DirtyBlocks; d == 0 {
		t.Fatal("no dirty blocks in wb's write cache before the SSD dies")
	}
	if err := n.Kill(); err != nil {
		t.Fatal(err)
	}

	// The SSD is gone: the node boots with the HDDs alone. With no SSD
	// superblock to name it, the pool is found on its origin, which must
	// be running: udev's incremental md assembly starts it on a server,
	// mdadm does here.
	noSSD := nodeSpec{HDDs: withSSD.HDDs, HDDSize: withSSD.HDDSize}
	n = bootNodeIn(t, dir, bin, noSSD)
	n.mustSh(startArrays)
	if res := n.sh("tidecached assemble 2>&1"); res.ExitCode == 0 || !strings.Contains(res.Stdout, "REFUSED") {
		t.Fatalf("assemble without the SSD: exit %d, want the pool refused:\n%s", res.ExitCode, res.Stdout)
	}
	n.wantFail("pool force-start tank", "wb", "writeback", "--accept-data-loss wb")
	if devs := n.dmDevices(); len(devs) != 0 {
		t.Fatalf("a refused force-start left devices: %v", devs)
	}
	res := n.tidectl("pool force-start tank --accept-data-loss wb")
	if res.ExitCode != 0 || !strings.Contains(res.Stdout, "volume wb: write cache dropped, writeback -> passthrough") ||
		!strings.Contains(res.Stderr, "volume wb lost the writes") {
		t.Fatalf("force-start: exit %d\n%s%s", res.ExitCode, res.Stdout, res.Stderr)
	}
	for _, name := range []string{"wt", "wb"} {
		if v := n.volume(name); v.State != "active" || v.Mode != "passthrough" || v.WriteCache != nil {
			t.Errorf("volume %s after force-start: state %s, mode %s, write cache %v", name, v.State, v.Mode, v.WriteCache)
		}
	}
	if out := n.mustTidectl("volume show wb"); !strings.Contains(out, "Data loss:") {
		t.Errorf("volume show wb does not record the loss:\n%s", out)
	}
	if out := n.mustTidectl("volume show wt"); strings.Contains(out, "Data loss:") {
		t.Errorf("volume show wt records a loss it did not have:\n%s", out)
	}
	n.fio(wt + " --verify_only")
	n.fio(flushed + " --verify_only")

	if err := n.Kill(); err != nil {
		t.Fatal(err)
	}
	n = bootNodeIn(t, dir, bin, noSSD)
	n.mustSh(startArrays + " && tidecached assemble")
	n.fio(wt + " --verify_only")
	n.fio(flushed + " --verify_only")
}
