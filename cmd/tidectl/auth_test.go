// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/etcdauth"
	"github.com/tidecache/tidecache/pkg/etcdserver"
	"github.com/tidecache/tidecache/pkg/store"
)

// TestAuthNonRootUser runs the tidectl binary against an etcd member
// configured as tidecached --embedded-etcd configures it (single member,
// loopback, credentials in an auth directory), once as a user other than
// root and once as root, each picking its credential itself. The other
// user lists volumes (the viewer's password, readable by all) but cannot
// delete a spec nor write a policy, and is told why; without the viewer's
// password it cannot even read. Root can do both. Red before: the member
// had no authentication and the other user's delete went through, after
// which the root daemon would have deleted the volume.
func TestAuthNonRootUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run tidectl as another user")
	}
	other := otherUser(t)
	// The test's files must be reachable by the other user: t.TempDir's
	// parents are 0700.
	dir, err := os.MkdirTemp("", "tidecache-auth-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "tidectl")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/tidecache/tidecache/cmd/tidectl").CombinedOutput(); err != nil {
		t.Fatalf("build tidectl: %v\n%s", err, out)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	authDir := filepath.Join(dir, "etcd-auth")
	srv, err := etcdserver.Start(ctx, etcdserver.Config{DataDir: filepath.Join(dir, "etcd"), Name: "db1",
		ClientURL: "http://127.0.0.1:0", PeerURL: "http://127.0.0.1:0", AuthDir: authDir})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ep := srv.Endpoints()[0]

	scfg := store.DefaultConfig()
	scfg.Endpoints = srv.Endpoints()
	scfg.Username, scfg.Password = srv.Credential().User, srv.Credential().Password
	st, err := store.Open(ctx, scfg)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.CreateVolumeSpec(ctx, api.VolumeSpec{Name: "db", Node: "db1", SizeBytes: 1 << 30, WriteCacheBytes: 64 << 20}); err != nil {
		t.Fatal(err)
	}

	tidectl := func(cred *syscall.Credential, args ...string) (string, string, error) {
		cmd := exec.CommandContext(ctx, bin, append([]string{"--etcd-endpoints", ep, "--etcd-auth-dir", authDir}, args...)...)
		cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/", "TIDECACHE_CONFIG=/dev/null"}
		cmd.Dir = "/"
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		return out.String(), errOut.String(), err
	}

	out, stderr, err := tidectl(other, "-o", "json", "volume", "list")
	if err != nil || !strings.Contains(out, `"db"`) {
		t.Fatalf("volume list as uid %d: %v\n%s%s", other.Uid, err, out, stderr)
	}
	_, stderr, err = tidectl(other, "volume", "delete", "db")
	if err == nil || !strings.Contains(stderr, "permission denied") || !strings.Contains(stderr, "may only read") {
		t.Fatalf("volume delete as uid %d: %v, stderr %q; want refused, saying the viewer may only read", other.Uid, err, stderr)
	}
	t.Logf("volume delete as uid %d: %s", other.Uid, stderr)
	_, stderr, err = tidectl(other, "policy", "set", "default", "--wear-threshold", "50")
	if err == nil || !strings.Contains(stderr, "permission denied") {
		t.Fatalf("policy set as uid %d: %v, stderr %q; want refused", other.Uid, err, stderr)
	}
	if _, _, err := st.GetVolumeSpec(ctx, "db"); err != nil {
		t.Fatalf("spec after the refused delete: %v", err)
	}
	if _, _, err := st.GetPolicy(ctx, "default"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("policy after the refused write: %v, want none", err)
	}

	// Root's file is 0600: the other user cannot take root's password by
	// naming it.
	_, stderr, err = tidectl(other, "--etcd-user", "root", "volume", "delete", "db")
	if err == nil || !strings.Contains(stderr, "permission denied") {
		t.Fatalf("volume delete as uid %d naming root: %v, stderr %q; want refused", other.Uid, err, stderr)
	}
	// Without the viewer's password (made unreadable here) nothing is
	// served at all.
	viewerFile := etcdauth.PasswordFile(authDir, etcdauth.ViewerUser)
	if err := os.Chmod(viewerFile, 0o600); err != nil {
		t.Fatal(err)
	}
	_, stderr, err = tidectl(other, "volume", "list")
	if err == nil || !strings.Contains(stderr, "requires a user") {
		t.Fatalf("volume list as uid %d without a readable credential: %v, stderr %q; want refused", other.Uid, err, stderr)
	}
	t.Logf("volume list as uid %d without a credential: %s", other.Uid, stderr)

	root := &syscall.Credential{Uid: 0, Gid: 0}
	if _, stderr, err := tidectl(root, "policy", "set", "default", "--wear-threshold", "50"); err != nil {
		t.Fatalf("policy set as root: %v\n%s", err, stderr)
	}
	if _, stderr, err := tidectl(root, "volume", "delete", "db"); err != nil {
		t.Fatalf("volume delete as root: %v\n%s", err, stderr)
	}
}

// otherUser returns the credentials of a user other than root, with no
// supplementary groups: nobody, or a system user made for the test.
func otherUser(t *testing.T) *syscall.Credential {
	t.Helper()
	u, err := user.Lookup("nobody")
	if err != nil {
		if out, err := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "tidecache-test").CombinedOutput(); err != nil && !bytes.Contains(out, []byte("already exists")) {
			t.Fatalf("useradd: %v\n%s", err, out)
		}
		if u, err = user.Lookup("tidecache-test"); err != nil {
			t.Fatal(err)
		}
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil || uid == 0 {
		t.Fatalf("user %s: uid %q", u.Username, u.Uid)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		t.Fatal(err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
}
