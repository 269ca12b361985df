// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/singleflight"

	"github.com/tidecache/tidecache/pkg/dm"
	"github.com/tidecache/tidecache/pkg/engine"
)

// namespace prefixes every tidecache metric.
const namespace = "tidecache"

// DefaultTimeout bounds the kernel and tool reads of one scrape.
const DefaultTimeout = 10 * time.Second

// Source lists the node's volumes with what the kernel reports about them
// right now. *engine.Engine implements it. It is called once per scrape,
// or not at all when the Source is also an Observer.
type Source interface {
	Volumes(ctx context.Context) ([]engine.VolumeInfo, error)
}

// Observer reads the whole node at once; *engine.Engine implements it.
// When the Source is one, a scrape calls Observe once (one scan of the
// superblocks) and takes the volumes, the pools (unless Options.Pools
// names another source) and the SSDs to query (when Options.SSDs is a
// *SmartSource) from its answer, instead of each part scanning on its own.
type Observer interface {
	Observe(ctx context.Context, req engine.ObserveRequest) (engine.Observation, error)
}

// Options configures the collectors Register adds. The zero value gives
// the per-volume metrics only.
type Options struct {
	// Stats, if set, enables the per-volume latency histograms and I/O
	// counters from dm-stats: a region is kept on each volume's top device
	// (dm.EnsureStats) and read at every scrape. Pass the daemon's
	// *dm.Client.
	Stats dm.Messenger
	// LatencyBounds are the upper bounds of the latency histogram buckets
	// (strictly increasing, at least 1 µs apart from zero); nil means
	// DefaultLatencyBounds. dm-stats counts in nanoseconds.
	LatencyBounds []time.Duration
	// SSDs, if set, enables the per-SSD health metrics.
	SSDs SSDSource
	// Pools, if set, enables the per-pool origin array metrics (md
	// redundancy and rebuild progress from sysfs). When nil and the Source
	// also implements PoolSource (*engine.Engine does), the Source is used.
	Pools PoolSource
	// SysRoot is where sysfs is mounted; "" means "/sys".
	SysRoot string
	// Timeout bounds one scrape's reads; zero means DefaultTimeout.
	Timeout time.Duration
	// Logger receives a warning for every source that fails during a
	// scrape (the failure is also visible as
	// tidecache_scrape_collector_success 0); nil discards them.
	Logger *slog.Logger
}

// DefaultLatencyBounds span an NVMe write (tens of µs) to an HDD seek
// under a deep queue (seconds).
var DefaultLatencyBounds = []time.Duration{
	50 * time.Microsecond, 100 * time.Microsecond, 250 * time.Microsecond, 500 * time.Microsecond,
	time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond, 10 * time.Millisecond,
	25 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond,
	500 * time.Millisecond, time.Second, 2500 * time.Millisecond, 5 * time.Second, 10 * time.Second,
}

// Register adds the tidecache collectors reading src (and, per opts,
// dm-stats and SSD health) to reg. The daemon's own gauges are separate:
// see NewDaemonMetrics.
func Register(reg prometheus.Registerer, src Source, opts Options) error {
	c, err := newCollector(src, opts)
	if err != nil {
		return err
	}
	if err := reg.Register(c); err != nil {
		return fmt.Errorf("register tidecache metrics: %w", err)
	}
	return nil
}

// Collector names, the values of the collector label of the scrape
// metrics.
const (
	collectorVolume  = "volume"
	collectorDMStats = "dmstats"
	collectorSSD     = "ssd"
	collectorOrigin  = "origin"
)

var (
	scrapeSuccessDesc = prometheus.NewDesc(
		namespace+"_scrape_collector_success",
		"1 if the source of this collector answered during the scrape, 0 if it failed (the daemon logs why).",
		[]string{"collector"}, nil)
	scrapeDurationDesc = prometheus.NewDesc(
		namespace+"_scrape_collector_duration_seconds",
		"Time this collector took during the scrape.",
		[]string{"collector"}, nil)
)

// collector is the one prometheus.Collector Register adds; it runs the
// volume, dm-stats and SSD parts and reports each one's success.
type collector struct {
	src     Source
	stats   dm.Messenger
	bounds  []time.Duration
	boundNs []uint64
	ssds    SSDSource
	pools   PoolSource
	// observer is src when it is an Observer; poolsObserved says the
	// pools come from it too.
	observer      Observer
	poolsObserved bool
	sysRoot       string
	knameOf       func(path string) (string, error)
	timeout       time.Duration
	log           *slog.Logger
	// statsMu serialises the dm-stats part of concurrent scrapes, so two
	// of them never race to create a volume's region.
	statsMu sync.Mutex
	// fill keeps each write tier's recent readings, from which the
	// written-back counter and the time-to-full forecast are derived
	// (fill.go); now is when a scrape read them (time.Now but in tests).
	fill *fillTracker
	now  func() time.Time
	// observing shares one Observe among the scrapes that ask for it at
	// the same time: scrapers hammering /metrics cost one scan of the
	// superblocks at a time, not one each.
	observing singleflight.Group
}

