// SPDX-License-Identifier: Apache-2.0

package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tidecache/tidecache/pkg/api"
)

// CreateVolumeSpec stores a new volume spec. It fails with ErrConflict if
// a spec of that name exists, whatever it says: creating is not an upsert,
// so two users creating "db" at once do not silently overwrite each other.
//
// A spec on a shared origin also claims the origin, in the same
// transaction: ErrOriginTaken if another volume caches it, whether that
// volume's spec holds a claim or was written before claims existed (the
// specs are looked through first).
func (s *Store) CreateVolumeSpec(ctx context.Context, spec api.VolumeSpec) (Meta, error) {
	o := spec.SharedOrigin
	if o == nil {
		return put(ctx, s, s.volumeSpecKey(spec.Name), KindVolumeSpec, spec, 0)
	}
	specs, _, _, err := s.ListVolumeSpecs(ctx)
	if err != nil {
		return Meta{}, err
	}
	for _, it := range specs {
		if h := it.Value; h.Name != spec.Name && h.SharedOrigin != nil && h.SharedOrigin.Same(*o) {
			return Meta{}, originTaken(spec.Name, *o, h.Name)
		}
	}
	val, err := encode(KindVolumeSpec, spec)
	if err != nil {
		return Meta{}, fmt.Errorf("store: %w", err)
	}
	specKey, claimKey := s.volumeSpecKey(spec.Name), s.originClaimKey(*o)
	// The claim must not exist, or be a stale one: its volume's spec
	// gone (deleted by a release that left claims behind).
	claimFree := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(claimKey), "=", 0)}
	for try := 0; ; try++ {
		rctx, cancel := s.reqCtx(ctx)
		resp, err := s.etcd().Txn(rctx).
			If(append(claimFree, clientv3.Compare(clientv3.CreateRevision(specKey), "=", 0))...).
			Then(clientv3.OpPut(specKey, val), clientv3.OpPut(claimKey, spec.Name), clientv3.OpGet(specKey)).
			Else(clientv3.OpGet(specKey), clientv3.OpGet(claimKey)).
			Commit()
		cancel()
		if err != nil {
			return Meta{}, s.wrap(rctx, fmt.Sprintf("create volume %q", spec.Name), err)
		}
		if resp.Succeeded {
			kv := resp.Responses[2].GetResponseRange().Kvs[0]
			return Meta{Key: specKey, CreateRevision: kv.CreateRevision, ModRevision: kv.ModRevision}, nil
		}
		if cur := resp.Responses[0].GetResponseRange(); len(cur.Kvs) > 0 {
			return Meta{}, conflict(KindVolumeSpec, spec.Name, 0, (*clientv3.GetResponse)(cur))
		}
		if try == claimRetries {
			return Meta{}, errorf(ErrConflict, "store: create volume %q: the claim of export %s of node %s keeps changing; read again", spec.Name, o.Export, o.Node)
		}
		claimFree = []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(claimKey), "=", 0)}
		if claim := resp.Responses[1].GetResponseRange().Kvs; len(claim) > 0 {
			holder := string(claim[0].Value)
			switch _, _, err := s.GetVolumeSpec(ctx, holder); {
			case err == nil:
				return Meta{}, originTaken(spec.Name, *o, holder)
			case !errors.Is(err, ErrNotFound):
				return Meta{}, fmt.Errorf("store: create volume %q: read volume %q, which claims export %s of node %s: %w", spec.Name, holder, o.Export, o.Node, err)
			}
			claimFree = []clientv3.Cmp{
				clientv3.Compare(clientv3.ModRevision(claimKey), "=", claim[0].ModRevision),
				clientv3.Compare(clientv3.CreateRevision(s.volumeSpecKey(holder)), "=", 0),
			}
		}
	}
}

// claimRetries bounds CreateVolumeSpec's transactions when an origin's
// claim changes under it.
const claimRetries = 3

// originTaken is the error for a spec refused because volume holder
// caches its shared origin.
func originTaken(name string, o api.SharedOrigin, holder string) error {
	return errorf(ErrOriginTaken, "store: volume %q: export %s of node %s is cached by volume %q already; two caches over one device would corrupt it",
		name, o.Export, o.Node, holder)
}

// UpdateVolumeSpec replaces the spec if it is still at expectModRevision
// (from Get or List), else fails with ErrConflict; ErrNotFound as well if
// the spec was deleted. Which changes are allowed (size, node) is for the
// caller and the owning node to decide; the store checks only that the new
// spec is valid.
func (s *Store) UpdateVolumeSpec(ctx context.Context, spec api.VolumeSpec, expectModRevision int64) (Meta, error) {
	if expectModRevision <= 0 {
		return Meta{}, fmt.Errorf("store: update volume %q: expectModRevision %d: want the revision read (CreateVolumeSpec creates)", spec.Name, expectModRevision)
	}
	return put(ctx, s, s.volumeSpecKey(spec.Name), KindVolumeSpec, spec, expectModRevision)
}

