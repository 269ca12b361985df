// SPDX-License-Identifier: Apache-2.0

package api_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/tidecache/tidecache/pkg/api"
)

func ptr[T any](v T) *T { return &v }

func TestVolumeSpecValidate(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*api.VolumeSpec)
		want   string
	}{
		{"valid", func(*api.VolumeSpec) {}, ""},
		{"unplaced, mode from policy", func(v *api.VolumeSpec) { v.Node, v.Pool, v.Mode = "", "", "" }, ""},
		{"no write tier, writethrough", func(v *api.VolumeSpec) { v.WriteCacheBytes, v.Mode = 0, "writethrough" }, ""},
		{"block size", func(v *api.VolumeSpec) { v.BlockSize = 512 }, ""},
		{"empty name", func(v *api.VolumeSpec) { v.Name = "" }, "invalid volume name"},
		{"reserved suffix", func(v *api.VolumeSpec) { v.Name = "db-origin" }, "reserved"},
		{"node name", func(v *api.VolumeSpec) { v.Node = "Node_1" }, "invalid node name"},
		{"pool name", func(v *api.VolumeSpec) { v.Pool = "a/b" }, "invalid pool name"},
		{"zero size", func(v *api.VolumeSpec) { v.SizeBytes = 0 }, "sizeBytes"},
		{"mode", func(v *api.VolumeSpec) { v.Mode = "writearound" }, "invalid mode"},
		{"writeback without write tier", func(v *api.VolumeSpec) { v.WriteCacheBytes = 0 }, "writeCacheBytes"},
		{"block size", func(v *api.VolumeSpec) { v.BlockSize = 8192 }, "blockSize"},
		{"policy name", func(v *api.VolumeSpec) { v.Policy = "-x" }, "invalid policy name"},
		{"read block size", func(v *api.VolumeSpec) { v.ReadCacheBytes, v.ReadBlockSize = 10<<30, 256<<10 }, ""},
		{"read block size not a power of two", func(v *api.VolumeSpec) { v.ReadCacheBytes, v.ReadBlockSize = 10<<30, 96<<10 },
			"readBlockSize 98304: want a power of two from 32768 to 1048576"},
		{"read block size too large", func(v *api.VolumeSpec) { v.ReadCacheBytes, v.ReadBlockSize = 10<<30, 2<<20 }, "readBlockSize 2097152"},
		{"read block size without read cache", func(v *api.VolumeSpec) { v.ReadBlockSize = 64 << 10 }, "readBlockSize 65536 needs readCacheBytes"},
		{"write cache on peers", func(v *api.VolumeSpec) { v.ReplicaNode, v.ReplicaNode0, v.ReplicaPool0 = "node-b", "node-c", "fast" }, ""},
		{"leg 0 on the volume's node", func(v *api.VolumeSpec) { v.ReplicaNode, v.ReplicaNode0 = "node-b", v.Node }, "replicaNode0 node1 is the volume's own node"},
		{"both legs on one node", func(v *api.VolumeSpec) { v.ReplicaNode, v.ReplicaNode0 = "node-b", "node-b" }, "must be on two nodes"},
		{"leg 0 without leg 1", func(v *api.VolumeSpec) { v.ReplicaNode0 = "node-c" }, "replicaNode0 needs replicaNode"},
		{"leg 0 pool without its node", func(v *api.VolumeSpec) { v.ReplicaNode, v.ReplicaPool0 = "node-b", "fast" }, "replicaPool0 needs replicaNode0"},
		{"leg 0 with protection local", func(v *api.VolumeSpec) { v.Protect, v.ReplicaNode, v.ReplicaNode0 = "local", "node-b", "node-c" }, "need protect peer"},
		{"leg 0 on a shared origin", func(v *api.VolumeSpec) { sharedOrigin(v); v.ReplicaNode, v.ReplicaNode0 = "node-b", "node-c" }, "replicaNode0 is not available with sharedOrigin yet"},
		{"shared origin", sharedOrigin, ""},
		{"shared origin failed over", func(v *api.VolumeSpec) { sharedOrigin(v); v.FailedOverFrom = "node-a" }, ""},
		{"shared origin with a size", func(v *api.VolumeSpec) { sharedOrigin(v); v.SizeBytes = 1 << 30 }, "sizeBytes must be 0"},
		{"shared origin unplaced", func(v *api.VolumeSpec) { sharedOrigin(v); v.Node = "" }, "sharedOrigin needs node"},
		{"shared origin without peer protection", func(v *api.VolumeSpec) { sharedOrigin(v); v.Protect = "local" }, "protect peer"},
		{"shared origin without a write cache", func(v *api.VolumeSpec) { sharedOrigin(v); v.WriteCacheBytes, v.Mode = 0, "writethrough" }, "sharedOrigin needs writeCacheBytes"},
		{"shared origin export name", func(v *api.VolumeSpec) { sharedOrigin(v); v.SharedOrigin.Export = "Lun/0" }, "sharedOrigin.export"},
		{"shared origin moving to its replica's node", func(v *api.VolumeSpec) { sharedOrigin(v); v.ReplicaNode, v.MoveTo = "node-b", "node-b" }, ""},
		{"move to a node without the replica", func(v *api.VolumeSpec) { sharedOrigin(v); v.ReplicaNode, v.MoveTo = "node-b", "node-c" },
			`moveTo node-c must keep the replica (replicaNode "node-b")`},
		{"move to its own node", func(v *api.VolumeSpec) { sharedOrigin(v); v.MoveTo = v.Node }, "is the volume's node already"},
		{"move without a shared origin", func(v *api.VolumeSpec) { v.ReplicaNode, v.MoveTo = "node-b", "node-b" }, "moveTo needs sharedOrigin"},
		{"shared origin moved", func(v *api.VolumeSpec) { sharedOrigin(v); v.MovedFrom = "node-b" }, ""},
		{"moved and failed over", func(v *api.VolumeSpec) { sharedOrigin(v); v.MovedFrom, v.FailedOverFrom = "node-b", "node-c" }, "exclude each other"},
		{"moved from an invalid node name", func(v *api.VolumeSpec) { sharedOrigin(v); v.MovedFrom = "B_1" }, "movedFrom: invalid node name"},
		{"failed over without a shared origin", func(v *api.VolumeSpec) { v.FailedOverFrom = "node-a" }, "failedOverFrom needs sharedOrigin"},
		{"move called off", func(v *api.VolumeSpec) {
			sharedOrigin(v)
			v.MoveCalledOff = &api.CalledOffMove{To: "node-b", Why: "the replica was recorded outdated"}
		}, ""},
		{"move called off without a reason", func(v *api.VolumeSpec) { sharedOrigin(v); v.MoveCalledOff = &api.CalledOffMove{To: "node-b"} }, "moveCalledOff.why must say why"},
		{"move called off to an invalid node name", func(v *api.VolumeSpec) {
			sharedOrigin(v)
			v.MoveCalledOff = &api.CalledOffMove{To: "B_1", Why: "gone"}
		}, "moveCalledOff.to: invalid node name"},
		{"claim of another name form", func(v *api.VolumeSpec) { v.Claim = &api.Claim{Namespace: "shop", Name: "Data_0"} }, `claim name "Data_0"`},
		{"claim without a namespace", func(v *api.VolumeSpec) { v.Claim = &api.Claim{Name: "data-0"} }, `claim namespace ""`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := dbSpec()
			tt.modify(&v)
			check(t, v.Validate(), tt.want)
		})
	}
	// Every problem is reported, not just the first.
	err := api.VolumeSpec{Name: "X", Mode: "fast"}.Validate()
	for _, want := range []string{"volume name", "sizeBytes", "mode"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("joined errors %v lack %q", err, want)
		}
	}
}

