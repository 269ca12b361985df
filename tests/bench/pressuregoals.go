// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/tidecache/tidecache/tests/testbed"
)

// The pressure run's targets (issue 23), each a ratio to the bare RAID10
// or to a peer measured in the same run, or a bound on a wait.
const (
	targetMaxWait     = time.Second            // no I/O of any class waits longer, in any phase
	targetP999        = 500 * time.Millisecond // p99.9 of every class in every phase
	targetReadIOPS    = 1.0                    // reads after the write burst, × bare RAID10 IOPS
	targetReadP99     = 1.2                    // … and × its p99, at most
	targetSteadyWrite = 1.0                    // random writes once the cache is full, × bare RAID10
	// targetFill: the write cache takes at least this share of the time
	// lvm writecache (dm-writecache at the kernel's defaults, as
	// tidecache ran before it bounded write-back) takes to fill, per MiB
	// of write cache. "Not worse than today's", less 10 % for the run's
	// noise (two fills of the same cache differ by that much).
	targetFill  = 0.9
	targetDrain = 0.8 // idle drain, × the bare RAID10's random-write rate
)

// The I/O classes of a phase.
const (
	classRead  = "read"
	classWrite = "write"
)

// phaseLabel names a phase in tables.
var phaseLabels = map[string]string{
	phWrite: "4k random write",
	phMix:   "8k 70/30 mix",
	phRead:  "4k random read",
	phBurst: "write burst",
	phBulk:  "bulk load",
	phOLTP:  "70/30 mix after the load",
}

// stats is a system's figures for one class in one phase; ok is false
// when the phase did no I/O of that class (or the system did not run).
func (sr *schedRun) stats(sys, phase, class string) (testbed.Stats, bool) {
	run := sr.runs[sys]
	if run == nil || run.phases[phase] == nil {
		return testbed.Stats{}, false
	}
	r := run.phases[phase].res
	st := r.Read
	if class == classWrite {
		st = r.Write
	}
	return st, st.IOs > 0
}

// system returns the system with key, nil when the run has none.
func (sr *schedRun) system(key string) *pressureSystem {
	for _, s := range sr.systems {
		if s.key == key && sr.runs[key] != nil {
			return s
		}
	}
	return nil
}

// tidecacheKeys are the measured tidecache systems the targets are
// checked for: the defaults, then the variants under test (tc-wb-norf).
func (sr *schedRun) tidecacheKeys() []string {
	return append(sr.keysOf(tidecache), sr.keysOf(variant)...)
}

// keysOf are the measured systems of a kind, in report order.
func (sr *schedRun) keysOf(k kind) []string {
	var out []string
	for _, s := range sr.systems {
		if s.kind == k && sr.runs[s.key] != nil {
			out = append(out, s.key)
		}
	}
	return out
}

// fill is when the system's write cache filled in the write phase.
func (sr *schedRun) fill(sys string) (time.Duration, bool) {
	s, run := sr.system(sys), sr.runs[sys]
	if s == nil || s.probe == nil || !s.probe.fills() || run.phases[phWrite] == nil {
		return 0, false
	}
	return timeToFull(run.states, run.start, run.start.Add(run.phases[phWrite].took))
}

// writeCacheBytes is the size of the system's write cache as its samples
// report it (0 when unknown).
func (sr *schedRun) writeCacheBytes(sys string) int64 {
	if run := sr.runs[sys]; run != nil && len(run.states) > 0 {
		return run.states[0].size
	}
	return 0
}

// steadyWrites is the system's write rate once its cache was full: the
// mean of the write phase's seconds after the fill, or after the phase's
// first half when the cache has no fill to see (or did not fill); from is
// where that window starts.
func (sr *schedRun) steadyWrites(sys string) (iops float64, from time.Duration, ok bool) {
	run := sr.runs[sys]
	if run == nil || run.phases[phWrite] == nil {
		return math.NaN(), 0, false
	}
	tl := run.phases[phWrite].timeline
	from = (tl.End() / 2).Round(time.Second)
	if ttf, ok := sr.fill(sys); ok {
		from = ttf
	}
	v, span := meanIOPS(tl.Points, from, true)
	return v, from, span > 0
}

