// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/store"
)

// TestWantsReplica checks which placed specs the leader gives a replica:
// protect peer, and a write cache naming no protection (the default) while
// the policy names none and the volume does not exist yet; never a spec
// already placed, without a write cache, naming another protection, or
// whose volume exists with the protection it was created with.
func TestWantsReplica(t *testing.T) {
	r := start(t, testConfig(t, filepath.Join(t.TempDir(), "etcd")))
	st := openStore(t, []string{r.cfg.EtcdClientURL})
	ctx := context.Background()
	d := &daemon{st: st, log: slog.New(slog.DiscardHandler)}
	if _, err := st.PutPolicy(ctx, api.Policy{Name: "pinned", Protect: "local"}, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateVolumeSpec(ctx, api.VolumeSpec{Name: "old", Node: "n9", SizeBytes: 1 << 30, WriteCacheBytes: 1 << 28}); err != nil {
		t.Fatal(err)
	}
	if err := st.PutVolumeStatus(ctx, api.VolumeStatus{Name: "old", Node: "n9", Protection: "local"}); err != nil {
		t.Fatal(err)
	}
	base := api.VolumeSpec{Name: "db", Node: "n1", SizeBytes: 1 << 30, WriteCacheBytes: 1 << 28}
	with := func(f func(*api.VolumeSpec)) api.VolumeSpec { s := base; f(&s); return s }
	cases := []struct {
		name string
		spec api.VolumeSpec
		want bool
	}{
		{"protect peer", with(func(s *api.VolumeSpec) { s.Protect = "peer" }), true},
		{"default, new volume", base, true},
		{"already placed", with(func(s *api.VolumeSpec) { s.Protect, s.ReplicaNode = "peer", "n2" }), false},
		{"protect local", with(func(s *api.VolumeSpec) { s.Protect = "local" }), false},
		{"no write cache", with(func(s *api.VolumeSpec) { s.WriteCacheBytes = 0 }), false},
		{"policy names a protection", with(func(s *api.VolumeSpec) { s.Policy = "pinned" }), false},
		{"volume exists with its protection", with(func(s *api.VolumeSpec) { s.Name = "old" }), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var pols []api.Policy
			if got := d.wantsReplica(ctx, tc.spec, &pols); got != tc.want {
				t.Errorf("wantsReplica = %v, want %v", got, tc.want)
			}
		})
	}
}

// leaderOnly runs a daemon whose node, "leader", owns none of a test's
// volumes (were it their owner, its reconciler would write their statuses
// too, and race what each case sets), and returns a daemon on its store
// for the test to call the leader's steps on, and the store.
func leaderOnly(t *testing.T) (*daemon, *store.Store) {
	t.Helper()
	cfg := testConfig(t, filepath.Join(t.TempDir(), "etcd"))
	cfg.Node = "leader"
	r := start(t, cfg)
	st := openStore(t, []string{r.cfg.EtcdClientURL})
	return &daemon{st: st, log: slog.New(slog.DiscardHandler), cfg: Config{PlacementInterval: 5 * time.Second}}, st
}

