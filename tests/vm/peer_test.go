// SPDX-License-Identifier: Apache-2.0

//go:build vm

package vm_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidecache/tidecache/tests/vm/harness"
)

// peerCluster is the two nodes of the peer-protection test: a owns the
// volume (RAID10 of four HDDs and one SSD) and runs etcd, b keeps the
// replica (a small origin and one SSD) and serves it on 10.77.0.2.
type peerCluster struct {
	t          *testing.T
	dir, bin   string
	hub        string
	a, b       *node
	aSpec      nodeSpec
	bSpec      nodeSpec
	etcd       string
	daemonArgs string
	// kernel is the guests' kernel series (harness.Config.Kernel); ""
	// the default.
	kernel string
}

const peerReplicaAddr = "10.77.0.2"

func (c *peerCluster) boot(name string, spec nodeSpec, addr string, listen bool) *node {
	c.t.Helper()
	cfg, err := c.config(name, spec, addr, listen)
	if err != nil {
		c.t.Fatal(err)
	}
	v := harness.MustBoot(c.t, cfg)
	return &node{VM: v, t: c.t, bin: c.bin, dir: cfg.Dir, spec: spec}
}

// config is the VM of a node on the test network at addr: the hub's side
// if listen, else joining it. It creates the node's directory.
func (c *peerCluster) config(name string, spec nodeSpec, addr string, listen bool) (harness.Config, error) {
	netw := &harness.Network{Addr: addr + "/24"}
	if listen {
		netw.Listen = c.hub
	} else {
		netw.Connect = c.hub
	}
	dir := filepath.Join(c.dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return harness.Config{}, err
	}
	// One vCPU each: two or three VMs of two vCPUs on a 2-core host
	// oversubscribe it, and a guest spins on locks held by a vCPU thread
	// the host has descheduled. Measured on TestFailoverSharedOrigin
	// (three VMs): 238 s with one vCPU each, 291 s with two.
	return harness.Config{Name: name, Dir: dir, Kernel: c.kernel, MemoryMiB: 768, CPUs: 1, Network: netw, Disks: spec.disks(dir)}, nil
}

// startEtcd runs the cluster's etcd on a, as its own process, with its
// data on a's spare disk, which survives a's power cut as the cluster's
// records must.
func (c *peerCluster) startEtcd(format bool) {
	if format {
		c.a.mustSh("mkfs.ext4 -q " + c.a.spares()[0])
	}
	c.a.mustSh("mkdir -p /run/etcd && mount " + c.a.spares()[0] + " /run/etcd && tidecached etcd --insecure-etcd --client-url " + c.etcd + " --data-dir /run/etcd/data >>/run/etcd.log 2>&1 &")
	c.a.eventually(60*time.Second, "tidectl --etcd-endpoints "+c.etcd+" node list", "NODE")
}

// startDaemon runs tidecached on n; extra adds flags.
func (c *peerCluster) startDaemon(n *node, extra string) {
	c.t.Helper()
	n.mustSh(fmt.Sprintf("tidecached run --node %s --listen 127.0.0.1:9540 --etcd-endpoints %s %s %s >>/run/daemon.log 2>&1 & echo $! > /run/daemon.pid",
		n.Name(), c.etcd, c.daemonArgs, extra))
	n.eventually(60*time.Second, "curl -sf http://127.0.0.1:9540/healthz", `"etcd_up":true`)
}

// dumpLogs prints the tail of the daemons', etcd's and the kernel's logs
// of a failed test, and keeps the whole of them in each node's directory
// (daemon.log, dmesg.log, stacks.log) for what happened before the tail
// and where the daemon waits; it is deferred, since the VMs stop when the
// test function returns.
func (c *peerCluster) dumpLogs() { c.dumpNodeLogs(c.a, c.b) }

