//go:build vm

package vm_test

import (
	"strings"
	"testing"

	"github.com/tidecache/tidecache/tests/vm/harness"
)

// TestUncache drops the caches of a volume that holds dirty data and is
// open: the dirty blocks are written back (progress shown), the device
// stays open and keeps its data, the pool gets the slices back, and the
// volume comes back from a power cut without caches.
func TestUncache(t *testing.T) {
	bin, err := binaries()
	if err != nil {
		t.Fatal(err)
	}
	dir := harness.TestDir(t)
	n := bootNodeIn(t, dir, bin, smallNode)
	n.createPool("tank")
	n.mustTidectl("volume create db --size 128M --write-cache 32M --read-cache 16M")
	freeBefore := n.mustSh("tidectl -o json pool show tank | grep -o '\"free_bytes\": [0-9]*'")
	job := fioJob("/dev/mapper/tc-db", "uncache", "randwrite", "0", "24M")
	n.fio(job + " --do_verify=1")
	if d := n.volume("db").WriteCache.DirtyBlocks; d == 0 {
		t.Fatal("no dirty blocks before uncache; the test would prove nothing")
	}
	// A reader holds the device open throughout, as a mounted filesystem
	// would.
	n.mustSh("(sleep 600 </dev/mapper/tc-db >/dev/null 2>&1 &)")

	res := n.tidectl("volume uncache db")
	if res.ExitCode != 0 || !strings.Contains(res.Stdout, "volume db uncached") || !strings.Contains(res.Stderr, "dirty") {
		t.Fatalf("volume uncache: exit %d, want the drain's progress and the result:\n%s%s", res.ExitCode, res.Stdout, res.Stderr)
	}
	v := n.volume("db")
	if v.Mode != "passthrough" || v.WriteCache != nil || v.ReadCache != nil {
		t.Fatalf("after uncache: mode %s, write cache %v, read cache %v", v.Mode, v.WriteCache, v.ReadCache)
	}
	if open := n.mustSh("dmsetup info -c --noheadings -o open tc-db"); strings.TrimSpace(open) != "1" {
		t.Errorf("tc-db open count %q after uncache, want the reader's 1", open)
	}
	if devs := n.dmDevices(); len(devs) != 2 {
		t.Errorf("devices after uncache %v, want tc-db over tc-db-origin alone", devs)
	}
	if freeAfter := n.mustSh("tidectl -o json pool show tank | grep -o '\"free_bytes\": [0-9]*'"); freeAfter == freeBefore {
		t.Errorf("free SSD space unchanged by uncache: %s", freeAfter)
	}
	n.fio(job + " --verify_only")
	n.wantFail("volume set-mode db writeback", "no write cache")
	if out := n.mustTidectl("volume uncache db"); !strings.Contains(out, "has no cache: nothing to do") {
		t.Errorf("second uncache: %s", out)
	}

	if err := n.Kill(); err != nil {
		t.Fatal(err)
	}
	n = bootNodeIn(t, dir, bin, smallNode)
	n.mustSh("tidecached assemble")
	if v := n.volume("db"); v.State != "active" || v.Mode != "passthrough" || v.WriteCache != nil {
		t.Fatalf("after the power cut: state %s, mode %s, write cache %v", v.State, v.Mode, v.WriteCache)
	}
	n.fio(job + " --verify_only")
}
