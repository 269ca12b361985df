//go:build vm

package vm_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/tidecache/tidecache/tests/vm/harness"
)

// twoSSDNode has a pool's RAID10 and two SSDs.
var twoSSDNode = nodeSpec{HDDs: 4, HDDSize: 256 << 20, SSDs: []int64{256 << 20, 256 << 20}}

// TestRemoveSSD takes out the SSD that holds a writeback volume's write
// and read caches, with a power cut in the middle: the volume drained and
// its layout moved to the other SSD (new slices zeroed), its devices not
// yet rebuilt. Assembly builds it on the new slices, the data verifies
// and the cache takes writes; running remove-ssd again finishes, and the
// SSD is then free: replace-ssd puts it back in place of the other one,
// the caches move onto it, and the data still verifies.
func TestRemoveSSD(t *testing.T) {
	bin, err := binaries()
	if err != nil {
		t.Fatal(err)
	}
	dir := harness.TestDir(t)
	n := bootNodeIn(t, dir, bin, twoSSDNode)
	n.createPool("tank")
	n.mustTidectl("volume create db --size 128M --write-cache 32M --read-cache 16M --protect none")
	job := fioJob("/dev/mapper/tc-db", "removessd", "randwrite", "0", "16M")
	n.fio(job + " --do_verify=1")
	if d := n.volume("db").WriteCache.DirtyBlocks; d == 0 {
		t.Fatal("no dirty blocks before remove-ssd")
	}
	busy := usedSSD(t, n)

	n.mustSh("(TIDECACHE_TEST_PAUSE_AT=remove-ssd:moved tidectl pool remove-ssd tank --ssd " + busy + " >/run/removessd.log 2>&1 &)")
	n.eventually(3*time.Minute, "grep -c 'paused at remove-ssd:moved' /run/removessd.log || true", "1")
	if log := n.mustSh("cat /run/removessd.log"); !strings.Contains(log, "dirty blocks") {
		t.Errorf("remove-ssd showed no drain progress:\n%s", log)
	}
	if err := n.Kill(); err != nil {
		t.Fatal(err)
	}

	n = bootNodeIn(t, dir, bin, twoSSDNode)
	asm := n.mustSh("tidecached assemble 2>&1")
	v := n.volume("db")
	if v.State != "active" || v.Mode != "writeback" || v.WriteCache == nil {
		t.Fatalf("after the cut: volume db %s in %s, write cache %v:\n%s", v.State, v.Mode, v.WriteCache, asm)
	}
	if got := usedSSD(t, n); got == busy {
		t.Fatalf("after the cut db's caches are still on %s", busy)
	}
	n.fio(job + " --verify_only")
	more := fioJob("/dev/mapper/tc-db", "more", "randwrite", "64M", "8M")
	n.fio(more + " --do_verify=1")
	if d := n.volume("db").WriteCache.DirtyBlocks; d == 0 {
		t.Error("the moved write cache takes no writes")
	}

	res := n.tidectl("pool remove-ssd tank --ssd " + busy)
	if res.ExitCode != 0 || !strings.Contains(res.Stdout, "removed (1 SSDs left)") {
		t.Fatalf("remove-ssd again: exit %d\n%s%s", res.ExitCode, res.Stdout, res.Stderr)
	}
	if out := n.mustTidectl("pool show tank"); strings.Contains(out, busy) {
		t.Errorf("pool show still lists %s:\n%s", busy, out)
	}
	n.fio(job + " --verify_only")
	n.fio(more + " --verify_only")
	// Wiped: the pool takes it back as a new SSD (no --destroy-pool) in
	// place of the other one, and the caches move back onto it.
	other := usedSSD(t, n)
	res = n.tidectl("pool replace-ssd tank --old " + other + " --new " + busy)
	if res.ExitCode != 0 || !strings.Contains(res.Stdout, "replaced by "+busy) {
		t.Fatalf("replace-ssd: exit %d\n%s%s", res.ExitCode, res.Stdout, res.Stderr)
	}
	if got := usedSSD(t, n); got != busy {
		t.Errorf("after replace-ssd db's caches are on %s, want %s", got, busy)
	}
	if v := n.volume("db"); v.Mode != "writeback" || v.WriteCache == nil {
		t.Errorf("after replace-ssd: mode %s, write cache %v", v.Mode, v.WriteCache)
	}
	n.fio(job + " --verify_only")
	n.fio(more + " --verify_only")
}

// usedSSD returns the path of the pool's SSD with the least free space:
// the one holding volume db's caches.
func usedSSD(t *testing.T, n *node) string {
	t.Helper()
	var pools []struct {
		Members []struct {
			Path      string `json:"path"`
			FreeBytes uint64 `json:"free_bytes"`
		} `json:"members"`
	}
	out := n.mustTidectl("-o json pool show tank")
	if err := json.Unmarshal([]byte(out), &pools); err != nil || len(pools) != 1 || len(pools[0].Members) == 0 {
		t.Fatalf("pool show: %v\n%s", err, out)
	}
	best := pools[0].Members[0]
	for _, m := range pools[0].Members[1:] {
		if m.FreeBytes < best.FreeBytes {
			best = m
		}
	}
	return best.Path
}
