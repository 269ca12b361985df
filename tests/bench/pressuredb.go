// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/tidecache/tidecache/tests/testbed"
)

// The database part of the pressure run: MariaDB and sysbench
// oltp_read_write on each system, with tables at least 2.5 times the
// system's whole share of the SSD, so that no cache can hold them. The
// tables are made once in guest RAM and copied onto each system's ext4
// (a load that goes through the cache), the cache flushed, then a skewed
// (pareto) and a uniform run follow on the same server, each with its TPS
// second by second. It runs on the first scheduler's VM only: it is the
// costliest part under TCG.

// pressureDBProfile sizes the database part; rounds 0 skips it.
type pressureDBProfile struct {
	rounds      int
	tables      int
	rows        int // per table
	warm, time  time.Duration
	threads     int
	accessTypes []string // sysbench --rand-type, in run order
}

// pressureDBDefaults: 8 tables of 56,000 rows make about 185 MiB of
// InnoDB data (50,000 made 166 MiB), 2.9× each system's 64 MiB of SSD
// (the report prints the measured size and ratio).
func pressureDBDefaults() pressureDBProfile {
	return pressureDBProfile{rounds: 1, tables: 8, rows: 56_000, warm: 10 * time.Second, time: 40 * time.Second,
		threads: sbThreads, accessTypes: []string{"pareto", "uniform"}}
}

// pressureDBRun is one system's database figures.
type pressureDBRun struct {
	load      time.Duration // copying the datadir onto the system, and syncing it
	flush     time.Duration // writing the cache back after the load
	results   map[string]testbed.SysbenchResult
	intervals map[string][]testbed.SysbenchInterval
}

const (
	pressureDBRoot     = "/run/bench-pdb"
	pressureDBTemplate = pressureDBRoot + "/template"
)

// pressureDB is the server of the database part.
func pressureDB(run testbed.Runner, pp pressureProfile) *testbed.MariaDB {
	db := testbed.NewMariaDB(run, pressureDBRoot, pp.db.tables, pp.db.rows)
	db.CopyTables = true
	return db
}

// pressureDatabase makes the tables and runs the database part on every
// system; it returns the figures and a description of the data set.
func pressureDatabase(ctx context.Context, bed *testbed.Bed, systems []*pressureSystem, pp pressureProfile) (map[string]*pressureDBRun, string, error) {
	p := bed.Progress()
	p.Step("MariaDB: making the sysbench tables (%d × %d rows) in guest RAM…", pp.db.tables, pp.db.rows)
	db := pressureDB(bed.Run, pp)
	if err := db.Configure(ctx); err != nil {
		return nil, "", err
	}
	version, err := db.Create(ctx, pressureDBTemplate)
	if err != nil {
		return nil, "", err
	}
	data, err := dirBytes(ctx, bed, pressureDBTemplate+"/sbtest")
	if err != nil {
		return nil, "", err
	}
	all, err := dirBytes(ctx, bed, pressureDBTemplate)
	if err != nil {
		return nil, "", err
	}
	desc := fmt.Sprintf("MariaDB %s; sysbench tables %s (%.1f× each system's %s of SSD), datadir %s",
		version, testbed.FormatBytes(data), float64(data)/float64(pp.cache), testbed.FormatBytes(pp.cache), testbed.FormatBytes(all))
	p.Step("  %s", desc)
	out := map[string]*pressureDBRun{}
	for _, s := range systems {
		p.Step("MariaDB on %s: load, flush, %v warm-up, then %s for %v each…", s.key, pp.db.warm, strings.Join(pp.db.accessTypes, " and "), pp.db.time)
		r, err := runPressureDB(ctx, bed, s, pp)
		if err != nil {
			return nil, "", fmt.Errorf("database on %s: %w", s.key, err)
		}
		for _, a := range pp.db.accessTypes {
			x := r.results[a]
			p.Step("  %-8s %7.1f TPS  p95 %s  max %s", a, x.TPS, testbed.FormatLatency(x.LatencyPct), testbed.FormatLatency(x.LatencyMax))
		}
		out[s.key] = r
	}
	return out, desc, nil
}