// drainOf is the system's idle drain.
func (sr *schedRun) drainOf(sys string) (drain, bool) {
	run := sr.runs[sys]
	if run == nil || run.idleStart.IsZero() {
		return drain{}, false
	}
	return measureDrain(run.states, run.idleStart, run.idleEnd)
}

// worst is the longest wait and the highest p99.9 of any class in any
// phase, and where each was.
func (sr *schedRun) worst(sys string) (maxWait time.Duration, maxWhere string, p999 time.Duration, p999Where string) {
	for _, ph := range allPhases {
		for _, c := range []string{classRead, classWrite} {
			st, ok := sr.stats(sys, ph, c)
			if !ok {
				continue
			}
			where := c + "s, " + phaseLabels[ph]
			if st.Clat.Max > maxWait {
				maxWait, maxWhere = st.Clat.Max, where
			}
			if v := st.Clat.Percentiles[99.9]; v > p999 {
				p999, p999Where = v, where
			}
		}
	}
	return
}

// allPhases are the fio phases in run order.
var allPhases = []string{phWrite, phMix, phRead, phBurst, phBulk, phOLTP}

// metric is one figure the targets compare between systems.
type metric struct {
	name   string
	higher bool // a higher value is better
	// zeroUnknown: a 0 says nothing to compare (a cache with nothing
	// dirty has no drain rate), not the worst figure there is.
	zeroUnknown bool
	value       func(sr *schedRun, sys string) (float64, bool)
}

// readPhases are the phases whose reads come after the write burst.
var readPhases = []string{phMix, phRead}

// comparedMetrics are the figures on which tidecache must be ahead of
// every peer.
func comparedMetrics() []metric {
	var ms []metric
	ms = append(ms,
		metric{name: "longest wait, any phase", value: func(sr *schedRun, s string) (float64, bool) {
			m, _, _, _ := sr.worst(s)
			return m.Seconds(), m > 0
		}},
		metric{name: "highest p99.9, any phase", value: func(sr *schedRun, s string) (float64, bool) {
			_, _, p, _ := sr.worst(s)
			return p.Seconds(), p > 0
		}})
	for _, ph := range readPhases {
		ms = append(ms,
			metric{name: "read IOPS, " + phaseLabels[ph], higher: true, value: func(sr *schedRun, s string) (float64, bool) {
				st, ok := sr.stats(s, ph, classRead)
				return st.IOPS, ok
			}},
			metric{name: "read p99, " + phaseLabels[ph], value: func(sr *schedRun, s string) (float64, bool) {
				st, ok := sr.stats(s, ph, classRead)
				return st.Clat.P99().Seconds(), ok
			}})
	}
	ms = append(ms,
		metric{name: "write IOPS once the cache is full", higher: true, value: func(sr *schedRun, s string) (float64, bool) {
			v, _, ok := sr.steadyWrites(s)
			return v, ok
		}},
		metric{name: "idle drain rate", higher: true, zeroUnknown: true, value: func(sr *schedRun, s string) (float64, bool) {
			d, ok := sr.drainOf(s)
			return d.rate(), ok
		}})
	return ms
}

// ratioTo is a's value over b's for m, NaN when either is missing or b's
// is 0.
func (m metric) ratioTo(sr *schedRun, a, b string) float64 {
	va, oka := m.value(sr, a)
	vb, okb := m.value(sr, b)
	if !oka || !okb || vb == 0 {
		return math.NaN()
	}
	return va / vb
}

