package testbed

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tidecache/tidecache/tests/vm/harness"
)

// What a device does second by second: fio's IOPS log of a job, and
// samples of the guest's state (a cache's dirty blocks) taken beside it,
// both stamped with the guest's clock so they line up.

// Timeline is a job's completed I/Os per second of its run, per direction:
// fio's write_iops_log averaged over one-second windows (log_avg_msec).
type Timeline struct {
	// Start is the guest's clock just before fio started; fio's own clock
	// starts when the job does, a fraction of a second later.
	Start  time.Time
	Points []IOPSPoint // one per second, in time order
}

// IOPSPoint is one second of a Timeline.
type IOPSPoint struct {
	At          time.Duration // end of the window, from the job's start
	Read, Write float64       // I/Os completed in the window, per second
}

// iopsLogDir is where FioTimeline has fio write its logs in the guest.
const iopsLogDir = harness.ScratchDir + "/fio-iops"

// FioTimeline runs job like Fio and also returns its IOPS second by
// second. A phase whose I/O stalls can run long past job.Runtime (fio
// waits for what is in flight): it may take job.Runtime + 10 minutes.
func (b *Bed) FioTimeline(ctx context.Context, job Job) (Result, Timeline, error) {
	args, err := job.Args()
	if err != nil {
		return Result{}, Timeline{}, err
	}
	prefix := path.Join(iopsLogDir, "job")
	args = append(args, "--write_iops_log="+prefix, "--log_avg_msec=1000")
	ctx, cancel := context.WithTimeout(ctx, job.Runtime+job.Ramp+10*time.Minute)
	defer cancel()
	fail := func(err error) (Result, Timeline, error) {
		return Result{}, Timeline{}, fmt.Errorf("fio %s on %s: %w", job.Name, job.Device, err)
	}
	script := `mkdir -p "$1" && rm -f "$1"/* && date +%s.%N && shift && exec "$@"`
	out, err := b.Run(ctx, append([]string{"sh", "-c", script, "sh", iopsLogDir}, args...)...)
	if err != nil {
		return fail(err)
	}
	first, _, _ := strings.Cut(out, "\n")
	start, err := ParseEpoch(first)
	if err != nil {
		return fail(fmt.Errorf("start time: %w", err))
	}
	res, err := ParseFio([]byte(out))
	if err != nil {
		return fail(err)
	}
	if len(res) != 1 {
		return fail(fmt.Errorf("%d job results, want 1", len(res)))
	}
	log, err := b.Run(ctx, "sh", "-c", `cat "$1"_iops.1.log && rm -f "$1"_iops.*.log`, "sh", prefix)
	if err != nil {
		return fail(err)
	}
	points, err := ParseIOPSLog(log)
	if err != nil {
		return fail(err)
	}
	return res[0], Timeline{Start: start, Points: points}, nil
}

// ParseIOPSLog reads fio's IOPS log with log_avg_msec=1000: lines of
// "msec, IOPS, direction, block size[, offset[, priority]]", direction 0
// for reads and 1 for writes. A one-second window with no line completed
// no I/O: it gets a point of zeros, so that a stall shows as one.
func ParseIOPSLog(log string) ([]IOPSPoint, error) {
	byMS := map[int64]*IOPSPoint{}
	var last int64
	for n, line := range strings.Split(strings.TrimSpace(log), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		f := strings.Split(line, ",")
		if len(f) < 4 {
			return nil, fmt.Errorf("fio IOPS log line %d %q: want at least 4 fields", n+1, line)
		}
		ms, err1 := strconv.ParseInt(strings.TrimSpace(f[0]), 10, 64)
		v, err2 := strconv.ParseFloat(strings.TrimSpace(f[1]), 64)
		dir, err3 := strconv.Atoi(strings.TrimSpace(f[2]))
		if err := errors.Join(err1, err2, err3); err != nil || ms < 0 || v < 0 || math.IsInf(v, 0) {
			return nil, fmt.Errorf("fio IOPS log line %d %q: %v", n+1, line, err)
		}
		// Windows end on whole seconds (fio logs at 1000, 2000... or
		// a few ms late).
		sec := (ms + 500) / 1000
		p := byMS[sec]
		if p == nil {
			p = &IOPSPoint{At: time.Duration(sec) * time.Second}
			byMS[sec] = p
		}
		switch dir {
		case 0:
			p.Read += v
		case 1:
			p.Write += v
		default:
			continue // trims and syncs are not drawn
		}
		last = max(last, sec)
	}
	var out []IOPSPoint
	for s := int64(1); s <= last; s++ {
		if p := byMS[s]; p != nil {
			out = append(out, *p)
		} else {
			out = append(out, IOPSPoint{At: time.Duration(s) * time.Second})
		}
	}
	return out, nil
}

