// SPDX-License-Identifier: Apache-2.0

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
		{"high alone below the default low", &Tuning{HighWatermark: ip(5)}, ErrInvalidRequest, false},
		{"low alone above the default high", &Tuning{LowWatermark: ip(60)}, ErrInvalidRequest, false},
		{"high alone above the default low, below the kernel's", &Tuning{HighWatermark: ip(30)}, nil, true},
		{"high alone above the default low", &Tuning{HighWatermark: ip(70)}, nil, true},
		{"zero jobs", &Tuning{WritebackJobs: up(0)}, ErrInvalidRequest, false},
		{"add autocommit", &Tuning{HighWatermark: ip(30), LowWatermark: ip(20), WritebackJobs: up(64), AutocommitTimeMs: up(100)}, nil, true},
		{"autocommit changes alone", &Tuning{HighWatermark: ip(30), LowWatermark: ip(20), WritebackJobs: up(64), AutocommitTimeMs: up(50)}, nil, true},
		{"autocommit only", &Tuning{AutocommitTimeMs: up(50)}, nil, true},
		{"autocommit at the minimum", &Tuning{AutocommitTimeMs: up(MinAutocommitTimeMs)}, nil, true},
		{"autocommit at the maximum", &Tuning{AutocommitTimeMs: up(MaxAutocommitTimeMs)}, nil, true},
		{"zero autocommit", &Tuning{AutocommitTimeMs: up(0)}, ErrInvalidRequest, false},
		{"autocommit over a minute", &Tuning{AutocommitTimeMs: up(60001)}, ErrInvalidRequest, false},
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
	_ = l.SetTuning("db", &Tuning{HighWatermark: ip(60), AutocommitTimeMs: up(100)})
	c := l.Clone()
	cv, _ := c.Volume("db")
	*cv.Tuning.HighWatermark = 90
	*cv.Tuning.AutocommitTimeMs = 7
	if v, _ := l.Volume("db"); *v.Tuning.HighWatermark != 60 || *v.Tuning.AutocommitTimeMs != 100 {
		t.Fatal("Clone shares the tuning with the original")
	}
}

func TestTuningValidateMessages(t *testing.T) {
	tests := []struct {
		name string
		t    *Tuning
		want string // "" = valid
	}{
		{"nil", nil, ""},
		{"autocommit 1 ms", &Tuning{AutocommitTimeMs: up(1)}, ""},
		{"autocommit 60 s", &Tuning{AutocommitTimeMs: up(60000)}, ""},
		{"autocommit 0", &Tuning{AutocommitTimeMs: up(0)}, "autocommit time 0 ms: want 1 to 60000 ms"},
		{"autocommit too long", &Tuning{AutocommitTimeMs: up(3600000)}, "autocommit time 3600000 ms: want 1 to 60000 ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.t.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Validate = %v, want nil", err)
			case tt.want != "" && (err == nil || err.Error() != tt.want):
				t.Fatalf("Validate = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestTuningEqualAndEmpty(t *testing.T) {
	tests := []struct {
		name  string
		a, b  *Tuning
		equal bool
	}{
		{"nil and empty", nil, &Tuning{}, true},
		{"autocommit vs nil", &Tuning{AutocommitTimeMs: up(100)}, nil, false},
		{"same autocommit", &Tuning{AutocommitTimeMs: up(100)}, &Tuning{AutocommitTimeMs: up(100)}, true},
		{"other autocommit", &Tuning{AutocommitTimeMs: up(100)}, &Tuning{AutocommitTimeMs: up(200)}, false},
		{"autocommit vs watermark", &Tuning{AutocommitTimeMs: up(100)}, &Tuning{HighWatermark: ip(100)}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.a.Equal(tt.b); got != tt.equal {
				t.Errorf("Equal = %v, want %v", got, tt.equal)
			}
			if got := tt.b.Equal(tt.a); got != tt.equal {
				t.Errorf("Equal (swapped) = %v, want %v", got, tt.equal)
			}
		})
	}
	if (&Tuning{AutocommitTimeMs: up(100)}).Empty() {
		t.Error("a tuning with only an autocommit time is Empty")
	}
}
