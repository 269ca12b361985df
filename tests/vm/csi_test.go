// SPDX-License-Identifier: Apache-2.0

//go:build vm

package vm_test

import (
	"encoding/xml"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidecache/tidecache/tests/vm/harness"
)

// csiBinaries builds the CSI driver, the upstream csi-sanity suite
// (kubernetes-csi/csi-test, pinned as a tool in go.mod) and csicall (the
// orchestrator's calls one by one) next to the other test binaries.
var csiBinaries = sync.OnceValue(func() error {
	dir, err := binaries()
	if err != nil {
		return err
	}
	return harness.BuildBinaries(contextBackground(), dir,
		"./cmd/tidecache-csi", "github.com/kubernetes-csi/csi-test/v5/cmd/csi-sanity", "./tests/tools/csicall")
})

// csiNode is one SSD and one plain origin disk: the CSI suite needs a
// pool, not an array.
var csiNode = nodeSpec{SSDs: []int64{512 << 20}, Spares: []int64{1 << 30}}

// TestCSISanity runs the upstream csi-sanity suite against tidecache-csi
// (controller and node services in one process) in one VM on the real
// kernel: tidecached with its embedded etcd builds each volume the
// controller writes a spec for, and the node service stages (mkfs ext4,
// mount), publishes (bind mount), reports stats and health, unpublishes
// and unstages it. The suite must pass; the specs it skips must each be for a
// capability the driver does not advertise.
func TestCSISanity(t *testing.T) {
	besideAnother(t, 110*time.Second)
	if err := csiBinaries(); err != nil {
		t.Fatalf("build csi binaries: %v", err)
	}
	start := time.Now()
	n := bootNode(t, csiNode)
	n.mustTidectl("pool create tank --origin " + n.spares()[0] + " --ssd " + n.ssds()[0])
	n.startDaemon("--embedded-etcd --etcd-data-dir /run/etcd")
	n.mustSh("mkdir -p /run/csi && (tidecache-csi --mode both --node-id vm1 --endpoint unix:///run/csi/csi.sock --etcd-endpoints " + etcdURL +
		" --placement-timeout 30s >>/run/csi.log 2>&1 & echo $! > /run/csi.pid)")
	n.eventually(30*time.Second, "test -S /run/csi/csi.sock && echo up", "up")

	// Small writeback volumes: 32 MiB with a 16 MiB write cache each, so
	// the volumes a spec and its cleanup keep at once fit the pool.
	summary := n.csiSanity("full suite", `writeCache: "16Mi"\nmode: writeback\n`, 32<<20, "mount", "")
	t.Logf("csi-sanity: ran %s of %s specs: %s passed, %s failed, %s pending, %s skipped (%s since boot)",
		summary[1], summary[2], summary[3], summary[4], summary[5], summary[6], time.Since(start).Round(time.Second))

	// Every skip must be for something the driver does not advertise.
	var report junitReport
	if err := xml.Unmarshal([]byte(n.mustSh("cat /run/csi-junit.xml")), &report); err != nil {
		t.Fatalf("parse the JUnit report: %v", err)
	}
	skips, expansions := 0, 0
	for _, s := range report.Suites {
		for _, c := range s.Cases {
			if c.Skipped == nil && strings.Contains(c.Name, "ExpandVolume") {
				expansions++
			}
			if c.Skipped == nil || c.Skipped.Message == "pending" { // an XIt upstream: counted as pending
				continue
			}
			skips++
			if why := c.Skipped.Message; !skipAllowed(why) {
				t.Errorf("spec %q skipped for a reason that is not a capability the driver leaves out: %q", c.Name, why)
			}
		}
	}
	if want := summary[6]; fmt.Sprint(skips) != want {
		t.Errorf("JUnit report has %d skipped specs, the summary %s", skips, want)
	}
	// ExpandVolume [Controller Server]: 3 specs; NodeExpandVolume: 4.
	if expansions != 7 {
		t.Errorf("%d expansion specs ran, want the 7 of ControllerExpandVolume and NodeExpandVolume", expansions)
	}

	// The node service's other paths, one spec each way: raw block access
	// (the device bound into the pod, ten times over for idempotence), and
	// XFS as the MySQL StorageClass makes it (mkfs.xfs wants 300 MiB),
	// made and then grown online.
	if got := n.csiSanity("block", `writeCache: "16Mi"\n`, 32<<20, "block", "Node Service should"); got[3] != "2" || got[1] != "2" {
		t.Errorf("block access: ran %s, passed %s specs, want 2", got[1], got[3])
	}
	if got := n.csiSanity("xfs", `writeCache: "16Mi"\nfsType: xfs\n`, 320<<20, "mount", "Node Service should work|node-expand is called after node-publish"); got[3] != "2" || got[1] != "2" {
		t.Errorf("XFS: ran %s, passed %s specs, want 2", got[1], got[3])
	}
	n.mustSh("grep -q 'filesystem made.*fstype=xfs' /run/csi.log")
	n.mustSh("grep -q 'filesystem grown.*fstype=ext4' /run/csi.log && grep -q 'filesystem grown.*fstype=xfs' /run/csi.log")
	// A new volume's origin extent still holds what a deleted volume left
	// there (the engine does not zero it): the node service must wipe a
	// filesystem that is not the volume's own instead of mounting it.
	wiped := strings.TrimSpace(n.sh("grep -c 'an earlier volume left' /run/csi.log").Stdout)
	t.Logf("block and XFS passes done (%s since boot); stale signatures wiped on %s new volumes", time.Since(start).Round(time.Second), wiped)

	// Nothing is left behind: every volume the suite made was deleted, and
	// its device removed by the daemon.
	n.eventually(2*time.Minute, `left=$(dmsetup ls | grep '^tc-'); test -z "$left" && echo clean || { echo "devices left:"; echo "$left"; tidectl volume list; tidectl --etcd-endpoints `+etcdURL+` volume list; tail -20 /run/csi.log; }`, "clean")
	if left := n.sh("grep -c ' /run/csi-' /proc/self/mounts").Stdout; strings.TrimSpace(left) != "0" {
		t.Errorf("mounts left under /run/csi-*: %s", n.sh("grep ' /run/csi-' /proc/self/mounts").Stdout)
	}
	n.mustSh("kill -TERM $(cat /run/csi.pid); for i in $(seq 50); do kill -0 $(cat /run/csi.pid) 2>/dev/null || exit 0; sleep 0.2; done; exit 1")
	if log := n.mustSh("cat /run/csi.log"); !strings.Contains(log, "msg=stopped") {
		t.Errorf("driver did not log a clean stop after SIGTERM:\n%s", tailLines(log, 20))
	}
}

