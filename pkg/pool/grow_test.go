// SPDX-License-Identifier: Apache-2.0

package pool

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestGrowVolume(t *testing.T) {
	l := testLayout(t)
	a := mustAdd(t, l, VolumeRequest{Name: "a", Size: gib * SectorSize})
	mustAdd(t, l, VolumeRequest{Name: "b", Size: gib * SectorSize})
	gen := l.Generation
	if err := l.GrowVolume("b", 3*gib*SectorSize); err != nil {
		t.Fatal(err)
	}
	b, _ := l.Volume("b")
	if b.Origin.Length != 3*gib || len(b.OriginTail) != 0 || l.Generation != gen+1 {
		t.Errorf("b after growing: %+v tail %v, generation %d -> %d", b.Origin, b.OriginTail, gen, l.Generation)
	}
	if err := l.GrowVolume("b", 3*gib*SectorSize); err != nil || l.Generation != gen+1 {
		t.Errorf("same size again: %v, generation %d", err, l.Generation)
	}
	if err := l.GrowVolume("b", gib*SectorSize); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("shrink: %v, want a refusal", err)
	}
	if err := l.GrowVolume("b", 100*gib*SectorSize); !errors.Is(err, ErrNoSpace) || !strings.Contains(err.Error(), "free") {
		t.Errorf("past the origin's end: %v, want ErrNoSpace saying what is free", err)
	}
	if got, _ := l.Volume("a"); got.Origin != a.Origin {
		t.Errorf("a moved: %+v", got.Origin)
	}
}

// TestGrowVolumePastNeighbour covers where the new sectors of a volume go
// when the space after it is taken, and that what it had never moves.
func TestGrowVolumePastNeighbour(t *testing.T) {
	const reserved = ReservedSectors
	ext := func(off, length uint64) Extent { return Extent{Offset: off, Length: length} }
	for _, tc := range []struct {
		name string
		// setup creates volumes v0, v1... of the given sizes (sectors) in
		// order, then removes those named in remove.
		sizes  []uint64
		remove []string
		grow   string
		to     uint64 // GiB
		want   []Extent
	}{
		{
			name:  "followed by another: one new extent after it",
			sizes: []uint64{gib, gib}, grow: "v0", to: 2,
			want: []Extent{ext(reserved, gib), ext(reserved+2*gib, gib)},
		},
		{
			name:  "the hole after it first, then one new extent",
			sizes: []uint64{gib, gib, gib}, remove: []string{"v1"}, grow: "v0", to: 3,
			want: []Extent{ext(reserved, 2*gib), ext(reserved+3*gib, gib)},
		},
		{
			name:  "a first fit that holds it all before a larger one",
			sizes: []uint64{gib, gib, 2 * gib, gib, gib}, remove: []string{"v1"}, grow: "v3", to: 2,
			want: []Extent{ext(reserved+4*gib, gib), ext(reserved+gib, gib)},
		},
		{
			name:   "no hole holds it: the largest ones, as few as hold it",
			sizes:  []uint64{gib, gib, gib, gib, gib, 2 * gib, gib, 2*gib - reserved},
			remove: []string{"v1", "v3", "v5"}, grow: "v2", to: 5,
			want: []Extent{ext(reserved+2*gib, 2*gib), ext(reserved+5*gib, 2*gib), ext(reserved+gib, gib)},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := testLayout(t)
			for i, s := range tc.sizes {
				mustAdd(t, l, VolumeRequest{Name: fmt.Sprintf("v%d", i), Size: s * SectorSize})
			}
			for _, name := range tc.remove {
				if err := l.RemoveVolume(name); err != nil {
					t.Fatal(err)
				}
			}
			before, _ := l.Volume(tc.grow)
			had := before.OriginExtents()
			if err := l.GrowVolume(tc.grow, tc.to*gib*SectorSize); err != nil {
				t.Fatal(err)
			}
			v, _ := l.Volume(tc.grow)
			got := v.OriginExtents()
			if v.SizeSectors() != tc.to*gib {
				t.Errorf("size %d sectors, want %d", v.SizeSectors(), tc.to*gib)
			}
			// Every sector it had keeps its place: the old extents are
			// a prefix of the new ones, the last one at most longer.
			for i, e := range had {
				if g := got[i]; g.Offset != e.Offset || g.Length < e.Length || (i < len(had)-1 && g.Length != e.Length) {
					t.Errorf("extent %d moved or shrank: %v, had %v", i, g, e)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("extents %v, want %v", got, tc.want)
			}
			if err := l.Validate(); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestGrowVolumeExtentBound fills the origin with 65 holes of 16 MiB: a
// volume may take 64 extents, not 65.
func TestGrowVolumeExtentBound(t *testing.T) {
	l := testLayout(t)
	const small = 16 * mib
	for i := range 130 {
		mustAdd(t, l, VolumeRequest{Name: fmt.Sprintf("v%d", i), Size: small * SectorSize})
	}
	rest, _ := l.Free()
	mustAdd(t, l, VolumeRequest{Name: "rest", Size: rest * SectorSize})
	for i := 1; i < 130; i += 2 {
		if err := l.RemoveVolume(fmt.Sprintf("v%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	err := l.GrowVolume("v0", (1+65)*small*SectorSize)
	if !errors.Is(err, ErrNoSpace) || !strings.Contains(err.Error(), "65 extents") || !strings.Contains(err.Error(), "fragmented") {
		t.Fatalf("growing into 65 extents: %v, want a refusal naming the fragmentation", err)
	}
	if err := l.GrowVolume("v0", (1+64)*small*SectorSize); err != nil {
		t.Fatalf("growing into 64 extents: %v", err)
	}
	if v, _ := l.Volume("v0"); len(v.OriginExtents()) != MaxOriginExtents {
		t.Errorf("%d extents, want %d", len(v.OriginExtents()), MaxOriginExtents)
	}
}

func TestValidateOriginTail(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(v *Volume)
		want string
	}{
		{"on an SSD", func(v *Volume) { v.OriginTail = []Extent{{Member: "m1", Offset: ReservedSectors, Length: mib}} }, "want the origin"},
		{"over another volume", func(v *Volume) { v.OriginTail = []Extent{{Offset: ReservedSectors, Length: mib}} }, "overlaps"},
		{"beyond the origin", func(v *Volume) { v.OriginTail = []Extent{{Offset: 10 * gib, Length: mib}} }, "beyond the device"},
		{"too many", func(v *Volume) {
			for i := range MaxOriginExtents {
				v.OriginTail = append(v.OriginTail, Extent{Offset: 4*gib + uint64(i)*mib, Length: mib})
			}
		}, "65 origin extents, at most 64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := testLayout(t)
			mustAdd(t, l, VolumeRequest{Name: "a", Size: gib * SectorSize})
			mustAdd(t, l, VolumeRequest{Name: "b", Size: gib * SectorSize})
			b, _ := l.Volume("b")
			tc.edit(b)
			if err := l.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate: %v, want %q", err, tc.want)
			}
		})
	}
}