// ahead reports whether a is at least as good as b on m (unknown counts
// as not ahead).
func (m metric) ahead(sr *schedRun, a, b string) (bool, bool) {
	r := m.ratioTo(sr, a, b)
	if math.IsNaN(r) {
		// A peer that drained nothing (rate 0) is behind anyone who did.
		va, oka := m.value(sr, a)
		vb, okb := m.value(sr, b)
		if oka && okb && vb == 0 && !m.zeroUnknown {
			return !m.higher || va > 0, true
		}
		return false, false
	}
	if m.higher {
		return r >= 1, true
	}
	return r <= 1, true
}

// pressureTarget is one line of the targets table: a cell and a verdict
// per tidecache system; a system the target does not apply to (na) is
// left out of the verdict.
type pressureTarget struct {
	name  string
	cells map[string]string
	met   map[string]bool
	na    map[string]bool
}

// targets checks the run against every target, for each tidecache system.
func (sr *schedRun) targets() []pressureTarget {
	tcs := sr.tidecacheKeys()
	bare := keyRAID10
	x := testbed.FormatRatio
	lat := testbed.FormatLatency
	var out []pressureTarget
	add := func(name string, f func(tc string) (string, bool)) {
		t := pressureTarget{name: name, cells: map[string]string{}, met: map[string]bool{}, na: map[string]bool{}}
		for _, tc := range tcs {
			t.cells[tc], t.met[tc] = f(tc)
			// A target that does not apply to a system says so first.
			t.na[tc] = strings.HasPrefix(t.cells[tc], notApplicable)
		}
		out = append(out, t)
	}
	add(fmt.Sprintf("no I/O waits more than %s (max) in any phase", lat(targetMaxWait)), func(tc string) (string, bool) {
		m, where, _, _ := sr.worst(tc)
		return fmt.Sprintf("%s (%s)", lat(m), where), m > 0 && m <= targetMaxWait
	})
	add(fmt.Sprintf("p99.9 ≤ %s for every class in every phase", lat(targetP999)), func(tc string) (string, bool) {
		_, _, p, where := sr.worst(tc)
		return fmt.Sprintf("%s (%s)", lat(p), where), p > 0 && p <= targetP999
	})
	add(fmt.Sprintf("reads after the write burst ≥ %.1f× bare RAID10's IOPS", targetReadIOPS), func(tc string) (string, bool) {
		var cells []string
		ok := true
		for _, ph := range readPhases {
			a, oka := sr.stats(tc, ph, classRead)
			b, okb := sr.stats(bare, ph, classRead)
			if !oka || !okb {
				return "not measured", false
			}
			r := a.IOPS / b.IOPS
			ok = ok && r >= targetReadIOPS
			cells = append(cells, fmt.Sprintf("%s %s (%s vs %s)", phaseLabels[ph], x(r), testbed.FormatIOPS(a.IOPS), testbed.FormatIOPS(b.IOPS)))
		}
		return strings.Join(cells, "; "), ok
	})
	add(fmt.Sprintf("… and their p99 ≤ %.1f× bare RAID10's", targetReadP99), func(tc string) (string, bool) {
		var cells []string
		ok := true
		for _, ph := range readPhases {
			a, oka := sr.stats(tc, ph, classRead)
			b, okb := sr.stats(bare, ph, classRead)
			if !oka || !okb || b.Clat.P99() == 0 {
				return "not measured", false
			}
			r := float64(a.Clat.P99()) / float64(b.Clat.P99())
			ok = ok && r <= targetReadP99
			cells = append(cells, fmt.Sprintf("%s %s (%s vs %s)", phaseLabels[ph], x(r), lat(a.Clat.P99()), lat(b.Clat.P99())))
		}
		return strings.Join(cells, "; "), ok
	})
	add(fmt.Sprintf("random writes once the cache is full ≥ %.1f× bare RAID10's", targetSteadyWrite), func(tc string) (string, bool) {
		a, from, oka := sr.steadyWrites(tc)
		b, _, okb := sr.steadyWrites(bare)
		if !oka || !okb || b == 0 {
			return "not measured", false
		}
		r := a / b
		return fmt.Sprintf("%s (%s vs %s IOPS, from %v on)", x(r), testbed.FormatIOPS(a), testbed.FormatIOPS(b), from.Round(time.Second)), r >= targetSteadyWrite
	})
	if sr.system(keyLVMWritecache) != nil {
		add(fmt.Sprintf("time to fill the write cache ≥ %.1f× lvm writecache's (same size)", targetFill), func(tc string) (string, bool) {
			ca, cb := sr.writeCacheBytes(tc), sr.writeCacheBytes(keyLVMWritecache)
			if ca == 0 || cb == 0 || math.Abs(float64(ca-cb)) > 0.05*float64(cb) {
				return fmt.Sprintf(notApplicable+": its write tier is %s, lvm-wc's %s", testbed.FormatBytes(ca), testbed.FormatBytes(cb)), false
			}
			a, oka := sr.fill(tc)
			b, okb := sr.fill(keyLVMWritecache)
			if !oka || !okb || b == 0 {
				return fmt.Sprintf("not measured (filled: %v, lvm-wc %v)", oka, okb), false
			}
			r := a.Seconds() / b.Seconds()
			return fmt.Sprintf("%s (%v vs %v)", x(r), a.Round(time.Second), b.Round(time.Second)), r >= targetFill
		})
	}
	add(fmt.Sprintf("idle drain ≥ %.1f× the array's random-write rate", targetDrain), func(tc string) (string, bool) {
		d, ok := sr.drainOf(tc)
		b, _, okb := sr.steadyWrites(bare)
		if !ok || !okb || b == 0 {
			return "not measured", false
		}
		blocks := d.rate() / 4096
		r := blocks / b
		return fmt.Sprintf("%s (%s blocks/s vs %s IOPS)", x(r), testbed.FormatIOPS(blocks), testbed.FormatIOPS(b)), r >= targetDrain
	})
	peers := sr.keysOf(peer)
	if len(peers) > 0 {
		add("ahead of "+strings.Join(peers, ", ")+" on each figure above", func(tc string) (string, bool) {
			var behind []string
			unknown, incomparable := 0, 0
			for _, m := range comparedMetrics() {
				for _, p := range peers {
					ok, known := m.ahead(sr, tc, p)
					switch {
					case !known:
						if v, vok := m.value(sr, p); vok && v == 0 && m.zeroUnknown {
							incomparable++ // the peer had nothing to drain
						} else {
							unknown++
						}
					case !ok:
						behind = append(behind, fmt.Sprintf("%s on %s (%s)", p, m.name, x(m.ratioTo(sr, tc, p))))
					}
				}
			}
			n := len(comparedMetrics()) * len(peers)
			if len(behind) > 0 {
				return "behind " + strings.Join(behind, "; "), false
			}
			if unknown > 0 || incomparable > 0 {
				return fmt.Sprintf("ahead on %d of %d (%d not measured, %d where the peer had nothing to drain)",
					n-unknown-incomparable, n, unknown, incomparable), unknown == 0
			}
			return fmt.Sprintf("ahead on %d of %d", n, n), true
		})
	}
	if sr.db != nil {
		add("MariaDB under pressure: TPS ahead of every peer", func(tc string) (string, bool) {
			return sr.dbAhead(tc, peers)
		})
	}
	return out
}

// notApplicable starts the cell of a target that does not apply to a
// system.
const notApplicable = "n/a"

// verdictOf is the targets table's verdict: met when every tidecache
// system meets the target, else which miss it.
func (t pressureTarget) verdictOf(tcs []string) string {
	var missed []string
	for _, tc := range tcs {
		if !t.met[tc] && !t.na[tc] {
			missed = append(missed, tc)
		}
	}
	if len(missed) == 0 {
		return "met"
	}
	return "**missed** (" + strings.Join(missed, ", ") + ")"
}
