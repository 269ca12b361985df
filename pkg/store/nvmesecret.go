// SPDX-License-Identifier: Apache-2.0

package store

import (
	"context"

	"github.com/tidecache/tidecache/pkg/api"
)

// PutNVMeSecret creates (expectModRevision 0) or replaces the secret an
// exporter made for a host, with the same revision checks as PutPolicy.
func (s *Store) PutNVMeSecret(ctx context.Context, sec api.NVMeSecret, expectModRevision int64) (Meta, error) {
	return put(ctx, s, s.nvmeSecretKey(sec.Exporter, sec.Host), KindNVMeSecret, sec, expectModRevision)
}

// GetNVMeSecret reads the secret exporter made for host: ErrNotFound if
// it made none.
func (s *Store) GetNVMeSecret(ctx context.Context, exporter, host string) (api.NVMeSecret, Meta, error) {
	return get[api.NVMeSecret](ctx, s, s.nvmeSecretKey(exporter, host), KindNVMeSecret, exporter+"/"+host)
}

// ListNVMeSecrets returns every secret record (the exporters' and hosts'
// names are in them; the secrets are sealed).
func (s *Store) ListNVMeSecrets(ctx context.Context) ([]Item[api.NVMeSecret], int64, []InvalidRecord, error) {
	return list[api.NVMeSecret](ctx, s, nvmeSecretsDir, KindNVMeSecret)
}

// DeleteNVMeSecret deletes the secret exporter made for host if it is
// still at expectModRevision.
func (s *Store) DeleteNVMeSecret(ctx context.Context, exporter, host string, expectModRevision int64) error {
	return del(ctx, s, s.nvmeSecretKey(exporter, host), KindNVMeSecret, exporter+"/"+host, expectModRevision)
}
