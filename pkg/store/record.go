// SPDX-License-Identifier: Apache-2.0

package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/tidecache/tidecache/pkg/api"
)

// Record kinds, as written in a record's "kind" field and in Event.Kind.
const (
	KindVolumeSpec   = "VolumeSpec"
	KindVolumeStatus = "VolumeStatus"
	KindNode         = "Node"
	KindNodeSpec     = "NodeSpec"
	KindPolicy       = "Policy"
	KindFence        = "Fence"
	// KindReplicaOutdated is api.ReplicaOutdated, under outdated/<volume>.
	KindReplicaOutdated = "ReplicaOutdated"
	// KindNVMeSecret is api.NVMeSecret, under nvmesecrets/<exporter>/<host>.
	KindNVMeSecret = "NVMeSecret"
)

// APIVersion is the record version this build reads and writes. Adding an
// optional field keeps it; a change an older reader would misread (a field
// renamed, a meaning changed, a new field that must not be ignored) needs a
// new version. See docs/etcd-schema.md.
const APIVersion = "tidecache.io/v1"

// InvalidRecord is a stored value that could not be used: not JSON, an
// unknown apiVersion, a kind that does not match its key, a name that does
// not match its key, or a value that fails Validate. Lists and watches
// report and skip such records so that one bad value written by hand or by
// a newer release never stops the daemon; Get returns it as its error.
//
// It matches ErrInvalidRecord with errors.Is, and Err says what is wrong.
type InvalidRecord struct {
	Key string
	Err error
}

func (r InvalidRecord) Error() string { return fmt.Sprintf("invalid record %s: %v", r.Key, r.Err) }

// Unwrap returns ErrInvalidRecord and the cause.
func (r InvalidRecord) Unwrap() []error { return []error{ErrInvalidRecord, r.Err} }

// envelope is the stored form of every record. Desired state carries its
// payload in "spec", observed state (VolumeStatus, Node) in "status", so a
// reader of etcdctl output sees which is which.
type envelope struct {
	APIVersion string          `json:"apiVersion"`
	Kind       string          `json:"kind"`
	Spec       json.RawMessage `json:"spec,omitempty"`
	Status     json.RawMessage `json:"status,omitempty"`
}

// record is a payload: one of the api record types.
type record interface {
	Validate() error
}

// recordName is the name a payload is stored under.
func recordName(v record) string {
	switch r := v.(type) {
	case api.VolumeSpec:
		return r.Name
	case api.VolumeStatus:
		return r.Name
	case api.Node:
		return r.Name
	case api.NodeSpec:
		return r.Name
	case api.Policy:
		return r.Name
	case api.Fence:
		return r.Node
	case api.ReplicaOutdated:
		return r.Volume
	case api.NVMeSecret:
		return r.Name()
	}
	panic(fmt.Sprintf("store: %T is not a record type", v))
}

func observed(kind string) bool { return kind == KindVolumeStatus || kind == KindNode }

// encode validates v and returns its stored form.
func encode(kind string, v record) (string, error) {
	if err := v.Validate(); err != nil {
		return "", fmt.Errorf("%s %q: %w", noun(kind), recordName(v), err)
	}
	payload, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("%s %q: %w", noun(kind), recordName(v), err)
	}
	env := envelope{APIVersion: APIVersion, Kind: kind}
	if observed(kind) {
		env.Status = payload
	} else {
		env.Spec = payload
	}
	b, err := json.Marshal(env)
	if err != nil {
		return "", fmt.Errorf("%s %q: %w", noun(kind), recordName(v), err)
	}
	return string(b), nil
}

// decode reads the record stored at key, which the key layout says is of
// kind and named name. Any problem is an InvalidRecord.
func decode[T record](key, kind, name string, value []byte) (T, error) {
	var zero, v T
	bad := func(format string, a ...any) (T, error) {
		return zero, InvalidRecord{Key: key, Err: fmt.Errorf(format, a...)}
	}
	var env envelope
	if err := json.Unmarshal(value, &env); err != nil {
		return bad("not a JSON record: %v", err)
	}
	if env.APIVersion != APIVersion {
		return bad("apiVersion %q: this build reads %q", env.APIVersion, APIVersion)
	}
	if env.Kind != kind {
		return bad("kind %q where the key says %q", env.Kind, kind)
	}
	payload, field := env.Spec, "spec"
	if observed(kind) {
		payload, field = env.Status, "status"
	}
	if len(bytes.TrimSpace(payload)) == 0 || bytes.Equal(bytes.TrimSpace(payload), []byte("null")) {
		return bad("%s: missing", field)
	}
	if err := json.Unmarshal(payload, &v); err != nil {
		return bad("%s: %v", field, err)
	}
	if recordName(v) != name {
		return bad("name %q where the key says %q", recordName(v), name)
	}
	if err := v.Validate(); err != nil {
		return bad("%v", err)
	}
	return v, nil
}

