// SPDX-License-Identifier: Apache-2.0

package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/store"
)

func node(name string) api.Node {
	wear := 3
	return api.Node{
		Name: name, Address: "10.0.0.1:9430", Version: "test",
		Pools: []api.PoolInventory{{Name: "fast", OriginFreeBytes: 1 << 40, SSDFreeBytes: 100 << 30}},
		SSDs:  []api.SSDInventory{{Path: "/dev/nvme0n1", Pool: "fast", SizeBytes: 400 << 30, WearPercent: &wear}},
	}
}

func nodeNames(t *testing.T, s *store.Store) []string {
	t.Helper()
	items, _, invalid, err := s.ListNodes(testCtx(t))
	if err != nil || len(invalid) != 0 {
		t.Fatalf("list nodes: %v %v", err, invalid)
	}
	var names []string
	for _, it := range items {
		names = append(names, it.Value.Name)
	}
	return names
}

// waitClosed fails unless ch closes within d.
func waitClosed(t *testing.T, ch <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatalf("%s: not closed within %v", what, d)
	}
}

func TestRegisterUpdateClose(t *testing.T) {
	ctx := testCtx(t)
	s := openStore(t)

	reg, err := s.Register(ctx, node("node1"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := s.GetNode(ctx, "node1")
	if err != nil || got.StartedAt.IsZero() || got.SSDs[0].WearPercent == nil || *got.SSDs[0].WearPercent != 3 {
		t.Fatalf("node record = %+v, %v", got, err)
	}

	upd := got
	upd.Pools[0].SSDFreeBytes = 1
	upd.UpdatedAt = time.Time{}
	if err := reg.Update(ctx, upd); err != nil {
		t.Fatal(err)
	}
	got2, _, _ := s.GetNode(ctx, "node1")
	if got2.Pools[0].SSDFreeBytes != 1 || !got2.StartedAt.Equal(got.StartedAt) || !got2.UpdatedAt.After(got.UpdatedAt) {
		t.Fatalf("after update = %+v", got2)
	}
	if err := reg.Update(ctx, node("node2")); err == nil {
		t.Fatal("update under another name accepted")
	}

	// A clean shutdown removes the record at once.
	if err := reg.Close(ctx); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, reg.Lost(), time.Second, "Lost after Close")
	if names := nodeNames(t, s); len(names) != 0 {
		t.Fatalf("nodes after Close = %v", names)
	}
	if err := reg.Update(ctx, upd); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("update after Close: %v, want ErrLeaseLost", err)
	}
}

// A node that dies stops renewing its lease; etcd deletes its record after
// the TTL and the other nodes' watches see it go.
func TestRegistrationExpires(t *testing.T) {
	ctx := testCtx(t)
	cfg := testConfig(t)
	observer := openWith(t, cfg)
	dying, err := store.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}

	const ttl = 2 * time.Second
	if _, err := dying.Register(ctx, node("node1"), ttl); err != nil {
		t.Fatal(err)
	}
	items, rev, _, err := observer.ListNodes(ctx)
	if err != nil || len(items) != 1 {
		t.Fatalf("nodes = %+v, %v", items, err)
	}
	ch := observer.Watch(ctx, rev+1)

	// Closing the client stops keep-alives without revoking: the process
	// died.
	died := time.Now()
	dying.Close()

	evs := collect(t, ch, 1)
	gone := time.Since(died)
	if evs[0].Type != store.Delete || evs[0].Kind != store.KindNode || evs[0].Name != "node1" {
		t.Fatalf("event = %+v, want delete of node1", evs[0])
	}
	// etcd's lessor checks expiry every 500ms; allow that on top of the TTL.
	if gone > ttl+time.Second {
		t.Errorf("record removed %v after the node died, want within the %v TTL", gone, ttl)
	}
	t.Logf("record removed %v after the node died (TTL %v)", gone.Round(10*time.Millisecond), ttl)
	if names := nodeNames(t, observer); len(names) != 0 {
		t.Fatalf("nodes after expiry = %v", names)
	}
}

