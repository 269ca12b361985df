// SPDX-License-Identifier: Apache-2.0

package dm

import "testing"

func TestErrHoldParams(t *testing.T) {
	for _, c := range []struct {
		in   string
		want ErrHoldParams
	}{
		{"259:3 0", ErrHoldParams{Device: "259:3"}},
		{"/dev/nvme1n1 16384", ErrHoldParams{Device: "/dev/nvme1n1", Offset: 16384}},
	} {
		got, err := ParseErrHoldParams(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseErrHoldParams(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
			continue
		}
		if got.String() != c.in {
			t.Errorf("String = %q, want %q", got.String(), c.in)
		}
		if err := got.Validate(); err != nil {
			t.Errorf("Validate(%q): %v", c.in, err)
		}
		if tg := got.Target(0, 8); tg != (Target{Start: 0, Length: 8, Type: "errhold", Params: c.in}) {
			t.Errorf("Target = %+v", tg)
		}
	}
	for in, want := range map[string]string{
		"":          "errhold params: device: missing",
		"8:16":      "errhold params: offset: missing",
		"8:16 0 1":  `errhold params: argument "1": unexpected trailing argument`,
		"8:16 -8":   `errhold params: offset "-8": invalid syntax`,
		"8:16 zero": `errhold params: offset "zero": invalid syntax`,
	} {
		if _, err := ParseErrHoldParams(in); err == nil || err.Error() != want {
			t.Errorf("%q:\n got  %v\n want %s", in, err, want)
		}
	}
	if err := (ErrHoldParams{Device: "a b"}).Validate(); err == nil {
		t.Error("Validate accepted a device with a blank")
	}
}

func TestParseErrHoldStatus(t *testing.T) {
	for _, c := range []struct {
		in   string
		want ErrHoldStatus
	}{
		{"hold 0 0 0 0 0", ErrHoldStatus{}},
		{"hold 3 5 2 0 7", ErrHoldStatus{HeldNow: 3, HeldTotal: 5, Retried: 2, Errors: 7}},
		{"pass 0 4 1 3 9", ErrHoldStatus{Passing: true, HeldTotal: 4, Retried: 1, Failed: 3, Errors: 9}},
	} {
		got, err := ParseErrHoldStatus(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseErrHoldStatus(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
	for in, want := range map[string]string{
		"":                 "errhold status: mode: missing",
		"held 0 0 0 0 0":   `errhold status: mode "held": want hold or pass`,
		"hold 0 0 0 0":     "errhold status: errors: missing",
		"hold 0 0 0 0 0 0": `errhold status: argument "0": unexpected trailing argument`,
		"hold x 0 0 0 0":   `errhold status: held now "x": invalid syntax`,
	} {
		if _, err := ParseErrHoldStatus(in); err == nil || err.Error() != want {
			t.Errorf("%q:\n got  %v\n want %s", in, err, want)
		}
	}
}