// Key layout below the prefix. Names never contain '/' (pool.ValidateName,
// api.ValidateNodeName), so each is one key segment.
const (
	volumesDir   = "volumes/"
	nodesDir     = "nodes/"
	nodeSpecsDir = "nodespecs/"
	policiesDir  = "policies/"
	fencesDir    = "fences/"
	outdatedDir  = "outdated/"
	// nvmeSecretsDir holds api.NVMeSecret, two segments per key:
	// nvmesecrets/<exporter>/<host>.
	nvmeSecretsDir = "nvmesecrets/"
	electionDir    = "election/"
	// originClaimsDir holds, for each shared origin a volume caches, the
	// volume's name (a bare string, not a record): two segments per key,
	// originclaims/<exporting node>/<export>. It makes "one volume per
	// shared origin" a transaction (CreateVolumeSpec).
	originClaimsDir = "originclaims/"
	// electionPrefix is the concurrency.Election prefix; candidates' keys
	// are electionPrefix + "/" + lease ID in hex.
	electionPrefix = electionDir + "leader"
	specSuffix     = "/spec"
	statusSuffix   = "/status"
)

func (s *Store) volumeSpecKey(name string) string { return s.prefix + volumesDir + name + specSuffix }
func (s *Store) volumeStatusKey(name string) string {
	return s.prefix + volumesDir + name + statusSuffix
}
func (s *Store) nodeKey(name string) string       { return s.prefix + nodesDir + name }
func (s *Store) nodeSpecKey(name string) string   { return s.prefix + nodeSpecsDir + name }
func (s *Store) policyKey(name string) string     { return s.prefix + policiesDir + name }
func (s *Store) fenceKey(node string) string      { return s.prefix + fencesDir + node }
func (s *Store) outdatedKey(volume string) string { return s.prefix + outdatedDir + volume }
func (s *Store) originClaimKey(o api.SharedOrigin) string {
	return s.prefix + originClaimsDir + o.Node + "/" + o.Export
}
func (s *Store) nvmeSecretKey(exporter, host string) string {
	return s.prefix + nvmeSecretsDir + exporter + "/" + host
}

// parseKey maps a key below the prefix to its record kind and name. ok is
// false for keys that hold no record (the election) and for families this
// build does not know: a newer release may add some, and an older daemon
// must ignore them rather than report them. A malformed key in a known
// family gives err.
func parseKey(rel string) (kind, name string, ok bool, err error) {
	one := func(dir, kind string) (string, string, bool, error) {
		n := strings.TrimPrefix(rel, dir)
		if n == "" || strings.Contains(n, "/") {
			return "", "", false, fmt.Errorf("key does not match %s<name>", dir)
		}
		return kind, n, true, nil
	}
	switch {
	case strings.HasPrefix(rel, volumesDir):
		rest := strings.TrimPrefix(rel, volumesDir)
		for _, k := range []struct{ suffix, kind string }{{specSuffix, KindVolumeSpec}, {statusSuffix, KindVolumeStatus}} {
			if n, found := strings.CutSuffix(rest, k.suffix); found && n != "" && !strings.Contains(n, "/") {
				return k.kind, n, true, nil
			}
		}
		return "", "", false, errors.New("key does not match volumes/<name>/spec or volumes/<name>/status")
	case strings.HasPrefix(rel, nodesDir):
		return one(nodesDir, KindNode)
	case strings.HasPrefix(rel, nodeSpecsDir):
		return one(nodeSpecsDir, KindNodeSpec)
	case strings.HasPrefix(rel, policiesDir):
		return one(policiesDir, KindPolicy)
	case strings.HasPrefix(rel, fencesDir):
		return one(fencesDir, KindFence)
	case strings.HasPrefix(rel, outdatedDir):
		return one(outdatedDir, KindReplicaOutdated)
	case strings.HasPrefix(rel, nvmeSecretsDir):
		n := strings.TrimPrefix(rel, nvmeSecretsDir)
		if exp, host, ok := strings.Cut(n, "/"); ok && exp != "" && host != "" && !strings.Contains(host, "/") {
			return KindNVMeSecret, n, true, nil
		}
		return "", "", false, fmt.Errorf("key does not match %s<exporter>/<host>", nvmeSecretsDir)
	}
	return "", "", false, nil
}

// decodeKind decodes a value of any kind into the payload type for kind.
func decodeKind(key, kind, name string, value []byte) (any, error) {
	switch kind {
	case KindVolumeSpec:
		return decode[api.VolumeSpec](key, kind, name, value)
	case KindVolumeStatus:
		return decode[api.VolumeStatus](key, kind, name, value)
	case KindNode:
		return decode[api.Node](key, kind, name, value)
	case KindNodeSpec:
		return decode[api.NodeSpec](key, kind, name, value)
	case KindPolicy:
		return decode[api.Policy](key, kind, name, value)
	case KindFence:
		return decode[api.Fence](key, kind, name, value)
	case KindReplicaOutdated:
		return decode[api.ReplicaOutdated](key, kind, name, value)
	case KindNVMeSecret:
		return decode[api.NVMeSecret](key, kind, name, value)
	}
	return nil, InvalidRecord{Key: key, Err: fmt.Errorf("unknown kind %q", kind)}
}
