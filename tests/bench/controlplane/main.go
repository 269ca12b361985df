// SPDX-License-Identifier: Apache-2.0

// Command controlplane measures tidecached's control plane on the host, no
// VM: a real embedded etcd (pkg/etcdserver, port 0, data in a temporary
// directory), a real pkg/store and a real pkg/reconcile Controller, in one
// process as `tidecached run --embedded-etcd` runs them. Only the engine, the
// part that would load device-mapper tables, is faked in memory
// (pkg/reconcile/reconciletest, as in the reconcile tests); its CreateVolume can wait a configurable "device ready"
// delay, 0 by default, so the figures are the control plane's own cost.
//
// It reports
//  1. create → ready latency: from calling store.CreateVolumeSpec to the
//     volume's status, seen through an etcd watch, being "active" with an
//     ObservedRevision at or above the spec's revision (p50/p99 over
//     -creates sequential creates);
//  2. the reconcile of -volumes specs written at once: time until every
//     status has converged, and reconciles per second;
//  3. the process's VmRSS after those volumes converged (it includes the
//     embedded etcd);
//  4. the scrape time of the pkg/metrics collectors over -scrape-volumes
//     volumes (p50/p99 of prometheus.Registry.Gather) and the size of the
//     text exposition.
//
// Usage:
//
//	go run ./tests/bench/controlplane [-volumes 200] [-creates 50] [-scrape-volumes 100] [-ready-delay 0] [-out FILE]
//
// Progress goes to stderr, the markdown report to stdout and, with -out,
// is appended to FILE. It is a benchmark, not a test: it fails only when
// something could not be measured.
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/etcdserver"
	"github.com/tidecache/tidecache/pkg/metrics"
	"github.com/tidecache/tidecache/pkg/pool"
	"github.com/tidecache/tidecache/pkg/reconcile"
	"github.com/tidecache/tidecache/pkg/store"
)

// node and poolName are what every spec names; the fake engine has that
// one pool.
const (
	node     = "bench-node"
	poolName = "pool0"
)

type options struct {
	volumes       int
	creates       int
	scrapeVolumes int
	gathers       int
	readyDelay    time.Duration
	timeout       time.Duration
	out           string
}

func main() {
	var o options
	flag.IntVar(&o.volumes, "volumes", 200, "volume specs written at once for the bulk reconcile")
	flag.IntVar(&o.creates, "creates", 50, "sequential creates for the create → ready latency")
	flag.IntVar(&o.scrapeVolumes, "scrape-volumes", 100, "volumes the metrics source reports for the scrape timing")
	flag.IntVar(&o.gathers, "gathers", 100, "scrapes timed")
	flag.DurationVar(&o.readyDelay, "ready-delay", 0, "fake device-mapper time for CreateVolume to return a ready device")
	flag.DurationVar(&o.timeout, "timeout", 5*time.Minute, "give up on a phase that has not converged after this long")
	flag.StringVar(&o.out, "out", "", "also append the report to this markdown file")
	flag.Parse()
	if o.volumes < 1 || o.creates < 1 || o.scrapeVolumes < 1 || o.gathers < 1 || o.readyDelay < 0 || o.timeout <= 0 {
		fmt.Fprintln(os.Stderr, "controlplane: -volumes, -creates, -scrape-volumes and -gathers want at least 1, -ready-delay at least 0, -timeout more than 0")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := run(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "controlplane:", err)
		os.Exit(1)
	}
	text := rep.markdown()
	fmt.Print(text)
	if o.out != "" {
		if err := appendFile(o.out, text); err != nil {
			fmt.Fprintln(os.Stderr, "controlplane:", err)
			os.Exit(1)
		}
	}
}

func appendFile(path, text string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("append report: %w", err)
	}
	if _, err := f.WriteString("\n" + text); err != nil {
		f.Close()
		return fmt.Errorf("append report to %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("append report to %s: %w", path, err)
	}
	return nil
}

func progress(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "%s  "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, a...)...)
}

// report is what run measured.
type report struct {
	o          options
	date       time.Time
	cpus       int
	goVersion  string
	createLat  []time.Duration // sorted
	bulkWrite  time.Duration   // writing the specs
	bulkTotal  time.Duration   // first write to the last status converged
	reconciles float64         // tidecache_reconcile_total during the bulk phase
	rssKiB     uint64
	hwmKiB     uint64
	heapBytes  uint64
	gatherLat  []time.Duration // sorted
	exposition int
	series     int
}

