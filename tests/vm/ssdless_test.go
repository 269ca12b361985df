// SPDX-License-Identifier: Apache-2.0

//go:build vm

package vm_test

import (
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidecache/tidecache/tests/vm/harness"
)

// TestSSDLessOwner checks a node without SSDs caching on its peers', on
// three VMs that run the cluster's etcd as three embedded members, and a
// fourth node, d, that joins later as a client:
//   - a has an HDD and no SSD: its pool is its origin alone, and its node
//     record says so; b and c have an SSD each;
//   - a volume with a write cache created for a through the cluster: the
//     leader places both legs, one on b and one on c, in one update; each
//     keeps and exports its replica to a; a creates the volume with its
//     write cache a dm-raid raid1 of the two exports, nothing of it on a
//     but the origin extent; `volume show` names both nodes;
//   - fio with verify; then the node of leg 1 is killed under a paced
//     writer: the longest write stays under 10 s, no verify error, the
//     mirror goes on on leg 0 alone;
//   - that node boots again: its assembly builds its replica, its daemon
//     exports it, a's daemon attaches it and dm-raid resyncs it: AA;
//   - d's daemon starts, and the node of leg 0 is killed in turn under a
//     paced writer (its VM gone, the mirror on the resynced leg alone):
//     every block written before the first kill and under it reads back,
//     from the leg that was dead and resynced;
//   - 5 s later (the policy's reprotect-after) the leader places leg 0 on
//     d, never on leg 1's node; a attaches d's replica and dm-raid rebuilds
//     leg 0 there from leg 1: AA on d and leg 1's node;
//   - with leg 1 failed under it (error tables, a's daemon stopped),
//     every block of the three writers reads back from d's rebuilt leg.
func TestSSDLessOwner(t *testing.T) {
	c := bootSSDLess(t, "d")
	defer func() {
		c.dumpLogs()
		c.dumpNodeLogs(c.nodes["d"])
	}()
	all := slices.Concat(c.names, c.others)
	eps := " --etcd-endpoints " + c.endpoints()
	var cp struct {
		Pools []struct {
			Node string `json:"node"`
			SSDs int    `json:"ssds"`
		} `json:"pools"`
		NodesWithSSDs int `json:"nodes_with_ssds"`
	}
	if out := c.a.mustTidectl("-o json pool show" + eps); json.Unmarshal([]byte(out), &cp) != nil || len(cp.Pools) != 3 || cp.NodesWithSSDs != 2 ||
		cp.Pools[0].Node != "a" || cp.Pools[0].SSDs != 0 {
		t.Fatalf("the cluster's cache pool: want a's pool without SSDs and two nodes with SSDs:\n%s", out)
	}

	created := time.Now()
	c.a.mustTidectl("volume create db --size 200M --write-cache 32M --node a --wait --timeout 3m" + eps)
	c.waitMirror("db", "AA", 2*time.Minute)
	vol := c.volume("db")
	legs := []string{vol.PeerNode0, vol.PeerNode}
	if slices.Contains(legs, "a") || legs[0] == legs[1] || !slices.Contains(legs, "b") || !slices.Contains(legs, "c") {
		t.Fatalf("legs on %q, want one on b and one on c", legs)
	}
	t.Logf("volume db created on a with its write cache on %s (leg 0) and %s (leg 1), mirror AA %.1fs after the request", legs[0], legs[1], time.Since(created).Seconds())
	if out := c.a.mustSh("dmsetup table tc-db-wdata"); !strings.Contains(out, " raid ") || !strings.Contains(out, "raid1") {
		t.Errorf("tc-db-wdata is not a dm-raid raid1:\n%s", out)
	}
	if out := c.a.mustSh("ls /sys/class/nvme-subsystem/ | wc -l"); strings.TrimSpace(out) != "2" {
		t.Errorf("a attaches %s NVMe subsystems, want the two replicas", strings.TrimSpace(out))
	}
	for _, name := range legs {
		if out := c.nodes[name].mustTidectl("pool show fast"); !strings.Contains(out, "of node a's volume db") {
			t.Errorf("%s's pool show does not list the replica:\n%s", name, out)
		}
	}

	dev := "/dev/mapper/tc-db"
	first := fioJob(dev, "first", "randwrite", "0", "8M")
	c.a.fio(first + " --do_verify=1")

	// Leg 1's node lost under a paced writer.
	doomed, survivor := legs[1], legs[0]
	second := fioJob(dev, "second", "randwrite", "64M", "16M") + " --iodepth=1 --rate_iops=300 --do_verify=1"
	killed, stall := killUnderWriter(t, c.a, c.nodes[doomed], "second", second, 2*time.Second)
	t.Logf("%s killed (leg 1): writer done %.1fs later, longest write %.1fs", doomed, time.Since(killed).Seconds(), stall.Seconds())
	if stall > 10*time.Second {
		t.Errorf("writes stalled %.1fs when leg 1's node died, want under 10s", stall.Seconds())
	}
	// Leg 1 failed by dm-raid (AD) or left out by the daemon's repair of
	// the stack (A-), recorded out of sync either way.
	c.waitVolume("db", "on leg 0 alone", time.Minute, func(v peerVolume) bool {
		return v.Mirror != nil && v.Mirror.Copies == 1 && strings.HasPrefix(v.Mirror.Health, "A") && slices.Equal(v.Mirror.OutOfSync, []int{1})
	})

	// Back: its replica is built by assembly, exported by its daemon,
	// attached by a's and resynced.
	back := c.rebootNode(doomed)
	back.mustSh("tidecached assemble")
	c.startDaemon(doomed)
	c.b = back
	c.waitMirror("db", "AA", 3*time.Minute)
	t.Logf("%s back: leg 1 attached again and resynced %.1fs after the kill", doomed, time.Since(killed).Seconds())

	// d joins, a node leg 0 can move to; leg 0's node lost under a paced
	// writer: the resynced leg alone must hold every block.
	c.startClient("d")
	c.waitNodes("a", "d registered", time.Minute, func(v clusterView) bool { return slices.Equal(v.names(), all) })
	c.a.mustTidectl("policy set default --reprotect-after 5s" + eps)
	third := fioJob(dev, "third", "randwrite", "96M", "16M") + " --iodepth=1 --rate_iops=300 --do_verify=1"
	killed, stall = killUnderWriter(t, c.a, c.nodes[survivor], "third", third, 2*time.Second)
	t.Logf("%s killed (leg 0): writer done %.1fs later, longest write %.1fs", survivor, time.Since(killed).Seconds(), stall.Seconds())
	if stall > 10*time.Second {
		t.Errorf("writes stalled %.1fs when leg 0's node died, want under 10s", stall.Seconds())
	}
	secondJob := fioJob(dev, "second", "randwrite", "64M", "16M") + " --iodepth=1"
	thirdJob := fioJob(dev, "third", "randwrite", "96M", "16M") + " --iodepth=1"
	for _, job := range []string{first, secondJob, thirdJob} {
		c.a.fio(job + " --verify_only")
	}
	t.Logf("every block of the three writers read back with %s's resynced leg the only one", doomed)

	// Re-protected: leg 0 on d, rebuilt from leg 1.
	c.waitVolume("db", "leg 0 re-protected on d", 2*time.Minute, func(v peerVolume) bool { return v.PeerNode0 == "d" })
	c.b = c.nodes["d"]
	c.waitMirror("db", "AA", 3*time.Minute)
	if v := c.volume("db"); v.PeerNode != doomed {
		t.Fatalf("leg 1 on %q after leg 0's re-protection, want it still on %s", v.PeerNode, doomed)
	}
	t.Logf("leg 0 re-protected on d and rebuilt %.1fs after %s's kill", time.Since(killed).Seconds(), survivor)
	if out := c.nodes["d"].mustTidectl("pool show fast"); !strings.Contains(out, "of node a's volume db") {
		t.Errorf("d's pool show does not list the replica:\n%s", out)
	}

	// Only d's leg left: every block reads back from it.
	c.a.mustSh("kill $(cat /run/daemon.pid); while kill -0 $(cat /run/daemon.pid) 2>/dev/null; do sleep 0.2; done")
	c.a.mustSh("for d in tc-db-wmeta1 tc-db-wleg1; do dmsetup load $d --table \"0 $(blockdev --getsz /dev/mapper/$d) error\" && dmsetup suspend $d && dmsetup resume $d; done")
	// md reads an SSD mirror from its first leg while it is idle: a write
	// outside the writers' blocks reaches leg 1 and fails it, so that the
	// reads below cannot come from it.
	c.a.mustSh("dd if=/dev/urandom of=" + dev + " bs=4k count=1 seek=$((150 * 256)) oflag=direct,sync status=none")
	if h := c.a.mustSh("dmsetup status tc-db-wdata"); !strings.Contains(h, " AD ") {
		t.Fatalf("mirror with leg 1 failed: %s, want health AD", strings.TrimSpace(h))
	}
	for _, job := range []string{first, secondJob, thirdJob} {
		c.a.fio(job + " --verify_only")
	}
	t.Log("every block of the three writers read back from d's rebuilt leg 0 alone")
}

