// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/dm"
	"github.com/tidecache/tidecache/pkg/engine"
	"github.com/tidecache/tidecache/pkg/stack"
)

// Per-volume I/O counters and latency histogram from the dm-stats region
// tidecache keeps on each volume's top device (tc-<volume>): what the
// volume's users see, whatever tier served them.

var (
	latencyDesc = volumeDesc("io_latency_seconds",
		"Latency of the I/Os completed on the volume's device, reads and writes together "+
			"(dm-stats keeps one histogram per region), from submission to completion.")
	ioCompletedDesc = prometheus.NewDesc(namespace+"_volume_io_completed_total",
		"I/Os completed on the volume's device (dm-stats reads / writes completed).",
		[]string{"volume", "pool", "op"}, nil)
	ioBytesDesc = prometheus.NewDesc(namespace+"_volume_io_bytes_total",
		"Bytes transferred by the I/Os completed on the volume's device (dm-stats sectors read / written).",
		[]string{"volume", "pool", "op"}, nil)
	ioTimeDesc = prometheus.NewDesc(namespace+"_volume_io_time_seconds_total",
		"Sum of the latencies of the I/Os completed on the volume's device (dm-stats read / write time); "+
			"divided by the rate of tidecache_volume_io_completed_total it gives the mean latency per op.",
		[]string{"volume", "pool", "op"}, nil)
	ioInFlightDesc = volumeDesc("io_in_flight", "I/Os in progress on the volume's device (dm-stats in flight).")
)

func describeLatency(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{latencyDesc, ioCompletedDesc, ioBytesDesc, ioTimeDesc, ioInFlightDesc} {
		ch <- d
	}
}

// collectLatency reads the dm-stats region of every volume whose device
// exists, creating it first if needed. A volume whose device vanished
// meanwhile is skipped; any other failure is returned after the other
// volumes were read.
func (c *collector) collectLatency(ctx context.Context, ch chan<- prometheus.Metric, vols []engine.VolumeInfo) error {
	c.statsMu.Lock()
	defer c.statsMu.Unlock()
	var errs []error
	for _, v := range vols {
		if v.State == api.StateInactive {
			continue
		}
		name := stack.DeviceName(v.Name, stack.RoleTop)
		st, err := c.readStats(ctx, name)
		if errors.Is(err, dm.ErrNotFound) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("volume %s: %w", v.Name, err))
			continue
		}
		emitLatency(ch, v, st, c.bounds)
	}
	return errors.Join(errs...)
}

func (c *collector) readStats(ctx context.Context, name string) (dm.StatsCounters, error) {
	id, err := dm.EnsureStats(ctx, c.stats, name, c.boundNs)
	if err != nil {
		return dm.StatsCounters{}, err
	}
	st, err := dm.ReadStats(ctx, c.stats, name, id)
	if err != nil {
		return dm.StatsCounters{}, err
	}
	if len(st.Histogram) != len(c.boundNs)+1 {
		return dm.StatsCounters{}, fmt.Errorf("dm stats %s: region %d has %d histogram buckets, want %d",
			name, id, len(st.Histogram), len(c.boundNs)+1)
	}
	return st, nil
}

const nsPerSecond = 1e9

// emitLatency sends the dm-stats metrics of one volume. st comes from a
// region with precise timestamps (times in ns) and one histogram count
// more than there are bounds.
//
// dm-stats counts an I/O of duration d in bucket i when
// bound[i-1] <= d < bound[i]; Prometheus buckets are d <= le. The
// difference is an I/O of exactly a bound's nanosecond, which is ignored.
func emitLatency(ch chan<- prometheus.Metric, v engine.VolumeInfo, st dm.StatsCounters, bounds []time.Duration) {
	buckets := make(map[float64]uint64, len(bounds))
	var cum uint64
	for i, b := range bounds {
		cum += st.Histogram[i]
		buckets[b.Seconds()] = cum
	}
	count := cum + st.Histogram[len(bounds)]
	sum := float64(st.ReadTime+st.WriteTime) / nsPerSecond
	ch <- prometheus.MustNewConstHistogram(latencyDesc, count, sum, buckets, v.Name, v.Pool)

	counter(ch, ioCompletedDesc, st.Reads, v.Name, v.Pool, "read")
	counter(ch, ioCompletedDesc, st.Writes, v.Name, v.Pool, "write")
	counter(ch, ioBytesDesc, st.ReadSectors*sectorSize, v.Name, v.Pool, "read")
	counter(ch, ioBytesDesc, st.WriteSectors*sectorSize, v.Name, v.Pool, "write")
	ch <- prometheus.MustNewConstMetric(ioTimeDesc, prometheus.CounterValue, float64(st.ReadTime)/nsPerSecond, v.Name, v.Pool, "read")
	ch <- prometheus.MustNewConstMetric(ioTimeDesc, prometheus.CounterValue, float64(st.WriteTime)/nsPerSecond, v.Name, v.Pool, "write")
	gauge(ch, ioInFlightDesc, float64(max(st.InFlight, 0)), v.Name, v.Pool)
}
