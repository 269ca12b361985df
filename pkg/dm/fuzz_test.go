// SPDX-License-Identifier: Apache-2.0

package dm

import (
	"reflect"
	"strings"
	"testing"
)

// Run one with, e.g.: go test ./pkg/dm -run '^$' -fuzz FuzzParseWritecacheParams -fuzztime 30s

func FuzzParseWritecacheStatus(f *testing.F) {
	f.Add("0 32634 32002 0 1025 512 2048 17 3 0 632 0 12 1", uint32(1), uint32(6))
	f.Add("-5 10 10 0", uint32(1), uint32(5))
	f.Add("0 1 2", uint32(0), uint32(0))
	f.Fuzz(func(t *testing.T, s string, major, minor uint32) {
		st, err := ParseWritecacheStatus(s, Version{Major: major, Minor: minor})
		if err != nil {
			return
		}
		n := len(strings.Fields(s))
		if (n == 14) != st.HasStats || (n != 4 && n != 14) {
			t.Fatalf("%q: %d fields parsed, HasStats %v", s, n, st.HasStats)
		}
		if st.DirtyBlocks() > st.TotalBlocks {
			t.Fatalf("%q: dirty %d > total %d", s, st.DirtyBlocks(), st.TotalBlocks)
		}
	})
}

func FuzzParseCacheStatus(f *testing.F) {
	f.Add("8 1083/16384 128 512/8192 100 200 300 400 0 512 0 1 writethrough 2 migration_threshold 2048 smq 0 rw - ", uint32(2))
	f.Add("8 1/2 128 1/2 0 0 0 0 0 0 0 3 metadata2 writeback no_discard_passdown 2 migration_threshold 2048 smq 0 ro needs_check", uint32(2))
	f.Add("8 1/2 128 1/2 0 0 0 0 0 0 0 0 2 migration_threshold 2048 cleaner 0", uint32(1))
	f.Add("Fail", uint32(2))
	f.Add("Error", uint32(2))
	f.Fuzz(func(t *testing.T, s string, major uint32) {
		st, err := ParseCacheStatus(s, Version{Major: major})
		if err != nil {
			return
		}
		if st.Failed && !reflect.DeepEqual(st, CacheStatus{Failed: true}) {
			t.Fatalf("%q: failed status with fields: %+v", s, st)
		}
		if st.MetadataMode != "" && st.MetadataMode != "rw" && st.MetadataMode != "ro" {
			t.Fatalf("%q: metadata mode %q", s, st.MetadataMode)
		}
	})
}

// roundTrip checks that a successful parse prints a string that parses to
// the same value and prints identically again.
func roundTrip[T interface{ String() string }](t *testing.T, in string, parse func(string) (T, error)) {
	t.Helper()
	p, err := parse(in)
	if err != nil {
		return
	}
	s := p.String()
	p2, err := parse(s)
	if err != nil {
		t.Fatalf("%q parsed, but its String %q does not: %v", in, s, err)
	}
	if !reflect.DeepEqual(p, p2) {
		t.Fatalf("%q: round trip through %q changed\n %+v\n %+v", in, s, p, p2)
	}
	if s2 := p2.String(); s2 != s {
		t.Fatalf("%q: String not stable: %q then %q", in, s, s2)
	}
}

func FuzzParseWritecacheParams(f *testing.F) {
	f.Add("s 253:1 253:2 4096 0")
	f.Add("s /dev/a /dev/b 4096 18 start_sector 8 high_watermark 60 low_watermark 40 writeback_jobs 1024 " +
		"autocommit_blocks 65536 autocommit_time 1000 max_age 60000 cleaner metadata_only pause_writeback 3000")
	f.Add("P a b 512 3 FUA nofua high_watermark -1")
	f.Fuzz(func(t *testing.T, s string) {
		roundTrip(t, s, ParseWritecacheParams)
		if p, err := ParseWritecacheParams(s); err == nil {
			_ = p.Validate() // must not panic
		}
	})
}

func FuzzParseCacheParams(f *testing.F) {
	f.Add("253:3 253:4 253:5 128 1 writethrough smq 2 migration_threshold 2048")
	f.Add("a b c 64 0 cleaner 0")
	f.Fuzz(func(t *testing.T, s string) {
		roundTrip(t, s, ParseCacheParams)
		if p, err := ParseCacheParams(s); err == nil {
			_ = p.Validate()
		}
	})
}

func FuzzParseLinearParams(f *testing.F) {
	f.Add("8:16 2048")
	f.Fuzz(func(t *testing.T, s string) { roundTrip(t, s, ParseLinearParams) })
}

func FuzzParseTable(f *testing.F) {
	f.Add("0 2097152 writecache s 253:1 253:2 4096 0\n2097152 8 error\n")
	f.Add("# c\r\n0 100 linear 8:16  0 \n")
	f.Fuzz(func(t *testing.T, s string) {
		tbl, err := ParseTable(s)
		if err != nil {
			return
		}
		out := tbl.String()
		tbl2, err := ParseTable(out)
		if err != nil {
			t.Fatalf("%q parsed, but its String %q does not: %v", s, out, err)
		}
		if len(tbl) != len(tbl2) || (len(tbl) > 0 && !reflect.DeepEqual(tbl, tbl2)) {
			t.Fatalf("%q: round trip changed\n %#v\n %#v", s, tbl, tbl2)
		}
		_ = tbl.Validate()
	})
}
