//go:build vm

package vm_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidecache/tidecache/tests/vm/harness"
)

// The peer leg test's names: the export of node b's disk, which only node
// a may attach.
const (
	peerNQN     = "nqn.2014-08.io.tidecache:replica:peerleg-test"
	ownerNQN    = "nqn.2014-08.io.tidecache:node:a"
	intruderNQN = "nqn.2014-08.io.tidecache:node:intruder"
	peerAddr    = "10.77.0.2"
	peerUUID    = "6f1d2c3b-0a9e-4f8d-8c7b-5a4e3d2c1b0a"
	legSectors  = 196608 // 96 MiB data per leg, after a 1 MiB metadata slice
)

// bootPair boots the mirror's owner a (10.77.0.1, one local SSD image) and
// its peer b (10.77.0.2, one SSD image to export) on one network.
func bootPair(t *testing.T, dir, bin, hub string) (a, b *node) {
	t.Helper()
	boot := func(name, addr string, listen bool) *node {
		netw := &harness.Network{Addr: addr + "/24"}
		if listen {
			netw.Listen = hub
		} else {
			netw.Connect = hub
		}
		v := harness.MustBoot(t, harness.Config{Name: name, Dir: dir, MemoryMiB: 768, Network: netw,
			Disks: []harness.Disk{{Path: filepath.Join(dir, name+"-ssd.img"), Size: 128 << 20}}})
		return &node{VM: v, t: t, bin: bin, dir: dir}
	}
	return boot("a", "10.77.0.1", true), boot("b", peerAddr, false)
}

// exportLeg makes b export its SSD to a alone.
func exportLeg(b *node) {
	b.t.Helper()
	b.mustSh("modprobe nvmet-tcp && peerleg export -nqn " + peerNQN + " -uuid " + peerUUID + " -device /dev/vda -host " + ownerNQN + " -addr " + peerAddr)
}

// attachLeg attaches b's export on a and points the remote leg's slices
// at it; it returns the NVMe block device.
func attachLeg(a *node) string {
	a.t.Helper()
	dev := strings.TrimSpace(a.mustSh("modprobe nvme-tcp && peerleg attach -nqn " + peerNQN + " -host " + ownerNQN + " -addr " + peerAddr))
	for name, table := range map[string]string{
		"m1": fmt.Sprintf("0 2048 linear %s 0", dev),
		"d1": fmt.Sprintf("0 %d linear %s 2048", legSectors, dev),
	} {
		a.mustSh(fmt.Sprintf("if dmsetup info %[1]s >/dev/null 2>&1; then dmsetup suspend %[1]s && dmsetup reload %[1]s --table '%[2]s' && dmsetup resume %[1]s; else dmsetup create %[1]s --table '%[2]s'; fi", name, table))
	}
	return dev
}

const raidTable = "0 196608 raid raid1 1 0 2 /dev/mapper/m0 /dev/mapper/d0 /dev/mapper/m1 /dev/mapper/d1"

// raidHealth returns dm-raid's health letters and sync action of r.
func raidHealth(n *node) (health, action string) {
	f := strings.Fields(n.mustSh("dmsetup status r"))
	if len(f) < 8 {
		n.t.Fatalf("dmsetup status r: %v", f)
	}
	return f[5], f[7]
}