// GetVolumeSpec reads one spec: ErrNotFound if there is none, an
// InvalidRecord (ErrInvalidRecord) if it is unusable.
func (s *Store) GetVolumeSpec(ctx context.Context, name string) (api.VolumeSpec, Meta, error) {
	return get[api.VolumeSpec](ctx, s, s.volumeSpecKey(name), KindVolumeSpec, name)
}

// DeleteVolumeSpec deletes the spec if it is still at expectModRevision,
// and its status (and any record of its replica outdated, and its claim
// of a shared origin) in the same transaction, so no status outlives its
// spec. The owning node sees the deletion through its watch and removes
// the volume.
func (s *Store) DeleteVolumeSpec(ctx context.Context, name string, expectModRevision int64) error {
	also := []string{s.volumeStatusKey(name), s.outdatedKey(name)}
	spec, meta, err := s.GetVolumeSpec(ctx, name)
	switch {
	case errors.Is(err, ErrNotFound) || errors.Is(err, ErrInvalidRecord):
		// del reports the conflict, or deletes what cannot be read.
	case err != nil:
		return err
	case meta.ModRevision == expectModRevision && spec.SharedOrigin != nil:
		return s.deleteClaimingSpec(ctx, name, expectModRevision, s.originClaimKey(*spec.SharedOrigin), also)
	}
	return del(ctx, s, s.volumeSpecKey(name), KindVolumeSpec, name, expectModRevision, also...)
}

// deleteClaimingSpec deletes the spec of a volume on a shared origin, the
// keys also, and the origin's claim if it is the volume's (a spec written
// before claims existed has none, and another volume may hold it since).
func (s *Store) deleteClaimingSpec(ctx context.Context, name string, expectModRevision int64, claimKey string, also []string) error {
	specKey := s.volumeSpecKey(name)
	ops := []clientv3.Op{clientv3.OpDelete(specKey)}
	for _, k := range also {
		ops = append(ops, clientv3.OpDelete(k))
	}
	ops = append(ops, clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.Value(claimKey), "=", name)}, []clientv3.Op{clientv3.OpDelete(claimKey)}, nil))
	return delOps(ctx, s, specKey, KindVolumeSpec, name, expectModRevision, ops)
}

// ListVolumeSpecs returns every valid spec, the revision the list reflects
// (watch from rev+1) and the invalid records it skipped.
func (s *Store) ListVolumeSpecs(ctx context.Context) (specs []Item[api.VolumeSpec], rev int64, invalid []InvalidRecord, err error) {
	return list[api.VolumeSpec](ctx, s, volumesDir, KindVolumeSpec)
}

// statusRetries bounds PutVolumeStatus's retries when the spec changes
// between its read and its transaction.
const statusRetries = 3

// PutVolumeStatus writes a volume's status on behalf of st.Node. The write
// is a transaction on the spec's ModRevision: it happens only if the spec
// exists (else ErrNotFound) and names st.Node as its node (else
// ErrNotOwner), so a node that lost a volume, or whose volume was deleted,
// cannot write a stale status. A zero UpdatedAt is set to now.
func (s *Store) PutVolumeStatus(ctx context.Context, st api.VolumeStatus) error {
	if st.UpdatedAt.IsZero() {
		st.UpdatedAt = time.Now().UTC()
	}
	val, err := encode(KindVolumeStatus, st)
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	specKey, statusKey := s.volumeSpecKey(st.Name), s.volumeStatusKey(st.Name)
	for range statusRetries {
		spec, meta, err := s.GetVolumeSpec(ctx, st.Name)
		if err != nil {
			return fmt.Errorf("put status of volume %q: %w", st.Name, err)
		}
		if spec.Node != st.Node {
			return errorf(ErrNotOwner, "store: status of volume %q: written by node %q, but the spec places it on %q", st.Name, st.Node, spec.Node)
		}
		rctx, cancel := s.reqCtx(ctx)
		resp, err := s.etcd().Txn(rctx).
			If(clientv3.Compare(clientv3.ModRevision(specKey), "=", meta.ModRevision)).
			Then(clientv3.OpPut(statusKey, val)).
			Commit()
		err = s.wrap(rctx, fmt.Sprintf("put status of volume %q", st.Name), err)
		cancel()
		if err != nil {
			return err
		}
		if resp.Succeeded {
			return nil
		}
		// The spec changed since it was read: check ownership again.
	}
	return errorf(ErrConflict, "store: status of volume %q: the spec kept changing (%d attempts)", st.Name, statusRetries)
}

// GetVolumeStatus reads one status: ErrNotFound if the node has written
// none yet.
func (s *Store) GetVolumeStatus(ctx context.Context, name string) (api.VolumeStatus, Meta, error) {
	return get[api.VolumeStatus](ctx, s, s.volumeStatusKey(name), KindVolumeStatus, name)
}

// ListVolumeStatuses returns every valid status, the revision the list
// reflects and the invalid records it skipped.
func (s *Store) ListVolumeStatuses(ctx context.Context) ([]Item[api.VolumeStatus], int64, []InvalidRecord, error) {
	return list[api.VolumeStatus](ctx, s, volumesDir, KindVolumeStatus)
}
