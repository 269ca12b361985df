//go:build vm

package vm_test

import (
	"strings"
	"testing"
	"time"

	"github.com/tidecache/tidecache/tests/vm/harness"
)

// addSSDNode has one SSD in the pool and a spare of the same size to add.
var addSSDNode = nodeSpec{HDDs: 4, HDDSize: 256 << 20, SSDs: []int64{256 << 20}, Spares: []int64{256 << 20}}

// TestAddSSD adds an SSD to a pool whose volume holds dirty data, with a
// power cut in the middle: after the new SSD got the layout, before the
// pool's SSD and origin did. Assembly finishes the change, the data
// verifies, a second add-ssd says the SSD is a member, and the new space
// takes a write cache the old SSD had no room for.
func TestAddSSD(t *testing.T) {
	bin, err := binaries()
	if err != nil {
		t.Fatal(err)
	}
	dir := harness.TestDir(t)
	n := bootNodeIn(t, dir, bin, addSSDNode)
	spare := n.spares()[0]
	n.createPool("tank")
	n.mustTidectl("volume create db --size 128M --write-cache 32M")
	job := fioJob("/dev/mapper/tc-db", "addssd", "randwrite", "0", "16M")
	n.fio(job + " --do_verify=1")
	if d := n.volume("db").WriteCache.DirtyBlocks; d == 0 {
		t.Fatal("no dirty blocks before add-ssd")
	}
	n.wantFail("volume create big --size 64M --write-cache 230M --protect none", "not enough free space")

	// A device with a filesystem is refused without --force.
	n.mustSh("mkfs.ext4 -q -F " + spare)
	n.wantFail("pool add-ssd tank --ssd "+spare, "ext4", "--force")

	// The power cut: add-ssd pauses once the new SSD's superblock is
	// written and synced.
	n.mustSh("(TIDECACHE_TEST_PAUSE_AT=add-ssd:new-member tidectl pool add-ssd tank --force --ssd " + spare + " >/run/addssd.log 2>&1 &)")
	n.eventually(2*time.Minute, "grep -c 'paused at add-ssd:new-member' /run/addssd.log || true", "1")
	if err := n.Kill(); err != nil {
		t.Fatal(err)
	}

	n = bootNodeIn(t, dir, bin, addSSDNode)
	asm := n.mustSh("tidecached assemble 2>&1")
	if v := n.volume("db"); v.State != "active" {
		t.Fatalf("after the cut, volume db is %s:\n%s", v.State, asm)
	}
	out := n.mustTidectl("pool show tank")
	if strings.Count(out, spare) != 1 {
		t.Fatalf("after the cut the pool does not list %s:\n%s", spare, out)
	}
	n.fio(job + " --verify_only")
	if out := n.mustTidectl("pool add-ssd tank --ssd " + spare); !strings.Contains(out, "is a member (2 SSDs)") {
		t.Errorf("second add-ssd: %s", out)
	}
	gens := n.mustSh("tidectl -o json pool show tank | grep -o '\"generation\": [0-9]*' | sort -u | wc -l")
	if strings.TrimSpace(gens) != "1" {
		t.Errorf("the pool's superblocks disagree on the generation after assembly:\n%s", n.mustSh("tidectl -o json pool show tank"))
	}
	n.mustTidectl("volume create big --size 64M --write-cache 230M --protect none")
	n.fio(fioJob("/dev/mapper/tc-big", "big", "randwrite", "0", "8M") + " --do_verify=1")
	n.fio(job + " --verify_only")
}
