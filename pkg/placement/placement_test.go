// SPDX-License-Identifier: Apache-2.0

package placement

import (
	"errors"
	"testing"

	"github.com/tidecache/tidecache/pkg/api"
)

const gib = 1 << 30

func node(name string, pools ...api.PoolInventory) api.Node {
	return api.Node{Name: name, Pools: pools}
}

func TestPlace(t *testing.T) {
	nodes := []api.Node{
		node("a", api.PoolInventory{Name: "fast", OriginFreeBytes: 100 * gib, SSDFreeBytes: 10 * gib}),
		node("b", api.PoolInventory{Name: "fast", OriginFreeBytes: 100 * gib, SSDFreeBytes: 40 * gib}),
		node("c", api.PoolInventory{Name: "slow", OriginFreeBytes: 900 * gib, SSDFreeBytes: 40 * gib},
			api.PoolInventory{Name: "fast", OriginFreeBytes: 5 * gib, SSDFreeBytes: 90 * gib}),
	}
	cases := []struct {
		name string
		spec api.VolumeSpec
		want Choice
		err  error
	}{
		{"most SSD room wins", api.VolumeSpec{Name: "v", SizeBytes: gib, WriteCacheBytes: gib}, Choice{"c", "fast"}, nil},
		{"origin too small on c/fast, tie b vs c/slow broken by node name", api.VolumeSpec{Name: "v", SizeBytes: 50 * gib, WriteCacheBytes: gib}, Choice{"b", "fast"}, nil},
		{"only one pool with origin room", api.VolumeSpec{Name: "v", SizeBytes: 200 * gib, WriteCacheBytes: gib}, Choice{"c", "slow"}, nil},
		{"named pool", api.VolumeSpec{Name: "v", Pool: "slow", SizeBytes: gib, WriteCacheBytes: gib}, Choice{"c", "slow"}, nil},
		{"cache too big everywhere", api.VolumeSpec{Name: "v", SizeBytes: gib, WriteCacheBytes: 60 * gib, ReadCacheBytes: 40 * gib}, Choice{}, ErrNoCapacity},
		{"unknown pool", api.VolumeSpec{Name: "v", Pool: "nope", SizeBytes: gib}, Choice{}, ErrNoCapacity},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Place(tc.spec, nodes)
			if !errors.Is(err, tc.err) || got != tc.want {
				t.Fatalf("Place = %+v, %v; want %+v, %v", got, err, tc.want, tc.err)
			}
		})
	}
	// A node without SSDs (d, the most origin room) takes what the others
	// cannot hold, its write cache on two of them; never a read cache.
	peers := []api.Node{nodes[0], nodes[1], nodes[2],
		node("d", api.PoolInventory{Name: "hdd", OriginFreeBytes: 2000 * gib, NoSSDs: true})}
	for i := range 3 {
		peers[i].ReplicaAddress = "10.0.0.9:4420"
	}
	for _, tc := range []struct {
		name string
		spec api.VolumeSpec
		want Choice
		err  error
	}{
		{"nodes with SSDs first", api.VolumeSpec{Name: "v", SizeBytes: gib, WriteCacheBytes: gib}, Choice{"c", "fast"}, nil},
		{"no origin room elsewhere: the node without SSDs", api.VolumeSpec{Name: "v", SizeBytes: 1000 * gib, WriteCacheBytes: gib}, Choice{"d", "hdd"}, nil},
		{"not with a read cache", api.VolumeSpec{Name: "v", SizeBytes: 1000 * gib, WriteCacheBytes: gib, ReadCacheBytes: gib}, Choice{}, ErrNoCapacity},
		{"not when two peers lack room for a leg", api.VolumeSpec{Name: "v", SizeBytes: 1000 * gib, WriteCacheBytes: 45 * gib}, Choice{}, ErrNoCapacity}, // c alone has 45 GiB free
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Place(tc.spec, peers)
			if !errors.Is(err, tc.err) || got != tc.want {
				t.Fatalf("Place = %+v, %v; want %+v, %v", got, err, tc.want, tc.err)
			}
		})
	}
	if got, err := PlaceOn(api.VolumeSpec{Name: "v", SizeBytes: gib, WriteCacheBytes: gib}, peers, "d"); err != nil || got != (Choice{"d", "hdd"}) {
		t.Errorf("PlaceOn d = %+v, %v; want d/hdd, its legs on the others", got, err)
	}
	if _, err := PlaceOn(api.VolumeSpec{Name: "v", SizeBytes: gib, WriteCacheBytes: gib}, peers[2:], "d"); !errors.Is(err, ErrNoCapacity) {
		t.Errorf("PlaceOn d with one peer = %v, want ErrNoCapacity", err)
	}
	if _, err := Place(api.VolumeSpec{Name: "v", SizeBytes: 1}, nil); !errors.Is(err, ErrNoCapacity) {
		t.Fatalf("no nodes: %v", err)
	}
}

