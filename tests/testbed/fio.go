// SPDX-License-Identifier: Apache-2.0

package testbed

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Durability is what a completed write promises, i.e. which of the block
// layer's ordering tools the job uses. The choice decides what a write
// cache has to do per write, so every write job names one.
type Durability int

const (
	// Direct is O_DIRECT alone: the write reached the device, which may
	// still hold it in a volatile cache (the way most SSDs ack writes).
	Direct Durability = iota
	// DSync is O_DIRECT|O_SYNC: each write is sent with REQ_FUA. On a raw
	// block device the kernel then also flushes the device before the
	// write returns (generic_write_sync), like an fsync.
	DSync
	// Fsync is O_DIRECT plus fsync(2) after every write: a write then a
	// REQ_PREFLUSH, what a database commit does with
	// innodb_flush_method=O_DIRECT.
	Fsync
	// DataSync is O_DIRECT|O_DSYNC. On a file in ext4 or XFS (iomap) an
	// overwrite of allocated blocks is then sent with REQ_FUA alone, no
	// flush: the cheapest durable write there is
	// (innodb_flush_method=O_DSYNC). On a raw block device it is DSync.
	DataSync
)

// String names the durability in fio's terms.
func (d Durability) String() string {
	switch d {
	case Direct:
		return "O_DIRECT"
	case DSync:
		return "O_DIRECT|O_SYNC"
	case Fsync:
		return "O_DIRECT + fsync"
	case DataSync:
		return "O_DIRECT|O_DSYNC"
	}
	return fmt.Sprintf("Durability(%d)", int(d))
}

// Job is one fio job on a guest block device: O_DIRECT always (the page
// cache would measure guest RAM), time based. At queue depth 1 it uses the
// psync engine, one pread/pwrite at a time the way a database thread does
// its I/O; fio's sync latencies are only right that way (with libaio, an
// fsync's reported latency includes the write before it). Deeper queues
// use libaio.
type Job struct {
	Name      string
	Device    string // guest block device
	RW        string // fio rw: randwrite, randread, randrw...
	BlockSize int    // bytes; default 4096
	// BlockSplit, when set, is a fio bssplit ("4k/60:64k/40"): a mix of
	// request sizes by share of requests; BlockSize is then ignored.
	BlockSplit string
	IODepth    int // default 1
	// Engine is the fio ioengine; empty: psync at queue depth 1, libaio
	// deeper. libaio at QD1 makes O_DSYNC writes asynchronous: the kernel
	// then sends them as FUA writes with no flush after them.
	Engine    string
	RWMixRead int           // percent reads, for randrw
	Offset    int64         // first byte of the region the job touches
	Size      int64         // bytes of the region; 0: to the end of the device
	Runtime   time.Duration // measured time, whole seconds
	Ramp      time.Duration // run before measuring (fio ramp_time)
	Writes    Durability
	// Once makes the job one pass over its region (no time_based): it
	// ends when every block has been touched once, or at Runtime.
	Once bool
	// SplitRegion, in an Interleaved run, gives slice k of every device
	// its own k-th part of the region, so that no slice touches a block
	// an earlier slice wrote: with fio's random map (no block twice per
	// pass), every write of the run is then a first write to its block.
	SplitRegion bool
}

func (j Job) withDefaults() Job {
	if j.BlockSize == 0 {
		j.BlockSize = 4096
	}
	if j.IODepth == 0 {
		j.IODepth = 1
	}
	return j
}

// Args returns the fio command line for the job. Latency percentiles are
// taken over the total latency (submission to completion, lat_ns), which
// is what the application waits for; unified_rw_reporting=both adds a
// "mixed" section that holds the numbers over reads and writes together;
// json+ adds the latency histograms that Merge needs.
func (j Job) Args() ([]string, error) {
	if j.Device == "" {
		return nil, fmt.Errorf("fio job %s: no Device", j.Name)
	}
	args, err := j.globalArgs()
	if err != nil {
		return nil, err
	}
	return append(args, "--name="+j.Name, "--filename="+j.Device), nil
}

