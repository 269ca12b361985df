// SPDX-License-Identifier: Apache-2.0

package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/etcdauth"
	"github.com/tidecache/tidecache/pkg/pool"
)

// Errors callers test for with errors.Is. Every error a Store method returns
// for one of these conditions wraps the sentinel and says which record and
// revisions were involved.
var (
	// ErrNotFound: the record does not exist (or, for Leader, nobody
	// leads).
	ErrNotFound = errors.New("not found")
	// ErrConflict: a transaction's revision check failed. The record was
	// created, changed or deleted since the caller read it (or exists, for
	// a create). Re-read and decide again; never retry blindly.
	ErrConflict = errors.New("revision conflict")
	// ErrNotOwner: a node tried to write the status of a volume whose spec
	// names another node.
	ErrNotOwner = errors.New("volume owned by another node")
	// ErrReplicaOutdated: a failover was refused because the volume's
	// replica is recorded stale (MarkReplicaOutdated).
	ErrReplicaOutdated = errors.New("replica outdated")
	// ErrOriginTaken: a volume spec was refused because another volume
	// caches the same shared origin (one node's export). Two caches over
	// one device, on two nodes, would each write back what the other
	// never saw, and corrupt it.
	ErrOriginTaken = errors.New("shared origin cached by another volume")
	// ErrInvalidRecord: a stored value is unusable; see InvalidRecord.
	ErrInvalidRecord = errors.New("invalid record")
	// ErrCompacted: a watch asked for history etcd has compacted away.
	// The caller re-lists and watches from the list's revision + 1.
	ErrCompacted = errors.New("revision compacted")
	// ErrLeaseLost: a Registration's lease expired or was taken over, or a
	// Leadership ended. The daemon registers or campaigns again.
	ErrLeaseLost = errors.New("lease lost")
	// ErrNodeNameInUse: Register was refused because a live record of the
	// node name is held by a daemon on another machine (another
	// api.Node.Instance). Two daemons with one name would reconcile the
	// same volumes; one of them needs another --node.
	ErrNodeNameInUse = errors.New("node name in use by another machine")
	// ErrUnavailable: etcd did not answer in time, has no leader, or could
	// not be reached. The kernel tables are unaffected; the daemon reports
	// the outage and retries.
	ErrUnavailable = errors.New("etcd unavailable")
	// ErrPermissionDenied: etcd's authentication refused the request.
	// Either the credential may not do it (the embedded etcd's viewer may
	// only read), or none was given to an etcd that requires one, or the
	// password is wrong. Retrying does not help; another credential does.
	ErrPermissionDenied = errors.New("permission denied")
)

// Meta is where a record sits in etcd's history. ModRevision is the value
// to pass as expectModRevision to change or delete the record, and the
// value VolumeStatus.ObservedRevision refers to.
type Meta struct {
	// Key is the full etcd key (with the prefix), for messages and etcdctl.
	Key            string
	CreateRevision int64
	ModRevision    int64
}

// Item is one record of a list with its Meta.
type Item[T any] struct {
	Value T
	Meta  Meta
}

// Store is tidecache's view of etcd: typed, validated records under one
// prefix. It is safe for concurrent use. Open returns it; the caller Closes
// it after every Registration, Leadership and Watch it started has ended or
// been abandoned (Close cancels those too).
type Store struct {
	// mu guards client, username and closed: rechoose (credential.go)
	// replaces the client. Read it with etcd().
	mu     sync.RWMutex
	client *clientv3.Client
	// username is the user client authenticates as ("" for none).
	username string
	closed   bool
	prefix   string
	cfg      Config
	log      *slog.Logger
}

