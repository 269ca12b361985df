// SPDX-License-Identifier: Apache-2.0

package pool

import (
	"errors"
	"strings"
	"testing"
)

func testPeer() *RemoteLeg {
	return &RemoteLeg{Node: "b", NQN: "nqn.2026-11.io.tidecache:replica:x", HostNQN: "nqn.2026-11.io.tidecache:node:a",
		Addr: "10.0.0.2", Port: 4420, UUID: "0b7e3e2a-1c55-4b8e-9f39-4f1f0e0f2a11"}
}

func TestAddVolumePeer(t *testing.T) {
	l := testLayout(t)
	v := mustAdd(t, l, VolumeRequest{Name: "ledger", Size: 1 << 30, WriteCache: 256 << 20, Protect: ProtectPeer, Peer: testPeer()})
	m := v.WriteMirror
	if m == nil || m.Remote == nil || *m.Remote != *testPeer() {
		t.Fatalf("mirror = %+v, want the peer leg recorded", m)
	}
	if m.Meta.Member != v.WriteCache.Member || m.Meta.Length != MirrorMetaSectors || m.Leg != (Extent{}) || m.LegMeta != (Extent{}) {
		t.Fatalf("mirror = %+v: want leg 0's metadata beside the write cache and no local leg 1", m)
	}
	if v.Protection() != ProtectPeer {
		t.Fatalf("Protection = %s, want peer", v.Protection())
	}
	// The record is deep-copied: changing the request's leg changes nothing.
	c := l.Clone()
	cv, _ := c.Volume("ledger")
	cv.WriteMirror.Remote.Addr = "10.9.9.9"
	if got, _ := l.Volume("ledger"); got.WriteMirror.Remote.Addr != "10.0.0.2" {
		t.Fatal("Clone shares the remote leg")
	}
	if _, err := l.Clone().AddVolume(VolumeRequest{Name: "other", Size: 1 << 30, WriteCache: 64 << 20, Protect: ProtectPeer}, "uuid-other", now); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("peer without a replica: err = %v, want ErrInvalidRequest", err)
	}
}

