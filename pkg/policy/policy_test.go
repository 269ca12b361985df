// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/pool"
)

func intp(v int) *int                  { return &v }
func u64p(v uint64) *uint64            { return &v }
func dur(d time.Duration) api.Duration { return api.Duration(d) }

func TestEffective(t *testing.T) {
	def := &api.Policy{Name: "default", Mode: "writeback", HighWatermark: intp(50), LowWatermark: intp(45),
		FlushInterval: dur(time.Hour), WearThresholdPercent: 80, OnSSDError: "none"}
	tests := []struct {
		name       string
		def, named *api.Policy
		want       api.Policy
	}{
		{"nothing: builtin", nil, nil, Builtin()},
		{"default only", def, nil, api.Policy{Name: "default", Mode: "writeback", HighWatermark: intp(50), LowWatermark: intp(45),
			FlushInterval: dur(time.Hour), WearThresholdPercent: 80, OnSSDError: "none"}},
		{"named over default", def, &api.Policy{Name: "db", HighWatermark: intp(20), WritebackJobs: u64p(64), SequentialBypassBytes: 1 << 20},
			api.Policy{Name: "db", Mode: "writeback", HighWatermark: intp(20), LowWatermark: intp(45), WritebackJobs: u64p(64),
				SequentialBypassBytes: 1 << 20, FlushInterval: dur(time.Hour), WearThresholdPercent: 80, OnSSDError: "none"}},
		{"zero in named inherits", def, &api.Policy{Name: "scratch", FlushInterval: 0, WearThresholdPercent: 0},
			api.Policy{Name: "scratch", Mode: "writeback", HighWatermark: intp(50), LowWatermark: intp(45),
				FlushInterval: dur(time.Hour), WearThresholdPercent: 80, OnSSDError: "none"}},
		{"named without default", nil, &api.Policy{Name: "db", Mode: "writethrough"},
			api.Policy{Name: "db", Mode: "writethrough", OnSSDError: api.OnSSDErrorWritethrough}},
		{"autocommit from default", &api.Policy{Name: "default", AutocommitTimeMs: u64p(500)}, &api.Policy{Name: "db"},
			api.Policy{Name: "db", AutocommitTimeMs: u64p(500), OnSSDError: api.OnSSDErrorWritethrough}},
		{"named autocommit wins", &api.Policy{Name: "default", AutocommitTimeMs: u64p(500)}, &api.Policy{Name: "db", AutocommitTimeMs: u64p(100)},
			api.Policy{Name: "db", AutocommitTimeMs: u64p(100), OnSSDError: api.OnSSDErrorWritethrough}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Effective(tt.def, tt.named)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Effective:\n got  %+v\n want %+v", got, tt.want)
			}
		})
	}
	t.Run("no aliasing", func(t *testing.T) {
		withAutocommit := *def
		withAutocommit.AutocommitTimeMs = u64p(500)
		got := Effective(&withAutocommit, nil)
		*got.HighWatermark = 99
		*got.AutocommitTimeMs = 1
		if *def.HighWatermark != 50 || *withAutocommit.AutocommitTimeMs != 500 {
			t.Fatal("Effective shares pointer fields with its input")
		}
	})
}