func (c *peerCluster) dumpNodeLogs(nodes ...*node) {
	if !c.t.Failed() {
		return
	}
	for _, n := range nodes {
		if n == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		res, err := n.Run(ctx, "tail -60 /run/daemon.log; tail -20 /run/etcd.log; dmesg | tail -30")
		c.t.Logf("node %s logs (%v):\n%s", n.Name(), err, res.Stdout)
		// Where the daemon waits, for a test that failed on a daemon
		// that stopped saying anything: each thread's kernel stack, the
		// kernel's blocked tasks (sysrq w, into dmesg), then every
		// goroutine's stack (SIGQUIT: Go prints them into daemon.log,
		// and the daemon exits; the VM stops next anyway).
		n.Run(ctx, `pid=$(cat /run/daemon.pid); for t in /proc/$pid/task/*; do echo "== $t $(cat $t/comm) $(cat $t/wchan)"; cat $t/stack; done >/run/stacks.log 2>&1; `+
			`echo w >/proc/sysrq-trigger; kill -QUIT $pid; sleep 2`)
		// The node's view of the test network: a node that could not
		// reach the others (its link, its neighbours).
		net := "ip -s link show; ip addr show; ip neigh show; ip route show"
		for file, cmd := range map[string]string{"daemon.log": "cat /run/daemon.log", "dmesg.log": "dmesg", "stacks.log": "cat /run/stacks.log", "network.log": net} {
			if res, err := n.Run(ctx, cmd); err == nil {
				path := filepath.Join(n.dir, file)
				if err := os.WriteFile(path, []byte(res.Stdout), 0o644); err == nil {
					c.t.Logf("node %s: whole %s kept in %s", n.Name(), file, path)
				}
			}
		}
		cancel()
	}
}

// peerVolume is what the test reads of `tidectl -o json volume show` on a.
type peerVolume struct {
	volumeJSON
	PeerNode string `json:"peer_node"`
	// PeerNode0 keeps leg 0 of a node without SSDs' write cache.
	PeerNode0 string `json:"peer_node0"`
}

func (c *peerCluster) volume(name string) peerVolume {
	c.t.Helper()
	var v peerVolume
	out := c.a.mustTidectl("-o json volume show " + name)
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		c.t.Fatalf("parse volume show: %v\n%s", err, out)
	}
	return v
}

// waitVolume waits until a's volume satisfies ok.
func (c *peerCluster) waitVolume(name, what string, timeout time.Duration, ok func(peerVolume) bool) peerVolume {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		v := c.volume(name)
		if ok(v) {
			return v
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("volume %s: not %s after %s: %+v, mirror %+v", name, what, timeout, v, v.Mirror)
		}
		time.Sleep(time.Second)
	}
}

// waitMirror waits until a's volume shows the mirror health wanted, idle.
func (c *peerCluster) waitMirror(name, health string, timeout time.Duration) peerVolume {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		v := c.volume(name)
		if v.Mirror != nil && v.Mirror.Health == health && v.Mirror.SyncAction == "idle" {
			return v
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("volume %s mirror %+v, want %s and idle after %s\na's daemon log:\n%s\nb's daemon log:\n%s", name, v.Mirror, health, timeout,
				c.a.sh("tail -40 /run/daemon.log").Stdout, c.b.sh("tail -20 /run/daemon.log").Stdout)
		}
		time.Sleep(time.Second)
	}
}