// Open creates a client for cfg. It does not wait for etcd: a daemon must
// start, and keep its volumes, while etcd is down. The first request tells
// whether etcd is reachable (see Healthy). ctx bounds only Open itself; the
// Store lives until Close.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	tlsCfg, err := cfg.tlsConfig()
	if err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c, err := newClient(cfg, tlsCfg, log)
	if err != nil {
		return nil, err
	}
	return &Store{client: c, username: cfg.Username, prefix: cfg.Prefix, cfg: cfg, log: log}, nil
}

// Close closes the client. Watch channels close, and Registrations and
// Leaderships end without revoking their leases, which then expire after
// their TTL: Close them first for a clean exit.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return s.client.Close()
}

// Prefix returns the key prefix the store works under.
func (s *Store) Prefix() string { return s.prefix }

// Healthy makes a linearizable read under the prefix, which needs a
// quorum, within RequestTimeout. A nil error means etcd can serve writes
// now; the error otherwise wraps ErrUnavailable.
func (s *Store) Healthy(ctx context.Context) error {
	ctx, cancel := s.reqCtx(ctx)
	defer cancel()
	_, err := s.etcd().Get(ctx, s.prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	return s.wrap(ctx, "health check", err)
}

// reqCtx bounds one request by RequestTimeout. WithRequireLeader makes a
// member that lost its leader fail the request at once instead of letting
// it hang until the timeout.
func (s *Store) reqCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	return clientv3.WithRequireLeader(ctx), cancel
}

// wrap adds what was being done to a client error and marks transport
// trouble with ErrUnavailable. A caller's own cancellation stays a plain
// context error.
func (s *Store) wrap(ctx context.Context, what string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("store: %s: %w", what, err)
	}
	if hint := deniedHint(err, s.user()); hint != "" {
		if rerr := s.rechoose(err); rerr != nil {
			hint += " (" + rerr.Error() + ")"
		}
		return &sentinelError{ErrPermissionDenied, fmt.Errorf("store: %s: %s: %w", what, hint, err)}
	}
	if unavailable(err) || ctx.Err() != nil {
		return &sentinelError{ErrUnavailable, fmt.Errorf("store: %s: etcd unavailable: %w", what, err)}
	}
	return fmt.Errorf("store: %s: %w", what, err)
}

// deniedHint says, in an operator's words, why etcd's authentication
// refused a request made as user ("" for none) and what to do, or returns
// "" for any other error. The flags named are tidectl's and tidecached's.
func deniedHint(err error, user string) string {
	etcdErr := rpctypes.Error(err)
	switch {
	case errors.Is(etcdErr, rpctypes.ErrPermissionDenied) && user == etcdauth.ViewerUser:
		return "etcd permission denied: the viewer credential may only read; changes need root's (run as root on the node of the embedded etcd, or give --etcd-user root)"
	case errors.Is(etcdErr, rpctypes.ErrPermissionDenied):
		return fmt.Sprintf("etcd permission denied: user %q may not do this (see its role: etcdctl role get)", user)
	case errors.Is(etcdErr, rpctypes.ErrUserEmpty):
		return "etcd requires a user and none was given: on the node of the embedded etcd run as root, or as a user who can read its viewer password (" +
			etcdauth.PasswordFile(etcdauth.DefaultDir, etcdauth.ViewerUser) + " by default); elsewhere give --etcd-user and --etcd-password-file"
	case errors.Is(etcdErr, rpctypes.ErrAuthFailed):
		return fmt.Sprintf("etcd refused the password of user %q (a password file that no longer matches etcd: docs/security.md, \"How the passwords are made, kept and changed\")", user)
	case errors.Is(etcdErr, rpctypes.ErrUserNotFound):
		return fmt.Sprintf("etcd has no user %q", user)
	}
	return ""
}