// globalArgs are the options that do not name a job or a device.
func (j Job) globalArgs() ([]string, error) {
	j = j.withDefaults()
	if j.Name == "" || j.RW == "" {
		return nil, errors.New("fio job: Name and RW are required")
	}
	if j.Runtime < time.Second || j.Runtime%time.Second != 0 || j.Ramp%time.Second != 0 {
		return nil, fmt.Errorf("fio job %s: runtime %v and ramp %v: want whole seconds, runtime at least 1s", j.Name, j.Runtime, j.Ramp)
	}
	args := []string{
		"fio", "--ioengine=" + j.engine(), "--direct=1",
		"--rw=" + j.RW, "--bs=" + strconv.Itoa(j.BlockSize), "--iodepth=" + strconv.Itoa(j.IODepth),
		"--runtime=" + strconv.Itoa(int(j.Runtime/time.Second)),
		"--offset=" + strconv.FormatInt(j.Offset, 10),
		"--lat_percentiles=1", "--percentile_list=" + percentileList,
		"--unified_rw_reporting=both", "--output-format=json+",
	}
	if !j.Once {
		args = append(args, "--time_based")
	}
	if j.Size > 0 {
		args = append(args, "--size="+strconv.FormatInt(j.Size, 10))
	}
	if j.BlockSplit != "" {
		args = append(args, "--bssplit="+j.BlockSplit)
	}
	if j.Ramp > 0 {
		args = append(args, "--ramp_time="+strconv.Itoa(int(j.Ramp/time.Second)))
	}
	if j.RWMixRead > 0 {
		args = append(args, "--rwmixread="+strconv.Itoa(j.RWMixRead))
	}
	switch j.Writes {
	case Direct:
	case DSync:
		args = append(args, "--sync=1")
	case Fsync:
		args = append(args, "--fsync=1")
	case DataSync:
		args = append(args, "--sync=dsync")
	default:
		return nil, fmt.Errorf("fio job %s: unknown durability %d", j.Name, j.Writes)
	}
	return args, nil
}

// percentileList is what fio reports, and what Merge recomputes
// (reportedPercentiles).
const percentileList = "50:99:99.9"

func reportedPercentiles() []float64 { return []float64{50, 99, 99.9} }

func (j Job) engine() string {
	if j.Engine != "" {
		return j.Engine
	}
	if j.IODepth <= 1 {
		return "psync"
	}
	return "libaio"
}

// Describe says in words what the job does, e.g.
// "4 KiB randwrite QD1 O_DIRECT + fsync over 32 MiB".
func (j Job) Describe() string {
	j = j.withDefaults()
	size := FormatBytes(int64(j.BlockSize))
	if j.BlockSplit != "" {
		size = "bssplit " + j.BlockSplit
	}
	s := fmt.Sprintf("%s %s QD%d", size, j.RW, j.IODepth)
	if j.Engine != "" {
		s += " " + j.Engine
	}
	if j.RWMixRead > 0 {
		s += fmt.Sprintf(" %d/%d read/write", j.RWMixRead, 100-j.RWMixRead)
	}
	if j.RW != "randread" && j.RW != "read" && j.RWMixRead < 100 {
		s += " " + j.Writes.String()
	}
	if j.Size > 0 {
		s += " over " + FormatBytes(j.Size)
	}
	return s
}

// Fio runs job in the guest and parses its result.
func (b *Bed) Fio(ctx context.Context, job Job) (Result, error) {
	args, err := job.Args()
	if err != nil {
		return Result{}, err
	}
	// fio's own start-up and the ramp come on top of the runtime; under
	// TCG, opening the device and laying out the job take seconds.
	ctx, cancel := context.WithTimeout(ctx, job.Runtime+job.Ramp+2*time.Minute)
	defer cancel()
	out, err := b.Run(ctx, args...)
	if err != nil {
		return Result{}, fmt.Errorf("fio %s on %s: %w", job.Name, job.Device, err)
	}
	res, err := ParseFio([]byte(out))
	if err != nil {
		return Result{}, fmt.Errorf("fio %s on %s: %w", job.Name, job.Device, err)
	}
	if len(res) != 1 {
		return Result{}, fmt.Errorf("fio %s on %s: %d job results, want 1", job.Name, job.Device, len(res))
	}
	return res[0], nil
}

