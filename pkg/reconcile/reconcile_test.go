// SPDX-License-Identifier: Apache-2.0

package reconcile_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tidecache/tidecache/internal/testnet"
	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/dm"
	"github.com/tidecache/tidecache/pkg/engine"
	"github.com/tidecache/tidecache/pkg/etcdserver"
	"github.com/tidecache/tidecache/pkg/metrics"
	"github.com/tidecache/tidecache/pkg/pool"
	"github.com/tidecache/tidecache/pkg/reconcile"
	"github.com/tidecache/tidecache/pkg/reconcile/reconciletest"
	"github.com/tidecache/tidecache/pkg/store"
)

func hasAlert(st api.VolumeStatus, prefix string) bool {
	return slices.ContainsFunc(st.Alerts, func(a string) bool { return strings.HasPrefix(a, prefix) })
}

// reconciled waits until n more reconciles have finished than before.
func (e *env) reconciled(before float64, n float64) {
	e.t.Helper()
	waitFor(e.t, "reconciles to run", func() bool {
		return e.metric("tidecache_reconcile_duration_seconds", nil) >= before+n
	})
}

func (e *env) reconciles() float64 { return e.metric("tidecache_reconcile_duration_seconds", nil) }

func TestCreateFromSpec(t *testing.T) {
	e := newEnv(t, nil).start()
	m := e.createSpec(spec("db"))
	st := e.waitStatus("db", "observed and active", func(s api.VolumeStatus) bool {
		return s.ObservedRevision == m.ModRevision && s.State == api.StateActive
	})
	if st.Node != "n1" || st.Mode != "writeback" || st.Error != "" || len(st.Alerts) != 0 {
		t.Errorf("status = %+v", st)
	}
	if st.ReadHitRatio != 0.5 || st.WriteHitRatio != 0.25 {
		t.Errorf("hit ratios = %v/%v, want the engine's 0.5/0.25", st.ReadHitRatio, st.WriteHitRatio)
	}
	if got := e.eng.Calls(); !slices.Equal(got, []string{"create db pool=fast mode=writeback"}) {
		t.Errorf("engine calls = %q", got)
	}

	// Idempotent: a resync changes nothing.
	before := e.reconciles()
	e.ctrl.Resync(e.ctx())
	e.reconciled(before, 1)
	if got := e.eng.Calls(); len(got) != 1 {
		t.Errorf("resync changed the engine: %q", got)
	}
	if n := e.metric("tidecache_reconcile_total", map[string]string{"result": "success"}); n < 2 {
		t.Errorf("reconcile_total{result=success} = %v, want >= 2", n)
	}
	if e.etcdUp.Load() != 1 || !e.ctrl.EtcdUp() {
		t.Errorf("store reachability not reported: callback %d, EtcdUp %v", e.etcdUp.Load(), e.ctrl.EtcdUp())
	}
}

func TestCreateTerminalError(t *testing.T) {
	e := newEnv(t, nil).start()
	s := spec("db")
	s.Pool = "nosuch"
	m := e.createSpec(s)
	st := e.waitStatus("db", "error", func(s api.VolumeStatus) bool {
		return s.ObservedRevision == m.ModRevision && s.State == api.StateError
	})
	if !strings.Contains(st.Error, "pool not found") {
		t.Errorf("status error = %q", st.Error)
	}
	// Terminal: not retried in a loop.
	time.Sleep(100 * time.Millisecond)
	if n := e.eng.Count("create db"); n != 1 {
		t.Errorf("CreateVolume called %d times, want 1 (terminal errors are not retried until a change)", n)
	}
	if n := e.metric("tidecache_reconcile_total", map[string]string{"result": "terminal_error"}); n != 1 {
		t.Errorf("terminal errors = %v", n)
	}
	// Fixing the spec retries at once.
	m = e.updateSpec("db", func(s *api.VolumeSpec) { s.Pool = "fast" })
	e.waitStatus("db", "fixed", func(s api.VolumeStatus) bool {
		return s.ObservedRevision == m.ModRevision && s.State == api.StateActive && s.Error == ""
	})
}

func TestModeChange(t *testing.T) {
	e := newEnv(t, nil).start()
	e.createSpec(spec("db"))
	e.waitStatus("db", "created", func(s api.VolumeStatus) bool { return s.State == api.StateActive })
	e.eng.With("db", func(v *reconciletest.Volume) { v.Dirty = 7 })

	m := e.updateSpec("db", func(s *api.VolumeSpec) { s.Mode = "writethrough" })
	st := e.waitStatus("db", "writethrough", func(s api.VolumeStatus) bool {
		return s.ObservedRevision == m.ModRevision && s.Mode == "writethrough"
	})
	if st.DirtyBlocks != 0 || st.State != api.StateActive {
		t.Errorf("status after drain = %+v", st)
	}
	if n := e.eng.Count("setmode db writethrough"); n != 1 {
		t.Errorf("SetMode called %d times: %q", n, e.eng.Calls())
	}
}

// TestGrowFromSpec raises a volume's size in its spec: the node grows it
// once, live, and reports the new size; a growth the pool has no room for
// is a terminal error in the status until the spec changes, and a smaller
// size is a mismatch, never a shrink.
func TestGrowFromSpec(t *testing.T) {
	e := newEnv(t, nil).start()
	e.createSpec(spec("db"))
	e.waitStatus("db", "created", func(s api.VolumeStatus) bool { return s.State == api.StateActive })

	m := e.updateSpec("db", func(s *api.VolumeSpec) { s.SizeBytes = 2 << 30 })
	st := e.waitStatus("db", "grown", func(s api.VolumeStatus) bool {
		return s.ObservedRevision == m.ModRevision && s.SizeBytes == 2<<30
	})
	if st.State != api.StateActive || st.Error != "" || len(st.Alerts) != 0 {
		t.Errorf("status after growing = %+v", st)
	}
	e.ctrl.Resync(e.ctx())
	if n := e.eng.Count("resize db"); n != 1 {
		t.Errorf("ResizeVolume called %d times, want once: %q", n, e.eng.Calls())
	}

	e.eng.LimitSize(3 << 30)
	m = e.updateSpec("db", func(s *api.VolumeSpec) { s.SizeBytes = 4 << 30 })
	st = e.waitStatus("db", "refused", func(s api.VolumeStatus) bool {
		return s.ObservedRevision == m.ModRevision && s.State == api.StateError
	})
	if !strings.Contains(st.Error, "not enough free space") || st.SizeBytes != 2<<30 {
		t.Errorf("status after a growth with no room = %+v", st)
	}

	m = e.updateSpec("db", func(s *api.VolumeSpec) { s.SizeBytes = 1 << 30 })
	st = e.waitStatus("db", "mismatch", func(s api.VolumeStatus) bool { return s.ObservedRevision == m.ModRevision })
	if st.SizeBytes != 2<<30 || !strings.Contains(strings.Join(st.Alerts, " "), "volumes only grow") {
		t.Errorf("status after asking for less = %+v", st)
	}
	if n := e.eng.Count("resize db"); n != 1 {
		t.Errorf("ResizeVolume called %d times: %q", n, e.eng.Calls())
	}
}

