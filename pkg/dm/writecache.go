// SPDX-License-Identifier: Apache-2.0

package dm

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"
)

// dm-writecache modes (the first constructor argument).
const (
	WritecacheSSD  byte = 's'
	WritecachePMEM byte = 'p'
)

// Kernel limits checked by WritecacheParams.Validate (writecache_ctr).
const (
	writecacheMaxAutocommitMs = 3600000
	writecacheMaxAgeMs        = 86400000
	writecacheMaxPauseMs      = 60000
	writecacheDefaultHighWM   = 50
	writecacheDefaultLowWM    = 45
)

// WritecacheParams are the constructor parameters of a dm-writecache
// target. Optional arguments are set when their pointer is non-nil (or
// their bool true); unset ones take the kernel's defaults.
type WritecacheParams struct {
	Mode          byte   // WritecacheSSD ('s') or WritecachePMEM ('p'); 0 prints as 's'
	Origin, Cache string // path or "major:minor"
	BlockSize     uint32 // bytes

	HighWatermark, LowWatermark *int // percent: "high_watermark N", "low_watermark N"
	WritebackJobs               *uint64
	AutocommitBlocks            *uint64
	AutocommitTimeMs            *uint64 // "autocommit_time"
	MaxAgeMs                    *uint64 // "max_age"
	PauseWritebackMs            *uint64 // "pause_writeback" (SSD mode only)
	StartSector                 *uint64 // on the cache device
	Cleaner                     bool
	FUA                         *bool // "fua" / "nofua" (pmem mode only)
	MetadataOnly                bool
}

// Watermarks returns the percent of the cache in use at which write-back
// starts and stops under these parameters: the ones set, dm-writecache's
// defaults for the others.
func (p WritecacheParams) Watermarks() (high, low int) {
	high, low = writecacheDefaultHighWM, writecacheDefaultLowWM
	if p.HighWatermark != nil {
		high = *p.HighWatermark
	}
	if p.LowWatermark != nil {
		low = *p.LowWatermark
	}
	return high, low
}

// String returns
//
//	<mode> <origin> <cache> <block size> <#opt args> <opt args...>
//
// with the optional arguments in the order the kernel prints them in its
// table, so that String of a parsed kernel table line gives that line back.
func (p WritecacheParams) String() string {
	var opts []string
	num := func(key string, v *uint64) {
		if v != nil {
			opts = append(opts, key, utoa(*v))
		}
	}
	pct := func(key string, v *int) {
		if v != nil {
			opts = append(opts, key, strconv.Itoa(*v))
		}
	}
	num("start_sector", p.StartSector)
	pct("high_watermark", p.HighWatermark)
	pct("low_watermark", p.LowWatermark)
	num("writeback_jobs", p.WritebackJobs)
	num("autocommit_blocks", p.AutocommitBlocks)
	num("autocommit_time", p.AutocommitTimeMs)
	num("max_age", p.MaxAgeMs)
	if p.Cleaner {
		opts = append(opts, "cleaner")
	}
	if p.FUA != nil {
		if *p.FUA {
			opts = append(opts, "fua")
		} else {
			opts = append(opts, "nofua")
		}
	}
	if p.MetadataOnly {
		opts = append(opts, "metadata_only")
	}
	num("pause_writeback", p.PauseWritebackMs)

	mode := p.Mode
	if mode == 0 {
		mode = WritecacheSSD
	}
	fields := append([]string{string(mode), p.Origin, p.Cache, utoa(uint64(p.BlockSize)), strconv.Itoa(len(opts))}, opts...)
	return strings.Join(fields, " ")
}

// Target returns a "writecache" target over [start, start+length).
func (p WritecacheParams) Target(start, length uint64) Target {
	return Target{Start: start, Length: length, Type: "writecache", Params: p.String()}
}

// Equivalent reports whether p and o build the same write cache once canon
// has resolved the device references: mode, devices, block size and every
// option, cleaner included (a cleaner left on is drift).
func (p WritecacheParams) Equivalent(o WritecacheParams, canon DeviceCanon) (bool, error) {
	if err := canonDevices(canon, &p.Origin, &p.Cache, &o.Origin, &o.Cache); err != nil {
		return false, err
	}
	return reflect.DeepEqual(p, o), nil
}

