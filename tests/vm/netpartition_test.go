// SPDX-License-Identifier: Apache-2.0

//go:build vm

package vm_test

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// etcdPorts are the client and peer ports of the test clusters' etcd
// members (etcdCluster.startDaemon).
const etcdPorts = "2389, 2390"

// cutFromEtcd drops, on n, every packet to or from an etcd port, its own
// member's included: the node still reaches the origin and the replicas
// (NVMe/TCP) but can neither read nor write the cluster's records.
func cutFromEtcd(n *node) {
	n.mustSh(fmt.Sprintf(`nft -f - <<'EOF'
table inet tcpartition {
	chain in { type filter hook input priority 0; tcp dport { %[1]s } drop; tcp sport { %[1]s } drop; }
	chain out { type filter hook output priority 0; tcp dport { %[1]s } drop; tcp sport { %[1]s } drop; }
}
EOF`, etcdPorts))
}

// heal removes what cutFromEtcd added.
func heal(n *node) { n.mustSh("nft delete table inet tcpartition") }

// failWrites puts dm-flakey under the named device of n, failing every
// write and passing reads: an SSD that has started to refuse writes.
func failWrites(t *testing.T, n *node, name string) {
	t.Helper()
	f := strings.Fields(n.mustSh("dmsetup table " + name))
	if len(f) != 5 || f[2] != "linear" {
		t.Fatalf("%s: table %q, want one linear target", name, f)
	}
	n.mustSh(fmt.Sprintf("dmsetup reload %s --table '0 %s flakey %s %s 0 3600 1 error_writes' && dmsetup resume %[1]s", name, f[1], f[3], f[4]))
}

// lastAckOf returns the last record of cycle 1 n's writer acknowledged.
func lastAckOf(t *testing.T, n *node) int64 {
	t.Helper()
	acks, err := n.Acks()
	if err != nil {
		t.Fatal(err)
	}
	return lastAck(acks, 1)
}

// TestNetworkPartitionReplicaSSDFails cuts the owner of a volume that can
// fail over off from etcd (it still reaches the origin and the replica),
// then makes the replica's SSD fail every write (issue 22, finding 1).
// md completes a mirrored write once one leg has it: with plain slices
// under the peer leg, the errors made dm-raid drop the leg and the owner
// went on acknowledging writes on its own leg, while it could not record
// the replica outdated; the leader then failed the volume over to the
// replica, which lacked them. The peer leg's errhold slices hold the
// failed writes instead:
//   - a writer of checksummed records acknowledges each one on a serial
//     port after fdatasync; a is cut from etcd, then b's replica slice
//     fails writes (dm-flakey error_writes);
//   - a's writes wait: no record is acknowledged after the first failed
//     write, a's guard cannot record the mark without etcd and resubmits
//     the held writes now and then;
//   - the leader fails db over to b: every record a acknowledged reads
//     back there, and a acknowledges none after, also once its network
//     is healed (the volume runs on b; a's held writes are never
//     completed).
func TestNetworkPartitionReplicaSSDFails(t *testing.T) {
	bin, err := binaries()
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	c, _ := startFailoverCluster(t, bin)
	defer c.dumpLogs()
	eps := " --etcd-endpoints " + c.endpoints()
	c.a.mustTidectl("policy set default --failover-after 5s" + eps)
	c.a.mustTidectl("volume adopt db --shared-origin san/lun0 --node a --replica-node b --write-cache 64M --wait --timeout 3m" + eps)
	c.waitMirror("db", "AA", 2*time.Minute)

	const dev = "/dev/mapper/tc-db"
	c.a.mustSh(fmt.Sprintf("crashwriter write -dev %s -ack %s -cycle 1 -blocks 16384 >/run/writer.log 2>&1 &", dev, c.a.AckDevice()))
	c.a.eventually(time.Minute, `tidectl -o json volume show db | grep -E '"dirty_blocks": *[1-9]'`, "dirty_blocks")

	cutFromEtcd(c.a)
	cut := time.Now()
	failWrites(t, c.b, "tcr-db")
	failed := time.Now()
	atFailure := lastAckOf(t, c.a)
	// volume show says the writes wait on the peer leg.
	c.a.eventually(30*time.Second, `tidectl -o json volume show db | grep -E '"peer_held": *[1-9]'`, "peer_held")
	t.Logf("a cut from etcd, b's replica failing writes %.1fs later; %d records acknowledged by then", failed.Sub(cut).Seconds(), atFailure+1)

	// The leader fails db over to b once a's record has expired.
	deadline := time.Now().Add(4 * time.Minute)
	for {
		if v := c.show("b", "db"); v.Node == "b" && v.State == "active" && v.FailedOverFrom == "a" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("db not running on b 4m after a was cut from etcd\nb's daemon log:\n%s", c.b.sh("tail -40 /run/daemon.log").Stdout)
		}
		time.Sleep(time.Second)
	}
	through := lastAckOf(t, c.a)
	t.Logf("db running on b %.1fs after the cut; a acknowledged records %d-%d after the replica's SSD failed",
		time.Since(cut).Seconds(), atFailure+1, through)
	if through < 0 {
		t.Fatal("no record acknowledged: the test would check nothing")
	}
	res := c.b.sh(fmt.Sprintf("crashwriter verify -dev %s -cycle 1 -through %d", dev, through))
	if res.ExitCode != 0 {
		t.Fatalf("records a acknowledged are lost on b, which serves db now:\n%s%s", res.Stdout, res.Stderr)
	}
	t.Logf("on b: %s (records 0-%d acknowledged by a)", strings.TrimSpace(res.Stdout), through)

	// a's network healed: it finds db failed over, so its held writes
	// are never completed (it cannot record the replica outdated for a
	// volume that runs elsewhere), and it acknowledges nothing more.
	heal(c.a)
	c.a.eventually(time.Minute, "grep 'failed over to node b' /run/daemon.log", "failed over to node b")
	time.Sleep(5 * time.Second)
	if later := lastAckOf(t, c.a); later != through {
		t.Fatalf("a acknowledged records %d-%d while db ran on b", through+1, later)
	}
	for _, slice := range []string{"tc-db-wmeta1", "tc-db-wleg1"} {
		if table := c.a.mustSh("dmsetup table " + slice); !strings.Contains(table, " errhold ") {
			t.Errorf("%s on a: %q, want the errhold target", slice, strings.TrimSpace(table))
		}
	}
	// The slice held what b failed (held total > 0), and still holds
	// errors. Those writes wait in it, or, resubmitted by the guard
	// before b cut a off, in the lost connection's queue.
	status := strings.Fields(c.a.mustSh("dmsetup status tc-db-wleg1"))
	if len(status) != 9 || status[3] != "hold" || status[5] == "0" {
		t.Errorf("tc-db-wleg1 on a: status %q, want 0 <len> errhold hold <held now> <held total > 0> ...", status)
	}
	t.Logf("a healed, acknowledges nothing, its peer leg's writes still wait (%s); test %.0fs\na's guard:\n%s",
		strings.Join(status, " "), time.Since(began).Seconds(),
		c.a.sh("grep -E 'peer leg|keep waiting|resubmit' /run/daemon.log | cut -c1-400").Stdout)
}
