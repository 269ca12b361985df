// SPDX-License-Identifier: Apache-2.0

package store_test

import (
	"errors"
	"testing"
	"time"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/store"
)

// TestFenceRecords checks the fence lifecycle the leader and the
// exporting nodes rely on: one fence per node, created once, its revision
// what acknowledgements name, lifted only at the revision read.
func TestFenceRecords(t *testing.T) {
	ctx := testCtx(t)
	s := openStore(t)
	f := api.Fence{Node: "node-a", Reason: "lease expired", Volumes: []string{"db"}, CreatedAt: time.Now().UTC()}

	meta, err := s.PutFence(ctx, f, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutFence(ctx, f, 0); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("second create of the fence: got %v, want ErrConflict", err)
	}
	got, gmeta, err := s.GetFence(ctx, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	if got.Node != "node-a" || len(got.Volumes) != 1 || got.Volumes[0] != "db" || gmeta.ModRevision != meta.ModRevision {
		t.Fatalf("read back %+v at revision %d, want the fence written at %d", got, gmeta.ModRevision, meta.ModRevision)
	}
	items, _, _, err := s.ListFences(ctx)
	if err != nil || len(items) != 1 || items[0].Value.Node != "node-a" {
		t.Fatalf("list: %v, %+v", err, items)
	}
	if err := s.DeleteFence(ctx, "node-a", meta.ModRevision+100); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("lift at a wrong revision: got %v, want ErrConflict", err)
	}
	if err := s.DeleteFence(ctx, "node-a", meta.ModRevision); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.GetFence(ctx, "node-a"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("after lifting: got %v, want ErrNotFound", err)
	}
	if _, err := s.PutFence(ctx, api.Fence{Node: "Bad/Name", CreatedAt: time.Now()}, 0); err == nil {
		t.Fatal("a fence of an invalid node name was stored")
	}
}

// TestReplicaOutdatedVersusFailover checks the pair of transactions that
// keep a failover off a stale replica: an owner marks its replica outdated
// only while the spec still names it, the leader moves the spec only while
// no such mark exists, and whichever comes second is refused.
func TestReplicaOutdatedVersusFailover(t *testing.T) {
	ctx := testCtx(t)
	s := openStore(t)
	spec := api.VolumeSpec{Name: "db", Node: "a", WriteCacheBytes: 1 << 28, Protect: "peer", ReplicaNode: "b",
		SharedOrigin: &api.SharedOrigin{Node: "san", Export: "lun0"}}
	moved := spec
	moved.Node, moved.ReplicaNode, moved.FailedOverFrom = "b", "", "a"
	mark := api.ReplicaOutdated{Volume: "db", Owner: "a", ReplicaNode: "b", Since: time.Now().UTC()}

	t.Run("owner first", func(t *testing.T) {
		meta, err := s.CreateVolumeSpec(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.MarkReplicaOutdated(ctx, mark, meta.ModRevision); err != nil {
			t.Fatal(err)
		}
		if err := s.MarkReplicaOutdated(ctx, mark, meta.ModRevision); err != nil {
			t.Fatalf("marking again: %v", err)
		}
		if _, err := s.FailOverVolumeSpec(ctx, moved, meta.ModRevision); !errors.Is(err, store.ErrReplicaOutdated) {
			t.Fatalf("failover over an outdated replica: got %v, want ErrReplicaOutdated", err)
		}
		if got, _, _ := s.GetVolumeSpec(ctx, "db"); got.Node != "a" {
			t.Fatalf("spec moved to %s", got.Node)
		}
		_, om, err := s.GetReplicaOutdated(ctx, "db")
		if err != nil {
			t.Fatal(err)
		}
		if err := s.ClearReplicaOutdated(ctx, "db", om.ModRevision); err != nil {
			t.Fatal(err)
		}
		// Back in sync: the failover may happen.
		if _, err := s.FailOverVolumeSpec(ctx, moved, meta.ModRevision); err != nil {
			t.Fatalf("failover after the mark was cleared: %v", err)
		}
		_, cur, _ := s.GetVolumeSpec(ctx, "db")
		if err := s.DeleteVolumeSpec(ctx, "db", cur.ModRevision); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("leader first", func(t *testing.T) {
		meta, err := s.CreateVolumeSpec(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.FailOverVolumeSpec(ctx, moved, meta.ModRevision); err != nil {
			t.Fatal(err)
		}
		// The old owner, still running, finds its replica gone and tries
		// to go on alone: refused, so it never acknowledges a write the
		// new owner lacks.
		err = s.MarkReplicaOutdated(ctx, mark, meta.ModRevision)
		if !errors.Is(err, store.ErrNotOwner) {
			t.Fatalf("old owner's mark after the failover: got %v, want ErrNotOwner", err)
		}
		if _, _, err := s.GetReplicaOutdated(ctx, "db"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("mark written after the failover: %v", err)
		}
		// Deleting the volume deletes a mark with it.
		_, cur, _ := s.GetVolumeSpec(ctx, "db")
		if err := s.MarkReplicaOutdated(ctx, api.ReplicaOutdated{Volume: "db", Owner: "b", ReplicaNode: "c", Since: time.Now()}, cur.ModRevision); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteVolumeSpec(ctx, "db", cur.ModRevision); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.GetReplicaOutdated(ctx, "db"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("mark outlived the volume: %v", err)
		}
	})
}