func run(ctx context.Context, o options) (*report, error) {
	rep := &report{o: o, date: time.Now().UTC(), cpus: goruntime.NumCPU(), goVersion: goruntime.Version()}
	dir, err := os.MkdirTemp("", "tidecache-controlplane-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)

	progress("starting embedded etcd in %s", dir)
	srv, err := etcdserver.Start(ctx, etcdserver.Config{
		DataDir: filepath.Join(dir, "etcd"), ClientURL: "http://127.0.0.1:0", PeerURL: "http://127.0.0.1:0",
	})
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	scfg := store.DefaultConfig()
	scfg.Endpoints = srv.Endpoints()
	st, err := store.Open(ctx, scfg)
	if err != nil {
		return nil, err
	}
	defer st.Close()

	// The controller as the daemon wires it, with its metrics.
	reg := prometheus.NewRegistry()
	rmet, err := reconcile.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	eng := newFakeEngine(poolName, o.readyDelay)
	rc := reconcile.Default(node)
	rc.Metrics = rmet
	ctrl, err := reconcile.New(rc, eng, st)
	if err != nil {
		return nil, err
	}
	tr, err := startTracker(ctx, st)
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := ctrl.Run(runCtx); err != nil {
			progress("controller: %v", err)
		}
	}()
	defer func() {
		cancel()
		<-done
	}()
	if err := waitFor(ctx, o.timeout, ctrl.EtcdUp); err != nil {
		return nil, fmt.Errorf("controller never reached the store: %w", err)
	}

	if err := bulk(ctx, o, st, tr, reg, rep); err != nil {
		return nil, err
	}
	if err := readRSS(rep); err != nil {
		return nil, err
	}
	var ms goruntime.MemStats
	goruntime.ReadMemStats(&ms)
	rep.heapBytes = ms.HeapInuse
	progress("VmRSS %d KiB (peak %d KiB), Go heap in use %d KiB", rep.rssKiB, rep.hwmKiB, rep.heapBytes>>10)

	if err := creates(ctx, o, st, tr, rep); err != nil {
		return nil, err
	}
	if err := scrape(o, rep); err != nil {
		return nil, err
	}
	return rep, nil
}

// spec is a realistic volume spec: 100 GiB on the HDDs, a 10 GiB write
// tier and, on every other volume, a 4 GiB read tier.
func spec(name string, i int) api.VolumeSpec {
	s := api.VolumeSpec{Name: name, Node: node, Pool: poolName, SizeBytes: 100 << 30, WriteCacheBytes: 10 << 30}
	if i%2 == 0 {
		s.ReadCacheBytes = 4 << 30
	}
	return s
}

// bulk writes o.volumes specs at once and waits for every status.
func bulk(ctx context.Context, o options, st *store.Store, tr *tracker, reg *prometheus.Registry, rep *report) error {
	before, err := reconcileTotal(reg)
	if err != nil {
		return err
	}
	progress("writing %d volume specs at once", o.volumes)
	revs := make([]int64, o.volumes)
	errs := make([]error, o.volumes)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range o.volumes {
		wg.Go(func() {
			m, err := st.CreateVolumeSpec(ctx, spec(fmt.Sprintf("bulk-%04d", i), i))
			revs[i], errs[i] = m.ModRevision, err
		})
	}
	wg.Wait()
	rep.bulkWrite = time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("write specs: %w", err)
	}
	progress("specs written in %s; waiting for %d statuses", rep.bulkWrite.Round(time.Millisecond), o.volumes)
	var last time.Time
	for i := range o.volumes {
		at, err := tr.wait(ctx, o.timeout, fmt.Sprintf("bulk-%04d", i), revs[i])
		if err != nil {
			return err
		}
		if at.After(last) {
			last = at
		}
	}
	rep.bulkTotal = last.Sub(start)
	after, err := reconcileTotal(reg)
	if err != nil {
		return err
	}
	rep.reconciles = after - before
	progress("%d volumes converged %s after the first write (%.0f reconciles)", o.volumes, rep.bulkTotal.Round(time.Millisecond), rep.reconciles)
	return nil
}