// TestReplicaPeerVolume checks --protect peer end to end on two VMs and
// the real kernel, driven through etcd:
//   - the leader places the replica on b, the only other node serving
//     replicas; b keeps a slice of its SSD and exports it to a alone; a
//     attaches it and creates the volume, its write cache a dm-raid raid1
//     of its SSD and b's; any other host NQN is refused by b's target;
//   - writethrough and back to writeback through the cluster: the mirror
//     is dropped, then built anew on the peer's export;
//   - fio with verify through the volume; b's VM killed under a paced
//     writer: the longest write stays under 10 s, no verify error, the
//     mirror goes on with a's leg and the layout records leg 1 out of
//     sync;
//   - b reboots: its assembly rebuilds the replica's device, its daemon
//     exports it again, a's daemon attaches it and gives the leg back,
//     and dm-raid resyncs it;
//   - a power cut of a under writes: a's boot assembly (no network)
//     starts the mirror on its own leg, its daemon attaches b's again,
//     every acknowledged block verifies;
//   - deleting the spec deletes the volume on a and drops the replica on
//     b (device and export gone).
func TestReplicaPeerVolume(t *testing.T) {
	bin, err := binaries()
	if err != nil {
		t.Fatal(err)
	}
	c := &peerCluster{t: t, dir: harness.TestDir(t), bin: bin, hub: hubAddr(t),
		aSpec:      nodeSpec{HDDs: 4, HDDSize: 128 << 20, SSDs: []int64{256 << 20}, Spares: []int64{512 << 20}},
		bSpec:      nodeSpec{HDDs: 1, HDDSize: 128 << 20, SSDs: []int64{256 << 20}},
		etcd:       "http://10.77.0.1:2389",
		daemonArgs: "--lease-ttl 4s --resync-interval 3s --leg-retry 1s",
	}
	c.a = c.boot("a", c.aSpec, "10.77.0.1", true)
	c.b = c.boot("b", c.bSpec, peerReplicaAddr, false)
	defer c.dumpLogs() // before the test's end stops the VMs
	c.a.createPool("fast")
	c.b.mustTidectl("pool create spare --origin /dev/vda --ssd /dev/vdb")
	c.startEtcd(true)
	c.startDaemon(c.a, "")
	c.startDaemon(c.b, "--replica-address "+peerReplicaAddr+" --insecure-nvme")

	// Placement: the leader puts the replica on b; a attaches it.
	c.a.mustTidectl("volume create db --size 200M --write-cache 64M --protect peer --node a --wait --timeout 2m --etcd-endpoints " + c.etcd)
	v := c.waitMirror("db", "AA", 2*time.Minute)
	if v.Protection != "peer" || v.PeerNode != "b" || v.Mirror.Copies != 2 {
		t.Fatalf("volume db: protection %q on %q, %d copies; want peer on b, 2 copies", v.Protection, v.PeerNode, v.Mirror.Copies)
	}
	if out := c.b.mustTidectl("pool show spare"); !strings.Contains(out, "Replica: 65 MiB of node a's volume db") {
		t.Errorf("b's pool show does not list the replica:\n%s", out)
	}
	if out := c.b.mustSh("dmsetup table tcr-db && cat /sys/kernel/config/nvmet/subsystems/*/attr_allow_any_host && ls /sys/kernel/config/nvmet/subsystems/*/allowed_hosts"); !strings.Contains(out, "nqn.2026-11.io.tidecache:node:a") || !strings.Contains(out, "\n0\n") {
		t.Fatalf("b's replica export: want one allowed host, a's, and any host refused:\n%s", out)
	}
	show := c.a.mustTidectl("volume show db")
	if !strings.Contains(show, "peer: mirrored on this node's SSD and on b's, over NVMe/TCP, legs AA") {
		t.Errorf("volume show does not say the write cache is mirrored on b:\n%s", show)
	}
	// The export admits a alone: another host NQN is refused by b's
	// target (tried from b itself, which has no controller of that
	// subsystem that the attempt could reuse).
	nqn := strings.TrimSpace(c.b.mustSh("ls /sys/kernel/config/nvmet/subsystems"))
	if res := c.b.sh("modprobe nvme-tcp && peerleg attach -wait 10s -nqn " + nqn + " -host nqn.2026-11.io.tidecache:node:intruder -addr " + peerReplicaAddr); res.ExitCode == 0 {
		t.Fatalf("a host the export does not allow attached it:\n%s", res.Stdout)
	}
	dev := "/dev/mapper/tc-db"
	first := fioJob(dev, "first", "randwrite", "0", "16M")
	c.a.fio(first + " --do_verify=1")

	// A mode round trip through the cluster: writethrough drains and
	// drops the mirror, writeback attaches the peer's export again and
	// builds a new one (zeroed metadata, resynced from a's leg).
	c.a.mustTidectl("volume set-mode db writethrough --wait --etcd-endpoints " + c.etcd)
	if v := c.volume("db"); v.Mode != "writethrough" || v.Mirror != nil {
		t.Fatalf("after writethrough: mode %s, mirror %+v; want no mirror", v.Mode, v.Mirror)
	}
	c.a.mustTidectl("volume set-mode db writeback --wait --etcd-endpoints " + c.etcd)
	c.waitMirror("db", "AA", 2*time.Minute)
	c.a.fio(first + " --verify_only")

	// Peer lost under a paced writer.
	second := fioJob(dev, "second", "randwrite", "64M", "8M") + " --iodepth=1 --rate_iops=300 --do_verify=1"
	killed, stall := killUnderWriter(t, c.a, c.b, "second", second, 4*time.Second)
	t.Logf("peer killed: writer done %.1fs later, longest write %.1fs", time.Since(killed).Seconds(), stall.Seconds())
	if stall > 10*time.Second {
		t.Errorf("writes stalled %.1fs when the peer died, want under 10s", stall.Seconds())
	}
	c.waitVolume("db", "leg 1 recorded out of sync, one copy", 30*time.Second, func(v peerVolume) bool {
		return v.Mirror != nil && v.Mirror.Copies == 1 && v.Mirror.Degraded && slices.Equal(v.Mirror.OutOfSync, []int{1})
	})
	c.a.fio(first + " --verify_only")

	// The peer comes back: assembly rebuilds the replica's device, the
	// daemon exports it, a's daemon attaches it and dm-raid resyncs.
	c.b = c.boot("b", c.bSpec, peerReplicaAddr, false)
	c.b.mustSh("tidecached assemble")
	if out := c.b.mustSh("dmsetup ls"); !strings.Contains(out, "tcr-db") {
		t.Fatalf("b's assembly did not rebuild the replica device:\n%s", out)
	}
	back := time.Now()
	c.startDaemon(c.b, "--replica-address "+peerReplicaAddr+" --insecure-nvme")
	c.waitMirror("db", "AA", 3*time.Minute)
	t.Logf("peer back: leg attached, given back and resynced %.1fs after b's daemon started", time.Since(back).Seconds())
	c.waitVolume("db", "back in sync, recorded", 30*time.Second, func(v peerVolume) bool {
		return v.Mirror != nil && v.Mirror.Copies == 2 && len(v.Mirror.OutOfSync) == 0
	})
	c.a.fio(first + " --verify_only")
	c.a.fio(fioJob(dev, "second", "randwrite", "64M", "8M") + " --iodepth=1 --verify_only")

	// Power cut of the owner under writes; its assembly needs no network
	// and starts on its own leg, its daemon brings b's leg back.
	third := fioJob(dev, "third", "randwrite", "128M", "16M")
	c.a.mustSh("fio " + third + " --do_verify=0 >/run/third.log 2>&1 &")
	time.Sleep(3 * time.Second)
	c.a.mustSh("killall -STOP fio; sync")
	if err := c.a.Kill(); err != nil {
		t.Fatal(err)
	}
	c.a = c.boot("a", c.aSpec, "10.77.0.1", true)
	asm := c.a.mustSh("tidecached assemble 2>&1")
	if v := c.volume("db"); v.Mirror == nil || v.Mirror.Copies != 1 {
		t.Fatalf("after the owner's power cut, assembly: want the mirror on a's leg alone, got %+v\n%s", v.Mirror, asm)
	}
	c.startEtcd(false)
	c.startDaemon(c.a, "")
	c.waitMirror("db", "AA", 3*time.Minute)
	c.a.fio(first + " --verify_only")
	c.a.fio(fioJob(dev, "second", "randwrite", "64M", "8M") + " --iodepth=1 --verify_only")

	// Delete: a's daemon flushes and removes the volume; b drops the
	// replica, device and export. (That a peer's leg alone serves every
	// block is TestReprotectPeer's last step.)
	c.a.mustTidectl("volume delete db --etcd-endpoints " + c.etcd)
	c.a.eventually(90*time.Second, "dmsetup ls | grep -c tc-db || true", "0")
	c.b.eventually(60*time.Second, "dmsetup ls | grep -c tcr-db || true; ls /sys/kernel/config/nvmet/subsystems | wc -l", "0\n0")
}