// TestAdoptedSpec: an imported spec of an adopted volume (size 0, the
// device's) manages the volume that is there without a mismatch, and is
// never created from the spec when the volume is missing.
func TestAdoptedSpec(t *testing.T) {
	e := newEnv(t, nil)
	e.eng.AddLocal("mysql", "fast", pool.ModeWriteback)
	e.start()
	s := spec("mysql")
	s.SizeBytes, s.Adopted, s.Mode, s.Protect = 0, true, "writeback", "none"
	m := e.createSpec(s)
	st := e.waitStatus("mysql", "managed", func(s api.VolumeStatus) bool { return s.ObservedRevision == m.ModRevision })
	if st.State != api.StateActive || len(st.Alerts) != 0 || st.SizeBytes != 1<<30 {
		t.Errorf("status of the imported adopted volume = %+v", st)
	}

	gone := spec("gone")
	gone.SizeBytes, gone.Adopted = 0, true
	m = e.createSpec(gone)
	st = e.waitStatus("gone", "refused", func(s api.VolumeStatus) bool {
		return s.ObservedRevision == m.ModRevision && s.State == api.StateError
	})
	if !strings.Contains(st.Error, "adopt it again") {
		t.Errorf("status error = %q", st.Error)
	}
	if n := e.eng.Count("create gone"); n != 0 {
		t.Errorf("an adopted volume was created from its spec: %q", e.eng.Calls())
	}
}

// TestLatestStateWins changes the spec three times while a mode change is
// under way: the volume gets one more reconcile, for the last spec, and
// never two at once.
func TestLatestStateWins(t *testing.T) {
	e := newEnv(t, nil)
	release := make(chan struct{})
	var inFlight, maxInFlight atomic.Int32
	var blockOnce sync.Once
	e.eng.SetModeHook = func(name string, mode pool.Mode) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		if n > maxInFlight.Load() {
			maxInFlight.Store(n)
		}
		blockOnce.Do(func() { <-release })
	}
	e.start()
	e.createSpec(spec("db"))
	e.waitStatus("db", "created", func(s api.VolumeStatus) bool { return s.State == api.StateActive })

	e.updateSpec("db", func(s *api.VolumeSpec) { s.Mode = "writethrough" })
	waitFor(t, "the first SetMode to block", func() bool { return inFlight.Load() == 1 })
	e.updateSpec("db", func(s *api.VolumeSpec) { s.Mode = "passthrough" })
	e.updateSpec("db", func(s *api.VolumeSpec) { s.Mode = "writethrough" })
	last := e.updateSpec("db", func(s *api.VolumeSpec) { s.Mode = "passthrough" })
	time.Sleep(50 * time.Millisecond) // let the events arrive while blocked
	close(release)

	e.waitStatus("db", "the last spec", func(s api.VolumeStatus) bool {
		return s.ObservedRevision == last.ModRevision && s.Mode == "passthrough"
	})
	if got := e.eng.Count("setmode"); got != 2 {
		t.Errorf("SetMode calls = %q, want the blocked one and one for the latest spec", e.eng.Calls())
	}
	if maxInFlight.Load() != 1 {
		t.Errorf("%d reconciles of one volume ran at once", maxInFlight.Load())
	}
}

func TestDrainNode(t *testing.T) {
	e := newEnv(t, nil).start()
	e.createSpec(spec("a"))
	e.createSpec(spec("b"))
	for _, n := range []string{"a", "b"} {
		e.waitStatus(n, "created", func(s api.VolumeStatus) bool { return s.Mode == "writeback" })
	}
	e.eng.With("a", func(v *reconciletest.Volume) { v.Dirty = 100 })

	ns, err := e.st.PutNodeSpec(e.ctx(), api.NodeSpec{Name: "n1", Drain: true}, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"a", "b"} {
		st := e.waitStatus(n, "passthrough", func(s api.VolumeStatus) bool { return s.Mode == "passthrough" })
		if st.DirtyBlocks != 0 {
			t.Errorf("%s drained with %d dirty blocks", n, st.DirtyBlocks)
		}
	}
	// Another node's drain changes nothing here.
	if _, err := e.st.PutNodeSpec(e.ctx(), api.NodeSpec{Name: "n2", Drain: false}, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.PutNodeSpec(e.ctx(), api.NodeSpec{Name: "n1", Drain: false}, ns.ModRevision); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"a", "b"} {
		e.waitStatus(n, "writeback again", func(s api.VolumeStatus) bool { return s.Mode == "writeback" })
	}
}

func TestPolicyMode(t *testing.T) {
	e := newEnv(t, nil).start()
	s := spec("db")
	s.Policy = "slow"
	m := e.createSpec(s)
	// The named policy does not exist: the volume is not created.
	st := e.waitStatus("db", "policy error", func(s api.VolumeStatus) bool { return s.ObservedRevision == m.ModRevision && s.Error != "" })
	if !strings.Contains(st.Error, "policy slow does not exist") || e.eng.Count("create") != 0 {
		t.Fatalf("status %+v, calls %q", st, e.eng.Calls())
	}
	if _, err := e.st.PutPolicy(e.ctx(), api.Policy{Name: "slow", Mode: "writethrough"}, 0); err != nil {
		t.Fatal(err)
	}
	e.waitStatus("db", "created in writethrough", func(s api.VolumeStatus) bool { return s.Mode == "writethrough" && s.Error == "" })
	if got := e.eng.Calls(); !slices.Equal(got, []string{"create db pool=fast mode=writethrough"}) {
		t.Errorf("calls = %q", got)
	}
}

func TestScheduledFlush(t *testing.T) {
	e := newEnv(t, nil).start()
	if _, err := e.st.PutPolicy(e.ctx(), api.Policy{Name: "default", FlushInterval: api.Duration(time.Second)}, 0); err != nil {
		t.Fatal(err)
	}
	e.createSpec(spec("db"))
	e.waitStatus("db", "created", func(s api.VolumeStatus) bool { return s.State == api.StateActive })
	e.eng.With("db", func(v *reconciletest.Volume) { v.Dirty = 10 })
	waitFor(t, "the scheduled flush", func() bool { return e.eng.Count("flush db") == 1 })
	e.waitStatus("db", "clean", func(s api.VolumeStatus) bool { return s.DirtyBlocks == 0 })
}

func TestSSDErrorLatched(t *testing.T) {
	e := newEnv(t, nil)
	// Errors from before the daemon watched the SSD are the baseline.
	ssd := api.SSDInventory{Path: "/dev/nvme0n1", Serial: "S1", Pool: "fast", MediaErrors: 2}
	e.ssds.Set(ssd)
	e.start()
	e.createSpec(spec("db"))
	e.waitStatus("db", "created", func(s api.VolumeStatus) bool { return s.Mode == "writeback" && len(s.Alerts) == 0 })

	// A new media error: writethrough and a critical alert.
	ssd.MediaErrors = 3
	e.ssds.Set(ssd)
	e.ctrl.Resync(e.ctx())
	st := e.waitStatus("db", "writethrough after SSD error", func(s api.VolumeStatus) bool { return s.Mode == "writethrough" })
	if !hasAlert(st, "critical ssd_error: /dev/nvme0n1 1 new media errors") {
		t.Errorf("alerts = %q", st.Alerts)
	}

	// Sticky: resyncs keep it there although nothing new happens.
	before := e.reconciles()
	e.ctrl.Resync(e.ctx())
	e.reconciled(before, 1)
	if e.eng.Mode("db") != pool.ModeWritethrough || e.eng.Count("setmode db writeback") != 0 {
		t.Fatalf("latch did not hold: mode %s, calls %q", e.eng.Mode("db"), e.eng.Calls())
	}

	// A restarted daemon restores the latch from the status it wrote.
	e.stop()
	e2 := newEnvAt(t, storeConfigOf(e), e.eng, nil)
	e2.ssds.Set(ssd)
	e2.start()
	before = e2.reconciles()
	e2.ctrl.Resync(e2.ctx())
	e2.reconciled(before, 1)
	if e.eng.Count("setmode db writeback") != 0 {
		t.Fatalf("restart dropped the latch: %q", e.eng.Calls())
	}

	// The operator acknowledges by writing the spec: back to writeback,
	// and the acknowledged media errors no longer count.
	m := e2.updateSpec("db", func(*api.VolumeSpec) {})
	st = e2.waitStatus("db", "acknowledged", func(s api.VolumeStatus) bool {
		return s.ObservedRevision == m.ModRevision && s.Mode == "writeback"
	})
	if len(st.Alerts) != 0 {
		t.Errorf("alerts after acknowledgement = %q", st.Alerts)
	}
	// A SMART critical warning trips it again, and it stays after the
	// warning clears.
	ssd.CriticalWarning = true
	e2.ssds.Set(ssd)
	e2.ctrl.Resync(e2.ctx())
	e2.waitStatus("db", "writethrough after critical warning", func(s api.VolumeStatus) bool {
		return s.Mode == "writethrough" && hasAlert(s, "critical ssd_error: /dev/nvme0n1 SMART critical warning")
	})
	ssd.CriticalWarning = false
	e2.ssds.Set(ssd)
	before = e2.reconciles()
	e2.ctrl.Resync(e2.ctx())
	e2.reconciled(before, 1)
	if e.eng.Mode("db") != pool.ModeWritethrough {
		t.Errorf("latch released without acknowledgement")
	}
}

