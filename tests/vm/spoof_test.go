// SPDX-License-Identifier: Apache-2.0

//go:build vm

package vm_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidecache/tidecache/pkg/nvmeof"
	"github.com/tidecache/tidecache/tests/vm/harness"
)

// TestSpoofedHostNQNDropped checks issue 22's finding 7 on a kernel
// without NVMe in-band authentication (Debian's 6.1), with three VMs on
// one network: san exports its disk (--export, --insecure-nvme) and runs
// etcd, b is a node of the cluster, c a machine on the same network that
// is not, and presents b's host NQN, which anyone can derive from b's
// name:
//   - san's allow-list (nftables table inet tidecache_nvme) admits b's
//     address, which b's node record publishes, and not c's; san's record
//     and metrics say it serves NVMe/TCP without in-band authentication;
//   - b attaches its subsystem and writes; c cannot even reach the port,
//     and its connect as b is refused.
func TestSpoofedHostNQNDropped(t *testing.T) {
	bin, err := binaries()
	if err != nil {
		t.Fatal(err)
	}
	const sanAddr, bAddr, cAddr = "10.77.0.1", "10.77.0.2", "10.77.0.3"
	// A kernel without in-band authentication, whatever the suite boots
	// (TestSpoofedHostNQNUnauthenticated covers the kernels with it).
	c := &peerCluster{t: t, dir: harness.TestDir(t), bin: bin, hub: hubAddr(t), kernel: harness.Kernel61,
		aSpec: nodeSpec{HDDs: 1, HDDSize: 64 << 20}, etcd: "http://" + sanAddr + ":2389", daemonArgs: "--lease-ttl 4s"}
	c.a = c.boot("san", c.aSpec, sanAddr, true)
	c.b = c.boot("b", c.bSpec, bAddr, false)
	spoofer := c.boot("c", nodeSpec{}, cAddr, false)
	defer c.dumpLogs()
	san, b := c.a, c.b
	san.mustSh("mkdir -p /run/etcd && tidecached etcd --insecure-etcd --client-url " + c.etcd + " --data-dir /run/etcd/data >>/run/etcd.log 2>&1 &")
	san.eventually(60*time.Second, "tidectl --etcd-endpoints "+c.etcd+" node list", "NODE")
	if res := san.sh("timeout 30 tidecached run --node san --etcd-endpoints " + c.etcd + " --replica-address " + sanAddr + " --export san=" + san.hdds()[0]); res.ExitCode == 0 ||
		!strings.Contains(res.Stdout+res.Stderr, "--insecure-nvme") {
		t.Fatalf("a network --replica-address without --insecure-nvme: exit %d, want a refusal naming the flag:\n%s%s", res.ExitCode, res.Stdout, res.Stderr)
	}
	c.startDaemon(san, "--replica-address "+sanAddr+" --insecure-nvme --export san="+san.hdds()[0])
	c.startDaemon(b, "")

	nqn, host := nvmeof.ExportNQN("san", "b"), nvmeof.HostNQN("b")
	san.eventually(30*time.Second, "ls /sys/kernel/config/nvmet/subsystems", nqn)
	san.eventually(30*time.Second, "nft list set inet tidecache_nvme peers4", bAddr)
	if set := san.mustSh("nft list set inet tidecache_nvme peers4"); strings.Contains(set, cAddr) {
		t.Fatalf("san's allow-list admits c, which is no node of the cluster:\n%s", set)
	}
	if rec := nodeRecord(t, san, c.etcd, "san"); !rec.NVMeUnauthenticated {
		t.Errorf("san's record does not say it serves NVMe/TCP without authentication: %+v", rec)
	}
	if rec := nodeRecord(t, san, c.etcd, "b"); !slices.Contains(rec.Addresses, bAddr) {
		t.Errorf("b's record publishes addresses %v, want %s among them", rec.Addresses, bAddr)
	}
	metrics := san.mustSh("curl -sf http://127.0.0.1:9540/metrics | grep -E '^tidecache_nvme_(unauthenticated|allowed_addresses) '")
	if !strings.Contains(metrics, "tidecache_nvme_unauthenticated 1") || !strings.Contains(metrics, "tidecache_nvme_allowed_addresses 1") {
		t.Errorf("san's metrics:\n%s\nwant tidecache_nvme_unauthenticated 1 and tidecache_nvme_allowed_addresses 1", metrics)
	}

	// b, allowed, attaches and writes.
	dev := strings.TrimSpace(b.mustSh("modprobe nvme-tcp && peerleg attach -wait 10s -nqn " + nqn + " -host " + host + " -addr " + sanAddr))
	b.mustSh("dd if=/dev/urandom of=" + dev + " bs=4k count=1 oflag=direct,dsync status=none")

	// c, on the same network, presents b's host NQN: the port does not
	// even answer it.
	reach := "timeout 5 bash -c '</dev/tcp/" + sanAddr + "/4420' && echo reached"
	if out := b.sh(reach).Stdout; !strings.Contains(out, "reached") {
		t.Fatalf("b cannot reach san's NVMe/TCP port, though allowed")
	}
	if out := spoofer.sh(reach).Stdout; strings.Contains(out, "reached") {
		t.Fatal("c reached san's NVMe/TCP port")
	}
	start := time.Now()
	if res := spoofer.sh("modprobe nvme-tcp && timeout 60 nvme connect -t tcp -a " + sanAddr + " -s 4420 -n " + nqn + " --hostnqn " + host); res.ExitCode == 0 {
		t.Fatalf("c connected to b's subsystem with b's host NQN:\n%s", res.Stdout)
	}
	if out := spoofer.sh("grep -l " + nqn + " /sys/class/nvme/*/subsysnqn 2>/dev/null | wc -l").Stdout; strings.TrimSpace(out) != "0" {
		t.Fatalf("c has a controller of b's subsystem")
	}
	t.Logf("c's connect as b refused in %.1fs; b served", time.Since(start).Seconds())
}
