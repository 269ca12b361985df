// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"context"
	"errors"
	"fmt"
	"io/fs"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/procfs/blockdevice"

	"github.com/tidecache/tidecache/pkg/blockdev"
	"github.com/tidecache/tidecache/pkg/engine"
	"github.com/tidecache/tidecache/pkg/mdraid"
)

// Per-pool origin metrics, read from sysfs at scrape time: the redundancy
// of each pool's md array (the HDD RAID10, mdraid.ReadHealth), and the I/O
// counters of any origin device, md array or LUN (/sys/block/<dev>/stat).
// An origin that is not an md array (a hardware RAID LUN) or is not
// running has no redundancy series; one that is not present has none at
// all. Neither is a scrape error.

// PoolSource lists the node's pools. *engine.Engine implements it.
type PoolSource interface {
	Pools(ctx context.Context) ([]engine.PoolInfo, error)
}

var originLabels = []string{"pool", "device"}

func originDesc(name, help string, extra ...string) *prometheus.Desc {
	return prometheus.NewDesc(namespace+"_origin_"+name, help, append(append([]string{}, originLabels...), extra...), nil)
}

var (
	originDegradedDesc = originDesc("degraded",
		"1 if the pool's md array runs with fewer in-sync members than slots (md/degraded > 0): it has lost redundancy until a rebuild completes.")
	originMembersDesc = originDesc("members",
		"Slots of the pool's md array (md/raid_disks).")
	originFailedDesc = originDesc("failed_members",
		"Slots of the pool's md array without a working, in-sync member (md/degraded): failed members, and replacements not rebuilt yet.")
	originSyncActionDesc = originDesc("sync_action",
		"1 for the md array's current sync action (md/sync_action): idle, resync, recover (rebuild onto a new member), check, repair, reshape, frozen; 0 for the others.",
		"action")
	originSyncProgressDesc = originDesc("sync_progress_ratio",
		"Share of the running resync, recovery, check or reshape done, 0..1 (md/sync_completed). Absent when no sync runs.")
	originDescs = []*prometheus.Desc{originDegradedDesc, originMembersDesc, originFailedDesc, originSyncActionDesc, originSyncProgressDesc,
		originReadsDesc, originWritesDesc, originReadTimeDesc, originWriteTimeDesc, originIOTimeDesc, originInFlightDesc}

	// I/O of the origin device itself (/sys/block/<dev>/stat), for any
	// origin, md array or not: the HDDs' side of the cache. Average
	// latency is rate(..._time_seconds_total) / rate(..._completed_total).
	originReadsDesc = originDesc("reads_completed_total",
		"Reads the origin device completed (/sys/block/<dev>/stat).")
	originWritesDesc = originDesc("writes_completed_total",
		"Writes the origin device completed, the cache's write-back and writes that went around it included (/sys/block/<dev>/stat).")
	originReadTimeDesc = originDesc("read_time_seconds_total",
		"Time the origin's reads took, summed over reads: divided by the reads completed it is their average latency, which rises when write-back crowds the HDDs.")
	originWriteTimeDesc = originDesc("write_time_seconds_total",
		"Time the origin's writes took, summed over writes.")
	originIOTimeDesc = originDesc("io_time_seconds_total",
		"Time the origin had at least one I/O in flight: its rate is the device's utilisation, 0..1.")
	originInFlightDesc = originDesc("ios_in_progress",
		"I/Os in flight on the origin device now: its queue depth, write-back included.")
)

// syncActions are md's sync_action values, each exported with 0 or 1.
var syncActions = []string{"idle", "resync", "recover", "check", "repair", "reshape", "frozen"}

func describeOrigin(ch chan<- *prometheus.Desc) {
	for _, d := range originDescs {
		ch <- d
	}
}

