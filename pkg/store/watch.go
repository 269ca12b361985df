// SPDX-License-Identifier: Apache-2.0

package store

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// EventType says whether a record was written or deleted.
type EventType int

// Event types.
const (
	Put EventType = iota + 1
	Delete
)

func (t EventType) String() string {
	switch t {
	case Put:
		return "Put"
	case Delete:
		return "Delete"
	}
	return fmt.Sprintf("EventType(%d)", int(t))
}

// Event is one change of one record.
type Event struct {
	Type EventType
	// Kind is KindVolumeSpec, KindVolumeStatus, KindNode, KindNodeSpec or
	// KindPolicy; Name the record's name from its key.
	Kind string
	Name string
	// Revision is the record's ModRevision after a Put, the deletion's
	// revision after a Delete.
	Revision int64
	// Value is the record after a Put (an api.VolumeSpec, VolumeStatus,
	// Node, NodeSpec or Policy value, not a pointer), nil after a Delete or
	// when the record is invalid.
	Value any
	// Invalid is set, and Value nil, when a Put wrote an unusable record.
	// The desired state of Name is then unknown: keep what runs and
	// report it. Never treat it as a Delete, or a typo in a hand edit
	// would remove a volume.
	Invalid *InvalidRecord
}

// WatchResult is one batch of events, all from one etcd revision or more in
// order, or the error that ended the watch.
type WatchResult struct {
	Events []Event
	// Revision is the store revision this batch brings the watcher to.
	Revision int64
	// Err, if set, is the last result: the channel closes after it.
	// errors.Is(Err, ErrCompacted): fromRevision (or the history since)
	// is gone; re-list and watch from the list's revision + 1. Anything
	// else (ErrUnavailable: etcd lost its leader) also means re-list and
	// watch again, after a pause.
	Err error
}

// Watch streams every change of every record under the prefix from
// fromRevision on (0: from now). To follow a list without missing or
// repeating a change, pass the list's revision + 1.
//
// The channel closes when ctx is done (the caller cancels to stop
// watching), when the Store closes, or after a result with Err. While
// etcd is unreachable the watch waits and resumes where it was, without
// losing events, unless the history was compacted meanwhile. Keys of record
// families this build does not know are skipped; invalid records of known
// ones are delivered as events with Invalid set.
//
// Results are not buffered: a caller that stops reading without cancelling
// ctx stalls the watch, not etcd.
func (s *Store) Watch(ctx context.Context, fromRevision int64) <-chan WatchResult {
	out := make(chan WatchResult)
	go func() {
		defer close(out)
		send := func(r WatchResult) bool {
			select {
			case out <- r:
				return true
			case <-ctx.Done():
				return false
			}
		}
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		defer cancel()
		opts := []clientv3.OpOption{clientv3.WithPrefix()}
		if fromRevision > 0 {
			opts = append(opts, clientv3.WithRev(fromRevision))
		}
		for wr := range s.etcd().Watch(wctx, s.prefix, opts...) {
			if err := wr.Err(); err != nil {
				if wr.CompactRevision != 0 {
					err = errorf(ErrCompacted, "store: watch from revision %d: history before revision %d is compacted", fromRevision, wr.CompactRevision)
				} else {
					err = &sentinelError{ErrUnavailable, fmt.Errorf("store: watch: %w", err)}
				}
				send(WatchResult{Err: err})
				return
			}
			events := s.events(wr.Events)
			if len(events) == 0 {
				continue
			}
			if !send(WatchResult{Events: events, Revision: wr.Header.Revision}) {
				return
			}
		}
		if ctx.Err() == nil {
			send(WatchResult{Err: errors.New("store: watch: closed (store closed)")})
		}
	}()
	return out
}

// events decodes etcd events into record events.
func (s *Store) events(evs []*clientv3.Event) []Event {
	var out []Event
	for _, ev := range evs {
		key := string(ev.Kv.Key)
		kind, name, ok, err := parseKey(strings.TrimPrefix(key, s.prefix))
		if !ok && err == nil {
			continue // election keys, unknown families
		}
		e := Event{Kind: kind, Name: name, Revision: ev.Kv.ModRevision}
		if ev.Type == mvccpb.DELETE {
			if err != nil {
				continue // a bad key going away changes nothing
			}
			e.Type = Delete
			out = append(out, e)
			continue
		}
		e.Type = Put
		if err == nil {
			e.Value, err = decodeKind(key, kind, name, ev.Kv.Value)
		}
		if err != nil {
			ir, ok := err.(InvalidRecord)
			if !ok {
				ir = InvalidRecord{Key: key, Err: err}
			}
			e.Value, e.Invalid = nil, &ir
		}
		out = append(out, e)
	}
	return out
}
