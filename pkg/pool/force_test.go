// SPDX-License-Identifier: Apache-2.0

package pool

import (
	"errors"
	"slices"
	"testing"
)

func TestForceWithout(t *testing.T) {
	l := testLayout(t)
	wb := mustAdd(t, l, VolumeRequest{Name: "wb", Size: gib * SectorSize, WriteCache: 128 * mib * SectorSize, Protect: ProtectNone})
	dead := wb.WriteCache.Member
	mustAdd(t, l, VolumeRequest{Name: "mir", Size: gib * SectorSize, WriteCache: 128 * mib * SectorSize, Protect: ProtectLocal})
	mustAdd(t, l, VolumeRequest{Name: "rd", Size: gib * SectorSize, WriteCache: 64 * mib * SectorSize, ReadCache: 64 * mib * SectorSize, Protect: ProtectNone})
	for _, name := range []string{"rd"} {
		if err := l.SetMode(name, ModeWritethrough); err != nil {
			t.Fatal(err)
		}
	}
	before := l.Clone()

	_, err := l.ForceWithout([]string{dead}, nil, now)
	if !errors.Is(err, ErrDirtyCacheLost) {
		t.Fatalf("force without accepting the loss of wb: %v, want ErrDirtyCacheLost", err)
	}
	if l.Generation != before.Generation {
		t.Fatal("a refused force changed the layout")
	}
	if _, err := l.ForceWithout([]string{dead}, []string{"nosuch"}, now); !errors.Is(err, ErrVolumeNotFound) {
		t.Errorf("--accept-data-loss of an unknown volume: %v", err)
	}

	got, err := l.ForceWithout([]string{dead}, []string{"wb"}, now)
	if err != nil {
		t.Fatal(err)
	}
	if l.Generation != before.Generation+1 {
		t.Errorf("generation %d -> %d, want one bump", before.Generation, l.Generation)
	}
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	byName := map[string]ForcedVolume{}
	for _, f := range got {
		byName[f.Name] = f
	}
	v, _ := l.Volume("wb")
	if f := byName["wb"]; !f.DataLoss || v.DataLoss == nil || v.DataLoss.Member != dead || v.DataLoss.Unix != now.Unix() || v.WriteCache != nil || v.Mode != ModePassthrough {
		t.Errorf("wb: report %+v, volume %+v", f, v)
	}
	// The mirrored volume keeps its write cache: one leg survives.
	m, _ := l.Volume("mir")
	if _, listed := byName["mir"]; listed || m.WriteCache == nil || m.WriteMirror == nil || m.Mode != ModeWriteback {
		t.Errorf("mir: report %+v, volume %+v", byName["mir"], m)
	}
	if _, ok := l.Member(dead); !ok {
		t.Errorf("member %s holds a mirror leg: it must stay (missing) so assembly runs the mirror degraded", dead)
	}
	// The writethrough volume's tiers on the dead SSD go, without a loss.
	r, _ := l.Volume("rd")
	rb, _ := before.Volume("rd")
	onDead := rb.ReadCache.Member == dead || rb.WriteCache.Member == dead
	if f, listed := byName["rd"]; listed != onDead || f.DataLoss || (onDead && r.Mode == ModeWritethrough && r.ReadCache == nil) {
		t.Errorf("rd (slices on the dead SSD: %v): report %+v, volume %+v", onDead, f, r)
	}
}

func TestForceWithoutRemovesUnusedMember(t *testing.T) {
	l := testLayout(t)
	v := mustAdd(t, l, VolumeRequest{Name: "pt", Size: gib * SectorSize, WriteCache: 64 * mib * SectorSize, Protect: ProtectNone, Mode: ModePassthrough})
	dead := v.WriteCache.Member
	got, err := l.ForceWithout([]string{dead}, nil, now)
	if err != nil {
		t.Fatalf("passthrough volume (nothing dirty): %v", err)
	}
	if len(got) != 1 || got[0].DataLoss || !slices.Equal(got[0].Dropped, []string{"write cache"}) {
		t.Errorf("report %+v", got)
	}
	if _, ok := l.Member(dead); ok || len(l.Members) != 1 {
		t.Errorf("members %+v: want the dead one gone", l.Members)
	}
	// The last SSD of a pool with an origin may go too: the layout lives
	// on the origin.
	if _, err := l.ForceWithout([]string{l.Members[0].UUID}, nil, now); err != nil || len(l.Members) != 0 {
		t.Errorf("without the last SSD: %v, members %+v", err, l.Members)
	}
}

func TestAddMember(t *testing.T) {
	l := testLayout(t)
	gen := l.Generation
	if err := l.AddMember(Member{UUID: "m3", Path: "/dev/nvme2n1", SizeSectors: 1 * gib}); err != nil {
		t.Fatal(err)
	}
	if len(l.Members) != 3 || l.Generation != gen+1 {
		t.Errorf("members %d, generation %d -> %d", len(l.Members), gen, l.Generation)
	}
	if _, free := l.Free(); free["m3"] != free["m1"] || free["m3"] == 0 {
		t.Errorf("free on the new member: %d sectors, want as much as on the empty m1 (%d)", free["m3"], free["m1"])
	}
	for name, m := range map[string]Member{
		"same uuid": {UUID: "m3", Path: "/dev/nvme3n1", SizeSectors: 1 * gib},
		"same path": {UUID: "m4", Path: "/dev/nvme0n1", SizeSectors: 1 * gib},
		"too small": {UUID: "m5", Path: "/dev/nvme4n1", SizeSectors: 8},
		"pool uuid": {UUID: l.UUID, Path: "/dev/nvme5n1", SizeSectors: 1 * gib},
	} {
		before := l.Generation
		if err := l.AddMember(m); err == nil || l.Generation != before {
			t.Errorf("%s: AddMember = %v, generation %d -> %d; want a refusal that changes nothing", name, err, before, l.Generation)
		}
	}
}
