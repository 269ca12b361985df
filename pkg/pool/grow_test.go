// SPDX-License-Identifier: Apache-2.0

package pool

import (
	"errors"
	"testing"
)

func TestGrowVolume(t *testing.T) {
	l := testLayout(t)
	a := mustAdd(t, l, VolumeRequest{Name: "a", Size: gib * SectorSize})
	mustAdd(t, l, VolumeRequest{Name: "b", Size: gib * SectorSize})
	if err := l.GrowVolume("a", 2*gib*SectorSize); !errors.Is(err, ErrNoSpace) {
		t.Errorf("growing a volume followed by another: %v, want ErrNoSpace", err)
	}
	gen := l.Generation
	if err := l.GrowVolume("b", 3*gib*SectorSize); err != nil {
		t.Fatal(err)
	}
	b, _ := l.Volume("b")
	if b.Origin.Length != 3*gib || l.Generation != gen+1 {
		t.Errorf("b after growing: %+v, generation %d -> %d", b.Origin, gen, l.Generation)
	}
	if err := l.GrowVolume("b", 3*gib*SectorSize); err != nil || l.Generation != gen+1 {
		t.Errorf("same size again: %v, generation %d", err, l.Generation)
	}
	if err := l.GrowVolume("b", gib*SectorSize); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("shrink: %v, want a refusal", err)
	}
	if err := l.GrowVolume("b", 100*gib*SectorSize); !errors.Is(err, ErrNoSpace) {
		t.Errorf("past the origin's end: %v, want ErrNoSpace", err)
	}
	if got, _ := l.Volume("a"); got.Origin != a.Origin {
		t.Errorf("a moved: %+v", got.Origin)
	}
}
