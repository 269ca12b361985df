// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tidecache/tidecache/tests/testbed"
	"github.com/tidecache/tidecache/tests/vm/harness"
)

// The replicated run (`go run ./tests/bench -replica`, part of make
// bench): what mirroring the write cache to peer nodes costs. Three VMs
// share a virtual Ethernet segment (the harness's hub over the host's
// loopback): the bench VM, with the emulated HDD RAID10, its SSD and the
// SSD-alone reference, and two peer VMs with one SSD of the same kind
// each. All run tidecached against an etcd on the bench VM, as a
// three-node cluster would. tc-wbp's write cache is mirrored onto a
// replica on the peer, which exports it over NVMe/TCP (dm-raid raid1: a
// write is acknowledged once both legs have it); tc-wb2p is carved from a
// pool without SSDs on the bench VM, as on a node without SSDs, so both
// legs of its write cache are remote, one on each peer. tc-wb is the same
// volume with --protect none. All three share the RAID10 and are measured
// in the same run, interleaved: the ratios to tc-wb are the cost of each
// remote copy. The run ends with the rebuild of a whole leg, the resync
// after a short network outage of the peer, and planned moves of a
// volume on an origin the second peer exports, its write cache dirty.

// Addresses of the replicated run's network.
const (
	benchAddr   = "10.78.0.1"
	peerAddr    = "10.78.0.2"
	peer2Addr   = "10.78.0.3"
	replicaEtcd = "http://" + benchAddr + ":2389"

	// A peer keeps a leg of tc-wb2p and tc-wbp's replica or moved's
	// replica: two write caches and a small one.
	peerSSDBytes    = 2*cacheBytes + 256<<20
	peerOriginBytes = 256 << 20
	// sharedBytes is the origin the second peer exports for the moves;
	// movedCacheBytes the write cache of the volume that moves.
	sharedBytes     = 512 << 20
	movedCacheBytes = 64 << 20
	// moves is how many planned moves the run times, back and forth.
	moves = 4
)

// The replicated run's goals (issue: replicated write cache): MariaDB TPS
// on the replicated volume at least 0.7× the local one, and a 4k QD1
// write at most twice as long.
const (
	targetReplicaTPS     = 0.7
	targetReplicaLatency = 2.0
)

// replicaFigures are the replicated run's own measurements: the rebuild of
// a whole leg, the resync after an outage and the moves' handovers.
type replicaFigures struct {
	rtt            string        // ping's round-trip summary between the VMs
	rebuild        time.Duration // a new mirror's full resync
	rebuildBytes   int64         // what it copied: the write cache
	outage         time.Duration // how long the peer's link was down
	outageWritten  int64         // bytes written to the volume meanwhile
	resync         time.Duration // from the link's return to both legs in sync
	outageMaxWrite time.Duration // the longest write while the peer went away
	moves          []moveFigure  // planned moves of a volume, dirty
}

// moveFigure is one planned move: the handover `tidectl volume move
// --wait` reports and the dirty blocks the new owner kept.
type moveFigure struct {
	from, to string
	handover time.Duration
	dirty    uint64
}

// freeHub returns a loopback address nothing listens on, for the hub of
// the two VMs.
func freeHub() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// peerVM is one of the replicated run's two other nodes.
type peerVM struct {
	name string // its node name, and its VM's
	addr string // its address on the VMs' network
	// export is the device it exports to the other nodes as "shared"
	// (tidecached run --export), "" for none.
	export string
	vm     *harness.VM
	bin    string // the bench VM's binaries, seen through the host root
}

// run runs a shell command on the peer; a failure is an error carrying
// its output.
func (p *peerVM) run(ctx context.Context, cmd string) (string, error) {
	res, err := p.vm.Run(ctx, "export PATH="+p.bin+":$PATH; "+cmd)
	if err != nil {
		return res.Stdout, fmt.Errorf("%s: %q: %w", p.name, cmd, err)
	}
	if res.ExitCode != 0 {
		return res.Stdout, fmt.Errorf("%s: %q: exit %d: %s%s", p.name, cmd, res.ExitCode, res.Stdout, res.Stderr)
	}
	return res.Stdout, nil
}

// bootPeers boots the two peer VMs on the bench VM's network, each with
// an SSD image like the bench VM's (zero-filled, write-through) and a
// small origin its pool needs, and makes that pool; the second also gets
// the disk it exports for the moves.
func bootPeers(ctx context.Context, bed *testbed.Bed, hub string) (_ []*peerVM, err error) {
	var peers []*peerVM
	defer func() {
		if err != nil {
			for _, p := range peers {
				p.vm.Kill()
			}
		}
	}()
	for _, p := range []*peerVM{{name: "peer", addr: peerAddr}, {name: "peer2", addr: peer2Addr, export: "/dev/vdc"}} {
		if err := bootPeer(ctx, bed, hub, p); err != nil {
			return nil, err
		}
		peers = append(peers, p)
	}
	return peers, nil
}