// ParseWritecacheParams parses the parameters of a writecache target. Option
// keywords are case-insensitive, as in the kernel; a repeated option keeps
// its last value. Semantic limits are checked by Validate, not here.
//
// Grammar (drivers/md/dm-writecache.c, writecache_ctr;
// Documentation/admin-guide/device-mapper/writecache.rst):
//
//	<mode> <origin dev> <cache dev> <block size> <#opt args> [<opt arg>]*
//
//	mode:        s (SSD) | p (persistent memory)
//	origin dev:  the slow device being cached
//	cache dev:   the SSD or pmem device
//	block size:  bytes, a power of two from 512 to the page size
//	#opt args:   number of optional arguments that follow; an option
//	             with a value counts as two
//	opt arg:     start_sector <n>       | high_watermark <pct>
//	           | low_watermark <pct>    | writeback_jobs <n>
//	           | autocommit_blocks <n>  | autocommit_time <ms>
//	           | max_age <ms>           | pause_writeback <ms>
//	           | cleaner | fua | nofua  | metadata_only
func ParseWritecacheParams(s string) (WritecacheParams, error) {
	r := newArgReader("writecache params", s)
	var p WritecacheParams
	mode, err := r.next("mode")
	if err != nil {
		return WritecacheParams{}, err
	}
	switch strings.ToLower(mode) {
	case "s":
		p.Mode = WritecacheSSD
	case "p":
		p.Mode = WritecachePMEM
	default:
		return WritecacheParams{}, r.fail("mode", mode, errors.New("want s or p"))
	}
	if p.Origin, err = r.next("origin device"); err != nil {
		return WritecacheParams{}, err
	}
	if p.Cache, err = r.next("cache device"); err != nil {
		return WritecacheParams{}, err
	}
	bs, err := r.uint("block size", 32)
	if err != nil {
		return WritecacheParams{}, err
	}
	p.BlockSize = uint32(bs)
	n, err := r.count("optional argument count")
	if err != nil {
		return WritecacheParams{}, err
	}
	if err := p.parseOptions(r.sub(n)); err != nil {
		return WritecacheParams{}, err
	}
	if err := r.done(); err != nil {
		return WritecacheParams{}, err
	}
	return p, nil
}

