// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/engine"
	"github.com/tidecache/tidecache/pkg/store"
)

// TestFailover checks when the leader fences a volume's node and moves a
// volume on a shared origin to its replica's node: only once the node has
// been gone for FailoverAfter, the replica's node is up, the last status
// shows the mirror whole (or nothing dirty), and both nodes serving the
// fenced node storage acknowledged the fence at its revision. Never
// before: a volume moved early would start on a replica that lacks
// acknowledged writes, or beside a node still writing to the origin.
func TestFailover(t *testing.T) {
	cfg := testConfig(t, filepath.Join(t.TempDir(), "etcd"))
	cfg.Node = "leader"
	r := start(t, cfg)
	st := openStore(t, []string{r.cfg.EtcdClientURL})
	ctx := context.Background()
	d := storeDaemon(st, Config{PlacementInterval: 5 * time.Second})
	t0 := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	const noStatus = "(no status)"
	cases := []struct {
		name  string
		nodes []string
		// gone is how long ago the leader first saw the node gone (0: not
		// yet); health and mode are the node's last status.
		gone         time.Duration
		health, mode string
		// acks are the nodes that acknowledged the fence, as it will be
		// when it is written.
		acks      []string
		wantNode  string
		wantFence bool
		// outdated: the owner recorded its replica outdated before it
		// was lost (it went on writing without it).
		outdated bool
	}{
		{"owner up", []string{"a", "b", "san"}, time.Minute, "AA", "writeback", nil, "a", false, false},
		{"first seen gone", []string{"b", "san"}, 0, "AA", "writeback", nil, "a", false, false},
		{"gone less than failoverAfter", []string{"b", "san"}, 20 * time.Second, "AA", "writeback", nil, "a", false, false},
		{"gone: fenced, not yet acknowledged", []string{"b", "san"}, 40 * time.Second, "AA", "writeback", nil, "a", true, false},
		{"acknowledged by the replica's node only", []string{"b", "san"}, 40 * time.Second, "AA", "writeback", []string{"b"}, "a", true, false},
		{"acknowledged by both: failed over", []string{"b", "san"}, 40 * time.Second, "AA", "writeback", []string{"b", "san"}, "b", true, false},
		{"mirror degraded: the replica lacks writes", []string{"b", "san"}, time.Hour, "AD", "writeback", []string{"b", "san"}, "a", false, false},
		{"replica resyncing", []string{"b", "san"}, time.Hour, "Aa", "writeback", []string{"b", "san"}, "a", false, false},
		{"writethrough: nothing dirty", []string{"b", "san"}, 40 * time.Second, "", "writethrough", []string{"b", "san"}, "b", true, false},
		{"no status ever", []string{"b", "san"}, time.Hour, noStatus, "", []string{"b", "san"}, "a", false, false},
		{"replica node gone too", []string{"san"}, time.Hour, "AA", "writeback", []string{"san"}, "a", false, false},
		{"replica recorded outdated after the last status", []string{"b", "san"}, 40 * time.Second, "AA", "writeback", []string{"b", "san"}, "a", true, true},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			owner := fmt.Sprintf("a%d", i) // a fence per case
			name := fmt.Sprintf("v%d", i)
			spec := api.VolumeSpec{Name: name, Node: owner, WriteCacheBytes: 1 << 28, Protect: "peer", ReplicaNode: "b", ReplicaPool: "fast",
				SharedOrigin: sanExport(name)}
			smeta, err := st.CreateVolumeSpec(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			if tc.outdated {
				if err := st.MarkReplicaOutdated(ctx, api.ReplicaOutdated{Volume: name, Owner: owner, ReplicaNode: "b", Since: t0}, smeta.ModRevision); err != nil {
					t.Fatal(err)
				}
			}
			if tc.health != noStatus {
				if err := st.PutVolumeStatus(ctx, api.VolumeStatus{Name: name, Node: owner, Mode: tc.mode, Protection: "peer", PeerNode: "b", MirrorHealth: tc.health}); err != nil {
					t.Fatal(err)
				}
			}
			view := nodeView{drained: map[string]bool{}}
			for _, n := range tc.nodes {
				if n == "a" {
					n = owner
				}
				view.nodes = append(view.nodes, api.Node{Name: n})
			}
			gone := map[string]time.Time{}
			if tc.gone != 0 {
				gone[name] = t0.Add(-tc.gone)
			}
			round := func() {
				_, meta, err := st.GetVolumeSpec(ctx, name)
				if err != nil {
					t.Fatal(err)
				}
				cur, _, _ := st.GetVolumeSpec(ctx, name)
				var pols []api.Policy
				// Whether the round handled it matters to placement only.
				d.failover(ctx, store.Item[api.VolumeSpec]{Value: cur, Meta: meta}, view, &pols, gone, t0)
			}
			round()
			// The exporting nodes acknowledge the fence now written, as
			// their daemons would, and the leader looks again.
			if _, fmeta, err := st.GetFence(ctx, owner); err == nil {
				for j := range view.nodes {
					for _, a := range tc.acks {
						if view.nodes[j].Name == a {
							view.nodes[j].FencesApplied = []api.FenceAck{{Node: owner, Revision: fmeta.ModRevision}}
						}
					}
				}
			}
			round()
			got, _, err := st.GetVolumeSpec(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			wantNode := tc.wantNode
			if wantNode == "a" {
				wantNode = owner
			}
			if got.Node != wantNode {
				t.Errorf("volume on %s, want %s", got.Node, wantNode)
			}
			if wantNode == "b" && (got.FailedOverFrom != owner || got.ReplicaNode != "" || got.Pool != "fast") {
				t.Errorf("failed-over spec %+v: want failedOverFrom %s, pool fast, no replica node", got, owner)
			}
			f, _, err := st.GetFence(ctx, owner)
			if fenced := err == nil; fenced != tc.wantFence {
				t.Errorf("fenced = %t (%v), want %t", fenced, err, tc.wantFence)
			}
			if err == nil && (len(f.Volumes) != 1 || f.Volumes[0] != name) {
				t.Errorf("fence names %v, want [%s]", f.Volumes, name)
			}
		})
	}
}

