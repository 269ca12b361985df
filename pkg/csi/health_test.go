// SPDX-License-Identifier: Apache-2.0

package csi

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/dm"
	"github.com/tidecache/tidecache/pkg/engine"
	"github.com/tidecache/tidecache/pkg/mdraid"
	"github.com/tidecache/tidecache/pkg/pool"
)

// The statuses are made from the engine's own VolumeInfo, which tidectl
// prints, so a renamed JSON field fails here rather than in a cluster.
func TestHealthEntries(t *testing.T) {
	sound := func() engine.VolumeInfo {
		return engine.VolumeInfo{
			Name: "db", State: api.StateActive, Protection: pool.ProtectLocal,
			WriteCache: &engine.WriteCacheStatus{WritecacheStatus: dm.WritecacheStatus{TotalBlocks: 100, FreeBlocks: 40}},
			Mirror:     &engine.MirrorStatus{Copies: 2},
		}
	}
	type entry struct {
		status  csi.VolumeHealthErrorType
		reason  string
		message string // part of the message
	}
	for _, tt := range []struct {
		name string
		edit func(*engine.VolumeInfo)
		want []entry
	}{
		{"sound", func(*engine.VolumeInfo) {}, nil},
		{"failed over, protected again", func(v *engine.VolumeInfo) { v.FailedOverFrom, v.Protection, v.PeerNode = "a", pool.ProtectPeer, "c" }, nil},
		{"failed over, running on its one copy", func(v *engine.VolumeInfo) { v.FailedOverFrom, v.Protection, v.Mirror = "a", pool.ProtectNone, nil },
			[]entry{{csi.VolumeHealthErrorType_DEGRADED, "FailedOverSingleCopy", "failed over from node a and its write cache keeps one copy"}}},
		{"moved, running on its one copy", func(v *engine.VolumeInfo) { v.MovedFrom, v.Protection, v.Mirror = "a", pool.ProtectNone, nil },
			[]entry{{csi.VolumeHealthErrorType_DEGRADED, "MovedSingleCopy", "moved from node a and its write cache keeps one copy"}}},
		{"moved, protected again", func(v *engine.VolumeInfo) { v.MovedFrom, v.Protection, v.PeerNode = "a", pool.ProtectPeer, "c" }, nil},
		{"write cache I/O error", func(v *engine.VolumeInfo) { v.WriteCache.Error = -5 },
			[]entry{{csi.VolumeHealthErrorType_INACCESSIBLE, "WriteCacheIOError", "errno 5"}}},
		{"local mirror degraded", func(v *engine.VolumeInfo) { v.Mirror.Copies, v.Mirror.Degraded, v.Mirror.SyncPercent = 1, true, 40 },
			[]entry{{csi.VolumeHealthErrorType_DEGRADED, "WriteCacheMirrorDegraded", "1 copy of its dirty blocks: the leg on the second SSD is missing or rebuilding (40% synced)"}}},
		{"peer mirror degraded", func(v *engine.VolumeInfo) {
			v.Protection, v.PeerNode = pool.ProtectPeer, "b"
			v.Mirror.Copies, v.Mirror.Degraded = 1, true
		}, []entry{{csi.VolumeHealthErrorType_DEGRADED, "WriteCacheMirrorDegraded", "the leg on node b"}}},
		{"a leg recorded out of sync, mirror not running", func(v *engine.VolumeInfo) { v.Mirror, v.MirrorOutOfSync = nil, []int{1} },
			[]entry{{csi.VolumeHealthErrorType_DEGRADED, "WriteCacheMirrorOutOfSync", "legs [1]"}}},
		{"suspended", func(v *engine.VolumeInfo) { v.State = api.StateSuspended },
			[]entry{{csi.VolumeHealthErrorType_DEGRADED, "DeviceSuspended", "I/O waits"}}},
		{"stack in error", func(v *engine.VolumeInfo) { v.State, v.Error = api.StateError, "table of tc-db-wtier differs" },
			[]entry{{csi.VolumeHealthErrorType_INACCESSIBLE, "DeviceStackError", "table of tc-db-wtier differs"}}},
		{"forced start gave up dirty blocks", func(v *engine.VolumeInfo) {
			v.Mirror, v.WriteCache = nil, nil
			v.DataLoss = "the writes its write cache held were lost on 2026-11-01T00:00:00Z"
		}, []entry{{csi.VolumeHealthErrorType_DATA_LOSS, "ForcedStartLostWrites", "were lost"}}},
		{"several at once", func(v *engine.VolumeInfo) {
			v.WriteCache.Error = -5
			v.Mirror.Copies, v.Mirror.Degraded = 1, true
		}, []entry{
			{csi.VolumeHealthErrorType_INACCESSIBLE, "WriteCacheIOError", "fails every write"},
			{csi.VolumeHealthErrorType_DEGRADED, "WriteCacheMirrorDegraded", "1 copy"},
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v := sound()
			tt.edit(&v)
			show, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}

			got, err := healthEntries(show)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("entries %v, want %d", got, len(tt.want))
			}
			for i, w := range tt.want {
				if g := got[i]; g.GetStatus() != w.status || g.GetReason() != w.reason || !strings.Contains(g.GetMessage(), w.message) {
					t.Errorf("entry %d: %v %s %q, want %v %s with %q", i, g.GetStatus(), g.GetReason(), g.GetMessage(), w.status, w.reason, w.message)
				}
			}
		})
	}
	if _, err := healthEntries([]byte("volume db: not found")); err == nil {
		t.Error("healthEntries took text that is not JSON")
	}
}

// TestHealthOriginArray: the md array under a volume, as tidectl's volume
// show adds it, is DEGRADED while it lacks a member or rebuilds one.
func TestHealthOriginArray(t *testing.T) {
	for _, tt := range []struct {
		name   string
		array  mdraid.Health
		reason string
		msg    string
	}{
		{"sound", mdraid.Health{Device: "/dev/md127", Level: "raid10", RaidDisks: 4, SyncAction: "idle"}, "", ""},
		{"lost a member", mdraid.Health{Device: "/dev/md127", Level: "raid10", RaidDisks: 4, Degraded: 1, FailedDevices: []string{"sdb"}, SyncAction: "idle"},
			"OriginArrayDegraded", "/dev/md127 (raid10) runs with 1 of its 4 members missing or out of sync (failed: [sdb]"},
		{"rebuilding", mdraid.Health{Device: "/dev/md127", Level: "raid10", RaidDisks: 4, Degraded: 1, RebuildingDevices: []string{"sde"}, SyncAction: "recover"},
			"OriginArrayDegraded", "rebuilding: [sde], sync: recover"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			show, err := json.Marshal(engine.VolumeInfo{Name: "db", State: api.StateActive})
			if err != nil {
				t.Fatal(err)
			}
			got, err := healthEntries(withOriginArray(t, show, tt.array))
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tt.reason == "" && len(got) != 0:
				t.Errorf("entries %v, want none", got)
			case tt.reason != "" && (len(got) != 1 || got[0].GetStatus() != csi.VolumeHealthErrorType_DEGRADED || got[0].GetReason() != tt.reason || !strings.Contains(got[0].GetMessage(), tt.msg)):
				t.Errorf("entries %v, want one DEGRADED %s with %q", got, tt.reason, tt.msg)
			}
		})
	}
}

// withOriginArray adds the origin_array key tidectl's volume show prints
// (cli.Volume.OriginArray, an mdraid.Health) to a volume's JSON.
func withOriginArray(t *testing.T, show []byte, h mdraid.Health) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(show, &m); err != nil {
		t.Fatal(err)
	}
	m["origin_array"] = h
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
