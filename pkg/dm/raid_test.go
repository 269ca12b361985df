// SPDX-License-Identifier: Apache-2.0

package dm

import (
	"reflect"
	"strings"
	"testing"
)

func TestRaid1Params(t *testing.T) {
	legs := []RaidLeg{{"/dev/mapper/m0", "/dev/mapper/d0"}, {"/dev/mapper/m1", "/dev/mapper/d1"}}
	tests := []struct {
		name string
		p    Raid1Params
		want string
	}{
		{"two legs", Raid1Params{Legs: legs}, "raid1 1 0 2 /dev/mapper/m0 /dev/mapper/d0 /dev/mapper/m1 /dev/mapper/d1"},
		{"rebuild", Raid1Params{Legs: legs, Rebuild: []int{1}}, "raid1 3 0 rebuild 1 2 /dev/mapper/m0 /dev/mapper/d0 /dev/mapper/m1 /dev/mapper/d1"},
		{"degraded", Raid1Params{Legs: []RaidLeg{legs[0], {MissingLeg, MissingLeg}}}, "raid1 1 0 2 /dev/mapper/m0 /dev/mapper/d0 - -"},
		{"recovery rate", Raid1Params{Legs: legs, Rebuild: []int{1}, MinRecoveryRate: 65536},
			"raid1 5 0 rebuild 1 min_recovery_rate 65536 2 /dev/mapper/m0 /dev/mapper/d0 /dev/mapper/m1 /dev/mapper/d1"},
		{"peer leg write-mostly", Raid1Params{Legs: legs, MinRecoveryRate: 65536, WriteMostly: []int{1}},
			"raid1 5 0 min_recovery_rate 65536 write_mostly 1 2 /dev/mapper/m0 /dev/mapper/d0 /dev/mapper/m1 /dev/mapper/d1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.p.String(); got != tt.want {
				t.Fatalf("String() = %q, want %q", got, tt.want)
			}
			if err := tt.p.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			back, err := ParseRaid1Params(tt.want)
			if err != nil {
				t.Fatalf("parse %q: %v", tt.want, err)
			}
			if !reflect.DeepEqual(back, tt.p) {
				t.Fatalf("round trip = %+v, want %+v", back, tt.p)
			}
		})
	}
}

// TestRaid1ParamsKernelEcho compares what tidecache loads with what the
// kernel prints back (seen on Debian's 6.1 kernel): major:minor devices, a
// region_size the kernel chose, the rebuild instruction gone.
func TestRaid1ParamsKernelEcho(t *testing.T) {
	canon := func(ref string) (string, error) {
		if c, ok := map[string]string{"/dev/mapper/m0": "253:0", "/dev/mapper/d0": "253:1", "/dev/mapper/m1": "253:2", "/dev/mapper/d1": "253:3"}[ref]; ok {
			return c, nil
		}
		return ref, nil
	}
	want := "0 1024 raid raid1 3 0 rebuild 1 2 /dev/mapper/m0 /dev/mapper/d0 /dev/mapper/m1 /dev/mapper/d1"
	for _, tt := range []struct {
		got  string
		same bool
	}{
		{"0 1024 raid raid1 1 0 2 253:0 253:1 253:2 253:3", true},
		{"0 1024 raid raid1 3 0 region_size 8192 2 253:0 253:1 253:2 253:3", true},
		{"0 1024 raid raid1 5 0 min_recovery_rate 65536 region_size 8192 2 253:0 253:1 253:2 253:3", true},
		{"0 1024 raid raid1 7 0 min_recovery_rate 65536 write_mostly 1 region_size 8192 2 253:0 253:1 253:2 253:3", true},
		// md dropped the write-mostly leg (it failed): its slot is -1.
		{"0 1024 raid raid1 5 0 min_recovery_rate 65536 write_mostly -1 2 253:0 253:1 253:2 253:3", true},
		{"0 1024 raid raid1 1 0 2 253:0 253:1 253:2 253:9", false},
		{"0 1024 raid raid1 1 0 2 253:0 253:1 - -", false},
	} {
		w, _ := ParseTable(want)
		g, err := ParseTable(tt.got)
		if err != nil {
			t.Fatal(err)
		}
		same, err := w[0].Equivalent(g[0], canon)
		if err != nil || same != tt.same {
			t.Errorf("Equivalent(%q) = %v, %v; want %v", tt.got, same, err, tt.same)
		}
	}
}

