// SPDX-License-Identifier: Apache-2.0

//go:build vm

package vm_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tidecache/tidecache/pkg/store"
)

// outdatedRecorded reports whether etcd holds the record that a volume's
// replica lacks writes (api.ReplicaOutdated), read from n.
func outdatedRecorded(t *testing.T, n *node, endpoint, volume string) bool {
	t.Helper()
	out := n.mustSh("curl -sf -X POST " + endpoint + "/v3/kv/range -d '" + fmt.Sprintf(`{"key":%q,"count_only":true}`, b64(store.DefaultPrefix+"outdated/"+volume)) + "'")
	var resp struct {
		Count string `json:"count"`
	}
	if err := json.Unmarshal([]byte(out), &resp); err != nil {
		t.Fatalf("outdated record of %s: %v\n%s", volume, err, out)
	}
	return resp.Count != "" && resp.Count != "0"
}

// TestFailoverReplicaNamespaceLost takes the replica's namespace away
// under an idle volume that can fail over: the peer leg's controller stays
// connected, but its block device goes, so the stack the layout describes
// (built from the devices attached) lacks leg 1, the owner's daemon sees
// drift and repairs it by reloading the mirror without leg 1. Nothing
// may then acknowledge a write on a's leg alone while the cluster still
// counts b's replica as whole: a failover after a's loss would promote
// b's stale copy. What keeps it so: the reload suspends the mirror, and
// dm-raid's suspend writes its superblock to every leg, so the write to
// the gone namespace is held in the errhold slices like any other, until
// the daemon's guard has recorded the replica outdated and failed the
// leg; only then does the reload go through. The test checks the rule
// (the mirror never runs without leg 1 before etcd records the replica
// outdated) over the repair, then that a write completes and the volume
// is active again.
func TestFailoverReplicaNamespaceLost(t *testing.T) {
	bin, err := binaries()
	if err != nil {
		t.Fatal(err)
	}
	c, _ := startFailoverCluster(t, bin)
	defer c.dumpLogs()
	eps := " --etcd-endpoints " + c.endpoints()
	c.a.mustTidectl("policy set default --failover-after 5s" + eps)
	c.a.mustTidectl("volume adopt db --shared-origin san/lun0 --node a --replica-node b --write-cache 64M --wait --timeout 3m" + eps)
	c.waitMirror("db", "AA", 2*time.Minute)
	const dev = "/dev/mapper/tc-db"
	// Idle: md clears its write-intent bitmap a few seconds after the
	// last write, and that write would reach the peer leg; nothing may.
	time.Sleep(30 * time.Second)

	// b's daemon stops, so that nothing exports the namespace again,
	// and the namespace of the replica it exports to a is disabled.
	c.b.mustSh("kill $(cat /run/daemon.pid); while kill -0 $(cat /run/daemon.pid) 2>/dev/null; do sleep 0.2; done")
	c.b.mustSh("for e in /sys/kernel/config/nvmet/subsystems/*/namespaces/1/enable; do case $e in *replica*) echo 0 > $e;; esac; done")
	lost := time.Now()
	table := func() string { return strings.TrimSpace(c.a.mustSh("dmsetup table tc-db-wdata")) }
	// The daemon checks the tables every few seconds (the cluster's
	// resync), and a repair gives the export 15 s to come back.
	for time.Since(lost) < 60*time.Second {
		if tbl := table(); strings.HasSuffix(tbl, "- -") && !outdatedRecorded(t, c.a, c.client("a"), "db") {
			t.Fatalf("%.0fs after b's namespace went, a's write mirror runs without leg 1 while etcd does not record b's replica outdated: the next writes are acknowledged on a's leg alone, and a failover would promote b's copy without them\n%s\na's daemon log:\n%s",
				time.Since(lost).Seconds(), tbl, c.a.sh("grep -E 'drift|peer leg|repair' /run/daemon.log | tail -20").Stdout)
		}
		time.Sleep(2 * time.Second)
	}
	t.Logf("b's namespace gone 60 s, nothing written: mirror %s; replica recorded outdated: %t", table(), outdatedRecorded(t, c.a, c.client("a"), "db"))
	t.Logf("a's daemon: %s", c.a.sh("grep -E 'drift repaired\"|fails I/O|failed on purpose' /run/daemon.log | cut -c1-160").Stdout)

	// A write completes, and only with b's replica recorded outdated.
	start := time.Now()
	c.a.mustSh("dd if=/dev/urandom of=" + dev + " bs=4k count=16 seek=1024 oflag=direct,sync 2>/dev/null")
	t.Logf("a write after the namespace went completed in %.1fs", time.Since(start).Seconds())
	if !outdatedRecorded(t, c.a, c.client("a"), "db") {
		t.Fatal("a write was acknowledged without b's replica recorded outdated")
	}
	c.a.eventually(30*time.Second, "grep 'volume goes on without its peer leg, the replica recorded outdated' /run/daemon.log", "writes_waited")
	c.a.eventually(90*time.Second, "dmsetup table tc-db-wdata", "- -")
	c.a.eventually(60*time.Second, "tidectl -o json volume show db | grep -o '\"state\": *\"active\"'", "active")
	t.Logf("replica recorded outdated, leg failed, mirror without it: %s", table())
}
