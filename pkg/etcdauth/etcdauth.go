// SPDX-License-Identifier: Apache-2.0

// Package etcdauth owns the credentials of etcd's own authentication on a
// node whose etcd member tidecache runs (tidecached --embedded-etcd,
// tidecached etcd): where the password files live, how a password is
// made, and which credential a client (tidectl, the daemon, the CSI
// controller) presents when it was not told.
//
// Why passwords at all: the single-member default listens on loopback, so
// no other host reaches it, but every local user does, and a user who can
// delete a volume spec makes the root daemon flush and delete the volume.
// Loopback cannot tell users apart; etcd's authentication can. The member
// (pkg/etcdserver) turns it on with two users:
//
//   - root (etcd's administrator, role root): every record. Its password
//     file is 0600, so only root on the node, and the daemon, can use it.
//   - viewer (role viewer): reads under tidecache's key prefix and nothing
//     else. Its password file is 0644 by default, so every local user can
//     see volumes and nodes (tidectl volume list) but change nothing. An
//     operator who wants fewer readers gives the file a group and mode
//     0640; the member never changes the mode of a file it did not make.
//
// A client that is given no user picks, for endpoints on loopback only,
// root's password if it can read it, else the viewer's, else none (an
// etcd without authentication). A password is never sent to an endpoint
// on another host unless the operator names it (--etcd-user,
// --etcd-password-file): the files describe this node's member, not
// whatever a remote URL points at. A client with a TLS client certificate
// is identified by it, and picks no password either.
//
// This package reads and writes files only; it talks to no etcd.
package etcdauth

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/tidecache/tidecache/pkg/atomicfile"
)

// DefaultDir is where the member keeps the password files, beside its
// data under the daemon's state directory: the systemd unit may write
// there (StateDirectory, mode 0755), and clients on the node find them
// without being told.
const DefaultDir = "/var/lib/tidecache/etcd-auth"

// The users the member creates. RootUser must be "root": etcd turns its
// authentication on only once a user of that name holds the root role.
const (
	RootUser = "root"
	// RootRole is etcd's administrator role, which RootUser must hold.
	RootRole   = "root"
	ViewerUser = "viewer"
	// ViewerRole is the viewer's role: read under the key prefix.
	ViewerRole = "viewer"
)

// Modes of the files the member makes. The directory must let every user
// through so that the viewer's file can be read; the root password file
// is the one that keeps changes to root.
const (
	DirMode    fs.FileMode = 0o755
	RootMode   fs.FileMode = 0o600
	ViewerMode fs.FileMode = 0o644
)

// Credential is a user and password for etcd. The zero value means none:
// the client connects without authenticating.
type Credential struct {
	User, Password string
	// File is where the password was read, for messages.
	File string
}

// None reports whether c carries no credential.
func (c Credential) None() bool { return c.User == "" }

// PasswordFile returns the file holding user's password in dir.
func PasswordFile(dir, user string) string {
	return filepath.Join(dir, user+".password")
}

// ReadPassword reads a password file: its first line, without the line
// end, so that a file written by hand with an editor works too.
func ReadPassword(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("etcd password file: %w", err)
	}
	pw, _, _ := strings.Cut(string(b), "\n")
	pw = strings.TrimSuffix(pw, "\r")
	if pw == "" {
		return "", fmt.Errorf("etcd password file %s: empty", path)
	}
	return pw, nil
}

