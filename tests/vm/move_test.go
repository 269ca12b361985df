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

// moveRecords is how many 4 KiB records a move's writer acknowledges
// (4 MiB). When the shared origin's write cache worked in the LUN's
// 512-byte blocks (dm-writecache serves a read of cached data one block
// at a time), reading 4096 records back took 78 s in one run; 1024 take
// a quarter of that and prove the same.
const moveRecords = 1024

// TestMoveWarm checks planned moves of a volume on a shared origin on the
// failover test's three nodes, through etcd, two or three times, each
// time with the write cache holding dirty blocks (nothing written back for
// a move) and every acknowledged record read back on the new node, the
// old one keeping no copy:
//   - db is provisioned as Kubernetes provisions a claim: tidecache-csi
//     on a (csicall making the external-provisioner's call) with a
//     StorageClass on san's shared origins (exports lun*) gives it lun0,
//     san's one export, cached on a, the claim's node, its write cache
//     mirrored on b (the leader's replica); a second claim is refused,
//     lun0 being db's; a writer of checksummed records acknowledges each
//     one after fdatasync;
//   - a move to san, which exports lun0 (to the others, never to
//     itself), is refused before anything changes; a move to b waits
//     while the device is open on a, saying so in the status; closed,
//     `tidectl volume move --wait` hands db to b and reports the
//     handover time;
//   - with -all-cases (make test-vm-all; left out of .ci/run for time),
//     protected again on a (the leader's new replica), db moves back with
//     b's power cut as b stops it: b's assembly leaves db alone, b's
//     daemon finishes the stop and the handover when b is back;
//   - protected again on its other node, db moves there as Kubernetes
//     moves a pod (tidecache-csi on both nodes, csicall making the
//     attacher's and the kubelet's calls), with the new node's power cut
//     as it takes db over from its replica: the attacher's publish
//     returns once that node's daemon finished the take-over after the
//     reboot, and the records a "pod" wrote through the old node's
//     published block device read back through the new one's.
func TestMoveWarm(t *testing.T) {
	bin, err := binaries()
	if err != nil {
		t.Fatal(err)
	}
	if err := csiBinaries(); err != nil {
		t.Fatalf("build csi binaries: %v", err)
	}
	c, _ := startFailoverCluster(t, bin)
	defer c.dumpLogs()
	const dev = "/dev/mapper/tc-db"
	eps := " --etcd-endpoints " + c.endpoints()

	c.startCSI("a")
	const class = "-node a -param sharedOrigin=san -param 'exports=lun*' -param writeCache=64Mi"
	// Called again, as the provisioner does, until san's record shows
	// lun0 exported to a (it exports to a node once that registered).
	out := c.a.mustSh("csicall -timeout 2m -volume db " + class + " create")
	t.Logf("provisioned: %s", strings.TrimSpace(out))
	if !strings.Contains(out, "on nodes a,b") {
		t.Fatalf("db's topology: %q, want a and b, the nodes that see lun0 and have a pool", out)
	}
	if res := c.a.sh("csicall -once -volume db2 " + class + " create"); res.ExitCode == 0 || !strings.Contains(res.Stderr, "no free export matching exports of lun*") {
		t.Fatalf("a second claim with lun0 taken: exit %d, want a refusal:\n%s%s", res.ExitCode, res.Stdout, res.Stderr)
	}
	// CreateVolume returns once the spec is written (the provisioner
	// does not wait for the volume): a creates db once the leader has
	// placed its replica on b and b exports it.
	t0 := time.Now()
	c.waitRunning("a", 3*time.Minute)
	if v := c.waitMirror("db", "AA", 2*time.Minute); v.PeerNode != "b" {
		t.Fatalf("volume db mirrored on %q, want b", v.PeerNode)
	}
	t.Logf("db running on a, its write cache mirrored on b, %v after the claim", time.Since(t0).Round(time.Second))
	if v := c.show("a", "db"); v.Node != "a" || v.SharedOrigin != "san/lun0" {
		t.Fatalf("volume db on %q caching %q; want a, san/lun0", v.Node, v.SharedOrigin)
	}
	// A claim's export is the class's to replace: its write cache works
	// in the pool's 4 KiB blocks, not in lun0's 512-byte sectors.
	if bs := showUint(t, c.a.mustTidectl("-o json volume show db"), "block_size"); bs != 4096 {
		t.Fatalf("db's write-cache block size %d, want 4096 (the pool's, for a provisioned export)", bs)
	}
	// moveRecords of records: under the write cache's high watermark,
	// so they stay dirty until something writes them back.
	c.a.mustSh(fmt.Sprintf("crashwriter write -dev %s -ack %s -cycle 1 -blocks %d >/run/writer.log 2>&1", dev, c.a.AckDevice(), moveRecords))
	acks, err := c.a.Acks()
	if err != nil {
		t.Fatal(err)
	}
	through := lastAck(acks, 1)
	if through != moveRecords-1 {
		t.Fatalf("the writer acknowledged records through %d, want %d:\n%s", through, moveRecords-1, c.a.sh("cat /run/writer.log").Stdout)
	}
	before := dirtyBlocks(t, c.a.mustTidectl("-o json volume show db"))
	if before == 0 {
		t.Fatal("no dirty blocks in db's write cache before the move: the test would prove nothing")
	}

	res := c.a.tidectl("volume move db --to san" + eps)
	if res.ExitCode == 0 || !strings.Contains(res.Stderr, "node san does not see export lun0 of node san, which volume db caches (it is served to: a, b)") {
		t.Fatalf("move to san (the exporter): exit %d, want a refusal naming the nodes that see lun0:\n%s%s", res.ExitCode, res.Stdout, res.Stderr)
	}

	// The device held open on a: the move waits and says why.
	c.a.mustSh("sleep 600 <" + dev + " >/dev/null 2>&1 & echo $! >/run/holder.pid")
	c.a.mustTidectl("volume move db --to b" + eps)
	c.b.eventually(time.Minute, "tidectl -o json volume show db --etcd-endpoints "+c.client("b"), "move to node b waits")
	if got := c.show("b", "db"); got.Node != "a" {
		t.Fatalf("db moved while its device was open on a: %+v", got)
	}
	c.a.mustSh("kill $(cat /run/holder.pid)")

	out = c.a.mustTidectl("volume move db --to b --wait --timeout 3m" + eps)
	t.Logf("a → b: %s", strings.TrimSpace(out))
	checkMoved(t, c, "b", "a", out, through)

	// b → a, b's power cut as it stops db, before its handover: the spec
	// still names b, and b's daemon, back, finishes the stop and hands
	// db over. One node runs db at any time.
	from, to := "b", "a"
	inFullRunOnly(t, "b's power cut as it stops db", func() {
		c.waitProtected("b", "a")
		c.cutWhenLogged("b", "planned move: stopping the volume")
		c.b.mustTidectl("volume move db --to a" + eps)
		c.restartCut("b")
		c.waitRunning("a", 4*time.Minute)
		checkRunsOn(t, c, "a", "b", dev, 1, through)
		from, to = "a", "b"
	})
	moveLikeKubernetes(t, c, from, to)
}

