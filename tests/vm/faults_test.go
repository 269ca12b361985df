// SPDX-License-Identifier: Apache-2.0

//go:build vm

package vm_test

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Faults at run time (issue 8, item 4): a device-mapper layer the test
// controls sits under the pool's SSD (TestFaultSSDErrors) or under every
// HDD of the RAID10 origin (TestFaultRAIDMember), and is reloaded to a
// failing table while the volume holds data.

// faultNode has four small HDDs (so a RAID10 rebuild takes seconds), one
// SSD and two spare disks (a replacement HDD, a copy target).
var faultNode = nodeSpec{HDDs: 4, HDDSize: 96 << 20, SSDs: []int64{160 << 20}, Spares: []int64{96 << 20, 96 << 20}}

// faultOffset is where the test's linear map starts on the disk below it
// (sectors): the raw disk's first 4 MiB stay zero, so the engine's device
// scan finds each tidecache or md superblock once, on the mapped device.
const faultOffset = 8192

// mapDisk puts a dm-linear device name over disk (from faultOffset to the
// end) and returns its path.
func (n *node) mapDisk(name, disk string) string {
	n.t.Helper()
	n.mustSh(fmt.Sprintf("dmsetup create %s --table \"0 $(( $(blockdev --getsz %s) - %d )) linear %s %d\"",
		name, disk, faultOffset, disk, faultOffset))
	return "/dev/mapper/" + name
}

// failDisk reloads the mapped device name to table (whose device and
// offset fields are filled in: %[1]s the disk, %[2]d the offset), live.
func (n *node) failDisk(name, disk, table string) {
	n.t.Helper()
	tbl := table
	if strings.Contains(table, "%") {
		tbl = fmt.Sprintf(table, disk, faultOffset)
	}
	n.mustSh(fmt.Sprintf("sz=$(blockdev --getsz /dev/mapper/%s); dmsetup load %s --table \"0 $sz %s\" && dmsetup suspend %s && dmsetup resume %s",
		name, name, tbl, name, name))
	n.t.Logf("%s now: %s", name, strings.TrimSpace(n.mustSh("dmsetup table "+name)))
}

// sha reads a whole device (or a region: dd's skip/count in MiB) with
// O_DIRECT and returns its SHA-256, or the error dd printed.
func (n *node) sha(dev string, extra string) (string, error) {
	n.t.Helper()
	res := n.sh(fmt.Sprintf("{ dd if=%s bs=1M iflag=direct %s 2>/run/dd.err; echo $? >/run/dd.rc; } | sha256sum | cut -c1-64", dev, extra))
	if rc := strings.TrimSpace(n.mustSh("cat /run/dd.rc")); res.ExitCode != 0 || rc != "0" {
		return "", fmt.Errorf("read %s: %s", dev, strings.TrimSpace(n.sh("cat /run/dd.err").Stdout))
	}
	return strings.TrimSpace(res.Stdout), nil
}

// wcStatus returns the fields of dm-writecache's status line of dev
// (error first).
func (n *node) wcStatus(dev string) []string {
	n.t.Helper()
	f := strings.Fields(n.mustSh("dmsetup status " + dev))
	if len(f) < 4 || f[2] != "writecache" {
		n.t.Fatalf("dmsetup status %s: %v", dev, f)
	}
	return f[3:]
}

