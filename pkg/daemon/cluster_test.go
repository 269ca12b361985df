package daemon

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/tidecache/tidecache/pkg/api"
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
