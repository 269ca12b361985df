// SPDX-License-Identifier: Apache-2.0

//go:build linux

package engine

import (
	"context"
	"strings"
	"testing"

	"github.com/tidecache/tidecache/pkg/dm"
	"github.com/tidecache/tidecache/pkg/pool"
	"github.com/tidecache/tidecache/pkg/stack"
	"github.com/tidecache/tidecache/pkg/writeback"
)

// The write tier of every volume runs with a bounded write-back: the
// kernel's default queues tens of thousands of writes on the HDD array,
// and reads wait behind them for minutes (issue 23).
func TestHostWriteTierBounded(t *testing.T) {
	hp := newHostPool(t)
	wtier := stack.DeviceName("db", stack.RoleWriteTier)
	d, ok := hp.k.Device(wtier)
	if !ok {
		t.Fatalf("%s not running", wtier)
	}
	// The origin here is a plain file: its disks cannot be counted, so it
	// gets the bound of a 4-disk array with 2 copies.
	want := writeback.Origin{Device: hp.origin, IOsPerBlock: 1, Rotational: true}.Limit().Jobs
	p, err := dm.ParseWritecacheParams(d.Live[0].Params)
	if err != nil {
		t.Fatal(err)
	}
	if p.WritebackJobs == nil || *p.WritebackJobs != want {
		t.Fatalf("write tier table %q: want writeback_jobs %d", d.Live, want)
	}

	info, err := hp.e.Volume(context.Background(), "db")
	if err != nil {
		t.Fatal(err)
	}
	if l := info.WritebackLimit; l == nil || l.Jobs != want || l.Source != writeback.SourceOrigin || !strings.Contains(l.Reason, "cannot be counted") {
		t.Errorf("VolumeInfo.WritebackLimit = %+v, want %d from the origin, saying why", l, want)
	}
}

// The watermarks volume show reports are the ones in the write tier's
// table: tidecache's defaults (write-back down to 10 %, not the kernel's
// 45 %), or the volume's own on top.
func TestHostWatermarksReported(t *testing.T) {
	ctx := context.Background()
	ip := func(v int) *int { return &v }
	for _, tc := range []struct {
		name                string
		tuning              *pool.Tuning
		wantHigh, wantLow   int
		wantSource, wantSay string
	}{
		{"defaults", nil, 50, pool.DefaultLowWatermark, writeback.SourceNode, "from 50 % of the write cache in use down to 10 % (node defaults)"},
		{"high set", &pool.Tuning{HighWatermark: ip(30)}, 30, pool.DefaultLowWatermark, writeback.SourceVolume, "down to 10 % (set for this volume: volume tune or a policy)"},
		{"both set", &pool.Tuning{HighWatermark: ip(80), LowWatermark: ip(60)}, 80, 60, writeback.SourceVolume, "from 80 % of the write cache in use down to 60 %"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hp := newHostPool(t)
			hp.k.SetStatusFunc(stack.DeviceName("db", stack.RoleWriteTier), wcStatus(func(int, []string) wcState { return wcState{dirty: 10} }))
			if tc.tuning != nil {
				if _, err := hp.e.SetTuning(ctx, "db", tc.tuning); err != nil {
					t.Fatal(err)
				}
			}
			d, _ := hp.k.Device(stack.DeviceName("db", stack.RoleWriteTier))
			p, err := dm.ParseWritecacheParams(d.Live[0].Params)
			if err != nil {
				t.Fatal(err)
			}
			if high, low := p.Watermarks(); high != tc.wantHigh || low != tc.wantLow {
				t.Errorf("write tier table %q: watermarks %d/%d, want %d/%d", d.Live, high, low, tc.wantHigh, tc.wantLow)
			}
			info, err := hp.e.Volume(ctx, "db")
			if err != nil {
				t.Fatal(err)
			}
			l := info.WritebackLimit
			if l == nil || l.HighWatermark != tc.wantHigh || l.LowWatermark != tc.wantLow || l.WatermarkSource != tc.wantSource ||
				!strings.Contains(l.Watermarks(), tc.wantSay) {
				t.Errorf("VolumeInfo.WritebackLimit = %+v (%q), want %d/%d from %s saying %q", l, l.Watermarks(), tc.wantHigh, tc.wantLow, tc.wantSource, tc.wantSay)
			}
		})
	}
}

