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
