// SPDX-License-Identifier: Apache-2.0

package store

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/tidecache/tidecache/pkg/api"
)

// ListNodes returns the registered (live) nodes, the revision the list
// reflects and the invalid records it skipped. A node whose lease expired
// is not listed: etcd deleted its record.
func (s *Store) ListNodes(ctx context.Context) ([]Item[api.Node], int64, []InvalidRecord, error) {
	return list[api.Node](ctx, s, nodesDir, KindNode)
}

// GetNode reads one node's record: ErrNotFound if the node is not
// registered (never was, or its lease expired).
func (s *Store) GetNode(ctx context.Context, name string) (api.Node, Meta, error) {
	return get[api.Node](ctx, s, s.nodeKey(name), KindNode, name)
}

// Registration is a node's membership: its record nodes/<name>, attached
// to a lease the Registration keeps alive in the background. When the node
// dies, or loses etcd for longer than the TTL, the lease expires and etcd
// deletes the record; the other nodes see the deletion in their watches.
//
// Lost is closed when the lease can no longer be counted on; the daemon
// then registers again with a new Registration. Close revokes the lease.
type Registration struct {
	s       *Store
	name    string
	key     string
	session *concurrency.Session

	lostOnce  sync.Once
	lost      chan struct{}
	closeOnce sync.Once
	closed    chan struct{}
}

// leaseSeconds turns a TTL into etcd's whole seconds, rounding up. etcd
// raises a TTL below its minimum (1.5 election timeouts, 2 s by default).
func leaseSeconds(ttl time.Duration) (int64, error) {
	if ttl <= 0 {
		return 0, fmt.Errorf("store: lease TTL %v: must be positive", ttl)
	}
	return int64(math.Ceil(ttl.Seconds())), nil
}

// newSession grants a lease within RequestTimeout and starts keeping it
// alive. The keep-alive runs on the client's context, not ctx, so it
// outlives the call; the session ends on Orphan/Close, on lease expiry, or
// when keep-alives go unanswered for the TTL.
func (s *Store) newSession(ctx context.Context, ttl time.Duration, what string) (*concurrency.Session, error) {
	secs, err := leaseSeconds(ttl)
	if err != nil {
		return nil, err
	}
	rctx, cancel := s.reqCtx(ctx)
	defer cancel()
	c := s.etcd() // the lease and its keep-alive on one client
	lease, err := c.Grant(rctx, secs)
	if err != nil {
		return nil, s.wrap(rctx, what+": grant lease", err)
	}
	session, err := concurrency.NewSession(c, concurrency.WithLease(lease.ID), concurrency.WithTTL(int(secs)))
	if err != nil {
		s.revoke(context.WithoutCancel(ctx), lease.ID)
		return nil, s.wrap(rctx, what+": keep lease alive", err)
	}
	return session, nil
}

// revoke revokes a lease within ctx and RequestTimeout. Error paths pass
// context.WithoutCancel(ctx): leaving a lease to expire delays what it
// guards by its TTL.
func (s *Store) revoke(ctx context.Context, id clientv3.LeaseID) error {
	rctx, cancel := s.reqCtx(ctx)
	defer cancel()
	_, err := s.etcd().Revoke(rctx, id)
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return nil // expired already: what revoking was for
	}
	return s.wrap(rctx, "revoke lease", err)
}

// Register writes n as nodes/<n.Name> under a new lease of ttl and keeps
// the lease alive until Close or until it is lost. A record already there
// (this node's previous run, within its TTL) is taken over: its old lease
// no longer holds it. A zero StartedAt or UpdatedAt is set to now.
//
// ctx bounds the registration; the lease outlives it. The caller Closes
// the Registration.
func (s *Store) Register(ctx context.Context, n api.Node, ttl time.Duration) (*Registration, error) {
	now := time.Now().UTC()
	if n.StartedAt.IsZero() {
		n.StartedAt = now
	}
	if n.UpdatedAt.IsZero() {
		n.UpdatedAt = now
	}
	val, err := encode(KindNode, n)
	if err != nil {
		return nil, fmt.Errorf("store: register: %w", err)
	}
	what := fmt.Sprintf("register node %q", n.Name)
	session, err := s.newSession(ctx, ttl, what)
	if err != nil {
		return nil, err
	}
	key := s.nodeKey(n.Name)
	prev, err := s.putNodeRecord(ctx, key, n, val, session.Lease(), what)
	if err != nil {
		session.Orphan()
		s.revoke(context.WithoutCancel(ctx), session.Lease())
		return nil, err
	}
	if prev != nil && prev.Lease != 0 {
		s.log.Info("node record taken over from an earlier registration", "node", n.Name,
			"old_lease", fmt.Sprintf("%x", prev.Lease))
	}
	r := &Registration{
		s: s, name: n.Name, key: key, session: session,
		lost: make(chan struct{}), closed: make(chan struct{}),
	}
	go func() {
		select {
		case <-session.Done():
			r.markLost()
		case <-r.closed:
		}
	}()
	return r, nil
}