func TestDecide(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	spec := api.VolumeSpec{Name: "db", Node: "n1", SizeBytes: 1 << 30, WriteCacheBytes: 64 << 20, ReadCacheBytes: 64 << 20}
	with := func(f func(*api.VolumeSpec)) api.VolumeSpec { s := spec; f(&s); return s }
	pol := Builtin()
	polWith := func(f func(*api.Policy)) api.Policy { p := Builtin(); f(&p); return p }
	latch := &Latch{Revision: 10, Since: now.Add(-time.Hour), Reason: "dm-writecache error -5"}

	tests := []struct {
		name      string
		in        Input
		mode      pool.Mode
		alerts    []string // "severity name"
		flush     bool
		flushIn   time.Duration
		latchRev  int64 // 0: no latch expected
		reasonHas string
		err       error
	}{
		{name: "shape default: write cache means writeback",
			in:   Input{Spec: spec, Policy: pol, Facts: Facts{Now: now}},
			mode: pool.ModeWriteback, reasonHas: "volume default"},
		{name: "shape default: read cache only means writethrough",
			in:   Input{Spec: with(func(s *api.VolumeSpec) { s.WriteCacheBytes = 0 }), Policy: pol, Facts: Facts{Now: now}},
			mode: pool.ModeWritethrough},
		{name: "shape default: no cache means passthrough",
			in:   Input{Spec: with(func(s *api.VolumeSpec) { s.WriteCacheBytes, s.ReadCacheBytes = 0, 0 }), Policy: pol, Facts: Facts{Now: now}},
			mode: pool.ModePassthrough},
		{name: "spec mode wins over policy mode",
			in:   Input{Spec: with(func(s *api.VolumeSpec) { s.Mode = "writethrough" }), Policy: polWith(func(p *api.Policy) { p.Mode = "writeback" }), Facts: Facts{Now: now}},
			mode: pool.ModeWritethrough, reasonHas: "spec asks"},
		{name: "policy mode when spec leaves it empty",
			in:   Input{Spec: spec, Policy: polWith(func(p *api.Policy) { p.Name = "slow"; p.Mode = "passthrough" }), Facts: Facts{Now: now}},
			mode: pool.ModePassthrough, reasonHas: "policy slow"},
		{name: "invalid spec mode",
			in:  Input{Spec: with(func(s *api.VolumeSpec) { s.Mode = "fast" }), Policy: pol, Facts: Facts{Now: now}},
			err: ErrInvalid},
		{name: "writeback without write cache is invalid",
			in:  Input{Spec: with(func(s *api.VolumeSpec) { s.Mode = "writeback"; s.WriteCacheBytes = 0 }), Policy: pol, Facts: Facts{Now: now}},
			err: ErrInvalid},
		{name: "invalid OnSSDError",
			in:  Input{Spec: spec, Policy: polWith(func(p *api.Policy) { p.OnSSDError = "ignore" }), Facts: Facts{Now: now}},
			err: ErrInvalid},
		{name: "mirror lost a leg within the grace: writeback, critical alert",
			in: Input{Spec: spec, Policy: pol, Facts: Facts{Now: now,
				Mirror: &Mirror{Running: true, LegsOut: 1, Since: now.Add(-9 * time.Minute), Detail: "leg 1 (node b) failed"}}},
			mode: pool.ModeWriteback, alerts: []string{"critical mirror_degraded"}},
		{name: "mirror on one leg past the default grace: writethrough",
			in: Input{Spec: spec, Policy: pol, Facts: Facts{Now: now,
				Mirror: &Mirror{Running: true, LegsOut: 1, Since: now.Add(-10 * time.Minute), Detail: "leg 1 (node b) failed"}}},
			mode: pool.ModeWritethrough, alerts: []string{"critical mirror_degraded"}, reasonHas: "drained after 10m0s"},
		{name: "mirror grace from the policy",
			in: Input{Spec: spec, Policy: polWith(func(p *api.Policy) { p.MirrorDegradedGrace = api.Duration(time.Minute) }), Facts: Facts{Now: now,
				Mirror: &Mirror{Running: true, LegsOut: 1, Since: now.Add(-time.Minute)}}},
			mode: pool.ModeWritethrough, alerts: []string{"critical mirror_degraded"}},
		{name: "policy keeps writeback on one leg, with the alert",
			in: Input{Spec: spec, Policy: polWith(func(p *api.Policy) { p.OnMirrorDegraded = "keep" }), Facts: Facts{Now: now,
				Mirror: &Mirror{Running: true, LegsOut: 1, Since: now.Add(-time.Hour)}}},
			mode: pool.ModeWriteback, alerts: []string{"critical mirror_degraded"}},
		{name: "mirror that cannot be built whole keeps writethrough",
			in: Input{Spec: spec, Policy: pol, Facts: Facts{Now: now,
				Mirror: &Mirror{LegsOut: 1, Since: now, Detail: "node b does not export the replica"}}},
			mode: pool.ModeWritethrough, alerts: []string{"critical mirror_degraded"}, reasonHas: "writeback resumes once it can"},
		{name: "mirror whole again: writeback",
			in:   Input{Spec: spec, Policy: pol, Facts: Facts{Now: now, Mirror: &Mirror{}}},
			mode: pool.ModeWriteback},
		{name: "a volume asked to run writethrough gets no mirror alert",
			in: Input{Spec: with(func(s *api.VolumeSpec) { s.Mode = "writethrough" }), Policy: pol, Facts: Facts{Now: now,
				Mirror: &Mirror{LegsOut: 1, Since: now}}},
			mode: pool.ModeWritethrough},
		{name: "invalid OnMirrorDegraded",
			in:  Input{Spec: spec, Policy: polWith(func(p *api.Policy) { p.OnMirrorDegraded = "panic" }), Facts: Facts{Now: now}},
			err: ErrInvalid},
		{name: "drain: passthrough",
			in:   Input{Spec: spec, Policy: pol, Drain: true, Facts: Facts{Now: now}},
			mode: pool.ModePassthrough, reasonHas: "drained"},
		{name: "writecache error: writethrough, critical, latched",
			in:   Input{Spec: spec, SpecRevision: 7, Policy: pol, Facts: Facts{Now: now, WritecacheError: -5}},
			mode: pool.ModeWritethrough, alerts: []string{"critical ssd_error"}, latchRev: 7, reasonHas: "error -5"},
		{name: "SMART critical warning: writethrough",
			in:   Input{Spec: spec, SpecRevision: 7, Policy: pol, Facts: Facts{Now: now, SSDs: []SSD{{Path: "/dev/nvme0n1", CriticalWarning: true}}}},
			mode: pool.ModeWritethrough, alerts: []string{"critical ssd_error"}, latchRev: 7, reasonHas: "critical warning"},
		{name: "OnSSDError none: alert only, still latched",
			in: Input{Spec: spec, SpecRevision: 7, Policy: polWith(func(p *api.Policy) { p.OnSSDError = "none" }),
				Facts: Facts{Now: now, WritecacheError: -5}},
			mode: pool.ModeWriteback, alerts: []string{"critical ssd_error"}, latchRev: 7},
		{name: "new media errors: writethrough",
			in:   Input{Spec: spec, SpecRevision: 7, Policy: pol, Facts: Facts{Now: now, SSDs: []SSD{{Path: "/dev/nvme0n1", MediaErrors: 3}}}},
			mode: pool.ModeWritethrough, alerts: []string{"critical ssd_error"}, latchRev: 7, reasonHas: "3 new media errors"},
		{name: "SSD error never raises passthrough",
			in:   Input{Spec: with(func(s *api.VolumeSpec) { s.Mode = "passthrough" }), SpecRevision: 7, Policy: pol, Facts: Facts{Now: now, WritecacheError: -5}},
			mode: pool.ModePassthrough, alerts: []string{"critical ssd_error"}, latchRev: 7},
		{name: "drain and SSD error: passthrough with the alert",
			in:   Input{Spec: spec, SpecRevision: 7, Policy: pol, Drain: true, Facts: Facts{Now: now, WritecacheError: -5}},
			mode: pool.ModePassthrough, alerts: []string{"critical ssd_error"}, latchRev: 7},
		{name: "latch holds after the evidence is gone",
			in:   Input{Spec: spec, SpecRevision: 10, Policy: pol, Latch: latch, Facts: Facts{Now: now}},
			mode: pool.ModeWritethrough, alerts: []string{"critical ssd_error"}, latchRev: 10, reasonHas: "error -5"},
		{name: "spec update acknowledges the latch",
			in:   Input{Spec: spec, SpecRevision: 11, Policy: pol, Latch: latch, Facts: Facts{Now: now}},
			mode: pool.ModeWriteback},
		{name: "acknowledged but the error is live: trips again at the new revision",
			in:   Input{Spec: spec, SpecRevision: 11, Policy: pol, Latch: latch, Facts: Facts{Now: now, WritecacheError: -5}},
			mode: pool.ModeWritethrough, alerts: []string{"critical ssd_error"}, latchRev: 11},
		{name: "wear at threshold: writethrough, warning, no latch",
			in:   Input{Spec: spec, Policy: polWith(func(p *api.Policy) { p.WearThresholdPercent = 90 }), Facts: Facts{Now: now, SSDs: []SSD{{Path: "/dev/nvme0n1", WearPercent: intp(90)}}}},
			mode: pool.ModeWritethrough, alerts: []string{"warning ssd_wear"}, reasonHas: "/dev/nvme0n1 at 90%"},
		{name: "wear below threshold",
			in:   Input{Spec: spec, Policy: polWith(func(p *api.Policy) { p.WearThresholdPercent = 90 }), Facts: Facts{Now: now, SSDs: []SSD{{Path: "/dev/nvme0n1", WearPercent: intp(89)}, {Path: "/dev/nvme1n1"}}}},
			mode: pool.ModeWriteback},
		{name: "wear rule off by default",
			in:   Input{Spec: spec, Policy: pol, Facts: Facts{Now: now, SSDs: []SSD{{Path: "x", WearPercent: intp(100)}}}},
			mode: pool.ModeWriteback},
		{name: "error and wear: both alerts, critical first",
			in:   Input{Spec: spec, SpecRevision: 3, Policy: polWith(func(p *api.Policy) { p.WearThresholdPercent = 90 }), Facts: Facts{Now: now, WritecacheError: -5, SSDs: []SSD{{Path: "x", WearPercent: intp(95)}}}},
			mode: pool.ModeWritethrough, alerts: []string{"critical ssd_error", "warning ssd_wear"}, latchRev: 3},
		{name: "flush due",
			in:   Input{Spec: spec, Policy: polWith(func(p *api.Policy) { p.FlushInterval = dur(time.Minute) }), Facts: Facts{Now: now, LastFlush: now.Add(-time.Minute), DirtyBlocks: 10}},
			mode: pool.ModeWriteback, flush: true},
		{name: "flush due, never flushed",
			in:   Input{Spec: spec, Policy: polWith(func(p *api.Policy) { p.FlushInterval = dur(time.Minute) }), Facts: Facts{Now: now, DirtyBlocks: 10}},
			mode: pool.ModeWriteback, flush: true},
		{name: "flush due but clean",
			in:   Input{Spec: spec, Policy: polWith(func(p *api.Policy) { p.FlushInterval = dur(time.Minute) }), Facts: Facts{Now: now, LastFlush: now.Add(-time.Hour)}},
			mode: pool.ModeWriteback, flushIn: time.Minute},
		{name: "flush not yet due",
			in:   Input{Spec: spec, Policy: polWith(func(p *api.Policy) { p.FlushInterval = dur(time.Minute) }), Facts: Facts{Now: now, LastFlush: now.Add(-20 * time.Second), DirtyBlocks: 10}},
			mode: pool.ModeWriteback, flushIn: 40 * time.Second},
		{name: "no flush outside writeback",
			in:   Input{Spec: spec, Drain: true, Policy: polWith(func(p *api.Policy) { p.FlushInterval = dur(time.Minute) }), Facts: Facts{Now: now, DirtyBlocks: 10}},
			mode: pool.ModePassthrough},
		{name: "flush schedule off by default",
			in:   Input{Spec: spec, Policy: pol, Facts: Facts{Now: now, DirtyBlocks: 10}},
			mode: pool.ModeWriteback},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := Decide(tt.in)
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("Decide error = %v, want %v", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Decide: %v", err)
			}
			if d.Mode != tt.mode {
				t.Errorf("mode = %s, want %s (reason %q)", d.Mode, tt.mode, d.Reason)
			}
			var alerts []string
			for _, a := range d.Alerts {
				alerts = append(alerts, string(a.Severity)+" "+a.Name)
				if a.Message == "" {
					t.Errorf("alert %s has no message", a.Name)
				}
			}
			if !reflect.DeepEqual(alerts, tt.alerts) {
				t.Errorf("alerts = %q, want %q", alerts, tt.alerts)
			}
			if d.FlushNow != tt.flush || d.FlushIn != tt.flushIn {
				t.Errorf("flush = %v in %s, want %v in %s", d.FlushNow, d.FlushIn, tt.flush, tt.flushIn)
			}
			switch {
			case tt.latchRev == 0 && d.Latch != nil:
				t.Errorf("latch = %+v, want none", d.Latch)
			case tt.latchRev != 0 && (d.Latch == nil || d.Latch.Revision != tt.latchRev):
				t.Errorf("latch = %+v, want at revision %d", d.Latch, tt.latchRev)
			}
			if !strings.Contains(d.Reason, tt.reasonHas) {
				t.Errorf("reason %q does not mention %q", d.Reason, tt.reasonHas)
			}
		})
	}
}