func waitRaid(n *node, want string) {
	n.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		h, action := raidHealth(n)
		if h == want && action == "idle" {
			return
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("mirror health %s (%s), want %s and idle", h, action, want)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// TestReplicaPeerLeg checks the peer leg of a mirror over NVMe/TCP on the
// real kernel, with package nvmeof (through tests/tools/peerleg) doing the
// export and the attach: the export refuses any host but the owner; a
// dm-raid raid1 of a local slice and the peer's slice takes fio writes
// with verify; the peer VM is killed mid-write and the writes stall for
// at most the nvmeof.PeerLegTimeouts, then go on with the local leg, none
// lost; the peer comes back, the leg is attached and given back, and
// dm-raid resyncs it from its bitmap; with the local leg failed every
// block reads back from the peer's leg.
func TestReplicaPeerLeg(t *testing.T) {
	bin, err := binaries()
	if err != nil {
		t.Fatal(err)
	}
	dir := harness.TestDir(t)
	hub := hubAddr(t)
	a, b := bootPair(t, dir, bin, hub)

	exportLeg(b)
	if res := a.sh("modprobe nvme-tcp && peerleg attach -wait 10s -nqn " + peerNQN + " -host " + intruderNQN + " -addr " + peerAddr); res.ExitCode == 0 {
		t.Fatalf("a host the export does not allow attached it:\n%s", res.Stdout)
	}
	dev := attachLeg(a)
	a.mustSh(fmt.Sprintf("dmsetup create m0 --table '0 2048 linear /dev/vda 0' && dmsetup create d0 --table '0 %d linear /dev/vda 2048'", legSectors))
	a.mustSh("dd if=/dev/zero of=/dev/mapper/m0 bs=1M count=1 oflag=direct && dd if=/dev/zero of=/dev/mapper/m1 bs=1M count=1 oflag=direct")
	a.mustSh("modprobe dm-raid && dmsetup create r --table '" + raidTable + "'")
	waitRaid(a, "AA")
	t.Logf("peer leg %s attached, mirror in sync", dev)

	first := fioJob("/dev/mapper/r", "first", "randwrite", "0", "16M")
	a.fio(first + " --do_verify=1")

	// Kill the peer while a paced writer runs; the longest write is the
	// stall the mirror's owner sees.
	second := fioJob("/dev/mapper/r", "second", "randwrite", "40M", "16M") + " --iodepth=1 --rate_iops=300 --do_verify=1"
	a.mustSh("fio --output-format=json --output=/run/second.json " + second + " >/run/second.log 2>&1 & echo $! > /run/fio.pid")
	time.Sleep(4 * time.Second)
	killed := time.Now()
	if err := b.Kill(); err != nil {
		t.Fatal(err)
	}
	a.mustSh("while kill -0 $(cat /run/fio.pid) 2>/dev/null; do sleep 0.5; done")
	t.Logf("writer done %.1fs after the peer was killed", time.Since(killed).Seconds())
	var res struct {
		Jobs []struct {
			Error int `json:"error"`
			Write struct {
				ClatNs struct {
					Max float64 `json:"max"`
				} `json:"clat_ns"`
			} `json:"write"`
		} `json:"jobs"`
	}
	out := a.mustSh("cat /run/second.json")
	if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &res); err != nil || len(res.Jobs) != 1 {
		t.Fatalf("fio output: %v\n%s\n%s", err, out, a.mustSh("cat /run/second.log"))
	}
	if res.Jobs[0].Error != 0 {
		t.Fatalf("fio failed (error %d) after the peer died:\n%s", res.Jobs[0].Error, a.mustSh("cat /run/second.log"))
	}
	stall := time.Duration(res.Jobs[0].Write.ClatNs.Max)
	t.Logf("longest write while the peer died: %.1fs", stall.Seconds())
	if stall > 10*time.Second {
		t.Errorf("writes stalled %.1fs when the peer died, want under 10s", stall.Seconds())
	}
	if h, _ := raidHealth(a); h != "AD" {
		t.Fatalf("mirror health %s after the peer died, want AD", h)
	}
	a.fio(first + " --verify_only")

	// The peer comes back: it exports again (configfs is not persistent),
	// the owner attaches again and gives the leg back; dm-raid resyncs
	// what the bitmap marks.
	b2 := harness.MustBoot(t, harness.Config{Name: "b", Dir: dir, MemoryMiB: 768, Network: &harness.Network{Addr: peerAddr + "/24", Connect: hub},
		Disks: []harness.Disk{{Path: filepath.Join(dir, "b-ssd.img")}}})
	b = &node{VM: b2, t: t, bin: bin, dir: dir}
	exportLeg(b)
	attachLeg(a)
	start := time.Now()
	a.mustSh("dmsetup suspend r && dmsetup reload r --table '" + raidTable + "' && dmsetup resume r")
	waitRaid(a, "AA")
	t.Logf("peer leg resynced %.1fs after it was given back", time.Since(start).Seconds())
	if log := a.mustSh("dmesg"); !strings.Contains(log, "md: recovery of RAID array") {
		t.Errorf("no recovery in the kernel log:\n%s", log)
	}

	// Only the peer's leg left: every block of both writers reads back.
	a.mustSh("for d in m0 d0; do dmsetup suspend $d && dmsetup reload $d --table \"0 $(blockdev --getsz /dev/mapper/$d) error\" && dmsetup resume $d; done")
	a.fio(first + " --verify_only")
	a.fio(fioJob("/dev/mapper/r", "second", "randwrite", "40M", "16M") + " --iodepth=1 --verify_only")
	if h, _ := raidHealth(a); h != "DA" {
		t.Fatalf("mirror health %s with the local leg failed, want DA", h)
	}
}
