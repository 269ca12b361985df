// SPDX-License-Identifier: Apache-2.0

package dm

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// dm-stats: I/O counters and a latency histogram that the device-mapper
// core keeps for a region of any bio-based dm device, driven by messages
// to the device (Documentation/admin-guide/device-mapper/statistics.rst,
// drivers/md/dm-stats.c). Regions survive table reloads (they belong to
// the mapped device, not to its table) and vanish with the device.
//
// tidecache keeps one region per top device: the whole device as a single
// area, nanosecond timestamps and a latency histogram, marked with
// StatsProgramID so that regions other programs made are left alone.

// StatsProgramID is the program_id of the dm-stats regions tidecache
// creates; EnsureStats only looks at, and only deletes, regions carrying
// it.
const StatsProgramID = "tidecache"

// Messenger sends a message to the target of a device's live table, or to
// the device-mapper core for "@" messages, and returns the reply text.
// *Client implements it.
type Messenger interface {
	Message(ctx context.Context, name string, sector uint64, msg string) (string, error)
}

// StatsRegion is one region as @stats_list prints it.
type StatsRegion struct {
	ID     int
	Start  uint64 // first sector
	Length uint64 // sectors
	Step   uint64 // sectors per area; Length/Step areas (rounded up)
	// ProgramID and AuxData are free text the creator chose ("-" if none).
	ProgramID string
	AuxData   string
	// PreciseTimestamps: times are counted in nanoseconds, not in
	// milliseconds of jiffies.
	PreciseTimestamps bool
	// HistogramBounds are the latency bucket boundaries in the region's
	// time unit; nil without a histogram.
	HistogramBounds []uint64
}

// StatsCounters are the counters of one area of a region, as @stats_print
// prints them, or their sum over the areas of a region (ReadStats). Times
// are in nanoseconds for regions with precise timestamps (every region
// EnsureStats makes), in milliseconds otherwise.
type StatsCounters struct {
	Start  uint64 // first sector of the area
	Length uint64 // sectors in the area (the region's step)

	Reads        uint64 // reads completed
	ReadsMerged  uint64
	ReadSectors  uint64
	ReadTime     uint64 // sum of the durations of the reads completed
	Writes       uint64 // writes completed
	WritesMerged uint64
	WriteSectors uint64
	WriteTime    uint64 // sum of the durations of the writes completed
	InFlight     int64  // I/Os in progress now
	IOTime       uint64 // time with at least one I/O in flight
	WeightedTime uint64 // I/O time weighted by the number in flight
	// ReadActiveTime and WriteActiveTime: time with at least one read
	// (write) in flight.
	ReadActiveTime  uint64
	WriteActiveTime uint64
	// Histogram counts the I/Os (reads and writes together: dm-stats
	// keeps one histogram per area) by duration: Histogram[0] those
	// shorter than the first bound, Histogram[i] those of at least bound
	// i-1 and shorter than bound i, the last those of at least the last
	// bound. nil when the region has no histogram.
	Histogram []uint64
}

