// SPDX-License-Identifier: Apache-2.0

//go:build vm

package vm_test

import (
	"strings"
	"testing"
	"time"

	"github.com/tidecache/tidecache/tests/vm/harness"
)

// ssdNode has one SSD in the pool and two spares of the same size to add.
var ssdNode = nodeSpec{HDDs: 4, HDDSize: 256 << 20, SSDs: []int64{256 << 20}, Spares: []int64{256 << 20, 256 << 20}}

// TestSSDLifecycle adds, removes and replaces SSDs under a writeback
// volume that holds dirty data, with a power cut in the middle of add-ssd
// and of remove-ssd (TIDECACHE_TEST_PAUSE_AT stops each at its riskiest
// step, the test cuts the power there):
//   - add-ssd: a spare with ext4 is refused without --force; the cut
//     comes after the new SSD got the layout, before the pool's SSD and
//     origin did. Assembly finishes the change, the data verifies, a
//     second add-ssd says the SSD is a member, every superblock has the
//     same generation, and the new space takes a write cache the old SSD
//     had no room for;
//   - a second volume mirrors its write cache on both SSDs: removing one
//     is refused (the mirror needs two others) until a third SSD is added;
//   - remove-ssd of the SSD that holds the volume's write and read caches
//     and a leg of the mirror: the cut comes after the first volume was
//     drained (progress shown) and its slices recorded on another SSD,
//     before its devices were rebuilt. Assembly builds it there in
//     writeback, the data verifies and new writes are cached; remove-ssd
//     again moves the mirror onto the two other SSDs (both legs in sync)
//     and wipes the SSD;
//   - replace-ssd puts the wiped SSD back (no --destroy-pool needed) in
//     place of another, the caches and a mirror leg move onto it, and all
//     the data verifies.
func TestSSDLifecycle(t *testing.T) {
	besideAnother(t, 80*time.Second)
	bin, err := binaries()
	if err != nil {
		t.Fatal(err)
	}
	dir := harness.TestDir(t)
	n := bootNodeIn(t, dir, bin, ssdNode)
	first, spare, third := n.ssds()[0], n.spares()[0], n.spares()[1]
	n.createPool("tank")
	n.mustTidectl("volume create db --size 128M --write-cache 32M --read-cache 16M --protect none")
	job := fioJob("/dev/mapper/tc-db", "ssd", "randwrite", "0", "16M")
	n.fio(job + " --do_verify=1")
	if d := n.volume("db").WriteCache.DirtyBlocks; d == 0 {
		t.Fatal("no dirty blocks in the write cache; the test would prove nothing")
	}
	n.wantFail("volume create big --size 64M --write-cache 200M --protect none", "not enough free space")

	// add-ssd, cut after the new SSD's superblock.
	n.mustSh("mkfs.ext4 -q -F " + spare)
	n.wantFail("pool add-ssd tank --ssd "+spare, "ext4", "--force")
	n.mustSh("(TIDECACHE_TEST_PAUSE_AT=add-ssd:new-member tidectl pool add-ssd tank --force --ssd " + spare + " >/run/addssd.log 2>&1 &)")
	n.eventually(2*time.Minute, "grep -c 'paused at add-ssd:new-member' /run/addssd.log || true", "1")
	n = cutAndAssemble(t, n, dir, bin)
	if out := n.mustTidectl("pool show tank"); !strings.Contains(out, spare) {
		t.Fatalf("after the cut the pool does not list %s:\n%s", spare, out)
	}
	n.fio(job + " --verify_only")
	if out := n.mustTidectl("pool add-ssd tank --ssd " + spare); !strings.Contains(out, "is a member (2 SSDs)") {
		t.Errorf("second add-ssd: %s", out)
	}
	if gens := n.mustSh("tidectl -o json pool show tank | grep -o '\"generation\": [0-9]*' | sort -u | wc -l"); strings.TrimSpace(gens) != "1" {
		t.Errorf("the pool's superblocks disagree on the generation:\n%s", n.mustTidectl("-o json pool show tank"))
	}
	n.mustTidectl("volume create big --size 64M --write-cache 200M --protect none")
	n.mustTidectl("volume delete big")

	// A write cache mirrored on both SSDs: removing one of them would
	// leave the mirror one SSD; a third SSD makes room.
	n.mustTidectl("volume create mir --size 64M --write-cache 16M --protect local")
	mirJob := fioJob("/dev/mapper/tc-mir", "mir", "randwrite", "0", "8M")
	n.fio(mirJob + " --do_verify=1")
	n.wantFail("pool remove-ssd tank --ssd "+first, "protection local needs two SSDs")
	n.mustTidectl("pool add-ssd tank --ssd " + third)

	// remove-ssd of db's SSD, cut after db's move is recorded.
	if got := cacheOn(t, n, "db"); got != first {
		t.Fatalf("db's write cache is on %s, want %s", got, first)
	}
	n.mustSh("(TIDECACHE_TEST_PAUSE_AT=remove-ssd:moved tidectl pool remove-ssd tank --ssd " + first + " >/run/removessd.log 2>&1 &)")
	n.eventually(3*time.Minute, "grep -c 'paused at remove-ssd:moved' /run/removessd.log || true", "1")
	if log := n.mustSh("cat /run/removessd.log"); !strings.Contains(log, "dirty blocks") {
		t.Errorf("remove-ssd showed no drain progress:\n%s", log)
	}
	n = cutAndAssemble(t, n, dir, bin)
	if v := n.volume("db"); v.Mode != "writeback" || v.WriteCache == nil {
		t.Fatalf("after the cut: volume db in %s, write cache %v", v.Mode, v.WriteCache)
	}
	if got := cacheOn(t, n, "db"); got == first {
		t.Fatalf("after the cut db's write cache is still on %s", first)
	}
	n.fio(job + " --verify_only")
	more := fioJob("/dev/mapper/tc-db", "more", "randwrite", "64M", "8M")
	n.fio(more + " --do_verify=1")
	if d := n.volume("db").WriteCache.DirtyBlocks; d == 0 {
		t.Error("the moved write cache takes no writes")
	}
	// Again: the mirror is placed anew on the two other SSDs, then the SSD
	// leaves the pool.
	res := n.tidectl("pool remove-ssd tank --ssd " + first)
	if res.ExitCode != 0 || !strings.Contains(res.Stdout, "removed (2 SSDs left)") {
		t.Fatalf("remove-ssd again: exit %d\n%s%s", res.ExitCode, res.Stdout, res.Stderr)
	}
	if out := n.mustTidectl("pool show tank"); strings.Contains(out, first) {
		t.Errorf("pool show still lists %s:\n%s", first, out)
	}
	checkMirror(t, n, "mir")
	n.fio(mirJob + " --verify_only")

	// replace-ssd: the wiped SSD back in place of the spare.
	res = n.tidectl("pool replace-ssd tank --old " + spare + " --new " + first)
	if res.ExitCode != 0 || !strings.Contains(res.Stdout, "replaced by "+first) {
		t.Fatalf("replace-ssd: exit %d\n%s%s", res.ExitCode, res.Stdout, res.Stderr)
	}
	if out := n.mustTidectl("pool show tank"); strings.Contains(out, spare) {
		t.Errorf("pool show still lists %s:\n%s", spare, out)
	}
	for _, name := range []string{"db", "mir"} {
		if v := n.volume(name); v.Mode != "writeback" || v.WriteCache == nil {
			t.Errorf("after replace-ssd: %s in %s, write cache %v", name, v.Mode, v.WriteCache)
		}
	}
	checkMirror(t, n, "mir")
	n.fio(job + " --verify_only")
	n.fio(more + " --verify_only")
	n.fio(mirJob + " --verify_only")
}

