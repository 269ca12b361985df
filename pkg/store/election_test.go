// SPDX-License-Identifier: Apache-2.0

package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tidecache/tidecache/pkg/store"
)

type campaignResult struct {
	l   *store.Leadership
	err error
}

func campaign(ctx context.Context, s *store.Store, node string, ttl time.Duration) <-chan campaignResult {
	ch := make(chan campaignResult, 1)
	go func() {
		l, err := s.Campaign(ctx, node, ttl)
		ch <- campaignResult{l, err}
	}()
	return ch
}

func wantLeader(t *testing.T, s *store.Store, want string) {
	t.Helper()
	got, err := s.Leader(testCtx(t))
	if err != nil || got != want {
		t.Fatalf("leader = %q, %v; want %q", got, err, want)
	}
}

func won(t *testing.T, ch <-chan campaignResult, d time.Duration, who string) *store.Leadership {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("%s's campaign: %v", who, r.err)
		}
		return r.l
	case <-time.After(d):
		t.Fatalf("%s did not become leader within %v", who, d)
	}
	return nil
}

func TestElectionHandover(t *testing.T) {
	ctx := testCtx(t)
	cfg := testConfig(t)
	const ttl = 2 * time.Second
	// Each node has its own client, as each daemon does.
	s1, s2, s3 := openWith(t, cfg), openWith(t, cfg), openWith(t, cfg)

	if _, err := s1.Leader(ctx); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("leader before any campaign: %v, want ErrNotFound", err)
	}
	l1 := won(t, campaign(ctx, s1, "node1", ttl), 5*time.Second, "node1")
	wantLeader(t, s3, "node1")

	c2 := campaign(ctx, s2, "node2", ttl)
	select {
	case r := <-c2:
		t.Fatalf("node2 won while node1 leads: %+v", r)
	case <-time.After(300 * time.Millisecond):
	}

	// Resign: node2 takes over at once.
	start := time.Now()
	if err := l1.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, l1.Done(), time.Second, "node1's Done after Resign")
	l2 := won(t, c2, time.Second, "node2")
	t.Logf("handover after resign: %v", time.Since(start).Round(time.Millisecond))
	wantLeader(t, s3, "node2")

	// node2's session dies (its client goes away without revoking): node3
	// leads once the lease expires.
	c3 := campaign(ctx, s3, "node3", ttl)
	time.Sleep(100 * time.Millisecond) // let node3 queue up behind node2
	start = time.Now()
	s2.Close()
	waitClosed(t, l2.Done(), time.Second, "node2's Done after its client closed")
	l3 := won(t, c3, ttl+2*time.Second, "node3")
	took := time.Since(start)
	t.Logf("handover after the leader died: %v (TTL %v)", took.Round(time.Millisecond), ttl)
	if took < ttl/2 {
		t.Errorf("node3 led %v after node2 died, before node2's lease could expire", took)
	}
	wantLeader(t, s1, "node3")
	if err := l3.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s1.Leader(ctx); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("leader after the last resigned: %v, want ErrNotFound", err)
	}
}

// A leader whose lease is lost (etcd expired it, say after a long pause)
// sees Done close, and the next candidate leads.
func TestLeadershipLostWithLease(t *testing.T) {
	ctx := testCtx(t)
	cfg := testConfig(t)
	s1, s2 := openWith(t, cfg), openWith(t, cfg)
	l1 := won(t, campaign(ctx, s1, "node1", 5*time.Second), 5*time.Second, "node1")
	c2 := campaign(ctx, s2, "node2", 5*time.Second)
	time.Sleep(100 * time.Millisecond)
	if err := l1.Revoke(ctx); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, l1.Done(), 3*time.Second, "Done after the lease was revoked")
	l2 := won(t, c2, time.Second, "node2")
	defer l2.Resign(context.Background())
	wantLeader(t, s1, "node2")
	// Resigning a lost leadership is harmless.
	if err := l1.Resign(ctx); err != nil {
		t.Errorf("resign after the lease expired: %v", err)
	}
	wantLeader(t, s1, "node2")
}

// A campaign given up (context ended) leaves no candidacy behind that
// could later win.
func TestCampaignCancelled(t *testing.T) {
	ctx := testCtx(t)
	cfg := testConfig(t)
	s1, s2 := openWith(t, cfg), openWith(t, cfg)
	l1 := won(t, campaign(ctx, s1, "node1", 5*time.Second), 5*time.Second, "node1")

	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := s2.Campaign(cctx, "node2", 5*time.Second); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("campaign with expired context: %v, want DeadlineExceeded", err)
	}
	if err := l1.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := s1.Leader(ctx); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("leader after resign = %q, %v; want none (the cancelled candidate must be gone)", got, err)
	}
}

// An operator deletes the leader key by hand: the leader's term ends, the
// next candidate leads, and the old leader can queue up again (its old
// lease no longer holds a candidacy ahead of it).
func TestLeaderKeyDeleted(t *testing.T) {
	ctx := testCtx(t)
	cfg := testConfig(t)
	s1, s2 := openWith(t, cfg), openWith(t, cfg)
	l1 := won(t, campaign(ctx, s1, "node1", 5*time.Second), 5*time.Second, "node1")
	c2 := campaign(ctx, s2, "node2", 5*time.Second)
	time.Sleep(100 * time.Millisecond)

	if err := s1.DeletePrefix(ctx, l1.LeaderKey()); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, l1.Done(), 2*time.Second, "Done after the leader key was deleted")
	l2 := won(t, c2, 2*time.Second, "node2")

	c1 := campaign(ctx, s1, "node1", 5*time.Second)
	time.Sleep(100 * time.Millisecond)
	if err := l2.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	l1 = won(t, c1, 2*time.Second, "node1 again")
	wantLeader(t, s2, "node1")
	l1.Resign(ctx)
}