// storeConfigOf returns the store configuration of e, same prefix.
func storeConfigOf(e *env) store.Config {
	cfg := store.DefaultConfig()
	cfg.Endpoints = endpoints
	cfg.Prefix = e.st.Prefix()
	cfg.RequestTimeout = time.Second
	return cfg
}

func TestWearThreshold(t *testing.T) {
	e := newEnv(t, nil).start()
	if _, err := e.st.PutPolicy(e.ctx(), api.Policy{Name: "default", WearThresholdPercent: 80}, 0); err != nil {
		t.Fatal(err)
	}
	e.createSpec(spec("db"))
	e.waitStatus("db", "created", func(s api.VolumeStatus) bool { return s.Mode == "writeback" })
	wear := 85
	e.ssds.Set(api.SSDInventory{Path: "/dev/nvme0n1", Pool: "fast", WearPercent: &wear},
		api.SSDInventory{Path: "/dev/nvme1n1", Pool: "other", WearPercent: &wear})
	e.ctrl.Resync(e.ctx())
	st := e.waitStatus("db", "writethrough for wear", func(s api.VolumeStatus) bool { return s.Mode == "writethrough" })
	if len(st.Alerts) != 1 || !strings.HasPrefix(st.Alerts[0], "warning ssd_wear:") || strings.Contains(st.Alerts[0], "nvme1n1") {
		t.Errorf("alerts = %q (only the pool's own SSD counts)", st.Alerts)
	}
}

func TestWritecacheErrorReported(t *testing.T) {
	e := newEnv(t, nil).start()
	e.createSpec(spec("db"))
	e.waitStatus("db", "created", func(s api.VolumeStatus) bool { return s.State == api.StateActive })
	e.eng.With("db", func(v *reconciletest.Volume) { v.WCError = -5; v.Dirty = 3 })
	e.ctrl.Resync(e.ctx())
	// The engine cannot drain an errored write tier: the attempt fails,
	// the status says so with the critical alert, and it is retried.
	st := e.waitStatus("db", "error reported", func(s api.VolumeStatus) bool {
		return hasAlert(s, "critical ssd_error: dm-writecache error -5") && strings.Contains(s.Error, "set mode writethrough")
	})
	if st.Mode != "writeback" || st.DirtyBlocks != 3 {
		t.Errorf("status = %+v", st)
	}
	waitFor(t, "retries with backoff", func() bool { return e.eng.Count("setmode db writethrough") >= 3 })
}

func TestDriftRepaired(t *testing.T) {
	e := newEnv(t, nil).start()
	e.createSpec(spec("db"))
	e.waitStatus("db", "created", func(s api.VolumeStatus) bool { return s.State == api.StateActive })
	e.eng.With("db", func(v *reconciletest.Volume) { v.Drift = true })
	e.ctrl.Resync(e.ctx())
	waitFor(t, "repair", func() bool { return e.eng.Count("repair db") == 1 })
	if n := e.metric("tidecache_drift_total", map[string]string{"action": "repaired"}); n != 1 {
		t.Errorf("drift_total{repaired} = %v", n)
	}
}

func TestDriftReported(t *testing.T) {
	e := newEnv(t, func(c *reconcile.Config) { c.DriftPolicy = reconcile.DriftReport }).start()
	e.createSpec(spec("db"))
	e.waitStatus("db", "created", func(s api.VolumeStatus) bool { return s.State == api.StateActive })
	e.eng.With("db", func(v *reconciletest.Volume) { v.Drift = true })
	e.ctrl.Resync(e.ctx())
	st := e.waitStatus("db", "drift", func(s api.VolumeStatus) bool { return s.State == api.StateDrift })
	if !hasAlert(st, "warning drift:") || !strings.Contains(st.Error, "tc-db") {
		t.Errorf("status = %+v", st)
	}
	// Reported, not repaired, and no mode change on a drifted stack.
	e.updateSpec("db", func(s *api.VolumeSpec) { s.Mode = "writethrough" })
	time.Sleep(100 * time.Millisecond)
	if n := e.eng.Count("repair") + e.eng.Count("setmode"); n != 0 {
		t.Errorf("drifted volume changed: %q", e.eng.Calls())
	}
}

func TestOtherNodesAndUnmanaged(t *testing.T) {
	e := newEnv(t, nil)
	e.eng.AddLocal("moved", "fast", pool.ModeWriteback)  // spec names n2
	e.eng.AddLocal("orphan", "fast", pool.ModeWriteback) // no spec at all
	e.createSpec(api.VolumeSpec{Name: "moved", Node: "n2", SizeBytes: 1 << 30})
	e.start()
	e.createSpec(api.VolumeSpec{Name: "theirs", Node: "n2", SizeBytes: 1 << 30})
	e.createSpec(api.VolumeSpec{Name: "unplaced", SizeBytes: 1 << 30})
	// Events arrive in order: once a later spec of ours is done, the
	// others were seen.
	e.createSpec(spec("mine"))
	e.waitStatus("mine", "created", func(s api.VolumeStatus) bool { return s.State == api.StateActive })
	e.ctrl.Resync(e.ctx())
	waitFor(t, "unmanaged report", func() bool { return len(e.ctrl.Unmanaged()) == 2 })
	got := e.ctrl.Unmanaged()
	if !strings.Contains(got["moved"], "names node n2") || !strings.Contains(got["orphan"], "no volume spec") {
		t.Errorf("unmanaged = %q", got)
	}
	if n := e.metric("tidecache_unmanaged_volumes", nil); n != 2 {
		t.Errorf("unmanaged gauge = %v", n)
	}
	if got := e.eng.Calls(); !slices.Equal(got, []string{"create mine pool=fast mode=writeback"}) {
		t.Errorf("engine calls = %q: only this node's spec may be acted on, nothing deleted", got)
	}
}

func TestMalformedSpecSkipped(t *testing.T) {
	e := newEnv(t, nil)
	e.fs.markInvalid("broken")
	e.createSpec(spec("broken"))
	e.createSpec(spec("good"))
	e.start()
	e.waitStatus("good", "created", func(s api.VolumeStatus) bool { return s.State == api.StateActive })
	if e.eng.Exists("broken") {
		t.Error("a malformed spec was acted on")
	}
	if n := e.metric("tidecache_store_invalid_records_total", nil); n < 1 {
		t.Errorf("invalid records = %v", n)
	}

	// A spec of ours that turns malformed is not a deletion: the volume
	// stays as it is.
	e.createSpec(spec("db"))
	e.waitStatus("db", "created", func(s api.VolumeStatus) bool { return s.State == api.StateActive })
	e.fs.markInvalid("db")
	e.updateSpec("db", func(s *api.VolumeSpec) { s.Mode = "passthrough" })
	waitFor(t, "terminal error", func() bool {
		return e.metric("tidecache_reconcile_total", map[string]string{"result": "terminal_error"}) >= 1
	})
	e.ctrl.Resync(e.ctx())
	m := e.updateSpec("good", func(s *api.VolumeSpec) { s.Mode = "writethrough" })
	e.waitStatus("good", "still served", func(s api.VolumeStatus) bool { return s.ObservedRevision == m.ModRevision })
	if !e.eng.Exists("db") || e.eng.Mode("db") != pool.ModeWriteback || e.eng.Count("delete") != 0 {
		t.Errorf("volume with a malformed spec was changed: %q", e.eng.Calls())
	}
}