// Interleaved runs one job on several devices in a single fio process:
// slices time slices per device, one device after the other (stonewall),
// in an order rotated by one device per slice. On a host whose load
// drifts (other VMs, TCG), devices measured seconds apart see the same
// conditions, which back-to-back runs minutes apart do not. It returns one
// InterleavedResult per device, in the order of devices. job.Device,
// Runtime and Ramp are ignored.
func (b *Bed) Interleaved(ctx context.Context, job Job, devices []string, slices int, slice time.Duration) ([]InterleavedResult, error) {
	args, err := job.InterleavedArgs(devices, slices, slice)
	if err != nil {
		return nil, err
	}
	total := time.Duration(slices*len(devices)) * slice
	ctx, cancel := context.WithTimeout(ctx, total+time.Duration(slices*len(devices))*5*time.Second+2*time.Minute)
	defer cancel()
	out, err := b.Run(ctx, args...)
	if err != nil {
		return nil, fmt.Errorf("fio %s: %w", job.Name, err)
	}
	results, err := ParseFio([]byte(out))
	if err != nil {
		return nil, fmt.Errorf("fio %s: %w", job.Name, err)
	}
	return collectSlices(job.Name, results, devices, slices)
}

// collectSlices sorts the results of an interleaved fio run by device (or
// job) d and slice, and merges each one's slices.
func collectSlices(name string, results []Result, devices []string, slices int) ([]InterleavedResult, error) {
	byName := make(map[string]Result, len(results))
	for _, r := range results {
		byName[r.Job] = r
	}
	res := make([]InterleavedResult, len(devices))
	for d, dev := range devices {
		res[d].Device = dev
		for s := 0; s < slices; s++ {
			r, ok := byName[sliceName(name, s, d)]
			if !ok {
				return nil, fmt.Errorf("fio %s: no result for job %s", name, sliceName(name, s, d))
			}
			res[d].Slices = append(res[d].Slices, r)
		}
		var err error
		if res[d].Merged, err = Merge(res[d].Slices); err != nil {
			return nil, fmt.Errorf("fio %s on %s: %w", name, dev, err)
		}
	}
	return res, nil
}

// InterleavedJobs is Interleaved for jobs that differ in more than their
// device (durability, engine, queue depth): slices time slices per job,
// one job after the other, the order rotated by one job per slice, every
// job carrying its own options. The result names jobs[0].Name; it returns
// one InterleavedResult per job, in the order of jobs. Runtime and Ramp
// are ignored, SplitRegion is not supported.
func (b *Bed) InterleavedJobs(ctx context.Context, jobs []Job, slices int, slice time.Duration) ([]InterleavedResult, error) {
	args, err := InterleavedJobsArgs(jobs, slices, slice)
	if err != nil {
		return nil, err
	}
	n := time.Duration(slices * len(jobs))
	ctx, cancel := context.WithTimeout(ctx, n*slice+n*5*time.Second+2*time.Minute)
	defer cancel()
	name := jobs[0].Name
	out, err := b.Run(ctx, args...)
	if err != nil {
		return nil, fmt.Errorf("fio %s: %w", name, err)
	}
	results, err := ParseFio([]byte(out))
	if err != nil {
		return nil, fmt.Errorf("fio %s: %w", name, err)
	}
	devices := make([]string, len(jobs))
	for i, j := range jobs {
		devices[i] = j.Device
	}
	return collectSlices(name, results, devices, slices)
}

