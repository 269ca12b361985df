// SPDX-License-Identifier: Apache-2.0

package testbed

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// SysbenchResult is what one `sysbench oltp_* run` reported.
type SysbenchResult struct {
	Transactions uint64
	TPS          float64 // transactions per second
	Queries      uint64
	QPS          float64
	Errors       uint64 // "ignored errors"
	Reconnects   uint64
	Runtime      time.Duration // "total time"

	LatencyMin, LatencyAvg, LatencyMax time.Duration
	Percentile                         float64       // e.g. 95, from the "95th percentile:" line
	LatencyPct                         time.Duration // the latency at that percentile
}

// ParseSysbench reads the text report of `sysbench oltp_* --percentile=N
// run` (sysbench 1.0.20). sysbench has no machine-readable output for the
// built-in OLTP scripts, so this reads the human one, which looks like
//
//	SQL statistics:
//	    transactions:                        418    (41.16 per sec.)
//	    queries:                             8360   (823.26 per sec.)
//	    ignored errors:                      0      (0.00 per sec.)
//	    reconnects:                          0      (0.00 per sec.)
//	General statistics:
//	    total time:                          10.1541s
//	Latency (ms):
//	         min:                                   30.12
//	         avg:                                   96.87
//	         max:                                  410.55
//	         95th percentile:                      183.21
//
// (other lines are skipped). Keys are matched only inside their section,
// so that a bare "min:" or "total:" elsewhere is not taken for ours, and a
// key seen twice is an error, because that means two runs' outputs were
// concatenated. A run with no transactions is valid (sysbench
// prints zeros); missing lines, and a run with --percentile=0, which
// prints "percentile stats: disabled", are errors.
func ParseSysbench(out string) (SysbenchResult, error) {
	if strings.TrimSpace(out) == "" {
		return SysbenchResult{}, fmt.Errorf("sysbench output is empty")
	}
	var (
		r       SysbenchResult
		section string
		seen    = make(map[string]bool)
	)
	for line := range strings.Lines(out) {
		text := strings.TrimSpace(line)
		if text == "" {
			continue
		}
		// Section headers start in column 0, their fields are indented.
		if line[0] != ' ' && line[0] != '\t' {
			section = text
			if strings.HasPrefix(section, "Latency (") && section != "Latency (ms):" {
				return SysbenchResult{}, fmt.Errorf("sysbench output: latency header %q: want milliseconds", section)
			}
			continue
		}
		key, val, ok := strings.Cut(text, ":")
		if !ok {
			continue
		}
		val = strings.TrimSpace(val)
		field := key
		var err error
		switch section {
		case "SQL statistics:":
			switch key {
			case "transactions":
				r.Transactions, r.TPS, err = parseSysbenchRate(val)
			case "queries":
				r.Queries, r.QPS, err = parseSysbenchRate(val)
			case "ignored errors":
				r.Errors, _, err = parseSysbenchRate(val)
			case "reconnects":
				r.Reconnects, _, err = parseSysbenchRate(val)
			default:
				continue
			}
		case "General statistics:":
			if key != "total time" {
				continue
			}
			r.Runtime, err = parseSysbenchDuration(val, "s")
		case "Latency (ms):":
			switch {
			case key == "min":
				r.LatencyMin, err = parseSysbenchDuration(val, "ms")
			case key == "avg":
				r.LatencyAvg, err = parseSysbenchDuration(val, "ms")
			case key == "max":
				r.LatencyMax, err = parseSysbenchDuration(val, "ms")
			case key == "percentile stats":
				return SysbenchResult{}, fmt.Errorf("sysbench output: %q: run sysbench with --percentile=N, N > 0", text)
			case strings.HasSuffix(key, " percentile"):
				field = "percentile"
				r.Percentile, err = parseSysbenchOrdinal(strings.TrimSuffix(key, " percentile"))
				if err == nil {
					r.LatencyPct, err = parseSysbenchDuration(val, "ms")
				}
			default:
				continue
			}
		default:
			continue
		}
		if err != nil {
			return SysbenchResult{}, fmt.Errorf("sysbench output: line %q: %w", text, err)
		}
		if seen[section+field] {
			return SysbenchResult{}, fmt.Errorf("sysbench output: %q line appears twice under %q (two runs' output?)", field+":", section)
		}
		seen[section+field] = true
	}

	var missing []string
	for _, f := range []struct{ section, field, name string }{
		{"SQL statistics:", "transactions", "transactions:"},
		{"SQL statistics:", "queries", "queries:"},
		{"SQL statistics:", "ignored errors", "ignored errors:"},
		{"SQL statistics:", "reconnects", "reconnects:"},
		{"General statistics:", "total time", "total time:"},
		{"Latency (ms):", "min", "latency min:"},
		{"Latency (ms):", "avg", "latency avg:"},
		{"Latency (ms):", "max", "latency max:"},
		{"Latency (ms):", "percentile", "latency Nth percentile:"},
	} {
		if !seen[f.section+f.field] {
			missing = append(missing, strconv.Quote(f.name))
		}
	}
	if len(missing) > 0 {
		lines := "line"
		if len(missing) > 1 {
			lines = "lines"
		}
		return SysbenchResult{}, fmt.Errorf("sysbench output: no %s %s (output: %q)", strings.Join(missing, ", "), lines, sysbenchExcerpt(out))
	}
	return r, nil
}