// TestReprotect checks when the leader moves a replica: once its node has
// been gone for the policy's ReprotectAfter, or at once when that node is
// drained, while the owner is up and the owner's leg holds every write, to
// a node that can keep it and is not drained; never while the replica's
// node is up and not drained, nor while the owner is gone too.
func TestReprotect(t *testing.T) {
	d, st := leaderOnly(t)
	ctx := context.Background()
	if _, err := st.PutPolicy(ctx, api.Policy{Name: "quick", ReprotectAfter: api.Duration(time.Minute)}, 0); err != nil {
		t.Fatal(err)
	}
	node := func(name string) api.Node {
		return api.Node{Name: name, ReplicaAddress: "10.0.0.9:4420", Pools: []api.PoolInventory{{Name: "fast", SSDFreeBytes: 1 << 30}}}
	}
	t0 := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	const noStatus = "(no status)"
	cases := []struct {
		name    string
		policy  string
		nodes   []string
		drained []string
		// gone is how long ago the leader first saw the replica's node
		// gone (0: not seen gone yet).
		gone time.Duration
		// health is the owner's mirror health in its status.
		health   string
		wantNode string
		wantLost bool
	}{
		{"replica node up", "", []string{"n1", "n2", "n3"}, nil, 10 * time.Minute, "AA", "n2", false},
		{"first seen gone", "", []string{"n1", "n3"}, nil, 0, "AD", "n2", true},
		{"gone less than 5m", "", []string{"n1", "n3"}, nil, 4 * time.Minute, "AD", "n2", true},
		{"gone 5m", "", []string{"n1", "n3"}, nil, 5 * time.Minute, "AD", "n3", false},
		{"policy: gone 1m", "quick", []string{"n1", "n3"}, nil, time.Minute, "AD", "n3", false},
		{"volume not running a mirror", "", []string{"n1", "n3"}, nil, 5 * time.Minute, "", "n3", false},
		{"no other node", "", []string{"n1"}, nil, 10 * time.Minute, "AD", "n2", true},
		{"owner gone too", "", []string{"n3"}, nil, 10 * time.Minute, "AD", "n2", false},
		{"owner's leg resyncing from the lost one", "", []string{"n1", "n3"}, nil, 10 * time.Minute, "aD", "n2", true},
		{"owner wrote no status yet", "", []string{"n1", "n3"}, nil, 10 * time.Minute, noStatus, "n2", true},
		{"replica node drained: moved at once", "", []string{"n1", "n2", "n3"}, []string{"n2"}, 0, "AA", "n3", false},
		{"only drained nodes to move to", "", []string{"n1", "n2", "n3"}, []string{"n2", "n3"}, 0, "AA", "n2", true},
		{"gone, the other node drained", "", []string{"n1", "n3"}, []string{"n3"}, 10 * time.Minute, "AD", "n2", true},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name := fmt.Sprintf("v%d", i)
			spec := api.VolumeSpec{Name: name, Node: "n1", Policy: tc.policy, SizeBytes: 1 << 30, WriteCacheBytes: 1 << 28,
				Protect: "peer", ReplicaNode: "n2", ReplicaPool: "fast"}
			if _, err := st.CreateVolumeSpec(ctx, spec); err != nil {
				t.Fatal(err)
			}
			if tc.health != noStatus {
				if err := st.PutVolumeStatus(ctx, api.VolumeStatus{Name: name, Node: "n1", Protection: "peer", MirrorHealth: tc.health}); err != nil {
					t.Fatal(err)
				}
			}
			_, meta, err := st.GetVolumeSpec(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			view := nodeView{drained: map[string]bool{}}
			for _, n := range tc.nodes {
				view.nodes = append(view.nodes, node(n))
			}
			for _, n := range tc.drained {
				view.drained[n] = true
			}
			lost := map[string]time.Time{}
			if tc.gone != 0 {
				lost[name] = t0.Add(-tc.gone)
			}
			var pols []api.Policy
			d.reprotect(ctx, store.Item[api.VolumeSpec]{Value: spec, Meta: meta}, 1, view, &pols, lost, t0)
			got, _, err := st.GetVolumeSpec(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			if got.ReplicaNode != tc.wantNode || got.ReplicaPool != "fast" {
				t.Errorf("replica on %s/%s, want %s/fast", got.ReplicaNode, got.ReplicaPool, tc.wantNode)
			}
			if _, ok := lost[name]; ok != tc.wantLost {
				t.Errorf("still counted as lost: %t, want %t", ok, tc.wantLost)
			}
		})
	}
}