// csiSanity runs csi-sanity with the StorageClass parameters params (YAML),
// volumes of size bytes (grown by 64 MiB in the expansion specs) and the
// access type, only the specs matching focus
// when it is set, and returns the summary's numbers: [1] ran, [2] of, [3]
// passed, [4] failed, [5] pending, [6] skipped. It fails the test unless
// the suite passed. The JUnit report is /run/csi-junit.xml.
func (n *node) csiSanity(what, params string, size int64, access, focus string) []string {
	n.t.Helper()
	n.mustSh(`printf '` + params + `' > /run/csi-params.yaml`)
	cmd := fmt.Sprintf("timeout 900 csi-sanity --csi.endpoint=/run/csi/csi.sock"+
		" --csi.stagingdir=/run/csi-staging --csi.mountdir=/run/csi-target"+
		" --csi.testvolumesize=%d --csi.testvolumeexpandsize=%d --csi.testvolumeparameters=/run/csi-params.yaml --csi.testvolumeaccesstype=%s"+
		" --ginkgo.no-color --ginkgo.junit-report=/run/csi-junit.xml", size, size+64<<20, access)
	if focus != "" {
		cmd += fmt.Sprintf(" --ginkgo.focus='%s'", focus)
	}
	res := n.sh(cmd + " >/run/csi-sanity.out 2>&1")
	out := n.sh("cat /run/csi-sanity.out").Stdout
	if res.ExitCode != 0 {
		n.t.Fatalf("csi-sanity (%s) exit %d; its failures:\n%s\ndriver log tail:\n%s\ndaemon log tail:\n%s\ncsi-sanity's output, tail:\n%s",
			what, res.ExitCode, ginkgoFailures(out), n.sh("tail -40 /run/csi.log").Stdout, n.sh("tail -40 /run/daemon.log").Stdout, tailLines(out, 100))
	}
	summary := regexp.MustCompile(`Ran (\d+) of (\d+) Specs.*\n.*?(\d+) Passed \| (\d+) Failed \| (\d+) Pending \| (\d+) Skipped`).FindStringSubmatch(out)
	if summary == nil {
		n.t.Fatalf("csi-sanity (%s): no ginkgo summary in its output:\n%s", what, tailLines(out, 60))
	}
	return summary
}

// ginkgoFailures picks out of a ginkgo run's output what says why it
// failed: each failed spec's report (from its "[FAILED]" line to the
// separator after it, 30 lines at most) and the closing summary.
func ginkgoFailures(out string) string {
	var keep []string
	inSpec := 0 // lines kept of the current failed spec, 0 outside one
	summary := false
	for _, l := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(l, "Summarizing "):
			summary = true
		case inSpec == 0 && strings.Contains(l, "[FAILED]"):
			inSpec = 1
		case inSpec > 0 && strings.HasPrefix(l, "------"):
			inSpec = 0
			keep = append(keep, l)
		}
		if summary || (inSpec > 0 && inSpec <= 30) {
			keep = append(keep, l)
		}
		if inSpec > 0 {
			inSpec++
		}
	}
	if len(keep) == 0 {
		return "(no [FAILED] spec and no summary in the output)"
	}
	return strings.Join(keep, "\n")
}

// notAdvertised are csi-sanity's skip messages for what tidecache-csi
// leaves out: read-only controller publish, listing, snapshots, clones,
// modification, controller and storage health, group snapshots,
// multi-writer, attach limits. The node service reports volume health
// (NodeGetVolumeHealth) and both services expand volumes: their specs must
// run.
// A skip such as "Required bytes not supported", "capacity of the volume
// is unknown" or "NodeStageVolume not supported" would be the driver's
// failing, and is not here.
var notAdvertised = []string{
	"ControllerPublishVolume.readonly field not supported",
	"ListVolumes not supported",
	"ControllerGetVolumeHealth not supported", "ControllerListVolumeHealth not supported",
	"NodeGetStorageHealth not supported",
	"ControllerModifyVolume not supported", "Modify Volume not supported", "Modify volume not supported",
	"Snapshot not supported", "CreateSnapshot not supported", "DeleteSnapshot not supported", "GetSnapshot not supported",
	"ListSnapshots not supported", "SNAPSHOT_ACCESSIBILITY_CONSTRAINTS not supported", "Volume Cloning not supported",
	"GroupControllerService not supported", "VolumeGroupSnapshots not supported",
	"Service does not have single node multi writer capability", "testnodevolumeattachlimit not enabled",
}

func skipAllowed(message string) bool {
	for _, m := range notAdvertised {
		if strings.Contains(message, m) {
			return true
		}
	}
	return false
}

type junitReport struct {
	Suites []struct {
		Cases []struct {
			Name    string `xml:"name,attr"`
			Skipped *struct {
				Message string `xml:"message,attr"`
			} `xml:"skipped"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}
