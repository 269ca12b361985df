// SPDX-License-Identifier: Apache-2.0

//go:build vm

package vm_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidecache/tidecache/tests/vm/harness"
)

// The failover test's three nodes: san exports its HDD RAID10 to the
// others as a SAN would (and carries the test network's hub, so it must
// live), a owns the volume, b keeps its replica. All three run the
// cluster's etcd as embedded members.
var failoverSpecs = map[string]nodeSpec{
	"san": {HDDs: 4, HDDSize: 128 << 20, Spares: []int64{512 << 20}, MemoryMB: 768},
	"a":   {SSDs: []int64{256 << 20}, Spares: []int64{512 << 20}, MemoryMB: 768},
	"b":   {SSDs: []int64{256 << 20}, Spares: []int64{512 << 20}, MemoryMB: 768},
}

// failoverVolume is what the test reads of `tidectl -o json volume show`
// in cluster mode.
type failoverVolume struct {
	peerVolume
	Node           string   `json:"node"`
	SharedOrigin   string   `json:"shared_origin"`
	FailedOverFrom string   `json:"failed_over_from"`
	MovingTo       string   `json:"moving_to"`
	MovedFrom      string   `json:"moved_from"`
	Alerts         []string `json:"alerts"`
}

// failoverCluster is an etcdCluster whose nodes have different disks.
type failoverCluster struct {
	*etcdCluster
	// specs are the nodes' disks: failoverSpecs, or a test's own.
	specs map[string]nodeSpec
}

// bootAsync boots a node for the first time with its own disks and
// prepares them: the RAID10 it exports (san) or its pool of SSDs alone
// (a, b; san too when it has an SSD).
func (c failoverCluster) bootAsync(name string) (*node, error) {
	spec := c.specs[name]
	return c.etcdCluster.bootAsync(name, spec, func(n *node) string {
		var cmds []string
		if spec.HDDs > 0 {
			cmds = append(cmds, "mdadm --create /dev/md/lun0 --run --level=10 --raid-devices=4 --assume-clean "+strings.Join(n.hdds(), " "))
		}
		if len(spec.SSDs) > 0 {
			cmds = append(cmds, "tidectl pool create fast --ssd "+n.ssds()[0])
		}
		return strings.Join(cmds, " && ")
	})
}

// reboot boots a node again on its disks, its etcd member's data mounted.
func (c failoverCluster) reboot(name string) *node {
	c.t.Helper()
	spec := c.specs[name]
	cfg, err := c.config(name, spec, c.addr(name), name == c.names[0])
	if err != nil {
		c.t.Fatal(err)
	}
	cfg.MemoryMiB = spec.MemoryMB
	n := &node{VM: harness.MustBoot(c.t, cfg), t: c.t, bin: c.bin, dir: cfg.Dir, spec: spec}
	n.mustSh("mkdir -p /run/etcd && mount " + n.spares()[0] + " /run/etcd")
	c.nodes[name] = n
	return n
}

// show reads the volume through the cluster, from the named node.
func (c failoverCluster) show(from, volume string) failoverVolume {
	c.t.Helper()
	var v failoverVolume
	out := c.nodes[from].mustTidectl("-o json volume show " + volume + " --etcd-endpoints " + c.client(from))
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		c.t.Fatalf("parse volume show: %v\n%s", err, out)
	}
	return v
}

// startFailoverCluster boots san, a and b, starts their daemons (san
// exporting lun0, its RAID10) and waits until the three are registered
// and one leads. The caller defers c.dumpLogs (the VMs stop with the
// test's context, before any cleanup runs).
func startFailoverCluster(t *testing.T, bin string) (failoverCluster, clusterView) {
	t.Helper()
	return startFailoverClusterOf(t, bin, failoverSpecs)
}

