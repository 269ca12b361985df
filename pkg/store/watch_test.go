// SPDX-License-Identifier: Apache-2.0

package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/store"
)

// next returns the next watch result or fails after a few seconds.
func next(t *testing.T, ch <-chan store.WatchResult) store.WatchResult {
	t.Helper()
	select {
	case r, ok := <-ch:
		if !ok {
			t.Fatal("watch channel closed")
		}
		return r
	case <-time.After(5 * time.Second):
		t.Fatal("no watch result within 5s")
	}
	panic("unreachable")
}

// collect reads results until it has n events.
func collect(t *testing.T, ch <-chan store.WatchResult, n int) []store.Event {
	t.Helper()
	var evs []store.Event
	for len(evs) < n {
		r := next(t, ch)
		if r.Err != nil {
			t.Fatalf("watch error: %v", r.Err)
		}
		evs = append(evs, r.Events...)
	}
	if len(evs) != n {
		t.Fatalf("got %d events, want %d: %+v", len(evs), n, evs)
	}
	return evs
}

// The reconciler's pattern: list, then watch from the list's revision + 1.
// Changes made between the list and the watch are not lost, the listed
// state is not repeated, and invalid records arrive flagged.
func TestWatchFromListRevision(t *testing.T) {
	ctx := testCtx(t)
	s := openStore(t)

	before := dbSpec()
	before.Name = "before"
	if _, err := s.CreateVolumeSpec(ctx, before); err != nil {
		t.Fatal(err)
	}
	specs, rev, _, err := s.ListVolumeSpecs(ctx)
	if err != nil || len(specs) != 1 {
		t.Fatalf("list: %v %v", specs, err)
	}

	// Written after the list but before the watch starts.
	m, err := s.CreateVolumeSpec(ctx, dbSpec())
	if err != nil {
		t.Fatal(err)
	}

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch := s.Watch(wctx, rev+1)

	if err := s.PutVolumeStatus(ctx, api.VolumeStatus{Name: "db", Node: "node1", ObservedRevision: m.ModRevision}); err != nil {
		t.Fatal(err)
	}
	p, err := s.PutPolicy(ctx, api.Policy{Name: api.DefaultPolicy, Mode: "writethrough"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutNodeSpec(ctx, api.NodeSpec{Name: "node1", Drain: true}, 0); err != nil {
		t.Fatal(err)
	}
	badRev, err := s.PutRaw(ctx, "policies/broken", `{"apiVersion":"tidecache.io/v1","kind":"Policy","spec":{"name":"broken","onSSDError":"panic"}}`)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DeletePolicy(ctx, api.DefaultPolicy, p.ModRevision); err != nil {
		t.Fatal(err)
	}
	_, m, _ = s.GetVolumeSpec(ctx, "db")
	if err := s.DeleteVolumeSpec(ctx, "db", m.ModRevision); err != nil {
		t.Fatal(err)
	}

	evs := collect(t, ch, 8)
	want := []struct {
		typ        store.EventType
		kind, name string
		invalid    bool
	}{
		{store.Put, store.KindVolumeSpec, "db", false},
		{store.Put, store.KindVolumeStatus, "db", false},
		{store.Put, store.KindPolicy, "default", false},
		{store.Put, store.KindNodeSpec, "node1", false},
		{store.Put, store.KindPolicy, "broken", true},
		{store.Delete, store.KindPolicy, "default", false},
		{store.Delete, store.KindVolumeSpec, "db", false},
		{store.Delete, store.KindVolumeStatus, "db", false},
	}
	for i, w := range want {
		e := evs[i]
		if e.Type != w.typ || e.Kind != w.kind || e.Name != w.name || (e.Invalid != nil) != w.invalid {
			t.Errorf("event %d = %v %s %s invalid=%v, want %v %s %s invalid=%v", i, e.Type, e.Kind, e.Name, e.Invalid, w.typ, w.kind, w.name, w.invalid)
		}
	}
	if v, ok := evs[0].Value.(api.VolumeSpec); !ok || v != dbSpec() {
		t.Errorf("spec event value = %#v", evs[0].Value)
	}
	if v, ok := evs[2].Value.(api.Policy); !ok || v.Mode != "writethrough" {
		t.Errorf("policy event value = %#v", evs[2].Value)
	}
	if bad := evs[4]; bad.Value != nil || bad.Revision != badRev || !errors.Is(*bad.Invalid, store.ErrInvalidRecord) {
		t.Errorf("invalid event = %+v", bad)
	}
	if evs[6].Revision != evs[7].Revision {
		t.Errorf("spec and status deleted at revisions %d and %d, want one transaction", evs[6].Revision, evs[7].Revision)
	}

	// Cancelling the context closes the channel.
	cancel()
	for range ch {
	}
}

func TestWatchCompacted(t *testing.T) {
	ctx := testCtx(t)
	s := openStore(t)
	var rev int64
	for i := range 3 {
		m, err := s.PutPolicy(ctx, api.Policy{Name: "p", WearThresholdPercent: 80 + i}, rev)
		if err != nil {
			t.Fatal(err)
		}
		rev = m.ModRevision
	}
	if err := s.Compact(ctx, rev); err != nil {
		t.Fatal(err)
	}

	ch := s.Watch(ctx, rev-1)
	r := next(t, ch)
	if !errors.Is(r.Err, store.ErrCompacted) || len(r.Events) != 0 {
		t.Fatalf("watch from a compacted revision: %+v, want ErrCompacted", r)
	}
	if _, ok := <-ch; ok {
		t.Fatal("channel still open after ErrCompacted")
	}

	// The recovery: re-list, watch from there.
	items, lrev, _, err := s.ListPolicies(ctx)
	if err != nil || len(items) != 1 || items[0].Value.WearThresholdPercent != 82 {
		t.Fatalf("re-list: %+v %v", items, err)
	}
	ch = s.Watch(ctx, lrev+1)
	if _, err := s.PutPolicy(ctx, api.Policy{Name: "p", WearThresholdPercent: 90}, rev); err != nil {
		t.Fatal(err)
	}
	if evs := collect(t, ch, 1); evs[0].Value.(api.Policy).WearThresholdPercent != 90 {
		t.Fatalf("after re-list: %+v", evs)
	}
}

// Closing the store ends a watch with an error, so a caller that is not
// cancelling can tell a broken stream from its own stop.
func TestWatchStoreClosed(t *testing.T) {
	ctx := testCtx(t)
	s, err := store.Open(ctx, testConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	ch := s.Watch(ctx, 0)
	if err := s.Healthy(ctx); err != nil { // the watch stream is up once a request went through
		t.Fatal(err)
	}
	s.Close()
	if r := next(t, ch); r.Err == nil {
		t.Fatalf("after Close: %+v, want an error", r)
	}
}
