// SPDX-License-Identifier: Apache-2.0

package pool

import (
	"errors"
	"slices"
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
		{"leg 0 stale", []int{0}, other, false, "leg 0 missed writes that only the peer leg 1 on node b holds"},
		{"bad leg", nil, RemoteLeg{Node: "c"}, false, "peer leg"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := testLayout(t)
			mustAdd(t, l, VolumeRequest{Name: "ledger", Size: 1 << 30, WriteCache: 256 << 20, Protect: ProtectPeer, Peer: testPeer()})
			l.Volumes[0].WriteMirror.OutOfSync = tc.outOfSync
			gen := l.Generation
			changed, err := l.MovePeerLeg("ledger", 1, tc.leg)
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
	if _, err := testLayout(t).MovePeerLeg("nosuch", 1, other); !errors.Is(err, ErrVolumeNotFound) {
		t.Fatalf("unknown volume: %v", err)
	}
}

// TestMovePeerLeg0: leg 0 of a write cache on peers moves like leg 1,
// never onto leg 1's node, never while leg 1 is the stale one; a volume
// with its leg 0 on the node's SSD has no peer leg 0 to move.
func TestMovePeerLeg0(t *testing.T) {
	d := RemoteLeg{Node: "d", NQN: "nqn.2026-11.io.tidecache:replica:z", HostNQN: "nqn.2026-11.io.tidecache:node:a",
		Addr: "10.0.0.4", Port: 4420, UUID: "0b7e3c52-1d4f-4a6e-9c8b-2f5a7d1e3c90"}
	onB := d
	onB.Node = "b"
	for _, tc := range []struct {
		name      string
		outOfSync []int
		leg       RemoteLeg
		want      string
	}{
		{"to a third node", nil, d, ""},
		{"onto leg 1's node", nil, onB, "both legs of the write mirror are on node b"},
		{"leg 1 stale", []int{1}, d, "leg 1 missed writes that only the peer leg 0 on node c holds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := ssdLessLayout(t)
			mustAdd(t, l, VolumeRequest{Name: "ledger", Size: 1 << 30, WriteCache: 256 << 20, Protect: ProtectPeer, Peer: testPeer(), Peer0: testPeer0()})
			l.Volumes[0].WriteMirror.OutOfSync = tc.outOfSync
			gen := l.Generation
			changed, err := l.MovePeerLeg("ledger", 0, tc.leg)
			m := l.Volumes[0].WriteMirror
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) || m.Remote0.Node != "c" || l.Generation != gen {
					t.Fatalf("MovePeerLeg = %v (leg 0 on %s, generation %d -> %d), want refused saying %q", err, m.Remote0.Node, gen, l.Generation, tc.want)
				}
				return
			}
			if err != nil || !changed || *m.Remote0 != tc.leg || *m.Remote != *testPeer() || !slices.Equal(m.OutOfSync, []int{0}) || l.Generation != gen+1 {
				t.Fatalf("MovePeerLeg = %t, %v: legs %+v and %+v, out of sync %v; want leg 0 on d, out of sync [0]", changed, err, m.Remote0, m.Remote, m.OutOfSync)
			}
		})
	}
	l := testLayout(t)
	mustAdd(t, l, VolumeRequest{Name: "ledger", Size: 1 << 30, WriteCache: 256 << 20, Protect: ProtectPeer, Peer: testPeer()})
	if _, err := l.MovePeerLeg("ledger", 0, d); err == nil || !strings.Contains(err.Error(), "has no peer leg 0") {
		t.Fatalf("moving the local leg 0: %v", err)
	}
}

// testPeer0 is a replica on another node than testPeer's: leg 0 of a
// write cache on peers.
func testPeer0() *RemoteLeg {
	return &RemoteLeg{Node: "c", NQN: "nqn.2026-11.io.tidecache:replica:y", HostNQN: "nqn.2026-11.io.tidecache:node:a",
		Addr: "10.0.0.3", Port: 4420, UUID: "7c0d5e61-93a4-4f0e-8b2d-1e6f3a9c4b22"}
}

