// SPDX-License-Identifier: Apache-2.0

package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/tidecache/tidecache/pkg/api"
)

// Leadership is this node's term as cluster leader, won by Campaign. It is
// an etcd concurrency.Election on the key prefix election/leader, held by a
// lease of its own (separate from the node's Registration, so resigning
// does not unregister the node).
//
// Done is closed when the term ends: Resign, the lease expired or
// keep-alives failed for its TTL, or the leader key was deleted by hand. A
// leader must stop making cluster-wide decisions when Done closes; the
// next leader may already be acting.
type Leadership struct {
	s        *Store
	node     string
	session  *concurrency.Session
	election *concurrency.Election

	stop     context.CancelFunc
	doneOnce sync.Once
	done     chan struct{}
}

// Campaign blocks until node leads or ctx is done (then it returns ctx's
// error and leaves no candidacy behind). Candidates queue in the order
// they campaigned; when the leader resigns or its lease expires, the next
// one leads. ttl bounds how long a dead leader blocks the others.
//
// The caller Resigns the Leadership, or cancels nothing: Store.Close ends
// it too, leaving the lease to expire.
func (s *Store) Campaign(ctx context.Context, node string, ttl time.Duration) (*Leadership, error) {
	if err := api.ValidateNodeName(node); err != nil {
		return nil, fmt.Errorf("store: campaign: %w", err)
	}
	what := fmt.Sprintf("campaign of node %q", node)
	session, err := s.newSession(ctx, ttl, what)
	if err != nil {
		return nil, err
	}
	election := concurrency.NewElection(session, s.prefix+electionPrefix)

	// Stop campaigning if our own lease is lost while we wait: the
	// election would otherwise still report a win once the candidates
	// before us are gone, with our key gone too.
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopAfter := context.AfterFunc(session.Ctx(), cancel)
	defer stopAfter()
	giveUp := func() {
		session.Orphan()
		s.revoke(context.WithoutCancel(ctx), session.Lease()) // deletes our candidate key
	}
	// election.Campaign, when its context ends, resigns on the client's
	// context, which blocks for as long as etcd is unreachable. Wait for
	// it only while ctx lives; after that it finishes in the background
	// (at the latest when the Store closes).
	errc := make(chan error, 1)
	go func() { errc <- election.Campaign(cctx, node) }()
	select {
	case err = <-errc:
	case <-ctx.Done():
		giveUp()
		return nil, fmt.Errorf("store: %s: %w", what, ctx.Err())
	}
	if err == nil {
		err = s.checkLeader(ctx, election)
	}
	if err != nil {
		leaseLost := session.Ctx().Err() != nil
		giveUp()
		switch {
		case ctx.Err() != nil:
			return nil, fmt.Errorf("store: %s: %w", what, ctx.Err())
		case leaseLost:
			return nil, errorf(ErrLeaseLost, "store: %s: lease lost while campaigning", what)
		case errors.Is(err, ErrLeaseLost):
			return nil, err
		}
		return nil, s.wrap(ctx, what, err)
	}

	mctx, stop := context.WithCancel(context.Background())
	l := &Leadership{s: s, node: node, session: session, election: election, stop: stop, done: make(chan struct{})}
	go l.monitor(mctx, election.Key(), election.Header().Revision)
	return l, nil
}

// checkLeader confirms that our key exists and is the oldest candidate.
func (s *Store) checkLeader(ctx context.Context, e *concurrency.Election) error {
	rctx, cancel := s.reqCtx(ctx)
	defer cancel()
	resp, err := s.etcd().Get(rctx, s.prefix+electionPrefix+"/", clientv3.WithFirstCreate()...)
	if err != nil {
		return err
	}
	if len(resp.Kvs) == 0 || string(resp.Kvs[0].Key) != e.Key() {
		return errorf(ErrLeaseLost, "store: campaign: our candidacy %s is gone", e.Key())
	}
	return nil
}

// monitor closes Done when the session ends or the leader key goes away.
// It watches key from rev+1 (the campaign's revision); if the watch
// breaks (compaction, no leader), it checks the key directly and watches
// again, until the session says the lease is gone.
func (l *Leadership) monitor(ctx context.Context, key string, rev int64) {
	// If the term ended with the lease still alive (the key was deleted
	// by hand), release the lease: a candidacy left alive would queue
	// ahead of this node's next campaign. A lost lease (expired, or the
	// Store closed) is left alone. This runs after Done is closed: a
	// leader must learn at once that its term is over.
	defer func() {
		if l.session.Ctx().Err() == nil {
			l.session.Orphan()
			l.s.revoke(context.Background(), l.session.Lease())
		}
	}()
	defer l.end()
	stopAfter := context.AfterFunc(l.session.Ctx(), func() { l.stop() })
	defer stopAfter()
	for ctx.Err() == nil {
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		for wr := range l.s.etcd().Watch(wctx, key, clientv3.WithRev(rev+1)) {
			if wr.Err() != nil {
				break
			}
			for _, ev := range wr.Events {
				if ev.Type == mvccpb.DELETE {
					cancel()
					l.s.log.Warn("leader key deleted", "node", l.node, "key", key, "revision", ev.Kv.ModRevision)
					return
				}
			}
			rev = wr.Header.Revision
		}
		cancel()
		if ctx.Err() != nil {
			return
		}
		rctx, rcancel := l.s.reqCtx(ctx)
		resp, err := l.s.etcd().Get(rctx, key)
		rcancel()
		switch {
		case err == nil && len(resp.Kvs) == 0:
			l.s.log.Warn("leader key gone", "node", l.node, "key", key)
			return
		case err == nil:
			rev = resp.Header.Revision
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (l *Leadership) end() { l.doneOnce.Do(func() { close(l.done) }) }

// Done is closed when the leadership ends.
func (l *Leadership) Done() <-chan struct{} { return l.done }

// Resign gives up leadership (the next candidate leads at once) and
// revokes the lease. Done is closed whatever the outcome; if etcd cannot
// be reached, the lease expires after its TTL and the error says so.
func (l *Leadership) Resign(ctx context.Context) error {
	l.stop()
	rctx, cancel := l.s.reqCtx(ctx)
	err := l.election.Resign(rctx)
	err = l.s.wrap(rctx, fmt.Sprintf("resign leadership of node %q", l.node), err)
	cancel()
	l.session.Orphan()
	err = errors.Join(err, l.s.revoke(ctx, l.session.Lease()))
	<-l.done
	return err
}

// Leader returns the name of the current leader, or ErrNotFound when no
// node leads (none campaigns, or the last leader's lease just expired).
func (s *Store) Leader(ctx context.Context) (string, error) {
	rctx, cancel := s.reqCtx(ctx)
	defer cancel()
	resp, err := s.etcd().Get(rctx, s.prefix+electionPrefix+"/", clientv3.WithFirstCreate()...)
	if err != nil {
		return "", s.wrap(rctx, "get leader", err)
	}
	if len(resp.Kvs) == 0 {
		return "", errorf(ErrNotFound, "store: no leader")
	}
	return string(resp.Kvs[0].Value), nil
}