// dirBytes is what du counts under dir, in bytes.
func dirBytes(ctx context.Context, bed *testbed.Bed, dir string) (int64, error) {
	out, err := bed.Run(ctx, "du", "-sb", dir)
	if err != nil {
		return 0, err
	}
	f := strings.Fields(out)
	if len(f) == 0 {
		return 0, fmt.Errorf("du %s: %q", dir, out)
	}
	return strconv.ParseInt(f[0], 10, 64)
}

// runPressureDB measures one system.
func runPressureDB(ctx context.Context, bed *testbed.Bed, s *pressureSystem, pp pressureProfile) (_ *pressureDBRun, err error) {
	r := &pressureDBRun{results: map[string]testbed.SysbenchResult{}, intervals: map[string][]testbed.SysbenchInterval{}}
	datadir := dbMount + "/data"
	t0 := time.Now()
	for _, argv := range [][]string{
		{"mkfs.ext4", "-q", "-F", "-E", "nodiscard,lazy_itable_init=0,lazy_journal_init=0", s.dev},
		{"mkdir", "-p", dbMount},
		{"mount", "-o", "noatime", s.dev, dbMount},
		{"cp", "-a", pressureDBTemplate, datadir},
		{"sync"},
	} {
		if _, err := bed.Run(ctx, argv...); err != nil {
			return nil, err
		}
	}
	defer func() {
		if uerr := umount(context.WithoutCancel(ctx), bed); err == nil {
			err = uerr
		}
	}()
	r.load = time.Since(t0)
	if s.flush != nil {
		t0 = time.Now()
		if err := s.flush(ctx); err != nil {
			return nil, err
		}
		r.flush = time.Since(t0)
	}
	db := pressureDB(bed.Run, pp)
	if err := db.Start(ctx, datadir); err != nil {
		return nil, err
	}
	defer func() {
		if serr := db.Stop(context.WithoutCancel(ctx)); err == nil {
			err = serr
		}
	}()
	for i, a := range pp.db.accessTypes {
		db.RandType = a
		if i == 0 && pp.db.warm > 0 {
			if _, err := db.Run(ctx, pp.db.threads, pp.db.warm); err != nil {
				return nil, err
			}
		}
		res, iv, err := db.RunIntervals(ctx, pp.db.threads, pp.db.time)
		if err != nil {
			return nil, err
		}
		r.results[a], r.intervals[a] = res, iv
	}
	return r, nil
}

// dbAhead is the MariaDB target: tc's TPS at least each peer's, for every
// access pattern.
func (sr *schedRun) dbAhead(tc string, peers []string) (string, bool) {
	me := sr.db[tc]
	if me == nil {
		return "not measured", false
	}
	var cells []string
	ok := true
	for _, a := range accessTypesOf(sr.db) {
		best, bestKey := 0.0, ""
		for _, p := range peers {
			if d := sr.db[p]; d != nil && d.results[a].TPS > best {
				best, bestKey = d.results[a].TPS, p
			}
		}
		if bestKey == "" {
			continue
		}
		r := me.results[a].TPS / best
		ok = ok && r >= 1
		cells = append(cells, fmt.Sprintf("%s %s × best peer (%s)", a, testbed.FormatRatio(r), bestKey))
	}
	if len(cells) == 0 {
		return "no peer measured", false
	}
	return strings.Join(cells, "; "), ok
}

// accessTypesOf are the access patterns the database part ran, in order.
func accessTypesOf(db map[string]*pressureDBRun) []string {
	var out []string
	seen := map[string]bool{}
	for _, a := range pressureDBDefaults().accessTypes {
		for _, r := range db {
			if _, ok := r.results[a]; ok && !seen[a] {
				out, seen[a] = append(out, a), true
			}
		}
	}
	return out
}

// failed is the error of a part of the run that failed but left the rest
// to publish (the database part).
func (r *pressureReport) failed() error {
	for _, sr := range r.scheds {
		if sr.dbErr != nil {
			return fmt.Errorf("MariaDB under %s: %w", sr.sched, sr.dbErr)
		}
	}
	return nil
}
