// SPDX-License-Identifier: Apache-2.0

//go:build vm

package vm_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// etcdPorts are the client and peer ports of the test clusters' etcd
// members (etcdCluster.startDaemon).
const etcdPorts = "2389, 2390"

// nvmePort is the NVMe/TCP port of the replicas' and the origin's
// exports.
const nvmePort = "4420"

// cutPorts drops, on n, every TCP packet to or from one of ports, with
// peer (an address) or with anyone when peer is "": the chosen links are
// down, the others up. heal removes every cut.
func cutPorts(n *node, peer, ports string) {
	match := ""
	if peer != "" {
		match = "ip daddr " + peer + " "
	}
	back := strings.Replace(match, "daddr", "saddr", 1)
	n.mustSh(fmt.Sprintf(`nft -f - <<'EOF'
table inet tcpartition {
	chain in { type filter hook input priority 0; %[2]stcp dport { %[1]s } drop; %[2]stcp sport { %[1]s } drop; }
	chain out { type filter hook output priority 0; %[3]stcp dport { %[1]s } drop; %[3]stcp sport { %[1]s } drop; }
}
EOF`, ports, back, match))
}

// heal removes what cutPorts added.
func heal(n *node) { n.mustSh("nft delete table inet tcpartition 2>/dev/null; true") }

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

// partitionSuite is the cluster TestNetworkPartition's cases share: san
// exports its RAID10 (lun0) and is never cut off; db, adopted on it, runs
// on owner with its write cache mirrored to a replica on replica. A case
// that fails db over swaps the two. Every case starts and ends with db
// served and protected (mirror AA): sharing the VMs changes nothing a
// case sees.
type partitionSuite struct {
	c              failoverCluster
	owner, replica string
	cycle          uint64
}

const partitionDev = "/dev/mapper/tc-db"

func (s *partitionSuite) node(name string) *node { return s.c.nodes[name] }

// lastAck returns the last record of cycle the named node's writer
// acknowledged, -1 for none.
func (s *partitionSuite) lastAck(t *testing.T, name string, cycle uint64) int64 {
	t.Helper()
	acks, err := s.node(name).Acks()
	if err != nil {
		t.Fatal(err)
	}
	return lastAck(acks, int(cycle))
}

// startWriter starts a writer of checksummed records on the owner, a new
// cycle, and waits for its first acknowledgement.
func (s *partitionSuite) startWriter(t *testing.T) uint64 {
	t.Helper()
	s.cycle++
	n := s.node(s.owner)
	n.mustSh(fmt.Sprintf("crashwriter write -dev %s -ack %s -cycle %d -blocks 16384 >/run/writer.log 2>&1 & echo $! >/run/writer.pid",
		partitionDev, n.AckDevice(), s.cycle))
	for deadline := time.Now().Add(time.Minute); s.lastAck(t, s.owner, s.cycle) < 0; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("writer on %s acknowledged nothing in 1m: %s", s.owner, n.sh("cat /run/writer.log").Stdout)
		}
	}
	return s.cycle
}

// verify stops the writer on the owner (if it still runs) and checks that
// every record it acknowledged reads back on the node serving db.
func (s *partitionSuite) verify(t *testing.T, writer, server string, cycle uint64) {
	t.Helper()
	s.node(writer).sh("kill $(cat /run/writer.pid) 2>/dev/null")
	through := s.lastAck(t, writer, cycle)
	res := s.node(server).sh(fmt.Sprintf("crashwriter verify -dev %s -cycle %d -through %d", partitionDev, cycle, through))
	if res.ExitCode != 0 {
		t.Fatalf("records %s acknowledged are lost on %s, which serves db:\n%s%s", writer, server, res.Stdout, res.Stderr)
	}
	t.Logf("on %s: %s", server, strings.TrimSpace(res.Stdout))
}