func unavailable(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var coded interface{ Code() codes.Code }
	code := codes.OK
	if errors.As(err, &coded) {
		code = coded.Code()
	} else if st, ok := status.FromError(err); ok {
		code = st.Code()
	}
	switch code {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	return false
}

// sentinelError has the message of err and matches both sentinel and err
// with errors.Is, so messages read naturally instead of starting with the
// sentinel's text.
type sentinelError struct {
	sentinel error
	err      error
}

func (e *sentinelError) Error() string   { return e.err.Error() }
func (e *sentinelError) Unwrap() []error { return []error{e.sentinel, e.err} }

func errorf(sentinel error, format string, a ...any) error {
	return &sentinelError{sentinel, fmt.Errorf(format, a...)}
}

// get reads the record of kind at key.
func get[T record](ctx context.Context, s *Store, key, kind, name string) (T, Meta, error) {
	var zero T
	if err := validName(kind, name); err != nil {
		return zero, Meta{}, fmt.Errorf("store: get %s: %w", kind, err)
	}
	rctx, cancel := s.reqCtx(ctx)
	defer cancel()
	resp, err := s.etcd().Get(rctx, key)
	if err != nil {
		return zero, Meta{}, s.wrap(rctx, fmt.Sprintf("get %s %q", noun(kind), name), err)
	}
	if len(resp.Kvs) == 0 {
		return zero, Meta{}, errorf(ErrNotFound, "store: %s %q not found", noun(kind), name)
	}
	kv := resp.Kvs[0]
	v, err := decode[T](key, kind, name, kv.Value)
	if err != nil {
		return zero, Meta{}, err
	}
	return v, Meta{Key: key, CreateRevision: kv.CreateRevision, ModRevision: kv.ModRevision}, nil
}

// list reads every record of kind under dir, reporting invalid ones apart.
// rev is the store revision the list reflects: watch from rev+1 to see
// every later change.
func list[T record](ctx context.Context, s *Store, dir, kind string) ([]Item[T], int64, []InvalidRecord, error) {
	rctx, cancel := s.reqCtx(ctx)
	defer cancel()
	resp, err := s.etcd().Get(rctx, s.prefix+dir, clientv3.WithPrefix())
	if err != nil {
		return nil, 0, nil, s.wrap(rctx, "list "+kind, err)
	}
	var items []Item[T]
	var invalid []InvalidRecord
	for _, kv := range resp.Kvs {
		key := string(kv.Key)
		k, name, ok, err := parseKey(strings.TrimPrefix(key, s.prefix))
		if err != nil {
			invalid = append(invalid, InvalidRecord{Key: key, Err: err})
			continue
		}
		if !ok || k != kind {
			continue
		}
		v, err := decode[T](key, kind, name, kv.Value)
		if err != nil {
			var ir InvalidRecord
			errors.As(err, &ir)
			invalid = append(invalid, ir)
			continue
		}
		items = append(items, Item[T]{Value: v, Meta: Meta{Key: key, CreateRevision: kv.CreateRevision, ModRevision: kv.ModRevision}})
	}
	return items, resp.Header.Revision, invalid, nil
}

// put writes v at key in a transaction: with expectModRevision 0 only if
// the key does not exist, else only if its ModRevision still is
// expectModRevision.
func put(ctx context.Context, s *Store, key, kind string, v record, expectModRevision int64) (Meta, error) {
	name := recordName(v)
	val, err := encode(kind, v)
	if err != nil {
		return Meta{}, fmt.Errorf("store: %w", err)
	}
	if expectModRevision < 0 {
		return Meta{}, fmt.Errorf("store: put %s %q: expectModRevision %d: want 0 (create) or the revision read", noun(kind), name, expectModRevision)
	}
	cmp := clientv3.Compare(clientv3.ModRevision(key), "=", expectModRevision)
	if expectModRevision == 0 {
		cmp = clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
	}
	rctx, cancel := s.reqCtx(ctx)
	defer cancel()
	resp, err := s.etcd().Txn(rctx).
		If(cmp).
		Then(clientv3.OpPut(key, val), clientv3.OpGet(key)).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return Meta{}, s.wrap(rctx, fmt.Sprintf("put %s %q", noun(kind), name), err)
	}
	if !resp.Succeeded {
		return Meta{}, conflict(kind, name, expectModRevision, (*clientv3.GetResponse)(resp.Responses[0].GetResponseRange()))
	}
	kvs := resp.Responses[1].GetResponseRange().Kvs
	if len(kvs) == 0 { // cannot happen: the get runs in the same transaction
		return Meta{}, fmt.Errorf("store: put %s %q: key missing after put", noun(kind), name)
	}
	return Meta{Key: key, CreateRevision: kvs[0].CreateRevision, ModRevision: kvs[0].ModRevision}, nil
}

