// SPDX-License-Identifier: Apache-2.0

//go:build vm

package vm_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/nvmeof"
	"github.com/tidecache/tidecache/pkg/store"
	"github.com/tidecache/tidecache/tests/vm/harness"
)

// TestFencingExportCutsHost checks a shared origin's fence on the real
// kernel, with two VMs: san exports its disk (tidecached run --export)
// and runs etcd, b is a node of the cluster.
//   - b registers and gets its own subsystem of the export, which it
//     attaches and finds by the export's namespace UUID (wwid);
//   - b's daemon dies (its record expires), b keeps its subsystem;
//   - a fence of b, written to etcd while b writes to the device: san
//     removes b's subsystem and acknowledges the fence with its revision
//     in its node record; b's connection is cut (a write fails) and a new
//     connection is refused;
//   - the fence deleted and b's daemon back: b is served again, under
//     the same wwid.
func TestFencingExportCutsHost(t *testing.T) {
	bin, err := binaries()
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	c := &peerCluster{t: t, dir: harness.TestDir(t), bin: bin, hub: hubAddr(t),
		aSpec:      nodeSpec{HDDs: 1, HDDSize: 64 << 20},
		etcd:       "http://10.77.0.1:2389",
		daemonArgs: "--lease-ttl 4s",
	}
	const sanAddr = "10.77.0.1"
	c.a = c.boot("san", c.aSpec, sanAddr, true)
	c.b = c.boot("b", c.bSpec, "10.77.0.2", false)
	defer c.dumpLogs()
	san, b := c.a, c.b
	san.mustSh("mkdir -p /run/etcd && tidecached etcd --insecure-etcd --client-url " + c.etcd + " --data-dir /run/etcd/data >>/run/etcd.log 2>&1 &")
	san.eventually(60*time.Second, "tidectl --etcd-endpoints "+c.etcd+" node list", "NODE")
	c.startDaemon(san, "--replica-address "+sanAddr+" --insecure-nvme --export san="+san.hdds()[0])
	c.startDaemon(b, "")

	nqn, host := nvmeof.ExportNQN("san", "b"), nvmeof.HostNQN("b")
	san.eventually(30*time.Second, "ls /sys/kernel/config/nvmet/subsystems", nqn)
	if out := san.mustSh("cat /sys/kernel/config/nvmet/subsystems/" + nqn + "/attr_allow_any_host; ls /sys/kernel/config/nvmet/subsystems/" + nqn + "/allowed_hosts"); out != "0\n"+host+"\n" {
		t.Fatalf("b's subsystem: want any host refused and b alone allowed:\n%s", out)
	}
	// On a kernel with in-band authentication san's target requires
	// b's secret too (--insecure-nvme only admits hosts without a key).
	attach := "modprobe nvme-tcp && peerleg attach -wait 10s -nqn " + nqn + " -host " + host + " -addr " + sanAddr +
		secretArg(t, san, b, "san", host)
	dev := strings.TrimSpace(b.mustSh(attach))
	wwid := "uuid." + nvmeof.ExportUUID("san")
	if got := strings.TrimSpace(b.mustSh("cat /sys/block/" + path.Base(dev) + "/wwid")); got != wwid {
		t.Fatalf("b sees the export as %s with wwid %q, want %q", dev, got, wwid)
	}
	write := "dd if=/dev/urandom of=" + dev + " bs=4k count=1 oflag=direct,dsync status=none"
	b.mustSh(write)
	// A writer that logs each write's outcome, as a half-dead owner
	// would go on writing.
	b.mustSh("(while :; do if " + write + " 2>/dev/null; then echo ok; else echo failed; fi; sleep 0.2; done) >/run/writer.log 2>&1 & echo $! >/run/writer.pid")
	b.eventually(10*time.Second, "grep -c ok /run/writer.log", "")

	// b's daemon dies and its record expires, its kernel goes on writing:
	// a half-dead node. (A live daemon would release its own fence, and
	// the leader lift it.) b keeps its subsystem.
	b.mustSh("kill $(cat /run/daemon.pid); while kill -0 $(cat /run/daemon.pid) 2>/dev/null; do sleep 0.2; done")
	san.eventually(20*time.Second, "tidectl --etcd-endpoints "+c.etcd+" node list | grep -c '^b ' || true", "0")
	time.Sleep(replicaRoundWait)
	if out := san.mustSh("ls /sys/kernel/config/nvmet/subsystems"); !strings.Contains(out, nqn) {
		t.Fatalf("b's subsystem removed when b went down:\n%s", out)
	}

	// Fence b.
	key := store.DefaultPrefix + "fences/b"
	fence, _ := json.Marshal(map[string]any{"apiVersion": store.APIVersion, "kind": store.KindFence,
		"spec": api.Fence{Node: "b", Reason: "TestFencingExportCutsHost", CreatedAt: time.Now().UTC()}})
	fenced := time.Now()
	rev := etcdPut(t, san, c.etcd, key, string(fence))
	deadline := time.Now().Add(20 * time.Second)
	for {
		rec := nodeRecord(t, san, c.etcd, "san")
		if slices.Contains(rec.FencesApplied, api.FenceAck{Node: "b", Revision: rev}) {
			if len(rec.Exports) != 1 || slices.Contains(rec.Exports[0].Hosts, "b") || rec.Exports[0].UUID != nvmeof.ExportUUID("san") {
				t.Fatalf("san's record after the fence: exports %+v, want san without b", rec.Exports)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("fence of b (revision %d) not acknowledged after 20s: %+v", rev, rec.FencesApplied)
		}
		time.Sleep(200 * time.Millisecond)
	}
	acked := time.Since(fenced)
	if out := san.mustSh("ls /sys/kernel/config/nvmet/subsystems"); strings.Contains(out, nqn) {
		t.Fatalf("b's subsystem left after the acknowledgement:\n%s", out)
	}
	// b's writes fail once its connection is cut (fast_io_fail_tmo 1 s),
	// and none succeeds after.
	b.eventually(15*time.Second, "tail -1 /run/writer.log", "failed")
	b.mustSh("kill $(cat /run/writer.pid)")
	cut := time.Since(fenced)
	if res := b.sh(write); res.ExitCode == 0 {
		t.Fatal("b wrote to the export after its fence was acknowledged")
	}
	// The controller gives up (ctrl_loss_tmo 10 s: ten reconnects, each
	// of which now waits for a SYN that san's allow-list drops, b's
	// address having left it with the fence); a new connection is
	// refused.
	b.eventually(90*time.Second, "grep -l "+nqn+" /sys/class/nvme/*/subsysnqn 2>/dev/null | wc -l", "0")
	if res := b.sh("nvme connect -t tcp -a " + sanAddr + " -s 4420 -n " + nqn + " --hostnqn " + host); res.ExitCode == 0 {
		t.Fatalf("b connected again while fenced:\n%s", res.Stdout)
	}

	// Lift the fence; b's daemon starts again and registers: b is served
	// again, under the same wwid.
	etcdDelete(t, san, c.etcd, key)
	c.startDaemon(b, "")
	san.eventually(30*time.Second, "ls /sys/kernel/config/nvmet/subsystems", nqn)
	dev = strings.TrimSpace(b.mustSh(attach))
	if got := strings.TrimSpace(b.mustSh("cat /sys/block/" + path.Base(dev) + "/wwid")); got != wwid {
		t.Errorf("after the fence: wwid %q, want %q", got, wwid)
	}
	b.mustSh(write)
	t.Logf("fence acknowledged %.1fs after it was written, b's writes failing %.1fs after; test %.0fs",
		acked.Seconds(), cut.Seconds(), time.Since(began).Seconds())
}

// replicaRoundWait is longer than the daemon's target round (5 s).
const replicaRoundWait = 6 * time.Second

// etcdPut writes key through etcd's JSON gateway from n and returns the
// revision of the write (the key's ModRevision).
func etcdPut(t *testing.T, n *node, endpoint, key, value string) int64 {
	t.Helper()
	body := fmt.Sprintf(`{"key":%q,"value":%q}`, b64(key), b64(value))
	var resp struct {
		Header struct {
			Revision string `json:"revision"`
		} `json:"header"`
	}
	out := n.mustSh("curl -sf -X POST " + endpoint + "/v3/kv/put -d '" + body + "'")
	if err := json.Unmarshal([]byte(out), &resp); err != nil {
		t.Fatalf("etcd put %s: %v\n%s", key, err, out)
	}
	rev, err := strconv.ParseInt(resp.Header.Revision, 10, 64)
	if err != nil {
		t.Fatalf("etcd put %s: revision %q: %v", key, resp.Header.Revision, err)
	}
	return rev
}

func etcdDelete(t *testing.T, n *node, endpoint, key string) {
	t.Helper()
	n.mustSh("curl -sf -X POST " + endpoint + "/v3/kv/deleterange -d '" + fmt.Sprintf(`{"key":%q}`, b64(key)) + "'")
}

// nodeRecord reads a node's record through etcd's JSON gateway from n.
func nodeRecord(t *testing.T, n *node, endpoint, name string) api.Node {
	t.Helper()
	out := n.mustSh("curl -sf -X POST " + endpoint + "/v3/kv/range -d '" + fmt.Sprintf(`{"key":%q}`, b64(store.DefaultPrefix+"nodes/"+name)) + "'")
	var resp struct {
		KVs []struct {
			Value string `json:"value"`
		} `json:"kvs"`
	}
	if err := json.Unmarshal([]byte(out), &resp); err != nil || len(resp.KVs) != 1 {
		t.Fatalf("node record %s: %v\n%s", name, err, out)
	}
	raw, err := base64.StdEncoding.DecodeString(resp.KVs[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	var env struct {
		Status api.Node `json:"status"`
	}
	if err := json.Unmarshal(raw, &env); err != nil {
		t.Fatalf("node record %s: %v\n%s", name, err, raw)
	}
	return env.Status
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
