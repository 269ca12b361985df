// SPDX-License-Identifier: Apache-2.0

//go:build vm

package vm_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidecache/tidecache/internal/testnet"
	"github.com/tidecache/tidecache/tests/vm/harness"
)

// binaries builds tidectl, tidecached and the test tools once per test
// process into a directory the guest sees through its 9p root.
var binaries = sync.OnceValues(func() (string, error) {
	cache, err := harness.CacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, "bin")
	err = harness.BuildBinaries(contextBackground(), dir,
		"./cmd/tidectl", "./cmd/tidecached", "./tests/tools/crashwriter", "./tests/tools/peerleg")
	return dir, err
})

// nodeSpec describes the disks of a test node: HDDs for the RAID10 origin
// first (/dev/vda...), then SSDs, then spare disks.
type nodeSpec struct {
	HDDs    int   // disks for the RAID10 origin
	HDDSize int64 // bytes each
	SSDs    []int64
	Spares  []int64
	// SparesHostCached attaches the spares through the host's page cache
	// (harness.Disk.HostPageCache): for spares that hold a test's records.
	SparesHostCached bool
	HDDIOPS          int64 // per-disk IOPS cap (0 = none)
	MemoryMB         int
}

// node is a booted test VM with tidecache's binaries on its PATH.
type node struct {
	*harness.VM
	t    testing.TB
	bin  string
	dir  string
	spec nodeSpec
}

// hubAddr returns a free local address for the hub of a test network
// (harness.Network.Listen), which the first VM listens on.
func hubAddr(t testing.TB) string {
	t.Helper()
	return testnet.LoopbackAddr(t)
}

// diskName returns the guest device of the i-th disk: /dev/vda, /dev/vdb...
func diskName(i int) string { return "/dev/" + harness.GuestDiskName(i) }

func (s nodeSpec) disks(dir string) []harness.Disk {
	var out []harness.Disk
	for i := 0; i < s.HDDs; i++ {
		out = append(out, harness.Disk{Path: filepath.Join(dir, fmt.Sprintf("hdd%d.img", i)), Size: s.HDDSize, IOPSLimit: s.HDDIOPS})
	}
	for i, size := range s.SSDs {
		out = append(out, harness.Disk{Path: filepath.Join(dir, fmt.Sprintf("ssd%d.img", i)), Size: size})
	}
	for i, size := range s.Spares {
		out = append(out, harness.Disk{Path: filepath.Join(dir, fmt.Sprintf("spare%d.img", i)), Size: size, HostPageCache: s.SparesHostCached})
	}
	return out
}

// hdds, ssds and spares return the guest device paths of each disk group.
func (n *node) hdds() []string { return n.devs(0, n.spec.HDDs) }
func (n *node) ssds() []string { return n.devs(n.spec.HDDs, len(n.spec.SSDs)) }
func (n *node) spares() []string {
	return n.devs(n.spec.HDDs+len(n.spec.SSDs), len(n.spec.Spares))
}

func (n *node) devs(first, count int) []string {
	var out []string
	for i := first; i < first+count; i++ {
		out = append(out, diskName(i))
	}
	return out
}

// besideTests names the scenarios that called besideAnother.
var besideTests sync.Map

// besideAnother lets a scenario that times nothing run beside another one
// (t.Parallel; doc.go), in one of the lanes handed out longest first
// (lanes): about is roughly how long it runs under CI. Its VMs get one
// vCPU instead of two: two VMs of two vCPUs on CI's 2-core host
// oversubscribe it, and a guest then spins on locks held by a vCPU thread
// the host has descheduled (a cluster of three VMs ran 1.2 times faster
// with one vCPU each).
func besideAnother(t *testing.T, about time.Duration) {
	t.Helper()
	t.Parallel()
	besideTests.Store(t.Name(), true)
	beside.acquire(t, about)
}

// vmCPUs is the vCPU count for t's VMs: 0 (the harness's default) for a
// scenario that runs alone, 1 for one that runs beside another.
func vmCPUs(t testing.TB) int {
	name, _, _ := strings.Cut(t.Name(), "/")
	if _, ok := besideTests.Load(name); ok {
		return 1
	}
	return 0
}

// bootNode boots a VM with the disks of spec in a fresh test directory.
func bootNode(t testing.TB, spec nodeSpec) *node {
	t.Helper()
	bin, err := binaries()
	if err != nil {
		t.Fatalf("build binaries: %v", err)
	}
	dir := harness.TestDir(t)
	return bootNodeIn(t, dir, bin, spec)
}

// bootNodeIn boots (or re-boots) a VM on the images in dir.
func bootNodeIn(t testing.TB, dir, bin string, spec nodeSpec) *node {
	t.Helper()
	mem := spec.MemoryMB
	if mem == 0 {
		mem = 1536
	}
	v := harness.MustBoot(t, harness.Config{Name: "node", Dir: dir, Disks: spec.disks(dir), MemoryMiB: mem, CPUs: vmCPUs(t)})
	return &node{VM: v, t: t, bin: bin, dir: dir, spec: spec}
}

