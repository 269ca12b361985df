// SPDX-License-Identifier: Apache-2.0

package pool

import (
	"errors"
	"testing"
)

func TestTakeOverReplica(t *testing.T) {
	lun := &Adopted{Path: "/dev/nvme2n1", WWN: "uuid.6f1c2a0e-5b7d-5b1e-9c3a-2d4e6f8a0b1c", SizeSectors: 4 << 21}
	keep := func(t *testing.T) (*Layout, Replica) {
		t.Helper()
		l := testLayout(t)
		r, err := l.AddReplica(ReplicaRequest{Volume: "db", Owner: "a", HostNQN: "nqn.2026-11.io.tidecache:node:a", WriteCache: 256 << 20}, "replica-uuid")
		if err != nil {
			t.Fatal(err)
		}
		return l, r
	}
	ok := TakeOverRequest{Volume: "db", From: "a", Adopt: lun, Mode: ModeWriteback, BlockSize: 4096}
	cases := []struct {
		name string
		req  func(TakeOverRequest) TakeOverRequest
		want error // nil: taken over
	}{
		{"writeback", func(r TakeOverRequest) TakeOverRequest { return r }, nil},
		{"writethrough, default block size", func(r TakeOverRequest) TakeOverRequest { r.Mode, r.BlockSize = ModeWritethrough, 0; return r }, nil},
		{"no replica of that volume", func(r TakeOverRequest) TakeOverRequest { r.Volume = "other"; return r }, ErrVolumeNotFound},
		{"replica of another owner", func(r TakeOverRequest) TakeOverRequest { r.From = "c"; return r }, ErrInvalidRequest},
		{"origin without identity", func(r TakeOverRequest) TakeOverRequest {
			r.Adopt = &Adopted{Path: "/dev/sdx", SizeSectors: 1 << 21}
			return r
		}, ErrInvalidRequest},
		{"bad block size", func(r TakeOverRequest) TakeOverRequest { r.BlockSize = 3000; return r }, ErrInvalidRequest},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l, r := keep(t)
			gen := l.Generation
			req := tc.req(ok)
			v, err := l.TakeOverReplica(req, "volume-uuid", now)
			if tc.want != nil {
				if !errors.Is(err, tc.want) {
					t.Fatalf("err = %v, want %v", err, tc.want)
				}
				if _, kept := l.Replica("db"); !kept || l.Generation != gen {
					t.Fatal("a refused take-over changed the layout")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			// The write cache is exactly the replica's data: the bytes the
			// old owner's write tier cached on, after the leg's metadata.
			want := Extent{Member: r.Extent.Member, Offset: r.Extent.Offset + MirrorMetaSectors, Length: r.Extent.Length - MirrorMetaSectors}
			if v.WriteCache == nil || *v.WriteCache != want {
				t.Fatalf("write cache %v, want the replica's data %v", v.WriteCache, want)
			}
			if v.Adopted != lun || v.Origin.Length != AdoptedSectors(lun.SizeSectors) || v.Mode != req.Mode {
				t.Fatalf("volume %+v: want the shared origin adopted whole in mode %s", v, req.Mode)
			}
			if v.FailedOver == nil || v.FailedOver.From != "a" || v.WriteMirror != nil || v.Protection() != ProtectNone {
				t.Fatalf("volume %+v: want a failed-over record from a and one copy", v)
			}
			if _, kept := l.Replica("db"); kept || l.Generation != gen+1 {
				t.Fatalf("replica still kept, or generation %d, want %d (one change)", l.Generation, gen+1)
			}
			if _, err := l.TakeOverReplica(req, "volume-uuid-2", now); !errors.Is(err, ErrVolumeNotFound) {
				t.Fatalf("second take-over: err = %v, want ErrVolumeNotFound (the replica is gone)", err)
			}
			if err := l.Release("db"); err != nil {
				t.Fatal(err)
			}
			if _, there := l.Volume("db"); there {
				t.Fatal("released volume still in the layout")
			}
		})
	}
}

func TestReleaseNeedsSharedOrigin(t *testing.T) {
	l := testLayout(t)
	mustAdd(t, l, VolumeRequest{Name: "plain", Size: 1 << 30, WriteCache: 64 << 20, Protect: ProtectNone})
	if err := l.Release("plain"); err == nil {
		t.Fatal("Release of a volume on the pool's own origin succeeded: its dirty blocks would be dropped")
	}
	if err := l.Release("none"); !errors.Is(err, ErrVolumeNotFound) {
		t.Fatalf("Release of an unknown volume: %v", err)
	}
}

func TestAddPeerLeg(t *testing.T) {
	l := testLayout(t)
	r, err := l.AddReplica(ReplicaRequest{Volume: "db", Owner: "a", HostNQN: "nqn.2026-11.io.tidecache:node:a", WriteCache: 256 << 20}, "replica-uuid")
	if err != nil {
		t.Fatal(err)
	}
	lun := &Adopted{Path: "/dev/nvme2n1", WWN: "uuid.6f1c2a0e-5b7d-5b1e-9c3a-2d4e6f8a0b1c", SizeSectors: 4 << 21}
	v, err := l.TakeOverReplica(TakeOverRequest{Volume: "db", From: "a", Adopt: lun, Mode: ModeWriteback}, "volume-uuid", now)
	if err != nil {
		t.Fatal(err)
	}
	gen := l.Generation
	changed, err := l.AddPeerLeg("db", *testPeer())
	if err != nil || !changed {
		t.Fatalf("AddPeerLeg = %v, %v", changed, err)
	}
	got, _ := l.Volume("db")
	m := got.WriteMirror
	switch {
	case m == nil || m.Remote == nil || *m.Remote != *testPeer():
		t.Fatalf("mirror %+v: want the peer leg", m)
	case *got.WriteCache != *v.WriteCache:
		t.Fatalf("write cache moved from %s to %s: leg 0 must be the cache as it is", v.WriteCache, got.WriteCache)
	case m.Meta.Member != r.Extent.Member || m.Meta.Length != MirrorMetaSectors:
		t.Fatalf("leg 0 metadata %s: want %s on the write cache's SSD", m.Meta, formatSectors(MirrorMetaSectors))
	case len(m.OutOfSync) != 1 || m.OutOfSync[0] != 1:
		t.Fatalf("out of sync %v: the new leg lacks everything until rebuilt", m.OutOfSync)
	case got.Protection() != ProtectPeer || l.Generation != gen+1:
		t.Fatalf("protection %s, generation %d -> %d", got.Protection(), gen, l.Generation)
	}
	if changed, err := l.AddPeerLeg("db", *testPeer()); err != nil || changed {
		t.Fatalf("adding the same leg again = %v, %v; want no change", changed, err)
	}
	other := *testPeer()
	other.Node = "c"
	if _, err := l.AddPeerLeg("db", other); err == nil {
		t.Fatal("a second peer leg was added to a mirrored write cache")
	}
	if _, err := l.AddPeerLeg("none", other); !errors.Is(err, ErrVolumeNotFound) {
		t.Fatalf("unknown volume: %v", err)
	}
}
