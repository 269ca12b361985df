// SPDX-License-Identifier: Apache-2.0

//go:build vm

package vm_test

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestMoveWarm checks a planned move of a volume on a shared origin
// (tidectl volume move) on the failover test's three nodes, through etcd:
//   - a adopts san's lun0 as db, its write cache mirrored on b; a writer
//     of checksummed records acknowledges each one after fdatasync and
//     leaves dirty blocks in the write cache;
//   - a move to san, which keeps no pool, is refused before anything
//     changes; a move to b waits while the device is open on a, saying
//     so in the status;
//   - once it is closed, a stops db and hands it over: b runs it on its
//     replica, with the dirty blocks still in the write cache (nothing
//     was written back for the move) and every acknowledged record read
//     back on b; a dropped its copy; the handover time is logged;
//   - the leader places a new replica on a, b copies the write cache
//     onto it, and db moves back to a the same way, every record intact.
func TestMoveWarm(t *testing.T) {
	bin, err := binaries()
	if err != nil {
		t.Fatal(err)
	}
	c, _ := startFailoverCluster(t, bin)
	defer c.dumpLogs()
	const dev = "/dev/mapper/tc-db"
	eps := " --etcd-endpoints " + c.endpoints()

	c.a.mustTidectl("volume adopt db --shared-origin san/lun0 --node a --replica-node b --write-cache 64M --wait --timeout 3m" + eps)
	if v := c.waitMirror("db", "AA", 2*time.Minute); v.PeerNode != "b" {
		t.Fatalf("volume db mirrored on %q, want b", v.PeerNode)
	}
	// 16 MiB of records: under the write cache's high watermark, so
	// they stay dirty until something writes them back.
	c.a.mustSh(fmt.Sprintf("crashwriter write -dev %s -ack %s -cycle 1 -blocks 4096 >/run/writer.log 2>&1", dev, c.a.AckDevice()))
	acks, err := c.a.Acks()
	if err != nil {
		t.Fatal(err)
	}
	through := lastAck(acks, 1)
	if through != 4095 {
		t.Fatalf("the writer acknowledged records through %d, want 4095:\n%s", through, c.a.sh("cat /run/writer.log").Stdout)
	}
	before := dirtyBlocks(t, c.a.mustTidectl("-o json volume show db"))
	if before == 0 {
		t.Fatal("no dirty blocks in db's write cache before the move: the test would prove nothing")
	}

	res := c.a.tidectl("volume move db --to san" + eps)
	if res.ExitCode == 0 || !strings.Contains(res.Stderr, "node san cannot keep the replica of volume db") {
		t.Fatalf("move to san (no pool): exit %d, want a refusal naming the replica:\n%s%s", res.ExitCode, res.Stdout, res.Stderr)
	}

	// The device held open on a: the move waits and says why.
	c.a.mustSh("sleep 600 <" + dev + " >/dev/null 2>&1 & echo $! >/run/holder.pid")
	c.a.mustTidectl("volume move db --to b" + eps)
	c.b.eventually(time.Minute, "tidectl -o json volume show db --etcd-endpoints "+c.client("b"), "move to node b waits")
	if got := c.show("b", "db"); got.Node != "a" {
		t.Fatalf("db moved while its device was open on a: %+v", got)
	}
	c.a.mustSh("kill $(cat /run/holder.pid)")

	out := c.a.mustTidectl("volume move db --to b --wait --timeout 3m" + eps)
	t.Logf("a → b: %s", strings.TrimSpace(out))
	checkMoved(t, c, "b", "a", out, through)

	// Protected again on a, then back to a, warm again.
	deadline := time.Now().Add(4 * time.Minute)
	for {
		fv := c.show("b", "db")
		if fv.PeerNode == "a" && fv.Mirror != nil && fv.Mirror.Health == "AA" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("db not protected again on a after its move: %+v, mirror %+v\nb's daemon log:\n%s", fv, fv.Mirror, c.b.sh("tail -30 /run/daemon.log").Stdout)
		}
		time.Sleep(time.Second)
	}
	out = c.b.mustTidectl("volume move db --to a --wait --timeout 3m" + eps)
	t.Logf("b → a: %s", strings.TrimSpace(out))
	checkMoved(t, c, "a", "b", out, through)
}

// handedOver reads the handover time `volume move --wait` reports.
var handedOver = regexp.MustCompile(`runs on node (\S+): handed over in ([0-9.]+) s.*; (\d+) dirty blocks kept`)

// checkMoved checks db after a move from one node to another: the
// command's report, the status, the dirty blocks kept, every record
// through `through` read back on the new node, and no copy left on the
// old one.
func checkMoved(t *testing.T, c failoverCluster, to, from, out string, through int64) {
	t.Helper()
	m := handedOver.FindStringSubmatch(out)
	if m == nil || m[1] != to {
		t.Fatalf("volume move did not report db running on %s with its handover time:\n%s", to, out)
	}
	dirty, _ := strconv.ParseUint(m[3], 10, 64)
	if dirty == 0 {
		t.Errorf("db has no dirty blocks on %s after the move: its write cache was written back, not kept", to)
	}
	n := c.nodes[to]
	if local := dirtyBlocks(t, n.mustTidectl("-o json volume show db")); local == 0 {
		t.Errorf("db's write cache on %s holds no dirty block: the move wrote it back", to)
	}
	if v := c.show(to, "db"); v.Node != to || v.State != "active" {
		t.Fatalf("db after the move: %+v, want active on %s", v, to)
	}
	if show := n.mustTidectl("volume show db --etcd-endpoints " + c.client(to)); !strings.Contains(show, "Moved:        from node "+from) {
		t.Errorf("volume show does not say db moved from %s:\n%s", from, show)
	}
	res := n.sh(fmt.Sprintf("crashwriter verify -dev /dev/mapper/tc-db -cycle 1 -through %d", through))
	if res.ExitCode != 0 {
		t.Fatalf("records lost in the move to %s:\n%s%s", to, res.Stdout, res.Stderr)
	}
	c.nodes[from].eventually(time.Minute, "tidectl -o json volume list | grep -c '\"name\": *\"db\"' || true", "0\n")
	if out := c.nodes[from].mustSh("dmsetup ls"); strings.Contains(out, "tc-db") {
		t.Errorf("%s still has db's devices after the move:\n%s", from, out)
	}
	t.Logf("%s → %s: handed over in %s s, %d dirty blocks kept, %s", from, to, m[2], dirty, strings.TrimSpace(res.Stdout))
}

// dirtyBlocks reads dirty_blocks from `tidectl -o json volume show` on
// the node running the volume.
func dirtyBlocks(t *testing.T, show string) uint64 {
	t.Helper()
	m := regexp.MustCompile(`"dirty_blocks": *(\d+)`).FindStringSubmatch(show)
	if m == nil {
		t.Fatalf("no dirty_blocks in volume show:\n%s", show)
	}
	n, _ := strconv.ParseUint(m[1], 10, 64)
	return n
}