// parseOptions parses the optional-argument group, one option per call of
// the matching helper.
func (p *WritecacheParams) parseOptions(o *argReader) error {
	u32 := func(key string) (*uint64, error) {
		v, err := o.uint(key, 32)
		if err != nil {
			return nil, err
		}
		return &v, nil
	}
	for o.remaining() > 0 {
		key, _ := o.next("optional argument")
		var err error
		switch strings.ToLower(key) {
		case "start_sector":
			var v uint64
			if v, err = o.uint("start_sector", 64); err == nil {
				p.StartSector = &v
			}
		case "high_watermark":
			p.HighWatermark, err = parsePercent(o, "high_watermark")
		case "low_watermark":
			p.LowWatermark, err = parsePercent(o, "low_watermark")
		case "writeback_jobs":
			p.WritebackJobs, err = u32("writeback_jobs")
		case "autocommit_blocks":
			p.AutocommitBlocks, err = u32("autocommit_blocks")
		case "autocommit_time":
			p.AutocommitTimeMs, err = u32("autocommit_time")
		case "max_age":
			p.MaxAgeMs, err = u32("max_age")
		case "pause_writeback":
			p.PauseWritebackMs, err = u32("pause_writeback")
		case "cleaner":
			p.Cleaner = true
		case "fua":
			t := true
			p.FUA = &t
		case "nofua":
			f := false
			p.FUA = &f
		case "metadata_only":
			p.MetadataOnly = true
		default:
			return o.fail("optional argument", key, errors.New("unknown"))
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func parsePercent(o *argReader, key string) (*int, error) {
	v, err := o.int(key, 32)
	if err != nil {
		return nil, err
	}
	i := int(v)
	return &i, nil
}

// Validate checks the limits writecache_ctr enforces: mode, devices,
// block size (power of two, 512 bytes to the page size), watermarks within
// 0-100 with high >= low (unset ones count as the defaults 50 and 45),
// 32-bit counters, autocommit_time <= 1 h, max_age <= 24 h,
// pause_writeback <= 60 s and SSD mode only, fua/nofua pmem mode only.
func (p WritecacheParams) Validate() error {
	const what = "writecache params"
	fail := func(format string, a ...any) error {
		return fmt.Errorf(what+": "+format, a...)
	}
	if p.Mode != WritecacheSSD && p.Mode != WritecachePMEM {
		return fail("mode %q: want 's' or 'p'", p.Mode)
	}
	if err := validateDevice(what, "origin device", p.Origin); err != nil {
		return err
	}
	if err := validateDevice(what, "cache device", p.Cache); err != nil {
		return err
	}
	if bs := p.BlockSize; bs < 512 || bs&(bs-1) != 0 || int(bs) > os.Getpagesize() {
		return fail("block size %d: want a power of two from 512 to the page size (%d)", bs, os.Getpagesize())
	}
	for _, wm := range []struct {
		name string
		v    *int
	}{{"high_watermark", p.HighWatermark}, {"low_watermark", p.LowWatermark}} {
		if wm.v != nil && (*wm.v < 0 || *wm.v > 100) {
			return fail("%s %d: want 0 to 100", wm.name, *wm.v)
		}
	}
	if high, low := p.Watermarks(); high < low {
		return fail("high_watermark %d is below low_watermark %d", high, low)
	}
	for _, lim := range []struct {
		name string
		v    *uint64
		max  uint64
	}{
		{"writeback_jobs", p.WritebackJobs, 1<<32 - 1},
		{"autocommit_blocks", p.AutocommitBlocks, 1<<32 - 1},
		{"autocommit_time", p.AutocommitTimeMs, writecacheMaxAutocommitMs},
		{"max_age", p.MaxAgeMs, writecacheMaxAgeMs},
		{"pause_writeback", p.PauseWritebackMs, writecacheMaxPauseMs},
	} {
		if lim.v != nil && *lim.v > lim.max {
			return fail("%s %d: max %d", lim.name, *lim.v, lim.max)
		}
	}
	if p.Mode == WritecachePMEM && p.PauseWritebackMs != nil {
		return fail("pause_writeback is for SSD mode only")
	}
	if p.Mode == WritecacheSSD && p.FUA != nil {
		return fail("fua/nofua are for pmem mode only")
	}
	return nil
}

// WritecacheStatus is the status line of a dm-writecache target.
type WritecacheStatus struct {
	// Error is 0, or the negative errno of the first I/O error. After an
	// error dm-writecache fails every later write and flush.
	Error           int64  `json:"error"`
	TotalBlocks     uint64 `json:"total_blocks"` // cache blocks
	FreeBlocks      uint64 `json:"free_blocks"`
	WritebackBlocks uint64 `json:"writeback_blocks"` // blocks being written back now

	// Counters since creation or the last "clear_stats" message; valid
	// when HasStats (target version 1.6 and later).
	Reads                uint64 `json:"reads"`
	ReadHits             uint64 `json:"read_hits"`
	Writes               uint64 `json:"writes"`
	WriteHitsUncommitted uint64 `json:"write_hits_uncommitted"`
	WriteHitsCommitted   uint64 `json:"write_hits_committed"`
	WritesAround         uint64 `json:"writes_around"`   // bypassed the cache
	WritesAllocate       uint64 `json:"writes_allocate"` // allocated a cache block
	WritesBlocked        uint64 `json:"writes_blocked"`  // waited on the freelist
	Flushes              uint64 `json:"flushes"`
	Discards             uint64 `json:"discards"`
	HasStats             bool   `json:"has_stats"`
}

// DirtyBlocks returns the blocks not yet on the origin: TotalBlocks -
// FreeBlocks. dm-writecache does not cache reads and frees an entry once it
// is written back, so every used block is dirty (including the ones under
// writeback).
func (s WritecacheStatus) DirtyBlocks() uint64 {
	if s.FreeBlocks > s.TotalBlocks {
		return 0
	}
	return s.TotalBlocks - s.FreeBlocks
}

// writecacheStatsVersion is the first dm-writecache version that prints
// the ten counters (Linux 5.15; 1.5.0 still prints four fields).
func writecacheStatsVersion() Version { return Version{1, 6, 0} }

// ParseWritecacheStatus parses the status text of a writecache target. v
// is the writecache target version (Client.TargetVersions): from 1.6.0 the
// line has 14 fields, before it 4; any other count is an error. A zero v
// (version unknown) accepts either.
//
// Grammar (drivers/md/dm-writecache.c, writecache_status, STATUSTYPE_INFO):
//
//	<error> <#blocks> <#free blocks> <#blocks under writeback>
//	[<#reads> <#read hits> <#writes> <#write hits uncommitted>
//	 <#write hits committed> <#writes around> <#writes allocate>
//	 <#writes blocked on freelist> <#flushes> <#discards>]   (1.6.0+)
func ParseWritecacheStatus(params string, v Version) (WritecacheStatus, error) {
	r := newArgReader("writecache status", params)
	n := r.remaining()
	switch {
	case v.IsZero():
		if n != 4 && n != 14 {
			return WritecacheStatus{}, r.fail("field count", strconv.Itoa(n), errors.New("want 4 or 14"))
		}
	case v.AtLeast(writecacheStatsVersion()):
		if n != 14 {
			return WritecacheStatus{}, r.fail("field count", strconv.Itoa(n), fmt.Errorf("want 14 for target version %s", v))
		}
	default:
		if n != 4 {
			return WritecacheStatus{}, r.fail("field count", strconv.Itoa(n), fmt.Errorf("want 4 for target version %s", v))
		}
	}
	var s WritecacheStatus
	var err error
	if s.Error, err = r.int("error", 64); err != nil {
		return WritecacheStatus{}, err
	}
	fields := []struct {
		name string
		dst  *uint64
	}{
		{"total blocks", &s.TotalBlocks},
		{"free blocks", &s.FreeBlocks},
		{"writeback blocks", &s.WritebackBlocks},
		{"reads", &s.Reads},
		{"read hits", &s.ReadHits},
		{"writes", &s.Writes},
		{"write hits uncommitted", &s.WriteHitsUncommitted},
		{"write hits committed", &s.WriteHitsCommitted},
		{"writes around", &s.WritesAround},
		{"writes allocate", &s.WritesAllocate},
		{"writes blocked", &s.WritesBlocked},
		{"flushes", &s.Flushes},
		{"discards", &s.Discards},
	}
	if n == 4 {
		fields = fields[:3]
	}
	for _, f := range fields {
		if *f.dst, err = r.uint(f.name, 64); err != nil {
			return WritecacheStatus{}, err
		}
	}
	s.HasStats = n == 14
	return s, nil
}
