// SPDX-License-Identifier: Apache-2.0

package testbed

import (
	"reflect"
	"testing"
	"time"
)

func TestParseIOPSLog(t *testing.T) {
	for name, tc := range map[string]struct {
		log  string
		want []IOPSPoint
	}{
		"mixed, fio 3.33 (five fields)": {
			log: "1000, 8204, 0, 0, 0\n1000, 8259, 1, 0, 0\n2000, 9700, 0, 0, 0\n2000, 9679, 1, 0, 0\n",
			want: []IOPSPoint{{At: time.Second, Dur: time.Second, Read: 8204, Write: 8259},
				{At: 2 * time.Second, Dur: time.Second, Read: 9700, Write: 9679}},
		},
		"writes only, windows a little late, a stall of three seconds, six fields": {
			log: "1003, 2000, 1, 4096, 0, 0\n2051, 1500, 1, 4096, 0, 0\n5051, 1, 1, 4096, 0, 0\n",
			want: []IOPSPoint{{At: 1003 * time.Millisecond, Dur: 1003 * time.Millisecond, Write: 2000},
				{At: 2051 * time.Millisecond, Dur: 1048 * time.Millisecond, Write: 1500},
				{At: 5051 * time.Millisecond, Dur: 3 * time.Second, Write: 1}},
		},
		"trims are not drawn": {
			log:  "1000, 5, 2, 4096, 0\n1000, 7, 0, 4096, 0\n",
			want: []IOPSPoint{{At: time.Second, Dur: time.Second, Read: 7}},
		},
		"empty": {log: "", want: []IOPSPoint{}},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := ParseIOPSLog(tc.log)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
	for _, bad := range []string{"1000, 5\n", "x, 5, 1, 4096\n", "1000, -1, 1, 4096\n", "1000, 5, y, 0\n"} {
		if _, err := ParseIOPSLog(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestParseSamples(t *testing.T) {
	out := "@@ 1700000000.250000000\n0 8 writecache 0 100 40 0\nbcache 12.0M\n@@ 1700000001.3\n0 8 writecache 0 100 20 0\n@@ 1700000002.400000000\n"
	got, err := ParseSamples(out)
	if err != nil {
		t.Fatal(err)
	}
	want := []Sample{
		{At: time.Unix(1700000000, 250000000), Out: "0 8 writecache 0 100 40 0\nbcache 12.0M"},
		{At: time.Unix(1700000001, 300000000), Out: "0 8 writecache 0 100 20 0"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	if s, err := ParseSamples(""); err != nil || len(s) != 0 {
		t.Errorf("empty output: %v, %v", s, err)
	}
	for _, bad := range []string{"@@ yesterday\nx\n", "no marker at all\n"} {
		if _, err := ParseSamples(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestParseEpoch(t *testing.T) {
	for in, want := range map[string]time.Time{
		"1700000000.123456789\n": time.Unix(1700000000, 123456789),
		"1700000000.5":           time.Unix(1700000000, 500000000),
		"1700000000":             time.Unix(1700000000, 0),
	} {
		if got, err := ParseEpoch(in); err != nil || !got.Equal(want) {
			t.Errorf("ParseEpoch(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := ParseEpoch("now"); err == nil {
		t.Error("\"now\" accepted")
	}
}

func TestParseIOPSLogEpoch(t *testing.T) {
	start := time.UnixMilli(1795856355300)
	// The job stalled in its third second: its window lasts until 4 s.
	log := "1795856356327, 2704, 1, 0, 0\n1795856357330, 1529, 1, 0, 0\n1795856359327, 12, 1, 0, 0\n"
	tl, err := ParseIOPSLogEpoch(log, start)
	if err != nil {
		t.Fatal(err)
	}
	if !tl.Start.Equal(start) {
		t.Errorf("start %v, want %v", tl.Start, start)
	}
	want := []IOPSPoint{{At: 1027 * time.Millisecond, Dur: 1027 * time.Millisecond, Write: 2704},
		{At: 2030 * time.Millisecond, Dur: 1003 * time.Millisecond, Write: 1529},
		{At: 4027 * time.Millisecond, Dur: 1997 * time.Millisecond, Write: 12}}
	if !reflect.DeepEqual(tl.Points, want) {
		t.Errorf("points %+v\nwant %+v", tl.Points, want)
	}
	if tl.End() != 4027*time.Millisecond {
		t.Errorf("end %v", tl.End())
	}
	// A job whose first I/O completes late: its first window starts at
	// the job's start.
	tl, err = ParseIOPSLogEpoch("1795856358300, 3, 0, 0, 0\n", start)
	if err != nil || len(tl.Points) != 1 || tl.Points[0].Dur != 3*time.Second || tl.Points[0].Read != 3 {
		t.Errorf("late first completion: %+v, %v", tl.Points, err)
	}
	if tl, err := ParseIOPSLogEpoch("", start); err != nil || len(tl.Points) != 0 {
		t.Errorf("empty log: %+v, %v", tl, err)
	}
	for _, bad := range []string{"yesterday, 1, 1, 0\n", "1795856358300\n"} {
		if _, err := ParseIOPSLogEpoch(bad, start); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