// readFromPeerLeg stops a's daemon (so that nothing repairs a's slices
// behind the test), fails a's leg of the volume's mirror by loading error
// tables under it, and verifies every fio job given: each block must read
// back from the peer's leg alone.
func (c *peerCluster) readFromPeerLeg(volume string, jobs ...string) {
	c.t.Helper()
	c.a.mustSh("kill $(cat /run/daemon.pid); while kill -0 $(cat /run/daemon.pid) 2>/dev/null; do sleep 0.2; done")
	c.a.mustSh(fmt.Sprintf("for d in tc-%[1]s-wmeta0 tc-%[1]s-wleg0; do dmsetup load $d --table \"0 $(blockdev --getsz /dev/mapper/$d) error\" && dmsetup suspend $d && dmsetup resume $d; done", volume))
	for _, job := range jobs {
		c.a.fio(job + " --verify_only")
	}
	if v := c.volume(volume); v.Mirror == nil || v.Mirror.Health != "DA" {
		c.t.Fatalf("mirror with %s's leg failed: %+v, want health DA", c.a.Name(), v.Mirror)
	}
}

// killUnderWriter runs the fio job (paced, verifying) on writer in the
// background under name (its report and log /run/<name>.json and .log),
// kills victim's VM after lead, waits for the writer to end, and returns
// when the kill came and the longest write (fioMaxWrite).
func killUnderWriter(t *testing.T, writer, victim *node, name, job string, lead time.Duration) (killed time.Time, stall time.Duration) {
	t.Helper()
	writer.mustSh(fmt.Sprintf("fio --output-format=json --output=/run/%[1]s.json %[2]s >/run/%[1]s.log 2>&1 & echo $! > /run/fio.pid", name, job))
	time.Sleep(lead)
	killed = time.Now()
	if err := victim.Kill(); err != nil {
		t.Fatal(err)
	}
	writer.mustSh("while kill -0 $(cat /run/fio.pid) 2>/dev/null; do sleep 0.5; done")
	return killed, fioMaxWrite(t, writer, "/run/"+name+".json", "/run/"+name+".log")
}

// fioMaxWrite returns the longest write of a fio JSON report, submission
// and completion together (lat_ns: a write held up in io_submit, as when
// device-mapper queues I/O, counts as much as one waiting for its
// completion), failing the test if fio reported an error.
func fioMaxWrite(t *testing.T, n *node, report, log string) time.Duration {
	t.Helper()
	var res struct {
		Jobs []struct {
			Error int `json:"error"`
			Write struct {
				LatNs struct {
					Max float64 `json:"max"`
				} `json:"lat_ns"`
			} `json:"write"`
		} `json:"jobs"`
	}
	out := n.mustSh("cat " + report)
	if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &res); err != nil || len(res.Jobs) != 1 {
		t.Fatalf("fio output: %v\n%s\n%s", err, out, n.mustSh("cat "+log))
	}
	if res.Jobs[0].Error != 0 {
		t.Fatalf("fio failed (error %d):\n%s", res.Jobs[0].Error, n.mustSh("cat "+log))
	}
	return time.Duration(res.Jobs[0].Write.LatNs.Max)
}