// EnsureStats makes sure the dm device name has exactly one tidecache
// dm-stats region: the whole device as one area, precise timestamps, and
// a latency histogram with boundsNs (nanoseconds, strictly increasing,
// none zero; empty for no histogram). It returns that region's id.
//
// It is idempotent: an existing region with these settings is kept, and
// tidecache regions with other settings (or duplicates left by a
// concurrent caller; the lowest id wins) are deleted. Regions of other
// programs are never touched. Creating a region makes the kernel suspend
// and resume the device internally, for a moment, so that its counters
// start exact. The region covers the device's size at creation: after
// growing a device, delete its region (DeleteStats) so that the next call
// makes one covering the new size.
func EnsureStats(ctx context.Context, m Messenger, name string, boundsNs []uint64) (int, error) {
	if err := validateStatsBounds(boundsNs); err != nil {
		return 0, fmt.Errorf("dm stats %s: %w", name, err)
	}
	regions, err := ListStats(ctx, m, name)
	if err != nil {
		return 0, err
	}
	keep := -1
	var stale []int
	for _, r := range regions {
		if keep < 0 && r.Start == 0 && r.Step >= r.Length && r.PreciseTimestamps &&
			slices.Equal(r.HistogramBounds, boundsNs) {
			keep = r.ID
			continue
		}
		stale = append(stale, r.ID)
	}
	for _, id := range stale {
		if err := DeleteStats(ctx, m, name, id); err != nil && !errors.Is(err, errNoRegion) {
			return 0, err
		}
	}
	if keep >= 0 {
		return keep, nil
	}
	reply, err := m.Message(ctx, name, 0, statsCreateMessage(boundsNs))
	if err != nil {
		return 0, fmt.Errorf("dm stats %s: create region: %w", name, err)
	}
	id, err := strconv.Atoi(strings.TrimSpace(reply))
	if err != nil || id < 0 {
		return 0, fmt.Errorf("dm stats %s: create region: reply %q is not a region id", name, reply)
	}
	return id, nil
}

// statsCreateMessage is the @stats_create message for a whole-device,
// single-area region with precise timestamps and, if bounds are given, a
// histogram. The grammar (dm-stats.c, message_stats_create) is
//
//	@stats_create <range> <step> [<#optional args> <optional args>*] [<program_id> [<aux_data>]]
//
// The optional-argument count must be given: without it the kernel takes
// "precise_timestamps" for the program_id.
func statsCreateMessage(boundsNs []uint64) string {
	opts := []string{"precise_timestamps"}
	if len(boundsNs) > 0 {
		b := make([]string, len(boundsNs))
		for i, v := range boundsNs {
			b[i] = utoa(v)
		}
		opts = append(opts, "histogram:"+strings.Join(b, ","))
	}
	return fmt.Sprintf("@stats_create - /1 %d %s %s", len(opts), strings.Join(opts, " "), StatsProgramID)
}

func validateStatsBounds(bounds []uint64) error {
	var last uint64
	for i, b := range bounds {
		if b <= last {
			return fmt.Errorf("histogram bound %d (%d ns) is not above the previous one (%d ns)", i, b, last)
		}
		last = b
	}
	return nil
}

// ListStats returns the tidecache regions (StatsProgramID) of a device.
func ListStats(ctx context.Context, m Messenger, name string) ([]StatsRegion, error) {
	reply, err := m.Message(ctx, name, 0, "@stats_list "+StatsProgramID)
	if err != nil {
		return nil, fmt.Errorf("dm stats %s: list regions: %w", name, err)
	}
	regions, err := ParseStatsList(reply)
	if err != nil {
		return nil, fmt.Errorf("dm stats %s: %w", name, err)
	}
	return regions, nil
}

// errNoRegion: the kernel does not know the region id (ENOENT).
var errNoRegion = errors.New("no such dm-stats region")

// DeleteStats deletes region id of a device. A region that is already
// gone is an error matching the kernel's ENOENT.
func DeleteStats(ctx context.Context, m Messenger, name string, id int) error {
	if _, err := m.Message(ctx, name, 0, "@stats_delete "+strconv.Itoa(id)); err != nil {
		if errors.Is(err, unix.ENOENT) {
			err = fmt.Errorf("%w: %w", errNoRegion, err)
		}
		return fmt.Errorf("dm stats %s: delete region %d: %w", name, id, err)
	}
	return nil
}