// ssdLessPeerNode has an HDD and no SSD; ssdPeerNode an SSD too.
var (
	ssdLessPeerNode = nodeSpec{HDDs: 1, HDDSize: 256 << 20, Spares: []int64{512 << 20}}
	ssdPeerNode     = nodeSpec{HDDs: 1, HDDSize: 256 << 20, SSDs: []int64{256 << 20}, Spares: []int64{512 << 20}}
)

// bootSSDLess boots a (no SSD, pool slow of its HDD) and b and c (pool
// fast of an HDD and an SSD each), whose daemons run the cluster's etcd as
// three members, and the others named (ssdPeerNode VMs with pool fast, their
// daemons not started: startClient), all at once; it waits until the
// three members' daemons are registered and one leads.
func bootSSDLess(t *testing.T, others ...string) *etcdCluster {
	t.Helper()
	bin, err := binaries()
	if err != nil {
		t.Fatal(err)
	}
	c := &etcdCluster{
		peerCluster: &peerCluster{t: t, dir: harness.TestDir(t), bin: bin, hub: hubAddr(t)},
		names:       []string{"a", "b", "c"},
		others:      others,
		nodes:       map[string]*node{},
		spec:        ssdPeerNode,
	}
	all := slices.Concat(c.names, c.others)
	var wg sync.WaitGroup
	booted := make([]*node, len(all))
	errs := make([]error, len(all))
	for i, name := range all {
		wg.Go(func() {
			if name == "a" {
				booted[i], errs[i] = c.bootAsync(name, ssdLessPeerNode, func(n *node) string {
					return "tidectl pool create slow --origin " + n.hdds()[0]
				})
				return
			}
			booted[i], errs[i] = c.bootNodeAsync(name)
		})
	}
	wg.Wait()
	for i, name := range all {
		if errs[i] != nil {
			t.Fatalf("node %s: %v", name, errs[i])
		}
		c.nodes[name] = booted[i]
	}
	for _, name := range c.names {
		c.startDaemon(name)
	}
	v, took := c.waitNodes("a", "all three registered", 2*time.Minute, func(v clusterView) bool {
		return slices.Equal(v.names(), c.names) && v.Leader != ""
	})
	t.Logf("etcd formed by the three daemons, all registered in %s; %s leads", took.Round(100*time.Millisecond), v.Leader)
	c.a = c.nodes["a"]
	c.b = c.nodes["b"] // for the logs of waitMirror
	return c
}