// Lost fires when the lease expires behind the daemon's back, and the
// daemon re-registers.
func TestRegistrationLostAndReregister(t *testing.T) {
	ctx := testCtx(t)
	s := openStore(t)
	// The client learns of the loss at its next keep-alive, a third of
	// the TTL after the last.
	reg, err := s.Register(ctx, node("node1"), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Revoke(ctx); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, reg.Lost(), 3*time.Second, "Lost after the lease was revoked")
	if err := reg.Update(ctx, node("node1")); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("update after loss: %v, want ErrLeaseLost", err)
	}

	reg2, err := s.Register(ctx, node("node1"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer reg2.Close(context.Background())
	if names := nodeNames(t, s); len(names) != 1 {
		t.Fatalf("nodes after re-register = %v", names)
	}
}

// A restarted daemon registers while its previous lease still holds the
// record: it takes the record over, and the old registration (were it
// still running) notices on its next update.
func TestRegistrationTakeover(t *testing.T) {
	ctx := testCtx(t)
	s := openStore(t)
	old, err := s.Register(ctx, node("node1"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close(context.Background())
	cur, err := s.Register(ctx, node("node1"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer cur.Close(context.Background())

	if err := old.Update(ctx, node("node1")); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("update by the replaced registration: %v, want ErrLeaseLost", err)
	}
	waitClosed(t, old.Lost(), time.Second, "Lost of the replaced registration")
	if err := cur.Update(ctx, node("node1")); err != nil {
		t.Fatalf("update by the current registration: %v", err)
	}
	// Closing the old one revokes its lease, which no longer holds the
	// record.
	if err := old.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if names := nodeNames(t, s); len(names) != 1 {
		t.Fatalf("nodes = %v, want node1 still registered", names)
	}
}

func TestRegisterRejects(t *testing.T) {
	ctx := testCtx(t)
	s := openStore(t)
	if _, err := s.Register(ctx, node("Node_1"), time.Second); err == nil {
		t.Error("invalid node name accepted")
	}
	if _, err := s.Register(ctx, node("node1"), 0); err == nil {
		t.Error("zero TTL accepted")
	}
}

// TestRegisterNameInUse: a node name whose live record another machine
// holds (another boot id: a clone of the same VM, a second server given
// the same --node) is refused with ErrNodeNameInUse, and the holder keeps
// its record; the same machine's daemon restarted within the TTL takes its
// record over, as does any node once the holder's lease is gone; a record
// written before instances were recorded is taken over as before.
func TestRegisterNameInUse(t *testing.T) {
	ctx := testCtx(t)
	s := openStore(t)
	withInstance := func(name, instance string) api.Node {
		n := node(name)
		n.Instance = instance
		return n
	}
	const ttl = 5 * time.Second

	holder, err := s.Register(ctx, withInstance("node1", "boot-a"), ttl)
	if err != nil {
		t.Fatal(err)
	}
	clone := withInstance("node1", "boot-b")
	clone.Address = "10.0.0.9:9430"
	_, err = s.Register(ctx, clone, ttl)
	if !errors.Is(err, store.ErrNodeNameInUse) {
		t.Fatalf("second machine registering node1: %v, want ErrNodeNameInUse", err)
	}
	for _, want := range []string{`"node1"`, "10.0.0.1:9430", "--node"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	if got, _, err := s.GetNode(ctx, "node1"); err != nil || got.Instance != "boot-a" {
		t.Fatalf("record after the refused registration: %+v, %v; want the holder's", got, err)
	}
	select {
	case <-holder.Lost():
		t.Fatal("the holder lost its registration to a refused one")
	default:
	}
	if err := holder.Update(ctx, withInstance("node1", "boot-a")); err != nil {
		t.Fatalf("holder's update after the refused registration: %v", err)
	}

	// The daemon restarted on the same machine: its old lease still runs.
	again, err := s.Register(ctx, withInstance("node1", "boot-a"), ttl)
	if err != nil {
		t.Fatalf("same instance registering again: %v", err)
	}
	if err := holder.Update(ctx, withInstance("node1", "boot-a")); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("old registration's update after its record was taken over: %v, want ErrLeaseLost", err)
	}

	// Gone (lease revoked): the name is free for another machine.
	if err := again.Close(ctx); err != nil {
		t.Fatal(err)
	}
	other, err := s.Register(ctx, clone, ttl)
	if err != nil {
		t.Fatalf("another machine registering a free name: %v", err)
	}
	// A record without an instance (an older daemon) is taken over.
	if err := other.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Register(ctx, node("node1"), ttl); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Register(ctx, clone, ttl); err != nil {
		t.Fatalf("taking over a record without an instance: %v", err)
	}
}
