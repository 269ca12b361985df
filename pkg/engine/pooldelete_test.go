// SPDX-License-Identifier: Apache-2.0

//go:build linux

package engine

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/tidecache/tidecache/pkg/pool"
	"github.com/tidecache/tidecache/pkg/stack"
	"github.com/tidecache/tidecache/pkg/superblock"
)

// TestHostDeletePool deletes a pool on files and the fake kernel: refused
// while it has a volume, then every superblock wiped (SSD first, origin
// last); a delete cut after the SSD's wipe is finished by a second one.
func TestHostDeletePool(t *testing.T) {
	ctx := context.Background()
	hp := newHostPool(t)
	ssd := hp.devs.Members[hp.vol.WriteCache.Member]

	_, err := hp.e.DeletePool(ctx, "tank")
	if err == nil || !strings.Contains(err.Error(), "still has 1 volume(s): db") {
		t.Fatalf("DeletePool with a volume: %v", err)
	}
	if _, err := readSuperblock(ssd); err != nil {
		t.Fatalf("refused delete touched the SSD superblock: %v", err)
	}
	if _, err := hp.e.DeletePool(ctx, "nosuch"); !errors.Is(err, ErrPoolNotFound) {
		t.Fatalf("DeletePool of an unknown pool: %v", err)
	}

	cleanWriteTier(hp)
	if err := hp.e.DeleteVolume(ctx, "db", false); err != nil {
		t.Fatalf("DeleteVolume: %v", err)
	}
	// A replica kept for a peer's mirror refuses the delete too.
	if _, err := hp.e.HostReplica(ctx, "tank", pool.ReplicaRequest{Volume: "orders", Owner: "n2", HostNQN: "nqn.2026-11.io.tidecache:node:n2", WriteCache: 16 << 20}); err != nil {
		t.Fatalf("HostReplica: %v", err)
	}
	if _, err := hp.e.DeletePool(ctx, "tank"); err == nil || !strings.Contains(err.Error(), "keeps 1 replica(s) of other nodes' write caches: orders (owned by node n2)") {
		t.Fatalf("DeletePool with a replica: %v", err)
	}
	if err := hp.e.DropReplica(ctx, "orders"); err != nil {
		t.Fatalf("DropReplica: %v", err)
	}
	t.Run("cut after the SSD's wipe, finished by a second delete", func(t *testing.T) {
		if err := hp.e.wipeSuperblock(ssd); err != nil {
			t.Fatal(err)
		}
		found, err := hp.e.scan(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if p, ok := found.byName("tank"); !ok || len(p.Members) != 0 {
			t.Fatalf("after the SSD's wipe the pool should show from its origin alone: %+v", p)
		}
		rep, err := hp.e.DeletePool(ctx, "tank")
		if err != nil {
			t.Fatalf("DeletePool: %v", err)
		}
		if !slices.Equal(rep.Wiped, []string{hp.origin}) || len(rep.MissingMembers) != 1 {
			t.Errorf("report %+v, want the origin wiped and the SSD listed missing", rep)
		}
		for _, dev := range []string{ssd, hp.origin} {
			if _, err := readSuperblock(dev); !errors.Is(err, superblock.ErrNoSuperblock) {
				t.Errorf("superblock on %s after delete: %v", dev, err)
			}
		}
		found, err = hp.e.scan(ctx)
		if err != nil || len(found.Pools) != 0 {
			t.Errorf("pools after delete: %v, %v", found.Pools, err)
		}
		if _, err := hp.e.DeletePool(ctx, "tank"); !errors.Is(err, ErrPoolNotFound) {
			t.Errorf("second DeletePool: %v, want not found", err)
		}
	})
}

// TestHostDeletePoolWhole deletes an empty pool in one go.
func TestHostDeletePoolWhole(t *testing.T) {
	ctx := context.Background()
	hp := newHostPool(t)
	ssd := hp.devs.Members[hp.vol.WriteCache.Member]
	cleanWriteTier(hp)
	if err := hp.e.DeleteVolume(ctx, "db", false); err != nil {
		t.Fatalf("DeleteVolume: %v", err)
	}
	rep, err := hp.e.DeletePool(ctx, "tank")
	if err != nil {
		t.Fatalf("DeletePool: %v", err)
	}
	if !slices.Equal(rep.Wiped, []string{ssd, hp.origin}) || rep.StoppedArray != "" || len(rep.MissingMembers) != 0 {
		t.Errorf("report %+v, want the SSD then the origin wiped", rep)
	}
}

// cleanWriteTier makes the volume's write tier report no dirty block.
func cleanWriteTier(hp *hostPool) {
	hp.k.SetStatusFunc(stack.DeviceName("db", stack.RoleWriteTier), wcStatus(func(int, []string) wcState { return wcState{} }))
}
