// SPDX-License-Identifier: Apache-2.0

package store

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tidecache/tidecache/pkg/api"
)

// CreateVolumeSpec stores a new volume spec. It fails with ErrConflict if
// a spec of that name exists, whatever it says: creating is not an upsert,
// so two users creating "db" at once do not silently overwrite each other.
func (s *Store) CreateVolumeSpec(ctx context.Context, spec api.VolumeSpec) (Meta, error) {
	return put(ctx, s, s.volumeSpecKey(spec.Name), KindVolumeSpec, spec, 0)
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
// and its status (and any record of its replica outdated) in the same
// transaction, so no status outlives its spec.
// The owning node sees the deletion through its watch and removes the
// volume.
func (s *Store) DeleteVolumeSpec(ctx context.Context, name string, expectModRevision int64) error {
	return del(ctx, s, s.volumeSpecKey(name), KindVolumeSpec, name, expectModRevision, s.volumeStatusKey(name), s.outdatedKey(name))
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