// startFailoverClusterOf is startFailoverCluster with the nodes, and
// their disks, of specs: san (which carries the network's hub) and the
// others, each running an etcd member.
func startFailoverClusterOf(t *testing.T, bin string, specs map[string]nodeSpec) (failoverCluster, clusterView) {
	t.Helper()
	all := slices.Sorted(maps.Keys(specs))
	c := failoverCluster{&etcdCluster{
		peerCluster: &peerCluster{t: t, dir: harness.TestDir(t), bin: bin, hub: hubAddr(t)},
		names:       append([]string{"san"}, slices.DeleteFunc(slices.Clone(all), func(n string) bool { return n == "san" })...),
		nodes:       map[string]*node{},
	}, specs}
	var wg sync.WaitGroup
	booted := make([]*node, len(c.names))
	errs := make([]error, len(c.names))
	for i, name := range c.names {
		wg.Go(func() { booted[i], errs[i] = c.bootAsync(name) })
	}
	wg.Wait()
	for i, name := range c.names {
		if errs[i] != nil {
			t.Fatalf("node %s: %v", name, errs[i])
		}
		c.nodes[name] = booted[i]
	}
	c.a, c.b = c.nodes["a"], c.nodes["b"]
	c.extra = map[string]string{"san": "--export lun0=/dev/md/lun0"}
	for _, name := range c.names {
		c.startDaemon(name)
	}
	v, took := c.waitNodes("san", "all registered", 2*time.Minute, func(v clusterView) bool {
		return slices.Equal(v.names(), all) && v.Leader != ""
	})
	t.Logf("etcd formed by the %d daemons, all registered in %s; %s leads", len(all), took.Round(100*time.Millisecond), v.Leader)
	return c, v
}