// bootPeer boots peer p and makes its pool.
func bootPeer(ctx context.Context, bed *testbed.Bed, hub string, p *peerVM) error {
	dir := filepath.Join(bed.Dir(), p.name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	ssd := filepath.Join(dir, "ssd.img")
	origin := filepath.Join(dir, "origin.img")
	shared := filepath.Join(dir, "shared.img")
	for _, img := range []string{ssd, origin, shared} {
		if err := os.Remove(img); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	if err := writeZeroImage(ssd, peerSSDBytes); err != nil {
		return err
	}
	disks := []harness.Disk{{Path: ssd}, {Path: origin, Size: peerOriginBytes}}
	if p.export != "" {
		disks = append(disks, harness.Disk{Path: shared, Size: sharedBytes})
	}
	v, err := harness.Boot(ctx, harness.Config{
		Name:      p.name,
		Disks:     disks,
		CPUs:      1,
		MemoryMiB: 768,
		Network:   &harness.Network{Addr: p.addr + "/24", Connect: hub},
		Dir:       filepath.Join(dir, "vm"),
	})
	if err != nil {
		return fmt.Errorf("boot the %s VM: %w", p.name, err)
	}
	p.vm, p.bin = v, filepath.Join(bed.Dir(), "bin")
	if _, err := p.run(ctx, "echo 'write through' > /sys/block/vda/queue/write_cache && tidectl pool create spare --origin /dev/vdb --ssd /dev/vda"); err != nil {
		v.Kill()
		return err
	}
	return nil
}

// writeZeroImage creates a fully allocated image of size bytes, as the
// test bed makes its SSDs.
func writeZeroImage(path string, size int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	buf := make([]byte, 1<<20)
	for left := size; left > 0; left -= int64(len(buf)) {
		if _, err := f.Write(buf[:min(left, int64(len(buf)))]); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

// startCluster starts etcd and tidecached on the bench VM and tidecached
// on the peers. The daemons retry a failed peer leg every second (the
// default backs off from 30 s), so that the resync figure is dm-raid's
// and not the retry timer's.
func startCluster(ctx context.Context, bed *testbed.Bed, peers []*peerVM) error {
	bin := filepath.Join(bed.Dir(), "bin")
	daemon := bin + "/tidecached run --listen 127.0.0.1:9540 --leg-retry 1s --etcd-endpoints " + replicaEtcd
	if _, err := bed.Run(ctx, "sh", "-c", "mkdir -p /run/etcd && "+bin+"/tidecached etcd --insecure-etcd --client-url "+replicaEtcd+
		" --data-dir /run/etcd/data >/run/etcd.log 2>&1 &"); err != nil {
		return fmt.Errorf("start etcd: %w", err)
	}
	// The bench VM keeps the replica of the volume the moves hand to the
	// peer: it serves it over NVMe/TCP too.
	if _, err := bed.Run(ctx, "sh", "-c", daemon+" --node bench --replica-address "+benchAddr+" --insecure-nvme >/run/daemon.log 2>&1 &"); err != nil {
		return fmt.Errorf("start the bench VM's daemon: %w", err)
	}
	for _, p := range peers {
		args := " --node " + p.name + " --replica-address " + p.addr + " --insecure-nvme"
		if p.export != "" {
			args += " --export shared=" + p.export
		}
		if _, err := p.run(ctx, daemon+args+" >/run/daemon.log 2>&1 &"); err != nil {
			return err
		}
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var view struct {
			Nodes []struct {
				Name string `json:"name"`
			} `json:"nodes"`
		}
		out, err := bed.Run(ctx, "tidectl", "-o", "json", "--etcd-endpoints", replicaEtcd, "node", "list")
		if err == nil {
			err = json.Unmarshal([]byte(out), &view)
		}
		if err == nil && len(view.Nodes) == 1+len(peers) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the %d daemons did not register within 2 minutes: %v\n%s", 1+len(peers), err, out)
		}
		time.Sleep(time.Second)
	}
}

// setUpReplica builds the RAID10, the partitions, the cluster and the
// three volumes, and returns the systems in report order: raw SSD, bare
// RAID10, tc-wb (local), tc-wbp (mirrored to the peer) and tc-wb2p (both
// legs on the peers).
func setUpReplica(ctx context.Context, bed *testbed.Bed, peers []*peerVM) ([]*system, error) {
	p := bed.Progress()
	p.Step("building md RAID10 over %s…", strings.Join(bed.HDDs(), " "))
	args := append([]string{"mdadm", "--create", raidDev, "--run", "--metadata=1.2", "--homehost=any",
		"--name=bench", "--level=10", "--raid-devices=4", "--chunk=512K", "--layout=n2", "--assume-clean"}, bed.HDDs()...)
	if _, err := bed.Run(ctx, args...); err != nil {
		return nil, err
	}
	const volMiB, cacheMiB = volumeBytes >> 20, cacheBytes >> 20
	hdd, err := partitions(ctx, bed, raidDev, volMiB, 2*volMiB+64, volMiB+64)
	if err != nil {
		return nil, err
	}
	// The pool's SSD: tc-wb's write cache, tc-wbp's local leg, and the
	// write cache of the volume the moves hand over.
	ssd, err := partitions(ctx, bed, bed.SSD(), 2*cacheMiB+movedCacheBytes>>20+128)
	if err != nil {
		return nil, err
	}
	if _, err := bed.Run(ctx, "tidectl", "pool", "create", "bench", "--ssd", ssd[0], "--origin", hdd[1]); err != nil {
		return nil, fmt.Errorf("tidecache pool: %w", err)
	}
	// A pool without SSDs on the same RAID10: its volumes cache on the
	// peers' SSDs alone, as on a node without SSDs.
	if _, err := bed.Run(ctx, "tidectl", "pool", "create", "remote", "--origin", hdd[2]); err != nil {
		return nil, fmt.Errorf("tidecache pool without SSDs: %w", err)
	}
	p.Step("tidecache cluster: etcd and a daemon on the bench VM, a daemon on each peer…")
	if err := startCluster(ctx, bed, peers); err != nil {
		return nil, err
	}
	systems := []*system{
		{key: keySSD, label: "SSD alone (the physical limit)", dev: bed.RawSSD(), fioOnly: true,
			setup: "the second SSD image, whole, no partition table"},
		{key: keyRAID10, label: "bare HDD RAID10 (the floor)", dev: hdd[0], fioOnly: true,
			setup: fmt.Sprintf("`%s`: a partition of the md RAID10", hdd[0])},
	}
	size, wc := mib(volumeBytes), mib(cacheBytes)
	for _, v := range []struct {
		name, label string
		create      []string
	}{
		{keyWB, "tidecache write-back, the write cache on this node's SSD alone",
			[]string{"--pool", "bench", "--protect", "none"}},
		{"tc-wbp", "tidecache write-back, the write cache mirrored to the peer's SSD over NVMe/TCP",
			[]string{"--pool", "bench", "--protect", "peer", "--replica-node", "peer"}},
		{"tc-wb2p", "tidecache write-back from a pool without SSDs: the write cache mirrored on the two peers' SSDs, both legs over NVMe/TCP",
			[]string{"--pool", "remote", "--protect", "peer"}},
	} {
		create := append([]string{"--size", size, "--write-cache", wc}, v.create...)
		create = append(create, "--node", "bench")
		p.Step("volume %s: tidectl volume create %s %s…", v.name, v.name, strings.Join(create, " "))
		argv := append([]string{"tidectl", "--etcd-endpoints", replicaEtcd, "volume", "create", v.name}, create...)
		if _, err := bed.Run(ctx, append(argv, "--wait", "--timeout", "3m")...); err != nil {
			return nil, fmt.Errorf("tidecache volume %s: %w", v.name, err)
		}
		name := v.name
		vol, err := bed.Volume(ctx, name)
		if err != nil {
			return nil, err
		}
		if vol.State != "active" {
			return nil, fmt.Errorf("tidecache volume %s: state %q after create: %s", name, vol.State, vol.Error)
		}
		systems = append(systems, &system{key: name, kind: tidecache, label: v.label, dev: vol.Device,
			setup: "`tidectl volume create " + name + " " + strings.Join(create, " ") + " --etcd-endpoints …`",
			flush: func(ctx context.Context) error {
				_, err := bed.Flush(ctx, name)
				return err
			}})
	}
	for _, v := range []struct{ name, legs string }{{"tc-wbp", "bench+peer"}, {"tc-wb2p", "peer+peer2"}} {
		p.Step("waiting for %s's mirror to be in sync…", v.name)
		if _, err := waitMirrorInSync(ctx, bed, v.name, 5*time.Minute); err != nil {
			return nil, err
		}
		vol, err := bed.Volume(ctx, v.name)
		if err != nil {
			return nil, err
		}
		legs := "bench+" + vol.PeerNode
		if vol.PeerNode0 != "" {
			legs = strings.Join(slices.Sorted(slices.Values([]string{vol.PeerNode0, vol.PeerNode})), "+")
		}
		if legs != v.legs {
			return nil, fmt.Errorf("volume %s: write cache legs on %s, want %s", v.name, legs, v.legs)
		}
	}
	return systems, nil
}

// waitMirrorInSync waits until the volume's mirror has both legs in sync
// and no resync running, and returns how long that took.
func waitMirrorInSync(ctx context.Context, bed *testbed.Bed, name string, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	for {
		v, err := bed.Volume(ctx, name)
		if err != nil {
			return 0, err
		}
		if m := v.Mirror; m != nil && m.Copies == 2 && m.SyncAction == "idle" && m.Health == "AA" {
			return time.Since(start), nil
		}
		if time.Since(start) > timeout {
			return 0, fmt.Errorf("volume %s: mirror not in sync after %v: %+v", name, timeout, v.Mirror)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// measureResync measures, on tc-wbp after the other benchmarks:
//   - the rebuild of a whole leg: a round trip through writethrough drops
//     the mirror, and writeback builds a new one, which dm-raid resyncs in
//     full from the local leg;
//   - an outage of the peer's link under a writer, then the resync of the
//     regions written meanwhile once the link is back.
func measureResync(ctx context.Context, bed *testbed.Bed, peer *peerVM) (*replicaFigures, error) {
	p := bed.Progress()
	f := &replicaFigures{rebuildBytes: cacheBytes}
	// The network's own round trip, what every mirrored write pays at
	// least once: the yardstick for the latency ratios.
	// busybox's ping: the test packages install busybox, not iputils.
	out, err := bed.Run(ctx, "busybox", "ping", "-q", "-c", "20", "-i", "0.2", peerAddr)
	if err != nil {
		return nil, fmt.Errorf("ping the peer: %w", err)
	}
	if f.rtt = lastLine(out); !strings.HasPrefix(f.rtt, "round-trip") {
		return nil, fmt.Errorf("ping the peer: no round-trip summary in %q", out)
	}
	p.Step("network round trip to the peer: %s", f.rtt)
	cl := func(args ...string) error {
		_, err := bed.Run(ctx, append([]string{"tidectl", "--etcd-endpoints", replicaEtcd}, args...)...)
		return err
	}
	p.Step("rebuild: tc-wbp to writethrough and back, then a full resync of the new mirror…")
	if err := cl("volume", "set-mode", "tc-wbp", "writethrough", "--wait", "--timeout", "5m"); err != nil {
		return nil, err
	}
	if err := cl("volume", "set-mode", "tc-wbp", "writeback", "--wait", "--timeout", "5m"); err != nil {
		return nil, err
	}
	if f.rebuild, err = waitMirrorInSync(ctx, bed, "tc-wbp", 10*time.Minute); err != nil {
		return nil, err
	}
	p.Step("  %s rebuilt in %v", testbed.FormatBytes(f.rebuildBytes), f.rebuild.Round(100*time.Millisecond))

	// The outage: the peer's link goes down under a paced writer, for
	// less than the initiator's controller-loss time, so the owner's
	// controller reconnects by itself when it is back.
	const outage = 8 * time.Second
	p.Step("outage: the peer's link down for %v under 4k random writes, then back…", outage)
	vol, err := bed.Volume(ctx, "tc-wbp")
	if err != nil {
		return nil, err
	}
	dev := vol.Device
	fio := "fio --name=outage --filename=" + dev + " --rw=randwrite --bs=4k --direct=1 --ioengine=psync --iodepth=1" +
		" --offset=" + fmt.Sprint(writeOffset) + " --size=" + fmt.Sprint(writeSet) + " --rate_iops=200 --time_based --runtime=20" +
		" --output-format=json --output=/run/outage.json"
	if _, err := bed.Run(ctx, "sh", "-c", fio+" >/run/outage.log 2>&1 & echo $! >/run/outage.pid"); err != nil {
		return nil, err
	}
	time.Sleep(3 * time.Second)
	if _, err := peer.run(ctx, "ip link set eth0 down"); err != nil {
		return nil, err
	}
	down := time.Now()
	time.Sleep(outage)
	if _, err := peer.run(ctx, "ip link set eth0 up"); err != nil {
		return nil, err
	}
	back := time.Now()
	f.outage = back.Sub(down)
	if f.resync, err = waitMirrorInSync(ctx, bed, "tc-wbp", 5*time.Minute); err != nil {
		return nil, err
	}
	if _, err := bed.Run(ctx, "sh", "-c", "while kill -0 $(cat /run/outage.pid) 2>/dev/null; do sleep 0.5; done"); err != nil {
		return nil, err
	}
	if out, err = bed.Run(ctx, "cat", "/run/outage.json"); err != nil {
		return nil, err
	}
	w, err := parseOutageWriter(out)
	if err != nil {
		log, _ := bed.Run(ctx, "cat", "/run/outage.log")
		return nil, fmt.Errorf("outage writer: %w\n%s", err, log)
	}
	f.outageMaxWrite = w.maxLatency
	f.outageWritten = int64(float64(w.bytes) / w.runtime.Seconds() * f.outage.Seconds())
	p.Step("  longest write %v; link back, legs in sync %v later", f.outageMaxWrite.Round(100*time.Millisecond), f.resync.Round(100*time.Millisecond))
	return f, nil
}

// movedVolume is the volume the moves hand back and forth: on the
// origin peer2 exports to the bench VM and the peer, its write cache
// mirrored between them.
const movedVolume = "moved"

// measureMoves times planned moves of movedVolume between the bench VM
// and the peer: before each one the owner writes 16 MiB of 4k random
// writes (under the write cache's watermark, so they stay dirty); then
// `tidectl volume move --wait` hands the volume to its replica's node and
// reports the handover (from the owner's stop to the new owner running
// it, the time I/O waits) and the dirty blocks the new owner kept. The
// next move waits for the mirror to be whole again, as moves must.
func measureMoves(ctx context.Context, bed *testbed.Bed, peers []*peerVM) ([]moveFigure, error) {
	p := bed.Progress()
	p.Step("moves: volume %s on peer2's export, cached on the bench VM, replica on the peer…", movedVolume)
	// Each node runs its commands in its own VM; a command that outlives
	// its bound (tidectl's --timeout bounds the time without a new
	// status, not the command) fails the run with the daemons' last
	// words.
	on := map[string]func(cmd string) (string, error){
		"bench": func(cmd string) (string, error) { return bed.Run(ctx, "sh", "-c", cmd) },
		"peer":  func(cmd string) (string, error) { return peers[0].run(ctx, cmd) },
	}
	logs := func(err error) error {
		for _, n := range []string{"bench", "peer"} {
			tail, _ := on[n]("tail -n 20 /run/daemon.log")
			err = fmt.Errorf("%w\n%s's daemon log:\n%s", err, n, tail)
		}
		return err
	}
	tidectl := filepath.Join(bed.Dir(), "bin", "tidectl") + " --etcd-endpoints " + replicaEtcd
	if _, err := on["bench"](fmt.Sprintf("timeout -k 10 300 %s volume adopt %s --shared-origin peer2/shared --node bench --pool bench --replica-node peer --write-cache %s --wait --timeout 3m",
		tidectl, movedVolume, mib(movedCacheBytes))); err != nil {
		return nil, logs(fmt.Errorf("volume %s: %w", movedVolume, err))
	}
	owner, other := "bench", "peer"
	var out []moveFigure
	for i := range moves {
		if err := waitProtected(ctx, bed, owner, other); err != nil {
			return nil, logs(err)
		}
		fio := "timeout -k 10 120 fio --name=dirty --filename=/dev/mapper/tc-" + movedVolume + " --rw=randwrite --bs=4k --direct=1 --ioengine=libaio" +
			" --iodepth=16 --size=32M --io_size=16M --randrepeat=0 --output=/dev/null"
		if _, err := on[owner](fio); err != nil {
			return nil, logs(fmt.Errorf("move %d: dirty the write cache on %s: %w", i+1, owner, err))
		}
		res, err := on["bench"](fmt.Sprintf("timeout -k 10 420 %s volume move %s --to %s --wait --timeout 5m", tidectl, movedVolume, other))
		if err != nil {
			return nil, logs(fmt.Errorf("move %d, %s → %s: %w", i+1, owner, other, err))
		}
		m, err := parseMove(res)
		if err != nil {
			return nil, fmt.Errorf("move %d, %s → %s: %w", i+1, owner, other, err)
		}
		m.from, m.to = owner, other
		p.Step("  %s → %s: handed over in %.1f s, %d dirty blocks kept", owner, other, m.handover.Seconds(), m.dirty)
		out = append(out, m)
		owner, other = other, owner
	}
	return out, nil
}

// handedOver is the line `tidectl volume move --wait` ends with.
var handedOver = regexp.MustCompile(`handed over in ([0-9.]+) s .*; ([0-9]+) dirty blocks kept`)

// parseMove reads the handover time and the dirty blocks kept from
// `tidectl volume move --wait`'s output; a move that kept no dirty block
// proves nothing about a warm cache and is an error.
func parseMove(out string) (moveFigure, error) {
	m := handedOver.FindStringSubmatch(out)
	if m == nil {
		return moveFigure{}, fmt.Errorf("no handover time in %q", out)
	}
	secs, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return moveFigure{}, err
	}
	dirty, err := strconv.ParseUint(m[2], 10, 64)
	if err != nil {
		return moveFigure{}, err
	}
	if dirty == 0 {
		return moveFigure{}, fmt.Errorf("the new owner kept no dirty block: %q", out)
	}
	return moveFigure{handover: time.Duration(secs * float64(time.Second)), dirty: dirty}, nil
}

// waitProtected waits until movedVolume runs on owner with its write
// cache mirrored on peer, both legs in sync.
func waitProtected(ctx context.Context, bed *testbed.Bed, owner, peer string) error {
	deadline := time.Now().Add(5 * time.Minute)
	for {
		out, err := bed.Run(ctx, "tidectl", "-o", "json", "--etcd-endpoints", replicaEtcd, "volume", "show", movedVolume)
		if err != nil {
			return err
		}
		var v testbed.Volume
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			return fmt.Errorf("volume show %s: %w", movedVolume, err)
		}
		if v.Node == owner && v.PeerNode == peer && v.Mirror != nil && v.Mirror.Health == "AA" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("volume %s not running on %s mirrored on %s after 5 minutes: node %q, replica %q, mirror %+v",
				movedVolume, owner, peer, v.Node, v.PeerNode, v.Mirror)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// lastLine returns the last non-empty line of out, trimmed.
func lastLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// outageWriter is what the outage's fio writer reports.
type outageWriter struct {
	bytes      int64
	runtime    time.Duration
	maxLatency time.Duration
}

// parseOutageWriter reads fio's JSON report of one write job; a job that
// ended in an error (a write the volume failed) is an error.
func parseOutageWriter(out string) (outageWriter, error) {
	var res struct {
		Jobs []struct {
			Error int `json:"error"`
			Write struct {
				IOBytes int64 `json:"io_bytes"`
				Runtime int64 `json:"runtime"` // ms
				LatNs   struct {
					Max float64 `json:"max"`
				} `json:"lat_ns"`
			} `json:"write"`
		} `json:"jobs"`
	}
	i := strings.Index(out, "{")
	if i < 0 {
		return outageWriter{}, errors.New("no JSON in fio's output")
	}
	if err := json.Unmarshal([]byte(out[i:]), &res); err != nil {
		return outageWriter{}, err
	}
	if len(res.Jobs) != 1 {
		return outageWriter{}, fmt.Errorf("%d jobs, want 1", len(res.Jobs))
	}
	j := res.Jobs[0]
	if j.Error != 0 {
		return outageWriter{}, fmt.Errorf("fio job failed with error %d: a write to the volume failed", j.Error)
	}
	if j.Write.Runtime <= 0 {
		return outageWriter{}, errors.New("the writer wrote nothing")
	}
	return outageWriter{bytes: j.Write.IOBytes, runtime: time.Duration(j.Write.Runtime) * time.Millisecond,
		maxLatency: time.Duration(j.Write.LatNs.Max)}, nil
}

// writeMoves writes the planned moves' section: each move's handover and
// the dirty blocks kept, and the handovers' median and range.
func writeMoves(b *strings.Builder, moves []moveFigure) error {
	fmt.Fprintf(b, "## Planned moves, the write cache warm\n\n"+
		"`tidectl volume move %s --to NODE --wait`, %d times back and forth between the bench VM and the peer: %s caches\n"+
		"peer2's export (`volume adopt %s --shared-origin peer2/shared --write-cache %s --replica-node peer`), and\n"+
		"before each move its owner writes 16 MiB of 4k random writes that stay dirty in the write cache. The\n"+
		"handover is what `--wait` reports: from the owner's stop (I/O waits from here) to the new owner running the\n"+
		"volume on its replica leg, nothing written back to the origin.\n\n",
		movedVolume, len(moves), movedVolume, movedVolume, mib(movedCacheBytes))
	t := testbed.Table{Header: []string{"move", "handover", "dirty blocks kept"}}
	var secs []float64
	for _, m := range moves {
		t.Add(m.from+" → "+m.to, fmt.Sprintf("%.1f s", m.handover.Seconds()), fmt.Sprint(m.dirty))
		secs = append(secs, m.handover.Seconds())
	}
	if err := t.WriteMarkdown(b); err != nil {
		return err
	}
	slices.Sort(secs)
	fmt.Fprintf(b, "\nHandover: median %.1f s (%.1f–%.1f s).\n\n", median(secs), secs[0], secs[len(secs)-1])
	return nil
}

// writeReplica writes the replicated run's report.
func (r *report) writeReplica(b *strings.Builder) error {
	pf := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	cmd := "make bench"
	mode := "the full run"
	if r.opts.quick {
		cmd, mode = "make bench QUICK=1", "the short profile (`-quick`)"
	}
	pf("# Benchmarks: the write cache mirrored to peer nodes, against the same cache unmirrored\n\n")
	pf("Generated by `%s` (`go run ./tests/bench -replica`) on %s, %s; the run took %v. Do not edit by\n"+
		"hand: run it again.\n\n", cmd, r.date.UTC().Format("2006-01-02 15:04 MST"), mode, r.elapsed.Round(time.Second))
	pf("> **Read the ratios, not the absolute numbers.** The three VMs run under TCG (software CPU emulation) on\n" +
		"> one 2-core host, and their network is a virtual hub over the host's loopback: the NVMe/TCP stack's\n" +
		"> CPU cost on both sides weighs far more than on real servers, and the peers' CPU is taken from the\n" +
		"> same two cores. tc-wb, tc-wbp and tc-wb2p were measured in the same run, interleaved in time.\n\n")

	pf("## Set-up\n\n")
	pf("- **bench VM** (%d MiB): the emulated HDD RAID10 (%s), its SSD, the SSD-alone reference, etcd and\n"+
		"  `tidecached run --node bench --replica-address %s --insecure-nvme` (it keeps the moved volume's replica\n"+
		"  while the peer runs it).\n", r.cfg.MemoryMiB, r.cfg.HDD, benchAddr)
	pf("- **bench VM**'s second pool, `remote`: a partition of the same RAID10 and no SSD (`tidectl pool create remote\n" +
		"  --origin …`): a volume of it caches as a node without SSDs does, both legs of its write cache on peers.\n")
	pf("- **peer VMs** `peer` and `peer2` (1 CPU, 768 MiB each): one SSD image of the same kind each (%s,\n"+
		"  write-through), a pool on it, `tidecached run --node NAME --replica-address ADDR --insecure-nvme`; peer keeps\n"+
		"  tc-wbp's replica and leg of tc-wb2p, peer2 the other leg of tc-wb2p, all exported over NVMe/TCP. peer2 also\n"+
		"  exports a %s disk (`--export shared=…`), the origin of the volume the moves hand between the bench VM and peer.\n",
		testbed.FormatBytes(peerSSDBytes), testbed.FormatBytes(sharedBytes))
	pf("- Kernel %s, %s, %s; host %s.\n\n", r.kernel, r.fio, r.qemu, r.host)
	t := testbed.Table{Header: []string{"system", "what", "set-up"}}
	for _, s := range r.systems {
		t.Add(s.key, s.label, s.setup)
	}
	if err := t.WriteMarkdown(b); err != nil {
		return err
	}
	pf("\n")

	pf("## Goals\n\n")
	t = testbed.Table{Header: []string{"goal", "system", "× tc-wb", "verdict"}}
	for _, k := range []string{"tc-wbp", "tc-wb2p"} {
		if r.db != nil && r.db[keyWB] != nil && r.db[k] != nil {
			ratio := r.db[k].ratio(r.db[keyWB])
			t.Add(fmt.Sprintf("MariaDB oltp_read_write TPS ≥ %.1f× local", targetReplicaTPS), k, r.db[k].ratioCell(r.db[keyWB]),
				verdict(ratio >= targetReplicaTPS))
		}
		if f := r.fuaAt(1); f != nil && f.has(keyWB) && f.has(k) {
			lat := pairedRatios(f.dsync[k].Slices, f.dsync[keyWB].Slices, meanLatency)
			t.Add(fmt.Sprintf("4k QD1 O_DSYNC write latency ≤ %.0f× local", targetReplicaLatency), k, ratiosCell(lat),
				verdict(median(lat) <= targetReplicaLatency))
		}
		if r.hasFio() {
			w := "rw4k-qd1"
			if _, ok := r.results[w][k]; ok {
				lat := pairedRatios(r.results[w][k].Slices, r.results[w][keyWB].Slices, meanLatency)
				t.Add(fmt.Sprintf("4k QD1 plain write latency ≤ %.0f× local", targetReplicaLatency), k, ratiosCell(lat),
					verdict(median(lat) <= targetReplicaLatency))
			}
		}
	}
	if err := t.WriteMarkdown(b); err != nil {
		return err
	}
	pf("\nLatency ratios are per-slice mean latencies of the system over tc-wb (lower is better); the TPS ratio\n" +
		"is the median of per-round ratios. The goals were set for tc-wbp (issue: replicated write cache);\n" +
		"tc-wb2p is held to the same ones. Every mirrored write, and every metadata commit, crosses the network to\n" +
		"a peer and back before it is acknowledged (on tc-wb2p, to both peers, in parallel): compare the round trip under \"Rebuild and resync\" with\n" +
		"tc-wb's mean write latency. Here that network is two emulated NICs and a relay on the host, sharing two\n" +
		"cores with both VMs; on servers it is a few tens of microseconds. The one-VM measurement over loopback\n" +
		"(docs/benchmarks-mirror.md) separates the NVMe/TCP stack's own cost from the network's.\n\n")

	if f := r.replica; f != nil {
		pf("## Rebuild and resync\n\n")
		t = testbed.Table{Header: []string{"what", "figure"}}
		t.Add("network round trip between the VMs (ping, 20 × 56 bytes)", "`"+f.rtt+"`")
		t.Add("rebuild of a whole leg (new mirror, full resync over NVMe/TCP)",
			fmt.Sprintf("%s in %.1f s: %.1f MiB/s", testbed.FormatBytes(f.rebuildBytes), f.rebuild.Seconds(),
				float64(f.rebuildBytes)/(1<<20)/f.rebuild.Seconds()))
		t.Add("peer's link down under a 200 IOPS 4k writer", fmt.Sprintf("%.1f s, about %s written meanwhile", f.outage.Seconds(),
			testbed.FormatBytes(f.outageWritten)))
		t.Add("longest write while the peer went away (the leg fails after NVMe/TCP's timeouts)",
			fmt.Sprintf("%.1f s", f.outageMaxWrite.Seconds()))
		t.Add("link back → both legs in sync (reconnect, the daemon gives the leg back, bitmap resync)",
			fmt.Sprintf("%.1f s", f.resync.Seconds()))
		if err := t.WriteMarkdown(b); err != nil {
			return err
		}
		pf("\nThe daemons ran with `--leg-retry 1s` (the default retries a failed leg after 30 s), so the last\n" +
			"figure is the reconnection and dm-raid's resync, not the retry timer. The mirror's table sets\n" +
			"`min_recovery_rate` to 64 MiB/s (docs/architecture.md), so a resync under load is not held to md's\n" +
			"1 MB/s default.\n\n")
	}
	if f := r.replica; f != nil && len(f.moves) > 0 {
		if err := writeMoves(b, f.moves); err != nil {
			return err
		}
	}

	if r.db != nil {
		pf("## MariaDB + sysbench oltp_read_write\n\n")
		t := testbed.Table{Header: []string{"system", "TPS per round", "TPS", "p95 latency", "× tc-wb"}}
		for _, k := range []string{keyWB, "tc-wbp", "tc-wb2p"} {
			d := r.db[k]
			if d == nil {
				continue
			}
			var rounds []string
			for _, x := range d.runs {
				rounds = append(rounds, fmt.Sprintf("%.1f", x.TPS))
			}
			t.Add(k, strings.Join(rounds, ", "), fmt.Sprintf("%.1f", d.tps()), testbed.FormatLatency(d.p95()), d.ratioCell(r.db[keyWB]))
		}
		if err := t.WriteMarkdown(b); err != nil {
			return err
		}
		pf("\n")
	}
	for _, f := range r.fua {
		pf("## O_DSYNC 4k random write QD%d\n\n`%s`; every write is durable when acknowledged, so on tc-wbp\n"+
			"and tc-wb2p it waits for the write and a metadata commit on both legs.\n\n", f.qd, f.job.Describe())
		t := testbed.Table{Header: []string{"system", "IOPS", "mean latency", "p99 latency", "latency × tc-wb"}}
		for _, k := range f.systems {
			st := f.dsync[k].Merged.Total
			cell := "-"
			if f.has(keyWB) && k != keySSD {
				cell = ratiosCell(pairedRatios(f.dsync[k].Slices, f.dsync[keyWB].Slices, meanLatency))
			}
			t.Add(k, testbed.FormatIOPS(st.IOPS), testbed.FormatLatency(st.Mean), testbed.FormatLatency(st.P99()), cell)
		}
		if err := t.WriteMarkdown(b); err != nil {
			return err
		}
		pf("\n")
	}
	if !r.hasFio() {
		return nil
	}
	pf("## fio results per workload\n\n")
	for _, w := range r.workloads {
		pf("### %s\n\n`%s`\n\n", w.label, w.job.Describe())
		t := testbed.Table{Header: []string{"system", "IOPS", "MB/s", "mean", "p99", "× SSD alone", "× tc-wb"}}
		for _, s := range r.systems {
			st := r.stats(w.key, s.key)
			t.Add(s.key, testbed.FormatIOPS(st.IOPS), fmt.Sprintf("%.1f", st.BytesPerSec/1e6),
				testbed.FormatLatency(st.Mean), testbed.FormatLatency(st.P99()),
				r.ratioCell(w.key, s.key, keySSD), r.ratioCell(w.key, s.key, keyWB))
		}
		if err := t.WriteMarkdown(b); err != nil {
			return err
		}
		pf("\n")
	}
	return nil
}