// ReadStats returns the counters of region id of a device, summed over
// its areas (regions EnsureStats makes have one). A region that does not
// exist (any more) is an error matching the kernel's ENOENT.
func ReadStats(ctx context.Context, m Messenger, name string, id int) (StatsCounters, error) {
	reply, err := m.Message(ctx, name, 0, "@stats_print "+strconv.Itoa(id))
	if err != nil {
		return StatsCounters{}, fmt.Errorf("dm stats %s: print region %d: %w", name, id, err)
	}
	areas, err := ParseStatsPrint(reply)
	if err != nil {
		return StatsCounters{}, fmt.Errorf("dm stats %s: region %d: %w", name, id, err)
	}
	sum, err := sumStatsAreas(areas)
	if err != nil {
		return StatsCounters{}, fmt.Errorf("dm stats %s: region %d: %w", name, id, err)
	}
	return sum, nil
}

func sumStatsAreas(areas []StatsCounters) (StatsCounters, error) {
	if len(areas) == 0 {
		return StatsCounters{}, errors.New("stats print: no area")
	}
	sum := StatsCounters{Start: areas[0].Start}
	if n := len(areas[0].Histogram); n > 0 {
		sum.Histogram = make([]uint64, n)
	}
	for _, a := range areas {
		if len(a.Histogram) != len(sum.Histogram) {
			return StatsCounters{}, fmt.Errorf("stats print: area %d+%d has %d histogram buckets, the first area %d",
				a.Start, a.Length, len(a.Histogram), len(sum.Histogram))
		}
		sum.Length += a.Length
		sum.Reads += a.Reads
		sum.ReadsMerged += a.ReadsMerged
		sum.ReadSectors += a.ReadSectors
		sum.ReadTime += a.ReadTime
		sum.Writes += a.Writes
		sum.WritesMerged += a.WritesMerged
		sum.WriteSectors += a.WriteSectors
		sum.WriteTime += a.WriteTime
		sum.InFlight += a.InFlight
		sum.IOTime += a.IOTime
		sum.WeightedTime += a.WeightedTime
		sum.ReadActiveTime += a.ReadActiveTime
		sum.WriteActiveTime += a.WriteActiveTime
		for i, v := range a.Histogram {
			sum.Histogram[i] += v
		}
	}
	return sum, nil
}

