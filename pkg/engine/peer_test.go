// SPDX-License-Identifier: Apache-2.0

//go:build linux

package engine

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/tidecache/tidecache/pkg/nvmeof"
	"github.com/tidecache/tidecache/pkg/pool"
	"github.com/tidecache/tidecache/pkg/stack"
)

// TestHostServeReplicasFenced serves two replicas on files, the fake
// kernel and a configfs tree: both exported; with one owner fenced its
// export is removed while its device and slice stay, the other's stays
// exported; with the fence lifted it is exported again.
func TestHostServeReplicasFenced(t *testing.T) {
	ctx := context.Background()
	hp := newHostPool(t)
	root := t.TempDir()
	for _, d := range []string{"hosts", "subsystems", "ports"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	hp.e.target = nvmeof.NewDirTarget(root)
	nqn := map[string]string{}
	for vol, owner := range map[string]string{"orders": "n2", "users": "n3"} {
		info, err := hp.e.HostReplica(ctx, "tank", pool.ReplicaRequest{Volume: vol, Owner: owner, HostNQN: nvmeof.HostNQN(owner), WriteCache: 16 << 20})
		if err != nil {
			t.Fatalf("HostReplica %s: %v", vol, err)
		}
		nqn[vol] = info.NQN
	}
	exported := func(vol string) bool {
		_, err := os.Stat(filepath.Join(root, "subsystems", nqn[vol]))
		return err == nil
	}

	for _, c := range []struct {
		name   string
		fenced map[string]bool
		// want is, by volume, whether it is exported.
		want map[string]bool
	}{
		{"no fence", nil, map[string]bool{"orders": true, "users": true}},
		{"n2 fenced", map[string]bool{"n2": true}, map[string]bool{"orders": false, "users": true}},
		{"n2 fenced, again", map[string]bool{"n2": true}, map[string]bool{"orders": false, "users": true}},
		{"fence lifted", map[string]bool{}, map[string]bool{"orders": true, "users": true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			served, err := hp.e.ServeReplicasFenced(ctx, "10.0.0.1", 4420, c.fenced)
			if err != nil {
				t.Fatal(err)
			}
			if len(served) != 2 {
				t.Fatalf("served %+v, want two replicas", served)
			}
			for _, r := range served {
				want := c.want[r.Volume]
				if r.Exported != want || r.Fenced != !want || r.Error != "" {
					t.Errorf("%s: exported %v, fenced %v, error %q; want exported %v", r.Volume, r.Exported, r.Fenced, r.Error, want)
				}
				if exported(r.Volume) != want {
					t.Errorf("%s: subsystem in place %v, want %v", r.Volume, exported(r.Volume), want)
				}
				// The device stays: a failover builds the volume on it.
				if name := stack.ReplicaNamePrefix + r.Volume; r.Device == "" || !present(hp, name) {
					t.Errorf("%s: device %q, %s present %v; want it kept", r.Volume, r.Device, name, present(hp, name))
				}
			}
			found, err := hp.e.scan(ctx)
			if err != nil {
				t.Fatal(err)
			}
			p, _ := found.byName("tank")
			if len(p.Layout.Replicas) != 2 {
				t.Errorf("layout keeps %d replicas, want 2", len(p.Layout.Replicas))
			}
		})
	}
}

// present reports whether the fake kernel has the named device.
func present(hp *hostPool, name string) bool {
	_, ok := hp.k.Device(name)
	return ok
}
