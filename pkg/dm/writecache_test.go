// SPDX-License-Identifier: Apache-2.0

package dm

import (
	"reflect"
	"strings"
	"testing"
)

func ptr[T any](v T) *T { return &v }

func TestWritecacheParamsRoundTrip(t *testing.T) {
	for _, c := range []struct {
		name string
		in   string
		want WritecacheParams
	}{
		{
			name: "minimal",
			in:   "s 253:1 253:2 4096 0",
			want: WritecacheParams{Mode: 's', Origin: "253:1", Cache: "253:2", BlockSize: 4096},
		},
		{
			name: "every SSD option, kernel order",
			in: "s /dev/mapper/tc-v-lower /dev/mapper/tc-v-wdata 4096 18 start_sector 8 high_watermark 60 " +
				"low_watermark 40 writeback_jobs 1024 autocommit_blocks 65536 autocommit_time 1000 " +
				"max_age 60000 cleaner metadata_only pause_writeback 3000",
			want: WritecacheParams{
				Mode: 's', Origin: "/dev/mapper/tc-v-lower", Cache: "/dev/mapper/tc-v-wdata", BlockSize: 4096,
				StartSector: ptr[uint64](8), HighWatermark: ptr(60), LowWatermark: ptr(40),
				WritebackJobs: ptr[uint64](1024), AutocommitBlocks: ptr[uint64](65536),
				AutocommitTimeMs: ptr[uint64](1000), MaxAgeMs: ptr[uint64](60000),
				Cleaner: true, MetadataOnly: true, PauseWritebackMs: ptr[uint64](3000),
			},
		},
		{
			name: "pmem with nofua",
			in:   "p 8:16 259:0 4096 1 nofua",
			want: WritecacheParams{Mode: 'p', Origin: "8:16", Cache: "259:0", BlockSize: 4096, FUA: ptr(false)},
		},
		{
			name: "pmem with fua and zero watermarks",
			in:   "p 8:16 259:0 512 5 high_watermark 0 low_watermark 0 fua",
			want: WritecacheParams{Mode: 'p', Origin: "8:16", Cache: "259:0", BlockSize: 512,
				HighWatermark: ptr(0), LowWatermark: ptr(0), FUA: ptr(true)},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseWritecacheParams(c.in)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("parse:\n got  %+v\n want %+v", got, c.want)
			}
			if s := got.String(); s != c.in {
				t.Errorf("String:\n got  %q\n want %q", s, c.in)
			}
			tg := got.Target(0, 100)
			if tg.Type != "writecache" || tg.Params != c.in || tg.Length != 100 {
				t.Errorf("Target = %+v", tg)
			}
		})
	}
}

func TestWritecacheParamsCanonicalises(t *testing.T) {
	// Keywords are case-insensitive and a repeated option keeps its last
	// value, as in the kernel; String prints the kernel's order.
	got, err := ParseWritecacheParams("S a b 4096 7 CLEANER low_watermark 5 High_Watermark 10 low_watermark 7")
	if err != nil {
		t.Fatal(err)
	}
	if want := "s a b 4096 5 high_watermark 10 low_watermark 7 cleaner"; got.String() != want {
		t.Errorf("String = %q, want %q", got.String(), want)
	}
	if s := (WritecacheParams{Origin: "a", Cache: "b", BlockSize: 4096}).String(); s != "s a b 4096 0" {
		t.Errorf("zero Mode prints %q", s)
	}
}

func TestWritecacheParamsErrors(t *testing.T) {
	for in, want := range map[string]string{
		"":                                       "writecache params: mode: missing",
		"x a b 4096 0":                           `writecache params: mode "x": want s or p`,
		"s a":                                    "writecache params: cache device: missing",
		"s a b abc 0":                            `writecache params: block size "abc": invalid syntax`,
		"s a b 4294967296 0":                     `writecache params: block size "4294967296": value out of range`,
		"s a b -1 0":                             `writecache params: block size "-1": invalid syntax`,
		"s a b 4096":                             "writecache params: optional argument count: missing",
		"s a b 4096 3 cleaner":                   `writecache params: optional argument count "3": only 1 argument(s) follow`,
		"s a b 4096 1 high_watermark":            "writecache params: high_watermark: missing",
		"s a b 4096 1 high_watermark 50":         "writecache params: high_watermark: missing",
		"s a b 4096 2 high_watermark x":          `writecache params: high_watermark "x": invalid syntax`,
		"s a b 4096 2 writeback_jobs 4294967296": `writecache params: writeback_jobs "4294967296": value out of range`,
		"s a b 4096 1 bogus":                     `writecache params: optional argument "bogus": unknown`,
		"s a b 4096 0 extra":                     `writecache params: argument "extra": unexpected trailing argument`,
	} {
		_, err := ParseWritecacheParams(in)
		if err == nil {
			t.Errorf("%q: accepted", in)
			continue
		}
		if err.Error() != want {
			t.Errorf("%q:\n got  %s\n want %s", in, err, want)
		}
		if _, ok := err.(*ParseError); !ok {
			t.Errorf("%q: %T, want *ParseError", in, err)
		}
	}
}

