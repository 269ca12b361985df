// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/blockdev"
	"github.com/tidecache/tidecache/pkg/engine"
	"github.com/tidecache/tidecache/pkg/metrics"
	"github.com/tidecache/tidecache/pkg/nvmeof"
	"github.com/tidecache/tidecache/pkg/pool"
	"github.com/tidecache/tidecache/pkg/reconcile/reconciletest"
	"github.com/tidecache/tidecache/pkg/store"
)

// TestValidateExports: each bad --export is refused, naming the key.
func TestValidateExports(t *testing.T) {
	for _, tc := range []struct {
		name    string
		exports []Export
		replica string
		want    string
	}{
		{"good", []Export{{"san", "/dev/md/san"}, {"san-2", "/dev/sdb"}}, "10.0.0.3", ""},
		{"bad name", []Export{{"San_1", "/dev/md/san"}}, "10.0.0.3", "invalid export name"},
		{"relative device", []Export{{"san", "md/san"}}, "10.0.0.3", "absolute path"},
		{"twice", []Export{{"san", "/dev/md/san"}, {"san", "/dev/sdb"}}, "10.0.0.3", "san given twice"},
		{"no replica address", []Export{{"san", "/dev/md/san"}}, "", "needs --replica-address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Default()
			cfg.Node, cfg.EmbeddedEtcd = "n1", true
			cfg.Exports, cfg.ReplicaAddress, cfg.InsecureNVMe = tc.exports, tc.replica, true
			err := cfg.Validate()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "config export")) {
				t.Errorf("Validate = %v, want %q", err, tc.want)
			}
		})
	}
	for s, want := range map[string]string{"san=/dev/md/san": "", "san": "NAME=DEVICE", "=/dev/x": "invalid export name", "san=dev": "absolute"} {
		e, err := ParseExport(s)
		if want == "" && (err != nil || e != (Export{"san", "/dev/md/san"})) || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("ParseExport(%q) = %+v, %v; want %q", s, e, err, want)
		}
	}
}

// exporter is a daemon that exports one device, a file, on a configfs
// tree, with the cluster of a running daemon (node n1) and the in-memory
// engine.
type exporter struct {
	r    *running
	d    *daemon
	root string
	st   *store.Store
	eng  *reconciletest.Engine
}