// TestReprotectCallsOffMove: a replica moved off its node (drained here)
// while a planned move to that node was asked for takes the move with
// it: the spec gets the replica's new place and no move, instead of a
// spec the store refuses (a move must go to the replica's node), which
// would keep the replica on the drained node.
func TestReprotectCallsOffMove(t *testing.T) {
	d, st := leaderOnly(t)
	ctx := context.Background()
	spec := api.VolumeSpec{Name: "db", Node: "n1", WriteCacheBytes: 1 << 28, Protect: "peer", ReplicaNode: "n2", ReplicaPool: "fast",
		MoveTo: "n2", SharedOrigin: &api.SharedOrigin{Node: "san", Export: "lun0"}}
	meta, err := st.CreateVolumeSpec(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.PutVolumeStatus(ctx, api.VolumeStatus{Name: "db", Node: "n1", Protection: "peer", MirrorHealth: "AA"}); err != nil {
		t.Fatal(err)
	}
	view := nodeView{drained: map[string]bool{"n2": true}}
	for _, n := range []string{"n1", "n2", "n3"} {
		view.nodes = append(view.nodes, api.Node{Name: n, ReplicaAddress: "10.0.0.9:4420", Pools: []api.PoolInventory{{Name: "fast", SSDFreeBytes: 1 << 30}}})
	}
	view.nodes = append(view.nodes, api.Node{Name: "san", Exports: []api.ExportInventory{{Name: "lun0", Hosts: []string{"n1", "n2", "n3"}}}})
	var pols []api.Policy
	d.reprotect(ctx, store.Item[api.VolumeSpec]{Value: spec, Meta: meta}, 1, view, &pols, map[string]time.Time{}, time.Now())
	got, _, err := st.GetVolumeSpec(ctx, "db")
	if err != nil {
		t.Fatal(err)
	}
	if got.ReplicaNode != "n3" || got.MoveTo != "" || got.Node != "n1" {
		t.Fatalf("spec after the drained replica node's re-protection: node %s, replica on %s, moveTo %q; want n1, n3, no move",
			got.Node, got.ReplicaNode, got.MoveTo)
	}
	if c := got.MoveCalledOff; c == nil || c.To != "n2" || !strings.Contains(c.Why, "re-protected on node n3") {
		t.Fatalf("spec's record of the called-off move: %+v, want one for n2 naming the replica's new node", c)
	}
}

// ownerWithoutSSD is the record of a node whose pool is its origin alone;
// replicaPeer one that keeps replicas, with free bytes of SSD.
func ownerWithoutSSD(name string) api.Node {
	return api.Node{Name: name, Pools: []api.PoolInventory{{Name: "slow", Origin: "/dev/md0", OriginFreeBytes: 1 << 40, NoSSDs: true}}}
}

func replicaPeer(name string, free uint64) api.Node {
	return api.Node{Name: name, ReplicaAddress: "10.0.0.9:4420", Pools: []api.PoolInventory{{Name: "fast", SSDFreeBytes: free}}}
}

// TestPlaceReplicaOnPeers: for a volume whose node has no SSD the leader
// places both legs of its write cache in one update, on two other nodes
// (leg 1 where a replica would go, leg 0 on the next), keeping a leg 1
// node the user named; with only one other node it places nothing, so
// the owner never creates on one leg.
func TestPlaceReplicaOnPeers(t *testing.T) {
	d, st := leaderOnly(t)
	ctx := context.Background()
	owner, peer := ownerWithoutSSD("a"), replicaPeer
	cases := []struct {
		name       string
		named      string // leg 1's node named by the user
		nodes      []api.Node
		leg0, leg1 string // "" for nothing placed
	}{
		{"two peers", "", []api.Node{owner, peer("b", 8<<30), peer("c", 4<<30), peer("d", 2<<30)}, "c", "b"},
		{"leg 1 named by the user", "d", []api.Node{owner, peer("b", 8<<30), peer("c", 4<<30), peer("d", 2<<30)}, "b", "d"},
		{"one peer only", "", []api.Node{owner, peer("b", 8<<30)}, "", ""},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec := api.VolumeSpec{Name: fmt.Sprintf("v%d", i), Node: "a", SizeBytes: 1 << 30, WriteCacheBytes: 1 << 28, ReplicaNode: tc.named}
			if _, err := st.CreateVolumeSpec(ctx, spec); err != nil {
				t.Fatal(err)
			}
			_, meta, err := st.GetVolumeSpec(ctx, spec.Name)
			if err != nil {
				t.Fatal(err)
			}
			d.placeReplica(ctx, store.Item[api.VolumeSpec]{Value: spec, Meta: meta}, &nodeView{nodes: tc.nodes, drained: map[string]bool{}})
			got, _, err := st.GetVolumeSpec(ctx, spec.Name)
			if err != nil {
				t.Fatal(err)
			}
			wantLeg1 := tc.leg1
			if tc.leg1 == "" {
				wantLeg1 = tc.named
			}
			if got.ReplicaNode0 != tc.leg0 || got.ReplicaNode != wantLeg1 {
				t.Fatalf("legs on %q and %q, want %q and %q", got.ReplicaNode0, got.ReplicaNode, tc.leg0, wantLeg1)
			}
			if tc.leg0 != "" && (got.ReplicaPool0 != "fast" || got.ReplicaPool != "fast") {
				t.Errorf("pools %q and %q, want fast for both", got.ReplicaPool0, got.ReplicaPool)
			}
		})
	}
}