// collectOrigins emits the array health of every pool's origin. A pool
// whose origin cannot be read (other than "not an md array" or "not
// present") is skipped and its error returned after the others.
func (c *collector) collectOrigins(ctx context.Context, ch chan<- prometheus.Metric,
	list func(context.Context) ([]engine.PoolInfo, error)) error {
	pools, err := list(ctx)
	if err != nil {
		return fmt.Errorf("list pools: %w", err)
	}
	var errs []error
	for _, p := range pools {
		if p.Origin.Path == "" {
			continue
		}
		if err := c.emitOriginIO(ch, p.Name, p.Origin.Path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("pool %s: %w", p.Name, err))
		}
		h, err := c.originHealth(p.Origin.Path)
		switch {
		case errors.Is(err, mdraid.ErrNotArray), errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			errs = append(errs, fmt.Errorf("pool %s: %w", p.Name, err))
			continue
		}
		if h.SyncAction == "" {
			continue // a level without redundancy (raid0, linear): nothing to report
		}
		emitOrigin(ch, p.Name, h)
	}
	return errors.Join(errs...)
}

// originHealth reads the array at path through the collector's sysfs root.
func (c *collector) originHealth(path string) (mdraid.Health, error) {
	kname, err := c.knameOf(path)
	if err != nil {
		return mdraid.Health{}, err
	}
	return mdraid.ReadHealth(c.sysRoot, kname)
}

func emitOrigin(ch chan<- prometheus.Metric, pool string, h mdraid.Health) {
	l := []string{pool, h.Device}
	gauge(ch, originDegradedDesc, boolValue(h.Degraded > 0), l...)
	gauge(ch, originMembersDesc, float64(h.RaidDisks), l...)
	gauge(ch, originFailedDesc, float64(h.Degraded), l...)
	if h.SyncAction != "" {
		for _, a := range syncActions {
			gauge(ch, originSyncActionDesc, boolValue(a == h.SyncAction), pool, h.Device, a)
		}
	}
	if r, ok := h.SyncProgress(); ok {
		gauge(ch, originSyncProgressDesc, r, l...)
	}
}

// emitOriginIO sends the I/O counters of the origin device at path, read
// from <sysRoot>/block/<kname>/stat with procfs's parser. A device that is
// not present gives fs.ErrNotExist.
func (c *collector) emitOriginIO(ch chan<- prometheus.Metric, pool, path string) error {
	kname, err := c.knameOf(path)
	if err != nil {
		return err
	}
	bfs, err := blockdevice.NewFS(procRoot, c.sysRoot)
	if err != nil {
		return fmt.Errorf("origin I/O stats: %w", err)
	}
	st, _, err := bfs.SysBlockDeviceStat(kname)
	if err != nil {
		return fmt.Errorf("origin I/O stats of %s: %w", kname, err)
	}
	l := []string{pool, "/dev/" + kname}
	const msPerSecond = 1000 // the stat file counts milliseconds
	counter(ch, originReadsDesc, st.ReadIOs, l...)
	counter(ch, originWritesDesc, st.WriteIOs, l...)
	ch <- prometheus.MustNewConstMetric(originReadTimeDesc, prometheus.CounterValue, float64(st.ReadTicks)/msPerSecond, l...)
	ch <- prometheus.MustNewConstMetric(originWriteTimeDesc, prometheus.CounterValue, float64(st.WriteTicks)/msPerSecond, l...)
	ch <- prometheus.MustNewConstMetric(originIOTimeDesc, prometheus.CounterValue, float64(st.IOsTotalTicks)/msPerSecond, l...)
	gauge(ch, originInFlightDesc, float64(st.IOsInProgress), l...)
	return nil
}

// procRoot is where procfs's block device reader looks for /proc; the
// origin counters only read sysfs, but its constructor checks both.
const procRoot = "/proc"

// defaultKname resolves a device path to its kernel name through sysfs.
func defaultKname(sysRoot string) func(string) (string, error) {
	return func(path string) (string, error) { return blockdev.Name(sysRoot, path) }
}