// sharedOrigin makes v a volume on another node's export.
func sharedOrigin(v *api.VolumeSpec) {
	v.SizeBytes, v.Protect = 0, "peer"
	v.SharedOrigin = &api.SharedOrigin{Node: "san", Export: "lun0"}
}

func TestPolicyValidate(t *testing.T) {
	tests := []struct {
		name string
		p    api.Policy
		want string
	}{
		{"empty", api.Policy{Name: "default"}, ""},
		{"full", api.Policy{
			Name: "oltp", Mode: "writeback", HighWatermark: ptr(60), LowWatermark: ptr(40), WritebackJobs: ptr(uint64(64)), AutocommitTimeMs: ptr(uint64(100)),
			SequentialBypassBytes: 1 << 20, FlushInterval: api.Duration(time.Hour), WearThresholdPercent: 90, OnSSDError: "none",
		}, ""},
		{"zero watermarks", api.Policy{Name: "p", HighWatermark: ptr(0), LowWatermark: ptr(0)}, ""},
		{"name", api.Policy{Name: ""}, "invalid policy name"},
		{"mode", api.Policy{Name: "p", Mode: "fast"}, "invalid mode"},
		{"high watermark", api.Policy{Name: "p", HighWatermark: ptr(101)}, "highWatermark 101"},
		{"low watermark", api.Policy{Name: "p", LowWatermark: ptr(-1)}, "lowWatermark -1"},
		{"low above high", api.Policy{Name: "p", HighWatermark: ptr(40), LowWatermark: ptr(50)}, "above highWatermark"},
		{"writeback jobs", api.Policy{Name: "p", WritebackJobs: ptr(uint64(0))}, "writebackJobs"},
		{"autocommit", api.Policy{Name: "p", AutocommitTimeMs: ptr(uint64(100))}, ""},
		{"zero autocommit", api.Policy{Name: "p", AutocommitTimeMs: ptr(uint64(0))}, "autocommitTimeMs 0: want 1 to 60000"},
		{"long autocommit", api.Policy{Name: "p", AutocommitTimeMs: ptr(uint64(60001))}, "autocommitTimeMs 60001"},
		{"negative flush interval", api.Policy{Name: "p", FlushInterval: -1}, "flushInterval"},
		{"tiny flush interval", api.Policy{Name: "p", FlushInterval: api.Duration(time.Millisecond)}, "at least 1s"},
		{"wear threshold", api.Policy{Name: "p", WearThresholdPercent: 150}, "wearThresholdPercent"},
		{"on SSD error", api.Policy{Name: "p", OnSSDError: "panic"}, "onSSDError"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { check(t, tt.p.Validate(), tt.want) })
	}
}