// NewPassword returns a random password of 256 bits, URL-safe base64 so
// that it survives shells and config files unquoted.
func NewPassword() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("etcd password: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// LoadOrCreate returns user's password from dir. If the file does not
// exist and create is set, it makes a new password and writes it with
// mode (durably: the member stores the password's hash in etcd right
// after, and a password lost then locks everyone out); made says so. dir
// is created with DirMode if missing.
func LoadOrCreate(dir, user string, mode fs.FileMode, create bool) (password string, made bool, err error) {
	path := PasswordFile(dir, user)
	pw, err := ReadPassword(path)
	if err == nil {
		return pw, false, nil
	}
	if !errors.Is(err, fs.ErrNotExist) || !create {
		return "", false, err
	}
	if err := MakeDir(dir); err != nil {
		return "", false, err
	}
	if pw, err = NewPassword(); err != nil {
		return "", false, err
	}
	if err := atomicfile.Write(path, []byte(pw+"\n"), mode); err != nil {
		return "", false, fmt.Errorf("write etcd password of %s: %w", user, err)
	}
	return pw, true, nil
}

// MakeDir creates dir with DirMode if it does not exist. The mode is set
// explicitly: tidecached's unit runs with UMask=0077, which would make it
// 0700 and keep every other user from the viewer's file. An existing
// directory keeps the mode the operator gave it.
func MakeDir(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	if err := os.MkdirAll(dir, DirMode); err != nil {
		return fmt.Errorf("etcd credentials directory: %w", err)
	}
	if err := os.Chmod(dir, DirMode); err != nil {
		return fmt.Errorf("etcd credentials directory: %w", err)
	}
	return nil
}

// Unreachable returns the first directory on the way to path that users
// other than its owner cannot pass (no execute bit for others), or "" if
// there is none: the viewer's file in it is then root's alone, whatever
// its mode. The member warns about it.
func Unreachable(path string) string {
	for dir := filepath.Dir(path); ; dir = filepath.Dir(dir) {
		if fi, err := os.Stat(dir); err == nil && fi.Mode().Perm()&0o001 == 0 {
			return dir
		}
		if dir == filepath.Dir(dir) {
			return ""
		}
	}
}

// Request is what a client was told about its credential, for Choose.
type Request struct {
	// User and PasswordFile are what the operator gave (--etcd-user,
	// --etcd-password-file, or their environment and config file
	// equivalents); empty if nothing.
	User, PasswordFile string
	// Dir is where the local member keeps its password files
	// (DefaultDir unless configured otherwise).
	Dir string
	// Endpoints are the etcd endpoints the client will use.
	Endpoints []string
	// ClientCert is set when the client presents a TLS client
	// certificate, which identifies it.
	ClientCert bool
}

// Choose returns the credential a client presents: the one the operator
// named, else for loopback endpoints without a client certificate
// root's if readable, else the viewer's, else none. An error means the
// operator's choice cannot be used (a missing file, a user without a
// password); files that are merely unreadable to this user are skipped.
func Choose(r Request) (Credential, error) {
	if r.User != "" || r.PasswordFile != "" {
		return named(r)
	}
	if r.ClientCert || !allLocal(r.Endpoints) {
		return Credential{}, nil
	}
	for _, user := range []string{RootUser, ViewerUser} {
		path := PasswordFile(r.Dir, user)
		pw, err := ReadPassword(path)
		switch {
		case err == nil:
			return Credential{User: user, Password: pw, File: path}, nil
		case errors.Is(err, fs.ErrNotExist), errors.Is(err, fs.ErrPermission):
		default:
			return Credential{}, err
		}
	}
	return Credential{}, nil
}

// named returns the credential the operator named: a user with a password
// file, or one of the member's users, whose file is in r.Dir.
func named(r Request) (Credential, error) {
	path := r.PasswordFile
	switch {
	case r.User == "":
		return Credential{}, fmt.Errorf("etcd password file %s given without a user: give --etcd-user too", path)
	case path == "" && (r.User == RootUser || r.User == ViewerUser):
		path = PasswordFile(r.Dir, r.User)
	case path == "":
		return Credential{}, fmt.Errorf("etcd user %q: give its password file (--etcd-password-file)", r.User)
	}
	pw, err := ReadPassword(path)
	if err != nil {
		return Credential{}, fmt.Errorf("etcd user %q: %w", r.User, err)
	}
	return Credential{User: r.User, Password: pw, File: path}, nil
}

// allLocal reports whether every endpoint is on this host: a loopback
// address, localhost, or a unix socket.
func allLocal(endpoints []string) bool {
	if len(endpoints) == 0 {
		return false
	}
	for _, ep := range endpoints {
		if !local(ep) {
			return false
		}
	}
	return true
}

func local(ep string) bool {
	host := ep
	if strings.Contains(ep, "://") {
		u, err := url.Parse(ep)
		if err != nil {
			return false
		}
		if u.Scheme == "unix" || u.Scheme == "unixs" {
			return true
		}
		host = u.Host
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