// InterleavedJobsArgs returns the fio command line of an InterleavedJobs
// run: no global options but the output format, then per slice and job
// the job's own options after its --name (fio applies options given after
// --name to that job only), with stonewall and the slice's random seed as
// in InterleavedArgs. Job k of slice s is named after jobs[0] as device k.
func InterleavedJobsArgs(jobs []Job, nslices int, slice time.Duration) ([]string, error) {
	if len(jobs) == 0 || nslices < 1 {
		return nil, errors.New("fio: want jobs and at least one slice")
	}
	name := jobs[0].Name
	per := make([][]string, len(jobs))
	for i, j := range jobs {
		if j.Device == "" {
			return nil, fmt.Errorf("fio %s: job %d has no Device", name, i)
		}
		if j.SplitRegion {
			return nil, fmt.Errorf("fio %s: SplitRegion is for Interleaved runs", name)
		}
		j.Name, j.Runtime, j.Ramp = name, slice, 0
		a, err := j.globalArgs()
		if err != nil {
			return nil, err
		}
		per[i] = slices.DeleteFunc(a[1:], func(s string) bool { return strings.HasPrefix(s, "--output-format=") })
	}
	args := []string{"fio", "--output-format=json+"}
	for s := 0; s < nslices; s++ {
		for i := range jobs {
			d := (i + s) % len(jobs)
			args = append(args, "--name="+sliceName(name, s, d), "--filename="+jobs[d].Device)
			args = append(args, per[d]...)
			args = append(args, "--stonewall", "--randseed="+strconv.Itoa(s+1))
		}
	}
	return args, nil
}

// InterleavedArgs returns the fio command line of an Interleaved run:
// the job's options as global options, then one job per slice and device,
// each with stonewall (it starts when the one before has finished). Slice
// k seeds fio's random generator with k+1: every device replays the same
// offsets within a slice (a fair comparison), and slices differ (with
// fio's default, every job of a device would replay the first slice's).
func (j Job) InterleavedArgs(devices []string, slices int, slice time.Duration) ([]string, error) {
	if len(devices) == 0 || slices < 1 {
		return nil, fmt.Errorf("fio %s: want devices and at least one slice", j.Name)
	}
	j = j.withDefaults()
	part := j.Size / int64(slices)
	if j.SplitRegion && (part <= 0 || part%int64(j.BlockSize) != 0) {
		return nil, fmt.Errorf("fio %s: SplitRegion: size %d does not split into %d parts of whole %d-byte blocks", j.Name, j.Size, slices, j.BlockSize)
	}
	j.Runtime, j.Ramp = slice, 0
	args, err := j.globalArgs()
	if err != nil {
		return nil, err
	}
	for s := 0; s < slices; s++ {
		for i := range devices {
			d := (i + s) % len(devices)
			args = append(args, "--name="+sliceName(j.Name, s, d), "--filename="+devices[d],
				"--stonewall", "--randseed="+strconv.Itoa(s+1))
			if j.SplitRegion {
				args = append(args, "--offset="+strconv.FormatInt(j.Offset+int64(s)*part, 10), "--size="+strconv.FormatInt(part, 10))
			}
		}
	}
	return args, nil
}

// sliceName names the job of slice s of device d.
func sliceName(job string, s, d int) string { return fmt.Sprintf("%s.s%d.d%d", job, s, d) }

// InterleavedResult is one device's share of an Interleaved run.
type InterleavedResult struct {
	Device string
	Slices []Result // in time order
	Merged Result   // all slices as one run
}

// Result is what one fio job measured.
type Result struct {
	Job     string
	Runtime time.Duration // measured time (fio's job_runtime)
	// Read and Write are per direction; Total is over both (fio's "mixed"
	// section, or the one direction that did I/O when fio printed none).
	Read, Write, Total Stats
	// Sync holds the fsync(2) calls of a Fsync job (fio's "sync" section):
	// their count and latency, IOPS unset.
	Sync Stats
}

// Stats are the figures of one direction of a job.
type Stats struct {
	IOs         uint64
	IOPS        float64
	BytesPerSec float64
	Mean        time.Duration // mean total latency (lat_ns)
	Max         time.Duration // the slowest I/O's total latency
	// Percentiles of the total latency (lat_ns; clat_ns when fio printed
	// no total percentiles), keyed by percent: 50, 99, 99.9.
	Percentiles map[float64]time.Duration
	// Hist is the latency histogram behind Percentiles (fio's json+
	// "bins": bucket value → count), nil when fio printed none.
	Hist map[time.Duration]uint64
	// Clat is the completion latency (clat_ns): from submission accepted
	// to completion, without the time io_submit took. For psync it is the
	// whole call, the same as the total latency.
	Clat Latency
}