// waitServed waits until db runs on s.owner, active and mirrored (AA)
// onto s.replica, as read through san, and returns how long that took.
func (s *partitionSuite) waitServed(t *testing.T, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		v := s.c.show("san", "db")
		if v.Node == s.owner && v.State == "active" && v.PeerNode == s.replica && v.Mirror != nil && v.Mirror.Health == "AA" {
			return time.Since(start)
		}
		if time.Since(start) > timeout {
			t.Fatalf("db not served on %s and mirrored AA onto %s %s after the heal: %+v mirror %+v\n%s's daemon log:\n%s",
				s.owner, s.replica, timeout, v, v.Mirror, s.owner, s.node(s.owner).sh("tail -30 /run/daemon.log").Stdout)
		}
		time.Sleep(time.Second)
	}
}

// count returns how many lines of the named node's daemon log match re.
func (s *partitionSuite) count(name, re string) int {
	var n int
	fmt.Sscan(s.node(name).sh("grep -c '"+re+"' /run/daemon.log").Stdout, &n)
	return n
}

// oneWriter samples, every second until the returned stop is called, two
// things only the host sees in one order: whether the replica's node has
// db's device, and the owner's last acknowledged record. stop reports,
// for a case with no failover, any moment the replica's node had the
// device, and for one that failed over, any record the old owner
// acknowledged after the new owner had it: at no moment may two nodes
// take writes for db.
func (s *partitionSuite) oneWriter(t *testing.T, cycle uint64) (stop func(failover bool)) {
	owner, replica := s.owner, s.replica
	ctx, cancel := context.WithCancel(t.Context())
	type sample struct {
		up   bool
		acks int64
	}
	var samples []sample
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
			res, err := s.node(replica).Run(rctx, "dmsetup info "+partitionDev+" >/dev/null 2>&1 && echo up")
			rcancel()
			acks, aerr := s.node(owner).Acks()
			if err == nil && aerr == nil {
				samples = append(samples, sample{up: strings.TrimSpace(res.Stdout) == "up", acks: lastAck(acks, int(cycle))})
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	})
	return func(failover bool) {
		cancel()
		wg.Wait()
		took := -1
		for i, sm := range samples {
			if sm.up && took < 0 {
				took = i
			}
		}
		switch {
		case !failover && took >= 0:
			t.Errorf("db's device appeared on %s, the replica's node, in a case that must not fail over", replica)
		case failover && took < 0:
			t.Errorf("db failed over, but no sample saw its device on %s", replica)
		case failover:
			for _, sm := range samples[took:] {
				if sm.acks != samples[took].acks {
					t.Errorf("%s acknowledged records %d-%d after db started on %s", owner, samples[took].acks+1, sm.acks, replica)
					break
				}
			}
		}
		t.Logf("%d samples of who takes writes, one writer throughout", len(samples))
	}
}

// failOver waits for db to fail over from s.owner to s.replica, checks
// every record acknowledged is on the new owner, then heals the old
// owner's network, power-cycles it (its writers wait for ever: the
// volume runs elsewhere, and nothing it held may complete) and waits
// until it is the new replica: the roles swap.
func (s *partitionSuite) failOver(t *testing.T, cycle uint64, began time.Time, stop func(bool)) {
	t.Helper()
	old, next := s.owner, s.replica
	deadline := time.Now().Add(4 * time.Minute)
	for {
		if v := s.c.show("san", "db"); v.Node == next && v.State == "active" && v.FailedOverFrom == old {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("db not running on %s 4m after the cut\n%s's daemon log:\n%s", next, next, s.node(next).sh("tail -40 /run/daemon.log").Stdout)
		}
		time.Sleep(time.Second)
	}
	t.Logf("db running on %s %.1fs after the cut", next, time.Since(began).Seconds())
	time.Sleep(5 * time.Second) // the old owner must acknowledge nothing more
	stop(true)
	s.verify(t, old, next, cycle)

	heal(s.node(old))
	if err := s.node(old).Kill(); err != nil {
		t.Fatal(err)
	}
	s.c.reboot(old)
	s.c.startDaemon(old)
	s.owner, s.replica = next, old
	t.Logf("%s power-cycled; db served on %s and protected on %s again %.1fs after the cut (%.0fs of it the re-protection)",
		old, next, old, time.Since(began).Seconds(), s.waitServed(t, 5*time.Minute).Seconds())
}