// putNodeRecord writes the record of n (val) under lease unless a live
// record of the name belongs to another instance (ErrNodeNameInUse). A
// record exists only while its lease does, so one that is there is held
// by a running daemon, or by one dead for less than its TTL. The write is
// checked against the revision read, so two machines registering one name
// at once cannot both pass. It returns the record it replaced, if any.
func (s *Store) putNodeRecord(ctx context.Context, key string, n api.Node, val string, lease clientv3.LeaseID, what string) (*mvccpb.KeyValue, error) {
	rctx, cancel := s.reqCtx(ctx)
	defer cancel()
	for {
		resp, err := s.etcd().Get(rctx, key)
		if err != nil {
			return nil, s.wrap(rctx, what, err)
		}
		unchanged := clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
		var prev *mvccpb.KeyValue
		if len(resp.Kvs) > 0 {
			prev = resp.Kvs[0]
			if err := sameInstance(key, n, prev); err != nil {
				return nil, err
			}
			unchanged = clientv3.Compare(clientv3.ModRevision(key), "=", prev.ModRevision)
		}
		txn, err := s.etcd().Txn(rctx).If(unchanged).Then(clientv3.OpPut(key, val, clientv3.WithLease(lease))).Commit()
		if err != nil {
			return nil, s.wrap(rctx, what, err)
		}
		if txn.Succeeded {
			return prev, nil
		}
		// Written or deleted between the read and the write: look again.
	}
}

// sameInstance returns ErrNodeNameInUse when the live record prev of the
// node name was registered by another instance than n's. A record or a
// node without an instance (a daemon older than the field) is not
// compared, and an unreadable record is replaced, as before.
func sameInstance(key string, n api.Node, prev *mvccpb.KeyValue) error {
	held, err := decode[api.Node](key, KindNode, n.Name, prev.Value)
	if err != nil || held.Instance == "" || n.Instance == "" || held.Instance == n.Instance {
		return nil
	}
	return errorf(ErrNodeNameInUse, "store: register node %q: the name is registered by a running daemon on another machine "+
		"(address %s, boot id %s, started %s; this machine's boot id is %s). Two daemons with one name would run the same volumes: "+
		"give this one its own name with --node (the name defaults to the hostname, which clones of one image share), "+
		"or stop the other; a dead one's record goes within the lease TTL",
		n.Name, orUnknown(held.Address), held.Instance, held.StartedAt.Format(time.RFC3339), n.Instance)
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

func (r *Registration) markLost() { r.lostOnce.Do(func() { close(r.lost) }) }

// Lost is closed when the lease expired, keep-alives failed for its TTL
// (etcd unreachable), another registration took the record over, or the
// Registration was closed. The record may already be gone; register anew.
func (r *Registration) Lost() <-chan struct{} { return r.lost }

// Update rewrites the node's record under the same lease, if the record is
// still this registration's; otherwise it fails with ErrLeaseLost and Lost
// is closed. A zero UpdatedAt is set to now. n.Name must not change.
func (r *Registration) Update(ctx context.Context, n api.Node) error {
	if n.Name != r.name {
		return fmt.Errorf("store: update node %q: registration is for %q", n.Name, r.name)
	}
	select {
	case <-r.lost:
		return errorf(ErrLeaseLost, "store: update node %q: registration lost", r.name)
	default:
	}
	if n.UpdatedAt.IsZero() {
		n.UpdatedAt = time.Now().UTC()
	}
	val, err := encode(KindNode, n)
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	lease := r.session.Lease()
	rctx, cancel := r.s.reqCtx(ctx)
	defer cancel()
	resp, err := r.s.etcd().Txn(rctx).
		If(clientv3.Compare(clientv3.LeaseValue(r.key), "=", lease)).
		Then(clientv3.OpPut(r.key, val, clientv3.WithLease(lease))).
		Commit()
	if err != nil {
		return r.s.wrap(rctx, fmt.Sprintf("update node %q", r.name), err)
	}
	if !resp.Succeeded {
		r.markLost()
		return errorf(ErrLeaseLost, "store: update node %q: the record is no longer held by this registration's lease", r.name)
	}
	return nil
}

// Close stops the keep-alive and revokes the lease, which deletes the
// record at once (a clean shutdown shows as a departure, not as a node
// dying a TTL later). It closes Lost. If etcd cannot be reached within
// ctx or RequestTimeout, the lease expires on its own.
func (r *Registration) Close(ctx context.Context) error {
	var err error
	r.closeOnce.Do(func() {
		close(r.closed)
		r.markLost()
		r.session.Orphan()
		err = r.s.revoke(ctx, r.session.Lease())
	})
	return err
}
