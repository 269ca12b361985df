// SPDX-License-Identifier: Apache-2.0

package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/etcdserver/etcdtest"
	"github.com/tidecache/tidecache/pkg/reconcile"
	"github.com/tidecache/tidecache/pkg/reconcile/reconciletest"
	"github.com/tidecache/tidecache/pkg/store"
)

// One embedded etcd serves the package; each test works under its own key
// prefix. The outage test starts a member of its own, which it stops.
var endpoints []string

func TestMain(m *testing.M) {
	os.Exit(etcdtest.RunWithMember(m, func(eps []string) { endpoints = eps }))
}

var prefixSeq atomic.Int64

func storeConfig(t *testing.T, eps []string) store.Config {
	cfg := store.DefaultConfig()
	cfg.Endpoints = eps
	cfg.Prefix = fmt.Sprintf("/test/%s-%d/v1/", regexp.MustCompile(`[^A-Za-z0-9_-]+`).ReplaceAllString(t.Name(), "_"), prefixSeq.Add(1))
	cfg.DialTimeout = time.Second
	cfg.KeepAlive = time.Second
	cfg.RequestTimeout = time.Second
	return cfg
}

func openStore(t *testing.T, cfg store.Config) *store.Store {
	t.Helper()
	s, err := store.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// faultStore wraps the real store to inject what a healthy etcd does not
// produce on demand: malformed records and a compacted watch.
type faultStore struct {
	*store.Store

	mu      sync.Mutex
	lists   int
	invalid map[string]bool // volume spec names reported as malformed
	blind   bool            // drop watch events, as if they were compacted away
	compact chan struct{}   // a send fails the current watch with ErrCompacted
}

func (f *faultStore) listCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lists
}

func (f *faultStore) setBlind(b bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.blind = b
}

func (f *faultStore) markInvalid(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.invalid[name] = true
}

func (f *faultStore) invalidRecord(name string) store.InvalidRecord {
	return store.InvalidRecord{Key: f.Prefix() + "volumes/" + name + "/spec", Err: errors.New("unknown apiVersion \"tidecache/v9\"")}
}

func (f *faultStore) ListVolumeSpecs(ctx context.Context) ([]store.Item[api.VolumeSpec], int64, []store.InvalidRecord, error) {
	items, rev, invalid, err := f.Store.ListVolumeSpecs(ctx)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists++
	var keep []store.Item[api.VolumeSpec]
	for _, it := range items {
		if f.invalid[it.Value.Name] {
			invalid = append(invalid, f.invalidRecord(it.Value.Name))
			continue
		}
		keep = append(keep, it)
	}
	return keep, rev, invalid, err
}

func (f *faultStore) GetVolumeSpec(ctx context.Context, name string) (api.VolumeSpec, store.Meta, error) {
	f.mu.Lock()
	bad := f.invalid[name]
	f.mu.Unlock()
	if bad {
		return api.VolumeSpec{}, store.Meta{}, f.invalidRecord(name)
	}
	return f.Store.GetVolumeSpec(ctx, name)
}

