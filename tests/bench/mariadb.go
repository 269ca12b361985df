// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/tidecache/tidecache/tests/testbed"
)

// The database benchmark: MariaDB and sysbench from Debian's packages,
// the datadir on ext4 on the system under test. The tables are made once,
// in guest RAM, and copied to each system, so that every system starts
// from the same bytes; the buffer pool is far smaller than the tables, so
// that reads reach the device, and every commit is durable
// (innodb_flush_log_at_trx_commit=1, O_DIRECT with fsync, doublewrite on),
// as on a production server.
const (
	dbRoot     = "/run/bench-db" // tmpfs in the guest
	dbTemplate = dbRoot + "/template"
	dbMount    = "/mnt/bench-db"

	sbTables, sbTableSize, sbThreads = 4, 25000, 8
)

// benchDB is the server of every run; run is nil where only its
// configuration is wanted (the report).
func benchDB(run testbed.Runner) *testbed.MariaDB {
	return testbed.NewMariaDB(run, dbRoot, sbTables, sbTableSize)
}

// dbOptions sets the length of the database benchmark.
type dbOptions struct {
	rounds int
	// cacheWarm is how long the datadir's files are read before the server
	// starts, so that read caches hold the tables as they would on a
	// server that has been running; warm is the sysbench warm-up after.
	cacheWarm, warm, time time.Duration
}

// dbResult is one system's database figures over all rounds.
type dbResult struct {
	runs []testbed.SysbenchResult // one per round
}

// tps is the mean TPS over rounds.
func (r dbResult) tps() float64 {
	var sum float64
	for _, x := range r.runs {
		sum += x.TPS
	}
	if len(r.runs) == 0 {
		return 0
	}
	return sum / float64(len(r.runs))
}

// p95 is the mean 95th-percentile latency over rounds.
func (r dbResult) p95() time.Duration {
	var sum time.Duration
	for _, x := range r.runs {
		sum += x.LatencyPct
	}
	if len(r.runs) == 0 {
		return 0
	}
	return sum / time.Duration(len(r.runs))
}

// roundRatios are r's TPS over base's, one per round, sorted. Rounds are
// paired because both systems ran in the same round, minutes apart: the
// VM's speed drifts over a run by more than the caches differ, and a
// ratio within a round cancels the drift that a ratio of means keeps.
// A missing system (nil) has none.
func (r *dbResult) roundRatios(base *dbResult) []float64 {
	if r == nil || base == nil {
		return nil
	}
	var rs []float64
	for i, x := range r.runs {
		if i < len(base.runs) && base.runs[i].TPS > 0 {
			rs = append(rs, x.TPS/base.runs[i].TPS)
		}
	}
	sort.Float64s(rs)
	return rs
}

// ratio is the median of r's per-round TPS ratios to base.
func (r *dbResult) ratio(base *dbResult) float64 { return median(r.roundRatios(base)) }

// ratioCell is the table cell of r against base: "1.00×" against itself.
func (r *dbResult) ratioCell(base *dbResult) string {
	if r == base {
		return testbed.FormatRatio(1)
	}
	return ratiosCell(r.roundRatios(base))
}

// prepareTemplate makes the sysbench tables in a datadir in guest RAM.
func prepareTemplate(ctx context.Context, bed *testbed.Bed) (string, error) {
	db := benchDB(bed.Run)
	if err := db.Configure(ctx); err != nil {
		return "", fmt.Errorf("database template: %w", err)
	}
	version, err := db.Create(ctx, dbTemplate)
	if err != nil {
		return "", fmt.Errorf("database template: %w", err)
	}
	size, err := bed.Run(ctx, "du", "-sm", dbTemplate)
	if err != nil {
		return "", err
	}
	var mb int
	fmt.Sscan(size, &mb)
	return fmt.Sprintf("MariaDB %s, datadir %d MiB", version, mb), nil
}