// moveLikeKubernetes moves db, running on from and protected on to, to
// to as Kubernetes moves a pod, with to's power cut as it takes db over:
// a "pod" on from writes records (cycle 2) through the block device
// tidecache-csi published there; the kubelet on from unpublishes and
// unstages it; the attacher (its calls made on from, where a controller
// runs) unpublishes it on from and publishes it on to, calling again
// while the move runs; to dies as it takes db over from its replica
// (from's copy dropped), boots again and its daemon finishes the
// take-over; the publish returns, the kubelet on to stages and
// publishes, and the records read back through to's device.
func moveLikeKubernetes(t *testing.T, c failoverCluster, from, to string) {
	t.Helper()
	src := c.nodes[from]
	t0 := time.Now()
	c.waitProtected(from, to)
	t.Logf("db protected on %s again in %v", to, time.Since(t0).Round(time.Second))
	// tidecache-csi runs on a since the claim; start it where it is not.
	for _, name := range []string{from, to} {
		if name != "a" {
			c.startCSI(name)
		}
	}
	const pod = "/run/pod/db"
	src.mustSh(csiCalls("publish -node "+from, "stage", "mount"))
	src.mustSh(fmt.Sprintf("crashwriter write -dev %s -ack %s -cycle 2 -blocks %d >/run/writer.log 2>&1", pod, src.AckDevice(), moveRecords))
	acks, err := src.Acks()
	if err != nil {
		t.Fatal(err)
	}
	through := lastAck(acks, 2)
	if through != moveRecords-1 {
		t.Fatalf("the pod's writer acknowledged records through %d, want %d", through, moveRecords-1)
	}
	src.mustSh(csiCalls("umount", "unstage", "unpublish -node "+from))
	c.cutWhenLogged(to, "taking the volume over from its replica")
	src.mustSh("(" + csiCalls("publish -node "+to+" -timeout 6m") + " >/run/publish.log 2>&1; echo $? >/run/publish.rc) &")
	c.restartCut(to)
	for deadline := time.Now().Add(6 * time.Minute); ; time.Sleep(2 * time.Second) {
		rc := strings.TrimSpace(src.sh("cat /run/publish.rc 2>/dev/null").Stdout)
		if rc == "0" {
			break
		}
		if rc != "" || time.Now().After(deadline) {
			t.Fatalf("the attacher's publish on %s: exit %q:\n%s", to, rc, src.sh("cat /run/publish.log").Stdout)
		}
	}
	t.Logf("the attacher's publish on %s, across %s's power cut: %s", to, to, strings.TrimSpace(src.sh("tail -3 /run/publish.log").Stdout))
	c.startCSI(to)
	c.nodes[to].mustSh(csiCalls("stage", "mount"))
	checkRunsOn(t, c, to, from, pod, 2, through)
}

