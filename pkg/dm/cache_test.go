// SPDX-License-Identifier: Apache-2.0

package dm

import (
	"reflect"
	"strings"
	"testing"
)

func TestCacheParamsRoundTrip(t *testing.T) {
	for _, c := range []struct {
		name string
		in   string
		want CacheParams
	}{
		{
			name: "writethrough smq",
			in:   "/dev/mapper/tc-v-rmeta /dev/mapper/tc-v-rdata /dev/mapper/tc-v-origin 512 1 writethrough smq 0",
			want: CacheParams{Metadata: "/dev/mapper/tc-v-rmeta", Cache: "/dev/mapper/tc-v-rdata", Origin: "/dev/mapper/tc-v-origin",
				BlockSize: 512, Features: []string{"writethrough"}, Policy: "smq"},
		},
		{
			name: "kernel table form with policy args",
			in:   "253:3 253:4 253:5 128 3 metadata2 passthrough no_discard_passdown smq 2 migration_threshold 2048",
			want: CacheParams{Metadata: "253:3", Cache: "253:4", Origin: "253:5", BlockSize: 128,
				Features: []string{"metadata2", "passthrough", "no_discard_passdown"}, Policy: "smq",
				PolicyArgs: []string{"migration_threshold", "2048"}},
		},
		{
			name: "no features, cleaner",
			in:   "a b c 64 0 cleaner 0",
			want: CacheParams{Metadata: "a", Cache: "b", Origin: "c", BlockSize: 64, Policy: "cleaner"},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseCacheParams(c.in)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("parse:\n got  %#v\n want %#v", got, c.want)
			}
			if s := got.String(); s != c.in {
				t.Errorf("String:\n got  %q\n want %q", s, c.in)
			}
			if err := got.Validate(); err != nil {
				t.Errorf("Validate: %v", err)
			}
			if tg := got.Target(8, 16); tg.Type != "cache" || tg.Params != c.in || tg.Start != 8 {
				t.Errorf("Target = %+v", tg)
			}
		})
	}
	if s := (CacheParams{Metadata: "m", Cache: "c", Origin: "o", BlockSize: 64}).String(); s != "m c o 64 0 default 0" {
		t.Errorf("empty policy prints %q", s)
	}
}

func TestCacheParamsErrors(t *testing.T) {
	for in, want := range map[string]string{
		"":                             "cache params: metadata device: missing",
		"m c":                          "cache params: origin device: missing",
		"m c o x 0 smq 0":              `cache params: block size "x": invalid syntax`,
		"m c o 512 3 writethrough smq": `cache params: feature count "3": only 2 argument(s) follow`,
		"m c o 512 0":                  "cache params: policy: missing",
		"m c o 512 0 smq":              "cache params: policy argument count: missing",
		"m c o 512 0 smq 2 a":          `cache params: policy argument count "2": only 1 argument(s) follow`,
		"m c o 512 0 smq 0 x":          `cache params: argument "x": unexpected trailing argument`,
		"m c o 512 -1 smq 0":           `cache params: feature count "-1": invalid syntax`,
	} {
		_, err := ParseCacheParams(in)
		if err == nil || err.Error() != want {
			t.Errorf("%q:\n got  %v\n want %s", in, err, want)
		}
	}
}

func TestCacheParamsValidate(t *testing.T) {
	ok := CacheParams{Metadata: "/dev/m", Cache: "/dev/c", Origin: "/dev/o", BlockSize: 512,
		Features: []string{"writethrough"}, Policy: "smq", PolicyArgs: []string{"migration_threshold", "2048"}}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		mod  func(*CacheParams)
		want string
	}{
		"no metadata":     {func(p *CacheParams) { p.Metadata = "" }, "metadata device: empty"},
		"block size 32":   {func(p *CacheParams) { p.BlockSize = 32 }, "block size 32"},
		"block size 100":  {func(p *CacheParams) { p.BlockSize = 100 }, "block size 100"},
		"block size huge": {func(p *CacheParams) { p.BlockSize = 4194304 }, "block size"},
		"unknown feature": {func(p *CacheParams) { p.Features = []string{"fast"} }, `feature "fast"`},
		"two modes":       {func(p *CacheParams) { p.Features = []string{"writeback", "writethrough"} }, "more than one I/O mode"},
		"odd policy args": {func(p *CacheParams) { p.PolicyArgs = []string{"migration_threshold"} }, "key value pairs"},
		"blank arg":       {func(p *CacheParams) { p.PolicyArgs = []string{"a b", "1"} }, "whitespace"},
	} {
		p := ok
		c.mod(&p)
		if err := p.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Validate = %v, want %q", name, err, c.want)
		}
	}
}

