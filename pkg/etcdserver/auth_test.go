// SPDX-License-Identifier: Apache-2.0

package etcdserver_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/etcdauth"
	"github.com/tidecache/tidecache/pkg/etcdserver"
	"github.com/tidecache/tidecache/pkg/etcdserver/etcdtest"
	"github.com/tidecache/tidecache/pkg/store"
)

// startAuth starts a single member on loopback that keeps its credentials
// in authDir ("": none, as members before authentication).
func startAuth(t *testing.T, dataDir, authDir string) *etcdserver.Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := etcdserver.Start(ctx, etcdserver.Config{
		DataDir: dataDir, Name: "node1", ClientURL: "http://127.0.0.1:0", PeerURL: "http://127.0.0.1:0", AuthDir: authDir,
	})
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

// openAs opens a store on srv as user with password ("" for none).
func openAs(t *testing.T, srv *etcdserver.Server, user, password string) (*store.Store, error) {
	t.Helper()
	cfg := store.DefaultConfig()
	cfg.Endpoints = srv.Endpoints()
	cfg.Username, cfg.Password = user, password
	st, err := store.Open(context.Background(), cfg)
	if err == nil {
		t.Cleanup(func() { st.Close() })
	}
	return st, err
}

func readPassword(t *testing.T, dir, user string) string {
	t.Helper()
	pw, err := etcdauth.ReadPassword(etcdauth.PasswordFile(dir, user))
	if err != nil {
		t.Fatal(err)
	}
	return pw
}

