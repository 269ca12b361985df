// SPDX-License-Identifier: Apache-2.0

package dm

import (
	"reflect"
	"strings"
	"testing"
)

func TestTableStringParse(t *testing.T) {
	tbl := Table{
		{Start: 0, Length: 2097152, Type: "writecache", Params: "s 253:1 253:2 4096 0"},
		{Start: 2097152, Length: 8, Type: "error"},
		{Start: 2097160, Length: 8, Type: "linear", Params: "8:16  0"}, // inner spacing is kept
	}
	s := tbl.String()
	want := "0 2097152 writecache s 253:1 253:2 4096 0\n2097152 8 error\n2097160 8 linear 8:16  0"
	if s != want {
		t.Fatalf("String:\n got  %q\n want %q", s, want)
	}
	got, err := ParseTable(s)
	if err != nil || !reflect.DeepEqual(got, tbl) {
		t.Fatalf("ParseTable = %v, %v", got, err)
	}
	if err := tbl.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
	if tbl.Sectors() != 2097168 || (Table{}).Sectors() != 0 {
		t.Errorf("Sectors = %d", tbl.Sectors())
	}

	// dmsetup output: trailing blanks (linear status), comments, CRLF.
	got, err = ParseTable("# comment\r\n0 100 linear \r\n\n  100 50 zero\n")
	wantT := Table{{Start: 0, Length: 100, Type: "linear"}, {Start: 100, Length: 50, Type: "zero"}}
	if err != nil || !reflect.DeepEqual(got, wantT) {
		t.Errorf("ParseTable(dmsetup) = %#v, %v", got, err)
	}
	if got, err := ParseTable(""); err != nil || got != nil {
		t.Errorf("ParseTable(\"\") = %v, %v", got, err)
	}

	for in, wantErr := range map[string]string{
		"0 100":                    `dm table line 1: line "0 100": want <start> <length> <type> [params]`,
		"0 1 linear a 0\nx 1 zero": `dm table line 2: start "x": invalid syntax`,
		"0 -1 zero":                `dm table line 1: length "-1": invalid syntax`,
	} {
		if _, err := ParseTable(in); err == nil || err.Error() != wantErr {
			t.Errorf("%q:\n got  %v\n want %s", in, err, wantErr)
		}
	}
}

func TestTableValidate(t *testing.T) {
	for name, c := range map[string]struct {
		t    Table
		want string
	}{
		"empty":    {nil, "no targets"},
		"not at 0": {Table{{Start: 1, Length: 1, Type: "zero"}}, "starts at sector 1, want 0"},
		"gap":      {Table{{Start: 0, Length: 8, Type: "zero"}, {Start: 9, Length: 8, Type: "zero"}}, "target 1 starts at sector 9, want 8"},
		"overlap":  {Table{{Start: 0, Length: 8, Type: "zero"}, {Start: 4, Length: 8, Type: "zero"}}, "target 1 starts at sector 4"},
		"zero len": {Table{{Start: 0, Length: 0, Type: "zero"}}, "length 0"},
		"overflow": {Table{{Start: 0, Length: 1<<64 - 1, Type: "zero"}, {Start: 1<<64 - 1, Length: 2, Type: "zero"}}, "overflows"},
		"no type":  {Table{{Start: 0, Length: 1}}, "invalid type"},
		"type 16":  {Table{{Start: 0, Length: 1, Type: strings.Repeat("t", 16)}}, "invalid type"},
		"NUL":      {Table{{Start: 0, Length: 1, Type: "zero", Params: "\x00"}}, "NUL"},
	} {
		err := c.t.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
	if err := (Table{{Start: 0, Length: 1, Type: strings.Repeat("t", 15)}}).Validate(); err != nil {
		t.Errorf("15-byte type: %v", err)
	}
}

func TestValidateNameUUID(t *testing.T) {
	for _, ok := range []string{"tc-v-top", strings.Repeat("a", 127), "a.b", "...", "controls"} {
		if err := ValidateName(ok); err != nil {
			t.Errorf("ValidateName(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", strings.Repeat("a", 128), "a/b", ".", "..", "control", "a\x00"} {
		if err := ValidateName(bad); err == nil {
			t.Errorf("ValidateName(%q) accepted", bad)
		}
	}
	for _, ok := range []string{"", "TIDECACHE-" + strings.Repeat("u", 118)} {
		if err := ValidateUUID(ok); err != nil {
			t.Errorf("ValidateUUID(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{strings.Repeat("u", 129), "a\x00"} {
		if err := ValidateUUID(bad); err == nil {
			t.Errorf("ValidateUUID(%q) accepted", bad)
		}
	}
	if DevicePath("tc-v-top") != "/dev/mapper/tc-v-top" {
		t.Error(DevicePath("tc-v-top"))
	}
}

func TestVersion(t *testing.T) {
	v := Version{4, 47, 0}
	if v.String() != "4.47.0" {
		t.Error(v.String())
	}
	for _, c := range []struct {
		a, b Version
		want bool
	}{
		{Version{1, 6, 0}, Version{1, 6, 0}, true},
		{Version{1, 6, 1}, Version{1, 6, 0}, true},
		{Version{1, 7, 0}, Version{1, 6, 9}, true},
		{Version{2, 0, 0}, Version{1, 9, 9}, true},
		{Version{1, 5, 9}, Version{1, 6, 0}, false},
		{Version{0, 9, 0}, Version{1, 0, 0}, false},
		{Version{1, 6, 0}, Version{1, 6, 1}, false},
	} {
		if got := c.a.AtLeast(c.b); got != c.want {
			t.Errorf("%s.AtLeast(%s) = %v", c.a, c.b, got)
		}
	}
	for in, want := range map[string]Version{"4.47.0": v, "v1.6.0": {1, 6, 0}} {
		if got, err := ParseVersion(in); err != nil || got != want {
			t.Errorf("ParseVersion(%q) = %v, %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "1.2", "1.2.3.4", "1.x.3", "-1.0.0"} {
		if _, err := ParseVersion(bad); err == nil {
			t.Errorf("ParseVersion(%q) accepted", bad)
		}
	}
	if !(Version{}).IsZero() || v.IsZero() {
		t.Error("IsZero")
	}
}