// Latency is one latency distribution of fio's: mean, percentiles (50,
// 99, 99.9) and the json+ histogram behind them (nil when fio printed
// none).
type Latency struct {
	Mean        time.Duration
	Max         time.Duration
	Percentiles map[float64]time.Duration
	Hist        map[time.Duration]uint64
}

// P99 is the 99th percentile, 0 when unknown.
func (l Latency) P99() time.Duration { return l.Percentiles[99] }

// P99 is the 99th percentile latency, 0 when fio did not report it.
func (s Stats) P99() time.Duration { return s.Percentiles[99] }

// Commit is the latency of one durable write as the application sees it:
// for a Fsync job the write plus its fsync (means add exactly; the 99th
// percentile is the sum of the two, an approximation: fio reports the two
// distributions, not their sum), else Total unchanged.
func (r Result) Commit() Stats {
	if r.Sync.IOs == 0 {
		return r.Total
	}
	s := r.Total
	s.Mean += r.Sync.Mean
	s.Percentiles = map[float64]time.Duration{}
	for p, d := range r.Total.Percentiles {
		if sd, ok := r.Sync.Percentiles[p]; ok {
			s.Percentiles[p] = d + sd
		}
	}
	return s
}

// fio's JSON output (--output-format=json), the parts read here.
type fioOutput struct {
	Version string   `json:"fio version"`
	Jobs    []fioJob `json:"jobs"`
}

type fioJob struct {
	Name       string   `json:"jobname"`
	Error      int      `json:"error"`
	JobRuntime int64    `json:"job_runtime"` // ms
	Read       *fioDir  `json:"read"`
	Write      *fioDir  `json:"write"`
	Mixed      *fioDir  `json:"mixed"`
	Sync       *fioSync `json:"sync"`
}

type fioDir struct {
	TotalIOs uint64  `json:"total_ios"`
	IOPS     float64 `json:"iops"`
	BW       float64 `json:"bw_bytes"`
	Clat     fioLat  `json:"clat_ns"`
	Lat      fioLat  `json:"lat_ns"`
}

type fioSync struct {
	TotalIOs uint64 `json:"total_ios"`
	Lat      fioLat `json:"lat_ns"`
}

type fioLat struct {
	N          uint64             `json:"N"`
	Mean       float64            `json:"mean"`
	Max        float64            `json:"max"`
	Percentile map[string]float64 `json:"percentile"`
	Bins       map[string]uint64  `json:"bins"` // json+ only
}