// ssdLessLayout returns the pool of a node without SSDs: an origin alone.
func ssdLessLayout(t *testing.T) *Layout {
	t.Helper()
	l, err := New("hdd", "pool-uuid", Origin{Path: "/dev/md/tc-data", SizeSectors: 10 * gib}, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return l
}

func TestAddVolumeOnPeers(t *testing.T) {
	l := ssdLessLayout(t)
	originFree, _ := l.Free()
	v := mustAdd(t, l, VolumeRequest{Name: "ledger", Size: 1 << 30, WriteCache: 256 << 20, Protect: ProtectPeer, Peer: testPeer(), Peer0: testPeer0()})
	if !v.CacheOnPeers() || *v.WriteCache != (Extent{Member: OnPeers, Length: BytesToSectors(256 << 20)}) {
		t.Fatalf("write cache %+v, want %s sectors on peers", v.WriteCache, formatSectors(BytesToSectors(256<<20)))
	}
	m := v.WriteMirror
	if m == nil || m.Remote0 == nil || *m.Remote0 != *testPeer0() || m.Remote == nil || *m.Remote != *testPeer() {
		t.Fatalf("mirror = %+v, want leg 0 on c and leg 1 on b", m)
	}
	if m.Meta != (Extent{}) || m.Leg != (Extent{}) || m.LegMeta != (Extent{}) {
		t.Fatalf("mirror = %+v: want no local slice", m)
	}
	if v.Protection() != ProtectPeer {
		t.Fatalf("Protection = %s, want peer", v.Protection())
	}
	// Only the origin extent is on the pool's devices.
	if got := v.Extents(); len(got) != 1 || got[0].Role != "origin extent" {
		t.Fatalf("Extents = %v, want the origin extent alone", got)
	}
	if after, _ := l.Free(); originFree-after != v.Origin.Length {
		t.Fatalf("origin free %d -> %d, want only the volume's %d sectors taken", originFree, after, v.Origin.Length)
	}
	c := l.Clone()
	cv, _ := c.Volume("ledger")
	cv.WriteMirror.Remote0.Addr = "10.9.9.9"
	if got, _ := l.Volume("ledger"); got.WriteMirror.Remote0.Addr != "10.0.0.3" {
		t.Fatal("Clone shares the remote leg 0")
	}

	refused := []struct {
		name string
		req  VolumeRequest
		err  error
		want string
	}{
		{"both legs on one node", VolumeRequest{Name: "x", Size: 1 << 30, WriteCache: 64 << 20, Protect: ProtectPeer, Peer: testPeer(), Peer0: testPeer()},
			ErrInvalidRequest, "both legs of its write cache would be on node b"},
		{"leg 0 without protection peer", VolumeRequest{Name: "x", Size: 1 << 30, WriteCache: 64 << 20, Peer0: testPeer0()},
			ErrInvalidRequest, "a peer leg 0 is for protection peer only"},
		{"leg 0 without leg 1", VolumeRequest{Name: "x", Size: 1 << 30, WriteCache: 64 << 20, Protect: ProtectPeer, Peer0: testPeer0()},
			ErrInvalidRequest, "it needs a write cache and the replica"},
		{"an adopted device", VolumeRequest{Name: "x", WriteCache: 64 << 20, Protect: ProtectPeer, Peer: testPeer(), Peer0: testPeer0(), Adopt: &mdArray},
			ErrInvalidRequest, "not available for an adopted device"},
		{"a read cache without SSDs", VolumeRequest{Name: "x", Size: 1 << 30, WriteCache: 64 << 20, ReadCache: 64 << 20, Protect: ProtectPeer, Peer: testPeer(), Peer0: testPeer0()},
			ErrInvalidRequest, `pool "hdd" has no SSDs`},
		{"a write cache on this node's SSDs, which it has none of", VolumeRequest{Name: "x", Size: 1 << 30, WriteCache: 64 << 20},
			ErrInvalidRequest, "create it without a write or read cache (--mode passthrough)"},
		{"a local mirror without SSDs", VolumeRequest{Name: "x", Size: 1 << 30, WriteCache: 64 << 20, Protect: ProtectLocal},
			ErrInvalidRequest, "has no SSDs"},
		{"leg 0 on this node's SSDs, which it has none of", VolumeRequest{Name: "x", Size: 1 << 30, WriteCache: 64 << 20, Protect: ProtectPeer, Peer: testPeer()},
			ErrInvalidRequest, "has no SSDs"},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			before := l.Clone()
			_, err := l.AddVolume(tc.req, "uuid-x", now)
			if !errors.Is(err, tc.err) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %v saying %q", err, tc.err, tc.want)
			}
			if l.Generation != before.Generation || len(l.Volumes) != len(before.Volumes) {
				t.Fatal("a refused request changed the layout")
			}
		})
	}
}

func TestValidateOnPeers(t *testing.T) {
	cases := []struct {
		name string
		edit func(v *Volume)
		want string
	}{
		{"both legs on one node", func(v *Volume) { v.WriteMirror.Remote0.Node = "b" }, "both legs of the write mirror are on node b"},
		{"one replica twice", func(v *Volume) { v.WriteMirror.Remote0.UUID = v.WriteMirror.Remote.UUID }, "both peer legs name replica"},
		{"no leg 1", func(v *Volume) { v.WriteMirror.Remote = nil }, "want two peer legs"},
		{"leg 0 incomplete", func(v *Volume) { v.WriteMirror.Remote0.Addr = "" }, "peer leg 0 needs a node, NQNs and a TCP address"},
		{"a local metadata slice", func(v *Volume) {
			v.WriteMirror.Meta = Extent{Member: "m1", Offset: ReservedSectors, Length: MirrorMetaSectors}
		}, "no local slices"},
		{"cache not at offset 0", func(v *Volume) { v.WriteCache.Offset = Alignment }, "want offset 0"},
		{"cache unaligned", func(v *Volume) { v.WriteCache.Length++ }, "non-zero multiple"},
		{"leg 0 on peers, cache on no peer", func(v *Volume) { v.WriteCache.Member = "m1" }, "needs its write cache on peers"},
		{"cache on peers, leg 0 here", func(v *Volume) { v.WriteMirror.Remote0 = nil }, "write cache on peers without a peer leg 0"},
		{"cache on peers without a mirror", func(v *Volume) { v.WriteMirror = nil }, "write cache on peers without a mirror"},
		{"both legs out of sync", func(v *Volume) { v.WriteMirror.OutOfSync = []int{0, 1} }, "want at most one of 0 and 1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := ssdLessLayout(t)
			mustAdd(t, l, VolumeRequest{Name: "ledger", Size: 1 << 30, WriteCache: 256 << 20, Protect: ProtectPeer, Peer: testPeer(), Peer0: testPeer0()})
			if err := l.Validate(); err != nil {
				t.Fatalf("fresh layout: %v", err)
			}
			tc.edit(&l.Volumes[0])
			if err := l.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v, want %q", err, tc.want)
			}
		})
	}
}
