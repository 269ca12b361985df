// SPDX-License-Identifier: Apache-2.0

package dm

import "testing"

func TestLinearParams(t *testing.T) {
	for _, c := range []struct {
		in   string
		want LinearParams
	}{
		{"8:16 0", LinearParams{Device: "8:16"}},
		{"/dev/md0 18446744073709551615", LinearParams{Device: "/dev/md0", Offset: 1<<64 - 1}},
		{"/dev/mapper/tc-v-origin 2048", LinearParams{Device: "/dev/mapper/tc-v-origin", Offset: 2048}},
	} {
		got, err := ParseLinearParams(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseLinearParams(%q) = %+v, %v", c.in, got, err)
			continue
		}
		if got.String() != c.in {
			t.Errorf("String = %q, want %q", got.String(), c.in)
		}
		if err := got.Validate(); err != nil {
			t.Errorf("Validate: %v", err)
		}
		if tg := got.Target(100, 8); tg != (Target{Start: 100, Length: 8, Type: "linear", Params: c.in}) {
			t.Errorf("Target = %+v", tg)
		}
	}
	for in, want := range map[string]string{
		"":                          "linear params: device: missing",
		"8:16":                      "linear params: offset: missing",
		"8:16 x":                    `linear params: offset "x": invalid syntax`,
		"8:16 -1":                   `linear params: offset "-1": invalid syntax`,
		"8:16 0 extra":              `linear params: argument "extra": unexpected trailing argument`,
		"8:16 1e3":                  `linear params: offset "1e3": invalid syntax`,
		"8:16 99999999999999999999": `linear params: offset "99999999999999999999": value out of range`,
	} {
		if _, err := ParseLinearParams(in); err == nil || err.Error() != want {
			t.Errorf("%q:\n got  %v\n want %s", in, err, want)
		}
	}
	if err := (LinearParams{}).Validate(); err == nil {
		t.Error("empty device validated")
	}
}

func TestParseLinearStatus(t *testing.T) {
	if err := ParseLinearStatus(" "); err != nil {
		t.Error(err)
	}
	if err := ParseLinearStatus("x"); err == nil {
		t.Error("non-empty linear status accepted")
	}
}
