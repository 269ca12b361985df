// SPDX-License-Identifier: Apache-2.0

// Package metrics owns tidecache's Prometheus metrics: the per-volume
// cache metrics read from the kernel at scrape time, the per-volume latency
// histograms kept by dm-stats, the per-SSD health read with nvme-cli or
// smartctl, and the daemon's own gauges (etcd up, leader, build info).
// docs/metrics.md lists every series; this package's tests check that it
// does.
//
// It follows the node_exporter pattern: nothing is cached between scrapes.
// Every scrape asks the Source (the engine) for the volumes and what the
// kernel reports about them right now, and emits const metrics built from
// descriptions declared once. The one exception is the write cache's fill
// (fill.go): dm-writecache counts no blocks written back and has no rate,
// so the collector keeps each write tier's readings of the last minute to
// derive the written-back counter and the time-to-full forecast.
//
// With an engine that can observe the whole node at once (Observer), a
// scrape scans the superblocks once and the volume, origin and SSD parts
// share that reading. A feature that is absent (no SSD source, no
// dm-stats messenger, no nvme or smartctl installed, a volume without a read
// tier) yields no series, not an error. A source that fails is reported as
// tidecache_scrape_collector_success{collector="..."} 0 and logged; the rest
// of the scrape still succeeds, so the daemon's own metrics stay visible
// when the kernel side is in trouble.
//
// Nothing is registered globally: the caller passes its registry.
//
//	reg := prometheus.NewRegistry()
//	err := metrics.Register(reg, eng, metrics.Options{
//		Stats:  dmClient,                          // latency histograms (dm-stats)
//		SSDs:   &metrics.SmartSource{Devices: ssdPaths},
//		Logger: logger,
//	})
//	daemon, err := metrics.NewDaemonMetrics(reg, version.Version)
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// The only side effect of a scrape on the kernel is the first one's: with
// Options.Stats set, a dm-stats region is created on each volume's top
// device that has none (dm.EnsureStats), which the kernel does with a brief
// internal suspend and resume of the device.
package metrics