func TestCompactionRelists(t *testing.T) {
	e := newEnv(t, nil).start()
	e.createSpec(spec("db"))
	e.waitStatus("db", "created", func(s api.VolumeStatus) bool { return s.State == api.StateActive })

	// Events lost to compaction: the controller must not depend on them.
	e.fs.setBlind(true)
	m := e.updateSpec("db", func(s *api.VolumeSpec) { s.Mode = "writethrough" })
	e.createSpec(spec("later"))
	time.Sleep(50 * time.Millisecond)
	if e.eng.Count("setmode") != 0 || e.eng.Exists("later") {
		t.Fatal("the blind watch delivered events")
	}
	lists := e.fs.listCount()
	e.fs.setBlind(false)
	e.fs.compact <- struct{}{}
	e.waitStatus("db", "applied after re-list", func(s api.VolumeStatus) bool {
		return s.ObservedRevision == m.ModRevision && s.Mode == "writethrough"
	})
	e.waitStatus("later", "created after re-list", func(s api.VolumeStatus) bool { return s.State == api.StateActive })
	if e.fs.listCount() <= lists {
		t.Error("no re-list after compaction")
	}
}

func TestSpecDeleted(t *testing.T) {
	e := newEnv(t, nil).start()
	m := e.createSpec(spec("db"))
	busy := e.createSpec(spec("busy"))
	e.waitStatus("db", "created", func(s api.VolumeStatus) bool { return s.State == api.StateActive })
	e.waitStatus("busy", "created", func(s api.VolumeStatus) bool { return s.State == api.StateActive })
	e.eng.With("db", func(v *reconciletest.Volume) { v.Dirty = 10 })
	e.eng.With("busy", func(v *reconciletest.Volume) { v.Open = true })

	if err := e.st.DeleteVolumeSpec(e.ctx(), "db", m.ModRevision); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "db deleted", func() bool { return !e.eng.Exists("db") })
	want := []string{"delete db force=false", "flush db", "delete db force=false"}
	var got []string
	for _, c := range e.eng.Calls() {
		if strings.HasSuffix(c, " db") || strings.Contains(c, " db ") {
			got = append(got, c)
		}
	}
	if !slices.Equal(got[1:], want) {
		t.Errorf("calls for db = %q, want create then %q", got, want)
	}

	// An open volume is not deleted, and not retried in a hot loop.
	if err := e.st.DeleteVolumeSpec(e.ctx(), "busy", busy.ModRevision); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "delete attempt", func() bool { return e.eng.Count("delete busy") == 1 })
	time.Sleep(50 * time.Millisecond)
	if !e.eng.Exists("busy") || e.eng.Count("delete busy") != 1 {
		t.Fatalf("open volume: %q", e.eng.Calls())
	}
	e.eng.With("busy", func(v *reconciletest.Volume) { v.Open = false })
	e.ctrl.Resync(e.ctx())
	waitFor(t, "busy deleted once closed", func() bool { return !e.eng.Exists("busy") })
	if f := e.eng.Count("delete busy force=true") + e.eng.Count("delete db force=true"); f != 0 {
		t.Error("a delete was forced")
	}
}

func TestEtcdOutage(t *testing.T) {
	// Fixed ports: the restarted member must be where the client looks.
	ports := testnet.LoopbackPorts(t, 2)
	ecfg := etcdserver.Config{
		DataDir: filepath.Join(t.TempDir(), "etcd"), Name: "outage",
		ClientURL: fmt.Sprintf("http://127.0.0.1:%d", ports[0]),
		PeerURL:   fmt.Sprintf("http://127.0.0.1:%d", ports[1]),
	}
	srv, err := etcdserver.Start(t.Context(), ecfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	scfg := storeConfig(t, srv.Endpoints())
	scfg.RequestTimeout = 300 * time.Millisecond // notice the outage sooner
	e := newEnvAt(t, scfg, reconciletest.NewEngine("fast"), nil).start()
	e.createSpec(spec("db"))
	e.waitStatus("db", "created", func(s api.VolumeStatus) bool { return s.State == api.StateActive })

	srv.Close()
	waitFor(t, "outage reported", func() bool { return e.etcdUp.Load() == 2 && !e.ctrl.EtcdUp() })
	// The kernel is left as it is: drift and dirty data appear, a resync
	// is asked for, and nothing is done about them while etcd is away.
	calls := e.eng.Calls()
	e.eng.With("db", func(v *reconciletest.Volume) { v.Drift = true; v.Dirty = 5 })
	e.ctrl.Resync(t.Context())
	time.Sleep(300 * time.Millisecond)
	if got := e.eng.Calls(); !slices.Equal(got, calls) {
		t.Fatalf("engine changed during the outage: %q", got[len(calls):])
	}

	srv2, err := etcdserver.Start(t.Context(), ecfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv2.Close)
	waitFor(t, "recovery reported", func() bool { return e.etcdUp.Load() == 1 && e.ctrl.EtcdUp() })
	// Resumed: the re-list finds the drift, and new specs are served.
	waitFor(t, "drift repaired after recovery", func() bool { return e.eng.Count("repair db") == 1 })
	m := e.updateSpec("db", func(s *api.VolumeSpec) { s.Mode = "writethrough" })
	e.waitStatus("db", "mode applied after recovery", func(s api.VolumeStatus) bool {
		return s.ObservedRevision == m.ModRevision && s.Mode == "writethrough"
	})
	// Stop the controller and its client first: etcd waits for open
	// watch streams when it closes.
	e.stop()
	e.st.Close()
}

func TestMetricsLint(t *testing.T) {
	e := newEnv(t, nil).start()
	e.createSpec(spec("db"))
	e.waitStatus("db", "created", func(s api.VolumeStatus) bool { return s.State == api.StateActive })
	problems, err := testutil.GatherAndLint(e.reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("metric %s: %s", p.Metric, p.Text)
	}
	if _, err := reconcile.NewMetrics(e.reg); err == nil {
		t.Error("registering the metrics twice did not fail")
	}
	// The daemon registers its own gauges into the same registry.
	if _, err := metrics.NewDaemonMetrics(e.reg, "test"); err != nil {
		t.Errorf("reconcile and daemon metrics collide: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*reconcile.Config)
		bad  string
	}{
		{"defaults", func(*reconcile.Config) {}, ""},
		{"zero fields take defaults", func(c *reconcile.Config) { *c = reconcile.Config{Node: "n1"} }, ""},
		{"no node", func(c *reconcile.Config) { c.Node = "" }, "Node"},
		{"drift policy", func(c *reconcile.Config) { c.DriftPolicy = "ignore" }, "DriftPolicy"},
		{"backoff", func(c *reconcile.Config) { c.MaxBackoff = time.Millisecond }, "MaxBackoff"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := reconcile.Default("n1")
			tt.mod(&c)
			err := c.Validate()
			if (err == nil) != (tt.bad == "") || (err != nil && !strings.Contains(err.Error(), tt.bad)) {
				t.Errorf("Validate() = %v, want an error naming %q", err, tt.bad)
			}
		})
	}
}

// TestStartWithEtcdDown starts the daemon before etcd: nothing is changed,
// the outage is reported, and the controller comes up with etcd without
// waiting out its backoff.
func TestStartWithEtcdDown(t *testing.T) {
	ports := testnet.LoopbackPorts(t, 2)
	ecfg := etcdserver.Config{
		DataDir: filepath.Join(t.TempDir(), "etcd"), Name: "late",
		ClientURL: fmt.Sprintf("http://127.0.0.1:%d", ports[0]),
		PeerURL:   fmt.Sprintf("http://127.0.0.1:%d", ports[1]),
	}
	scfg := storeConfig(t, []string{ecfg.ClientURL})
	scfg.RequestTimeout = 300 * time.Millisecond
	eng := reconciletest.NewEngine("fast")
	eng.AddLocal("db", "fast", pool.ModeWriteback)
	eng.With("db", func(v *reconciletest.Volume) { v.Drift = true })
	e := newEnvAt(t, scfg, eng, func(c *reconcile.Config) {
		c.MinBackoff, c.MaxBackoff = time.Minute, time.Minute // only the health check can end the wait
	}).start()
	waitFor(t, "outage reported", func() bool { return e.etcdUp.Load() == 2 })
	if calls := eng.Calls(); len(calls) != 0 {
		t.Fatalf("engine changed without a store: %q", calls)
	}

	srv, err := etcdserver.Start(t.Context(), ecfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	waitFor(t, "store reachable", func() bool { return e.ctrl.EtcdUp() })
	m := e.createSpec(spec("new"))
	e.waitStatus("new", "created", func(s api.VolumeStatus) bool { return s.ObservedRevision == m.ModRevision })
	// db has no spec: reported, its drift left alone.
	waitFor(t, "db reported", func() bool { return e.ctrl.Unmanaged()["db"] != "" })
	if eng.Count("repair") != 0 || !eng.Exists("db") {
		t.Errorf("unmanaged volume touched: %q", eng.Calls())
	}
	e.stop()
	e.st.Close()
}

// TestPolicyTuning checks that the watermarks and write-back jobs of the
// effective policy reach the engine as the volume's tuning, follow policy
// changes at run time, and go back to node defaults when the policy drops
// them.
func TestPolicyTuning(t *testing.T) {
	e := newEnv(t, nil).start()
	hi, lo := 30, 20
	meta, err := e.st.PutPolicy(e.ctx(), api.Policy{Name: "default", HighWatermark: &hi, LowWatermark: &lo}, 0)
	if err != nil {
		t.Fatal(err)
	}
	e.createSpec(spec("db"))
	waitFor(t, "policy tuning applied at creation", func() bool { return e.eng.Count("tune db hw=30 lw=20 jobs=-") == 1 })

	hi2, jobs := 60, uint64(32)
	if meta, err = e.st.PutPolicy(e.ctx(), api.Policy{Name: "default", HighWatermark: &hi2, LowWatermark: &lo, WritebackJobs: &jobs}, meta.ModRevision); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "policy change applied", func() bool { return e.eng.Count("tune db hw=60 lw=20 jobs=32") == 1 })

	if _, err = e.st.PutPolicy(e.ctx(), api.Policy{Name: "default"}, meta.ModRevision); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "back to node defaults", func() bool { return e.eng.Count("tune db defaults") == 1 })
	// Converged: a resync does not tune again.
	before := len(e.eng.Calls())
	e.ctrl.Resync(e.ctx())
	if got := e.eng.Count("tune db defaults"); got != 1 {
		t.Fatalf("tuned %d times to defaults, want once (calls since: %q)", got, e.eng.Calls()[before:])
	}
}

