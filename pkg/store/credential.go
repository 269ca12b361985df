// SPDX-License-Identifier: Apache-2.0

package store

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap/zapcore"

	"github.com/tidecache/tidecache/pkg/store/etcdlog"
)

// newClient makes the etcd client for cfg. With a user it authenticates
// at once, within DialTimeout; without one it does not wait for etcd.
func newClient(cfg Config, tlsCfg *tls.Config, log *slog.Logger) (*clientv3.Client, error) {
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   cfg.Endpoints,
		DialTimeout: cfg.DialTimeout,
		// Probe idle connections (Config.KeepAlive says why).
		DialKeepAliveTime:    cfg.KeepAlive,
		DialKeepAliveTimeout: cfg.KeepAlive,
		PermitWithoutStream:  true,
		TLS:                  tlsCfg,
		Username:             cfg.Username,
		Password:             cfg.Password,
		// Errors only: at warn the client logs every retried request, which
		// during an outage repeats what Healthy already reports.
		Logger: etcdlog.New(log, zapcore.ErrorLevel),
	})
	if err == nil {
		return c, nil
	}
	if hint := deniedHint(err, cfg.Username); hint != "" {
		return nil, &sentinelError{ErrPermissionDenied, fmt.Errorf("store: etcd at %s: %s: %w", strings.Join(cfg.Endpoints, ","), hint, err)}
	}
	if cfg.Username != "" && unavailable(err) {
		return nil, &sentinelError{ErrUnavailable, fmt.Errorf("store: etcd at %s: cannot authenticate as %q: etcd unavailable: %w", strings.Join(cfg.Endpoints, ","), cfg.Username, err)}
	}
	return nil, fmt.Errorf("store: etcd client for %s: %w", strings.Join(cfg.Endpoints, ","), err)
}

// etcd returns the client requests go through now.
func (s *Store) etcd() *clientv3.Client {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.client
}

// user returns the etcd user the store authenticates as, "" for none.
func (s *Store) user() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.username
}

// rechoose asks Config.Credential again when etcd refused a request (err)
// for want of a user while the store has none, and if it now names one,
// replaces the client by one that authenticates with it. Why: a client
// picks its credential from files the local etcd member writes when it
// starts (pkg/etcdauth), and a daemon started before its member found
// none; etcd's client cannot take a credential once made, so the store
// makes another. The client it replaces is closed: its watches end, and
// its leases go unrenewed (none was granted without a user), which the
// callers meet as the ends they already handle.
//
// A nil error means nothing was to be done or the client was replaced; the
// refused request is not repeated, its caller retries.
func (s *Store) rechoose(err error) error {
	if s.cfg.Credential == nil || !errors.Is(rpctypes.Error(err), rpctypes.ErrUserEmpty) {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.username != "" {
		return nil // closed, or another request chose already
	}
	cred, err := s.cfg.Credential()
	if err != nil || cred.None() {
		return err
	}
	cfg := s.cfg
	cfg.Username, cfg.Password = cred.User, cred.Password
	tlsCfg, err := cfg.tlsConfig()
	if err != nil {
		return err
	}
	c, err := newClient(cfg, tlsCfg, s.log)
	if err != nil {
		return fmt.Errorf("%s's password from %s: %w", cred.User, cred.File, err)
	}
	old := s.client
	s.client, s.username = c, cred.User
	s.log.Info(fmt.Sprintf("etcd asks for a user; using %s's password from %s", cred.User, cred.File), "user", cred.User, "file", cred.File)
	old.Close()
	return nil
}