// TestFailoverSharedOrigin checks failover of a volume on a shared origin,
// on three nodes running the cluster's etcd as three embedded members:
//   - san exports its RAID10 (the shared origin) to a and b, one NVMe/TCP
//     subsystem each; a adopts it as volume db with its write cache
//     mirrored to a replica on b;
//   - b's network is cut for 12 s under a paced writer with verify: the
//     writes wait (under 10 s) until a records b's replica outdated in
//     etcd, then complete on a's leg; b back, its leg resyncs from the
//     bitmap and the mark is cleared;
//   - a leads both etcd's raft and tidecache; a writer of checksummed
//     records acknowledges each one on a serial port after fdatasync,
//     and a's VM is killed under it, with dirty blocks in its cache;
//   - the survivors keep a quorum and elect leaders; the new leader
//     fences a, san and b cut a off and acknowledge, and the volume moves
//     to b, which runs it on its replica and the shared origin: every
//     acknowledged record reads back there; the status says where it
//     runs and that it failed over;
//   - a boots again: its assembly cannot start db (san refuses it), its
//     daemon releases its stale copy without writing anything, the leader
//     lifts the fence, and san serves a again; db stays on b, intact;
//   - the leader places a new replica on a, b mirrors the write cache it
//     took over onto it: two copies again, every record intact.
func TestFailoverSharedOrigin(t *testing.T) {
	bin, err := binaries()
	if err != nil {
		t.Fatal(err)
	}
	c, v := startFailoverCluster(t, bin)
	defer c.dumpLogs()

	// a leads tidecache (its rivals' daemons restarted until it does) and
	// etcd's raft, so that one kill takes both leaders with the owner.
	for tries := 0; v.Leader != "a"; tries++ {
		if tries == 4 {
			t.Fatalf("a never became the leader (%s leads)", v.Leader)
		}
		was := v.Leader
		c.nodes[was].mustSh("kill $(cat /run/daemon.pid); while kill -0 $(cat /run/daemon.pid) 2>/dev/null; do sleep 0.2; done")
		c.startDaemon(was)
		v, _ = c.waitNodes("san", "leadership handed on", time.Minute, func(v clusterView) bool {
			return len(v.Nodes) == 3 && v.Leader != "" && v.Leader != was
		})
	}
	c.moveRaftLeader("a", "san")

	eps := " --etcd-endpoints " + c.endpoints()
	c.a.mustTidectl("policy set default --failover-after 5s" + eps)
	c.a.mustTidectl("volume adopt db --shared-origin san/lun0 --node a --replica-node b --write-cache 64M --wait --timeout 3m" + eps)
	if v := c.waitMirror("db", "AA", 2*time.Minute); v.PeerNode != "b" {
		t.Fatalf("volume db mirrored on %q, want b", v.PeerNode)
	}
	if out := c.nodes["san"].mustSh("ls /sys/kernel/config/nvmet/subsystems"); !strings.Contains(out, ":export:lun0:a") || !strings.Contains(out, ":export:lun0:b") {
		t.Fatalf("san does not export lun0 to a and b, one subsystem each:\n%s", out)
	}

	// b is cut off for 12 s under a paced writer with verify: the writes
	// wait until a has recorded b's replica outdated in etcd, then go on
	// on a's leg alone; when b is back its leg resyncs from the bitmap
	// and the mark is cleared.
	const dev = "/dev/mapper/tc-db"
	paced := fioJob(dev, "paced", "randwrite", "128M", "6M") + " --iodepth=1 --rate_iops=150 --do_verify=1"
	c.a.mustSh("fio --output-format=json --output=/run/paced.json " + paced + " >/run/paced.log 2>&1 & echo $! > /run/fio.pid")
	time.Sleep(2 * time.Second)
	cut := time.Now()
	c.b.mustSh("(ip link set eth0 down; sleep 12; ip link set eth0 up) >/dev/null 2>&1 &")
	c.a.mustSh("while kill -0 $(cat /run/fio.pid) 2>/dev/null; do sleep 0.5; done")
	stall := fioMaxWrite(t, c.a, "/run/paced.json", "/run/paced.log")
	t.Logf("b cut off for 12 s: longest write %.1fs, writer done %.1fs after the cut", stall.Seconds(), time.Since(cut).Seconds())
	if stall > 10*time.Second {
		t.Errorf("writes stalled %.1fs when the peer was cut off, want under 10s", stall.Seconds())
	}
	went := c.a.eventually(30*time.Second, "grep 'volume goes on without its peer leg, the replica recorded outdated' /run/daemon.log", "writes_waited")
	t.Logf("a's daemon: %s", strings.TrimSpace(went))
	c.waitMirror("db", "AA", 3*time.Minute)
	c.a.eventually(30*time.Second, "grep -c 'replica back in sync: its outdated mark is cleared' /run/daemon.log", "1")
	t.Logf("b back: leg resynced from the bitmap and the mark cleared %.1fs after the cut", time.Since(cut).Seconds())

	// The owner, leading etcd and tidecache, dies under acknowledged
	// writes; its cache holds dirty blocks (the writer outruns the
	// write-back to the RAID10).
	// a still leads etcd's raft (b's cut may have moved it): the kill
	// must take the raft leader with the owner.
	c.moveRaftLeader("a", "san")
	v, _ = c.waitNodes("san", "all three registered again", time.Minute, func(v clusterView) bool { return len(v.Nodes) == 3 && v.Leader != "" })
	t.Logf("before the kill: a leads etcd's raft, %s leads tidecache", v.Leader)
	c.a.mustSh(fmt.Sprintf("crashwriter write -dev %s -ack %s -cycle 1 -blocks 16384 >/run/writer.log 2>&1 &", dev, c.a.AckDevice()))
	c.a.eventually(time.Minute, `tidectl -o json volume show db | grep -E '"dirty_blocks": *[1-9]'`, "dirty_blocks")
	time.Sleep(2 * time.Second)
	killed := time.Now()
	if err := c.a.Kill(); err != nil {
		t.Fatal(err)
	}
	acks, err := c.a.Acks()
	if err != nil {
		t.Fatal(err)
	}
	through := lastAck(acks, 1)
	if through < 0 {
		t.Fatal("no record was acknowledged before the kill: the test would check nothing")
	}

	// The survivors fail db over to b.
	deadline := time.Now().Add(4 * time.Minute)
	var fv failoverVolume
	for {
		if res := c.b.tidectl("-o json volume show db --etcd-endpoints " + c.client("b")); res.ExitCode == 0 {
			if json.Unmarshal([]byte(res.Stdout), &fv) == nil && fv.Node == "b" && fv.State == "active" && fv.FailedOverFrom == "a" {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("db not running on b 4m after a was killed: %+v\nb's daemon log:\n%s\nsan's daemon log:\n%s", fv,
				c.b.sh("tail -40 /run/daemon.log").Stdout, c.nodes["san"].sh("tail -30 /run/daemon.log").Stdout)
		}
		time.Sleep(time.Second)
	}
	t.Logf("a killed (owner, etcd and tidecache leader): db running on b %.1fs later", time.Since(killed).Seconds())
	// The next pass's policy decision raises the single copy.
	c.b.eventually(time.Minute, "tidectl -o json volume show db --etcd-endpoints "+c.client("b"), "failed over from node a onto its replica, the only copy")
	if out := c.nodes["san"].mustSh("ls /sys/kernel/config/nvmet/subsystems"); strings.Contains(out, ":export:lun0:a") {
		t.Errorf("san still exports lun0 to the fenced node a:\n%s", out)
	}
	res := c.b.sh(fmt.Sprintf("crashwriter verify -dev %s -cycle 1 -through %d", dev, through))
	if res.ExitCode != 0 {
		t.Fatalf("acknowledged records lost in the failover:\n%s%s", res.Stdout, res.Stderr)
	}
	t.Logf("on b: %s (records 0-%d acknowledged by a)", strings.TrimSpace(res.Stdout), through)
	if show := c.b.mustTidectl("volume show db" + " --etcd-endpoints " + c.client("b")); !strings.Contains(show, "Failed over:  from node a, now on b") {
		t.Errorf("volume show does not say db failed over:\n%s", show)
	}

	// a comes back, fenced: nothing of db starts there, its copy is
	// released, and the fence is lifted.
	back := c.reboot("a")
	c.a = back
	out := back.mustSh("tidecached assemble 2>&1; dmsetup ls")
	if strings.Contains(out, "tc-db") || !strings.Contains(out, "LATER") {
		t.Fatalf("the fenced node's assembly started db, which runs on b, or did not say it leaves it to the daemon:\n%s", out)
	}
	c.startDaemon("a")
	back.eventually(2*time.Minute, "tidectl -o json volume list | grep -c '\"name\": *\"db\"' || true", "0\n")
	c.nodes["san"].eventually(2*time.Minute, "ls /sys/kernel/config/nvmet/subsystems", ":export:lun0:a")
	if got := c.show("b", "db"); got.Node != "b" || got.State != "active" {
		t.Fatalf("after a came back: db %+v, want it to stay active on b", got)
	}
	if out := back.mustSh("dmsetup ls"); strings.Contains(out, "tc-db") {
		t.Fatalf("a resumed db after its release:\n%s", out)
	}
	res = c.b.sh(fmt.Sprintf("crashwriter verify -dev %s -cycle 1 -through %d", dev, through))
	if res.ExitCode != 0 {
		t.Fatalf("records lost after the fenced node came back:\n%s%s", res.Stdout, res.Stderr)
	}
	t.Logf("a back, released db and unfenced; db intact on b")

	// Protected again: the leader places a new replica on a (no longer
	// fenced), b adds it as leg 1 of a mirror of the write cache it took
	// over, and dm-raid copies it there.
	deadline = time.Now().Add(4 * time.Minute)
	for {
		fv = c.show("b", "db")
		if fv.PeerNode == "a" && fv.Mirror != nil && fv.Mirror.Health == "AA" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("db not protected again on a: %+v, mirror %+v\nb's daemon log:\n%s", fv, fv.Mirror, c.b.sh("tail -30 /run/daemon.log").Stdout)
		}
		time.Sleep(time.Second)
	}
	if fv.Protection != "peer" {
		t.Errorf("db protection %q after its new replica was added, want peer", fv.Protection)
	}
	res = c.b.sh(fmt.Sprintf("crashwriter verify -dev %s -cycle 1 -through %d", dev, through))
	if res.ExitCode != 0 {
		t.Fatalf("records lost when the write cache was mirrored again:\n%s%s", res.Stdout, res.Stderr)
	}
	t.Logf("db protected again on a, mirror AA, every record intact, %.1fs after the kill", time.Since(killed).Seconds())
}