func TestParseCacheStatus(t *testing.T) {
	line := "8 1083/262144 512 1234/204800 100 200 300 400 5 6 7 1 writethrough 2 migration_threshold 2048 smq 0 rw -"
	want := CacheStatus{
		MetadataBlockSize: 8, MetadataUsed: 1083, MetadataTotal: 262144,
		BlockSize: 512, Used: 1234, Total: 204800,
		ReadHits: 100, ReadMisses: 200, WriteHits: 300, WriteMisses: 400,
		Demotions: 5, Promotions: 6, Dirty: 7,
		Features: []string{"writethrough"}, CoreArgs: []string{"migration_threshold", "2048"},
		Policy: "smq", MetadataMode: "rw",
	}
	v := Version{2, 2, 0}
	got, err := ParseCacheStatus(line+" ", v) // the kernel ends the line with a blank
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("\n got  %#v\n want %#v", got, want)
	}

	ro := strings.Replace(line, "rw -", "ro needs_check", 1)
	ro = strings.Replace(ro, "1 writethrough", "3 metadata2 writeback no_discard_passdown", 1)
	got, err = ParseCacheStatus(ro, v)
	if err != nil || got.MetadataMode != "ro" || !got.NeedsCheck ||
		!reflect.DeepEqual(got.Features, []string{"metadata2", "writeback", "no_discard_passdown"}) {
		t.Errorf("ro needs_check: %+v, %v", got, err)
	}

	if got, err := ParseCacheStatus("Fail", v); err != nil || !reflect.DeepEqual(got, CacheStatus{Failed: true}) {
		t.Errorf("Fail: %+v, %v", got, err)
	}

	// Targets before 2.0 may end after the policy args or the mode.
	old := strings.TrimSuffix(line, " rw -")
	for _, in := range []string{old, old + " rw", line} {
		if _, err := ParseCacheStatus(in, Version{1, 6, 0}); err != nil {
			t.Errorf("v1.6 %q: %v", in, err)
		}
		if _, err := ParseCacheStatus(in, Version{}); err != nil {
			t.Errorf("unknown version %q: %v", in, err)
		}
	}

	for in, wantErr := range map[string]string{
		"Error":         `cache status: status "Error": the kernel could not read the cache metadata`,
		old:             "cache status: metadata mode: missing",
		old + " rw":     "cache status: needs_check: missing",
		old + " rx -":   `cache status: metadata mode "rx": want rw or ro`,
		old + " rw x":   `cache status: needs_check "x": want needs_check or -`,
		line + " extra": `cache status: argument "extra": unexpected trailing argument`,
		strings.Replace(line, "1083/", "1083:", 1): `cache status: metadata usage "1083:262144": want <used>/<total>`,
		strings.Replace(line, "/204800", "/x", 1):  `cache status: cache usage "1234/x": invalid syntax`,
		strings.Replace(line, " 7 1 ", " 7 9 ", 1): `cache status: feature count "9": only 8 argument(s) follow`,
		"8 1/2 512 1/2 1 2 3":                      "cache status: write misses: missing",
	} {
		_, err := ParseCacheStatus(in, v)
		if err == nil || err.Error() != wantErr {
			t.Errorf("%q:\n got  %v\n want %s", in, err, wantErr)
		}
	}
}