// ParseFio parses fio's --output-format=json output, one Result per job.
// Lines fio prints before the JSON document (warnings such as "fio: file
// hash not empty on exit") are skipped. A job that reports an error is an
// error.
func ParseFio(data []byte) ([]Result, error) {
	start := bytes.Index(data, []byte("\n{"))
	switch {
	case bytes.HasPrefix(data, []byte("{")):
		start = 0
	case start >= 0:
		start++
	default:
		return nil, errors.New("fio output: no JSON document")
	}
	var out fioOutput
	if err := json.Unmarshal(data[start:], &out); err != nil {
		return nil, fmt.Errorf("fio output: %w", err)
	}
	if len(out.Jobs) == 0 {
		return nil, errors.New("fio output: no jobs")
	}
	var results []Result
	for _, j := range out.Jobs {
		if j.Error != 0 {
			return nil, fmt.Errorf("fio job %s: error %d", j.Name, j.Error)
		}
		r := Result{Job: j.Name, Runtime: time.Duration(j.JobRuntime) * time.Millisecond}
		var err error
		if r.Read, err = j.Read.stats(); err != nil {
			return nil, fmt.Errorf("fio job %s: read: %w", j.Name, err)
		}
		if r.Write, err = j.Write.stats(); err != nil {
			return nil, fmt.Errorf("fio job %s: write: %w", j.Name, err)
		}
		switch {
		case j.Mixed != nil:
			if r.Total, err = j.Mixed.stats(); err != nil {
				return nil, fmt.Errorf("fio job %s: mixed: %w", j.Name, err)
			}
		case r.Write.IOs == 0:
			r.Total = r.Read
		case r.Read.IOs == 0:
			r.Total = r.Write
		default:
			return nil, fmt.Errorf("fio job %s: reads and writes but no mixed section (want unified_rw_reporting=both)", j.Name)
		}
		if j.Sync != nil && j.Sync.TotalIOs > 0 {
			p, err := j.Sync.Lat.percentiles()
			if err != nil {
				return nil, fmt.Errorf("fio job %s: sync: %w", j.Name, err)
			}
			h, err := j.Sync.Lat.hist()
			if err != nil {
				return nil, fmt.Errorf("fio job %s: sync: %w", j.Name, err)
			}
			r.Sync = Stats{IOs: j.Sync.TotalIOs, Mean: nanos(j.Sync.Lat.Mean), Max: nanos(j.Sync.Lat.Max), Percentiles: p, Hist: h}
		}
		if r.Total.IOs == 0 {
			return nil, fmt.Errorf("fio job %s: no I/O completed", j.Name)
		}
		results = append(results, r)
	}
	return results, nil
}

func (d *fioDir) stats() (Stats, error) {
	if d == nil || d.TotalIOs == 0 {
		return Stats{}, nil
	}
	lat := d.Lat
	if len(lat.Percentile) == 0 {
		// Without lat_percentiles=1 fio reports percentiles of the
		// completion latency only; close enough for libaio at low depth.
		lat.Percentile, lat.Bins = d.Clat.Percentile, d.Clat.Bins
	}
	p, err := lat.percentiles()
	if err != nil {
		return Stats{}, err
	}
	h, err := lat.hist()
	if err != nil {
		return Stats{}, err
	}
	cp, err := d.Clat.percentiles()
	if err != nil {
		return Stats{}, err
	}
	ch, err := d.Clat.hist()
	if err != nil {
		return Stats{}, err
	}
	return Stats{IOs: d.TotalIOs, IOPS: d.IOPS, BytesPerSec: d.BW, Mean: nanos(d.Lat.Mean), Max: nanos(d.Lat.Max), Percentiles: p, Hist: h,
		Clat: Latency{Mean: nanos(d.Clat.Mean), Max: nanos(d.Clat.Max), Percentiles: cp, Hist: ch}}, nil
}

// hist converts json+ bins ({"48384": 2}) to a histogram.
func (l fioLat) hist() (map[time.Duration]uint64, error) {
	if len(l.Bins) == 0 {
		return nil, nil
	}
	h := make(map[time.Duration]uint64, len(l.Bins))
	for k, n := range l.Bins {
		ns, err := strconv.ParseInt(k, 10, 64)
		if err != nil || ns < 0 {
			return nil, fmt.Errorf("bad latency bin %q", k)
		}
		h[time.Duration(ns)] += n
	}
	return h, nil
}

// percentiles converts fio's {"99.000000": ns} map.
func (l fioLat) percentiles() (map[float64]time.Duration, error) {
	out := make(map[float64]time.Duration, len(l.Percentile))
	for k, ns := range l.Percentile {
		p, err := strconv.ParseFloat(strings.TrimSpace(k), 64)
		if err != nil || p <= 0 || p > 100 {
			return nil, fmt.Errorf("bad percentile key %q", k)
		}
		out[p] = nanos(ns)
	}
	return out, nil
}

func nanos(ns float64) time.Duration { return time.Duration(math.Round(ns)) }

