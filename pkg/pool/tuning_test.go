package pool

import (
	"errors"
	"testing"
)

func ip(v int) *int       { return &v }
func up(v uint64) *uint64 { return &v }

func TestSetTuning(t *testing.T) {
	l := testLayout(t)
	mustAdd(t, l, VolumeRequest{Name: "db", Size: 64 << 20, WriteCache: 32 << 20, Mode: ModeWriteback})
	gen := l.Generation
	cases := []struct {
		name    string
		tuning  *Tuning
		wantErr error
		bump    bool
	}{
		{"set watermarks", &Tuning{HighWatermark: ip(30), LowWatermark: ip(20)}, nil, true},
		{"same again is a no-op", &Tuning{HighWatermark: ip(30), LowWatermark: ip(20)}, nil, false},
		{"add writeback jobs", &Tuning{HighWatermark: ip(30), LowWatermark: ip(20), WritebackJobs: up(64)}, nil, true},
		{"low above high", &Tuning{HighWatermark: ip(20), LowWatermark: ip(30)}, ErrInvalidRequest, false},
		{"over 100", &Tuning{HighWatermark: ip(101)}, ErrInvalidRequest, false},
		{"zero jobs", &Tuning{WritebackJobs: up(0)}, ErrInvalidRequest, false},
		{"back to defaults", nil, nil, true},
		{"empty equals nil", &Tuning{}, nil, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := l.Generation
			err := l.SetTuning("db", tc.tuning)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("SetTuning: %v, want %v", err, tc.wantErr)
			}
			if bumped := l.Generation != before; bumped != tc.bump {
				t.Fatalf("generation %d -> %d, bump want %v", before, l.Generation, tc.bump)
			}
			v, _ := l.Volume("db")
			if tc.wantErr == nil && !v.Tuning.Equal(tc.tuning) {
				t.Fatalf("tuning %+v, want %+v", v.Tuning, tc.tuning)
			}
			if err := l.Validate(); err != nil {
				t.Fatalf("layout invalid after SetTuning: %v", err)
			}
		})
	}
	if l.Generation <= gen {
		t.Fatal("generation never moved")
	}
	if err := l.SetTuning("nope", nil); !errors.Is(err, ErrVolumeNotFound) {
		t.Fatalf("unknown volume: %v", err)
	}
	// Clone is deep for tuning too.
	_ = l.SetTuning("db", &Tuning{HighWatermark: ip(40)})
	c := l.Clone()
	cv, _ := c.Volume("db")
	*cv.Tuning.HighWatermark = 90
	if v, _ := l.Volume("db"); *v.Tuning.HighWatermark != 40 {
		t.Fatal("Clone shares the tuning with the original")
	}
}
