// SPDX-License-Identifier: Apache-2.0

//go:build vm

package vm_test

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidecache/tidecache/tests/vm/harness"
)

// clusterView is what `tidectl -o json node list` prints.
type clusterView struct {
	Leader string `json:"leader"`
	Nodes  []struct {
		Name string `json:"name"`
	} `json:"nodes"`
}

func (v clusterView) names() []string {
	var out []string
	for _, n := range v.Nodes {
		out = append(out, n.Name)
	}
	sort.Strings(out)
	return out
}

// etcdCluster is three VMs whose daemons run the cluster's etcd as three
// embedded members, each node also keeping replicas for the others.
type etcdCluster struct {
	*peerCluster
	names []string
	// others are nodes on the same network whose daemons use the members
	// as clients, without a member of their own (startClient).
	others []string
	nodes  map[string]*node
	spec   nodeSpec
	// extra holds more tidecached run flags for some nodes.
	extra map[string]string
}

// dumpLogs is peerCluster.dumpLogs for every node of the cluster.
func (c *etcdCluster) dumpLogs() {
	var nodes []*node
	for _, name := range c.names {
		nodes = append(nodes, c.nodes[name])
	}
	c.dumpNodeLogs(nodes...)
}

func (c *etcdCluster) addr(name string) string {
	return fmt.Sprintf("10.77.0.%d", slices.Index(slices.Concat(c.names, c.others), name)+1)
}

// startClient runs tidecached on one of c.others, with the members as its
// etcd and its NVMe/TCP target serving replicas.
func (c *etcdCluster) startClient(name string) {
	c.t.Helper()
	c.nodes[name].mustSh(fmt.Sprintf("tidecached run --node %s --listen 127.0.0.1:9540 --lease-ttl 4s --resync-interval 3s --leg-retry 1s"+
		" --replica-address %s --insecure-nvme --etcd-endpoints %s >>/run/daemon.log 2>&1 & echo $! > /run/daemon.pid", name, c.addr(name), c.endpoints()))
}

func (c *etcdCluster) client(name string) string { return "http://" + c.addr(name) + ":2389" }

// endpoints lists every member's client URL, for tidectl.
func (c *etcdCluster) endpoints() string {
	var eps []string
	for _, n := range c.names {
		eps = append(eps, c.client(n))
	}
	return strings.Join(eps, ",")
}

// rebootNode boots the named node again, with the disks it had (c.spec
// for a node not booted yet); its etcd member's data is on its spare disk,
// so that it rejoins with its member's data as a real server would.
func (c *etcdCluster) rebootNode(name string) *node {
	c.t.Helper()
	spec := c.spec
	if old, ok := c.nodes[name]; ok {
		spec = old.spec
	}
	n := c.boot(name, spec, c.addr(name), name == c.names[0])
	n.mustSh("mkdir -p /run/etcd && mount " + n.spares()[0] + " /run/etcd")
	c.nodes[name] = n
	return n
}

// bootNodeAsync boots a node for the first time and makes its pool, from
// a goroutine of its own: it returns errors instead of failing the test.
func (c *etcdCluster) bootNodeAsync(name string) (*node, error) {
	return c.bootAsync(name, c.spec, func(n *node) string {
		return fmt.Sprintf("tidectl pool create fast --origin %s --ssd %s", n.hdds()[0], n.ssds()[0])
	})
}

// bootAsync boots a node with spec's disks for the first time, makes the
// etcd member's filesystem on its spare disk, mounts it at /run/etcd and
// runs prepare's command: from a goroutine of its own, so it returns
// errors instead of failing the test.
func (c *etcdCluster) bootAsync(name string, spec nodeSpec, prepare func(*node) string) (*node, error) {
	cfg, err := c.config(name, spec, c.addr(name), name == c.names[0])
	if err != nil {
		return nil, err
	}
	if spec.MemoryMB != 0 {
		cfg.MemoryMiB = spec.MemoryMB
	}
	v, err := harness.Boot(c.t.Context(), cfg)
	if err != nil {
		return nil, err
	}
	c.t.Cleanup(func() { v.Kill() })
	n := &node{VM: v, t: c.t, bin: c.bin, dir: cfg.Dir, spec: spec}
	cmd := fmt.Sprintf("export PATH=%s:$PATH; mkfs.ext4 -q %s && mkdir -p /run/etcd && mount %[2]s /run/etcd && %s",
		c.bin, n.spares()[0], prepare(n))
	res, err := n.Run(c.t.Context(), cmd)
	switch {
	case err != nil:
		return nil, err
	case res.ExitCode != 0:
		return nil, fmt.Errorf("%q: exit %d: %s%s", cmd, res.ExitCode, res.Stdout, res.Stderr)
	}
	return n, nil
}