// startCSI starts tidecache-csi (controller and node services) on node
// name, its node ID the node's name.
func (c failoverCluster) startCSI(name string) {
	c.t.Helper()
	n := c.nodes[name]
	n.mustSh(fmt.Sprintf("mkdir -p /run/csi && (tidecache-csi --mode both --node-id %s --endpoint unix:///run/csi/csi.sock --etcd-endpoints %s >>/run/csi.log 2>&1 &)",
		name, c.client(name)))
	n.eventually(30*time.Second, "test -S /run/csi/csi.sock && echo up", "up")
}

// csiCalls is a shell line making the CSI calls named (csicall's) for db
// in order, staged at /run/csi/staging/db and published at /run/pod/db.
func csiCalls(calls ...string) string {
	var out []string
	for _, call := range calls {
		// csicall's flags come before the call's name.
		verb, flags, _ := strings.Cut(call, " ")
		out = append(out, "csicall -volume db -staging /run/csi/staging/db -target /run/pod/db "+flags+" "+verb)
	}
	return strings.Join(out, " && ")
}

// waitProtected waits until db runs on owner with its write cache
// mirrored on peer, both legs in sync.
func (c failoverCluster) waitProtected(owner, peer string) {
	c.t.Helper()
	deadline := time.Now().Add(4 * time.Minute)
	for {
		v := c.show(owner, "db")
		if v.Node == owner && v.PeerNode == peer && v.Mirror != nil && v.Mirror.Health == "AA" {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("db not running on %s mirrored on %s: %+v, mirror %+v\n%s's daemon log:\n%s", owner, peer, v, v.Mirror,
				owner, c.nodes[owner].sh("tail -30 /run/daemon.log").Stdout)
		}
		time.Sleep(time.Second)
	}
}

// cutWhenLogged arms a power cut of node name (sysrq b: an immediate
// reset, nothing synced) the moment its daemon logs msg.
func (c failoverCluster) cutWhenLogged(name, msg string) {
	c.t.Helper()
	c.nodes[name].mustSh(fmt.Sprintf("echo 1 >/proc/sys/kernel/sysrq; (while ! grep -q '%s' /run/daemon.log; do sleep 0.05; done; echo b >/proc/sysrq-trigger) >/dev/null 2>&1 &", msg))
}

// restartCut waits for node name's armed power cut, then boots it again:
// its assembly must leave db to the daemon (it can fail over), and its
// daemon starts.
func (c failoverCluster) restartCut(name string) {
	c.t.Helper()
	n := c.nodes[name]
	select {
	case <-n.Done():
	case <-time.After(3 * time.Minute):
		c.t.Fatalf("%s's power cut never came; its daemon log:\n%s", name, n.sh("tail -30 /run/daemon.log").Stdout)
	}
	v := c.show("san", "db")
	c.t.Logf("%s's power cut: db's spec moving to %q, moved from %q, last status from %s (%s)", name, v.MovingTo, v.MovedFrom, v.Node, v.State)
	back := c.reboot(name)
	if name == "a" {
		c.a = back
	} else {
		c.b = back
	}
	if out := back.mustSh("tidecached assemble 2>&1; dmsetup ls"); strings.Contains(out, "tc-db") {
		c.t.Fatalf("%s's assembly started db, which only the daemon may start:\n%s", name, out)
	}
	c.startDaemon(name)
}

// waitRunning waits until db's status says it is active on node.
func (c failoverCluster) waitRunning(node string, timeout time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		v := c.show("san", "db")
		if v.Node == node && v.State == "active" && v.MovingTo == "" {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("db not active on %s after %v: %+v\n%s's daemon log:\n%s", node, timeout, v, node, c.nodes[node].sh("tail -40 /run/daemon.log").Stdout)
		}
		time.Sleep(time.Second)
	}
}

