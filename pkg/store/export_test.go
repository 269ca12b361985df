// SPDX-License-Identifier: Apache-2.0

package store

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Test hooks: raw access for writing malformed records, compacting history
// and killing leases, which the API deliberately does not offer.

func (s *Store) PutRaw(ctx context.Context, rel, value string) (int64, error) {
	resp, err := s.client.Put(ctx, s.prefix+rel, value)
	if err != nil {
		return 0, err
	}
	return resp.Header.Revision, nil
}

func (s *Store) Compact(ctx context.Context, rev int64) error {
	_, err := s.client.Compact(ctx, rev, clientv3.WithCompactPhysical())
	return err
}

// Revoke revokes a registration's lease behind its back, as if it had
// expired.
func (r *Registration) Revoke(ctx context.Context) error {
	_, err := r.s.client.Revoke(ctx, r.session.Lease())
	return err
}

// Revoke revokes a leadership's lease behind its back.
func (l *Leadership) Revoke(ctx context.Context) error {
	_, err := l.s.client.Revoke(ctx, l.session.Lease())
	return err
}

// DeletePrefix deletes every key under prefix+rel, as an operator's
// etcdctl del --prefix would.
func (s *Store) DeletePrefix(ctx context.Context, rel string) error {
	_, err := s.client.Delete(ctx, s.prefix+rel, clientv3.WithPrefix())
	return err
}

// LeaderKey is the leadership's election key below the prefix.
func (l *Leadership) LeaderKey() string { return l.election.Key()[len(l.s.prefix):] }

// GetRaw reads the value at prefix+rel; ok is false when there is none.
func (s *Store) GetRaw(ctx context.Context, rel string) (value string, ok bool, err error) {
	resp, err := s.client.Get(ctx, s.prefix+rel)
	if err != nil || len(resp.Kvs) == 0 {
		return "", false, err
	}
	return string(resp.Kvs[0].Value), true, nil
}
