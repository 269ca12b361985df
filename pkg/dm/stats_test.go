// SPDX-License-Identifier: Apache-2.0

package dm

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Captured from Debian's Linux 6.1 kernel (6.1.0-56-amd64) in the test VM
// (go run ./tests/vm/vmrun): a linear device over a 64 MiB disk, region 0
// made with
//
//	@stats_create - /1 2 precise_timestamps histogram:100000,1000000,10000000 tidecache
//
// region 1 with "@stats_create - /2", then 1000 direct 4 KiB writes and
// 200 direct 64 KiB reads, and region 2 with the optional-argument count
// left out ("@stats_create - /1 precise_timestamps histogram:1,2"), which
// the kernel reads as a program_id and aux_data.
const (
	kernelStatsList = "0: 0+131072 131072 tidecache - precise_timestamps histogram:100000,1000000,10000000\n" +
		"1: 0+131072 65536 - -\n" +
		"2: 0+131072 131072 precise_timestamps histogram:1,2\n"
	kernelStatsPrintPrecise = "0+131072 200 197 25600 60313210 1000 978 8000 264499990 0 321558080 321558080 59923700 261634380 58:1130:12:0\n"
	kernelStatsPrintAreas   = "0+65536 200 197 25600 68 1000 978 8000 308 0 376 376 68 308\n" +
		"65536+65536 0 0 0 0 0 0 0 0 0 0 0 0 0\n"
)

func TestParseStatsListKernel(t *testing.T) {
	got, err := ParseStatsList(kernelStatsList)
	if err != nil {
		t.Fatal(err)
	}
	want := []StatsRegion{
		{ID: 0, Start: 0, Length: 131072, Step: 131072, ProgramID: "tidecache", AuxData: "-",
			PreciseTimestamps: true, HistogramBounds: []uint64{100000, 1000000, 10000000}},
		{ID: 1, Start: 0, Length: 131072, Step: 65536, ProgramID: "-", AuxData: "-"},
		{ID: 2, Start: 0, Length: 131072, Step: 131072, ProgramID: "precise_timestamps", AuxData: "histogram:1,2"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ParseStatsList =\n%+v\nwant\n%+v", got, want)
	}
	if got, err := ParseStatsList(""); err != nil || got != nil {
		t.Errorf("empty list = %v, %v", got, err)
	}
}

func TestParseStatsPrintKernel(t *testing.T) {
	got, err := ParseStatsPrint(kernelStatsPrintPrecise)
	if err != nil {
		t.Fatal(err)
	}
	want := []StatsCounters{{
		Start: 0, Length: 131072,
		Reads: 200, ReadsMerged: 197, ReadSectors: 25600, ReadTime: 60313210,
		Writes: 1000, WritesMerged: 978, WriteSectors: 8000, WriteTime: 264499990,
		InFlight: 0, IOTime: 321558080, WeightedTime: 321558080,
		ReadActiveTime: 59923700, WriteActiveTime: 261634380,
		Histogram: []uint64{58, 1130, 12, 0},
	}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ParseStatsPrint =\n%+v\nwant\n%+v", got, want)
	}
	// Every completed I/O lands in one bucket.
	var n uint64
	for _, v := range got[0].Histogram {
		n += v
	}
	if n != got[0].Reads+got[0].Writes {
		t.Errorf("histogram holds %d I/Os, counters %d", n, got[0].Reads+got[0].Writes)
	}

	areas, err := ParseStatsPrint(kernelStatsPrintAreas)
	if err != nil {
		t.Fatal(err)
	}
	if len(areas) != 2 || areas[1].Start != 65536 || areas[0].WriteTime != 308 || areas[0].Histogram != nil {
		t.Errorf("ParseStatsPrint(two areas) = %+v", areas)
	}
	sum, err := sumStatsAreas(areas)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Start != 0 || sum.Length != 131072 || sum.Reads != 200 || sum.Writes != 1000 || sum.Histogram != nil {
		t.Errorf("sum = %+v", sum)
	}
}

func TestParseStatsErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"0+8 1 2 3", `field count "4"`},
		{"0+8 1 2 3 4 5 6 7 8 0 9 10 11 12 1:2 extra", `field count "16"`},
		{"8 1 2 3 4 5 6 7 8 0 9 10 11 12", `area "8": want <start>+<length>`},
		{"x+8 1 2 3 4 5 6 7 8 0 9 10 11 12", `area "x+8"`},
		{"0+8 1 2 3 4 5 6 7 8 z 9 10 11 12", `in flight "z"`},
		{"0+8 1 2 -3 4 5 6 7 8 0 9 10 11 12", `sectors read "-3"`},
		{"0+8 1 2 3 4 5 6 7 8 0 9 10 11 12 5", `histogram "5": want at least 2 counts`},
		{"0+8 1 2 3 4 5 6 7 8 0 9 10 11 12 1::2", `histogram "1::2"`},
	} {
		_, err := ParseStatsPrint(tc.in)
		var pe *ParseError
		if !errors.As(err, &pe) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseStatsPrint(%q) = %v, want a ParseError with %q", tc.in, err, tc.want)
		}
	}
	for _, tc := range []struct{ in, want string }{
		{"0 0+8 8 tidecache -", `region id "0": want "<id>:"`},
		{"-1: 0+8 8 tidecache -", `region id "-1:"`},
		{"0: 0-8 8 tidecache -", `range "0-8"`},
		{"0: 0+8 x tidecache -", `step "x"`},
		{"0: 0+8 8 tidecache", "program_id and aux_data"},
		{"0: 0+8 8 tidecache - histogram:1,x", `histogram "1,x"`},
	} {
		_, err := ParseStatsList(tc.in)
		var pe *ParseError
		if !errors.As(err, &pe) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseStatsList(%q) = %v, want a ParseError with %q", tc.in, err, tc.want)
		}
	}
	if _, err := sumStatsAreas(nil); err == nil {
		t.Error("sum of no area: no error")
	}
	if _, err := sumStatsAreas([]StatsCounters{{Histogram: []uint64{1, 2}}, {Histogram: []uint64{1}}}); err == nil {
		t.Error("areas with different histograms: no error")
	}
}