func newExporter(t *testing.T) *exporter {
	t.Helper()
	r := start(t, testConfig(t, filepath.Join(t.TempDir(), "etcd")))
	root := t.TempDir()
	for _, d := range []string{"hosts", "subsystems", "ports"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	dev := filepath.Join(t.TempDir(), "san.img")
	if err := os.WriteFile(dev, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	dmet, err := metrics.NewDaemonMetrics(prometheus.NewRegistry(), "test")
	if err != nil {
		t.Fatal(err)
	}
	x := &exporter{r: r, root: root, st: openStore(t, []string{r.cfg.EtcdClientURL}), eng: reconciletest.NewEngine("fast")}
	// The running daemon registers n1 in the background: the rounds
	// below count it among the registered nodes.
	waitFor(t, "node n1 registered", func() bool {
		_, _, err := x.st.GetNode(context.Background(), "n1")
		return err == nil
	})
	x.d = &daemon{
		cfg: Config{Node: "san", ReplicaAddress: "10.0.0.3", Exports: []Export{{Name: "san", Device: dev}}, StateDir: t.TempDir()},
		log: testLogger(t), st: x.st, eng: x.eng, dmet: dmet, inventoryNow: make(chan struct{}, 1),
		tgt: targetState{target: nvmeof.NewDirTarget(root)},
	}
	return x
}

// hosts returns the nodes the configfs tree lets reach export san.
func (x *exporter) hosts(t *testing.T) []string {
	t.Helper()
	subs, err := nvmeof.NewDirTarget(x.root).Subsystems(nvmeof.ExportNQNPrefix("san"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range subs {
		for _, h := range s.Hosts {
			n, _ := nvmeof.NodeOfHostNQN(h)
			out = append(out, n)
		}
		if s.NQN != nvmeof.ExportNQN("san", out[len(out)-1]) {
			t.Errorf("subsystem %s allows %v", s.NQN, s.Hosts)
		}
		uuid, _ := os.ReadFile(filepath.Join(x.root, "subsystems", s.NQN, "namespaces", "1", "device_uuid"))
		if string(uuid) != nvmeof.ExportUUID("san") {
			t.Errorf("subsystem %s has namespace UUID %q, want %s", s.NQN, uuid, nvmeof.ExportUUID("san"))
		}
	}
	return out
}

// published reports whether the round asked for the node record to be
// published, and clears the request.
func (x *exporter) published() bool {
	select {
	case <-x.d.inventoryNow:
		return true
	default:
		return false
	}
}

func register(t *testing.T, st *store.Store, name string) *store.Registration {
	t.Helper()
	reg, err := st.Register(context.Background(), api.Node{Name: name}, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close(context.Background()) })
	return reg
}

// TestExportsAndFences runs the target's rounds through a node's life in
// the cluster: every registered node but this one gets its own
// subsystem; a node that goes down keeps it; a fence removes it and is
// acknowledged with the fence's revision, and the node is not served
// again while fenced, registered or not; a lifted fence serves it again.
// The fence of an owner whose replica the engine cannot withhold is not
// acknowledged, and this node's own fence is left to others.
func TestExportsAndFences(t *testing.T) {
	ctx := context.Background()
	x := newExporter(t)
	d := x.d
	register(t, x.st, "a")
	regB := register(t, x.st, "b")
	x.eng.KeepReplica(pool.ReplicaRequest{Volume: "db", Owner: "a", HostNQN: nvmeof.HostNQN("a"), WriteCache: 1 << 20})
	// An export no longer configured (--export dropped) still serves b:
	// b's fence removes it too.
	old := nvmeof.Export{NQN: nvmeof.ExportNQN("old", "b"), Device: "/dev/old", HostNQN: nvmeof.HostNQN("b"), Addr: "10.0.0.3", Port: 4420, UUID: nvmeof.ExportUUID("old")}
	if err := nvmeof.NewDirTarget(x.root).Export(old); err != nil {
		t.Fatal(err)
	}
	oldServed := func() bool {
		_, err := os.Stat(filepath.Join(x.root, "subsystems", old.NQN))
		return err == nil
	}

	fence := func(node string) int64 {
		t.Helper()
		meta, err := x.st.PutFence(ctx, api.Fence{Node: node, Reason: "test", CreatedAt: time.Now()}, 0)
		if err != nil {
			t.Fatal(err)
		}
		return meta.ModRevision
	}
	var revB int64
	steps := []struct {
		name      string
		do        func()
		hosts     []string
		acks      func() []api.FenceAck
		published bool
		oldServed bool
	}{
		{"registered nodes exported", func() {}, []string{"a", "b", "n1"}, nil, true, true},
		{"nothing changed", func() {}, []string{"a", "b", "n1"}, nil, false, true},
		{"b down keeps its export", func() { regB.Close(ctx) }, []string{"a", "b", "n1"}, nil, false, true},
		{"b fenced", func() { revB = fence("b") }, []string{"a", "n1"},
			func() []api.FenceAck { return []api.FenceAck{{Node: "b", Revision: revB}} }, true, false},
		{"b back while fenced", func() { regB = register(t, x.st, "b") }, []string{"a", "n1"},
			func() []api.FenceAck { return []api.FenceAck{{Node: "b", Revision: revB}} }, false, false},
		{"own fence ignored", func() { fence("san") }, []string{"a", "n1"},
			func() []api.FenceAck { return []api.FenceAck{{Node: "b", Revision: revB}} }, false, false},
		{"a fenced, its replica still served", func() { fence("a") }, []string{"n1"},
			func() []api.FenceAck { return []api.FenceAck{{Node: "b", Revision: revB}} }, true, false},
		{"b's fence lifted", func() {
			if err := x.st.DeleteFence(ctx, "b", revB); err != nil {
				t.Fatal(err)
			}
		}, []string{"b", "n1"}, nil, true, false},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			s.do()
			d.targetRound(ctx)
			if got := x.hosts(t); !slices.Equal(got, s.hosts) {
				t.Errorf("exported to %v, want %v", got, s.hosts)
			}
			exports, acks := d.exportRecord()
			var want []api.FenceAck
			if s.acks != nil {
				want = s.acks()
			}
			if !slices.Equal(acks, want) {
				t.Errorf("fences applied %+v, want %+v", acks, want)
			}
			if len(exports) != 1 || exports[0].Name != "san" || exports[0].UUID != nvmeof.ExportUUID("san") ||
				exports[0].SizeBytes != 1<<20 || !slices.Equal(exports[0].Hosts, s.hosts) || exports[0].Error != "" {
				t.Errorf("exports %+v, want san (%s, 1 MiB) to %v", exports, nvmeof.ExportUUID("san"), s.hosts)
			}
			if got, want := oldServed(), s.oldServed; got != want {
				t.Errorf("unconfigured export to b in place: %v, want %v", got, want)
			}
			if got := x.published(); got != s.published {
				t.Errorf("published at once: %v, want %v", got, s.published)
			}
		})
	}
}

// TestFenceWatched: the target loop applies a fence as soon as it is
// written, not at its next round, and serves the node again as soon as
// the fence is deleted.
func TestFenceWatched(t *testing.T) {
	x := newExporter(t)
	register(t, x.st, "b")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { x.d.serveTarget(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	within := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(replicaInterval / 2)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s not within %s", what, replicaInterval/2)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// Once the first round is done, the watch follows from its revision.
	within("export to b", func() bool { exports, _ := x.d.exportRecord(); return len(exports) == 1 })
	meta, err := x.st.PutFence(context.Background(), api.Fence{Node: "b", CreatedAt: time.Now()}, 0)
	if err != nil {
		t.Fatal(err)
	}
	within("fence of b applied", func() bool {
		_, acks := x.d.exportRecord()
		return slices.Equal(acks, []api.FenceAck{{Node: "b", Revision: meta.ModRevision}}) && !slices.Contains(x.hosts(t), "b")
	})
	if err := x.st.DeleteFence(context.Background(), "b", meta.ModRevision); err != nil {
		t.Fatal(err)
	}
	within("b served again", func() bool {
		_, acks := x.d.exportRecord()
		return len(acks) == 0 && slices.Contains(x.hosts(t), "b")
	})
}

// withholdingEngine is the in-memory engine with the replica half of the
// real one's fencing: ServeReplicasFenced exports a replica to its owner
// unless the owner is fenced.
type withholdingEngine struct {
	*reconciletest.Engine
}

func (w withholdingEngine) ServeReplicasFenced(ctx context.Context, addr string, port int, fenced map[string]bool) ([]engine.ReplicaInfo, error) {
	served, err := w.ServeReplicas(ctx, addr, port)
	for i, r := range served {
		served[i].Fenced, served[i].Exported = fenced[r.Owner], !fenced[r.Owner]
	}
	return served, err
}

// TestFencesSurviveRestartWithoutEtcd: a node's target that withheld the
// replica of a fenced owner keeps withholding it after the daemon
// restarts while etcd cannot be reached: the fence is read from the state
// directory. (Lifting a fence is TestExportsAndFences's last step.)
func TestFencesSurviveRestartWithoutEtcd(t *testing.T) {
	ctx := context.Background()
	x := newExporter(t)
	x.eng.KeepReplica(pool.ReplicaRequest{Volume: "db", Owner: "a", HostNQN: nvmeof.HostNQN("a"), WriteCache: 1 << 20})
	x.d.eng = withholdingEngine{x.eng}
	served := func(d *daemon) bool {
		t.Helper()
		d.mu.Lock()
		defer d.mu.Unlock()
		for _, r := range d.replicas {
			if r.Volume == "db" {
				return r.Exported
			}
		}
		t.Fatal("replica db not reported")
		return false
	}
	x.d.targetRound(ctx)
	if !served(x.d) {
		t.Fatal("replica of an owner not fenced: not exported")
	}
	_, err := x.st.PutFence(ctx, api.Fence{Node: "a", Reason: "test", CreatedAt: time.Now()}, 0)
	if err != nil {
		t.Fatal(err)
	}
	x.d.targetRound(ctx)
	if served(x.d) {
		t.Fatal("replica of fenced owner a still exported")
	}

	// The daemon restarts and etcd does not answer: the cluster's
	// etcd (the running daemon's, embedded) is stopped.
	if err := x.r.stop(); err != nil {
		t.Fatal(err)
	}
	restarted := &daemon{cfg: x.d.cfg, log: x.d.log, st: x.st, eng: x.d.eng, dmet: x.d.dmet,
		inventoryNow: make(chan struct{}, 1), tgt: targetState{target: x.d.tgt.target}}
	restarted.restoreFences()
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	restarted.targetRound(rctx)
	if served(restarted) {
		t.Fatal("after a restart without etcd the replica of fenced owner a is exported again")
	}
	if got := restarted.tgt.fencedSet(); !got["a"] {
		t.Errorf("fenced after the restart: %v, want a", got)
	}
}

// TestExportRefusesDeviceInUse: a device given with --export that is in
// use on this node (mounted, a member of a local pool or array, open, or
// exported by another nvmet subsystem) is not exported, and the node
// record says why; once free it is, and an export in place is not
// checked again (its own subsystems are a use of it).
func TestExportRefusesDeviceInUse(t *testing.T) {
	ctx := context.Background()
	x := newExporter(t)
	register(t, x.st, "a")
	var checked []string
	inUse := true
	x.d.tgt.checkUnused = func(_ context.Context, path string, own func(string) bool) error {
		checked = append(checked, path)
		if !own(nvmeof.ExportNQN("san", "a")) || own("nqn.2026-11.io.tidecache:export:other:a") {
			t.Errorf("own subsystems: the export's own not allowed, or another allowed")
		}
		if inUse {
			return &blockdev.InUseError{Path: path, Reason: "held by dm-3 (tc-fast-ssd0)"}
		}
		return nil
	}
	x.d.targetRound(ctx)
	if got := x.hosts(t); len(got) != 0 {
		t.Fatalf("device in use exported to %v", got)
	}
	exports, _ := x.d.exportRecord()
	if len(exports) != 1 || !strings.Contains(exports[0].Error, "held by dm-3 (tc-fast-ssd0)") || len(exports[0].Hosts) != 0 {
		t.Fatalf("node record's export %+v, want the reason and no host", exports)
	}
	// Still in use: checked again only once its wait is over, 5 s and
	// then twice as long each time, and the reason is logged once.
	start := time.Now()
	now := start
	x.d.tgt.now = func() time.Time { return now }
	var logs strings.Builder
	x.d.log = slog.New(slog.NewTextHandler(&logs, nil))
	for _, c := range []struct {
		at    time.Duration
		check bool
	}{{0, false}, {4 * time.Second, false}, {5 * time.Second, true}, {14 * time.Second, false}, {15 * time.Second, true}, {34 * time.Second, false}, {35 * time.Second, true}} {
		now = start.Add(c.at)
		n := len(checked)
		x.d.targetRound(ctx)
		if got := len(checked) > n; got != c.check {
			t.Errorf("round at %v: device checked %v, want %v", c.at, got, c.check)
		}
		if got := x.hosts(t); len(got) != 0 {
			t.Fatalf("device in use exported to %v", got)
		}
	}
	if n := strings.Count(logs.String(), "export not fully served"); n != 0 {
		t.Errorf("the same refusal logged %d more times, want 0 (once, at the first round):\n%s", n, logs.String())
	}
	inUse = false
	now = now.Add(time.Minute)
	x.d.targetRound(ctx)
	if got := x.hosts(t); !slices.Equal(got, []string{"a", "n1"}) {
		t.Fatalf("free device exported to %v, want [a n1]", got)
	}
	if !strings.Contains(logs.String(), "export served again") {
		t.Errorf("no log line says the export is served again:\n%s", logs.String())
	}
	inUse = true
	n := len(checked)
	x.d.targetRound(ctx)
	if got := x.hosts(t); !slices.Equal(got, []string{"a", "n1"}) || len(checked) != n {
		t.Fatalf("an export in place: hosts %v, checked again %v", got, len(checked) != n)
	}
}
