// SPDX-License-Identifier: Apache-2.0

package store

import (
	"encoding/json"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tidecache/tidecache/pkg/api"
)

func TestParseKey(t *testing.T) {
	tests := []struct {
		rel        string
		kind, name string
		ok, err    bool
	}{
		{"volumes/db/spec", KindVolumeSpec, "db", true, false},
		{"volumes/db/status", KindVolumeStatus, "db", true, false},
		{"nodes/node1.example.com", KindNode, "node1.example.com", true, false},
		{"nodespecs/node1", KindNodeSpec, "node1", true, false},
		{"policies/default", KindPolicy, "default", true, false},
		{"fences/node1", KindFence, "node1", true, false},
		{"election/leader/694d7d3c6a8f1a04", "", "", false, false},
		{"pairings/db", "", "", false, false},
		{"volumes/db", "", "", false, true},
		{"volumes//spec", "", "", false, true},
		{"volumes/a/b/spec", "", "", false, true},
		{"volumes/db/spec/x", "", "", false, true},
		{"nodes/", "", "", false, true},
		{"nodes/a/b", "", "", false, true},
		{"policies/", "", "", false, true},
		{"fences/a/b", "", "", false, true},
	}
	for _, tt := range tests {
		kind, name, ok, err := parseKey(tt.rel)
		if kind != tt.kind || name != tt.name || ok != tt.ok || (err != nil) != tt.err {
			t.Errorf("parseKey(%q) = %q %q %v %v, want %q %q %v err=%v", tt.rel, kind, name, ok, err, tt.kind, tt.name, tt.ok, tt.err)
		}
	}
}

// The stored form, byte for byte: an operator's etcdctl output and other
// releases depend on it.
func TestEncode(t *testing.T) {
	got, err := encode(KindVolumeSpec, api.VolumeSpec{Name: "db", Node: "node1", SizeBytes: 1 << 30, WriteCacheBytes: 1 << 28, Mode: "writeback"})
	want := `{"apiVersion":"tidecache.io/v1","kind":"VolumeSpec","spec":{"name":"db","node":"node1","sizeBytes":1073741824,"writeCacheBytes":268435456,"mode":"writeback"}}`
	if err != nil || got != want {
		t.Errorf("VolumeSpec:\n got %s %v\nwant %s", got, err, want)
	}
	got, err = encode(KindVolumeStatus, api.VolumeStatus{Name: "db", Node: "node1", ObservedRevision: 7, UpdatedAt: time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)})
	want = `{"apiVersion":"tidecache.io/v1","kind":"VolumeStatus","status":{"name":"db","node":"node1","observedRevision":7,"dirtyBlocks":0,"dirtyBytes":0,"readHitRatio":0,"writeHitRatio":0,"updatedAt":"2026-11-20T10:00:00Z"}}`
	if err != nil || got != want {
		t.Errorf("VolumeStatus:\n got %s %v\nwant %s", got, err, want)
	}
	if _, err := encode(KindPolicy, api.Policy{Name: "p", OnSSDError: "panic"}); err == nil {
		t.Error("invalid policy encoded")
	}
}

// Fields a newer release adds within v1 are ignored, so a rolling upgrade
// keeps old daemons working.
func TestDecodeIgnoresUnknownFields(t *testing.T) {
	v, err := decode[api.NodeSpec]("k", KindNodeSpec, "node1", []byte(`{"apiVersion":"tidecache.io/v1","kind":"NodeSpec","spec":{"name":"node1","drain":true,"cordon":true},"extra":1}`))
	if err != nil || !v.Drain {
		t.Fatalf("decode = %+v, %v", v, err)
	}
	// Desired state in "status" (or the reverse) is not accepted.
	if _, err := decode[api.NodeSpec]("k", KindNodeSpec, "node1", []byte(`{"apiVersion":"tidecache.io/v1","kind":"NodeSpec","status":{"name":"node1"}}`)); err == nil {
		t.Fatal("spec record with a status payload accepted")
	}
}

// Every JSON example in docs/etcd-schema.md is a valid record that survives
// a round trip through the store's encoding.
func TestSchemaDocExamples(t *testing.T) {
	doc, err := os.ReadFile("../../docs/etcd-schema.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```json\n(.*?)```").FindAllSubmatch(doc, -1)
	kinds := map[string]bool{}
	for _, b := range blocks {
		var env envelope
		if err := json.Unmarshal(b[1], &env); err != nil {
			t.Errorf("example is not JSON: %v\n%s", err, b[1])
			continue
		}
		payload := env.Spec
		if observed(env.Kind) {
			payload = env.Status
		}
		var named struct{ Name string }
		json.Unmarshal(payload, &named)
		v, err := decodeKind("doc", env.Kind, named.Name, b[1])
		if err != nil {
			t.Errorf("example %s %q: %v", env.Kind, named.Name, err)
			continue
		}
		kinds[env.Kind] = true
		re, err := encode(env.Kind, v.(record))
		if err != nil {
			t.Fatal(err)
		}
		back, err := decodeKind("doc", env.Kind, named.Name, []byte(re))
		if err != nil || !reflect.DeepEqual(back, v) {
			t.Errorf("example %s %q does not round-trip: %v\n%#v\n%#v", env.Kind, named.Name, err, v, back)
		}
	}
	for _, k := range []string{KindVolumeSpec, KindVolumeStatus, KindNode, KindNodeSpec, KindPolicy} {
		if !kinds[k] {
			t.Errorf("docs/etcd-schema.md has no example of %s", k)
		}
	}
	if !strings.Contains(string(doc), DefaultPrefix) {
		t.Errorf("docs/etcd-schema.md does not mention the default prefix %s", DefaultPrefix)
	}
}
