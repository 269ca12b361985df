// SPDX-License-Identifier: Apache-2.0

package etcdserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/server/v3/auth"
	"go.etcd.io/etcd/server/v3/etcdserver"
	"google.golang.org/grpc/metadata"

	"github.com/tidecache/tidecache/pkg/etcdauth"
)

// manageAuth reports whether Start turns etcd's authentication on and
// keeps its users: for a single member whose clients are on loopback and
// present no client certificate. Anything else is either reached from the
// network, where Start already demands TLS client certificates (or
// Insecure), or a cluster, whose members cannot share a password file.
func (c Config) manageAuth() bool {
	if c.AuthDir == "" || c.clusterMode() || c.CAFile != "" {
		return false
	}
	u, err := parseURL("ClientURL", c.ClientURL, c.CertFile != "")
	return err == nil && isLoopback(u)
}

// ensureAuth makes etcd's authentication guard the member, level-based:
// whatever part of this a previous start did (or a crash interrupted) is
// kept, the rest is done, so a restart and an upgrade from a member
// without authentication (its records untouched) take the same path.
//
//  1. root's password from dir, made if missing while authentication is
//     off; written before etcd learns it, so a crash never leaves etcd
//     with a password no file holds.
//  2. Once authentication is on, every change needs an administrator:
//     authenticate as root and carry the token as a client would.
//  3. The user root with the role root, the role viewer with read on
//     prefix alone, the user viewer with it, each password as its file
//     says (the viewer's made if missing: deleting it and restarting
//     rotates it).
//  4. Authentication on.
//
// It returns root's credential for the daemon's own client.
func ensureAuth(ctx context.Context, srv *etcdserver.EtcdServer, dir, prefix string, log *slog.Logger) (etcdauth.Credential, error) {
	enabled := srv.AuthStore().IsAuthEnabled()
	rootPw, made, err := etcdauth.LoadOrCreate(dir, etcdauth.RootUser, etcdauth.RootMode, !enabled)
	if err != nil {
		if enabled {
			return etcdauth.Credential{}, fmt.Errorf("etcd authentication is on but root's password cannot be read (%w): restore the file from a backup (docs/security.md, \"Lost credentials\")", err)
		}
		return etcdauth.Credential{}, err
	}
	if made {
		log.Info("embedded etcd: made root's password", "file", etcdauth.PasswordFile(dir, etcdauth.RootUser))
	}
	admin := ctx
	if enabled {
		resp, err := srv.Authenticate(ctx, &pb.AuthenticateRequest{Name: etcdauth.RootUser, Password: rootPw})
		if err != nil {
			return etcdauth.Credential{}, fmt.Errorf("etcd authentication: root's password in %s: %w (docs/security.md, \"Lost credentials\")",
				etcdauth.PasswordFile(dir, etcdauth.RootUser), err)
		}
		admin = metadata.NewIncomingContext(ctx, metadata.Pairs(rpctypes.TokenFieldNameGRPC, resp.Token))
	}
	// Before authentication is on the file is the truth (a crash may have
	// left an older user); after, Authenticate just proved it matches.
	if err := ensureUser(admin, srv, etcdauth.RootUser, rootPw, etcdauth.RootRole, !enabled); err != nil {
		return etcdauth.Credential{}, err
	}
	if err := ensureViewerRole(admin, srv, prefix); err != nil {
		return etcdauth.Credential{}, err
	}
	viewerPw, made, err := etcdauth.LoadOrCreate(dir, etcdauth.ViewerUser, etcdauth.ViewerMode, true)
	if err != nil {
		return etcdauth.Credential{}, err
	}
	viewerFile := etcdauth.PasswordFile(dir, etcdauth.ViewerUser)
	if made {
		log.Info("embedded etcd: made the viewer's password", "file", viewerFile)
	}
	setViewer := !enabled || made
	if !setViewer {
		_, err := srv.AuthStore().CheckPassword(etcdauth.ViewerUser, viewerPw)
		setViewer = err != nil
	}
	if err := ensureUser(admin, srv, etcdauth.ViewerUser, viewerPw, etcdauth.ViewerRole, setViewer); err != nil {
		return etcdauth.Credential{}, err
	}
	if !enabled {
		if _, err := srv.AuthEnable(ctx, &pb.AuthEnableRequest{}); err != nil {
			return etcdauth.Credential{}, fmt.Errorf("etcd authentication: enable: %w", err)
		}
		log.Info("embedded etcd: authentication turned on: root's password changes records, the viewer's reads them",
			"root", etcdauth.PasswordFile(dir, etcdauth.RootUser), "viewer", viewerFile)
	}
	if d := etcdauth.Unreachable(viewerFile); d != "" {
		log.Warn("embedded etcd: users other than root cannot reach the viewer's password file: directory closed to them (give it o+x, or the mode you want)",
			"file", viewerFile, "dir", d)
	}
	return etcdauth.Credential{User: etcdauth.RootUser, Password: rootPw, File: etcdauth.PasswordFile(dir, etcdauth.RootUser)}, nil
}

