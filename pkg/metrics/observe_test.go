// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tidecache/tidecache/pkg/command"
	"github.com/tidecache/tidecache/pkg/engine"
)

// observingSource is an engine that answers Observe and counts every read
// of the node: a scrape should make one.
type observingSource struct {
	obs engine.Observation
	err error
	// gate, when set, holds every Observe until it is closed.
	gate chan struct{}

	mu                       sync.Mutex
	observes, volumes, pools int
}

func (s *observingSource) Observe(_ context.Context, req engine.ObserveRequest) (engine.Observation, error) {
	s.mu.Lock()
	s.observes++
	gate := s.gate
	s.mu.Unlock()
	if gate != nil {
		<-gate
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if req.Volumes != nil || req.Drift {
		return engine.Observation{}, errors.New("a scrape asked for a subset or for drift")
	}
	return s.obs, s.err
}

func (s *observingSource) Volumes(context.Context) ([]engine.VolumeInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.volumes++
	return s.obs.VolumeInfos(), s.err
}

func (s *observingSource) Pools(context.Context) ([]engine.PoolInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pools++
	return s.obs.Pools, s.err
}

// recordingRunner records the devices the SSD tools were run on; no tool
// is installed.
type recordingRunner struct {
	mu   sync.Mutex
	devs []string
}

func (r *recordingRunner) Run(_ context.Context, name string, args ...string) ([]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(args) > 0 && !slices.Contains(r.devs, args[len(args)-1]) {
		r.devs = append(r.devs, args[len(args)-1])
	}
	return nil, command.ErrNotFound
}

// TestScrapeObservesOnce: with an Observer for a Source, a scrape reads
// the node once; the volume, origin and SSD parts all use that reading
// (the SSDs read are the present members of the observed pools).
func TestScrapeObservesOnce(t *testing.T) {
	vols := testVolumes(t)
	src := &observingSource{obs: engine.Observation{
		Pools: []engine.PoolInfo{{Name: "fast", Origin: engine.OriginInfo{Path: "/dev/sdz"}, Members: []engine.MemberInfo{
			{Path: "/dev/nvme0n1", Present: true}, {Path: "/dev/nvme1n1"},
		}}},
	}}
	for _, v := range vols {
		src.obs.Volumes = append(src.obs.Volumes, engine.VolumeObservation{Info: v})
	}
	runner := &recordingRunner{}
	ssds := &SmartSource{Runner: runner, Devices: func(context.Context) ([]string, error) {
		t.Error("SmartSource.Devices called: the scrape should read the observed pools' members")
		return nil, nil
	}}
	c, err := newCollector(src, Options{SSDs: ssds, SysRoot: originSysRoot})
	if err != nil {
		t.Fatal(err)
	}
	c.knameOf = testKname
	if n := testutil.CollectAndCount(c, "tidecache_volume_size_bytes"); n == 0 {
		t.Fatal("no volume series from the observation")
	}
	if src.observes != 1 || src.volumes != 0 || src.pools != 0 {
		t.Errorf("one scrape: %d Observe, %d Volumes, %d Pools; want 1, 0, 0", src.observes, src.volumes, src.pools)
	}
	if !slices.Equal(runner.devs, []string{"/dev/nvme0n1"}) {
		t.Errorf("SSD tools ran on %q, want the present member /dev/nvme0n1 only", runner.devs)
	}
	if got := successOf(t, c, collectorOrigin); got != 1 {
		t.Errorf("origin collector success %v, want 1", got)
	}

	// An Observe that fails fails the parts of the scrape that read it
	// (they are not read again), not the scrape.
	src.err = errors.New("scan: input/output error")
	for _, part := range []string{collectorVolume, collectorOrigin, collectorSSD} {
		if v := successOf(t, c, part); v != 0 {
			t.Errorf("%s collector success %v after a failed Observe, want 0", part, v)
		}
	}
	if src.volumes != 0 || src.pools != 0 {
		t.Errorf("after a failed Observe: %d Volumes, %d Pools; want none", src.volumes, src.pools)
	}
}

// TestConcurrentScrapesShareOneObserve: scrapes that arrive while one
// reads the node wait for that reading instead of starting their own, so
// a client hammering /metrics costs one scan of the superblocks at a time.
func TestConcurrentScrapesShareOneObserve(t *testing.T) {
	src := &observingSource{gate: make(chan struct{})}
	for _, v := range testVolumes(t) {
		src.obs.Volumes = append(src.obs.Volumes, engine.VolumeObservation{Info: v})
	}
	c, err := newCollector(src, Options{})
	if err != nil {
		t.Fatal(err)
	}
	c.knameOf = testKname
	const scrapes = 5
	counts := make(chan int, scrapes)
	var wg sync.WaitGroup
	for range scrapes {
		wg.Go(func() { counts <- testutil.CollectAndCount(c, "tidecache_volume_size_bytes") })
	}
	// Once one scrape reads the node, the others have a moment to
	// arrive; then the reading is answered.
	for {
		src.mu.Lock()
		n := src.observes
		src.mu.Unlock()
		if n > 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	close(src.gate)
	wg.Wait()
	close(counts)
	for n := range counts {
		if n == 0 {
			t.Error("a scrape that waited for another's reading got no volume series")
		}
	}
	if src.observes != 1 {
		t.Errorf("%d scrapes at once read the node %d times, want 1", scrapes, src.observes)
	}
	// A scrape after them reads the node again: nothing is cached.
	testutil.CollectAndCount(c, "tidecache_volume_size_bytes")
	if src.observes != 2 {
		t.Errorf("a later scrape: %d reads of the node in all, want 2", src.observes)
	}
}

// successOf scrapes c and returns tidecache_scrape_collector_success of
// the collector name.
func successOf(t *testing.T, c *collector, name string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "tidecache_scrape_collector_success" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "collector" && l.GetValue() == name {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("no scrape_collector_success for %s", name)
	return 0
}