// parseSysbenchRate reads "418    (41.16 per sec.)".
func parseSysbenchRate(val string) (uint64, float64, error) {
	count, rest, ok := strings.Cut(val, " ")
	if !ok {
		return 0, 0, fmt.Errorf("want \"COUNT (RATE per sec.)\"")
	}
	n, err := strconv.ParseUint(count, 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("count: %w", err)
	}
	rate, ok := strings.CutPrefix(strings.TrimSpace(rest), "(")
	if ok {
		rate, ok = strings.CutSuffix(rate, " per sec.)")
	}
	if !ok {
		return 0, 0, fmt.Errorf("want \"COUNT (RATE per sec.)\"")
	}
	x, err := strconv.ParseFloat(rate, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("rate: %w", err)
	}
	if x < 0 || math.IsInf(x, 0) || math.IsNaN(x) {
		return 0, 0, fmt.Errorf("rate %v out of range", x)
	}
	return n, x, nil
}

// parseSysbenchDuration reads a plain decimal number in unit ("s" for total
// time, already written with its unit; "ms" for latencies, whose unit is
// in the section header). time.ParseDuration keeps the decimal digits
// exact, where going through float64 would not.
func parseSysbenchDuration(val, unit string) (time.Duration, error) {
	num := strings.TrimSuffix(val, unit)
	if unit == "s" && num == val {
		return 0, fmt.Errorf("want a time in seconds like \"10.1541s\"")
	}
	if num == "" || strings.TrimLeft(num, "0123456789.") != "" {
		return 0, fmt.Errorf("%q is not a non-negative decimal number", num)
	}
	d, err := time.ParseDuration(num + unit)
	if err != nil {
		return 0, err
	}
	return d, nil
}

// parseSysbenchOrdinal reads "95th" (sysbench prints "th" for every
// percentile, but "1st" and the like are accepted too).
func parseSysbenchOrdinal(s string) (float64, error) {
	num := strings.TrimRight(s, "stndrh")
	p, err := strconv.ParseFloat(num, 64)
	if err != nil || num == s || p <= 0 || p > 100 {
		return 0, fmt.Errorf("percentile %q: want like \"95th\"", s)
	}
	return p, nil
}

// sysbenchExcerpt picks what to quote when lines are missing: sysbench's
// own FATAL line if it printed one (a failed connection or prepare),
// otherwise the start of the output.
func sysbenchExcerpt(out string) string {
	const max = 120
	for line := range strings.Lines(out) {
		if strings.HasPrefix(line, "FATAL:") {
			out = line
			break
		}
	}
	out = strings.TrimSpace(out)
	if len(out) > max {
		out = out[:max] + "…"
	}
	return out
}

// SysbenchInterval is one line of sysbench's --report-interval output.
type SysbenchInterval struct {
	At  time.Duration // end of the interval, from the start of the run
	TPS float64
	P95 time.Duration // the interval's 95th percentile latency (--percentile=95)
}

// ParseSysbenchIntervals reads the interval lines of a sysbench run with
// --report-interval, such as
//
//	[ 2s ] thds: 8 tps: 20.99 qps: 437.73 (r/w/o: 307.86/87.95/41.92) lat (ms,95%): 142.39 err/s: 0.00 reconn/s: 0.00
//
// and skips every other line. An interval line it cannot read is an error.
func ParseSysbenchIntervals(out string) ([]SysbenchInterval, error) {
	var iv []SysbenchInterval
	for line := range strings.Lines(out) {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "[ ")
		if !ok {
			continue
		}
		at, rest, ok := strings.Cut(rest, "s ]")
		if !ok {
			return nil, fmt.Errorf("sysbench interval line %q: no \"[ Ns ]\"", line)
		}
		sec, err := strconv.ParseFloat(strings.TrimSpace(at), 64)
		if err != nil {
			return nil, fmt.Errorf("sysbench interval line %q: %w", line, err)
		}
		x := SysbenchInterval{At: time.Duration(sec * float64(time.Second))}
		f := strings.Fields(rest)
		seen := 0
		for i := 0; i+1 < len(f); i++ {
			switch {
			case f[i] == "tps:":
				if x.TPS, err = strconv.ParseFloat(f[i+1], 64); err != nil {
					return nil, fmt.Errorf("sysbench interval line %q: tps: %w", line, err)
				}
				seen++
			case strings.HasPrefix(f[i], "(ms,") && strings.HasSuffix(f[i], "%):"):
				if x.P95, err = parseSysbenchDuration(f[i+1], "ms"); err != nil {
					return nil, fmt.Errorf("sysbench interval line %q: latency: %w", line, err)
				}
				seen++
			}
		}
		if seen != 2 {
			return nil, fmt.Errorf("sysbench interval line %q: want tps and a latency percentile", line)
		}
		iv = append(iv, x)
	}
	return iv, nil
}