// creates measures o.creates sequential create → ready latencies.
func creates(ctx context.Context, o options, st *store.Store, tr *tracker, rep *report) error {
	progress("%d sequential creates (with %d volumes already on the node)", o.creates, o.volumes)
	for i := range o.creates {
		name := fmt.Sprintf("lat-%04d", i)
		start := time.Now()
		m, err := st.CreateVolumeSpec(ctx, spec(name, i))
		if err != nil {
			return fmt.Errorf("create %s: %w", name, err)
		}
		at, err := tr.wait(ctx, o.timeout, name, m.ModRevision)
		if err != nil {
			return err
		}
		rep.createLat = append(rep.createLat, max(at.Sub(start), 0))
	}
	slices.Sort(rep.createLat)
	progress("create → ready p50 %s p99 %s", pct(rep.createLat, 50), pct(rep.createLat, 99))
	return nil
}

// scrape times Gather of a registry holding only the pkg/metrics
// collectors, over a source of o.scrapeVolumes volumes (no dm-stats, no
// SSD health).
func scrape(o options, rep *report) error {
	reg := prometheus.NewRegistry()
	src := newFakeEngine(poolName, 0)
	for i := range o.scrapeVolumes {
		s := spec(fmt.Sprintf("scrape-%04d", i), i)
		req := pool.VolumeRequest{Name: s.Name, Size: s.SizeBytes, WriteCache: s.WriteCacheBytes, ReadCache: s.ReadCacheBytes}
		if _, err := src.CreateVolume(context.Background(), s.Pool, req); err != nil {
			return err
		}
	}
	if err := metrics.Register(reg, src, metrics.Options{}); err != nil {
		return err
	}
	progress("timing %d scrapes of %d volumes", o.gathers, o.scrapeVolumes)
	if _, err := reg.Gather(); err != nil { // warm-up
		return fmt.Errorf("gather: %w", err)
	}
	for range o.gathers {
		start := time.Now()
		if _, err := reg.Gather(); err != nil {
			return fmt.Errorf("gather: %w", err)
		}
		rep.gatherLat = append(rep.gatherLat, time.Since(start))
	}
	slices.Sort(rep.gatherLat)
	mfs, err := reg.Gather()
	if err != nil {
		return fmt.Errorf("gather: %w", err)
	}
	var buf bytes.Buffer
	for _, mf := range mfs {
		rep.series += len(mf.GetMetric())
		if _, err := expfmt.MetricFamilyToText(&buf, mf); err != nil {
			return fmt.Errorf("encode exposition: %w", err)
		}
	}
	rep.exposition = buf.Len()
	progress("scrape p50 %s p99 %s, %d series, %d bytes", pct(rep.gatherLat, 50), pct(rep.gatherLat, 99), rep.series, rep.exposition)
	return nil
}

// reconcileTotal sums tidecache_reconcile_total over its labels.
func reconcileTotal(reg *prometheus.Registry) (float64, error) {
	mfs, err := reg.Gather()
	if err != nil {
		return 0, fmt.Errorf("gather reconcile metrics: %w", err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() != "tidecache_reconcile_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			n += m.GetCounter().GetValue()
		}
	}
	return n, nil
}

// readRSS reads VmRSS and VmHWM from /proc/self/status.
func readRSS(rep *report) error {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return fmt.Errorf("read RSS: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok || (key != "VmRSS" && key != "VmHWM") {
			continue
		}
		kib, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(val), " kB"), 10, 64)
		if err != nil {
			return fmt.Errorf("read RSS: %s: %w", key, err)
		}
		if key == "VmRSS" {
			rep.rssKiB = kib
		} else {
			rep.hwmKiB = kib
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read RSS: %w", err)
	}
	if rep.rssKiB == 0 {
		return errors.New("read RSS: no VmRSS in /proc/self/status")
	}
	return nil
}

// waitFor polls cond until it holds, ctx is done or timeout passes.
func waitFor(ctx context.Context, timeout time.Duration, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// pct is the p-th percentile of sorted durations (nearest rank).
func pct(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := (len(sorted)*p + 99) / 100
	return sorted[min(max(i, 1), len(sorted))-1]
}