// TestFaultSSDErrors fails the writes, then every I/O, of the SSD under a
// writeback volume holding acknowledged dirty data, with the daemon
// running, and checks what the kernel and tidecache do and that no
// acknowledged write is lost: every block reads back through the volume as
// written, and a copy of the whole volume taken with dd holds them all.
func TestFaultSSDErrors(t *testing.T) {
	besideAnother(t, 40*time.Second)
	n := bootNode(t, faultNode)
	ssd := n.ssds()[0]
	copyDisk := n.spares()[1]
	ssdf := n.mapDisk("ssdf", ssd)
	n.mustTidectl("pool create tank --assume-clean --raid10 " + strings.Join(n.hdds(), ",") + " --ssd " + ssdf)
	n.startDaemon("--embedded-etcd --etcd-data-dir /run/etcd")
	out := n.cl("volume create db --size 48M --write-cache 32M --wait --timeout 2m")
	if !strings.Contains(out, "applied on vm1: writeback") {
		t.Fatalf("create --wait: %s", out)
	}

	// Expected content: zeroes, region A (on the HDDs after a flush) at
	// 0 MiB and region B (dirty in the write tier) at 16 MiB. Each write
	// is acknowledged by fsync.
	n.mustSh("head -c 48M /dev/zero > /run/expected.img")
	for _, r := range []struct {
		name string
		mib  int
	}{{"a", 0}, {"b", 16}} {
		n.mustSh(fmt.Sprintf("head -c 8M /dev/urandom > /run/%[1]s.bin && "+
			"dd if=/run/%[1]s.bin of=/dev/mapper/tc-db bs=1M seek=%[2]d oflag=direct conv=notrunc,fsync status=none && "+
			"dd if=/run/%[1]s.bin of=/run/expected.img bs=1M seek=%[2]d conv=notrunc status=none", r.name, r.mib))
		if r.name == "a" {
			n.mustTidectl("volume flush db")
		}
	}
	want := strings.TrimSpace(n.mustSh("sha256sum /run/expected.img | cut -c1-64"))
	if got, err := n.sha("/dev/mapper/tc-db", ""); err != nil || got != want {
		t.Fatalf("before the fault the volume reads %s (%v), want %s", got, err, want)
	}
	dirty := n.volume("db").WriteCache.DirtyBlocks
	if dirty < 2048 {
		t.Fatalf("region B should be dirty in the write tier (2048 blocks), have %d", dirty)
	}
	t.Logf("before the fault: %d dirty blocks, volume sha %s", dirty, want[:12])

	// Fault 1: every write to the SSD fails, reads still work.
	n.failDisk("ssdf", ssd, "flakey %s %d 0 3600 1 error_writes")
	res := n.sh("head -c 1M /dev/urandom | dd of=/dev/mapper/tc-db bs=1M seek=32 iflag=fullblock oflag=direct conv=notrunc,fsync status=none")
	t.Logf("write after the SSD fault: exit %d: %s", res.ExitCode, strings.TrimSpace(res.Stderr))
	if res.ExitCode == 0 {
		t.Fatalf("a write and fsync after the SSD's writes fail succeeded")
	}
	st := n.wcStatus("tc-db-wtier")
	t.Logf("dm-writecache status after the fault: %v", st)
	if st[0] == "0" {
		t.Fatalf("dm-writecache error field is 0 after a failed SSD write: %v", st)
	}
	v := n.volume("db")
	t.Logf("volume show: state %q error %q write_cache.error %d", v.State, v.Error, v.WriteCache.Error)
	if v.State != "error" || !strings.Contains(v.Error, "SSD failed") || v.WriteCache.Error == 0 {
		t.Fatalf("volume show after the SSD fault: %+v", v)
	}
	n.eventually(30*time.Second, "curl -sf http://127.0.0.1:9540/metrics | grep '^tidecache_volume_error{'", `tidecache_volume_error{pool="tank",volume="db"} 1`)

	// Later writes and flushes fail with EIO, also to blocks already dirty.
	for _, cmd := range []string{
		"head -c 4k /dev/urandom | dd of=/dev/mapper/tc-db bs=4k seek=4096 iflag=fullblock oflag=direct conv=notrunc status=none", // a dirty block (16 MiB)
		"head -c 4k /dev/urandom | dd of=/dev/mapper/tc-db bs=4k seek=10 iflag=fullblock oflag=direct conv=notrunc status=none",   // a clean block
		"dd if=/dev/null of=/dev/mapper/tc-db conv=notrunc,fsync status=none",                                                     // a flush alone
	} {
		res := n.sh(cmd)
		t.Logf("%s: exit %d %s", cmd, res.ExitCode, strings.TrimSpace(res.Stderr))
		if res.ExitCode == 0 || !strings.Contains(res.Stderr, "Input/output error") {
			t.Fatalf("%s after the SSD fault: exit %d, want EIO: %s", cmd, res.ExitCode, res.Stderr)
		}
	}

	// The daemon's SSD-error policy wants writethrough; the drain cannot
	// write back from a cache in error. It must say so and leave the
	// volume in writeback, not hang or claim success.
	show := n.eventually(90*time.Second, "tidectl --etcd-endpoints "+etcdURL+" volume show db", "critical ssd_error")
	t.Logf("cluster volume show:\n%s", show)
	n.eventually(90*time.Second, "grep -m1 'set mode writethrough' /run/daemon.log", "write cache in error state")
	time.Sleep(5 * time.Second) // a few more reconciles
	t.Logf("daemon log (mode changes):\n%s", n.sh("grep -E 'changing mode|set mode|SSD error|drain' /run/daemon.log | tail -8").Stdout)
	v = n.volume("db")
	st = n.wcStatus("tc-db-wtier")
	t.Logf("after the policy ran: mode %s state %s, writecache status %v", v.Mode, v.State, st)
	if v.Mode != "writeback" {
		t.Fatalf("mode %s after a drain that cannot write back", v.Mode)
	}
	if st[0] == "0" || v.State != "error" {
		t.Fatalf("the write tier's error is no longer visible after the policy ran: state %s, status %v", v.State, st)
	}
	n.eventually(30*time.Second, "curl -sf http://127.0.0.1:9540/metrics | grep '^tidecache_volume_error{'", `tidecache_volume_error{pool="tank",volume="db"} 1`)
	n.wantFail("volume set-mode db writethrough", "error state")
	n.wantFail("volume flush db", "error")

	// Reads are served, dirty blocks from the SSD: the volume reads as
	// written, and a copy to a spare disk holds every acknowledged write.
	if got, err := n.sha("/dev/mapper/tc-db", ""); err != nil || got != want {
		t.Fatalf("with the SSD's writes failing the volume reads %s (%v), want %s", got, err, want)
	}
	n.mustSh("dd if=/dev/mapper/tc-db of=" + copyDisk + " bs=1M iflag=direct oflag=direct status=none")
	if got, err := n.sha(copyDisk, "count=48"); err != nil || got != want {
		t.Fatalf("copy of the volume on %s: %s (%v), want %s", copyDisk, got, err, want)
	}
	t.Logf("copy of the volume on %s verified (%s)", copyDisk, want[:12])

	// Fault 2: the SSD is gone (every I/O fails). Clean blocks still come
	// from the HDDs; dirty ones fail with EIO, they are not replaced by
	// the HDDs' older content.
	n.failDisk("ssdf", ssd, "error")
	if got, err := n.sha("/dev/mapper/tc-db", "count=8"); err != nil || got != strings.TrimSpace(n.mustSh("sha256sum /run/a.bin | cut -c1-64")) {
		t.Fatalf("region A (clean, on the HDDs) with the SSD dead: %s (%v)", got, err)
	}
	if _, err := n.sha("/dev/mapper/tc-db", "skip=16 count=8"); err == nil {
		t.Fatalf("region B (dirty, only on the dead SSD) read without error")
	} else {
		t.Logf("region B with the SSD dead: %v", err)
	}
	v = n.volume("db")
	t.Logf("SSD dead: state %q error %q", v.State, v.Error)
	if v.State != "error" {
		t.Fatalf("volume state %s with the SSD dead", v.State)
	}
	n.mustSh("pkill -x tidecached; sleep 1")

	// The pool's layout lives in a superblock on its SSD too: with the SSD
	// unreadable tidecache refuses to change the pool (no delete, no new
	// volume) rather than write a layout it cannot check. The copy above
	// is the way out.
	res = n.tidectl("volume delete db --force")
	t.Logf("volume delete --force with the SSD dead: exit %d %s%s", res.ExitCode, res.Stdout, res.Stderr)
	if res.ExitCode == 0 || !strings.Contains(res.Stderr, "unreadable superblock") {
		t.Fatalf("volume delete --force with the SSD dead: exit %d, want a refusal naming the unreadable superblock", res.ExitCode)
	}
	if got, err := n.sha(copyDisk, "count=48"); err != nil || got != want {
		t.Fatalf("copy of the volume on %s after the delete attempt: %s (%v), want %s", copyDisk, got, err, want)
	}
}