// runDB measures one system: ext4 on its device, the template copied in,
// the cache flushed (every system starts clean), the server started, a
// warm-up run, the measured run.
func runDB(ctx context.Context, bed *testbed.Bed, s *system, o dbOptions) (_ testbed.SysbenchResult, err error) {
	if s.attach != nil {
		if err := s.attach(ctx); err != nil {
			return testbed.SysbenchResult{}, fmt.Errorf("database on %s: %w", s.key, err)
		}
		defer func() {
			if rerr := s.retire(ctx); err == nil && rerr != nil {
				err = fmt.Errorf("database on %s: %w", s.key, rerr)
			}
		}()
	}
	datadir := dbMount + "/data"
	prep := [][]string{
		{"mkfs.ext4", "-q", "-F", "-E", "nodiscard,lazy_itable_init=0,lazy_journal_init=0", s.dev},
		{"mkdir", "-p", dbMount},
		{"mount", "-o", "noatime", s.dev, dbMount},
		{"cp", "-a", dbTemplate, datadir},
		{"sync"},
	}
	for _, argv := range prep {
		if _, err := bed.Run(ctx, argv...); err != nil {
			return testbed.SysbenchResult{}, fmt.Errorf("database on %s: %w", s.key, err)
		}
	}
	if s.flush != nil {
		if err := s.flush(ctx); err != nil {
			return testbed.SysbenchResult{}, fmt.Errorf("database on %s: %w", s.key, err)
		}
	}
	// The warm-up pass: random 64 KiB O_DIRECT reads over the datadir's
	// files, deep-queued, the same on every system.
	if o.cacheWarm > 0 {
		if _, err := bed.Run(ctx, "fio", "--name=dbwarm", "--opendir="+datadir, "--rw=randread", "--bs=64k", "--direct=1",
			"--ioengine=libaio", "--iodepth=16", "--time_based", "--runtime="+strconv.Itoa(int(o.cacheWarm/time.Second)),
			"--output-format=terse"); err != nil {
			return testbed.SysbenchResult{}, fmt.Errorf("database on %s: warm-up reads: %w", s.key, err)
		}
	}
	res, err := measureDB(ctx, bed, datadir, o)
	if uerr := umount(ctx, bed); err == nil && uerr != nil {
		err = uerr
	}
	if err != nil {
		return testbed.SysbenchResult{}, fmt.Errorf("database on %s: %w", s.key, err)
	}
	return res, nil
}

func measureDB(ctx context.Context, bed *testbed.Bed, datadir string, o dbOptions) (testbed.SysbenchResult, error) {
	db := benchDB(bed.Run)
	if err := db.Start(ctx, datadir); err != nil {
		return testbed.SysbenchResult{}, err
	}
	_, err := db.Run(ctx, sbThreads, o.warm)
	var res testbed.SysbenchResult
	if err == nil {
		res, err = db.Run(ctx, sbThreads, o.time)
	}
	if serr := db.Stop(ctx); err == nil && serr != nil {
		err = serr
	}
	return res, err
}

func umount(ctx context.Context, bed *testbed.Bed) error {
	_, err := bed.Run(ctx, "umount", dbMount)
	return err
}

// databaseBench runs the database benchmark on every system, rounds
// times, the order reversed every other round.
func databaseBench(ctx context.Context, bed *testbed.Bed, systems []*system, o dbOptions) (map[string]*dbResult, error) {
	p := bed.Progress()
	out := map[string]*dbResult{}
	for round := 0; round < o.rounds; round++ {
		var order []*system
		for _, s := range systems {
			if !s.fioOnly {
				order = append(order, s)
			}
		}
		if round%2 == 1 {
			for i, j := 0, len(order)-1; i < j; i, j = i+1, j-1 {
				order[i], order[j] = order[j], order[i]
			}
		}
		for _, s := range order {
			p.Step("MariaDB round %d/%d on %s: copy, flush, %v warm-up reads, %v sysbench warm-up, %v measured…",
				round+1, o.rounds, s.key, o.cacheWarm, o.warm, o.time)
			res, err := runDB(ctx, bed, s, o)
			if err != nil {
				return nil, err
			}
			p.Step("  %-10s %8.1f TPS  p95 %s", s.key, res.TPS, testbed.FormatLatency(res.LatencyPct))
			if out[s.key] == nil {
				out[s.key] = &dbResult{}
			}
			out[s.key].runs = append(out[s.key].runs, res)
		}
	}
	return out, nil
}