func TestWritecacheParamsValidate(t *testing.T) {
	ok := WritecacheParams{Mode: 's', Origin: "/dev/a", Cache: "/dev/b", BlockSize: 4096}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid params: %v", err)
	}
	for name, c := range map[string]struct {
		mod  func(*WritecacheParams)
		want string
	}{
		"mode":               {func(p *WritecacheParams) { p.Mode = 0 }, "mode"},
		"no origin":          {func(p *WritecacheParams) { p.Origin = "" }, "origin device: empty"},
		"space in cache":     {func(p *WritecacheParams) { p.Cache = "/dev/b c" }, "cache device"},
		"block size 1000":    {func(p *WritecacheParams) { p.BlockSize = 1000 }, "block size 1000"},
		"block size 256":     {func(p *WritecacheParams) { p.BlockSize = 256 }, "block size 256"},
		"block size 1M":      {func(p *WritecacheParams) { p.BlockSize = 1 << 20 }, "block size"},
		"high > 100":         {func(p *WritecacheParams) { p.HighWatermark = ptr(101) }, "high_watermark 101"},
		"low < 0":            {func(p *WritecacheParams) { p.LowWatermark = ptr(-1) }, "low_watermark -1"},
		"high < low":         {func(p *WritecacheParams) { p.HighWatermark, p.LowWatermark = ptr(10), ptr(20) }, "below"},
		"high < default low": {func(p *WritecacheParams) { p.HighWatermark = ptr(40) }, "high_watermark 40 is below low_watermark 45"},
		"autocommit_time":    {func(p *WritecacheParams) { p.AutocommitTimeMs = ptr[uint64](3600001) }, "autocommit_time"},
		"max_age":            {func(p *WritecacheParams) { p.MaxAgeMs = ptr[uint64](86400001) }, "max_age"},
		"pause":              {func(p *WritecacheParams) { p.PauseWritebackMs = ptr[uint64](60001) }, "pause_writeback"},
		"jobs":               {func(p *WritecacheParams) { p.WritebackJobs = ptr[uint64](1 << 32) }, "writeback_jobs"},
		"pause in pmem":      {func(p *WritecacheParams) { p.Mode = 'p'; p.PauseWritebackMs = ptr[uint64](1) }, "SSD mode only"},
		"fua in ssd":         {func(p *WritecacheParams) { p.FUA = ptr(true) }, "pmem mode only"},
	} {
		p := ok
		c.mod(&p)
		err := p.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "writecache params: ") {
			t.Errorf("%s: Validate = %v, want %q", name, err, c.want)
		}
	}
	// Setting only a low watermark below the default high one is fine.
	p := ok
	p.LowWatermark = ptr(0)
	if err := p.Validate(); err != nil {
		t.Errorf("low_watermark 0: %v", err)
	}
}

func TestParseWritecacheStatus(t *testing.T) {
	full := "0 32640 30000 12 1000 400 2000 100 50 10 1990 3 30 5"
	wantFull := WritecacheStatus{
		TotalBlocks: 32640, FreeBlocks: 30000, WritebackBlocks: 12,
		Reads: 1000, ReadHits: 400, Writes: 2000, WriteHitsUncommitted: 100, WriteHitsCommitted: 50,
		WritesAround: 10, WritesAllocate: 1990, WritesBlocked: 3, Flushes: 30, Discards: 5, HasStats: true,
	}
	short := "-5 32640 32640 0"
	wantShort := WritecacheStatus{Error: -5, TotalBlocks: 32640, FreeBlocks: 32640}

	for _, c := range []struct {
		in      string
		v       Version
		want    WritecacheStatus
		wantErr string
	}{
		{in: full, v: Version{1, 6, 0}, want: wantFull},
		{in: full, v: Version{1, 7, 2}, want: wantFull},
		{in: full, v: Version{2, 0, 0}, want: wantFull},
		{in: full, v: Version{}, want: wantFull},
		{in: short, v: Version{1, 5, 0}, want: wantShort},
		{in: short, v: Version{1, 1, 1}, want: wantShort},
		{in: short, v: Version{}, want: wantShort},
		{in: short, v: Version{1, 6, 0}, wantErr: `writecache status: field count "4": want 14 for target version 1.6.0`},
		{in: full, v: Version{1, 5, 0}, wantErr: `writecache status: field count "14": want 4 for target version 1.5.0`},
		{in: "0 1 2", v: Version{}, wantErr: `writecache status: field count "3": want 4 or 14`},
		{in: "", v: Version{}, wantErr: `writecache status: field count "0": want 4 or 14`},
		{in: "x 1 2 3", v: Version{1, 5, 0}, wantErr: `writecache status: error "x": invalid syntax`},
		{in: "0 1 -2 3", v: Version{1, 5, 0}, wantErr: `writecache status: free blocks "-2": invalid syntax`},
	} {
		got, err := ParseWritecacheStatus(c.in, c.v)
		if c.wantErr != "" {
			if err == nil || err.Error() != c.wantErr {
				t.Errorf("%q v%s: error %v, want %s", c.in, c.v, err, c.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q v%s: %v", c.in, c.v, err)
			continue
		}
		if got != c.want {
			t.Errorf("%q v%s:\n got  %+v\n want %+v", c.in, c.v, got, c.want)
		}
	}
}

func TestWritecacheDirtyBlocks(t *testing.T) {
	for _, c := range []struct{ total, free, want uint64 }{
		{32640, 32640, 0}, {32640, 30000, 2640}, {10, 0, 10}, {0, 5, 0},
	} {
		if got := (WritecacheStatus{TotalBlocks: c.total, FreeBlocks: c.free}).DirtyBlocks(); got != c.want {
			t.Errorf("DirtyBlocks(%d, %d) = %d, want %d", c.total, c.free, got, c.want)
		}
	}
}