// mdstat returns /proc/mdstat.
func (n *node) mdstat() string {
	n.t.Helper()
	return n.mustSh("cat /proc/mdstat")
}

// metrics returns every line of the daemon's /metrics whose series name
// starts with prefix.
func (n *node) metrics(prefix string) map[string]string {
	n.t.Helper()
	out := map[string]string{}
	for _, line := range strings.Split(n.mustSh("curl -sf http://127.0.0.1:9540/metrics"), "\n") {
		if strings.HasPrefix(line, prefix) {
			if i := strings.LastIndexByte(line, ' '); i > 0 {
				out[line[:i]] = line[i+1:]
			}
		}
	}
	return out
}

// poolOrigin is the array part of `tidectl -o json pool show`.
type poolOrigin struct {
	Array *struct {
		Degraded      int      `json:"degraded"`
		RaidDisks     int      `json:"raid_disks"`
		SyncAction    string   `json:"sync_action"`
		FailedDevices []string `json:"failed_devices"`
	} `json:"array"`
}

func (n *node) poolArray(name string) poolOrigin {
	n.t.Helper()
	var ps []struct {
		Origin poolOrigin `json:"origin"`
	}
	out := n.mustTidectl("-o json pool show " + name)
	if err := json.Unmarshal([]byte(out), &ps); err != nil || len(ps) != 1 {
		n.t.Fatalf("parse pool show: %v\n%s", err, out)
	}
	return ps[0].Origin
}