func (f *faultStore) Watch(ctx context.Context, from int64) <-chan store.WatchResult {
	in := f.Store.Watch(ctx, from)
	out := make(chan store.WatchResult)
	go func() {
		defer close(out)
		for {
			select {
			case <-ctx.Done():
				return
			case <-f.compact:
				select {
				case out <- store.WatchResult{Err: fmt.Errorf("injected: %w", store.ErrCompacted)}:
				case <-ctx.Done():
				}
				return
			case wr, ok := <-in:
				if !ok {
					return
				}
				f.mu.Lock()
				drop := f.blind && wr.Err == nil
				var evs []store.Event
				for _, ev := range wr.Events {
					if ev.Kind == store.KindVolumeSpec && f.invalid[ev.Name] && ev.Type == store.Put {
						ir := f.invalidRecord(ev.Name)
						ev.Value, ev.Invalid = nil, &ir
					}
					evs = append(evs, ev)
				}
				wr.Events = evs
				f.mu.Unlock()
				if drop {
					continue
				}
				select {
				case out <- wr:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out
}

// env is a controller for node "n1" over a real store and a fake engine.
type env struct {
	t       *testing.T
	st      *store.Store
	fs      *faultStore
	eng     *reconciletest.Engine
	ssds    *reconciletest.SSDs
	reg     *prometheus.Registry
	metrics *reconcile.Metrics
	cfg     reconcile.Config
	ctrl    *reconcile.Controller
	etcdUp  atomic.Int32 // 0 unknown, 1 up, 2 down
	stop    func()
}

// fastConfig is a configuration with test-sized intervals.
func fastConfig() reconcile.Config {
	cfg := reconcile.Default("n1")
	cfg.ResyncInterval = time.Hour // tests resync explicitly unless they set it
	cfg.HealthInterval = 50 * time.Millisecond
	cfg.StoreTimeout = time.Second
	cfg.MinBackoff = 10 * time.Millisecond
	cfg.MaxBackoff = 200 * time.Millisecond
	cfg.ProgressInterval = 10 * time.Millisecond
	return cfg
}

func newEnv(t *testing.T, mod func(*reconcile.Config)) *env {
	t.Helper()
	return newEnvAt(t, storeConfig(t, endpoints), reconciletest.NewEngine("fast"), mod)
}

func newEnvAt(t *testing.T, scfg store.Config, eng *reconciletest.Engine, mod func(*reconcile.Config)) *env {
	t.Helper()
	e := &env{t: t, eng: eng, ssds: &reconciletest.SSDs{}, reg: prometheus.NewRegistry()}
	e.st = openStore(t, scfg)
	e.fs = &faultStore{Store: e.st, invalid: map[string]bool{}, compact: make(chan struct{})}
	m, err := reconcile.NewMetrics(e.reg)
	if err != nil {
		t.Fatal(err)
	}
	e.metrics = m
	e.cfg = fastConfig()
	e.cfg.Metrics = m
	e.cfg.SSDs = e.ssds
	e.cfg.Logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e.cfg.OnEtcdUp = func(up bool) {
		if up {
			e.etcdUp.Store(1)
		} else {
			e.etcdUp.Store(2)
		}
	}
	if mod != nil {
		mod(&e.cfg)
	}
	return e
}

// start runs the controller until the test ends.
func (e *env) start() *env {
	e.t.Helper()
	ctrl, err := reconcile.New(e.cfg, e.eng, e.fs)
	if err != nil {
		e.t.Fatal(err)
	}
	e.ctrl = ctrl
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := ctrl.Run(ctx); err != nil {
			e.t.Errorf("Run: %v", err)
		}
	}()
	var once sync.Once
	e.stop = func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				e.t.Error("controller did not stop within 10s")
			}
		})
	}
	e.t.Cleanup(e.stop)
	return e
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(p[:len(p)-1]))
	return len(p), nil
}

func (e *env) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	e.t.Cleanup(cancel)
	return ctx
}

// waitFor polls cond until it holds, failing the test after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// spec returns a writeback-capable spec for node n1 in pool fast.
func spec(name string) api.VolumeSpec {
	return api.VolumeSpec{Name: name, Node: "n1", Pool: "fast", SizeBytes: 1 << 30, WriteCacheBytes: 64 << 20}
}

func (e *env) createSpec(s api.VolumeSpec) store.Meta {
	e.t.Helper()
	m, err := e.st.CreateVolumeSpec(e.ctx(), s)
	if err != nil {
		e.t.Fatal(err)
	}
	return m
}

func (e *env) updateSpec(name string, f func(*api.VolumeSpec)) store.Meta {
	e.t.Helper()
	s, m, err := e.st.GetVolumeSpec(e.ctx(), name)
	if err != nil {
		e.t.Fatal(err)
	}
	f(&s)
	m, err = e.st.UpdateVolumeSpec(e.ctx(), s, m.ModRevision)
	if err != nil {
		e.t.Fatal(err)
	}
	return m
}

func (e *env) status(name string) (api.VolumeStatus, bool) {
	st, _, err := e.st.GetVolumeStatus(e.ctx(), name)
	if errors.Is(err, store.ErrNotFound) {
		return api.VolumeStatus{}, false
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return st, true
}

// waitStatus waits for a status of name that satisfies cond.
func (e *env) waitStatus(name, what string, cond func(api.VolumeStatus) bool) api.VolumeStatus {
	e.t.Helper()
	var last api.VolumeStatus
	waitFor(e.t, name+" status: "+what, func() bool {
		st, ok := e.status(name)
		last = st
		return ok && cond(st)
	})
	return last
}

// metric returns the value of the series of name whose labels include
// want, summed over matches (histograms: their sample count).
func (e *env) metric(name string, want map[string]string) float64 {
	e.t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		e.t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for k, v := range want {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == k && lp.GetValue() == v {
						found = true
					}
				}
				if !found {
					continue next
				}
			}
			switch {
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Gauge != nil:
				sum += m.Gauge.GetValue()
			case m.Histogram != nil:
				sum += float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return sum
}