// TestSSDLessBoot checks the boot of a node without SSDs whose volume's
// write cache, on two peers, holds dirty blocks: a's power is cut with
// the writes in the cache only; at boot its assembly (no daemon yet)
// leaves the volume to the daemon, saying why, and builds nothing of it,
// above all not the origin alone, which lacks those writes; a's daemon
// then attaches both legs and starts the volume on them, and every block
// acknowledged before the cut reads back.
func TestSSDLessBoot(t *testing.T) {
	c := bootSSDLess(t)
	defer c.dumpLogs()
	eps := " --etcd-endpoints " + c.endpoints()
	c.a.mustTidectl("volume create db --size 200M --write-cache 32M --node a --wait --timeout 3m" + eps)
	c.waitMirror("db", "AA", 2*time.Minute)
	dev := "/dev/mapper/tc-db"
	first := fioJob(dev, "first", "randwrite", "0", "8M")
	c.a.fio(first + " --do_verify=1")
	v := c.volume("db")
	if v.WriteCache == nil || v.WriteCache.DirtyBlocks == 0 {
		t.Fatalf("no dirty block in the write cache before the cut: %+v", v.WriteCache)
	}
	dirty := v.WriteCache.DirtyBlocks
	// More writes in flight, stopped, then the power cut.
	c.a.mustSh("fio " + fioJob(dev, "second", "randwrite", "64M", "16M") + " --do_verify=0 >/run/second.log 2>&1 &")
	time.Sleep(3 * time.Second)
	c.a.mustSh("killall -STOP fio; sync")
	if err := c.a.Kill(); err != nil {
		t.Fatal(err)
	}
	cut := time.Now()
	c.a = c.rebootNode("a")
	asm := c.a.mustSh("tidecached assemble 2>&1")
	if !strings.Contains(asm, "write cache on nodes") || !strings.Contains(asm, "started by tidecached") {
		t.Errorf("assembly does not leave db to the daemon with the reason:\n%s", asm)
	}
	if out := c.a.mustSh("dmsetup ls"); strings.Contains(out, "tc-db") {
		t.Fatalf("after assembly, devices of db run on a, which reaches neither leg yet:\n%s", out)
	}
	t.Logf("a cut with %d dirty blocks in the write cache; its assembly left db to the daemon:\n%s", dirty, strings.TrimSpace(asm))
	c.startDaemon("a")
	c.waitMirror("db", "AA", 3*time.Minute)
	t.Logf("a's daemon started db on both legs, AA %.1fs after the cut", time.Since(cut).Seconds())
	c.a.fio(first + " --verify_only")
}