// TestFaultRAIDMember fails one HDD of the RAID10 origin under a writeback
// volume with fio writing and verifying: md marks it faulty and runs
// degraded, the metrics and the policy say so, I/O goes on. The disk is
// then replaced with mdadm and the rebuild is watched through the metrics
// and `tidectl pool show` until the array is whole; the data verifies.
func TestFaultRAIDMember(t *testing.T) {
	besideAnother(t, 80*time.Second)
	n := bootNode(t, faultNode)
	var members []string
	for i, d := range n.hdds() {
		members = append(members, n.mapDisk(fmt.Sprintf("hdd%d", i), d))
	}
	n.mustTidectl("pool create tank --assume-clean --raid10 " + strings.Join(members, ",") + " --ssd " + n.ssds()[0])
	n.startDaemon("--embedded-etcd --etcd-data-dir /run/etcd")
	n.cl("volume create db --size 64M --write-cache 32M --wait --timeout 2m")
	md := strings.TrimSpace(n.mustSh("basename $(readlink -f /dev/md/tc-tank)"))
	t.Logf("origin array %s:\n%s", md, n.mdstat())
	if m := n.metrics("tidecache_origin_degraded"); m[`tidecache_origin_degraded{device="/dev/`+md+`",pool="tank"}`] != "0" {
		t.Fatalf("healthy array: origin metrics %v", m)
	}

	static := fioJob("/dev/mapper/tc-db", "static", "write", "48M", "16M")
	n.fio(static + " --do_verify=1")
	n.mustTidectl("volume flush db") // region on the HDDs before the fault
	live := n.startLiveWriter("live", "32M", 256)
	time.Sleep(2 * time.Second)

	// hdd1 fails: every I/O to it errors. Reads of the static region
	// (from the HDDs) and the write-back reach it.
	n.failDisk("hdd1", n.hdds()[1], "error")
	n.fio(static + " --verify_only")
	n.mustTidectl("volume flush db")
	n.eventually(60*time.Second, "cat /sys/block/"+md+"/md/degraded", "1")
	stat := n.mdstat()
	t.Logf("after the member failed:\n%s", stat)
	if !strings.Contains(stat, "hdd1") && !strings.Contains(stat, "(F)") {
		t.Fatalf("mdstat shows no faulty member:\n%s", stat)
	}
	t.Logf("md/dev-*/state: %s", n.mustSh("grep -H . /sys/block/"+md+"/md/dev-*/state"))
	m := n.metrics("tidecache_origin_")
	t.Logf("origin metrics, degraded: %v", m)
	lbl := `{device="/dev/` + md + `",pool="tank"}`
	for series, want := range map[string]string{
		"tidecache_origin_degraded" + lbl:       "1",
		"tidecache_origin_members" + lbl:        "4",
		"tidecache_origin_failed_members" + lbl: "1",
	} {
		if m[series] != want {
			t.Fatalf("%s = %q, want %s", series, m[series], want)
		}
	}
	if a := n.poolArray("tank").Array; a == nil || a.Degraded != 1 || len(a.FailedDevices) != 1 {
		t.Fatalf("pool show -o json, array: %+v", a)
	}
	t.Logf("pool show, degraded:\n%s", n.mustTidectl("pool show tank"))
	// The policy: the volume stays in writeback, with a warning alert.
	show := n.eventually(60*time.Second, "tidectl --etcd-endpoints "+etcdURL+" volume show db", "warning origin_degraded")
	t.Logf("cluster volume show, degraded:\n%s", show)
	if v := n.volume("db"); v.Mode != "writeback" || v.State != "active" {
		t.Fatalf("volume on a degraded origin: %+v", v)
	}
	live.requireRunning("when the member failed")

	// Replace: remove the failed member, add a spare disk (mapped at the
	// same offset as the others). The rebuild is slowed so a few scrapes
	// see it move.
	failed := members[1]
	n.mustSh("echo 1000 > /proc/sys/dev/raid/speed_limit_min; echo 1000 > /proc/sys/dev/raid/speed_limit_max")
	n.mustSh("mdadm --manage /dev/md/tc-tank --remove " + failed)
	newDisk := n.mapDisk("hdd4", n.spares()[0])
	n.mustSh("mdadm --manage /dev/md/tc-tank --add " + newDisk)
	var seen []float64
	action, shown := "", false
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		m := n.metrics("tidecache_origin_")
		if m[`tidecache_origin_sync_action{action="recover",device="/dev/`+md+`",pool="tank"}`] == "1" {
			action = "recover"
			if r, err := strconv.ParseFloat(m["tidecache_origin_sync_progress_ratio"+lbl], 64); err == nil {
				seen = append(seen, r)
			}
		}
		if m["tidecache_origin_degraded"+lbl] == "0" {
			break
		}
		if len(seen) == 2 && !shown {
			shown = true
			t.Logf("pool show, rebuilding:\n%s", n.mustTidectl("pool show tank"))
			t.Logf("cluster volume show, rebuilding:\n%s", n.cl("volume show db"))
		}
		if len(seen) == 3 && seen[2] > seen[0] {
			// Progress seen moving: the rest of the rebuild at full speed.
			n.mustSh("echo 50000 > /proc/sys/dev/raid/speed_limit_min; echo 200000 > /proc/sys/dev/raid/speed_limit_max")
		}
		time.Sleep(time.Second)
	}
	t.Logf("rebuild: action %q, progress seen %v\n%s", action, seen, n.mdstat())
	n.mustSh("echo 1000 > /proc/sys/dev/raid/speed_limit_min; echo 200000 > /proc/sys/dev/raid/speed_limit_max")
	if action != "recover" || len(seen) < 2 || seen[len(seen)-1] <= seen[0] {
		t.Fatalf("rebuild progress not visible in the metrics: action %q, ratios %v", action, seen)
	}
	if m := n.metrics("tidecache_origin_"); m["tidecache_origin_degraded"+lbl] != "0" || m["tidecache_origin_failed_members"+lbl] != "0" {
		t.Fatalf("after the rebuild: %v", m)
	}
	n.eventually(60*time.Second, "tidectl --etcd-endpoints "+etcdURL+" volume show db", "Status:")
	if show := n.cl("volume show db"); strings.Contains(show, "origin_degraded") {
		n.eventually(30*time.Second, "tidectl --etcd-endpoints "+etcdURL+" volume show db | grep -c origin_degraded || true", "0")
	}

	live.stop()
	n.fio(static + " --verify_only")
	n.mustTidectl("volume flush db")
	// The array's copies agree after the rebuild. md holds a check to
	// speed_limit_min (1 MB/s here) whenever it counts other I/O on the
	// members; nothing here needs it slow (3 s alone on a quiet host).
	n.mustSh("echo 200000 > /proc/sys/dev/raid/speed_limit_min; echo check > /sys/block/" + md + "/md/sync_action")
	start := time.Now()
	n.eventually(3*time.Minute, "cat /sys/block/"+md+"/md/sync_action", "idle")
	t.Logf("md check after the rebuild: %v", time.Since(start).Round(time.Second))
	n.mustSh("echo 1000 > /proc/sys/dev/raid/speed_limit_min")
	if mm := strings.TrimSpace(n.mustSh("cat /sys/block/" + md + "/md/mismatch_cnt")); mm != "0" {
		t.Fatalf("md check after the rebuild: mismatch_cnt %s", mm)
	}
	n.fio(fioJob("/dev/mapper/tc-db-origin", "static", "write", "48M", "16M") + " --verify_only")
	n.mustSh("pkill -x tidecached; sleep 1")
}
