// SPDX-License-Identifier: Apache-2.0

package pool

import (
	"errors"
	"testing"
)

func TestMoveOffAndRemoveMember(t *testing.T) {
	l := testLayout(t)
	v := mustAdd(t, l, VolumeRequest{Name: "db", Size: gib * SectorSize, WriteCache: 128 * mib * SectorSize,
		ReadCache: 128 * mib * SectorSize, Protect: ProtectNone})
	from := v.WriteCache.Member
	if err := l.RemoveMember(from); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("RemoveMember of a member with slices: %v", err)
	}
	if err := l.MoveOff("db", from); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("MoveOff in writeback: %v, want drain first", err)
	}
	if err := l.SetMode("db", ModePassthrough); err != nil {
		t.Fatal(err)
	}
	gen := l.Generation
	if err := l.MoveOff("db", from); err != nil {
		t.Fatal(err)
	}
	got, _ := l.Volume("db")
	for name, x := range map[string]*Extent{"write cache": got.WriteCache, "read cache": got.ReadCache, "read meta": got.ReadMeta} {
		if x == nil || x.Member == from {
			t.Errorf("%s after MoveOff: %+v, want it on the other SSD", name, x)
		}
	}
	if got.WriteCache.Length != v.WriteCache.Length || got.ReadCache.Length != v.ReadCache.Length || l.Generation != gen+1 {
		t.Errorf("sizes %d/%d (were %d/%d), generation %d -> %d", got.WriteCache.Length, got.ReadCache.Length, v.WriteCache.Length, v.ReadCache.Length, gen, l.Generation)
	}
	if err := l.MoveOff("db", from); err != nil || l.Generation != gen+1 {
		t.Errorf("second MoveOff: %v, generation %d", err, l.Generation)
	}
	if err := l.RemoveMember(from); err != nil {
		t.Fatal(err)
	}
	if _, ok := l.Member(from); ok || len(l.Members) != 1 {
		t.Errorf("members after RemoveMember: %+v", l.Members)
	}
	// No room left for a second move.
	l2 := testLayout(t)
	big := mustAdd(t, l2, VolumeRequest{Name: "a", Size: gib * SectorSize, WriteCache: 900 * mib * SectorSize, Protect: ProtectNone, Mode: ModePassthrough})
	mustAdd(t, l2, VolumeRequest{Name: "b", Size: gib * SectorSize, WriteCache: 900 * mib * SectorSize, Protect: ProtectNone})
	if err := l2.MoveOff("a", big.WriteCache.Member); !errors.Is(err, ErrNoSpace) {
		t.Errorf("MoveOff without room: %v, want ErrNoSpace", err)
	}
}

func TestMoveOffMirror(t *testing.T) {
	l := testLayout(t)
	if err := l.AddMember(Member{UUID: "m3", Path: "/dev/nvme2n1", SizeSectors: 1 * gib}); err != nil {
		t.Fatal(err)
	}
	v := mustAdd(t, l, VolumeRequest{Name: "m", Size: gib * SectorSize, WriteCache: 64 * mib * SectorSize, Protect: ProtectLocal, Mode: ModePassthrough})
	from := v.WriteMirror.Leg.Member
	if err := l.MoveOff("m", from); err != nil {
		t.Fatal(err)
	}
	got, _ := l.Volume("m")
	legs := []string{got.WriteCache.Member, got.WriteMirror.Meta.Member, got.WriteMirror.Leg.Member, got.WriteMirror.LegMeta.Member}
	for _, leg := range legs {
		if leg == from {
			t.Errorf("a slice of the mirror is still on %s: %v", from, legs)
		}
	}
	if got.WriteCache.Member == got.WriteMirror.Leg.Member {
		t.Errorf("both legs on %s", got.WriteCache.Member)
	}
	// Two SSDs left after removing one: no room for a mirror.
	two := testLayout(t)
	w := mustAdd(t, two, VolumeRequest{Name: "m", Size: gib * SectorSize, WriteCache: 64 * mib * SectorSize, Protect: ProtectLocal, Mode: ModePassthrough})
	if err := two.MoveOff("m", w.WriteCache.Member); !errors.Is(err, ErrNoSpace) {
		t.Errorf("MoveOff of a mirror in a pool of two SSDs: %v, want ErrNoSpace", err)
	}
}