// Merge combines results of the same job (time slices of one device) as
// if they were one run: counts and runtimes add, IOPS and bandwidth are
// totals over total runtime, means are weighted by I/O count, and
// percentiles are recomputed from the merged histograms, so they are
// exact (to fio's bucket precision), not averages of percentiles.
func Merge(rs []Result) (Result, error) {
	if len(rs) == 0 {
		return Result{}, errors.New("merge: no results")
	}
	out := Result{Job: rs[0].Job}
	for _, r := range rs {
		out.Runtime += r.Runtime
	}
	if out.Runtime <= 0 {
		return Result{}, errors.New("merge: zero runtime")
	}
	parts := func(f func(Result) Stats) []Stats {
		s := make([]Stats, len(rs))
		for i, r := range rs {
			s[i] = f(r)
		}
		return s
	}
	var err error
	if out.Read, err = mergeStats(parts(func(r Result) Stats { return r.Read }), out.Runtime); err != nil {
		return Result{}, fmt.Errorf("merge reads: %w", err)
	}
	if out.Write, err = mergeStats(parts(func(r Result) Stats { return r.Write }), out.Runtime); err != nil {
		return Result{}, fmt.Errorf("merge writes: %w", err)
	}
	if out.Total, err = mergeStats(parts(func(r Result) Stats { return r.Total }), out.Runtime); err != nil {
		return Result{}, fmt.Errorf("merge totals: %w", err)
	}
	if out.Sync, err = mergeStats(parts(func(r Result) Stats { return r.Sync }), out.Runtime); err != nil {
		return Result{}, fmt.Errorf("merge syncs: %w", err)
	}
	out.Sync.IOPS, out.Sync.BytesPerSec = 0, 0 // as ParseFio: syncs have counts and latencies only
	return out, nil
}

func mergeStats(parts []Stats, runtime time.Duration) (Stats, error) {
	var out Stats
	var latSum, clatSum, bytes float64
	clat := true // every part has a completion-latency histogram
	for _, p := range parts {
		if p.IOs == 0 {
			continue
		}
		if clat = clat && p.Clat.Hist != nil; clat {
			if out.Clat.Hist == nil {
				out.Clat.Hist = map[time.Duration]uint64{}
			}
			clatSum += float64(p.Clat.Mean) * float64(p.IOs)
			out.Clat.Max = max(out.Clat.Max, p.Clat.Max)
			for v, n := range p.Clat.Hist {
				out.Clat.Hist[v] += n
			}
		}
		if p.Hist == nil {
			return Stats{}, errors.New("a part has no latency histogram (want fio --output-format=json+)")
		}
		if out.Hist == nil {
			out.Hist = map[time.Duration]uint64{}
		}
		out.IOs += p.IOs
		out.Max = max(out.Max, p.Max)
		latSum += float64(p.Mean) * float64(p.IOs)
		if p.IOPS > 0 {
			bytes += p.BytesPerSec / p.IOPS * float64(p.IOs) // bytes per I/O × I/Os
		}
		for v, n := range p.Hist {
			out.Hist[v] += n
		}
	}
	if out.IOs == 0 {
		return Stats{}, nil
	}
	out.IOPS = float64(out.IOs) / runtime.Seconds()
	out.BytesPerSec = bytes / runtime.Seconds()
	out.Mean = time.Duration(math.Round(latSum / float64(out.IOs)))
	out.Percentiles = histPercentiles(out.Hist, reportedPercentiles())
	if clat {
		out.Clat.Mean = time.Duration(math.Round(clatSum / float64(out.IOs)))
		out.Clat.Percentiles = histPercentiles(out.Clat.Hist, reportedPercentiles())
	} else {
		out.Clat = Latency{}
	}
	return out, nil
}

// histPercentiles computes percentiles from a histogram the way fio does:
// the smallest bucket at which the cumulative count reaches p % of all.
func histPercentiles(h map[time.Duration]uint64, ps []float64) map[float64]time.Duration {
	vals := make([]time.Duration, 0, len(h))
	var total uint64
	for v, n := range h {
		vals = append(vals, v)
		total += n
	}
	slices.Sort(vals)
	out := make(map[float64]time.Duration, len(ps))
	for _, p := range ps {
		want := p / 100 * float64(total)
		var cum uint64
		for _, v := range vals {
			cum += h[v]
			if float64(cum) >= want {
				out[p] = v
				break
			}
		}
	}
	return out
}
