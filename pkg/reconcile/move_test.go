// SPDX-License-Identifier: Apache-2.0

package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/dm"
	"github.com/tidecache/tidecache/pkg/engine"
	"github.com/tidecache/tidecache/pkg/nvmeof"
	"github.com/tidecache/tidecache/pkg/pool"
	"github.com/tidecache/tidecache/pkg/reconcile"
	"github.com/tidecache/tidecache/pkg/reconcile/reconciletest"
)

// movingOrigins is the shared-origin side of the fake engine for the
// planned move: the origin always attaches; StopForMove fails with the
// queued errors first, then marks the volume stopped; ReleaseVolume
// drops it. Everything else a move must not do fails the test.
type movingOrigins struct {
	t   *testing.T
	eng *reconciletest.Engine

	mu       sync.Mutex
	stopErrs []error
	calls    []string
}

func (m *movingOrigins) record(format string, a ...any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls = append(m.calls, fmt.Sprintf(format, a...))
}

func (m *movingOrigins) Calls() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.calls)
}

func (m *movingOrigins) AttachOrigin(context.Context, string, nvmeof.Remote) (string, error) {
	return "/dev/nvme9n1", nil
}
func (m *movingOrigins) FindOrigin(context.Context, string) (string, error) {
	return "/dev/nvme9n1", nil
}
func (m *movingOrigins) AdoptVolume(context.Context, engine.AdoptRequest) (engine.VolumeInfo, error) {
	m.t.Error("a move adopted a volume")
	return engine.VolumeInfo{}, errors.New("not in this test")
}
func (m *movingOrigins) TakeOver(context.Context, engine.TakeOverRequest) (engine.VolumeInfo, error) {
	m.t.Error("the old owner took a volume over")
	return engine.VolumeInfo{}, errors.New("not in this test")
}
func (m *movingOrigins) AddPeerLeg(context.Context, string, pool.RemoteLeg) error {
	m.t.Error("a move added a peer leg")
	return errors.New("not in this test")
}

func (m *movingOrigins) StopForMove(_ context.Context, name, to string) error {
	m.mu.Lock()
	var err error
	if len(m.stopErrs) > 0 {
		err, m.stopErrs = m.stopErrs[0], m.stopErrs[1:]
	}
	m.mu.Unlock()
	m.record("stop %s for %s: %v", name, to, err)
	if err == nil {
		m.eng.With(name, func(v *reconciletest.Volume) { v.Info.State, v.Info.Mirror = api.StateInactive, nil })
	}
	return err
}

func (m *movingOrigins) ReleaseVolume(ctx context.Context, name string) error {
	m.record("release %s", name)
	if !m.eng.Exists(name) {
		return fmt.Errorf("volume %s: %w", name, engine.ErrVolumeNotFound)
	}
	return m.eng.DeleteVolume(ctx, name, true)
}

// newMoveEnv is node n1 running db, a volume on san's lun0 mirrored on
// n2 (both legs in sync), whose spec asks for a move to n2.
func newMoveEnv(t *testing.T) (*env, *movingOrigins) {
	t.Helper()
	origins := &movingOrigins{t: t}
	e := newEnv(t, func(c *reconcile.Config) { c.SharedOrigins = origins })
	origins.eng = e.eng
	for _, n := range []api.Node{
		{Name: "san", ReplicaAddress: "10.0.0.9:4420", Exports: []api.ExportInventory{{Name: "lun0", UUID: "4e0b5c7e-0000-5000-8000-000000000001", Hosts: []string{"n1", "n2"}}}},
		{Name: "n2", ReplicaAddress: "10.0.0.2:4420"},
	} {
		reg, err := e.st.Register(e.ctx(), n, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { reg.Close(context.Background()) })
	}
	e.eng.AddLocal("db", "fast", pool.ModeWriteback)
	e.eng.With("db", func(v *reconciletest.Volume) {
		v.Dirty = 500
		v.Info.Protection, v.Info.PeerNode, v.Info.CanFailOver = pool.ProtectPeer, "n2", true
		v.Info.Mirror = &engine.MirrorStatus{RaidStatus: dm.RaidStatus{Type: "raid1", Health: []dm.LegHealth{dm.LegInSync, dm.LegInSync}, SyncAction: "idle"}, Copies: 2}
	})
	s := api.VolumeSpec{Name: "db", Node: "n1", Pool: "fast", WriteCacheBytes: 64 << 20, Protect: "peer",
		ReplicaNode: "n2", ReplicaPool: "fast", MoveTo: "n2", SharedOrigin: &api.SharedOrigin{Node: "san", Export: "lun0"}}
	e.createSpec(s)
	return e, origins
}