// TestReprotectLeg0: leg 0 of a write cache on peers is re-protected like
// leg 1, once its node has been gone for ReprotectAfter, onto a node that
// keeps neither leg, and only while leg 1 holds every write.
func TestReprotectLeg0(t *testing.T) {
	d, st := leaderOnly(t)
	ctx := context.Background()
	owner, peer := ownerWithoutSSD("n1"), replicaPeer
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		name     string
		nodes    []api.Node
		gone     time.Duration
		health   string
		wantLeg0 string
	}{
		// n3 keeps leg 1 and has the most room: never both legs there.
		{"gone 5m: to the node keeping neither leg", []api.Node{owner, peer("n3", 8<<30), peer("n4", 2<<30)}, 5 * time.Minute, "DA", "n4"},
		{"gone less than 5m", []api.Node{owner, peer("n3", 8<<30), peer("n4", 2<<30)}, time.Minute, "DA", "n2"},
		{"leg 1 resyncing from the lost leg", []api.Node{owner, peer("n3", 8<<30), peer("n4", 2<<30)}, 10 * time.Minute, "Da", "n2"},
		{"only leg 1's node left", []api.Node{owner, peer("n3", 8<<30)}, 10 * time.Minute, "DA", "n2"},
		{"leg 0's node up", []api.Node{owner, peer("n2", 1<<30), peer("n3", 8<<30), peer("n4", 2<<30)}, 10 * time.Minute, "AA", "n2"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name := fmt.Sprintf("w%d", i)
			spec := api.VolumeSpec{Name: name, Node: "n1", Pool: "slow", SizeBytes: 1 << 30, WriteCacheBytes: 1 << 28,
				Protect: "peer", ReplicaNode: "n3", ReplicaPool: "fast", ReplicaNode0: "n2", ReplicaPool0: "fast"}
			if _, err := st.CreateVolumeSpec(ctx, spec); err != nil {
				t.Fatal(err)
			}
			if err := st.PutVolumeStatus(ctx, api.VolumeStatus{Name: name, Node: "n1", Protection: "peer", MirrorHealth: tc.health}); err != nil {
				t.Fatal(err)
			}
			_, meta, err := st.GetVolumeSpec(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			lost := map[string]time.Time{name + "#leg0": t0.Add(-tc.gone)}
			var pols []api.Policy
			moved := d.reprotect(ctx, store.Item[api.VolumeSpec]{Value: spec, Meta: meta}, 0, nodeView{nodes: tc.nodes, drained: map[string]bool{}}, &pols, lost, t0)
			got, _, err := st.GetVolumeSpec(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			if got.ReplicaNode0 != tc.wantLeg0 || got.ReplicaNode != "n3" || moved != (tc.wantLeg0 != "n2") {
				t.Errorf("legs on %s and %s (moved %t), want leg 0 on %s and leg 1 still on n3", got.ReplicaNode0, got.ReplicaNode, moved, tc.wantLeg0)
			}
		})
	}
}