// TestFailoverDuringMove: an owner lost while a planned move to the
// replica's node was asked for fails over like any other (the move's
// target is where the failover goes anyway), and the failed-over spec
// carries no move: a spec naming the node it moves to as its own would
// be refused, and the volume would never fail over.
func TestFailoverDuringMove(t *testing.T) {
	cfg := testConfig(t, filepath.Join(t.TempDir(), "etcd"))
	cfg.Node = "leader"
	r := start(t, cfg)
	st := openStore(t, []string{r.cfg.EtcdClientURL})
	ctx := context.Background()
	d := storeDaemon(st, Config{PlacementInterval: 5 * time.Second})
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	spec := api.VolumeSpec{Name: "db", Node: "a", WriteCacheBytes: 1 << 28, Protect: "peer", ReplicaNode: "b", ReplicaPool: "fast",
		MoveTo: "b", SharedOrigin: &api.SharedOrigin{Node: "san", Export: "lun0"}}
	if _, err := st.CreateVolumeSpec(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if err := st.PutVolumeStatus(ctx, api.VolumeStatus{Name: "db", Node: "a", Mode: "writeback", Protection: "peer", PeerNode: "b", MirrorHealth: "AA"}); err != nil {
		t.Fatal(err)
	}
	view := nodeView{drained: map[string]bool{}, nodes: []api.Node{{Name: "b"}, {Name: "san"}}}
	gone := map[string]time.Time{"db": now.Add(-time.Minute)}
	round := func() {
		cur, meta, err := st.GetVolumeSpec(ctx, "db")
		if err != nil {
			t.Fatal(err)
		}
		var pols []api.Policy
		d.failover(ctx, store.Item[api.VolumeSpec]{Value: cur, Meta: meta}, view, &pols, gone, now)
	}
	round() // fences a
	_, fmeta, err := st.GetFence(ctx, "a")
	if err != nil {
		t.Fatalf("a not fenced: %v", err)
	}
	for i := range view.nodes {
		view.nodes[i].FencesApplied = []api.FenceAck{{Node: "a", Revision: fmeta.ModRevision}}
	}
	round() // fails over
	got, _, err := st.GetVolumeSpec(ctx, "db")
	if err != nil {
		t.Fatal(err)
	}
	if got.Node != "b" || got.FailedOverFrom != "a" || got.MoveTo != "" || got.MovedFrom != "" {
		t.Fatalf("spec after the failover: node %s, failedOverFrom %q, moveTo %q, movedFrom %q; want b, a, no move",
			got.Node, got.FailedOverFrom, got.MoveTo, got.MovedFrom)
	}
}

// fakeReleaser is the engine's side of a release: the volumes it has.
type fakeReleaser struct {
	have     map[string]bool
	released []string
}

func (f *fakeReleaser) Volume(_ context.Context, name string) (engine.VolumeInfo, error) {
	if !f.have[name] {
		return engine.VolumeInfo{}, fmt.Errorf("volume %s: %w", name, engine.ErrVolumeNotFound)
	}
	return engine.VolumeInfo{Name: name}, nil
}

func (f *fakeReleaser) ReleaseVolume(_ context.Context, name string) error {
	f.released = append(f.released, name)
	delete(f.have, name)
	return nil
}

// TestReleaseFenced checks what a fenced node that comes back releases:
// the volumes its fence names that now run elsewhere, and only those. A
// volume its fence names that still runs on it (not failed over yet)
// holds the release back until the leader, seeing the node back, takes it
// out of the fence; then the node reports the fence released, and the
// leader lifts it.
func TestReleaseFenced(t *testing.T) {
	st := clusterStore(t)
	ctx := context.Background()
	d := storeDaemon(st, Config{Node: "a"})
	leader := storeDaemon(st, Config{Node: "leader"})
	rel := &fakeReleaser{have: map[string]bool{"moved": true, "kept": true, "other": true}}
	if rev := d.releaseFenced(ctx, rel); rev != 0 || len(rel.released) != 0 {
		t.Fatalf("not fenced: released %v, revision %d", rel.released, rev)
	}
	kept := api.VolumeSpec{Name: "kept", Node: "a", WriteCacheBytes: 1 << 28, Protect: "peer", SharedOrigin: sanExport("kept")}
	for _, s := range []api.VolumeSpec{
		{Name: "moved", Node: "b", WriteCacheBytes: 1 << 28, Protect: "peer", SharedOrigin: sanExport("moved"), FailedOverFrom: "a"},
		kept,
		{Name: "other", Node: "a", SizeBytes: 1 << 30},
	} {
		if _, err := st.CreateVolumeSpec(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.PutFence(ctx, api.Fence{Node: "a", Volumes: []string{"moved", "kept", "deleted"}, CreatedAt: time.Now()}, 0); err != nil {
		t.Fatal(err)
	}
	if rev := d.releaseFenced(ctx, rel); rev != 0 {
		t.Fatalf("fence reported released (revision %d) while volume kept, which it names, still runs here", rev)
	}
	if len(rel.released) != 1 || rel.released[0] != "moved" {
		t.Fatalf("released %v, want [moved]: only what runs elsewhere now", rel.released)
	}
	// The leader sees a back: kept leaves the fence, which stands for
	// what moved.
	leader.unfence(ctx, kept)
	f, meta, err := st.GetFence(ctx, "a")
	if err != nil || !slices.Equal(f.Volumes, []string{"moved", "deleted"}) {
		t.Fatalf("fence after the node came back: %+v, %v; want it naming [moved deleted]", f, err)
	}
	rev := d.releaseFenced(ctx, rel)
	if rev != meta.ModRevision {
		t.Fatalf("released revision %d, want the fence's %d", rev, meta.ModRevision)
	}
	if !rel.have["kept"] || !rel.have["other"] {
		t.Errorf("volumes left on the node %v, want kept and other", rel.have)
	}
	// The leader lifts the fence once the node's record says so, and not
	// for an older revision.
	fences, _, _, err := st.ListFences(ctx)
	if err != nil {
		t.Fatal(err)
	}
	leader.liftFences(ctx, fences, nodeView{nodes: []api.Node{{Name: "a", FenceReleased: rev - 1}}})
	if _, _, err := st.GetFence(ctx, "a"); err != nil {
		t.Fatalf("fence lifted on an older release: %v", err)
	}
	leader.liftFences(ctx, fences, nodeView{nodes: []api.Node{{Name: "a", FenceReleased: rev}}})
	if _, _, err := st.GetFence(ctx, "a"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("fence not lifted after the release: %v", err)
	}
}

// TestFenceNotLiftedBeforeRelease is finding 3 of issue 22: a fenced node
// that comes back while its volume's spec still names it (the failover
// not done yet), and whose volume is then failed over while its
// registration backs off, must not see its fence lifted on a release it
// reported before the failover: its old stack still runs, and the
// origin exported to it again would take its stale blocks. The fence is
// lifted only after it released the volume that moved.
func TestFenceNotLiftedBeforeRelease(t *testing.T) {
	st := clusterStore(t)
	ctx := context.Background()
	owner := storeDaemon(st, Config{Node: "a"})
	leader := storeDaemon(st, Config{Node: "leader"})
	rel := &fakeReleaser{have: map[string]bool{"db": true}}
	spec := api.VolumeSpec{Name: "db", Node: "a", WriteCacheBytes: 1 << 28, Protect: "peer", ReplicaNode: "b", ReplicaPool: "fast",
		SharedOrigin: &api.SharedOrigin{Node: "san", Export: "lun0"}}
	smeta, err := st.CreateVolumeSpec(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	fmeta, err := st.PutFence(ctx, api.Fence{Node: "a", Volumes: []string{"db"}, CreatedAt: time.Now()}, 0)
	if err != nil {
		t.Fatal(err)
	}
	// a is back (not registered yet) and looks at its fence.
	reported := owner.releaseFenced(ctx, rel)
	// The leader, still seeing a gone, fails db over.
	moved := spec
	moved.Node, moved.Pool, moved.ReplicaNode, moved.ReplicaPool, moved.FailedOverFrom = "b", "fast", "", "", "a"
	if _, err := st.FailOverVolumeSpec(ctx, moved, smeta.ModRevision); err != nil {
		t.Fatal(err)
	}
	// a registers with what it reported; the leader looks at the fences.
	fences, _, _, err := st.ListFences(ctx)
	if err != nil {
		t.Fatal(err)
	}
	leader.liftFences(ctx, fences, nodeView{nodes: []api.Node{{Name: "a", FenceReleased: reported}}})
	if _, _, err := st.GetFence(ctx, "a"); err != nil {
		t.Fatalf("fence lifted (%v) on a release reported before the failover, with db still on node a: %v", err, rel.have)
	}
	// a looks again: db runs on b now, a releases it, and then the fence goes.
	reported = owner.releaseFenced(ctx, rel)
	if rel.have["db"] || reported != fmeta.ModRevision {
		t.Fatalf("after the failover: db still here %v, released revision %d (want %d)", rel.have["db"], reported, fmeta.ModRevision)
	}
	leader.liftFences(ctx, fences, nodeView{nodes: []api.Node{{Name: "a", FenceReleased: reported}}})
	if _, _, err := st.GetFence(ctx, "a"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("fence not lifted after the release: %v", err)
	}
}

// TestUnfenceOwnerBack: the leader takes a volume out of the fence of its
// node when the node is back before the failover, deleting the fence when
// nothing is left in it; a volume that moved keeps its fence.
func TestUnfenceOwnerBack(t *testing.T) {
	st := clusterStore(t)
	ctx := context.Background()
	leader := storeDaemon(st, Config{Node: "leader", PlacementInterval: time.Second})
	back := api.VolumeSpec{Name: "back", Node: "a", WriteCacheBytes: 1 << 28, Protect: "peer", ReplicaNode: "b", ReplicaPool: "fast", SharedOrigin: sanExport("back")}
	moved := api.VolumeSpec{Name: "moved", Node: "b", Pool: "fast", WriteCacheBytes: 1 << 28, Protect: "peer", SharedOrigin: sanExport("moved"), FailedOverFrom: "a"}
	bmeta, err := st.CreateVolumeSpec(ctx, back)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateVolumeSpec(ctx, moved); err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutFence(ctx, api.Fence{Node: "a", Volumes: []string{"back", "moved"}, CreatedAt: time.Now()}, 0); err != nil {
		t.Fatal(err)
	}
	view := nodeView{nodes: []api.Node{{Name: "a"}, {Name: "b"}, {Name: "san"}}, drained: map[string]bool{}, fenced: map[string]bool{"a": true}}
	var pols []api.Policy
	leader.failover(ctx, store.Item[api.VolumeSpec]{Value: back, Meta: bmeta}, view, &pols, map[string]time.Time{}, time.Now())
	f, _, err := st.GetFence(ctx, "a")
	if err != nil || !slices.Equal(f.Volumes, []string{"moved"}) {
		t.Fatalf("fence %+v, %v; want it naming [moved] only", f, err)
	}
	// The fence stands for a volume that moved, even with a back.
	leader.unfence(ctx, moved)
	if f, _, err := st.GetFence(ctx, "a"); err != nil || !slices.Equal(f.Volumes, []string{"moved"}) {
		t.Fatalf("fence %+v, %v; want it kept for moved", f, err)
	}
	// Alone in the fence, a volume whose node is back takes it away.
	if _, err := st.PutFence(ctx, api.Fence{Node: "c", Volumes: []string{"back2"}, CreatedAt: time.Now()}, 0); err != nil {
		t.Fatal(err)
	}
	back2 := back
	back2.Name, back2.Node, back2.SharedOrigin = "back2", "c", sanExport("back2")
	if _, err := st.CreateVolumeSpec(ctx, back2); err != nil {
		t.Fatal(err)
	}
	leader.unfence(ctx, back2)
	if _, _, err := st.GetFence(ctx, "c"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("fence of c after its only volume left it: %v, want deleted", err)
	}
}

// fakeGuard records the legs the daemon fails, retries and rearms.
type fakeGuard struct{ failed, retried, rearmed []string }

func (f *fakeGuard) PeerLegs(context.Context) ([]engine.PeerLeg, error)  { return nil, nil }
func (f *fakeGuard) Attached(string) (bool, error)                       { return false, nil }
func (f *fakeGuard) PeerLegHeld(context.Context, string) (uint64, error) { return 0, nil }
func (f *fakeGuard) FailPeerLeg(_ context.Context, leg engine.PeerLeg) error {
	return f.record(&f.failed, leg)
}
func (f *fakeGuard) RetryPeerLeg(_ context.Context, leg engine.PeerLeg) error {
	return f.record(&f.retried, leg)
}
func (f *fakeGuard) RearmPeerLeg(_ context.Context, leg engine.PeerLeg) error {
	return f.record(&f.rearmed, leg)
}
func (f *fakeGuard) record(to *[]string, leg engine.PeerLeg) error {
	*to = append(*to, leg.Volume)
	return nil
}

// TestGoOnWithoutPeer checks the order that keeps a failover off a stale
// replica: the owner fails its peer leg (so that writes complete on one
// copy) only after the replica is recorded outdated, and never once the
// volume failed over to the replica's node; the mark is cleared once the
// leg is back in sync.
func TestGoOnWithoutPeer(t *testing.T) {
	st := clusterStore(t)
	ctx := context.Background()
	d := storeDaemon(st, Config{Node: "a"})
	for _, s := range []api.VolumeSpec{
		{Name: "mine", Node: "a", WriteCacheBytes: 1 << 28, Protect: "peer", ReplicaNode: "b", SharedOrigin: sanExport("mine")},
		{Name: "moved", Node: "b", WriteCacheBytes: 1 << 28, Protect: "peer", SharedOrigin: sanExport("moved"), FailedOverFrom: "a"},
	} {
		if _, err := st.CreateVolumeSpec(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	g := &fakeGuard{}
	now := time.Now()
	if err := d.goOnWithoutPeer(ctx, g, engine.PeerLeg{Volume: "mine", Node: "b"}, now); err != nil {
		t.Fatal(err)
	}
	if rec, _, err := st.GetReplicaOutdated(ctx, "mine"); err != nil || rec.ReplicaNode != "b" || rec.Owner != "a" {
		t.Fatalf("mark: %+v, %v; want b's replica recorded outdated by a", rec, err)
	}
	if len(g.failed) != 1 || g.failed[0] != "mine" {
		t.Fatalf("legs failed: %v, want [mine]", g.failed)
	}
	err := d.goOnWithoutPeer(ctx, g, engine.PeerLeg{Volume: "moved", Node: "b"}, now)
	if err == nil || !strings.Contains(err.Error(), "failed over to node b") {
		t.Fatalf("leg of a volume that failed over: err = %v, want a refusal", err)
	}
	if len(g.failed) != 1 {
		t.Fatalf("the leg of a volume that failed over was failed: %v", g.failed)
	}
	marked := map[string]bool{"mine": true}
	d.clearOutdated(ctx, "mine", marked)
	if _, _, err := st.GetReplicaOutdated(ctx, "mine"); !errors.Is(err, store.ErrNotFound) || marked["mine"] {
		t.Fatalf("mark after the leg is back in sync: %v (known %v), want it cleared", err, marked["mine"])
	}
}

// TestGuardRounds runs the peer-leg guard through an outage: a silent leg
// is given legDownGrace before the mark and the failure, is then left
// alone until it is attached again, and its mark is cleared only once it
// is attached and in sync; a leg dm-raid failed by itself is marked at
// once and not failed again.
func TestGuardRounds(t *testing.T) {
	st := clusterStore(t)
	ctx := context.Background()
	d := storeDaemon(st, Config{Node: "a"})
	for _, name := range []string{"db", "logs"} {
		if _, err := st.CreateVolumeSpec(ctx, api.VolumeSpec{Name: name, Node: "a", WriteCacheBytes: 1 << 28, Protect: "peer", ReplicaNode: "b", SharedOrigin: sanExport(name)}); err != nil {
			t.Fatal(err)
		}
	}
	g := &fakeGuard{}
	gs := newGuardState()
	t0 := time.Now()
	marked := func(name string) bool {
		_, _, err := st.GetReplicaOutdated(ctx, name)
		return err == nil
	}
	silent := engine.PeerLeg{Volume: "db", Node: "b"}
	steps := []struct {
		name       string
		leg        engine.PeerLeg
		at         time.Duration
		wantFailed int
		wantMark   bool
	}{
		{"first seen silent: writes wait", silent, 0, 0, false},
		{"within the grace", silent, legDownGrace / 2, 0, false},
		{"grace over: marked, then failed", silent, legDownGrace, 1, true},
		{"still silent, dm-raid still says AA: left alone", silent, 5 * time.Second, 1, true},
		{"attached again, resyncing: the mark stays", engine.PeerLeg{Volume: "db", Node: "b", Attached: true}, 6 * time.Second, 1, true},
		{"in sync: the mark is cleared", engine.PeerLeg{Volume: "db", Node: "b", Attached: true, InSync: true}, 7 * time.Second, 1, false},
	}
	for _, s := range steps {
		d.guardRound(ctx, g, gs, []engine.PeerLeg{s.leg}, t0.Add(s.at))
		if len(g.failed) != s.wantFailed || marked("db") != s.wantMark {
			t.Fatalf("%s: legs failed %v, marked %v; want %d failed, marked %v", s.name, g.failed, marked("db"), s.wantFailed, s.wantMark)
		}
	}
	// A leg dm-raid failed by itself: marked at once, never failed by
	// the guard (it is out already).
	d.guardRound(ctx, g, gs, []engine.PeerLeg{{Volume: "logs", Node: "b", Failed: true}}, t0)
	if !marked("logs") || len(g.failed) != 1 {
		t.Fatalf("leg failed by dm-raid: marked %v, legs failed %v", marked("logs"), g.failed)
	}
}

// TestGuardHeldIO runs the guard through a peer whose SSD fails writes
// while its controller stays live: the I/O its errhold slices hold counts
// as the leg not answering (the writes wait), the leg is failed only
// after the mark, held I/O is resubmitted every heldRetryEvery while the
// mark cannot be made (here: the volume failed over meanwhile), and a leg
// failed on purpose holds errors again before its mark is cleared.
func TestGuardHeldIO(t *testing.T) {
	st := clusterStore(t)
	ctx := context.Background()
	d := storeDaemon(st, Config{Node: "a"})
	for _, s := range []api.VolumeSpec{
		{Name: "db", Node: "a", WriteCacheBytes: 1 << 28, Protect: "peer", ReplicaNode: "b", SharedOrigin: sanExport("db")},
		{Name: "moved", Node: "b", WriteCacheBytes: 1 << 28, Protect: "peer", SharedOrigin: sanExport("moved"), FailedOverFrom: "a"},
	} {
		if _, err := st.CreateVolumeSpec(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	marked := func(name string) bool {
		_, _, err := st.GetReplicaOutdated(ctx, name)
		return err == nil
	}
	g := &fakeGuard{}
	gs := newGuardState()
	t0 := time.Now()
	held := engine.PeerLeg{Volume: "db", Node: "b", Attached: true, Held: 2}
	back := engine.PeerLeg{Volume: "db", Node: "b", Attached: true, InSync: true, Passing: true}
	steps := []struct {
		name            string
		leg             engine.PeerLeg
		at              time.Duration
		failed, rearmed int
		wantMark        bool
	}{
		{"the peer fails writes, the controller live: held, the writes wait", held, 0, 0, 0, false},
		{"within the grace", held, legDownGrace / 2, 0, 0, false},
		{"grace over: marked, then failed", held, legDownGrace, 1, 0, true},
		{"attached again, resyncing, errors still passed: the mark stays", engine.PeerLeg{Volume: "db", Node: "b", Attached: true, Passing: true}, 5 * time.Second, 1, 0, true},
		{"in sync: errors held again, then the mark is cleared", back, 6 * time.Second, 1, 1, false},
	}
	for _, s := range steps {
		d.guardRound(ctx, g, gs, []engine.PeerLeg{s.leg}, t0.Add(s.at))
		if len(g.failed) != s.failed || len(g.rearmed) != s.rearmed || marked("db") != s.wantMark {
			t.Fatalf("%s: failed %v, rearmed %v, marked %v; want %d failed, %d rearmed, marked %v",
				s.name, g.failed, g.rearmed, marked("db"), s.failed, s.rearmed, s.wantMark)
		}
	}
	if len(g.retried) != 0 {
		t.Fatalf("held I/O resubmitted though the mark was made at once: %v", g.retried)
	}

	// The mark cannot be made (the volume failed over meanwhile): the
	// leg is never failed, and what it holds is resubmitted every
	// heldRetryEvery, in case the peer takes it after all.
	stuck := engine.PeerLeg{Volume: "moved", Node: "b", Attached: true, Held: 1}
	for at := time.Duration(0); at <= 2*heldRetryEvery+legDownGrace; at += 250 * time.Millisecond {
		d.guardRound(ctx, g, gs, []engine.PeerLeg{stuck}, t0.Add(at))
	}
	if len(g.failed) != 1 || marked("moved") {
		t.Fatalf("leg of a volume that failed over: failed %v, marked %v; want neither", g.failed, marked("moved"))
	}
	if len(g.retried) != 2 {
		t.Fatalf("held I/O resubmitted %d times in %s, want 2 (every %s)", len(g.retried), 2*heldRetryEvery+legDownGrace, heldRetryEvery)
	}
	// A leg recorded out of sync (the mark made earlier), attached again
	// and resyncing, whose peer fails the resync writes: what it holds
	// is failed after the grace (the mark made again, idempotent), not
	// left waiting because the leg counts as failed already.
	resync := engine.PeerLeg{Volume: "db", Node: "b", Attached: true, Failed: true, Held: 1}
	failedBefore := len(g.failed)
	for at := time.Duration(0); at <= legDownGrace+time.Second; at += 250 * time.Millisecond {
		d.guardRound(ctx, g, gs, []engine.PeerLeg{resync}, t0.Add(10*time.Minute+at))
	}
	if len(g.failed) != failedBefore+1 || !marked("db") {
		t.Fatalf("held I/O on a leg recorded out of sync: failed %v (before %d), marked %v; want it failed once, marked", g.failed, failedBefore, marked("db"))
	}
	g.failed = g.failed[:failedBefore]

	// The peer took them: nothing held, the leg attached and in sync.
	d.guardRound(ctx, g, gs, []engine.PeerLeg{{Volume: "moved", Node: "b", Attached: true, InSync: true}}, t0.Add(time.Minute))
	if len(g.failed) != 1 || len(g.rearmed) != 1 {
		t.Fatalf("after the peer took the held I/O: failed %v, rearmed %v", g.failed, g.rearmed)
	}
}

// clusterStore runs a daemon with its embedded etcd (node n1) and returns
// a store on that etcd, for tests that drive the daemon's loops by hand.
func clusterStore(t *testing.T) *store.Store {
	t.Helper()
	r := start(t, testConfig(t, filepath.Join(t.TempDir(), "etcd")))
	return openStore(t, []string{r.cfg.EtcdClientURL})
}

// storeDaemon is a daemon with just a store and cfg, whose rounds a test
// calls one by one.
func storeDaemon(st *store.Store, cfg Config) *daemon {
	return &daemon{st: st, log: slog.New(slog.DiscardHandler), cfg: cfg}
}

// sanExport is the shared origin of a volume in these tests: an export of
// node san of its own (one volume per origin, store.ErrOriginTaken).
func sanExport(name string) *api.SharedOrigin {
	return &api.SharedOrigin{Node: "san", Export: "lun-" + name}
}