func TestStatsCreateMessage(t *testing.T) {
	if got, want := statsCreateMessage([]uint64{100000, 1000000}),
		"@stats_create - /1 2 precise_timestamps histogram:100000,1000000 tidecache"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got, want := statsCreateMessage(nil), "@stats_create - /1 1 precise_timestamps tidecache"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// fakeStats answers dm-stats messages for one device the way
// drivers/md/dm-stats.c does: lowest free region id, list filtered by
// program_id, ENOENT for unknown ids.
type fakeStats struct {
	regions map[int]fakeRegion
	sent    []string
	// createReply, if set, replaces the region id in the reply.
	createReply string
}

type fakeRegion struct {
	step             string
	optional         []string
	program, aux     string
	print            string
	precise, histBnd string
}

func newFakeStats() *fakeStats { return &fakeStats{regions: map[int]fakeRegion{}} }

func (f *fakeStats) Message(_ context.Context, name string, _ uint64, msg string) (string, error) {
	f.sent = append(f.sent, msg)
	enoent := &IoctlError{Op: opMessage, Name: name, Errno: unix.ENOENT}
	args := strings.Fields(msg)
	switch args[0] {
	case "@stats_create":
		r := fakeRegion{step: args[2], program: "-", aux: "-"}
		rest := args[3:]
		if len(rest) > 0 {
			if n, err := strconv.Atoi(rest[0]); err == nil {
				r.optional, rest = rest[1:1+n], rest[1+n:]
			}
		}
		if len(rest) > 0 {
			r.program = rest[0]
		}
		if len(rest) > 1 {
			r.aux = rest[1]
		}
		id := 0
		for ; ; id++ {
			if _, ok := f.regions[id]; !ok {
				break
			}
		}
		f.regions[id] = r
		if f.createReply != "" {
			return f.createReply, nil
		}
		return strconv.Itoa(id), nil
	case "@stats_list":
		var b strings.Builder
		for _, id := range f.ids() {
			r := f.regions[id]
			if len(args) > 1 && args[1] != r.program {
				continue
			}
			step := "131072"
			if r.step == "/2" {
				step = "65536"
			}
			fmt.Fprintf(&b, "%d: 0+131072 %s %s %s", id, step, r.program, r.aux)
			for _, o := range r.optional {
				b.WriteString(" " + o)
			}
			b.WriteString("\n")
		}
		return b.String(), nil
	case "@stats_delete":
		id, _ := strconv.Atoi(args[1])
		if _, ok := f.regions[id]; !ok {
			return "", enoent
		}
		delete(f.regions, id)
		return "", nil
	case "@stats_print":
		id, _ := strconv.Atoi(args[1])
		r, ok := f.regions[id]
		if !ok {
			return "", enoent
		}
		return r.print, nil
	}
	return "", &IoctlError{Op: opMessage, Name: name, Errno: unix.EINVAL}
}

func (f *fakeStats) ids() []int {
	var ids []int
	for id := range f.regions {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func TestEnsureStats(t *testing.T) {
	ctx := context.Background()
	bounds := []uint64{100000, 1000000, 10000000}
	f := newFakeStats()
	// Someone else's region, which must survive.
	f.regions[0] = fakeRegion{step: "/2", program: "-", aux: "-"}

	id, err := EnsureStats(ctx, f, "tc-db", bounds)
	if err != nil || id != 1 {
		t.Fatalf("EnsureStats = %d, %v; want region 1", id, err)
	}
	want := "@stats_create - /1 2 precise_timestamps histogram:100000,1000000,10000000 tidecache"
	if last := f.sent[len(f.sent)-1]; last != want {
		t.Errorf("sent %q, want %q", last, want)
	}

	// Idempotent: the same region, nothing created or deleted.
	f.sent = nil
	if id, err := EnsureStats(ctx, f, "tc-db", bounds); err != nil || id != 1 {
		t.Fatalf("second EnsureStats = %d, %v", id, err)
	}
	if !reflect.DeepEqual(f.sent, []string{"@stats_list tidecache"}) {
		t.Errorf("second EnsureStats sent %q", f.sent)
	}

	// A duplicate (a concurrent caller) is deleted, the lowest id kept.
	f.regions[2] = f.regions[1]
	if id, err := EnsureStats(ctx, f, "tc-db", bounds); err != nil || id != 1 {
		t.Fatalf("EnsureStats with a duplicate = %d, %v", id, err)
	}
	if _, ok := f.regions[2]; ok {
		t.Error("duplicate region 2 not deleted")
	}

	// Other bounds: the old region is replaced.
	id, err = EnsureStats(ctx, f, "tc-db", []uint64{1000, 2000})
	if err != nil || id != 1 {
		t.Fatalf("EnsureStats(new bounds) = %d, %v", id, err)
	}
	if got := f.regions[1].optional; !reflect.DeepEqual(got, []string{"precise_timestamps", "histogram:1000,2000"}) {
		t.Errorf("region 1 now has %q", got)
	}
	if f.regions[0].program != "-" {
		t.Error("the other program's region was touched")
	}

	if _, err := EnsureStats(ctx, f, "tc-db", []uint64{5, 5}); err == nil || !strings.Contains(err.Error(), "not above") {
		t.Errorf("bad bounds: %v", err)
	}
	g := newFakeStats()
	g.createReply = "ok"
	if _, err := EnsureStats(ctx, g, "tc-db", bounds); err == nil || !strings.Contains(err.Error(), "not a region id") {
		t.Errorf("bad create reply: %v", err)
	}
}

func TestReadStats(t *testing.T) {
	ctx := context.Background()
	f := newFakeStats()
	f.regions[3] = fakeRegion{print: kernelStatsPrintPrecise}
	f.regions[4] = fakeRegion{print: kernelStatsPrintAreas}
	f.regions[5] = fakeRegion{print: "garbage\n"}

	c, err := ReadStats(ctx, f, "tc-db", 3)
	if err != nil {
		t.Fatal(err)
	}
	if c.Reads != 200 || c.WriteTime != 264499990 || !reflect.DeepEqual(c.Histogram, []uint64{58, 1130, 12, 0}) {
		t.Errorf("ReadStats = %+v", c)
	}
	if c, err := ReadStats(ctx, f, "tc-db", 4); err != nil || c.Length != 131072 || c.Writes != 1000 {
		t.Errorf("ReadStats(two areas) = %+v, %v", c, err)
	}
	if _, err := ReadStats(ctx, f, "tc-db", 5); err == nil {
		t.Error("garbage: no error")
	}
	_, err = ReadStats(ctx, f, "tc-db", 9)
	if !errors.Is(err, unix.ENOENT) || !strings.Contains(err.Error(), "tc-db") {
		t.Errorf("missing region: %v, want ENOENT naming the device", err)
	}
	if err := DeleteStats(ctx, f, "tc-db", 9); !errors.Is(err, unix.ENOENT) {
		t.Errorf("DeleteStats(missing) = %v", err)
	}
}

func FuzzParseStatsPrint(f *testing.F) {
	f.Add(kernelStatsPrintPrecise)
	f.Add(kernelStatsPrintAreas)
	f.Add(kernelStatsList)
	f.Fuzz(func(t *testing.T, s string) {
		if areas, err := ParseStatsPrint(s); err == nil {
			for _, a := range areas {
				if a.Histogram != nil && len(a.Histogram) < 2 {
					t.Fatalf("%q: histogram of %d buckets", s, len(a.Histogram))
				}
			}
		}
		if regions, err := ParseStatsList(s); err == nil {
			for _, r := range regions {
				if r.ProgramID == "" || r.AuxData == "" {
					t.Fatalf("%q: empty program_id or aux_data in %+v", s, r)
				}
			}
		}
	})
}