// sh runs a shell command with tidecache's binaries on the PATH.
func (n *node) sh(cmd string) harness.Result {
	n.t.Helper()
	res, err := n.Run(n.t.Context(), "export PATH="+n.bin+":$PATH; "+cmd)
	if err != nil {
		n.t.Fatalf("run %q: %v", cmd, err)
	}
	return res
}

// mustSh runs a shell command and fails the test on a non-zero exit.
func (n *node) mustSh(cmd string) string {
	n.t.Helper()
	res := n.sh(cmd)
	if res.ExitCode != 0 {
		n.t.Fatalf("%q: exit %d\nstdout:\n%s\nstderr:\n%s", cmd, res.ExitCode, res.Stdout, res.Stderr)
	}
	return res.Stdout
}

// tidectl runs tidectl with the arguments (shell-quoted by the caller).
func (n *node) tidectl(args string) harness.Result {
	n.t.Helper()
	return n.sh("tidectl " + args)
}

func (n *node) mustTidectl(args string) string {
	n.t.Helper()
	return n.mustSh("tidectl " + args)
}

// wantFail runs tidectl expecting a non-zero exit whose stderr contains
// every fragment; it returns stderr.
func (n *node) wantFail(args string, fragments ...string) string {
	n.t.Helper()
	res := n.tidectl(args)
	if res.ExitCode == 0 {
		n.t.Fatalf("tidectl %s: succeeded, want failure\nstdout:\n%s", args, res.Stdout)
	}
	for _, f := range fragments {
		if !strings.Contains(res.Stderr, f) {
			n.t.Fatalf("tidectl %s: stderr does not mention %q:\n%s", args, f, res.Stderr)
		}
	}
	return res.Stderr
}

// createPool makes the standard pool: RAID10 over the HDDs, all SSDs.
func (n *node) createPool(name string) {
	n.t.Helper()
	args := "pool create " + name + " --assume-clean --raid10 " + strings.Join(n.hdds(), ",")
	for _, s := range n.ssds() {
		args += " --ssd " + s
	}
	n.mustTidectl(args)
}

// volumeJSON is the part of `tidectl -o json volume show` tests read.
type volumeJSON struct {
	Name       string `json:"name"`
	Mode       string `json:"mode"`
	State      string `json:"state"`
	Error      string `json:"error"`
	Device     string `json:"device"`
	SizeBytes  uint64 `json:"size_bytes"`
	WriteCache *struct {
		DirtyBlocks uint64 `json:"dirty_blocks"`
		Writes      uint64 `json:"writes"`
		Reads       uint64 `json:"reads"`
		ReadHits    uint64 `json:"read_hits"`
		Error       int64  `json:"error"`
	} `json:"write_cache"`
	ReadCache *struct {
		ReadHits   uint64 `json:"read_hits"`
		ReadMisses uint64 `json:"read_misses"`
	} `json:"read_cache"`
	ReadFirst *struct {
		HeldTotal uint64 `json:"held_total"`
		MaxHoldMs uint64 `json:"max_hold_ms"`
	} `json:"read_first"`
	Protection string `json:"protection"`
	Mirror     *struct {
		Health     string `json:"health"`
		Copies     int    `json:"copies"`
		Degraded   bool   `json:"degraded"`
		SyncAction string `json:"sync_action"`
		OutOfSync  []int  `json:"out_of_sync"`
	} `json:"mirror"`
}

func (n *node) volume(name string) volumeJSON {
	n.t.Helper()
	var v volumeJSON
	out := n.mustTidectl("-o json volume show " + name)
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		n.t.Fatalf("parse volume show: %v\n%s", err, out)
	}
	return v
}

// poolGeneration returns the layout generation of a pool.
func (n *node) poolGeneration(name string) uint64 {
	n.t.Helper()
	var p struct {
		Generation uint64 `json:"generation"`
	}
	out := n.mustTidectl("-o json pool show " + name)
	var ps []json.RawMessage
	if err := json.Unmarshal([]byte(out), &ps); err != nil || len(ps) != 1 {
		n.t.Fatalf("parse pool show: %v\n%s", err, out)
	}
	if err := json.Unmarshal(ps[0], &p); err != nil {
		n.t.Fatal(err)
	}
	return p.Generation
}

// dmDevices lists the dm device names present in the guest.
func (n *node) dmDevices() []string {
	n.t.Helper()
	out := strings.TrimSpace(n.mustSh("dmsetup ls | awk '$1 != \"No\" {print $1}' | sort"))
	if out == "" {
		return nil
	}
	return strings.Fields(out)
}

// fio runs fio with the given arguments and fails the test on error.
func (n *node) fio(args string) string {
	n.t.Helper()
	return n.mustSh("fio --output-format=normal " + args)
}