// TestPolicyAutocommit checks that the effective policy's autocommit time
// reaches the engine with the volume's tuning, like the watermarks.
func TestPolicyAutocommit(t *testing.T) {
	e := newEnv(t, nil).start()
	ac := uint64(100)
	if _, err := e.st.PutPolicy(e.ctx(), api.Policy{Name: "default", AutocommitTimeMs: &ac}, 0); err != nil {
		t.Fatal(err)
	}
	e.createSpec(spec("db"))
	waitFor(t, "policy autocommit applied at creation", func() bool { return e.eng.Count("tune db hw=- lw=- jobs=- autocommit=100") == 1 })
}

// TestSpecReadBlockSize checks that the read block size of a spec reaches
// the engine's create request, and that a volume whose read block size
// differs from its spec is reported rather than changed.
func TestSpecReadBlockSize(t *testing.T) {
	e := newEnv(t, nil).start()
	s := spec("db")
	s.ReadCacheBytes, s.ReadBlockSize = 256<<20, 256<<10
	e.createSpec(s)
	waitFor(t, "volume created", func() bool { return e.eng.Exists("db") })
	if got := e.eng.Calls(); !slices.Equal(got, []string{"create db pool=fast mode=writeback read-block-size=262144"}) {
		t.Fatalf("engine calls = %q", got)
	}
	e.updateSpec("db", func(s *api.VolumeSpec) { s.ReadBlockSize = 1 << 20 })
	e.waitStatus("db", "read block size mismatch reported", func(st api.VolumeStatus) bool {
		return slices.ContainsFunc(st.Alerts, func(a string) bool {
			return strings.Contains(a, api.AlertSpecMismatch) && strings.Contains(a, "read block size 262144 bytes, spec asks 1048576")
		})
	})
	if n := e.eng.Count("create db"); n != 1 {
		t.Fatalf("volume created %d times, want once (the block size is not changed in place)", n)
	}
}

// TestOneEngineReadPerReconcile: a pass observes the node once (one
// engine.Observe, one scan of the superblocks), for a volume to create,
// one in step and one whose drift is repaired. (A pass that changed the
// volume reads it again with engine.Volume to report it as it now is.)
func TestOneEngineReadPerReconcile(t *testing.T) {
	e := newEnv(t, nil)
	ctrl, err := reconcile.New(e.cfg, e.eng, e.fs) // not run: only the passes below
	if err != nil {
		t.Fatal(err)
	}
	e.createSpec(spec("db"))
	pass := func(what string) {
		t.Helper()
		before := e.eng.Scans()
		if _, err := ctrl.Reconcile(e.ctx(), "db"); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if n := e.eng.Scans() - before; n != 1 {
			t.Errorf("%s: %d engine scans in one pass, want 1", what, n)
		}
	}
	pass("create")
	pass("in step")
	e.eng.With("db", func(v *reconciletest.Volume) { v.Drift = true })
	pass("drift repaired")
	if n := e.eng.Count("repair db"); n != 1 {
		t.Errorf("%d repairs, want 1", n)
	}
}

// TestCreateProtection: a spec that names no protection gets its policy's;
// a spec's own wins; a volume without a write cache gets none asked for.
func TestCreateProtection(t *testing.T) {
	e := newEnv(t, nil).start()
	if _, err := e.st.PutPolicy(e.ctx(), api.Policy{Name: "default", Protect: "local"}, 0); err != nil {
		t.Fatal(err)
	}
	plain := spec("db")
	own := spec("logs")
	own.Protect = "none"
	noCache := spec("scratch")
	noCache.WriteCacheBytes, noCache.Mode = 0, "passthrough"
	for _, s := range []api.VolumeSpec{plain, own, noCache} {
		m := e.createSpec(s)
		e.waitStatus(s.Name, "created", func(st api.VolumeStatus) bool {
			return st.ObservedRevision == m.ModRevision && st.State == api.StateActive
		})
	}
	want := []string{"create db pool=fast mode=writeback protect=local", "create logs pool=fast mode=writeback protect=none", "create scratch pool=fast mode=passthrough"}
	if got := e.eng.Calls(); !slices.Equal(got, want) {
		t.Errorf("engine calls = %q, want %q", got, want)
	}
}

