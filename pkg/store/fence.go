// SPDX-License-Identifier: Apache-2.0

package store

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tidecache/tidecache/pkg/api"
)

// PutFence creates (expectModRevision 0) or replaces the fence of a node,
// with the same revision checks as PutPolicy. The fence's ModRevision
// (the returned Meta) is what exporting nodes acknowledge.
func (s *Store) PutFence(ctx context.Context, f api.Fence, expectModRevision int64) (Meta, error) {
	return put(ctx, s, s.fenceKey(f.Node), KindFence, f, expectModRevision)
}

// GetFence reads a node's fence: ErrNotFound if the node is not fenced.
func (s *Store) GetFence(ctx context.Context, node string) (api.Fence, Meta, error) {
	return get[api.Fence](ctx, s, s.fenceKey(node), KindFence, node)
}

// ListFences returns every valid fence, the revision the list reflects
// and the invalid records it skipped.
func (s *Store) ListFences(ctx context.Context) ([]Item[api.Fence], int64, []InvalidRecord, error) {
	return list[api.Fence](ctx, s, fencesDir, KindFence)
}

// DeleteFence lifts a node's fence if it is still at expectModRevision.
func (s *Store) DeleteFence(ctx context.Context, node string, expectModRevision int64) error {
	return del(ctx, s, s.fenceKey(node), KindFence, node, expectModRevision)
}

// MarkReplicaOutdated records that a volume's replica lacks writes (see
// api.ReplicaOutdated), in a transaction that holds only while the
// volume's spec is at specModRevision and names r.Owner: an owner the
// leader already failed over gets ErrNotOwner (or ErrConflict after
// another change of the spec; read it again) and must not write without
// the replica. Recording it again is no change.
func (s *Store) MarkReplicaOutdated(ctx context.Context, r api.ReplicaOutdated, specModRevision int64) error {
	val, err := encode(KindReplicaOutdated, r)
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	specKey := s.volumeSpecKey(r.Volume)
	rctx, cancel := s.reqCtx(ctx)
	defer cancel()
	resp, err := s.etcd().Txn(rctx).
		If(clientv3.Compare(clientv3.ModRevision(specKey), "=", specModRevision)).
		Then(clientv3.OpPut(s.outdatedKey(r.Volume), val)).
		Else(clientv3.OpGet(specKey)).
		Commit()
	if err != nil {
		return s.wrap(rctx, fmt.Sprintf("mark the replica of volume %q outdated", r.Volume), err)
	}
	if resp.Succeeded {
		return nil
	}
	got := (*clientv3.GetResponse)(resp.Responses[0].GetResponseRange())
	if len(got.Kvs) > 0 {
		if spec, err := decode[api.VolumeSpec](specKey, KindVolumeSpec, r.Volume, got.Kvs[0].Value); err == nil && spec.Node != r.Owner {
			return errorf(ErrNotOwner, "store: volume %q is node %q's now, not %q's: its replica is not marked outdated", r.Volume, spec.Node, r.Owner)
		}
	}
	return conflict(KindVolumeSpec, r.Volume, specModRevision, got)
}

// GetReplicaOutdated reads the record that a volume's replica is stale:
// ErrNotFound when it is not.
func (s *Store) GetReplicaOutdated(ctx context.Context, volume string) (api.ReplicaOutdated, Meta, error) {
	return get[api.ReplicaOutdated](ctx, s, s.outdatedKey(volume), KindReplicaOutdated, volume)
}

// ClearReplicaOutdated deletes that record (the replica's leg is back in
// sync) if it is still at expectModRevision.
func (s *Store) ClearReplicaOutdated(ctx context.Context, volume string, expectModRevision int64) error {
	return del(ctx, s, s.outdatedKey(volume), KindReplicaOutdated, volume, expectModRevision)
}

// FailOverVolumeSpec replaces a volume's spec (the leader moving it to its
// replica's node) only if it is still at expectModRevision and no record
// says the replica is outdated: with MarkReplicaOutdated, exactly one of
// the two succeeds. ErrReplicaOutdated when the record exists.
func (s *Store) FailOverVolumeSpec(ctx context.Context, spec api.VolumeSpec, expectModRevision int64) (Meta, error) {
	val, err := encode(KindVolumeSpec, spec)
	if err != nil {
		return Meta{}, fmt.Errorf("store: %w", err)
	}
	if expectModRevision <= 0 {
		return Meta{}, fmt.Errorf("store: fail over volume %q: expectModRevision %d: want the revision read", spec.Name, expectModRevision)
	}
	key, outdated := s.volumeSpecKey(spec.Name), s.outdatedKey(spec.Name)
	rctx, cancel := s.reqCtx(ctx)
	defer cancel()
	resp, err := s.etcd().Txn(rctx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", expectModRevision), clientv3.Compare(clientv3.CreateRevision(outdated), "=", 0)).
		Then(clientv3.OpPut(key, val), clientv3.OpGet(key)).
		Else(clientv3.OpGet(key), clientv3.OpGet(outdated)).
		Commit()
	if err != nil {
		return Meta{}, s.wrap(rctx, fmt.Sprintf("fail over volume %q", spec.Name), err)
	}
	if !resp.Succeeded {
		if len(resp.Responses[1].GetResponseRange().Kvs) > 0 {
			return Meta{}, errorf(ErrReplicaOutdated, "store: volume %q: its replica is recorded outdated: it lacks writes the owner acknowledged", spec.Name)
		}
		return Meta{}, conflict(KindVolumeSpec, spec.Name, expectModRevision, (*clientv3.GetResponse)(resp.Responses[0].GetResponseRange()))
	}
	kv := resp.Responses[1].GetResponseRange().Kvs[0]
	return Meta{Key: key, CreateRevision: kv.CreateRevision, ModRevision: kv.ModRevision}, nil
}

// UnfenceVolume takes volume out of the fence of its node, which came
// back before the volume failed over: f is the fence without it, written
// (or, with no volume left, the fence deleted) only while the fence is
// still at fenceModRevision and the volume's spec at specModRevision, in
// one transaction. A failover that moved the spec in between keeps its
// fence; the caller gets ErrConflict and reads again.
func (s *Store) UnfenceVolume(ctx context.Context, f api.Fence, fenceModRevision int64, volume string, specModRevision int64) error {
	key, specKey := s.fenceKey(f.Node), s.volumeSpecKey(volume)
	op := clientv3.OpDelete(key)
	if len(f.Volumes) > 0 {
		val, err := encode(KindFence, f)
		if err != nil {
			return fmt.Errorf("store: %w", err)
		}
		op = clientv3.OpPut(key, val)
	}
	rctx, cancel := s.reqCtx(ctx)
	defer cancel()
	resp, err := s.etcd().Txn(rctx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", fenceModRevision),
			clientv3.Compare(clientv3.ModRevision(specKey), "=", specModRevision)).
		Then(op).
		Commit()
	if err != nil {
		return s.wrap(rctx, fmt.Sprintf("take volume %q out of the fence of node %q", volume, f.Node), err)
	}
	if !resp.Succeeded {
		return errorf(ErrConflict, "store: take volume %q out of the fence of node %q: the fence (revision %d) or the volume's spec (revision %d) changed",
			volume, f.Node, fenceModRevision, specModRevision)
	}
	return nil
}