// TestMoveHandsOver: the owner waits while the device is open (saying so
// in the status), then stops the volume and hands the spec to the
// replica's node with itself as movedFrom, and drops its own copy
// without a flush or a mode change: nothing was written back.
func TestMoveHandsOver(t *testing.T) {
	e, origins := newMoveEnv(t)
	open := fmt.Errorf("volume db: %w: /dev/mapper/tc-db is open 1 time(s)", engine.ErrInUse)
	origins.stopErrs = []error{open}
	e.start()

	waitFor(t, "db handed over to n2", func() bool {
		s, _, err := e.st.GetVolumeSpec(e.ctx(), "db")
		return err == nil && s.Node == "n2"
	})
	s, _, err := e.st.GetVolumeSpec(e.ctx(), "db")
	if err != nil {
		t.Fatal(err)
	}
	if s.MovedFrom != "n1" || s.MoveTo != "" || s.ReplicaNode != "" || s.Pool != "fast" || s.FailedOverFrom != "" {
		t.Fatalf("spec after the handover: %+v; want node n2, pool fast, movedFrom n1, no moveTo, no replica node", s)
	}
	waitFor(t, "n1's copy of db dropped", func() bool { return !e.eng.Exists("db") })
	// Later changes of the spec, which keeps movedFrom n1 (here n2's
	// leader re-protecting db on n1), bring passes here that leave the
	// engine alone: the copy is gone, and the release would take the
	// node's lock to find that out every time.
	for _, replica := range []string{"n1", "n3", "n1"} {
		e.updateSpec("db", func(s *api.VolumeSpec) { s.ReplicaNode, s.ReplicaPool = replica, "fast" })
		time.Sleep(100 * time.Millisecond)
	}
	want := []string{"stop db for n2: " + open.Error(), "stop db for n2: <nil>", "release db"}
	if got := origins.Calls(); !slices.Equal(got, want) {
		t.Fatalf("shared-origin calls %q, want %q", got, want)
	}
	for _, c := range e.eng.Calls() {
		if strings.HasPrefix(c, "flush") || strings.HasPrefix(c, "setmode") || strings.HasPrefix(c, "repair") {
			t.Errorf("the move called %q: it must hand the cache over as it is", c)
		}
	}
}

// TestMoveRefusedWhenReplicaOutdated: when the owner recorded the replica
// outdated (the peer missed writes), the handover's transaction fails
// even though the volume was stopped: the spec stays on the owner, the
// move is called off, and the owner keeps its copy. (The status says why
// until the next pass, which the spec's change starts at once: too
// briefly to be waited for here.)
func TestMoveRefusedWhenReplicaOutdated(t *testing.T) {
	e, origins := newMoveEnv(t)
	_, meta, err := e.st.GetVolumeSpec(e.ctx(), "db")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.st.MarkReplicaOutdated(e.ctx(), api.ReplicaOutdated{Volume: "db", Owner: "n1", ReplicaNode: "n2", Since: time.Now().UTC()}, meta.ModRevision); err != nil {
		t.Fatal(err)
	}
	e.start()
	waitFor(t, "the move called off", func() bool {
		s, _, err := e.st.GetVolumeSpec(e.ctx(), "db")
		return err == nil && s.MoveTo == ""
	})
	s, _, err := e.st.GetVolumeSpec(e.ctx(), "db")
	if err != nil || s.Node != "n1" || s.MoveTo != "" || s.MovedFrom != "" {
		t.Fatalf("spec after the refusal: %+v (%v); want it on n1 with the move called off", s, err)
	}
	// The spec keeps why, for tidectl volume move --wait and the CSI
	// attacher: the status says it only until the next pass.
	if c := s.MoveCalledOff; c == nil || c.To != "n2" || !strings.Contains(c.Why, "recorded the replica there outdated") {
		t.Fatalf("spec's record of the called-off move: %+v, want one for n2 saying the replica was outdated", c)
	}
	if !e.eng.Exists("db") {
		t.Fatal("the owner dropped its copy of a volume it kept")
	}
	if got := origins.Calls(); slices.Contains(got, "release db") || !slices.Contains(got, "stop db for n2: <nil>") {
		t.Fatalf("shared-origin calls %q: want the stop, and no release of a volume the owner keeps", got)
	}
}