// startDaemon runs tidecached with its embedded member on the named node.
// Three VMs under software emulation share two cores, so a heartbeat can be
// late by far more than etcd's 100 ms: the raft timing is raised as
// docs/runbook.md advises for loaded links, or needless elections leave
// the cluster without a leader for seconds at a time.
func (c *etcdCluster) startDaemon(name string) {
	c.t.Helper()
	var members []string
	for _, n := range c.names {
		members = append(members, n+"=http://"+c.addr(n)+":2390")
	}
	c.nodes[name].mustSh(fmt.Sprintf("tidecached run --node %s --listen 127.0.0.1:9540 --lease-ttl 4s --resync-interval 3s --leg-retry 1s"+
		" --replica-address %s --insecure-nvme --embedded-etcd --insecure-etcd --etcd-data-dir /run/etcd/data --etcd-client-url %s"+
		" --embedded-etcd-initial-cluster %s --embedded-etcd-heartbeat-interval 300ms --embedded-etcd-election-timeout 3s"+
		" %s >>/run/daemon.log 2>&1 & echo $! > /run/daemon.pid", name, c.addr(name), c.client(name), strings.Join(members, ","), c.extra[name]))
}

// waitNodes waits until the node list read through name's member
// satisfies ok, and returns it and how long that took.
func (c *etcdCluster) waitNodes(name, what string, timeout time.Duration, ok func(clusterView) bool) (clusterView, time.Duration) {
	c.t.Helper()
	start := time.Now()
	for {
		res := c.nodes[name].sh("tidectl -o json --etcd-endpoints " + c.client(name) + " node list")
		if res.ExitCode == 0 {
			var v clusterView
			if json.Unmarshal([]byte(res.Stdout), &v) == nil && ok(v) {
				return v, time.Since(start)
			}
		}
		if time.Since(start) > timeout {
			c.t.Fatalf("%s: not after %s; node list says:\n%s%s\ndaemon log:\n%s", what, timeout, res.Stdout, res.Stderr,
				c.nodes[name].sh("tail -20 /run/daemon.log").Stdout)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

var (
	etcdMemberID = regexp.MustCompile(`"member_?[iI]d"\s*:\s*"?(\d+)`)
	etcdLeaderID = regexp.MustCompile(`"leader"\s*:\s*"?(\d+)`)
)

// etcdStatus reads a member's ID and its view of the raft leader's
// through etcd's JSON gateway (maintenance status).
func (c *etcdCluster) etcdStatus(name string) (member, leader string) {
	c.t.Helper()
	out := c.nodes[name].mustSh("curl -sf -X POST " + c.client(name) + "/v3/maintenance/status -d '{}'")
	m, l := etcdMemberID.FindStringSubmatch(out), etcdLeaderID.FindStringSubmatch(out)
	if m == nil || l == nil {
		c.t.Fatalf("etcd status of %s: no member or leader ID in %s", name, out)
	}
	return m[1], l[1]
}

// moveRaftLeader makes the named node's member etcd's raft leader, as
// the member of node from sees it.
func (c *etcdCluster) moveRaftLeader(to, from string) {
	c.t.Helper()
	target, _ := c.etcdStatus(to)
	_, raftLeader := c.etcdStatus(from)
	if raftLeader == target {
		return
	}
	for _, name := range c.names {
		if id, _ := c.etcdStatus(name); id == raftLeader {
			c.nodes[name].mustSh(fmt.Sprintf("curl -sf -X POST %s/v3/maintenance/transfer-leadership -d '{\"targetID\": \"%s\"}'", c.client(name), target))
		}
	}
	c.nodes[to].eventually(30*time.Second, "curl -sf -X POST "+c.client(to)+"/v3/maintenance/status -d '{}'", `"leader":"`+target+`"`)
}

// TestReprotectPeer checks re-protection, on three nodes that run the
// cluster's etcd as the three members of an embedded etcd:
//   - the etcd cluster forms and every daemon registers through its own
//     member; the raft leadership is moved to the node that leads
//     tidecache, so that one kill takes both leaders;
//   - that node keeps the replica of a volume another node owns; its VM is
//     killed under a paced writer: the writes stall under 10 s and go on
//     on one copy, the survivors keep a quorum, elect leaders and expire
//     the dead node;
//   - after the policy's reprotect-after (5 s here) the new leader places
//     the replica on the third node, the owner attaches it and dm-raid
//     rebuilds leg 1 there: two copies again, without the dead node;
//   - the dead node boots again: its etcd member rejoins, its assembly
//     builds the stale replica, and its daemon drops it, since the spec
//     places it elsewhere;
//   - `node drain` of the node now keeping the replica moves it back to
//     the node that returned, rebuilt there; the drained node drops it;
//   - with the owner's leg failed, every block written before the kill
//     and under it reads back from the rebuilt leg alone.
func TestReprotectPeer(t *testing.T) {
	bin, err := binaries()
	if err != nil {
		t.Fatal(err)
	}
	c := &etcdCluster{
		peerCluster: &peerCluster{t: t, dir: harness.TestDir(t), bin: bin, hub: hubAddr(t)},
		names:       []string{"a", "b", "c"},
		nodes:       map[string]*node{},
		spec:        nodeSpec{HDDs: 1, HDDSize: 256 << 20, SSDs: []int64{256 << 20}, Spares: []int64{512 << 20}},
	}
	// The three VMs boot and make their pools at once.
	var wg sync.WaitGroup
	booted := make([]*node, len(c.names))
	errs := make([]error, len(c.names))
	for i, name := range c.names {
		wg.Go(func() { booted[i], errs[i] = c.bootNodeAsync(name) })
	}
	wg.Wait()
	for i, name := range c.names {
		if errs[i] != nil {
			t.Fatalf("node %s: %v", name, errs[i])
		}
		c.nodes[name] = booted[i]
		if out := booted[i].mustTidectl("-o json pool show"); !strings.Contains(out, `"fast"`) {
			t.Fatalf("node %s: pool fast not created:\n%s", name, out)
		}
	}
	defer c.dumpLogs()
	// A member serves once a quorum runs: start the three together.
	for _, name := range c.names {
		c.startDaemon(name)
	}
	v, took := c.waitNodes("a", "all three registered", 2*time.Minute, func(v clusterView) bool {
		return slices.Equal(v.names(), c.names) && v.Leader != ""
	})
	t.Logf("etcd formed by the three daemons, all registered in %s; %s leads", took.Round(100*time.Millisecond), v.Leader)

	// The node leading tidecache takes the raft leadership too, and keeps
	// the replica; the volume is another node's, the third is spare. The
	// first node carries the test network's hub and must live: if it
	// leads, its daemon is restarted, which hands the leadership on.
	if v.Leader == c.names[0] {
		c.nodes[v.Leader].mustSh("kill $(cat /run/daemon.pid); while kill -0 $(cat /run/daemon.pid) 2>/dev/null; do sleep 0.2; done")
		c.startDaemon(v.Leader)
		v, _ = c.waitNodes(v.Leader, "leadership handed on", time.Minute, func(v clusterView) bool {
			return slices.Equal(v.names(), c.names) && v.Leader != "" && v.Leader != c.names[0]
		})
	}
	doomed := v.Leader
	owner := c.names[0]
	spare := c.names[1]
	if spare == doomed {
		spare = c.names[2]
	}
	c.moveRaftLeader(doomed, owner)
	c.a, c.b = c.nodes[owner], c.nodes[doomed] // for volume show and the logs
	eps := " --etcd-endpoints " + c.endpoints()
	c.a.mustTidectl("policy set default --reprotect-after 5s" + eps)
	c.a.mustTidectl("volume create db --size 200M --write-cache 32M --protect peer --node " + owner + " --replica-node " + doomed + " --wait --timeout 2m" + eps)
	if v := c.waitMirror("db", "AA", 2*time.Minute); v.PeerNode != doomed {
		t.Fatalf("volume db mirrored on %q, want %s", v.PeerNode, doomed)
	}
	dev := "/dev/mapper/tc-db"
	first := fioJob(dev, "first", "randwrite", "0", "8M")
	c.a.fio(first + " --do_verify=1")

	// Both leaders' node lost under a paced writer.
	second := fioJob(dev, "second", "randwrite", "64M", "16M") + " --iodepth=1 --rate_iops=300 --do_verify=1"
	killed, stall := killUnderWriter(t, c.a, c.nodes[doomed], "second", second, 2*time.Second)
	t.Logf("%s killed (etcd and tidecache leader, replica node): writer done %.1fs later, longest write %.1fs (fio: %s)", doomed,
		time.Since(killed).Seconds(), stall.Seconds(), strings.Join(strings.Fields(c.a.mustSh(`grep -E '"(total_ios|runtime)"' /run/second.json | head -4`)), " "))
	if stall > 10*time.Second {
		t.Errorf("writes stalled %.1fs when the peer died, want under 10s", stall.Seconds())
	}
	survivors := []string{owner, spare}
	slices.Sort(survivors)
	v, _ = c.waitNodes(owner, "leadership moved, dead node expired", time.Minute, func(v clusterView) bool {
		return v.Leader != "" && v.Leader != doomed && slices.Equal(v.names(), survivors)
	})
	t.Logf("%s leads, %s gone from the node list, %.1fs after the kill", v.Leader, doomed, time.Since(killed).Seconds())

	// Re-protected on the spare node: leg 1 rebuilt there in full.
	c.waitVolume("db", "re-protected on "+spare, 2*time.Minute, func(v peerVolume) bool { return v.PeerNode == spare })
	c.b = c.nodes[spare]
	c.waitMirror("db", "AA", 3*time.Minute)
	t.Logf("re-protected on %s and rebuilt %.1fs after the kill", spare, time.Since(killed).Seconds())
	c.waitVolume("db", "rebuilt, recorded in sync", 30*time.Second, func(v peerVolume) bool {
		return v.Mirror != nil && v.Mirror.Copies == 2 && len(v.Mirror.OutOfSync) == 0
	})
	if out := c.b.mustTidectl("pool show fast"); !strings.Contains(out, "of node "+owner+"'s volume db") {
		t.Errorf("%s's pool show does not list the replica:\n%s", spare, out)
	}

	// The dead node comes back: its member rejoins, its stale replica is
	// built by assembly and dropped by its daemon.
	back := c.rebootNode(doomed)
	back.mustSh("tidecached assemble")
	if out := back.mustSh("dmsetup ls"); !strings.Contains(out, "tcr-db") {
		t.Fatalf("%s's assembly did not build its stale replica:\n%s", doomed, out)
	}
	c.startDaemon(doomed)
	back.eventually(2*time.Minute, "dmsetup ls | grep -c tcr-db || true; ls /sys/kernel/config/nvmet/subsystems 2>/dev/null | wc -l", "0\n0")
	c.waitNodes(doomed, "the returned node registered through its own member", time.Minute, func(v clusterView) bool {
		return slices.Equal(v.names(), c.names)
	})
	if v := c.volume("db"); v.PeerNode != spare || v.Mirror == nil || v.Mirror.Health != "AA" {
		t.Fatalf("after %s came back: mirror on %q, %+v; want it to stay on %s, AA", doomed, v.PeerNode, v.Mirror, spare)
	}

	// Maintenance: draining the node that keeps the replica moves it to
	// the node that is not drained, which is the one that came back.
	drained := time.Now()
	c.a.mustTidectl("node drain " + spare + eps)
	c.waitVolume("db", "moved off the drained node to "+doomed, time.Minute, func(v peerVolume) bool { return v.PeerNode == doomed })
	c.b = back
	c.waitMirror("db", "AA", 3*time.Minute)
	t.Logf("%s drained: replica moved to %s and rebuilt %.1fs later", spare, doomed, time.Since(drained).Seconds())
	c.nodes[spare].eventually(time.Minute, "dmsetup ls | grep -c tcr-db || true; ls /sys/kernel/config/nvmet/subsystems 2>/dev/null | wc -l", "0\n0")

	// Only the rebuilt leg left (the owner's daemon stopped, so nothing
	// repairs its slices behind the test): every block, written before
	// the first kill and under it, reads back from it.
	c.readFromPeerLeg("db", first, fioJob(dev, "second", "randwrite", "64M", "16M")+" --iodepth=1")
}