func TestLatchKeepsFirstSighting(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	in := Input{Spec: api.VolumeSpec{Name: "db", WriteCacheBytes: 64 << 20}, SpecRevision: 4, Policy: Builtin(),
		Facts: Facts{Now: t0, WritecacheError: -5}}
	d1, err := Decide(in)
	if err != nil {
		t.Fatal(err)
	}
	in.Latch, in.Facts.Now = d1.Latch, t0.Add(time.Hour)
	d2, err := Decide(in)
	if err != nil {
		t.Fatal(err)
	}
	if !d2.Latch.Since.Equal(t0) {
		t.Errorf("latch since = %s, want the first sighting %s", d2.Latch.Since, t0)
	}
	if got := d2.AlertStrings(); len(got) != 1 || !strings.HasPrefix(got[0], "critical ssd_error: ") {
		t.Errorf("alert strings = %q", got)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		p  api.Policy
		ok bool
	}{
		{Builtin(), true},
		{api.Policy{Name: "x", Mode: "writeback", OnSSDError: "none"}, true},
		{api.Policy{Name: "x", OnSSDError: "writethrough"}, true},
		{api.Policy{Name: "x", Mode: "fast"}, false},
		{api.Policy{Name: "x", OnSSDError: "passthrough"}, false},
		// The rest of the record's rules apply too: Validate is the
		// record's own, not a second copy.
		{api.Policy{Name: "x", HighWatermark: intp(101)}, false},
		{api.Policy{Name: "x", HighWatermark: intp(40), LowWatermark: intp(50)}, false},
		{api.Policy{Name: "", Mode: "writeback"}, false},
	}
	for _, tt := range tests {
		err := Validate(tt.p)
		if (err == nil) != tt.ok {
			t.Errorf("Validate(%+v) = %v, want ok=%v", tt.p, err, tt.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("Validate error %v does not wrap ErrInvalid", err)
		}
	}
}

func TestLatchFromAlerts(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	in := Input{Spec: api.VolumeSpec{Name: "db", WriteCacheBytes: 64 << 20}, SpecRevision: 4, Policy: Builtin(),
		Facts: Facts{Now: t0, WritecacheError: -5, SSDs: []SSD{{Path: "x", WearPercent: intp(99)}}}}
	in.Policy.WearThresholdPercent = 90
	d, err := Decide(in)
	if err != nil {
		t.Fatal(err)
	}
	stored := d.AlertStrings()
	got := LatchFromAlerts(stored, 4)
	if got == nil || *got != *d.Latch {
		t.Fatalf("LatchFromAlerts(%q) = %+v, want %+v", stored, got, d.Latch)
	}
	// Restored after a restart with the evidence gone, it still holds.
	in.Facts = Facts{Now: t0.Add(time.Hour)}
	in.Latch = got
	d2, err := Decide(in)
	if err != nil {
		t.Fatal(err)
	}
	if d2.Mode != pool.ModeWritethrough || !reflect.DeepEqual(d2.AlertStrings(), stored[:1]) {
		t.Errorf("after restore: mode %s alerts %q, want writethrough and %q", d2.Mode, d2.AlertStrings(), stored[:1])
	}
	if l := LatchFromAlerts([]string{"warning ssd_wear: x at 99%"}, 4); l != nil {
		t.Errorf("latch from a wear alert: %+v", l)
	}
	if l := LatchFromAlerts([]string{"critical ssd_error: written by hand"}, 4); l == nil || l.Reason != "written by hand" {
		t.Errorf("latch from an alert without a time: %+v", l)
	}
}