// TestAuthEmbeddedMember: a single member on loopback with an AuthDir
// turns etcd's authentication on. Root's credential (what Credential
// hands the daemon) changes records; the viewer's reads them and is
// refused a change with ErrPermissionDenied in words an operator reads; no
// credential at all is refused even a read. The password files have the
// modes that make root's root's alone. Red before: any client changed
// anything.
func TestAuthEmbeddedMember(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	authDir := filepath.Join(dir, "etcd-auth")
	srv := startAuth(t, filepath.Join(dir, "etcd"), authDir)
	defer srv.Close()

	cred := srv.Credential()
	if cred.User != etcdauth.RootUser || cred.Password != readPassword(t, authDir, etcdauth.RootUser) {
		t.Fatalf("Credential() = user %q from %q, want root's from its file", cred.User, cred.File)
	}
	for user, mode := range map[string]os.FileMode{etcdauth.RootUser: 0o600, etcdauth.ViewerUser: 0o644} {
		fi, err := os.Stat(etcdauth.PasswordFile(authDir, user))
		if err != nil || fi.Mode().Perm() != mode {
			t.Errorf("%s's password file: %v, %v; want mode %v", user, fi.Mode(), err, mode)
		}
	}

	root, err := openAs(t, srv, cred.User, cred.Password)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := root.PutPolicy(ctx, api.Policy{Name: "default", WearThresholdPercent: 90}, 0); err != nil {
		t.Fatalf("root cannot write: %v", err)
	}

	viewer, err := openAs(t, srv, etcdauth.ViewerUser, readPassword(t, authDir, etcdauth.ViewerUser))
	if err != nil {
		t.Fatal(err)
	}
	p, meta, err := viewer.GetPolicy(ctx, "default")
	if err != nil || p.WearThresholdPercent != 90 {
		t.Fatalf("viewer reads %+v, %v", p, err)
	}
	if err := viewer.Healthy(ctx); err != nil {
		t.Fatalf("viewer's health check (a read under the prefix): %v", err)
	}
	_, err = viewer.PutPolicy(ctx, api.Policy{Name: "default", WearThresholdPercent: 50}, meta.ModRevision)
	if !errors.Is(err, store.ErrPermissionDenied) || !strings.Contains(err.Error(), "may only read") {
		t.Fatalf("viewer's put: %v, want ErrPermissionDenied saying it may only read", err)
	}
	if err := viewer.DeletePolicy(ctx, "default", meta.ModRevision); !errors.Is(err, store.ErrPermissionDenied) {
		t.Fatalf("viewer's delete: %v, want ErrPermissionDenied", err)
	}

	anon, err := openAs(t, srv, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := anon.GetPolicy(ctx, "default"); !errors.Is(err, store.ErrPermissionDenied) || !strings.Contains(err.Error(), "requires a user") {
		t.Fatalf("read without a credential: %v, want ErrPermissionDenied saying a user is required", err)
	}
	if _, err := openAs(t, srv, etcdauth.ViewerUser, "wrong"); !errors.Is(err, store.ErrPermissionDenied) {
		t.Fatalf("open with a wrong password: %v, want ErrPermissionDenied", err)
	}
}

// TestAuthUpgradeAndRestart: a member an older tidecache made without
// authentication keeps its records when a start with an AuthDir turns
// authentication on (the upgrade); restarts keep the passwords; a viewer
// password file deleted is made anew on the next start and the old
// password stops working (rotation); a lost root password is an error
// that says what to do, not a member open to all.
func TestAuthUpgradeAndRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	dataDir, authDir := filepath.Join(dir, "etcd"), filepath.Join(dir, "etcd-auth")

	srv := startAuth(t, dataDir, "")
	if !srv.Credential().None() {
		t.Fatalf("member without AuthDir hands out %+v", srv.Credential())
	}
	old, err := openAs(t, srv, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.PutPolicy(ctx, api.Policy{Name: "default", WearThresholdPercent: 80}, 0); err != nil {
		t.Fatal(err)
	}
	old.Close()
	srv.Close()

	srv = startAuth(t, dataDir, authDir)
	rootPw, viewerPw := readPassword(t, authDir, etcdauth.RootUser), readPassword(t, authDir, etcdauth.ViewerUser)
	viewer, err := openAs(t, srv, etcdauth.ViewerUser, viewerPw)
	if err != nil {
		t.Fatal(err)
	}
	if p, _, err := viewer.GetPolicy(ctx, "default"); err != nil || p.WearThresholdPercent != 80 {
		t.Fatalf("record of the member before authentication: %+v, %v", p, err)
	}
	anon, err := openAs(t, srv, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if err := anon.DeletePolicy(ctx, "default", 1); !errors.Is(err, store.ErrPermissionDenied) {
		t.Fatalf("delete without a credential after the upgrade: %v", err)
	}
	viewer.Close()
	anon.Close()
	srv.Close()

	srv = startAuth(t, dataDir, authDir)
	if got := readPassword(t, authDir, etcdauth.RootUser); got != rootPw || srv.Credential().Password != rootPw {
		t.Fatal("root's password changed on a restart")
	}
	if got := readPassword(t, authDir, etcdauth.ViewerUser); got != viewerPw {
		t.Fatal("the viewer's password changed on a restart")
	}
	if _, err := openAs(t, srv, etcdauth.ViewerUser, viewerPw); err != nil {
		t.Fatalf("viewer after a restart: %v", err)
	}
	srv.Close()

	if err := os.Remove(etcdauth.PasswordFile(authDir, etcdauth.ViewerUser)); err != nil {
		t.Fatal(err)
	}
	srv = startAuth(t, dataDir, authDir)
	newPw := readPassword(t, authDir, etcdauth.ViewerUser)
	if newPw == viewerPw {
		t.Fatal("the viewer's password was not made anew")
	}
	if _, err := openAs(t, srv, etcdauth.ViewerUser, viewerPw); !errors.Is(err, store.ErrPermissionDenied) {
		t.Fatalf("the old viewer password after rotation: %v, want refused", err)
	}
	if _, err := openAs(t, srv, etcdauth.ViewerUser, newPw); err != nil {
		t.Fatalf("the new viewer password: %v", err)
	}
	srv.Close()

	if err := os.Remove(etcdauth.PasswordFile(authDir, etcdauth.RootUser)); err != nil {
		t.Fatal(err)
	}
	_, err = etcdserver.Start(ctx, etcdserver.Config{
		DataDir: dataDir, Name: "node1", ClientURL: "http://127.0.0.1:0", PeerURL: "http://127.0.0.1:0", AuthDir: authDir,
	})
	if err == nil || !strings.Contains(err.Error(), "Lost credentials") {
		t.Fatalf("start with root's password lost: %v, want an error pointing at the recovery", err)
	}
}

// TestAuthNotManaged: a member whose clients present TLS client
// certificates does not turn etcd's authentication on even with an
// AuthDir: the certificate identifies the client, and with authentication
// on etcd would take its common name for a user that does not exist.
func TestAuthNotManaged(t *testing.T) {
	dir := t.TempDir()
	ca := etcdtest.NewCA(t, dir, "ca")
	serverCert, serverKey := ca.Issue(t, dir, "server")
	clientCert, clientKey := ca.Issue(t, dir, "client")
	authDir := filepath.Join(dir, "etcd-auth")
	srv := startTLS(t, etcdserver.Config{CertFile: serverCert, KeyFile: serverKey, CAFile: ca.File, AuthDir: authDir})
	if !srv.Credential().None() {
		t.Fatalf("mutual-TLS member hands out %+v", srv.Credential())
	}
	if _, err := os.Stat(authDir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("mutual-TLS member made %s: %v", authDir, err)
	}
	scfg := store.DefaultConfig()
	scfg.Endpoints = srv.Endpoints()
	scfg.CertFile, scfg.KeyFile, scfg.CAFile = clientCert, clientKey, ca.File
	st, err := store.Open(context.Background(), scfg)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.PutPolicy(context.Background(), api.Policy{Name: "default"}, 0); err != nil {
		t.Fatalf("client with a certificate: %v", err)
	}
}