func TestRaid1ParamsErrors(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"raid5_ls 1 64 3 - a - b - c", "want raid1"},
		{"raid1 2 0 2 - a", "missing"},
		{"raid1 1 0 2 m0 d0 m1", "leg 1 data"},
		{"raid1 1 0 1 m0 d0 extra", "trailing"},
	} {
		if _, err := ParseRaid1Params(tt.in); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseRaid1Params(%q) = %v, want an error naming %q", tt.in, err, tt.want)
		}
	}
	for _, p := range []Raid1Params{
		{Legs: []RaidLeg{{"m0", "d0"}}},
		{Legs: []RaidLeg{{"m0", "d0"}, {"-", "d1"}}},
		{Legs: []RaidLeg{{"-", "-"}, {"-", "-"}}},
		{Legs: []RaidLeg{{"m0", "d0"}, {"-", "-"}}, Rebuild: []int{1}},
		{Legs: []RaidLeg{{"m0", "d0"}, {"-", "-"}}, WriteMostly: []int{1}},
		{Legs: []RaidLeg{{"m0", "d0"}, {"-", "-"}}, WriteMostly: []int{0}},
		{Legs: []RaidLeg{{"m0", "d0"}, {"m1", "d1"}}, WriteMostly: []int{0, 1}},
		{Legs: []RaidLeg{{"m0", "d0"}, {"m1", "d1"}}, WriteMostly: []int{1, 1}},
		{Legs: []RaidLeg{{"m0", "d0"}, {"m1", "d1"}}, WriteMostly: []int{2}},
	} {
		if err := p.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil, want an error", p)
		}
	}
}

// TestRaid1WithoutLeg: a leg taken out of the table takes its rebuild
// and write_mostly with it (the kernel would refuse either on "- -"), and
// the parameters it came from are left as they were.
func TestRaid1WithoutLeg(t *testing.T) {
	p := Raid1Params{Legs: []RaidLeg{{"m0", "d0"}, {"m1", "d1"}}, Rebuild: []int{1}, MinRecoveryRate: 64, WriteMostly: []int{1}}
	got := p.WithoutLeg(1)
	want := Raid1Params{Legs: []RaidLeg{{"m0", "d0"}, {MissingLeg, MissingLeg}}, Rebuild: []int{}, MinRecoveryRate: 64, WriteMostly: []int{}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("WithoutLeg(1) = %+v, want %+v", got, want)
	}
	if err := got.Validate(); err != nil {
		t.Fatalf("WithoutLeg(1).Validate: %v", err)
	}
	if p.Legs[1].Data != "d1" || len(p.WriteMostly) != 1 || len(p.Rebuild) != 1 {
		t.Fatalf("WithoutLeg changed its receiver: %+v", p)
	}
	// Leg 1 alone is read from: write_mostly on it would be refused.
	if got := p.WithoutLeg(0); got.WriteMostly != nil || got.Legs[0].Data != MissingLeg || got.Validate() != nil {
		t.Fatalf("WithoutLeg(0) = %+v (%v), want leg 0 missing and no write_mostly", got, got.Validate())
	}
}

func TestParseRaidStatus(t *testing.T) {
	tests := []struct {
		in          string
		health      string
		copies      int
		action      string
		done, total uint64
	}{
		{"raid1 2 AA 524288/524288 idle 0 0 -", "AA", 2, "idle", 524288, 524288},
		{"raid1 2 aa 32896/524288 resync 0 0 -", "aa", 2, "resync", 32896, 524288},
		{"raid1 2 AD 524288/524288 idle 0 0 -", "AD", 1, "idle", 524288, 524288},
		{"raid1 2 Aa 1024/524288 recover 0", "Aa", 1, "recover", 1024, 524288},
		{"raid1 2 A- 524288/524288 idle 0 0 -", "A-", 1, "idle", 524288, 524288},
	}
	for _, tt := range tests {
		s, err := ParseRaidStatus(tt.in)
		if err != nil {
			t.Fatalf("ParseRaidStatus(%q): %v", tt.in, err)
		}
		if s.HealthString() != tt.health || s.Copies() != tt.copies || s.SyncAction != tt.action || s.SyncDone != tt.done || s.SyncTotal != tt.total {
			t.Errorf("ParseRaidStatus(%q) = %+v (copies %d)", tt.in, s, s.Copies())
		}
	}
	for _, bad := range []string{"raid1 2 A 1/1 idle 0", "raid1 2 AX 1/1 idle 0", "raid1 2 AA 1 idle 0", "raid1 2 AA 1/1 idle"} {
		if _, err := ParseRaidStatus(bad); err == nil {
			t.Errorf("ParseRaidStatus(%q) = nil error", bad)
		}
	}
}