// checkMirror waits for a volume's write mirror to have both legs in
// sync.
func checkMirror(t *testing.T, n *node, volume string) {
	t.Helper()
	n.eventually(2*time.Minute, "tidectl -o json volume show "+volume+" | grep -o '\"health\": \"[A-Za-z]*\"'", `"AA"`)
	if v := n.volume(volume); v.Mirror == nil || v.Mirror.Copies != 2 {
		t.Errorf("volume %s mirror: %+v, want 2 copies", volume, v.Mirror)
	}
}

// cacheOn returns the SSD that holds leg 0 of a volume's write cache (the
// first linear target of tc-<volume>-wdata, or of its leg 0 when the
// write cache is mirrored).
func cacheOn(t *testing.T, n *node, volume string) string {
	t.Helper()
	dev := "tc-" + volume + "-wdata"
	if strings.Contains(n.mustSh("dmsetup table "+dev), " raid ") {
		dev = "tc-" + volume + "-wleg0"
	}
	f := strings.Fields(n.mustSh("dmsetup table " + dev))
	if len(f) < 5 || f[2] != "linear" {
		t.Fatalf("table of %s: %v", dev, f)
	}
	return strings.TrimSpace(n.mustSh("lsblk -rno PATH,MAJ:MIN | awk '$2 == \"" + f[3] + "\" {print $1}'"))
}

// cutAndAssemble cuts the power of n, boots it again on the same images
// and assembles; volume db must come up.
func cutAndAssemble(t *testing.T, n *node, dir, bin string) *node {
	t.Helper()
	if err := n.Kill(); err != nil {
		t.Fatal(err)
	}
	n = bootNodeIn(t, dir, bin, ssdNode)
	asm := n.mustSh("tidecached assemble 2>&1")
	if v := n.volume("db"); v.State != "active" {
		t.Fatalf("after the cut, volume db is %s:\n%s", v.State, asm)
	}
	return n
}
