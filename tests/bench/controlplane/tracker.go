// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/store"
)

// tracker follows every volume status through one etcd watch, the way
// tidectl or an operator would see a volume become ready, and records when
// each status arrived.
type tracker struct {
	mu sync.Mutex
	// seen holds, per volume, the statuses that arrived, in order.
	seen map[string][]seenStatus
	// changed is closed, and replaced, whenever a status arrives.
	changed chan struct{}
	err     error
}

type seenStatus struct {
	observed int64
	state    string
	at       time.Time
}

// startTracker watches the store from its current revision until ctx is
// done.
func startTracker(ctx context.Context, st *store.Store) (*tracker, error) {
	_, rev, _, err := st.ListVolumeStatuses(ctx)
	if err != nil {
		return nil, fmt.Errorf("list volume statuses: %w", err)
	}
	t := &tracker{seen: map[string][]seenStatus{}, changed: make(chan struct{})}
	ch := st.Watch(ctx, rev+1)
	go func() {
		for wr := range ch {
			now := time.Now()
			t.mu.Lock()
			if wr.Err != nil {
				t.err = fmt.Errorf("status watch ended: %w", wr.Err)
			}
			for _, ev := range wr.Events {
				vs, ok := ev.Value.(api.VolumeStatus)
				if ev.Kind != store.KindVolumeStatus || !ok {
					continue
				}
				t.seen[ev.Name] = append(t.seen[ev.Name], seenStatus{observed: vs.ObservedRevision, state: vs.State, at: now})
			}
			close(t.changed)
			t.changed = make(chan struct{})
			t.mu.Unlock()
		}
	}()
	return t, nil
}

// wait returns when the first status of name that is active and reflects
// spec revision rev or later arrived, waiting for it up to timeout.
func (t *tracker) wait(ctx context.Context, timeout time.Duration, name string, rev int64) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		t.mu.Lock()
		for _, s := range t.seen[name] {
			if s.observed >= rev && s.state == api.StateActive {
				t.mu.Unlock()
				return s.at, nil
			}
		}
		err, changed := t.err, t.changed
		t.mu.Unlock()
		if err != nil {
			return time.Time{}, err
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("volume %s never became %s at revision %d: %w", name, api.StateActive, rev, ctx.Err())
		case <-changed:
		}
	}
}