// A volume made before tidecache bounded write-back runs a write tier
// without writeback_jobs; the next engine operation on it (here the
// daemon's drift repair) reloads it with the bound, keeping its devices,
// and a cleaner left on by an interrupted drain goes with it.
func TestHostWriteTierRetuned(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name    string
		running func(p dm.WritecacheParams) dm.WritecacheParams
		retune  bool
	}{
		{"unbounded table of an older tidecache", func(p dm.WritecacheParams) dm.WritecacheParams {
			p.WritebackJobs = nil
			return p
		}, true},
		{"the kernel's low watermark of an older tidecache", func(p dm.WritecacheParams) dm.WritecacheParams {
			p.LowWatermark = nil
			return p
		}, true},
		{"cleaner left on by an interrupted drain", func(p dm.WritecacheParams) dm.WritecacheParams {
			p.Cleaner = true
			return p
		}, true},
		{"another cache device: drift, not a retune", func(p dm.WritecacheParams) dm.WritecacheParams {
			p.Cache = "/dev/elsewhere"
			return p
		}, false},
		{"already as wanted", func(p dm.WritecacheParams) dm.WritecacheParams { return p }, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hp := newHostPool(t)
			want := hp.build(t, hp.vol.Mode)
			wtier, _ := want.Find(stack.RoleWriteTier)
			p, err := dm.ParseWritecacheParams(wtier.Table[0].Params)
			if err != nil {
				t.Fatal(err)
			}
			hp.k.SetStatusFunc(wtier.Name, wcStatus(func(int, []string) wcState { return wcState{dirty: 10} }))
			old := dm.Table{tc.running(p).Target(0, wtier.Table[0].Length)}
			if err := hp.e.reload(ctx, wtier.Name, old, nil); err != nil {
				t.Fatal(err)
			}
			got, err := hp.e.upgradeStack(ctx, nil, hp.vol, want, nil)
			if err != nil {
				t.Fatalf("upgradeStack: %v", err)
			}
			if got != tc.retune {
				t.Fatalf("upgradeStack reloaded = %v, want %v", got, tc.retune)
			}
			live := old
			if tc.retune {
				live = wtier.Table
			}
			assertResumed(t, hp.k, wtier.Name, live)
		})
	}
}

// The readfirst layer goes under the write tier of a running volume whose
// stack predates it, and comes out and back with the volume's tuning, each
// time by reloading the write tier onto the other device: never a drain,
// and the layer exists whenever the write tier writes back through it.
func TestHostReadFirstLayer(t *testing.T) {
	ctx := context.Background()
	hp := newHostPool(t)
	rfName := stack.DeviceName("db", stack.RoleReadFirst)
	origin := stack.DeviceName("db", stack.RoleOrigin)
	want := hp.build(t, hp.vol.Mode)
	wtier, _ := want.Find(stack.RoleWriteTier)
	rf, ok := want.Find(stack.RoleReadFirst)
	if !ok {
		t.Fatalf("the default stack has no readfirst layer:\n%v", want)
	}
	hp.k.SetStatusFunc(wtier.Name, wcStatus(func(int, []string) wcState { return wcState{dirty: 10} }))

	// An older tidecache: the write tier writes back to the origin device.
	p, err := dm.ParseWritecacheParams(wtier.Table[0].Params)
	if err != nil {
		t.Fatal(err)
	}
	p.Origin = dm.DevicePath(origin)
	old := dm.Table{p.Target(0, wtier.Table[0].Length)}
	if err := hp.e.reload(ctx, wtier.Name, old, nil); err != nil {
		t.Fatal(err)
	}
	if err := hp.e.removeDevice(ctx, rfName); err != nil {
		t.Fatal(err)
	}
	if got, err := hp.e.upgradeStack(ctx, nil, hp.vol, want, nil); err != nil || !got {
		t.Fatalf("upgradeStack = %v, %v; want the layer put in", got, err)
	}
	assertResumed(t, hp.k, rfName, rf.Table)
	assertResumed(t, hp.k, wtier.Name, wtier.Table)
	if got, err := hp.e.upgradeStack(ctx, nil, hp.vol, want, nil); err != nil || got {
		t.Fatalf("upgradeStack again = %v, %v; want nothing to do", got, err)
	}

	hold := func(ms uint64) *pool.Tuning { return &pool.Tuning{ReadFirstMaxHoldMs: &ms} }
	for _, tc := range []struct {
		name   string
		tuning *pool.Tuning
		origin string // the device the write tier writes back to
		hold   uint64 // the layer's bound, 0 for no layer
	}{
		{"without the layer", hold(0), origin, 0},
		{"back with its own bound", hold(250), rfName, 250},
		{"another bound", hold(4000), rfName, 4000},
		{"node defaults", nil, rfName, 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if changed, err := hp.e.SetTuning(ctx, "db", tc.tuning); err != nil || !changed {
				t.Fatalf("SetTuning = %v, %v", changed, err)
			}
			d, ok := hp.k.Device(wtier.Name)
			if !ok {
				t.Fatal("write tier gone")
			}
			p, err := dm.ParseWritecacheParams(d.Live[0].Params)
			if err != nil {
				t.Fatal(err)
			}
			if p.Origin != dm.DevicePath(tc.origin) {
				t.Errorf("write tier writes back to %s, want %s", p.Origin, dm.DevicePath(tc.origin))
			}
			layer, running := hp.k.Device(rfName)
			switch {
			case tc.hold == 0 && running:
				t.Errorf("readfirst layer still running: %v", layer.Live)
			case tc.hold != 0 && !running:
				t.Error("no readfirst layer")
			case tc.hold != 0:
				rp, err := dm.ParseReadFirstParams(layer.Live[0].Params)
				if err != nil || rp.MaxHoldMs != tc.hold || rp.Device != dm.DevicePath(origin) {
					t.Errorf("readfirst table %v (%v), want hold %d over %s", layer.Live, err, tc.hold, origin)
				}
			}
			if v, _ := hp.recorded(t); !v.Tuning.Equal(tc.tuning) {
				t.Errorf("recorded tuning %+v, want %+v", v.Tuning, tc.tuning)
			}
		})
	}
}