// TestNetworkPartition cuts chosen links of a three-node cluster (san
// exporting the shared origin, the owner of db, the node keeping its
// replica; every daemon runs a member of the cluster's etcd) under a
// writer of checksummed records that acknowledges each one after
// fdatasync, as DRBD's tests isolate nodes. In every case: every
// acknowledged record reads back on the node that serves db afterwards;
// at no moment do two nodes take writes (oneWriter); db ends served and
// mirrored again once the network heals; each step's time is logged.
// The cases (issue 22):
//   - the owner cut off from its replica (NVMe/TCP between them only):
//     the owner records the replica outdated, goes on alone, and the leg
//     resyncs after;
//   - the replica's node cut off from everyone (its link down 12 s);
//   - the tidecache and etcd raft leader cut off (the replica's node,
//     made the leader first): the others elect a new one, nothing fails
//     over;
//   - etcd's quorum lost (two of three members' daemons killed): db goes
//     on, nothing fails over, and the quorum comes back;
//   - the replica's link flapping, 3 s down, 3 s up, for a minute;
//   - the owner cut off from etcd only: db fails over to the replica and
//     the old owner, fenced, acknowledges nothing more;
//   - the replica's SSD failing writes (dm-flakey error_writes) while the
//     owner is cut off from etcd: the owner holds the failed writes
//     (dm-errhold) and acknowledges none, db fails over to the replica
//     with every acknowledged record (finding 1; before errhold, 4994 of
//     5241 acknowledged records were lost).
//
// `make test-partition N=…` runs N rounds of every case; without
// -all-cases (.ci/run) the leader's cut and the flapping link, the two
// longest, are left out, and so are the replica cut off from everyone and
// etcd's quorum lost (the first is the owner's cut from its replica seen
// from the other side; in the second nothing may change): .ci/run keeps
// the owner's cuts, from its replica and from etcd, and the failing SSD.
func TestNetworkPartition(t *testing.T) {
	bin, err := binaries()
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	c, _ := startFailoverCluster(t, bin)
	defer c.dumpLogs()
	s := &partitionSuite{c: c, owner: "a", replica: "b"}
	eps := " --etcd-endpoints " + c.endpoints()
	c.a.mustTidectl("policy set default --failover-after 5s" + eps)
	// lun0 holds no data yet: 4 KiB write-cache blocks, as for a new
	// database (the default keeps lun0's 512-byte sector, and every
	// 4 KiB record read back would be eight reads of the cache).
	c.a.mustTidectl("volume adopt db --shared-origin san/lun0 --node a --replica-node b --write-cache 64M --block-size 4096 --wait --timeout 3m" + eps)
	t.Logf("db adopted on a, protected on b in %.0fs", s.waitServed(t, 3*time.Minute).Seconds())

	// goesOnAlone runs a case in which the owner loses its peer leg and
	// nothing fails over: the owner records the replica outdated and
	// goes on alone, and once healed the leg resyncs.
	//
	// With mayRideOut, a cut that ends while the owner cannot record the
	// mark (etcd without a leader meanwhile) may also end with the held
	// writes reaching both legs once the peer answers again: no mark, no
	// resync, nothing lost either.
	goesOnAlone := func(t *testing.T, mayRideOut bool, cut func(), healed func()) {
		cycle := s.startWriter(t)
		stop := s.oneWriter(t, cycle)
		const alone, cleared = "volume goes on without its peer leg", "replica back in sync: its outdated mark is cleared"
		const rodeOut = "peer leg answers again: the writes that waited reached both legs"
		before, clearedBefore, rodeBefore := s.count(s.owner, alone), s.count(s.owner, cleared), s.count(s.owner, rodeOut)
		start := time.Now()
		cut()
		for deadline := time.Now().Add(2 * time.Minute); s.count(s.owner, alone) == before; time.Sleep(time.Second) {
			if mayRideOut && s.count(s.owner, rodeOut) > rodeBefore {
				t.Logf("%s rode the cut out: its held writes reached both legs %.1fs after the cut, no mark needed; db mirrored AA after %.1fs more",
					s.owner, time.Since(start).Seconds(), s.waitServed(t, 3*time.Minute).Seconds())
				stop(false)
				s.verify(t, s.owner, s.owner, cycle)
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never went on without its peer leg:\n%s", s.owner, s.node(s.owner).sh("grep -v component=etcd /run/daemon.log | tail -30").Stdout)
			}
		}
		t.Logf("%s went on without its peer leg %.1fs after the cut", s.owner, time.Since(start).Seconds())
		healed()
		healedAt := time.Since(start)
		// Back in sync is the owner's own word (its mark cleared), not
		// a status in etcd that may predate the cut.
		for deadline := time.Now().Add(3 * time.Minute); s.count(s.owner, cleared) == clearedBefore; time.Sleep(time.Second) {
			if time.Now().After(deadline) {
				t.Fatalf("%s's replica never back in sync after the heal:\n%s", s.owner, s.node(s.owner).sh("grep -v component=etcd /run/daemon.log | tail -30").Stdout)
			}
		}
		t.Logf("healed %.1fs after the cut: the leg back in sync and the mark cleared %.1fs later, db mirrored AA after %.1fs more",
			healedAt.Seconds(), (time.Since(start) - healedAt).Seconds(), s.waitServed(t, 3*time.Minute).Seconds())
		stop(false)
		s.verify(t, s.owner, s.owner, cycle)
	}

	// A case that fails leaves the cluster in a state the next cannot
	// start from: the suite stops there.
	run := func(name string, fn func(t *testing.T)) {
		if !t.Failed() && !t.Run(name, fn) {
			t.Errorf("case %q failed: the cases after it are not run", name)
		}
	}
	// The two longest cases (about 3 minutes each under emulation) and
	// two whose paths the others take run in make test-partition's
	// rounds, not in .ci/run's budget.
	long := func(name string, fn func(t *testing.T)) {
		inFullRunOnly(t, name, func() { run(name, fn) })
	}
	run("owner cut from its replica", func(t *testing.T) {
		var cut time.Time
		goesOnAlone(t, false, func() {
			cutPorts(s.node(s.owner), s.c.addr(s.replica), nvmePort)
			cut = time.Now()
		}, func() {
			time.Sleep(time.Until(cut.Add(10 * time.Second)))
			heal(s.node(s.owner))
		})
	})
	long("replica cut off from everyone", func(t *testing.T) {
		// The owner's etcd client may be on the replica's member, cut
		// off with it: the mark may wait longer than the cut.
		goesOnAlone(t, true, func() {
			s.node(s.replica).mustSh("(ip link set eth0 down; sleep 12; ip link set eth0 up) >/dev/null 2>&1 &")
		}, func() {})
	})
	long("leader cut off", func(t *testing.T) {
		// The replica's node leads tidecache (its rivals' daemons
		// restarted until it does) and etcd's raft. A restart of the
		// owner's daemon revokes its node lease, and under the suite's
		// 5 s failover-after the leader would fence it (a CI run saw
		// the owner cut off and going on without its leg before the
		// case's own cut): the juggling runs under a long one.
		v, _ := s.c.waitNodes("san", "a leader", time.Minute, func(v clusterView) bool { return v.Leader != "" })
		juggled := v.Leader != s.replica
		if juggled {
			s.node("san").mustTidectl("policy set default --failover-after 10m" + eps)
		}
		for tries := 0; v.Leader != s.replica; tries++ {
			if tries == 4 {
				t.Fatalf("%s never became the leader (%s leads)", s.replica, v.Leader)
			}
			was := v.Leader
			s.node(was).mustSh("kill $(cat /run/daemon.pid); while kill -0 $(cat /run/daemon.pid) 2>/dev/null; do sleep 0.2; done")
			s.c.startDaemon(was)
			v, _ = s.c.waitNodes("san", "leadership handed on", time.Minute, func(v clusterView) bool {
				return len(v.Nodes) == 3 && v.Leader != "" && v.Leader != was
			})
			t.Logf("%s's daemon restarted: %s leads", was, v.Leader)
		}
		if juggled {
			// Back to 5 s for the cut: nothing may fail over then.
			s.node("san").mustTidectl("policy set default --failover-after 5s" + eps)
		}
		s.c.moveRaftLeader(s.replica, "san")
		s.waitServed(t, 3*time.Minute)
		goesOnAlone(t, true, func() {
			// 30 s: under emulation a new raft leader, then the old
			// leader's session lease (which etcd renews at a raft
			// leader change), take 12-15 s and more when VMs share the
			// host; a leader back before its lease ran out rightly
			// stays the leader (a CI run saw it with a 15 s cut).
			s.node(s.replica).mustSh("(ip link set eth0 down; sleep 30; ip link set eth0 up) >/dev/null 2>&1 &")
			v, took := s.c.waitNodes("san", "a new leader", 30*time.Second, func(v clusterView) bool { return v.Leader != "" && v.Leader != s.replica })
			t.Logf("%s leads tidecache %.1fs after the leader was cut off", v.Leader, took.Seconds())
		}, func() {})
	})
	long("etcd quorum lost", func(t *testing.T) {
		cycle := s.startWriter(t)
		stop := s.oneWriter(t, cycle)
		others := []string{"san", s.replica}
		for _, name := range others {
			s.node(name).mustSh("kill $(cat /run/daemon.pid); while kill -0 $(cat /run/daemon.pid) 2>/dev/null; do sleep 0.2; done")
		}
		lost := s.lastAck(t, s.owner, cycle)
		time.Sleep(15 * time.Second)
		if now := s.lastAck(t, s.owner, cycle); now <= lost {
			t.Errorf("db took no write in the 15 s without an etcd quorum (records %d, then %d)", lost, now)
		}
		for _, name := range others {
			s.c.startDaemon(name)
		}
		_, took := s.c.waitNodes("san", "all three registered again", 2*time.Minute, func(v clusterView) bool { return len(v.Nodes) == 3 && v.Leader != "" })
		t.Logf("quorum back, all registered %.1fs after the daemons restarted", took.Seconds())
		s.waitServed(t, 2*time.Minute) // still on the owner: nothing failed over
		stop(false)
		s.verify(t, s.owner, s.owner, cycle)
	})
	long("replica link flapping", func(t *testing.T) {
		var began time.Time
		goesOnAlone(t, false, func() {
			s.node(s.replica).mustSh("(for i in $(seq 10); do ip link set eth0 down; sleep 3; ip link set eth0 up; sleep 3; done) >/dev/null 2>&1 &")
			began = time.Now()
		}, func() { time.Sleep(time.Until(began.Add(62 * time.Second))) })
	})
	run("owner cut from etcd", func(t *testing.T) {
		cycle := s.startWriter(t)
		stop := s.oneWriter(t, cycle)
		start := time.Now()
		cutPorts(s.node(s.owner), "", etcdPorts)
		s.failOver(t, cycle, start, stop)
	})
	run("replica SSD fails writes while owner cut from etcd", func(t *testing.T) {
		cycle := s.startWriter(t)
		stop := s.oneWriter(t, cycle)
		start := time.Now()
		cutPorts(s.node(s.owner), "", etcdPorts)
		failWrites(t, s.node(s.replica), "tcr-db")
		atFailure := s.lastAck(t, s.owner, cycle)
		// The owner holds what the replica fails, and says so.
		s.node(s.owner).eventually(30*time.Second, `tidectl -o json volume show db | grep -E '"peer_held": *[1-9]'`, "peer_held")
		for _, slice := range []string{"tc-db-wmeta1", "tc-db-wleg1"} {
			if table := s.node(s.owner).mustSh("dmsetup table " + slice); !strings.Contains(table, " errhold ") {
				t.Errorf("%s on %s: %q, want the errhold target", slice, s.owner, strings.TrimSpace(table))
			}
		}
		t.Logf("%s's replica failing writes %.1fs after the cut, %d records acknowledged then", s.replica, time.Since(start).Seconds(), atFailure+1)
		s.failOver(t, cycle, start, stop)
	})
	t.Logf("every case passed, %.0fs", time.Since(began).Seconds())
}
