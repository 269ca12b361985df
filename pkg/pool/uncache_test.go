// SPDX-License-Identifier: Apache-2.0

package pool

import (
	"errors"
	"testing"
)

func TestUncache(t *testing.T) {
	l := testLayout(t)
	v := mustAdd(t, l, VolumeRequest{Name: "db", Size: 1 * gib * SectorSize, WriteCache: 256 * mib * SectorSize,
		ReadCache: 256 * mib * SectorSize, Protect: ProtectLocal, BlockSize: 4096})
	if v.WriteMirror == nil || v.ReadCache == nil {
		t.Fatalf("test volume lacks a mirror or a read tier: %+v", v)
	}
	originFree, membersFree := l.Free()

	if err := l.Uncache("db"); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("Uncache in %s: %v, want a refusal (drain first)", v.Mode, err)
	}
	if err := l.SetMode("db", ModePassthrough); err != nil {
		t.Fatal(err)
	}
	gen := l.Generation
	if err := l.Uncache("db"); err != nil {
		t.Fatalf("Uncache in passthrough: %v", err)
	}
	got, _ := l.Volume("db")
	if got.WriteCache != nil || got.WriteMirror != nil || got.ReadCache != nil || got.ReadMeta != nil || got.ReadBlockSize != 0 {
		t.Errorf("caches left after Uncache: %+v", got)
	}
	if got.Origin != v.Origin || got.Mode != ModePassthrough || l.Generation != gen+1 {
		t.Errorf("after Uncache: origin %v (was %v), mode %s, generation %d (was %d)", got.Origin, v.Origin, got.Mode, l.Generation, gen)
	}
	if err := l.Validate(); err != nil {
		t.Errorf("layout after Uncache: %v", err)
	}
	afterOrigin, afterMembers := l.Free()
	var before, after uint64
	for m := range membersFree {
		before += membersFree[m]
		after += afterMembers[m]
	}
	// The write cache and its mirror, the read cache and its metadata.
	if after <= before || afterOrigin != originFree {
		t.Errorf("free SSD sectors %d -> %d, origin %d -> %d: want the slices freed, the origin kept", before, after, originFree, afterOrigin)
	}
	if err := l.SetMode("db", ModeWriteback); !errors.Is(err, ErrNoWriteCache) {
		t.Errorf("writeback after Uncache: %v, want ErrNoWriteCache", err)
	}
	// Again: nothing to do, no new generation.
	if err := l.Uncache("db"); err != nil || l.Generation != gen+1 {
		t.Errorf("second Uncache: %v, generation %d", err, l.Generation)
	}
	if err := l.Uncache("nosuch"); !errors.Is(err, ErrVolumeNotFound) {
		t.Errorf("Uncache of an unknown volume: %v", err)
	}
}

func TestUncacheRefusesAdopted(t *testing.T) {
	l := testLayout(t)
	a := &Adopted{Path: "/dev/md0", MDUUID: "a:b:c:d", SizeSectors: 1 * gib}
	mustAdd(t, l, VolumeRequest{Name: "adopted", WriteCache: 64 * mib * SectorSize, Adopt: a, Mode: ModePassthrough})
	if err := l.Uncache("adopted"); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("Uncache of an adopted volume: %v, want a refusal", err)
	}
}