// ParseStatsList parses the reply to @stats_list, one region a line.
//
// Grammar (dm-stats.c, dm_stats_list):
//
//	<region_id>: <start_sector>+<length> <step> <program_id> <aux_data>
//	    [precise_timestamps] [histogram:<n1>,<n2>,...]
//
// An empty reply is no region.
func ParseStatsList(s string) ([]StatsRegion, error) {
	var out []StatsRegion
	for i, line := range strings.Split(s, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		r, err := parseStatsRegion(newArgReader(fmt.Sprintf("stats list line %d", i+1), line))
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

func parseStatsRegion(a *argReader) (StatsRegion, error) {
	var r StatsRegion
	idText, err := a.next("region id")
	if err != nil {
		return r, err
	}
	idNum, ok := strings.CutSuffix(idText, ":")
	if !ok {
		return r, a.fail("region id", idText, errors.New(`want "<id>:"`))
	}
	id, err := strconv.ParseUint(idNum, 10, 31)
	if err != nil {
		return r, a.fail("region id", idText, numErr(err))
	}
	r.ID = int(id)
	if r.Start, r.Length, err = parseSectorRange(a, "range"); err != nil {
		return r, err
	}
	if r.Step, err = a.uint("step", 64); err != nil {
		return r, err
	}
	// program_id and aux_data are words unless someone escaped spaces into
	// them; the flags are recognised from the end of the line.
	rest := a.group(a.remaining())
	for len(rest) > 2 {
		last := rest[len(rest)-1]
		if last == "precise_timestamps" {
			r.PreciseTimestamps = true
		} else if h, ok := strings.CutPrefix(last, "histogram:"); ok && r.HistogramBounds == nil {
			if r.HistogramBounds, err = parseStatsNumbers(a, "histogram", h, ","); err != nil {
				return r, err
			}
		} else {
			break
		}
		rest = rest[:len(rest)-1]
	}
	if len(rest) < 2 {
		return r, a.fail("program_id and aux_data", strings.Join(rest, " "), errMissing)
	}
	r.ProgramID, r.AuxData = rest[0], strings.Join(rest[1:], " ")
	return r, nil
}

// ParseStatsPrint parses the reply to @stats_print, one area a line.
//
// Grammar (dm-stats.c, dm_stats_print; the counters of
// Documentation/admin-guide/iostats.rst, then two more):
//
//	<start_sector>+<length>
//	    <reads> <reads merged> <sectors read> <read time>
//	    <writes> <writes merged> <sectors written> <write time>
//	    <in flight> <io time> <weighted io time>
//	    <read active time> <write active time>
//	    [<histogram count 0>:<count 1>:...:<count n>]
//
// The histogram has one count more than the region has bounds.
func ParseStatsPrint(s string) ([]StatsCounters, error) {
	var out []StatsCounters
	for i, line := range strings.Split(s, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		c, err := parseStatsArea(newArgReader(fmt.Sprintf("stats print line %d", i+1), line))
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

func parseStatsArea(a *argReader) (StatsCounters, error) {
	var c StatsCounters
	if n := a.remaining(); n != 14 && n != 15 {
		return c, a.fail("field count", strconv.Itoa(n), errors.New("want 14, or 15 with a histogram"))
	}
	var err error
	if c.Start, c.Length, err = parseSectorRange(a, "area"); err != nil {
		return c, err
	}
	for _, f := range []struct {
		name string
		dst  *uint64
	}{
		{"reads", &c.Reads},
		{"reads merged", &c.ReadsMerged},
		{"sectors read", &c.ReadSectors},
		{"read time", &c.ReadTime},
		{"writes", &c.Writes},
		{"writes merged", &c.WritesMerged},
		{"sectors written", &c.WriteSectors},
		{"write time", &c.WriteTime},
	} {
		if *f.dst, err = a.uint(f.name, 64); err != nil {
			return c, err
		}
	}
	if c.InFlight, err = a.int("in flight", 64); err != nil {
		return c, err
	}
	for _, f := range []struct {
		name string
		dst  *uint64
	}{
		{"io time", &c.IOTime},
		{"weighted io time", &c.WeightedTime},
		{"read active time", &c.ReadActiveTime},
		{"write active time", &c.WriteActiveTime},
	} {
		if *f.dst, err = a.uint(f.name, 64); err != nil {
			return c, err
		}
	}
	if a.remaining() == 1 {
		h, _ := a.next("histogram")
		if c.Histogram, err = parseStatsNumbers(a, "histogram", h, ":"); err != nil {
			return c, err
		}
		if len(c.Histogram) < 2 {
			return c, a.fail("histogram", h, errors.New("want at least 2 counts"))
		}
	}
	return c, a.done()
}

// parseSectorRange consumes "<start>+<length>".
func parseSectorRange(a *argReader, arg string) (start, length uint64, err error) {
	s, err := a.next(arg)
	if err != nil {
		return 0, 0, err
	}
	ss, ls, ok := strings.Cut(s, "+")
	if !ok {
		return 0, 0, a.fail(arg, s, errors.New("want <start>+<length>"))
	}
	if start, err = strconv.ParseUint(ss, 10, 64); err != nil {
		return 0, 0, a.fail(arg, s, numErr(err))
	}
	if length, err = strconv.ParseUint(ls, 10, 64); err != nil {
		return 0, 0, a.fail(arg, s, numErr(err))
	}
	return start, length, nil
}

// parseStatsNumbers parses a sep-separated list of unsigned decimals.
func parseStatsNumbers(a *argReader, arg, s, sep string) ([]uint64, error) {
	parts := strings.Split(s, sep)
	out := make([]uint64, len(parts))
	for i, p := range parts {
		v, err := strconv.ParseUint(p, 10, 64)
		if err != nil {
			return nil, a.fail(arg, s, numErr(err))
		}
		out[i] = v
	}
	return out, nil
}
