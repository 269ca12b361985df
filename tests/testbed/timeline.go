// SPDX-License-Identifier: Apache-2.0

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

// Timeline is a job's completed I/Os per second over its run, per
// direction: fio's write_iops_log with log_avg_msec=1000. fio closes a
// window at the first completion after it has lasted a second, so windows
// last a second or a little more, and one in which I/O stalled lasts until
// the stall ends (its rate is then low: what completed over its length).
type Timeline struct {
	// Start is the guest's clock when the job started.
	Start  time.Time
	Points []IOPSPoint // one per window, in time order
}

// IOPSPoint is one window of a Timeline.
type IOPSPoint struct {
	At          time.Duration // end of the window, from the job's start
	Dur         time.Duration // its length: it began at At-Dur
	Read, Write float64       // I/Os completed in the window, per second
}

// End is when the timeline's last window ended, from the job's start.
func (t Timeline) End() time.Duration {
	if len(t.Points) == 0 {
		return 0
	}
	return t.Points[len(t.Points)-1].At
}

// iopsLogDir is where FioSequence has fio write its logs in the guest.
const iopsLogDir = harness.ScratchDir + "/fio-iops"

// FioTimeline runs job like Fio and also returns its IOPS second by
// second: FioSequence of one job.
func (b *Bed) FioTimeline(ctx context.Context, job Job) (Result, Timeline, error) {
	res, tls, err := b.FioSequence(ctx, []Job{job})
	if err != nil {
		return Result{}, Timeline{}, err
	}
	return res[0], tls[0], nil
}

// FioSequence runs jobs one after the other in one fio process, each
// starting the moment the one before has finished (stonewall), so that
// there is no pause between them (a new fio takes seconds to start under
// TCG), and returns each job's result and its IOPS second by second. A
// job whose I/O stalls runs past its Runtime (fio waits for what is in
// flight): the sequence may take the sum of the runtimes + 10 minutes.
func (b *Bed) FioSequence(ctx context.Context, jobs []Job) ([]Result, []Timeline, error) {
	if len(jobs) == 0 {
		return nil, nil, errors.New("fio sequence: no jobs")
	}
	name := jobs[0].Name
	args := []string{"fio", "--output-format=json+"}
	var total time.Duration
	seen := map[string]bool{}
	for i, j := range jobs {
		if j.Device == "" || j.Name == "" || seen[j.Name] || strings.ContainsAny(j.Name, "/ ") {
			return nil, nil, fmt.Errorf("fio sequence %s: job %d: want a device and a unique plain name", name, i)
		}
		seen[j.Name] = true
		a, err := j.globalArgs()
		if err != nil {
			return nil, nil, err
		}
		a = slices.DeleteFunc(a[1:], func(s string) bool { return strings.HasPrefix(s, "--output-format=") })
		args = append(args, "--name="+j.Name, "--filename="+j.Device)
		args = append(args, a...)
		// exec_prerun's output lands in <name>.prerun.txt in fio's
		// directory: the guest's clock the moment the job starts.
		args = append(args, "--stonewall", "--write_iops_log="+path.Join(iopsLogDir, j.Name),
			"--log_avg_msec=1000", "--log_unix_epoch=1", "--exec_prerun=date +%s%N")
		total += j.Runtime + j.Ramp
	}
	ctx, cancel := context.WithTimeout(ctx, total+10*time.Minute)
	defer cancel()
	fail := func(err error) ([]Result, []Timeline, error) {
		return nil, nil, fmt.Errorf("fio %s on %s: %w", name, jobs[0].Device, err)
	}
	if _, err := b.Run(ctx, "sh", "-c", `mkdir -p "$1" && rm -f "$1"/*`, "sh", iopsLogDir); err != nil {
		return fail(err)
	}
	out, err := b.Run(ctx, append([]string{"sh", "-c", `cd "$1" && shift && exec "$@"`, "sh", iopsLogDir}, args...)...)
	if err != nil {
		return fail(err)
	}
	results, err := ParseFio([]byte(out))
	if err != nil {
		return fail(err)
	}
	byName := map[string]Result{}
	for _, r := range results {
		byName[r.Job] = r
	}
	res := make([]Result, len(jobs))
	tls := make([]Timeline, len(jobs))
	for i, j := range jobs {
		r, ok := byName[j.Name]
		if !ok {
			return fail(fmt.Errorf("no result for job %s", j.Name))
		}
		res[i] = r
		p := path.Join(iopsLogDir, j.Name)
		started, err := b.Run(ctx, "cat", p+".prerun.txt")
		if err != nil {
			return fail(err)
		}
		ns, err := strconv.ParseInt(strings.TrimSpace(started), 10, 64)
		if err != nil {
			return fail(fmt.Errorf("job %s: start time %q: %w", j.Name, started, err))
		}
		log, err := b.Run(ctx, "sh", "-c", `cat "$1"_iops.*.log`, "sh", p)
		if err != nil {
			return fail(err)
		}
		if tls[i], err = ParseIOPSLogEpoch(log, time.Unix(0, ns)); err != nil {
			return fail(fmt.Errorf("job %s: %w", j.Name, err))
		}
	}
	return res, tls, nil
}

// ParseIOPSLogEpoch reads an IOPS log written with log_unix_epoch (the
// guest's clock in milliseconds) of a job that started at start: fio logs
// a window when an I/O completes after it ended, so a window without
// completions has no line, and the times are measured from the job's
// start, not from the first line.
func ParseIOPSLogEpoch(log string, start time.Time) (Timeline, error) {
	t0 := start.UnixMilli()
	var rel strings.Builder
	for line := range strings.Lines(log) {
		f, rest, ok := strings.Cut(strings.TrimSpace(line), ",")
		if !ok {
			if strings.TrimSpace(line) != "" {
				return Timeline{}, fmt.Errorf("fio IOPS log line %q: want comma-separated fields", line)
			}
			continue
		}
		ms, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
		if err != nil {
			return Timeline{}, fmt.Errorf("fio IOPS log line %q: %w", line, err)
		}
		if ms < t0 {
			ms = t0 // the clock's resolution: a line cannot come before the job
		}
		fmt.Fprintf(&rel, "%d,%s\n", ms-t0, rest)
	}
	points, err := ParseIOPSLog(rel.String())
	if err != nil {
		return Timeline{}, err
	}
	return Timeline{Start: start, Points: points}, nil
}

// ParseIOPSLog reads fio's IOPS log with log_avg_msec: lines of "msec,
// IOPS, direction, block size[, offset[, priority]]", msec from the job's
// start, direction 0 for reads and 1 for writes; the lines of one window
// share its time. A window runs from the one before it (or the job's
// start) to its time.
func ParseIOPSLog(log string) ([]IOPSPoint, error) {
	byMS := map[int64]*IOPSPoint{}
	var times []int64
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
		if dir != 0 && dir != 1 {
			continue // trims and syncs are not drawn
		}
		p := byMS[ms]
		if p == nil {
			p = &IOPSPoint{At: time.Duration(ms) * time.Millisecond}
			byMS[ms] = p
			times = append(times, ms)
		}
		if dir == 0 {
			p.Read += v
		} else {
			p.Write += v
		}
	}
	slices.Sort(times)
	out := make([]IOPSPoint, 0, len(times))
	var prev time.Duration
	for _, ms := range times {
		p := *byMS[ms]
		p.Dur, prev = p.At-prev, p.At
		out = append(out, p)
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