// ParseEpoch reads the guest clock as `date +%s.%N` prints it.
func ParseEpoch(s string) (time.Time, error) {
	sec, frac, _ := strings.Cut(strings.TrimSpace(s), ".")
	n, err := strconv.ParseInt(sec, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is not seconds since the epoch", s)
	}
	var ns int64
	if frac != "" {
		frac = (frac + "000000000")[:9]
		if ns, err = strconv.ParseInt(frac, 10, 64); err != nil {
			return time.Time{}, fmt.Errorf("%q is not seconds since the epoch", s)
		}
	}
	return time.Unix(n, ns), nil
}

// Sampler runs a shell snippet in the guest about once per interval, in
// the background, until Stop: the state of a cache while fio runs beside
// it. Each sample is stamped with the guest's clock.
type Sampler struct {
	b    *Bed
	pid  string
	file string
}

// Sample is one run of a Sampler's snippet.
type Sample struct {
	At  time.Time
	Out string
}

// samplerDir holds the samplers' output in the guest.
const samplerDir = harness.ScratchDir + "/samplers"

// StartSampler starts running snippet (sh) every interval (whole or
// fractional seconds; the snippet's own time comes on top).
func (b *Bed) StartSampler(ctx context.Context, name, snippet string, interval time.Duration) (*Sampler, error) {
	if interval <= 0 || strings.ContainsAny(name, "/ \t\n") || name == "" {
		return nil, fmt.Errorf("testbed: sampler %q every %v: want a plain name and a positive interval", name, interval)
	}
	file := path.Join(samplerDir, name)
	script := `mkdir -p "$1" && (while :; do echo "@@ $(date +%s.%N)"; eval "$3"; sleep "$4"; done) >"$2" 2>&1 </dev/null & echo $!`
	out, err := b.Run(ctx, "sh", "-c", script, "sh", samplerDir, file, snippet, strconv.FormatFloat(interval.Seconds(), 'f', 3, 64))
	if err != nil {
		return nil, fmt.Errorf("testbed: start sampler %s: %w", name, err)
	}
	pid := strings.TrimSpace(out)
	if _, err := strconv.Atoi(pid); err != nil {
		return nil, fmt.Errorf("testbed: start sampler %s: pid %q", name, out)
	}
	return &Sampler{b: b, pid: pid, file: file}, nil
}

// Peek returns the samples taken so far and leaves the sampler running.
func (s *Sampler) Peek(ctx context.Context) ([]Sample, error) {
	out, err := s.b.Run(ctx, "cat", s.file)
	if err != nil {
		return nil, fmt.Errorf("testbed: read sampler: %w", err)
	}
	samples, err := ParseSamples(out)
	if err != nil || len(samples) == 0 {
		return samples, err
	}
	// The last sample may still be printing.
	return samples[:len(samples)-1], nil
}

// Stop ends the sampler and returns its samples; the last one may be cut
// short and is dropped when it is.
func (s *Sampler) Stop(ctx context.Context) ([]Sample, error) {
	if _, err := s.b.Run(ctx, "sh", "-c", `kill "$1"; while kill -0 "$1" 2>/dev/null; do sleep 0.05; done`, "sh", s.pid); err != nil {
		return nil, fmt.Errorf("testbed: stop sampler: %w", err)
	}
	out, err := s.b.Run(ctx, "sh", "-c", `cat "$1" && rm -f "$1"`, "sh", s.file)
	if err != nil {
		return nil, fmt.Errorf("testbed: read sampler: %w", err)
	}
	return ParseSamples(out)
}

// ParseSamples splits a Sampler's output into samples: a "@@ <epoch>"
// line, then what the snippet printed. A sample that printed nothing (the
// sampler stopped while it ran) is dropped.
func ParseSamples(out string) ([]Sample, error) {
	var samples []Sample
	for _, block := range strings.Split("\n"+out, "\n@@ ")[1:] {
		stamp, body, _ := strings.Cut(block, "\n")
		at, err := ParseEpoch(stamp)
		if err != nil {
			return nil, fmt.Errorf("sampler output: %w", err)
		}
		if body = strings.TrimSpace(body); body != "" {
			samples = append(samples, Sample{At: at, Out: body})
		}
	}
	if len(samples) == 0 && strings.TrimSpace(out) != "" {
		return nil, fmt.Errorf("sampler output %q: no samples", excerpt(out))
	}
	slices.SortStableFunc(samples, func(a, b Sample) int { return a.At.Compare(b.At) })
	return samples, nil
}

func excerpt(s string) string {
	if len(s) > 120 {
		return s[:120] + "…"
	}
	return s
}