// TestCreatePeerProtection checks the owner's half of --protect peer: the
// volume waits (status creating, saying why, no engine call) until the
// leader has placed the replica and the replica node publishes it
// exported; then it is created with that node's export as its peer leg.
func TestCreatePeerProtection(t *testing.T) {
	e := newEnv(t, nil).start()
	s := spec("ledger")
	s.Protect = "peer"
	e.createSpec(s)
	e.waitStatus("ledger", "waiting for placement", func(st api.VolumeStatus) bool {
		return st.State == api.StateCreating && strings.Contains(st.Error, "waiting for the leader to place the replica")
	})
	e.updateSpec("ledger", func(v *api.VolumeSpec) { v.ReplicaNode = "n2" })
	e.waitStatus("ledger", "waiting for the replica node", func(st api.VolumeStatus) bool {
		return st.State == api.StateCreating && strings.Contains(st.Error, "waiting for replica node n2")
	})
	peer := api.Node{Name: "n2", ReplicaAddress: "10.0.0.2:4420", Replicas: []api.ReplicaInventory{
		{Volume: "ledger", Owner: "n1", Pool: "spare", NQN: "nqn.2026-11.io.tidecache:replica:r1", UUID: "r1", Exported: true},
	}}
	reg, err := e.st.Register(e.ctx(), peer, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close(e.ctx())
	e.updateSpec("ledger", func(v *api.VolumeSpec) { v.ReplicaPool = "spare" }) // a change, so the volume is looked at now
	e.waitStatus("ledger", "created", func(st api.VolumeStatus) bool { return st.State == api.StateActive })
	want := []string{"create ledger pool=fast mode=writeback protect=peer peer=n2@10.0.0.2:4420/nqn.2026-11.io.tidecache:replica:r1"}
	if got := e.eng.Calls(); !slices.Equal(got, want) {
		t.Errorf("engine calls = %q, want %q", got, want)
	}
}

// TestCreateCacheOnPeers checks the owner's half of a node without SSDs:
// a volume with a write cache in its pool (no protection named) waits for
// the leader to place both legs, then for each leg's node to export its
// replica, and is created once with leg 0 and leg 1 on those two nodes;
// its status names both. One that names protection local is refused with
// the engine's reason.
func TestCreateCacheOnPeers(t *testing.T) {
	eng := reconciletest.NewEngine("slow")
	eng.SetOriginOnly("slow")
	e := newEnvAt(t, storeConfig(t, endpoints), eng, nil).start()
	s := spec("ledger")
	s.Pool = "slow"
	e.createSpec(s)
	e.waitStatus("ledger", "waiting for both legs", func(st api.VolumeStatus) bool {
		return st.State == api.StateCreating && strings.Contains(st.Error, "waiting for the leader to place both legs of its write cache on two other nodes")
	})
	e.updateSpec("ledger", func(v *api.VolumeSpec) {
		v.ReplicaNode, v.ReplicaPool, v.ReplicaNode0, v.ReplicaPool0 = "n2", "fast", "n3", "fast"
	})
	e.waitStatus("ledger", "waiting for leg 0's node", func(st api.VolumeStatus) bool {
		return st.State == api.StateCreating && strings.Contains(st.Error, "leg 0: waiting for replica node n3")
	})
	for _, name := range []string{"n3", "n2"} {
		peer := api.Node{Name: name, ReplicaAddress: "10.0.0." + name[1:] + ":4420", Replicas: []api.ReplicaInventory{
			{Volume: "ledger", Owner: "n1", Pool: "fast", NQN: "nqn.2026-11.io.tidecache:replica:r" + name[1:], UUID: "r" + name[1:], Exported: true},
		}}
		reg, err := e.st.Register(e.ctx(), peer, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { reg.Close(e.ctx()) })
		if name == "n3" {
			e.updateSpec("ledger", func(v *api.VolumeSpec) { v.Policy = "" }) // a change, so the volume is looked at now
			e.waitStatus("ledger", "waiting for leg 1's node", func(st api.VolumeStatus) bool {
				return st.State == api.StateCreating && strings.Contains(st.Error, "waiting for replica node n2")
			})
		}
	}
	e.updateSpec("ledger", func(v *api.VolumeSpec) { v.ReplicaPool = "fast" })
	st := e.waitStatus("ledger", "created", func(st api.VolumeStatus) bool { return st.State == api.StateActive })
	if st.PeerNode0 != "n3" || st.PeerNode != "n2" || st.Protection != "peer" {
		t.Errorf("status: protection %q, legs on %q and %q; want peer on n3 and n2", st.Protection, st.PeerNode0, st.PeerNode)
	}
	want := []string{"create ledger pool=slow mode=writeback protect=peer peer0=n3@10.0.0.3:4420/nqn.2026-11.io.tidecache:replica:r3 peer=n2@10.0.0.2:4420/nqn.2026-11.io.tidecache:replica:r2"}
	if got := e.eng.Calls(); !slices.Equal(got, want) {
		t.Errorf("engine calls = %q, want %q", got, want)
	}

	local := spec("logs")
	local.Pool, local.Protect = "slow", "local"
	e.createSpec(local)
	e.waitStatus("logs", "refused", func(st api.VolumeStatus) bool {
		return st.State == api.StateError && strings.Contains(st.Error, `pool "slow" has no SSDs`)
	})
}

// TestMovePeerLeg checks re-protection on the owner: when the spec places
// the replica of an existing peer-protected volume on another node, the
// volume waits (running on, the status saying why) until that node
// exports the replica, then the engine moves leg 1 there, once.
func TestMovePeerLeg(t *testing.T) {
	e := newEnv(t, nil).start()
	register := func(name, addr, nqn string) {
		t.Helper()
		n := api.Node{Name: name, ReplicaAddress: addr + ":4420", Replicas: []api.ReplicaInventory{
			{Volume: "ledger", Owner: "n1", Pool: "spare", NQN: nqn, UUID: "r-" + name, Exported: true},
		}}
		reg, err := e.st.Register(e.ctx(), n, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { reg.Close(e.ctx()) })
	}
	register("n2", "10.0.0.2", "nqn.2026-11.io.tidecache:replica:r2")
	s := spec("ledger")
	s.Protect, s.ReplicaNode, s.ReplicaPool = "peer", "n2", "spare"
	e.createSpec(s)
	e.waitStatus("ledger", "created", func(st api.VolumeStatus) bool { return st.State == api.StateActive })

	// The leader moves the replica to n3, which does not export it yet.
	e.updateSpec("ledger", func(v *api.VolumeSpec) { v.ReplicaNode = "n3" })
	e.waitStatus("ledger", "waiting for the new peer", func(st api.VolumeStatus) bool {
		return st.State == api.StateActive && strings.Contains(st.Error, "re-protecting the write mirror on node n3") &&
			strings.Contains(st.Error, "waiting for replica node n3")
	})
	register("n3", "10.0.0.3", "nqn.2026-11.io.tidecache:replica:r3")
	e.waitStatus("ledger", "moved", func(st api.VolumeStatus) bool { return st.State == api.StateActive && st.Error == "" })
	if _, err := e.ctrl.Reconcile(e.ctx(), "ledger"); err != nil { // a pass on the moved volume changes nothing
		t.Fatal(err)
	}
	want := []string{
		"create ledger pool=fast mode=writeback protect=peer peer=n2@10.0.0.2:4420/nqn.2026-11.io.tidecache:replica:r2",
		"move-peer-leg ledger peer=n3@10.0.0.3:4420/nqn.2026-11.io.tidecache:replica:r3",
	}
	if got := e.eng.Calls(); !slices.Equal(got, want) {
		t.Errorf("engine calls = %q, want %q", got, want)
	}
}

// TestMovePeerLeg0: on a node without SSDs, a spec placing leg 0 on
// another node makes the owner wait for that node's export, then move leg
// 0 there (leg 1 stays), once.
func TestMovePeerLeg0(t *testing.T) {
	eng := reconciletest.NewEngine("slow")
	eng.SetOriginOnly("slow")
	e := newEnvAt(t, storeConfig(t, endpoints), eng, nil).start()
	register := func(name string) {
		t.Helper()
		n := api.Node{Name: name, ReplicaAddress: "10.0.0." + name[1:] + ":4420", Replicas: []api.ReplicaInventory{
			{Volume: "ledger", Owner: "n1", Pool: "fast", NQN: "nqn.2026-11.io.tidecache:replica:r" + name[1:], UUID: "r-" + name, Exported: true},
		}}
		reg, err := e.st.Register(e.ctx(), n, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { reg.Close(e.ctx()) })
	}
	register("n2")
	register("n3")
	s := spec("ledger")
	s.Pool, s.Protect, s.ReplicaNode, s.ReplicaPool, s.ReplicaNode0, s.ReplicaPool0 = "slow", "peer", "n3", "fast", "n2", "fast"
	e.createSpec(s)
	e.waitStatus("ledger", "created", func(st api.VolumeStatus) bool { return st.State == api.StateActive && st.PeerNode0 == "n2" })

	e.updateSpec("ledger", func(v *api.VolumeSpec) { v.ReplicaNode0 = "n4" })
	e.waitStatus("ledger", "waiting for the new leg 0", func(st api.VolumeStatus) bool {
		return st.State == api.StateActive && strings.Contains(st.Error, "re-protecting the write mirror on node n4") &&
			strings.Contains(st.Error, "leg 0: waiting for replica node n4")
	})
	register("n4")
	e.waitStatus("ledger", "moved", func(st api.VolumeStatus) bool {
		return st.State == api.StateActive && st.Error == "" && st.PeerNode0 == "n4" && st.PeerNode == "n3"
	})
	if _, err := e.ctrl.Reconcile(e.ctx(), "ledger"); err != nil { // a pass on the moved volume changes nothing
		t.Fatal(err)
	}
	want := []string{
		"create ledger pool=slow mode=writeback protect=peer peer0=n2@10.0.0.2:4420/nqn.2026-11.io.tidecache:replica:r2 peer=n3@10.0.0.3:4420/nqn.2026-11.io.tidecache:replica:r3",
		"move-peer-leg ledger peer0=n4@10.0.0.4:4420/nqn.2026-11.io.tidecache:replica:r4",
	}
	if got := e.eng.Calls(); !slices.Equal(got, want) {
		t.Errorf("engine calls = %q, want %q", got, want)
	}
}

// TestReplicaHost checks the replica node's half of --protect peer: a spec
// placing its replica on this node makes it keep one for the spec's node
// (allowing that node's host NQN) and export it at once; a spec placing
// it elsewhere drops it once the owner no longer reports this node as its
// peer; a deleted spec drops it. A spec owned by this node never
// keeps a replica here.
func TestReplicaHost(t *testing.T) {
	var kept atomic.Int32
	e := newEnv(t, func(c *reconcile.Config) {
		c.ReplicaKept = func(context.Context) { kept.Add(1) }
	})
	e.cfg.Replicas = e.eng
	e.start()
	waitCalls := func(want ...string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !slices.Equal(e.eng.Calls(), want) {
			if time.Now().After(deadline) {
				t.Fatalf("engine calls = %q, want %q", e.eng.Calls(), want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	s := spec("ledger")
	s.Node, s.Protect, s.ReplicaNode, s.ReplicaPool = "n2", "peer", "n1", "fast"
	e.createSpec(s)
	waitCalls("host-replica ledger owner=n2 host=nqn.2026-11.io.tidecache:node:n2 pool=fast")
	if kept.Load() == 0 {
		t.Error("ReplicaKept not called after the replica was kept")
	}
	// Moved to n3 while the owner's mirror still runs on this copy (its
	// status says so): kept until the owner reports its new peer.
	if err := e.st.PutVolumeStatus(e.ctx(), api.VolumeStatus{Name: "ledger", Node: "n2", Protection: "peer", PeerNode: "n1"}); err != nil {
		t.Fatal(err)
	}
	e.updateSpec("ledger", func(v *api.VolumeSpec) { v.ReplicaNode = "n3" })
	time.Sleep(500 * time.Millisecond)
	if _, err := e.ctrl.Reconcile(e.ctx(), "ledger"); err != nil {
		t.Fatal(err)
	}
	waitCalls("host-replica ledger owner=n2 host=nqn.2026-11.io.tidecache:node:n2 pool=fast")
	if err := e.st.PutVolumeStatus(e.ctx(), api.VolumeStatus{Name: "ledger", Node: "n2", Protection: "peer", PeerNode: "n3"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ctrl.Reconcile(e.ctx(), "ledger"); err != nil {
		t.Fatal(err)
	}
	waitCalls("host-replica ledger owner=n2 host=nqn.2026-11.io.tidecache:node:n2 pool=fast", "drop-replica ledger")

	other := spec("orders")
	other.Node, other.Protect, other.ReplicaNode = "n2", "peer", "n1"
	e.createSpec(other)
	waitCalls("host-replica ledger owner=n2 host=nqn.2026-11.io.tidecache:node:n2 pool=fast", "drop-replica ledger",
		"host-replica orders owner=n2 host=nqn.2026-11.io.tidecache:node:n2 pool=")
	_, m, err := e.st.GetVolumeSpec(e.ctx(), "orders")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.st.DeleteVolumeSpec(e.ctx(), "orders", m.ModRevision); err != nil {
		t.Fatal(err)
	}
	waitCalls("host-replica ledger owner=n2 host=nqn.2026-11.io.tidecache:node:n2 pool=fast", "drop-replica ledger",
		"host-replica orders owner=n2 host=nqn.2026-11.io.tidecache:node:n2 pool=", "drop-replica orders")
}

// TestReplicaHostLeg0: a node named for leg 0 of a write cache on peers
// keeps its replica as the leg 1 node does, and gives it up only once the
// owner reports leg 0 on another node.
func TestReplicaHostLeg0(t *testing.T) {
	e := newEnv(t, nil)
	e.cfg.Replicas = e.eng
	e.start()
	waitCalls := func(want ...string) {
		t.Helper()
		waitFor(t, fmt.Sprintf("engine calls %q", want), func() bool { return slices.Equal(e.eng.Calls(), want) })
	}
	s := spec("ledger")
	s.Node, s.Pool, s.ReplicaNode, s.ReplicaPool, s.ReplicaNode0, s.ReplicaPool0 = "n2", "slow", "n3", "fast", "n1", "fast"
	e.createSpec(s)
	kept := "host-replica ledger owner=n2 host=nqn.2026-11.io.tidecache:node:n2 pool=fast"
	waitCalls(kept)
	if err := e.st.PutVolumeStatus(e.ctx(), api.VolumeStatus{Name: "ledger", Node: "n2", Protection: "peer", PeerNode0: "n1", PeerNode: "n3"}); err != nil {
		t.Fatal(err)
	}
	e.updateSpec("ledger", func(v *api.VolumeSpec) { v.ReplicaNode0 = "n4" })
	if _, err := e.ctrl.Reconcile(e.ctx(), "ledger"); err != nil {
		t.Fatal(err)
	}
	waitCalls(kept) // the owner's leg 0 is still here
	if err := e.st.PutVolumeStatus(e.ctx(), api.VolumeStatus{Name: "ledger", Node: "n2", Protection: "peer", PeerNode0: "n4", PeerNode: "n3"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ctrl.Reconcile(e.ctx(), "ledger"); err != nil {
		t.Fatal(err)
	}
	waitCalls(kept, "drop-replica ledger")
}

// TestReplicaHostRestart checks a replica node that was down while the
// volume was re-protected elsewhere: after its restart it drops the
// replica its disks still keep, since the spec places it on another node,
// and keeps the one still placed on it, and one whose spec is gone (the
// owner may not have flushed: see the runbook).
func TestReplicaHostRestart(t *testing.T) {
	e := newEnv(t, nil)
	e.cfg.Replicas = e.eng
	e.eng.KeepReplica(pool.ReplicaRequest{Volume: "ledger", Owner: "n2", HostNQN: "nqn.2026-11.io.tidecache:node:n2"})
	e.eng.KeepReplica(pool.ReplicaRequest{Volume: "orders", Owner: "n2", HostNQN: "nqn.2026-11.io.tidecache:node:n2"})
	e.eng.KeepReplica(pool.ReplicaRequest{Volume: "gone", Owner: "n2", HostNQN: "nqn.2026-11.io.tidecache:node:n2"})
	moved := spec("ledger")
	moved.Node, moved.Protect, moved.ReplicaNode, moved.ReplicaPool = "n2", "peer", "n3", "fast"
	e.createSpec(moved)
	kept := spec("orders")
	kept.Node, kept.Protect, kept.ReplicaNode, kept.ReplicaPool = "n2", "peer", "n1", "fast"
	e.createSpec(kept)
	e.start()
	deadline := time.Now().Add(10 * time.Second)
	for e.eng.Count("drop-replica") == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := e.ctrl.Reconcile(e.ctx(), "orders"); err != nil {
		t.Fatal(err)
	}
	calls := e.eng.Calls()
	slices.Sort(calls)
	want := []string{"drop-replica ledger", "host-replica orders owner=n2 host=nqn.2026-11.io.tidecache:node:n2 pool=fast"}
	if !slices.Equal(slices.Compact(calls), want) {
		t.Errorf("engine calls = %q, want %q (each at least once)", calls, want)
	}
	if got, _ := e.eng.KeptReplicas(e.ctx()); !slices.Equal(got, []string{"gone", "orders"}) {
		t.Errorf("replicas kept after the restart: %v, want [gone orders]", got)
	}
}

// TestCreateDefaultPeer checks the default protection in a cluster: a spec
// and policy naming none give peer when another live node serving
// replicas has room and is not drained (the volume waits for the leader
// to place it), and leave the choice to the node otherwise.
func TestCreateDefaultPeer(t *testing.T) {
	e := newEnv(t, nil).start()
	// Only a drained node could keep a replica: it does not count.
	drained := api.Node{Name: "n3", ReplicaAddress: "10.0.0.3:4420", Pools: []api.PoolInventory{{Name: "spare", SSDFreeBytes: 1 << 30}}}
	if _, err := e.st.PutNodeSpec(e.ctx(), api.NodeSpec{Name: "n3", Drain: true}, 0); err != nil {
		t.Fatal(err)
	}
	dreg, err := e.st.Register(e.ctx(), drained, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer dreg.Close(e.ctx())
	lone := spec("scratch")
	e.createSpec(lone)
	e.waitStatus("scratch", "created", func(st api.VolumeStatus) bool { return st.State == api.StateActive })

	peer := api.Node{Name: "n2", ReplicaAddress: "10.0.0.2:4420", Pools: []api.PoolInventory{{Name: "spare", SSDFreeBytes: 1 << 30}}}
	reg, err := e.st.Register(e.ctx(), peer, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close(e.ctx())
	e.createSpec(spec("ledger"))
	e.waitStatus("ledger", "waiting for placement", func(st api.VolumeStatus) bool {
		return st.State == api.StateCreating && strings.Contains(st.Error, "waiting for the leader to place the replica")
	})
	peer.Replicas = []api.ReplicaInventory{{Volume: "ledger", Owner: "n1", Pool: "spare", NQN: "nqn.2026-11.io.tidecache:replica:r1", UUID: "r1", Exported: true}}
	if err := reg.Update(e.ctx(), peer); err != nil {
		t.Fatal(err)
	}
	e.updateSpec("ledger", func(v *api.VolumeSpec) { v.ReplicaNode, v.ReplicaPool = "n2", "spare" })
	e.waitStatus("ledger", "created", func(st api.VolumeStatus) bool { return st.State == api.StateActive })
	want := []string{
		"create scratch pool=fast mode=writeback",
		"create ledger pool=fast mode=writeback protect=peer peer=n2@10.0.0.2:4420/nqn.2026-11.io.tidecache:replica:r1",
	}
	if got := e.eng.Calls(); !slices.Equal(got, want) {
		t.Errorf("engine calls = %q, want %q", got, want)
	}
}

// TestMirrorDegradedDrains checks the mirror rule end to end in the
// controller: a write mirror on one leg raises the mirror_degraded alert
// at once and, past the policy's grace, drains the volume to
// writethrough; once the mirror can be built whole again the volume goes
// back to writeback.
func TestMirrorDegradedDrains(t *testing.T) {
	e := newEnv(t, func(c *reconcile.Config) { c.ResyncInterval = 200 * time.Millisecond }).start()
	if _, err := e.st.PutPolicy(e.ctx(), api.Policy{Name: "default", MirrorDegradedGrace: api.Duration(2 * time.Second)}, 0); err != nil {
		t.Fatal(err)
	}
	s := spec("ledger")
	s.Protect = "local"
	e.createSpec(s)
	e.waitStatus("ledger", "created", func(st api.VolumeStatus) bool { return st.State == api.StateActive })
	e.eng.With("ledger", func(v *reconciletest.Volume) {
		v.Info.Protection = pool.ProtectLocal
		v.Info.Mirror = &engine.MirrorStatus{RaidStatus: dm.RaidStatus{Health: []dm.LegHealth{dm.LegInSync, dm.LegDead}}, Copies: 1, Degraded: true}
	})
	e.waitStatus("ledger", "alerted", func(st api.VolumeStatus) bool {
		return st.Mode == "writeback" && slices.ContainsFunc(st.Alerts, func(a string) bool { return strings.Contains(a, "mirror_degraded") })
	})
	deadline := time.Now().Add(20 * time.Second)
	for !slices.Contains(e.eng.Calls(), "setmode ledger writeback") {
		if time.Now().After(deadline) {
			t.Fatalf("engine calls = %q: want a drain to writethrough after the grace, then writeback again", e.eng.Calls())
		}
		time.Sleep(50 * time.Millisecond)
	}
	calls := e.eng.Calls()
	if i := slices.Index(calls, "setmode ledger writethrough"); i < 0 || i > slices.Index(calls, "setmode ledger writeback") {
		t.Fatalf("engine calls = %q: want writethrough, then writeback", calls)
	}
}

// A volume made for a Kubernetes claim carries it in its spec; the node
// running it exports the claim, and drops the series with the spec.
func TestClaimInfo(t *testing.T) {
	e := newEnv(t, nil).start()
	s := spec("pvc-1")
	s.Claim = &api.Claim{Namespace: "shop", Name: "data-mysql-0"}
	m := e.createSpec(s)
	e.createSpec(spec("plain"))
	e.waitStatus("pvc-1", "created", func(s api.VolumeStatus) bool { return s.State == api.StateActive })
	e.waitStatus("plain", "created", func(s api.VolumeStatus) bool { return s.State == api.StateActive })
	claim := map[string]string{"volume": "pvc-1", "namespace": "shop", "persistentvolumeclaim": "data-mysql-0"}
	if n := e.metric("tidecache_volume_claim_info", claim); n != 1 {
		t.Errorf("tidecache_volume_claim_info%v = %v, want 1", claim, n)
	}
	if n := e.metric("tidecache_volume_claim_info", map[string]string{"volume": "plain"}); n != 0 {
		t.Errorf("a volume without a claim has claim info %v", n)
	}
	if err := e.st.DeleteVolumeSpec(e.ctx(), "pvc-1", m.ModRevision); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "pvc-1 deleted", func() bool { return !e.eng.Exists("pvc-1") })
	if n := e.metric("tidecache_volume_claim_info", nil); n != 0 {
		t.Errorf("claim info after the spec was deleted: %v, want no series", n)
	}
}
