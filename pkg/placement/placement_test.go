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
	if _, err := Place(api.VolumeSpec{Name: "v", SizeBytes: 1}, nil); !errors.Is(err, ErrNoCapacity) {
		t.Fatalf("no nodes: %v", err)
	}
}