func TestValidateRemote(t *testing.T) {
	cases := []struct {
		name string
		edit func(m *Mirror)
		want string
	}{
		{"local leg too", func(m *Mirror) { m.Leg = m.Meta }, "no local leg 1 slices"},
		{"no address", func(m *Mirror) { m.Remote.Addr = "" }, "needs a node, NQNs and a TCP address"},
		{"bad port", func(m *Mirror) { m.Remote.Port = 70000 }, "needs a node, NQNs and a TCP address"},
		{"bad uuid", func(m *Mirror) { m.Remote.UUID = "" }, "peer leg"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := testLayout(t)
			mustAdd(t, l, VolumeRequest{Name: "ledger", Size: 1 << 30, WriteCache: 256 << 20, Protect: ProtectPeer, Peer: testPeer()})
			tc.edit(l.Volumes[0].WriteMirror)
			if err := l.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestAddReplica(t *testing.T) {
	l := testLayout(t)
	_, freeBefore := l.Free()
	req := ReplicaRequest{Volume: "ledger", Owner: "a", HostNQN: "nqn.2026-11.io.tidecache:node:a", WriteCache: 256 << 20}
	r, err := l.AddReplica(req, "replica-uuid")
	if err != nil {
		t.Fatal(err)
	}
	if r.Extent.Length != RemoteLegSectors(BytesToSectors(256<<20)) || r.Extent.Member == "" {
		t.Fatalf("replica extent %s, want %d sectors on a member", r.Extent, RemoteLegSectors(BytesToSectors(256<<20)))
	}
	_, freeAfter := l.Free()
	if freeBefore[r.Extent.Member]-freeAfter[r.Extent.Member] != r.Extent.Length {
		t.Fatalf("free space on %s went %d -> %d, want the replica's %d sectors taken", r.Extent.Member, freeBefore[r.Extent.Member], freeAfter[r.Extent.Member], r.Extent.Length)
	}
	gen := l.Generation
	again, err := l.AddReplica(req, "replica-uuid")
	if err != nil || again != r || l.Generation != gen {
		t.Fatalf("AddReplica again = %+v, %v (generation %d -> %d); want the same replica, no change", again, err, gen, l.Generation)
	}
	other := req
	other.Owner = "c"
	if _, err := l.AddReplica(other, "replica-uuid-2"); !errors.Is(err, ErrVolumeExists) {
		t.Fatalf("replica of the same volume for another owner: err = %v, want ErrVolumeExists", err)
	}
	// A volume's slices never land on the replica's.
	v := mustAdd(t, l, VolumeRequest{Name: "plain", Size: 1 << 30, WriteCache: 64 << 20, Protect: ProtectNone})
	if v.WriteCache.Member == r.Extent.Member && v.WriteCache.Offset < r.Extent.End() && r.Extent.Offset < v.WriteCache.End() {
		t.Fatalf("write cache %s overlaps replica %s", v.WriteCache, r.Extent)
	}
	if err := l.RemoveReplica("ledger"); err != nil {
		t.Fatal(err)
	}
	if _, ok := l.Replica("ledger"); ok || l.Generation != gen+2 {
		t.Fatalf("after RemoveReplica: replica still there or generation %d, want %d", l.Generation, gen+2)
	}
	if err := l.RemoveReplica("ledger"); !errors.Is(err, ErrVolumeNotFound) {
		t.Fatalf("RemoveReplica twice: err = %v, want ErrVolumeNotFound", err)
	}
}

func TestMovePeerLeg(t *testing.T) {
	other := *testPeer()
	other.Node, other.Addr, other.UUID = "c", "10.0.0.3", "5d0c1a8e-3f1b-4c0e-8a53-6f7d2b9e4c10"
	other.NQN = "nqn.2026-11.io.tidecache:replica:y"
	cases := []struct {
		name      string
		outOfSync []int
		leg       RemoteLeg
		changed   bool
		want      string
	}{
		{"to another node", nil, other, true, ""},
		{"peer leg already out of sync", []int{1}, other, true, ""},
		{"same leg", nil, *testPeer(), false, ""},
		{"leg 0 stale", []int{0}, other, false, "leg 0 missed writes"},
		{"bad leg", nil, RemoteLeg{Node: "c"}, false, "peer leg"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := testLayout(t)
			mustAdd(t, l, VolumeRequest{Name: "ledger", Size: 1 << 30, WriteCache: 256 << 20, Protect: ProtectPeer, Peer: testPeer()})
			l.Volumes[0].WriteMirror.OutOfSync = tc.outOfSync
			gen := l.Generation
			changed, err := l.MovePeerLeg("ledger", tc.leg)
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("MovePeerLeg = %v, want %q", err, tc.want)
				}
				if l.Volumes[0].WriteMirror.Remote.Node != "b" || l.Generation != gen {
					t.Fatalf("a refused move changed the layout: %+v", l.Volumes[0].WriteMirror)
				}
				return
			}
			if err != nil || changed != tc.changed {
				t.Fatalf("MovePeerLeg = %t, %v; want %t, nil", changed, err, tc.changed)
			}
			m := l.Volumes[0].WriteMirror
			switch {
			case !changed && (l.Generation != gen || *m.Remote != *testPeer()):
				t.Fatalf("no-op move changed the layout: %+v, generation %d -> %d", m, gen, l.Generation)
			case changed && (*m.Remote != tc.leg || len(m.OutOfSync) != 1 || m.OutOfSync[0] != 1 || l.Generation != gen+1):
				t.Fatalf("after the move: remote %+v, out of sync %v, generation %d -> %d; want the new leg, out of sync [1], one generation more",
					m.Remote, m.OutOfSync, gen, l.Generation)
			}
		})
	}
	if _, err := testLayout(t).MovePeerLeg("nosuch", other); !errors.Is(err, ErrVolumeNotFound) {
		t.Fatalf("unknown volume: %v", err)
	}
}