func TestPlaceReplica(t *testing.T) {
	node := func(name, addr, domain string, free uint64) api.Node {
		return api.Node{Name: name, ReplicaAddress: addr, FaultDomain: domain, Pools: []api.PoolInventory{{Name: "fast", SSDFreeBytes: free, OriginFreeBytes: 1 << 40}}}
	}
	spec := api.VolumeSpec{Name: "db", Node: "a", SizeBytes: 1 << 30, WriteCacheBytes: 1 << 30, Protect: "peer"}
	// san exports lun0 to a and c; it has a pool of its own, and b is
	// not served (yet, or fenced).
	shared := api.VolumeSpec{Name: "db", Node: "a", WriteCacheBytes: 1 << 30, Protect: "peer", SharedOrigin: &api.SharedOrigin{Node: "san", Export: "lun0"}}
	san := node("san", "10.0.0.9:4420", "", 64<<30)
	san.Exports = []api.ExportInventory{{Name: "lun0", Hosts: []string{"a", "c"}}}
	cases := []struct {
		name     string
		spec     api.VolumeSpec
		nodes    []api.Node
		excluded map[string]bool
		want     string // node, "" for ErrNoCapacity
	}{
		{"never the owner", spec, []api.Node{node("a", "10.0.0.1:4420", "", 8<<30), node("b", "10.0.0.2:4420", "", 2<<30)}, nil, "b"},
		{"only nodes that serve replicas", spec, []api.Node{node("a", "10.0.0.1:4420", "", 8<<30), node("b", "", "", 8<<30)}, nil, ""},
		{"room for the leg and its metadata", spec, []api.Node{node("a", "", "", 0), node("b", "10.0.0.2:4420", "", 1<<30)}, nil, ""},
		{"another fault domain first", spec, []api.Node{node("a", "", "r1", 0), node("b", "10.0.0.2:4420", "r1", 8<<30), node("c", "10.0.0.3:4420", "r2", 2<<30)}, nil, "c"},
		{"then the most free space", spec, []api.Node{node("a", "", "", 0), node("b", "10.0.0.2:4420", "", 2<<30), node("c", "10.0.0.3:4420", "", 4<<30)}, nil, "c"},
		{"the node the spec names", api.VolumeSpec{Name: "db", Node: "a", WriteCacheBytes: 1 << 30, Protect: "peer", ReplicaNode: "b"},
			[]api.Node{node("b", "10.0.0.2:4420", "", 2<<30), node("c", "10.0.0.3:4420", "", 4<<30)}, nil, "b"},
		{"never a drained or fenced node", spec, []api.Node{node("b", "10.0.0.2:4420", "", 8<<30), node("c", "10.0.0.3:4420", "", 2<<30)},
			map[string]bool{"b": true}, "c"},
		// The volume fails over to its replica's node, which must see
		// the origin: not the exporter (never served itself), not a
		// node it is not served to, even with more room.
		{"shared origin: a node the export is served to", shared,
			[]api.Node{san, node("b", "10.0.0.2:4420", "", 32<<30), node("c", "10.0.0.3:4420", "", 2<<30)}, nil, "c"},
		{"shared origin: the exporter's record counts though it is drained", shared,
			[]api.Node{san, node("c", "10.0.0.3:4420", "", 2<<30)}, map[string]bool{"san": true}, "c"},
		{"shared origin: none served", shared, []api.Node{san, node("b", "10.0.0.2:4420", "", 32<<30)}, nil, ""},
		{"shared origin: the exporter not live", shared, []api.Node{node("c", "10.0.0.3:4420", "", 2<<30)}, nil, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := PlaceReplica(tc.spec, tc.nodes, tc.excluded)
			if tc.want == "" {
				if !errors.Is(err, ErrNoCapacity) {
					t.Fatalf("PlaceReplica = %+v, %v; want ErrNoCapacity", got, err)
				}
				return
			}
			if err != nil || got.Node != tc.want || got.Pool != "fast" {
				t.Fatalf("PlaceReplica = %+v, %v; want node %s pool fast", got, err, tc.want)
			}
		})
	}
}