// ensureUser makes user exist with role, and with password if setPassword
// (or if it is new).
func ensureUser(ctx context.Context, srv *etcdserver.EtcdServer, user, password, role string, setPassword bool) error {
	var roles []string
	got, err := srv.UserGet(ctx, &pb.AuthUserGetRequest{Name: user})
	switch {
	case errors.Is(err, auth.ErrUserNotFound):
		if _, err := srv.UserAdd(ctx, &pb.AuthUserAddRequest{Name: user, Password: password, Options: &authpb.UserAddOptions{}}); err != nil {
			return fmt.Errorf("etcd authentication: add user %s: %w", user, err)
		}
	case err != nil:
		return fmt.Errorf("etcd authentication: user %s: %w", user, err)
	default:
		roles = got.Roles
		if setPassword {
			if _, err := srv.UserChangePassword(ctx, &pb.AuthUserChangePasswordRequest{Name: user, Password: password}); err != nil {
				return fmt.Errorf("etcd authentication: set the password of %s: %w", user, err)
			}
		}
	}
	if !slices.Contains(roles, role) {
		if _, err := srv.UserGrantRole(ctx, &pb.AuthUserGrantRoleRequest{User: user, Role: role}); err != nil {
			return fmt.Errorf("etcd authentication: grant role %s to %s: %w", role, user, err)
		}
	}
	return nil
}

// ensureViewerRole makes the viewer role hold exactly one permission: read
// the keys under prefix. A permission of an older prefix is revoked, so
// the role never reads more than the records tidecache keeps now.
func ensureViewerRole(ctx context.Context, srv *etcdserver.EtcdServer, prefix string) error {
	want := &authpb.Permission{PermType: authpb.READ, Key: []byte(prefix), RangeEnd: prefixEnd([]byte(prefix))}
	var have []*authpb.Permission
	got, err := srv.RoleGet(ctx, &pb.AuthRoleGetRequest{Role: etcdauth.ViewerRole})
	switch {
	case errors.Is(err, auth.ErrRoleNotFound):
		if _, err := srv.RoleAdd(ctx, &pb.AuthRoleAddRequest{Name: etcdauth.ViewerRole}); err != nil {
			return fmt.Errorf("etcd authentication: add role %s: %w", etcdauth.ViewerRole, err)
		}
	case err != nil:
		return fmt.Errorf("etcd authentication: role %s: %w", etcdauth.ViewerRole, err)
	default:
		have = got.Perm
	}
	found := false
	for _, p := range have {
		if p.PermType == want.PermType && bytes.Equal(p.Key, want.Key) && bytes.Equal(p.RangeEnd, want.RangeEnd) {
			found = true
			continue
		}
		if _, err := srv.RoleRevokePermission(ctx, &pb.AuthRoleRevokePermissionRequest{Role: etcdauth.ViewerRole, Key: p.Key, RangeEnd: p.RangeEnd}); err != nil {
			return fmt.Errorf("etcd authentication: revoke %q from role %s: %w", p.Key, etcdauth.ViewerRole, err)
		}
	}
	if !found {
		if _, err := srv.RoleGrantPermission(ctx, &pb.AuthRoleGrantPermissionRequest{Name: etcdauth.ViewerRole, Perm: want}); err != nil {
			return fmt.Errorf("etcd authentication: grant read of %s to role %s: %w", prefix, etcdauth.ViewerRole, err)
		}
	}
	return nil
}

// prefixEnd is the end of the key range of every key starting with p
// (etcd's range end for a prefix): p with its last byte below 0xff
// incremented and the rest cut.
func prefixEnd(p []byte) []byte {
	end := bytes.Clone(p)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return []byte{0}
}
