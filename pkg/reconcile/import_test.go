// SPDX-License-Identifier: Apache-2.0

package reconcile

import (
	"testing"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/engine"
	"github.com/tidecache/tidecache/pkg/pool"
)

// TestSpecOfMatches: the spec written for each kind of local volume is
// valid and raises no mismatch, and the node plans nothing from it.
func TestSpecOfMatches(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    engine.VolumeInfo
	}{
		{"writeback", engine.VolumeInfo{Name: "db", Pool: "fast", Mode: pool.ModeWriteback, SizeBytes: 1 << 30, WriteCacheBytes: 64 << 20, BlockSize: 4096}},
		{"write and read tiers, mirrored", engine.VolumeInfo{Name: "db", Pool: "fast", Mode: pool.ModeWriteback, SizeBytes: 1 << 30,
			WriteCacheBytes: 64 << 20, ReadCacheBytes: 128 << 20, ReadBlockSize: 256 << 10, BlockSize: 512, Protection: pool.ProtectLocal}},
		{"read tier only", engine.VolumeInfo{Name: "db", Pool: "fast", Mode: pool.ModeWritethrough, SizeBytes: 1 << 30, ReadCacheBytes: 128 << 20, ReadBlockSize: 64 << 10}},
		{"passthrough after uncache", engine.VolumeInfo{Name: "db", Pool: "fast", Mode: pool.ModePassthrough, SizeBytes: 1 << 30}},
		{"FUA window", engine.VolumeInfo{Name: "db", Pool: "fast", Mode: pool.ModeWriteback, SizeBytes: 1 << 30, WriteCacheBytes: 64 << 20, FUAWindow: true}},
		{"adopted", engine.VolumeInfo{Name: "mysql", Pool: "ssds", Mode: pool.ModeWriteback, SizeBytes: 3<<30 + 4096, WriteCacheBytes: 64 << 20,
			AdoptedDevice: "/dev/md0 (md uuid 3f2a9c41:8b7d6e50:1a2b3c4d:5e6f7a8b)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := SpecOf(tc.v, "n1")
			if err := spec.Validate(); err != nil {
				t.Fatalf("spec %+v: %v", spec, err)
			}
			if m := mismatch(spec, tc.v); m != "" {
				t.Errorf("spec %+v: %s", spec, m)
			}
			p, err := decide(observation{spec: spec, exists: true, actual: tc.v, policy: api.Policy{Name: api.DefaultPolicy}}, DriftRepair, 0)
			if err != nil {
				t.Fatal(err)
			}
			if p.create || p.grow != 0 || p.setMode != "" || p.mismatch != "" || p.refuse != nil {
				t.Errorf("plan from the imported spec: create %t grow %d mode %q mismatch %q refuse %v", p.create, p.grow, p.setMode, p.mismatch, p.refuse)
			}
		})
	}
}
