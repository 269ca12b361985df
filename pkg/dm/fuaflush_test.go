// SPDX-License-Identifier: Apache-2.0

package dm

import "testing"

func TestFUAFlushParams(t *testing.T) {
	for _, in := range []string{"253:4", "/dev/mapper/tc-v-wtier"} {
		got, err := ParseFUAFlushParams(in)
		if err != nil || got.Device != in {
			t.Errorf("ParseFUAFlushParams(%q) = %+v, %v", in, got, err)
			continue
		}
		if got.String() != in {
			t.Errorf("String = %q, want %q", got.String(), in)
		}
		if err := got.Validate(); err != nil {
			t.Errorf("Validate: %v", err)
		}
		if tg := got.Target(0, 8); tg != (Target{Start: 0, Length: 8, Type: "fuaflush", Params: in}) {
			t.Errorf("Target = %+v", tg)
		}
	}
	for in, want := range map[string]string{
		"":         "fuaflush params: device: missing",
		"8:16 0":   `fuaflush params: argument "0": unexpected trailing argument`,
		"8:16 x y": `fuaflush params: argument "x": unexpected trailing argument`,
	} {
		if _, err := ParseFUAFlushParams(in); err == nil || err.Error() != want {
			t.Errorf("%q:\n got  %v\n want %s", in, err, want)
		}
	}
	if err := (FUAFlushParams{Device: "a b"}).Validate(); err == nil {
		t.Error("device with a blank validated")
	}
}

func TestParseFUAFlushStatus(t *testing.T) {
	for _, c := range []struct {
		in      string
		want    FUAFlushStatus
		wantErr string
	}{
		{in: "0 0 0"},
		{in: "120 37 1", want: FUAFlushStatus{FUAWrites: 120, Flushes: 37, FlushErrors: 1}},
		{in: "1 2", wantErr: "fuaflush status: flush errors: missing"},
		{in: "1 2 3 4", wantErr: `fuaflush status: argument "4": unexpected trailing argument`},
		{in: "a 2 3", wantErr: `fuaflush status: fua writes "a": invalid syntax`},
	} {
		got, err := ParseFUAFlushStatus(c.in)
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
}
