// SPDX-License-Identifier: Apache-2.0

package store

import (
	"context"

	"github.com/tidecache/tidecache/pkg/api"
)

// PutPolicy creates the policy (expectModRevision 0; ErrConflict if it
// exists) or replaces it if it is still at expectModRevision (ErrConflict
// if it changed, with ErrNotFound if it was deleted). Daemons watching the
// prefix apply the change to every volume using the policy.
func (s *Store) PutPolicy(ctx context.Context, p api.Policy, expectModRevision int64) (Meta, error) {
	return put(ctx, s, s.policyKey(p.Name), KindPolicy, p, expectModRevision)
}

// GetPolicy reads one policy: ErrNotFound if there is none. A volume whose
// policy does not exist runs with api.DefaultPolicy, and without one, with
// the kernel's defaults; that choice is pkg/policy's.
func (s *Store) GetPolicy(ctx context.Context, name string) (api.Policy, Meta, error) {
	return get[api.Policy](ctx, s, s.policyKey(name), KindPolicy, name)
}

// ListPolicies returns every valid policy, the revision the list reflects
// and the invalid records it skipped.
func (s *Store) ListPolicies(ctx context.Context) ([]Item[api.Policy], int64, []InvalidRecord, error) {
	return list[api.Policy](ctx, s, policiesDir, KindPolicy)
}

// DeletePolicy deletes the policy if it is still at expectModRevision.
// Volumes naming it fall back as GetPolicy describes.
func (s *Store) DeletePolicy(ctx context.Context, name string, expectModRevision int64) error {
	return del(ctx, s, s.policyKey(name), KindPolicy, name, expectModRevision)
}

// PutNodeSpec creates (expectModRevision 0) or replaces a node's spec, with
// the same revision checks as PutPolicy. The node need not be registered:
// a drain can be set before a node comes back.
func (s *Store) PutNodeSpec(ctx context.Context, ns api.NodeSpec, expectModRevision int64) (Meta, error) {
	return put(ctx, s, s.nodeSpecKey(ns.Name), KindNodeSpec, ns, expectModRevision)
}

// GetNodeSpec reads a node's spec: ErrNotFound if there is none, which
// means the zero NodeSpec (not drained).
func (s *Store) GetNodeSpec(ctx context.Context, name string) (api.NodeSpec, Meta, error) {
	return get[api.NodeSpec](ctx, s, s.nodeSpecKey(name), KindNodeSpec, name)
}

// ListNodeSpecs returns every valid node spec, the revision the list
// reflects and the invalid records it skipped.
func (s *Store) ListNodeSpecs(ctx context.Context) ([]Item[api.NodeSpec], int64, []InvalidRecord, error) {
	return list[api.NodeSpec](ctx, s, nodeSpecsDir, KindNodeSpec)
}

// DeleteNodeSpec deletes a node's spec if it is still at
// expectModRevision.
func (s *Store) DeleteNodeSpec(ctx context.Context, name string, expectModRevision int64) error {
	return del(ctx, s, s.nodeSpecKey(name), KindNodeSpec, name, expectModRevision)
}
