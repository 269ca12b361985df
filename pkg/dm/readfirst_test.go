// SPDX-License-Identifier: Apache-2.0

package dm

import "testing"

func TestReadFirstParams(t *testing.T) {
	for _, c := range []struct {
		in   string
		want ReadFirstParams
	}{
		{"253:4 1000 50", ReadFirstParams{Device: "253:4", MaxHoldMs: 1000, IdleMs: 50}},
		{"/dev/mapper/tc-v-origin 0 0", ReadFirstParams{Device: "/dev/mapper/tc-v-origin"}},
		{"8:16 60000 60000", ReadFirstParams{Device: "8:16", MaxHoldMs: 60000, IdleMs: 60000}},
	} {
		got, err := ParseReadFirstParams(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseReadFirstParams(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
			continue
		}
		if got.String() != c.in {
			t.Errorf("String = %q, want %q", got.String(), c.in)
		}
		if err := got.Validate(); err != nil {
			t.Errorf("Validate(%q): %v", c.in, err)
		}
		if tg := got.Target(0, 8); tg != (Target{Start: 0, Length: 8, Type: "readfirst", Params: c.in}) {
			t.Errorf("Target = %+v", tg)
		}
	}
	for in, want := range map[string]string{
		"":                "readfirst params: device: missing",
		"8:16":            "readfirst params: max_hold_ms: missing",
		"8:16 1000":       "readfirst params: idle_ms: missing",
		"8:16 1000 50 1":  `readfirst params: argument "1": unexpected trailing argument`,
		"8:16 -1 50":      `readfirst params: max_hold_ms "-1": invalid syntax`,
		"8:16 1000 fifty": `readfirst params: idle_ms "fifty": invalid syntax`,
	} {
		if _, err := ParseReadFirstParams(in); err == nil || err.Error() != want {
			t.Errorf("%q:\n got  %v\n want %s", in, err, want)
		}
	}
	for _, c := range []struct {
		p    ReadFirstParams
		want string
	}{
		{ReadFirstParams{Device: "a b", MaxHoldMs: 1}, "readfirst params: device"},
		{ReadFirstParams{Device: "8:16", MaxHoldMs: 60001}, "readfirst params: max_hold_ms 60001: above the target's limit of 60000"},
		{ReadFirstParams{Device: "8:16", IdleMs: 1 << 40}, "readfirst params: idle_ms 1099511627776: above the target's limit of 60000"},
	} {
		if err := c.p.Validate(); err == nil || len(err.Error()) < len(c.want) || err.Error()[:len(c.want)] != c.want {
			t.Errorf("Validate(%+v) = %v, want %s", c.p, err, c.want)
		}
	}
}

func TestParseReadFirstStatus(t *testing.T) {
	for _, c := range []struct {
		in      string
		want    ReadFirstStatus
		wantErr string
	}{
		{in: "0 0 0 0 1000 50", want: ReadFirstStatus{MaxHoldMs: 1000, IdleMs: 50}},
		{in: "3 16 2400 14 0 50", want: ReadFirstStatus{ReadsInFlight: 3, HeldNow: 16, HeldTotal: 2400, ReleasedAtMaxHold: 14, IdleMs: 50}},
		{in: "1 2 3 4 5", wantErr: "readfirst status: idle_ms: missing"},
		{in: "1 2 3 4 5 6 7", wantErr: `readfirst status: argument "7": unexpected trailing argument`},
		{in: "a 2 3 4 5 6", wantErr: `readfirst status: reads in flight "a": invalid syntax`},
	} {
		got, err := ParseReadFirstStatus(c.in)
		if c.wantErr != "" {
			if err == nil || err.Error() != c.wantErr {
				t.Errorf("%q: err %v, want %s", c.in, err, c.wantErr)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%q = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
	if got := ReadFirstMaxHoldMessage(0); got != "max_hold_ms 0" {
		t.Errorf("message = %q", got)
	}
}