func TestVolumeStatusValidate(t *testing.T) {
	ok := api.VolumeStatus{Name: "db", Node: "node1", ReadHitRatio: 1, WriteHitRatio: 0}
	check(t, ok.Validate(), "")
	for _, tt := range []struct {
		name   string
		modify func(*api.VolumeStatus)
		want   string
	}{
		{"no node", func(s *api.VolumeStatus) { s.Node = "" }, "invalid node name"},
		{"ratio", func(s *api.VolumeStatus) { s.ReadHitRatio = 1.5 }, "readHitRatio"},
		{"revision", func(s *api.VolumeStatus) { s.ObservedRevision = -1 }, "observedRevision"},
		{"mode", func(s *api.VolumeStatus) { s.Mode = "x" }, "invalid mode"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := ok
			tt.modify(&s)
			check(t, s.Validate(), tt.want)
		})
	}
}

func TestValidateNodeName(t *testing.T) {
	for _, name := range []string{"node1", "db1.example.com", "a", strings.Repeat("a", api.MaxNodeNameLen)} {
		if err := api.ValidateNodeName(name); err != nil {
			t.Errorf("%q: %v", name, err)
		}
	}
	for _, name := range []string{"", "Node1", "node_1", "node/1", "-node", "node.", strings.Repeat("a", api.MaxNodeNameLen+1)} {
		if err := api.ValidateNodeName(name); err == nil {
			t.Errorf("%q accepted", name)
		}
	}
}

func TestDurationJSON(t *testing.T) {
	for _, tt := range []struct {
		d    time.Duration
		json string
	}{
		{0, `"0s"`}, {time.Hour, `"1h"`}, {90 * time.Minute, `"1h30m"`}, {90 * time.Second, `"1m30s"`},
		{10 * time.Minute, `"10m"`}, {1500 * time.Millisecond, `"1.5s"`}, {25 * time.Hour, `"25h"`},
	} {
		b, err := json.Marshal(api.Duration(tt.d))
		if err != nil || string(b) != tt.json {
			t.Errorf("marshal %v = %s, %v; want %s", tt.d, b, err, tt.json)
		}
		var back api.Duration
		if err := json.Unmarshal(b, &back); err != nil || time.Duration(back) != tt.d {
			t.Errorf("unmarshal %s = %v, %v", b, back, err)
		}
	}
	var d api.Duration
	for _, bad := range []string{`3600`, `"an hour"`, `null x`} {
		if err := json.Unmarshal([]byte(bad), &d); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

func check(t *testing.T, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Fatalf("want valid, got %v", err)
	case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
		t.Fatalf("got %v, want an error mentioning %q", err, want)
	}
}

func dbSpec() api.VolumeSpec {
	return api.VolumeSpec{
		Name: "db", Node: "node1", Pool: "fast",
		SizeBytes: 100 << 30, WriteCacheBytes: 10 << 30, Mode: "writeback",
	}
}
