// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/etcdauth"
	"github.com/tidecache/tidecache/pkg/etcdserver"
)

// TestAuthMemberLate starts the daemon before its local member
// (tidecached etcd started beside it) has made its passwords: the daemon
// finds none and starts without a credential, as tidecached run chooses
// it. The member then starts, turns etcd's authentication on and writes
// root's password; the daemon must take it when etcd asks for a user, and
// register, build a volume and report its status. Red before: the daemon
// kept no credential for ever, every request refused ("user name is
// empty").
func TestAuthMemberLate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	authDir := filepath.Join(dir, "etcd-auth")
	url := freeURL(t)

	cfg := testConfig(t, "")
	cfg.EmbeddedEtcd = false
	cfg.Store.Endpoints = []string{url}
	req := etcdauth.Request{Dir: authDir, Endpoints: cfg.Store.Endpoints}
	cred, err := etcdauth.Choose(req)
	if err != nil || !cred.None() {
		t.Fatalf("credential before the member made any: %+v, %v; want none", cred, err)
	}
	cfg.Store.Credential = func() (etcdauth.Credential, error) { return etcdauth.Choose(req) }
	r := start(t, cfg)
	defer r.stop()

	srv, err := etcdserver.Start(ctx, etcdserver.Config{
		DataDir: filepath.Join(dir, "etcd"), Name: "m1", ClientURL: url, PeerURL: "http://127.0.0.1:0",
		AuthDir: authDir, AuthPrefix: cfg.Store.Prefix,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	root := openStoreAs(t, url, srv.Credential())

	waitFor(t, "n1 registered", func() bool {
		_, _, err := root.GetNode(ctx, "n1")
		return err == nil
	})
	if _, err := root.CreateVolumeSpec(ctx, api.VolumeSpec{Name: "db", Node: "n1", Pool: "fast", SizeBytes: 1 << 30, WriteCacheBytes: 64 << 20}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "db built and its status written", func() bool {
		_, _, err := root.GetVolumeStatus(ctx, "db")
		return r.eng.Exists("db") && err == nil
	})
}
