// SPDX-License-Identifier: Apache-2.0

//go:build vm

package vm_test

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// The replica-first move's nodes: the failover test's, and c, a third
// node with a pool, where db's replica is kept at first. (Four VMs: a
// volume's replica must be on a node its export is served to, and the
// move's target must be another one.)
var replicaFirstSpecs = map[string]nodeSpec{
	"san": failoverSpecs["san"],
	"a":   failoverSpecs["a"],
	"b":   failoverSpecs["b"],
	"c":   failoverSpecs["b"],
}

// TestMoveReplicaFirst checks a planned move to a node that does not keep
// the volume's replica, on four nodes (san exports lun0; a, b and c have
// pools):
//   - db is adopted on a from san's lun0, its write cache mirrored on c;
//     a writer of checksummed records (each acknowledged after
//     fdatasync) runs;
//   - `tidectl volume move db --to b --wait` while the writer runs: the
//     replica moves to b first (a's mirror swaps its remote leg from c's
//     slice to b's and copies the write cache there, the writer going
//     on), the move waits for the writer to close the device, and b takes
//     db over from the replica it now keeps, the write cache not written
//     back;
//   - on b: dirty blocks still in the write cache, every acknowledged
//     record read back, a keeps no copy; the leader protects db again,
//     and exactly one node keeps its replica (c's first slice gone).
func TestMoveReplicaFirst(t *testing.T) {
	bin, err := binaries()
	if err != nil {
		t.Fatal(err)
	}
	c, _ := startFailoverClusterOf(t, bin, replicaFirstSpecs)
	defer c.dumpLogs()
	const dev = "/dev/mapper/tc-db"
	eps := " --etcd-endpoints " + c.endpoints()

	c.a.mustTidectl("volume adopt db --shared-origin san/lun0 --node a --replica-node c --write-cache 64M --wait --timeout 3m" + eps)
	c.waitProtected("a", "c")

	// The writer runs while the replica moves: 16 MiB of records, under
	// the write cache's high watermark, so they stay dirty.
	c.a.mustSh(fmt.Sprintf("(crashwriter write -dev %s -ack %s -cycle 1 -blocks 4096 >/run/writer.log 2>&1; echo $? >/run/writer.rc) &", dev, c.a.AckDevice()))
	c.a.eventually(30*time.Second, "pgrep -x crashwriter >/dev/null && echo running", "running")
	start := time.Now()
	res := c.a.tidectl("volume move db --to b --wait --timeout 3m" + eps)
	took := time.Since(start)
	if res.ExitCode != 0 {
		t.Fatalf("volume move db --to b: exit %d:\n%s%s", res.ExitCode, res.Stdout, res.Stderr)
	}
	for _, want := range []string{
		"its replica moves to node b first",
		"waiting for its replica on node b",
	} {
		if !strings.Contains(res.Stderr, want) {
			t.Errorf("volume move's progress does not say %q:\n%s", want, res.Stderr)
		}
	}
	if rc := strings.TrimSpace(c.a.sh("cat /run/writer.rc").Stdout); rc != "0" {
		t.Fatalf("the writer, running while the replica moved to b: exit %q:\n%s", rc, c.a.sh("tail -5 /run/writer.log").Stdout)
	}
	acks, err := c.a.Acks()
	if err != nil {
		t.Fatal(err)
	}
	through := lastAck(acks, 1)
	if through != 4095 {
		t.Fatalf("the writer acknowledged records through %d, want 4095:\n%s", through, c.a.sh("tail -5 /run/writer.log").Stdout)
	}
	t.Logf("a → b, the replica moved from c to b first: whole move %.1f s; %s\nits progress:\n%s", took.Seconds(), strings.TrimSpace(res.Stdout), strings.TrimSpace(res.Stderr))
	checkMoved(t, c, "b", "a", res.Stdout, through)

	// Protected again from b, by the leader: one replica, on a or c.
	var peer string
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(time.Second) {
		v := c.show("b", "db")
		if v.PeerNode != "" && v.Mirror != nil && v.Mirror.Health == "AA" {
			peer = v.PeerNode
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("db not protected again on b: %+v, mirror %+v", v, v.Mirror)
		}
	}
	list := c.b.mustTidectl("node list" + eps)
	if n := strings.Count(list, "replica of volume db "); n != 1 {
		t.Fatalf("after the move, %d replicas of db are kept, want 1 (on %s):\n%s", n, peer, list)
	}
	t.Logf("db protected again from b, its replica on %s", peer)
}
