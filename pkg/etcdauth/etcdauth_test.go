// SPDX-License-Identifier: Apache-2.0

package etcdauth

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestAuthChoose: which credential a client presents for each thing it
// can be told, and that a local password never goes to another host.
func TestAuthChoose(t *testing.T) {
	both := t.TempDir()
	write(t, PasswordFile(both, RootUser), "rootpw\n", RootMode)
	write(t, PasswordFile(both, ViewerUser), "viewpw\n", ViewerMode)
	viewerOnly := t.TempDir()
	write(t, PasswordFile(viewerOnly, ViewerUser), "viewpw", ViewerMode)
	other := filepath.Join(t.TempDir(), "ops.password")
	write(t, other, "opspw\r\nignored second line\n", 0o600)
	local := []string{"http://127.0.0.1:2389"}

	for _, tc := range []struct {
		name           string
		req            Request
		user, pw, file string
		err            string
	}{
		{name: "root's when readable", req: Request{Dir: both, Endpoints: local}, user: RootUser, pw: "rootpw", file: PasswordFile(both, RootUser)},
		{name: "the viewer's without root's", req: Request{Dir: viewerOnly, Endpoints: local}, user: ViewerUser, pw: "viewpw"},
		{name: "none without files", req: Request{Dir: t.TempDir(), Endpoints: local}},
		{name: "none for a directory that does not exist", req: Request{Dir: "/nonexistent/etcd-auth", Endpoints: local}},
		{name: "localhost and ::1 are local", req: Request{Dir: both, Endpoints: []string{"localhost:2389", "http://[::1]:2389"}}, user: RootUser, pw: "rootpw"},
		{name: "a unix socket is local", req: Request{Dir: both, Endpoints: []string{"unix:///run/etcd.sock"}}, user: RootUser, pw: "rootpw"},
		{name: "never to another host", req: Request{Dir: both, Endpoints: []string{"http://10.0.0.1:2389"}}},
		{name: "never if one endpoint is remote", req: Request{Dir: both, Endpoints: []string{"http://127.0.0.1:2389", "http://10.0.0.2:2389"}}},
		{name: "a client certificate identifies instead", req: Request{Dir: both, Endpoints: local, ClientCert: true}},
		{name: "a named user and file win", req: Request{User: "ops", PasswordFile: other, Dir: both, Endpoints: local}, user: "ops", pw: "opspw", file: other},
		{name: "a named file goes to a remote host", req: Request{User: "ops", PasswordFile: other, Endpoints: []string{"https://10.0.0.1:2379"}, ClientCert: true}, user: "ops", pw: "opspw"},
		{name: "viewer by name as root", req: Request{User: ViewerUser, Dir: both, Endpoints: local}, user: ViewerUser, pw: "viewpw"},
		{name: "root by name without its file", req: Request{User: RootUser, Dir: viewerOnly, Endpoints: local}, err: "no such file"},
		{name: "another user needs a file", req: Request{User: "ops", Dir: both, Endpoints: local}, err: "--etcd-password-file"},
		{name: "a file needs a user", req: Request{PasswordFile: other, Dir: both, Endpoints: local}, err: "--etcd-user"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Choose(tc.req)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Choose: %+v, %v; want an error with %q", c, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.User != tc.user || c.Password != tc.pw || (tc.file != "" && c.File != tc.file) {
				t.Errorf("Choose = %+v, want user %q password %q file %q", c, tc.user, tc.pw, tc.file)
			}
			if c.None() != (tc.user == "") {
				t.Errorf("None() = %v for %+v", c.None(), c)
			}
		})
	}
}

// TestAuthLoadOrCreate: a password is made once, with the mode asked, and
// read back after; without create a missing file is an error.
func TestAuthLoadOrCreate(t *testing.T) {
	// tidecached's unit runs with UMask=0077: the modes must not depend
	// on it.
	defer syscall.Umask(syscall.Umask(0o077))
	dir := filepath.Join(t.TempDir(), "etcd-auth")
	if _, _, err := LoadOrCreate(dir, RootUser, RootMode, false); err == nil {
		t.Fatal("LoadOrCreate without create made or found a password in an empty directory")
	}
	pw, made, err := LoadOrCreate(dir, RootUser, RootMode, true)
	if err != nil || !made || len(pw) < 40 {
		t.Fatalf("LoadOrCreate: %q, made %v, %v", pw, made, err)
	}
	fi, err := os.Stat(PasswordFile(dir, RootUser))
	if err != nil || fi.Mode().Perm() != RootMode {
		t.Fatalf("root password file: %v, %v; want mode %v", fi.Mode(), err, RootMode)
	}
	if di, err := os.Stat(dir); err != nil || di.Mode().Perm() != DirMode {
		t.Fatalf("directory: %v, %v; want mode %v", di.Mode(), err, DirMode)
	}
	again, made, err := LoadOrCreate(dir, RootUser, RootMode, true)
	if err != nil || made || again != pw {
		t.Fatalf("second LoadOrCreate: %q, made %v, %v; want %q kept", again, made, err, pw)
	}
	other, _, err := LoadOrCreate(dir, ViewerUser, ViewerMode, true)
	if err != nil || other == pw {
		t.Fatalf("viewer password %q (%v): want a new one", other, err)
	}
}

// TestAuthUnreachable finds a directory that locks others out of a file.
func TestAuthUnreachable(t *testing.T) {
	base := t.TempDir()
	open := filepath.Join(base, "open")
	if err := os.MkdirAll(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	// t.TempDir's parents are 0700: only what lies below base counts here.
	if got := Unreachable(filepath.Join(open, "viewer.password")); got != "" && !strings.HasPrefix(base, got) {
		t.Errorf("Unreachable(open) = %q", got)
	}
	if err := os.Chmod(open, 0o700); err != nil {
		t.Fatal(err)
	}
	if got := Unreachable(filepath.Join(open, "viewer.password")); got != open {
		t.Errorf("Unreachable = %q, want %q", got, open)
	}
}

func write(t *testing.T, path, s string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), mode); err != nil {
		t.Fatal(err)
	}
}