// TestPlaceReplicas: a node without SSDs gets both legs of its write cache
// on two other nodes, never one node twice; leg 0 avoids the domains of
// the owner and of leg 1 when it can.
func TestPlaceReplicas(t *testing.T) {
	node := func(name, domain string, free uint64) api.Node {
		return api.Node{Name: name, ReplicaAddress: "10.0.0.9:4420", FaultDomain: domain, Pools: []api.PoolInventory{{Name: "fast", SSDFreeBytes: free, OriginFreeBytes: 1 << 40}}}
	}
	owner := api.Node{Name: "a", FaultDomain: "r1", Pools: []api.PoolInventory{{Name: "slow", NoSSDs: true, OriginFreeBytes: 1 << 40}}}
	spec := api.VolumeSpec{Name: "db", Node: "a", SizeBytes: 1 << 30, WriteCacheBytes: 1 << 30, Protect: "peer"}
	cases := []struct {
		name       string
		spec       api.VolumeSpec
		nodes      []api.Node
		excluded   map[string]bool
		leg0, leg1 string // "" for ErrNoCapacity
	}{
		{"most free space first, never one node twice", spec, []api.Node{owner, node("b", "", 8<<30), node("c", "", 4<<30), node("d", "", 2<<30)}, nil, "c", "b"},
		{"leg 0 in a third domain", spec, []api.Node{owner, node("b", "r2", 8<<30), node("c", "r2", 4<<30), node("d", "r1", 2<<30), node("e", "r3", 1<<30+1<<20)}, nil, "e", "b"},
		{"the nodes the spec names", api.VolumeSpec{Name: "db", Node: "a", WriteCacheBytes: 1 << 30, ReplicaNode: "d", ReplicaNode0: "c"},
			[]api.Node{owner, node("b", "", 8<<30), node("c", "", 4<<30), node("d", "", 2<<30)}, nil, "c", "d"},
		{"one other node is not enough", spec, []api.Node{owner, node("b", "", 8<<30)}, nil, "", ""},
		{"a drained node counts for neither", spec, []api.Node{owner, node("b", "", 8<<30), node("c", "", 4<<30)}, map[string]bool{"c": true}, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if !CacheOnPeers(tc.spec, tc.nodes) {
				t.Fatal("CacheOnPeers = false for an owner whose pool has no SSDs")
			}
			leg0, leg1, err := PlaceReplicas(tc.spec, tc.nodes, tc.excluded)
			if tc.leg0 == "" {
				if !errors.Is(err, ErrNoCapacity) {
					t.Fatalf("PlaceReplicas = %+v, %+v, %v; want ErrNoCapacity", leg0, leg1, err)
				}
				return
			}
			if err != nil || leg0.Node != tc.leg0 || leg1.Node != tc.leg1 {
				t.Fatalf("PlaceReplicas = leg 0 %+v, leg 1 %+v, %v; want %s and %s", leg0, leg1, err, tc.leg0, tc.leg1)
			}
		})
	}
	// Re-protection of leg 1 (its node lost; the leader clears it and
	// places it again): never on leg 0's node, though it has the most room.
	reprotect := api.VolumeSpec{Name: "db", Node: "a", WriteCacheBytes: 1 << 30, Protect: "peer", ReplicaNode0: "b", ReplicaPool0: "fast"}
	if got, err := PlaceReplica(reprotect, []api.Node{owner, node("b", "", 8<<30), node("d", "", 2<<30)}, nil); err != nil || got.Node != "d" {
		t.Errorf("leg 1 placed again = %+v, %v; want d, never leg 0's node b", got, err)
	}
	if got, err := PlaceReplica(reprotect, []api.Node{owner, node("b", "", 8<<30)}, nil); !errors.Is(err, ErrNoCapacity) {
		t.Errorf("leg 1 placed again with only leg 0's node left = %+v, %v; want ErrNoCapacity", got, err)
	}
	withSSD := api.Node{Name: "a", Pools: []api.PoolInventory{{Name: "fast", SSDFreeBytes: 1 << 30}}}
	if CacheOnPeers(spec, []api.Node{withSSD}) {
		t.Error("CacheOnPeers = true for an owner with SSDs")
	}
	if CacheOnPeers(api.VolumeSpec{Name: "db", Node: "a", SizeBytes: 1 << 30}, []api.Node{owner}) {
		t.Error("CacheOnPeers = true for a volume without a write cache")
	}
}
