// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/etcdauth"
	"github.com/tidecache/tidecache/pkg/store"
)

// TestAuthDaemon runs the daemon with its embedded etcd as --embedded-etcd
// does by default (EtcdAuthDir set): the daemon registers and builds a
// volume through root's credential, which it picks itself; a client with
// no credential (any local user before) can neither read nor delete the
// spec; the viewer's credential reads the volume but is refused its
// deletion, and the volume stays on the node. Red before: the daemon's
// etcd answered every local client.
func TestAuthDaemon(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := testConfig(t, filepath.Join(t.TempDir(), "etcd"))
	cfg.EtcdAuthDir = filepath.Join(cfg.StateDir, "etcd-auth")
	r := start(t, cfg)

	rootCred, err := etcdauth.Choose(etcdauth.Request{Dir: cfg.EtcdAuthDir, Endpoints: []string{cfg.EtcdClientURL}})
	if err != nil || rootCred.User != etcdauth.RootUser {
		t.Fatalf("credential a root client on the node picks: %+v, %v", rootCred, err)
	}
	root := openStoreAs(t, cfg.EtcdClientURL, rootCred)
	waitFor(t, "n1 registered through root's credential", func() bool {
		_, _, err := root.GetNode(ctx, "n1")
		return err == nil
	})
	if _, err := root.CreateVolumeSpec(ctx, api.VolumeSpec{Name: "db", Node: "n1", Pool: "fast", SizeBytes: 1 << 30, WriteCacheBytes: 64 << 20}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "db built", func() bool { return r.eng.Exists("db") })

	anon := openStoreAs(t, cfg.EtcdClientURL, etcdauth.Credential{})
	if _, _, err := anon.GetVolumeSpec(ctx, "db"); !errors.Is(err, store.ErrPermissionDenied) {
		t.Fatalf("read without a credential: %v, want ErrPermissionDenied", err)
	}
	if err := anon.DeleteVolumeSpec(ctx, "db", 1); !errors.Is(err, store.ErrPermissionDenied) {
		t.Fatalf("delete without a credential: %v, want ErrPermissionDenied", err)
	}

	viewerCred, err := etcdauth.Choose(etcdauth.Request{User: etcdauth.ViewerUser, Dir: cfg.EtcdAuthDir, Endpoints: []string{cfg.EtcdClientURL}})
	if err != nil {
		t.Fatal(err)
	}
	viewer := openStoreAs(t, cfg.EtcdClientURL, viewerCred)
	_, meta, err := viewer.GetVolumeSpec(ctx, "db")
	if err != nil {
		t.Fatalf("viewer cannot read the spec: %v", err)
	}
	if err := viewer.DeleteVolumeSpec(ctx, "db", meta.ModRevision); !errors.Is(err, store.ErrPermissionDenied) {
		t.Fatalf("viewer's delete: %v, want ErrPermissionDenied", err)
	}
	time.Sleep(2 * cfg.Reconcile.ResyncInterval)
	if !r.eng.Exists("db") {
		t.Fatal("volume db gone from the node after refused deletes")
	}
}

// openStoreAs opens a store client on endpoint with cred (none if zero).
func openStoreAs(t *testing.T, endpoint string, cred etcdauth.Credential) *store.Store {
	t.Helper()
	cfg := store.DefaultConfig()
	cfg.Endpoints = []string{endpoint}
	cfg.Username, cfg.Password = cred.User, cred.Password
	st, err := store.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}
