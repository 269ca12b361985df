package store

import (
	"context"

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