// handedOver reads the handover time `volume move --wait` reports.
var handedOver = regexp.MustCompile(`runs on node (\S+): handed over in ([0-9.]+) s.*; (\d+) dirty blocks kept`)

// checkMoved checks db after a move from one node to another, as
// `volume move --wait` reported it (out) and as checkRunsOn finds it.
func checkMoved(t *testing.T, c failoverCluster, to, from, out string, through int64) {
	t.Helper()
	m := handedOver.FindStringSubmatch(out)
	if m == nil || m[1] != to {
		t.Fatalf("volume move did not report db running on %s with its handover time:\n%s", to, out)
	}
	if dirty, _ := strconv.ParseUint(m[3], 10, 64); dirty == 0 {
		t.Errorf("volume move reports no dirty blocks on %s: its write cache was written back, not kept", to)
	}
	if show := c.nodes[to].mustTidectl("volume show db --etcd-endpoints " + c.client(to)); !strings.Contains(show, "Moved:        from node "+from) {
		t.Errorf("volume show does not say db moved from %s:\n%s", from, show)
	}
	// A move is not a failover: the layout records it as planned, and
	// the metrics (and the TidecacheVolumeFailedOver alert) say so.
	metrics := c.nodes[to].mustSh("curl -sf http://127.0.0.1:9540/metrics | grep -E '^tidecache_volume_(moved|failed_over)_timestamp_seconds' || true")
	if !strings.Contains(metrics, `tidecache_volume_moved_timestamp_seconds{from="`+from+`"`) || strings.Contains(metrics, "failed_over") {
		t.Errorf("%s's metrics after db moved from %s: %q, want the moved timestamp and no failed-over one", to, from, metrics)
	}
	checkRunsOn(t, c, to, from, "/dev/mapper/tc-db", 1, through)
	t.Logf("%s → %s: handed over in %s s", from, to, m[2])
}

// checkRunsOn checks db runs on node to, its write cache still holding
// dirty blocks (nothing was written back for the move), every record of
// cycle through `through` read back there through dev, and no copy left
// on node from.
func checkRunsOn(t *testing.T, c failoverCluster, to, from, dev string, cycle int, through int64) {
	t.Helper()
	n := c.nodes[to]
	t0 := time.Now()
	// The device can be there (staged, even) before the daemon's status
	// says so: it writes the status after the start.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
		v := c.show(to, "db")
		if v.Node == to && v.State == "active" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("db: %+v, want active on %s", v, to)
		}
	}
	dirty := dirtyBlocks(t, n.mustTidectl("-o json volume show db"))
	if dirty == 0 {
		t.Errorf("db's write cache on %s holds no dirty block: it was written back, not kept", to)
	}
	active := time.Since(t0)
	res := n.sh(fmt.Sprintf("crashwriter verify -dev %s -cycle %d -through %d", dev, cycle, through))
	if res.ExitCode != 0 {
		t.Fatalf("records lost on the way to %s:\n%s%s", to, res.Stdout, res.Stderr)
	}
	verified := time.Since(t0)
	c.nodes[from].eventually(2*time.Minute, "tidectl -o json volume list | grep -c '\"name\": *\"db\"' || true", "0\n")
	if out := c.nodes[from].mustSh("dmsetup ls"); strings.Contains(out, "tc-db") {
		t.Errorf("%s still has db's devices after it left:\n%s", from, out)
	}
	t.Logf("db on %s, from %s: %d dirty blocks kept, %s (active after %v, read back after %v, gone from %s after %v)", to, from, dirty,
		strings.TrimSpace(res.Stdout), active.Round(time.Second), verified.Round(time.Second), from, time.Since(t0).Round(time.Second))
}

// dirtyBlocks reads dirty_blocks from `tidectl -o json volume show` on
// the node running the volume.
func dirtyBlocks(t *testing.T, show string) uint64 {
	t.Helper()
	return showUint(t, show, "dirty_blocks")
}

// showUint reads the number field of `tidectl -o json volume show`.
func showUint(t *testing.T, show, field string) uint64 {
	t.Helper()
	m := regexp.MustCompile(`"` + field + `": *(\d+)`).FindStringSubmatch(show)
	if m == nil {
		t.Fatalf("no %s in volume show:\n%s", field, show)
	}
	n, _ := strconv.ParseUint(m[1], 10, 64)
	return n
}