// takingOrigins is movingOrigins on the node a volume comes to: TakeOver
// records what it was asked, then runs the volume on its replica.
type takingOrigins struct {
	*movingOrigins
	took chan engine.TakeOverRequest
}

func (o *takingOrigins) TakeOver(ctx context.Context, req engine.TakeOverRequest) (engine.VolumeInfo, error) {
	select {
	case o.took <- req:
	default:
	}
	o.eng.AddLocal(req.Volume, "fast", req.Mode)
	o.eng.With(req.Volume, func(v *reconciletest.Volume) {
		v.Info.Protection = pool.ProtectNone
		if req.Planned {
			v.Info.MovedFrom = req.From
		} else {
			v.Info.FailedOverFrom = req.From
		}
	})
	return o.eng.Volume(ctx, req.Volume)
}

// TestTakeOverSaysPlanned: the node a volume comes to takes it over from
// its replica in both cases, and tells the engine which one it is, so
// that the layout, status, metrics and alerts say "moved" for a planned
// move and "failed over" only when its old node was fenced.
func TestTakeOverSaysPlanned(t *testing.T) {
	for _, tc := range []struct {
		name   string
		edit   func(*api.VolumeSpec)
		detail string
	}{
		{"planned move", func(s *api.VolumeSpec) { s.MovedFrom = "n0" }, "moved from node n0"},
		{"failover", func(s *api.VolumeSpec) { s.FailedOverFrom = "n0" }, "failed over from node n0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			origins := &takingOrigins{movingOrigins: &movingOrigins{t: t}, took: make(chan engine.TakeOverRequest, 1)}
			e := newEnv(t, func(c *reconcile.Config) { c.SharedOrigins = origins })
			origins.eng = e.eng
			reg, err := e.st.Register(e.ctx(), api.Node{Name: "san", ReplicaAddress: "10.0.0.9:4420",
				Exports: []api.ExportInventory{{Name: "lun0", UUID: "4e0b5c7e-0000-5000-8000-000000000001", Hosts: []string{"n0", "n1"}}}}, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { reg.Close(context.Background()) })
			s := api.VolumeSpec{Name: "db", Node: "n1", Pool: "fast", WriteCacheBytes: 64 << 20, Protect: "peer",
				SharedOrigin: &api.SharedOrigin{Node: "san", Export: "lun0"}}
			tc.edit(&s)
			e.createSpec(s)
			e.start()
			var req engine.TakeOverRequest
			select {
			case req = <-origins.took:
			case <-time.After(20 * time.Second):
				t.Fatal("db was never taken over")
			}
			if want := tc.name == "planned move"; req.From != "n0" || req.Planned != want {
				t.Fatalf("take-over request %+v, want from n0, planned %t", req, want)
			}
			waitFor(t, "a status that says "+tc.detail, func() bool {
				st, _, err := e.st.GetVolumeStatus(e.ctx(), "db")
				return err == nil && strings.Contains(strings.Join(st.Alerts, "; "), tc.detail)
			})
		})
	}
}