// conflict explains a failed revision check from the current value of the
// key (got, read in the transaction's else branch).
func conflict(kind, name string, expect int64, got *clientv3.GetResponse) error {
	var cur int64
	if got != nil && len(got.Kvs) > 0 {
		cur = got.Kvs[0].ModRevision
	}
	switch {
	case expect == 0:
		return errorf(ErrConflict, "store: %s %q already exists (revision %d)", noun(kind), name, cur)
	case cur == 0:
		return &sentinelError{ErrNotFound, errorf(ErrConflict, "store: %s %q was deleted (expected revision %d)", noun(kind), name, expect)}
	default:
		return errorf(ErrConflict, "store: %s %q was changed: revision %d, expected %d", noun(kind), name, cur, expect)
	}
}

// del deletes key, and the keys in also, if key's ModRevision is
// expectModRevision.
func del(ctx context.Context, s *Store, key, kind, name string, expectModRevision int64, also ...string) error {
	if err := validName(kind, name); err != nil {
		return fmt.Errorf("store: delete %s: %w", kind, err)
	}
	ops := []clientv3.Op{clientv3.OpDelete(key)}
	for _, k := range also {
		ops = append(ops, clientv3.OpDelete(k))
	}
	return delOps(ctx, s, key, kind, name, expectModRevision, ops)
}

// delOps runs ops, which delete the record of kind at key and what goes
// with it, if the record is still at expectModRevision.
func delOps(ctx context.Context, s *Store, key, kind, name string, expectModRevision int64, ops []clientv3.Op) error {
	if expectModRevision <= 0 {
		return fmt.Errorf("store: delete %s %q: expectModRevision %d: want the revision read", noun(kind), name, expectModRevision)
	}
	rctx, cancel := s.reqCtx(ctx)
	defer cancel()
	resp, err := s.etcd().Txn(rctx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", expectModRevision)).
		Then(ops...).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return s.wrap(rctx, fmt.Sprintf("delete %s %q", noun(kind), name), err)
	}
	if !resp.Succeeded {
		return conflict(kind, name, expectModRevision, (*clientv3.GetResponse)(resp.Responses[0].GetResponseRange()))
	}
	return nil
}

// validName checks a name given to a read or delete, so that a typo gets
// "invalid name" rather than "not found" and no name can reach outside its
// key family.
func validName(kind, name string) error {
	switch kind {
	case KindNode, KindNodeSpec, KindFence:
		return api.ValidateNodeName(name)
	case KindPolicy:
		return pool.ValidateName("policy", name)
	case KindNVMeSecret:
		exp, host, _ := strings.Cut(name, "/")
		return errors.Join(api.ValidateNodeName(exp), api.ValidateNodeName(host))
	default:
		return pool.ValidateName("volume", name)
	}
}

// noun is how messages name a kind: "volume \"db\" already exists".
func noun(kind string) string {
	switch kind {
	case KindVolumeSpec:
		return "volume"
	case KindVolumeStatus:
		return "status of volume"
	case KindNode:
		return "node"
	case KindNodeSpec:
		return "node spec"
	case KindPolicy:
		return "policy"
	case KindFence:
		return "fence of node"
	case KindReplicaOutdated:
		return "outdated replica of volume"
	case KindNVMeSecret:
		return "NVMe secret"
	}
	return kind
}