func newCollector(src Source, opts Options) (*collector, error) {
	if src == nil {
		return nil, errors.New("metrics: nil Source")
	}
	c := &collector{
		src: src, stats: opts.Stats, ssds: opts.SSDs, pools: opts.Pools, sysRoot: opts.SysRoot,
		bounds: opts.LatencyBounds, timeout: opts.Timeout, log: opts.Logger,
		fill: newFillTracker(), now: time.Now,
	}
	c.observer, _ = src.(Observer)
	if c.pools == nil {
		c.pools, _ = src.(PoolSource)
		c.poolsObserved = c.observer != nil
	}
	c.knameOf = defaultKname(c.sysRoot)
	if c.bounds == nil {
		c.bounds = DefaultLatencyBounds
	}
	var last time.Duration
	for i, b := range c.bounds {
		if b < time.Microsecond || b <= last {
			return nil, fmt.Errorf("metrics: latency bound %d (%v) must be at least 1µs and above the previous one", i, b)
		}
		last = b
		c.boundNs = append(c.boundNs, uint64(b.Nanoseconds()))
	}
	if c.timeout <= 0 {
		c.timeout = DefaultTimeout
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// Describe sends every description, whether or not the optional parts are
// enabled, so the registry checks them all for consistency.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- scrapeSuccessDesc
	ch <- scrapeDurationDesc
	describeVolume(ch)
	describeFill(ch)
	describeLatency(ch)
	describeSSD(ch)
	describeOrigin(ch)
}

// Collect reads the kernel and the tools once and emits const metrics.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	s := c.newScrape(ctx)
	var wg sync.WaitGroup
	if s.ssds != nil {
		wg.Go(func() {
			c.run(ctx, ch, collectorSSD, func(ctx context.Context, ch chan<- prometheus.Metric) error {
				return c.collectSSDs(ctx, ch, s.ssds)
			})
		})
	}
	if s.pools != nil {
		wg.Go(func() {
			c.run(ctx, ch, collectorOrigin, func(ctx context.Context, ch chan<- prometheus.Metric) error {
				return c.collectOrigins(ctx, ch, s.pools)
			})
		})
	}
	c.run(ctx, ch, collectorVolume, func(ctx context.Context, ch chan<- prometheus.Metric) error {
		return c.collectVolumes(ctx, ch, s.volumes)
	})
	wg.Wait()
}

// scrape is what the parts of one scrape read the node through; nil
// for a part that is off.
type scrape struct {
	volumes func(context.Context) ([]engine.VolumeInfo, error)
	pools   func(context.Context) ([]engine.PoolInfo, error)
	ssds    func(context.Context) ([]SSDHealth, error)
}

// newScrape observes the node once when the Source can (see Observer),
// so the volume, origin and SSD parts share one scan of the superblocks;
// otherwise each part asks its own source.
func (c *collector) newScrape(ctx context.Context) scrape {
	s := scrape{volumes: c.src.Volumes}
	if c.pools != nil {
		s.pools = c.pools.Pools
	}
	if c.ssds != nil {
		s.ssds = c.ssds.SSDs
	}
	if c.observer == nil {
		return s
	}
	v, err, _ := c.observing.Do("observe", func() (any, error) {
		return c.observer.Observe(ctx, engine.ObserveRequest{})
	})
	obs, _ := v.(engine.Observation)
	s.volumes = func(context.Context) ([]engine.VolumeInfo, error) { return obs.VolumeInfos(), err }
	if c.poolsObserved {
		s.pools = func(context.Context) ([]engine.PoolInfo, error) { return obs.Pools, err }
	}
	if r, ok := c.ssds.(*SmartSource); ok {
		s.ssds = func(ctx context.Context) ([]SSDHealth, error) {
			if err != nil {
				return nil, fmt.Errorf("list SSDs: %w", err)
			}
			return r.Read(ctx, SSDPaths(obs.Pools))
		}
	}
	return s
}

// run runs one part of the scrape and reports its duration and success.
func (c *collector) run(ctx context.Context, ch chan<- prometheus.Metric, name string,
	f func(context.Context, chan<- prometheus.Metric) error) {
	start := time.Now()
	err := f(ctx, ch)
	ch <- prometheus.MustNewConstMetric(scrapeDurationDesc, prometheus.GaugeValue, time.Since(start).Seconds(), name)
	ok := 1.0
	if err != nil {
		ok = 0
		c.log.LogAttrs(ctx, slog.LevelWarn, "metrics: collector failed",
			slog.String("collector", name), slog.Any("err", err))
	}
	ch <- prometheus.MustNewConstMetric(scrapeSuccessDesc, prometheus.GaugeValue, ok, name)
}

func (c *collector) collectVolumes(ctx context.Context, ch chan<- prometheus.Metric,
	volumes func(context.Context) ([]engine.VolumeInfo, error)) error {
	vols, err := volumes(ctx)
	if err != nil {
		return fmt.Errorf("list volumes: %w", err)
	}
	fill := c.fill.observe(c.now(), vols)
	for _, v := range vols {
		emitVolume(ch, v)
		emitFill(ch, v, fill[fillKey{v.Pool, v.Name}])
	}
	if c.stats != nil {
		c.run(ctx, ch, collectorDMStats, func(ctx context.Context, ch chan<- prometheus.Metric) error {
			return c.collectLatency(ctx, ch, vols)
		})
	}
	return nil
}

func gauge(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

func counter(ch chan<- prometheus.Metric, d *prometheus.Desc, v uint64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
