// SPDX-License-Identifier: Apache-2.0

package reconcile

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/engine"
	"github.com/tidecache/tidecache/pkg/policy"
	"github.com/tidecache/tidecache/pkg/pool"
)

// TestDecide runs the pure decide step on hand-written observations: no
// etcd, no engine.
func TestDecide(t *testing.T) {
	now := time.Date(2026, 11, 24, 8, 0, 0, 0, time.UTC)
	const resync = 5 * time.Minute
	intp := func(i int) *int { return &i }
	// wb is an existing writeback volume matching its spec.
	wb := func(mod ...func(*observation)) observation {
		o := observation{
			spec:     api.VolumeSpec{Name: "db", Node: "n1", Pool: "fast", SizeBytes: 1 << 30, WriteCacheBytes: 64 << 20},
			revision: 7,
			policy:   api.Policy{Name: api.DefaultPolicy},
			exists:   true,
			actual: engine.VolumeInfo{Name: "db", Pool: "fast", Mode: pool.ModeWriteback, SizeBytes: 1 << 30, WriteCacheBytes: 64 << 20,
				State: api.StateActive, WriteCache: &engine.WriteCacheStatus{}},
			facts: policy.Facts{Now: now, LastFlush: now},
		}
		for _, m := range mod {
			m(&o)
		}
		return o
	}
	drifted := func(o *observation) {
		o.drift = errors.Join(&engine.DriftError{Device: "tc-db", Want: "writecache", Got: "linear"})
	}
	tests := []struct {
		name        string
		obs         observation
		driftPolicy string
		check       func(t *testing.T, p plan)
	}{
		{
			name: "in step: nothing to do",
			obs:  wb(),
			check: func(t *testing.T, p plan) {
				if p.create || p.setMode != "" || p.setTuning || p.flush || len(p.drift) > 0 || p.mismatch != "" || p.refuse != nil {
					t.Errorf("plan %+v, want no action", p)
				}
			},
		},
		{
			name: "missing volume is created in the mode its slices give",
			obs:  wb(func(o *observation) { o.exists, o.actual = false, engine.VolumeInfo{} }),
			check: func(t *testing.T, p plan) {
				if !p.create || p.decision.Mode != pool.ModeWriteback {
					t.Errorf("create %v mode %s, want create in writeback", p.create, p.decision.Mode)
				}
			},
		},
		{
			name:        "drift with drift policy report: reported, nothing else done",
			obs:         wb(drifted, func(o *observation) { o.spec.Mode = "writethrough" }),
			driftPolicy: DriftReport,
			check: func(t *testing.T, p plan) {
				if !p.reportDrift || len(p.drift) != 1 || p.setMode != "" || p.requeue != resync {
					t.Errorf("plan %+v, want drift reported, no mode change, requeue after %s", p, resync)
				}
				if !strings.Contains(p.driftReport(), "tc-db") {
					t.Errorf("drift report %q does not name the device", p.driftReport())
				}
			},
		},
		{
			name:        "drift with drift policy repair: repaired, then the mode changes",
			obs:         wb(drifted, func(o *observation) { o.spec.Mode = "writethrough" }),
			driftPolicy: DriftRepair,
			check: func(t *testing.T, p plan) {
				if p.reportDrift || len(p.drift) != 1 || p.setMode != pool.ModeWritethrough {
					t.Errorf("plan %+v, want drift repaired and a switch to writethrough", p)
				}
			},
		},
		{
			name: "drift check failing otherwise fails the pass",
			obs:  wb(func(o *observation) { o.drift = fmt.Errorf("origin missing") }),
			check: func(t *testing.T, p plan) {
				if p.driftErr == nil || !strings.Contains(p.driftErr.Error(), "check tables: origin missing") || p.setMode != "" {
					t.Errorf("plan %+v, want the check error", p)
				}
			},
		},
		{
			name: "drained node: passthrough",
			obs:  wb(func(o *observation) { o.drain = true }),
			check: func(t *testing.T, p plan) {
				if p.setMode != pool.ModePassthrough {
					t.Errorf("setMode %q, want passthrough", p.setMode)
				}
			},
		},
		{
			name: "SSD error, default policy: latched, writethrough",
			obs:  wb(func(o *observation) { o.facts.WritecacheError = -5 }),
			check: func(t *testing.T, p plan) {
				if !p.tripped || p.decision.Latch == nil || p.setMode != pool.ModeWritethrough {
					t.Errorf("tripped %v latch %+v setMode %q, want a new latch and writethrough", p.tripped, p.decision.Latch, p.setMode)
				}
			},
		},
		{
			name: "SSD error, policy onSSDError none: latched, mode kept",
			obs: wb(func(o *observation) {
				o.facts.WritecacheError = -5
				o.policy.OnSSDError = api.OnSSDErrorNone
			}),
			check: func(t *testing.T, p plan) {
				if !p.tripped || p.setMode != "" {
					t.Errorf("tripped %v setMode %q, want a latch and no mode change", p.tripped, p.setMode)
				}
			},
		},
		{
			name: "SSD error latched before: not tripped again; a spec update acknowledges it",
			obs: wb(func(o *observation) {
				o.latch = &policy.Latch{Revision: 6, Since: now.Add(-time.Hour), Reason: "dm-writecache error -5"}
				o.spec.Mode = "writethrough"
				o.actual.Mode = pool.ModeWritethrough
			}),
			check: func(t *testing.T, p plan) {
				if p.tripped || !p.acknowledged || p.decision.Latch != nil {
					t.Errorf("tripped %v acknowledged %v latch %+v, want acknowledged", p.tripped, p.acknowledged, p.decision.Latch)
				}
			},
		},
		{
			name: "spec mode change",
			obs:  wb(func(o *observation) { o.spec.Mode = "passthrough" }),
			check: func(t *testing.T, p plan) {
				if p.setMode != pool.ModePassthrough {
					t.Errorf("setMode %q, want passthrough", p.setMode)
				}
			},
		},
		{
			name: "writeback without a write cache slice is refused, terminally",
			obs: wb(func(o *observation) {
				o.spec.Mode = "writeback"
				o.actual.Mode, o.actual.WriteCacheBytes, o.actual.WriteCache = pool.ModePassthrough, 0, nil
			}),
			check: func(t *testing.T, p plan) {
				if p.refuse == nil || !IsTerminal(p.refuse) || p.setMode != "" {
					t.Errorf("refuse %v setMode %q, want a terminal refusal", p.refuse, p.setMode)
				}
				if p.mismatch == "" {
					t.Error("no spec-mismatch alert for the missing write cache")
				}
			},
		},
		{
			name: "tuning from the policy",
			obs:  wb(func(o *observation) { o.policy.HighWatermark, o.policy.LowWatermark = intp(40), intp(20) }),
			check: func(t *testing.T, p plan) {
				want := &pool.Tuning{HighWatermark: intp(40), LowWatermark: intp(20)}
				if !p.setTuning || !p.tuning.Equal(want) {
					t.Errorf("setTuning %v tuning %+v, want %+v", p.setTuning, p.tuning, want)
				}
			},
		},
		{
			name: "tuning already applied",
			obs: wb(func(o *observation) {
				o.policy.HighWatermark = intp(40)
				o.actual.Tuning = &pool.Tuning{HighWatermark: intp(40)}
			}),
			check: func(t *testing.T, p plan) {
				if p.setTuning {
					t.Error("tuning applied again")
				}
			},
		},
		{
			name: "scheduled flush due with dirty blocks: flush, next one an interval later",
			obs: wb(func(o *observation) {
				o.policy.FlushInterval = api.Duration(time.Hour)
				o.facts.LastFlush, o.facts.DirtyBlocks = now.Add(-2*time.Hour), 10
			}),
			check: func(t *testing.T, p plan) {
				if !p.flush || p.requeue != time.Hour {
					t.Errorf("flush %v requeue %s, want a flush and 1h", p.flush, p.requeue)
				}
			},
		},
		{
			name: "scheduled flush not due: requeued for it",
			obs: wb(func(o *observation) {
				o.policy.FlushInterval = api.Duration(time.Hour)
				o.facts.LastFlush = now.Add(-15 * time.Minute)
			}),
			check: func(t *testing.T, p plan) {
				if p.flush || p.requeue != 45*time.Minute {
					t.Errorf("flush %v requeue %s, want none and 45m", p.flush, p.requeue)
				}
			},
		},
		{
			name: "spec smaller than the volume: mismatch alert, nothing changed",
			obs:  wb(func(o *observation) { o.spec.SizeBytes = 512 << 20 }),
			check: func(t *testing.T, p plan) {
				if !strings.Contains(p.mismatch, api.AlertSpecMismatch) || !strings.Contains(p.mismatch, "volumes only grow") || p.setMode != "" || p.grow != 0 {
					t.Errorf("mismatch %q setMode %q grow %d", p.mismatch, p.setMode, p.grow)
				}
			},
		},
		{
			name: "spec larger than the volume: it grows, rounded up to the alignment, no mismatch",
			obs:  wb(func(o *observation) { o.spec.SizeBytes = 2<<30 + 1 }),
			check: func(t *testing.T, p plan) {
				if p.grow != 2<<30+1<<20 || p.mismatch != "" || p.setMode != "" {
					t.Errorf("grow %d mismatch %q setMode %q", p.grow, p.mismatch, p.setMode)
				}
			},
		},
		{
			name: "shared origin: cached whole, never grown from the spec",
			obs: wb(func(o *observation) {
				o.spec.SizeBytes, o.spec.SharedOrigin = 2<<30, &api.SharedOrigin{Node: "san", Export: "lun0"}
			}),
			check: func(t *testing.T, p plan) {
				if p.grow != 0 {
					t.Errorf("grow %d", p.grow)
				}
			},
		},
		{
			name: "failed over onto its replica, a new replica placed: protected again, no mismatch",
			obs: wb(func(o *observation) {
				o.spec.SizeBytes, o.spec.Protect, o.spec.ReplicaNode = 0, "peer", "n3"
				o.spec.SharedOrigin, o.spec.FailedOverFrom = &api.SharedOrigin{Node: "san", Export: "lun0"}, "n2"
				o.actual.Protection, o.actual.FailedOverFrom = pool.ProtectNone, "n2"
			}),
			check: func(t *testing.T, p plan) {
				if !p.addPeer || p.movePeer || p.mismatch != "" {
					t.Errorf("addPeer %v movePeer %v mismatch %q: want the new replica added as leg 1, and no mismatch", p.addPeer, p.movePeer, p.mismatch)
				}
			},
		},
		{
			name: "moved onto its replica, a new replica placed: protected again, no mismatch",
			obs: wb(func(o *observation) {
				o.spec.SizeBytes, o.spec.Protect, o.spec.ReplicaNode = 0, "peer", "n3"
				o.spec.SharedOrigin, o.spec.MovedFrom = &api.SharedOrigin{Node: "san", Export: "lun0"}, "n2"
				o.actual.Protection, o.actual.MovedFrom = pool.ProtectNone, "n2"
			}),
			check: func(t *testing.T, p plan) {
				if !p.addPeer || p.movePeer || p.mismatch != "" {
					t.Errorf("addPeer %v movePeer %v mismatch %q: want the new replica added as leg 1, and no mismatch", p.addPeer, p.movePeer, p.mismatch)
				}
			},
		},
		{
			name: "moved, no replica placed yet: runs on as it is",
			obs: wb(func(o *observation) {
				o.spec.SizeBytes, o.spec.Protect = 0, "peer"
				o.spec.SharedOrigin, o.spec.MovedFrom = &api.SharedOrigin{Node: "san", Export: "lun0"}, "n2"
				o.actual.Protection, o.actual.MovedFrom = pool.ProtectNone, "n2"
			}),
			check: func(t *testing.T, p plan) {
				if p.addPeer || p.movePeer || p.mismatch != "" {
					t.Errorf("addPeer %v movePeer %v mismatch %q: want nothing until a replica is placed", p.addPeer, p.movePeer, p.mismatch)
				}
			},
		},
		{
			name: "failed over, no replica placed yet: runs on as it is",
			obs: wb(func(o *observation) {
				o.spec.SizeBytes, o.spec.Protect = 0, "peer"
				o.spec.SharedOrigin, o.spec.FailedOverFrom = &api.SharedOrigin{Node: "san", Export: "lun0"}, "n2"
				o.actual.Protection, o.actual.FailedOverFrom = pool.ProtectNone, "n2"
			}),
			check: func(t *testing.T, p plan) {
				if p.addPeer || p.movePeer || p.mismatch != "" {
					t.Errorf("addPeer %v movePeer %v mismatch %q: want nothing until a replica is placed", p.addPeer, p.movePeer, p.mismatch)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dp := tt.driftPolicy
			if dp == "" {
				dp = DriftRepair
			}
			p, err := decide(tt.obs, dp, resync)
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, p)
		})
	}
}

// TestDecideInvalidPolicy: an invalid policy is the one error decide
// returns, and it is terminal once classified.
func TestDecideInvalidPolicy(t *testing.T) {
	o := observation{spec: api.VolumeSpec{Name: "db", Node: "n1", SizeBytes: 1 << 30}, policy: api.Policy{Name: "p", FlushInterval: -1}}
	_, err := decide(o, DriftRepair, time.Minute)
	if !errors.Is(err, policy.ErrInvalid) || !IsTerminal(classify(err)) {
		t.Fatalf("decide = %v, want a terminal policy.ErrInvalid", err)
	}
}
