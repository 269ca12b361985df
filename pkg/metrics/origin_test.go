// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tidecache/tidecache/pkg/engine"
)

// originSysRoot is a fake sysfs: md127 a degraded RAID10 recovering onto a
// new member (one failed member still attached), md126 a healthy RAID10,
// md125 a RAID0, sdz a disk without md.
const originSysRoot = "testdata/sysfs"

type fakePools struct {
	pools []engine.PoolInfo
	err   error
}

func (f *fakePools) Pools(context.Context) ([]engine.PoolInfo, error) { return f.pools, f.err }

func poolWithOrigin(name, origin string) engine.PoolInfo {
	return engine.PoolInfo{Name: name, Origin: engine.OriginInfo{Path: origin}}
}

// testKname resolves the test's origin paths the way blockdev.Name would
// on a node with those arrays.
func testKname(path string) (string, error) {
	k, ok := map[string]string{
		"/dev/md/tc-fast": "md127", "/dev/md/tc-slow": "md126", "/dev/md/tc-stripe": "md125",
		"/dev/sdz": "sdz", "/dev/md/tc-broken": "md99",
	}[path]
	if !ok {
		return "", fmt.Errorf("kernel name of %s: %w", path, fs.ErrNotExist)
	}
	return k, nil
}

// testPools has one pool per case of the fake sysfs.
func testPools() *fakePools {
	return &fakePools{pools: []engine.PoolInfo{
		poolWithOrigin("fast", "/dev/md/tc-fast"),
		poolWithOrigin("slow", "/dev/md/tc-slow"),
	}}
}

func originCollector(t *testing.T, pools PoolSource) *collector {
	t.Helper()
	c, err := newCollector(&fakeSource{}, Options{Pools: pools, SysRoot: originSysRoot})
	if err != nil {
		t.Fatal(err)
	}
	c.knameOf = testKname
	return c
}

const originExposition = `
# HELP tidecache_origin_degraded 1 if the pool's md array runs with fewer in-sync members than slots (md/degraded > 0): it has lost redundancy until a rebuild completes.
# TYPE tidecache_origin_degraded gauge
tidecache_origin_degraded{device="/dev/md126",pool="slow"} 0
tidecache_origin_degraded{device="/dev/md127",pool="fast"} 1
# HELP tidecache_origin_failed_members Slots of the pool's md array without a working, in-sync member (md/degraded): failed members, and replacements not rebuilt yet.
# TYPE tidecache_origin_failed_members gauge
tidecache_origin_failed_members{device="/dev/md126",pool="slow"} 0
tidecache_origin_failed_members{device="/dev/md127",pool="fast"} 1
# HELP tidecache_origin_members Slots of the pool's md array (md/raid_disks).
# TYPE tidecache_origin_members gauge
tidecache_origin_members{device="/dev/md126",pool="slow"} 4
tidecache_origin_members{device="/dev/md127",pool="fast"} 4
# HELP tidecache_origin_sync_action 1 for the md array's current sync action (md/sync_action): idle, resync, recover (rebuild onto a new member), check, repair, reshape, frozen; 0 for the others.
# TYPE tidecache_origin_sync_action gauge
tidecache_origin_sync_action{action="check",device="/dev/md126",pool="slow"} 0
tidecache_origin_sync_action{action="check",device="/dev/md127",pool="fast"} 0
tidecache_origin_sync_action{action="frozen",device="/dev/md126",pool="slow"} 0
tidecache_origin_sync_action{action="frozen",device="/dev/md127",pool="fast"} 0
tidecache_origin_sync_action{action="idle",device="/dev/md126",pool="slow"} 1
tidecache_origin_sync_action{action="idle",device="/dev/md127",pool="fast"} 0
tidecache_origin_sync_action{action="recover",device="/dev/md126",pool="slow"} 0
tidecache_origin_sync_action{action="recover",device="/dev/md127",pool="fast"} 1
tidecache_origin_sync_action{action="repair",device="/dev/md126",pool="slow"} 0
tidecache_origin_sync_action{action="repair",device="/dev/md127",pool="fast"} 0
tidecache_origin_sync_action{action="reshape",device="/dev/md126",pool="slow"} 0
tidecache_origin_sync_action{action="reshape",device="/dev/md127",pool="fast"} 0
tidecache_origin_sync_action{action="resync",device="/dev/md126",pool="slow"} 0
tidecache_origin_sync_action{action="resync",device="/dev/md127",pool="fast"} 0
# HELP tidecache_origin_sync_progress_ratio Share of the running resync, recovery, check or reshape done, 0..1 (md/sync_completed). Absent when no sync runs.
# TYPE tidecache_origin_sync_progress_ratio gauge
tidecache_origin_sync_progress_ratio{device="/dev/md127",pool="fast"} 0.25
`

var originNames = []string{
	"tidecache_origin_degraded", "tidecache_origin_members", "tidecache_origin_failed_members",
	"tidecache_origin_sync_action", "tidecache_origin_sync_progress_ratio",
}

func TestOriginMetrics(t *testing.T) {
	if err := testutil.CollectAndCompare(originCollector(t, testPools()), strings.NewReader(originExposition), originNames...); err != nil {
		t.Error(err)
	}
}

// TestOriginAbsentOrFailing: origins that are not md arrays, have no
// redundancy or are not present give no series and no scrape error; a
// pool list or an array that cannot be read is a collector failure, and
// the other pools are still reported.
func TestOriginAbsentOrFailing(t *testing.T) {
	success := func(ok int) string {
		return fmt.Sprintf(`
# HELP tidecache_scrape_collector_success 1 if the source of this collector answered during the scrape, 0 if it failed (the daemon logs why).
# TYPE tidecache_scrape_collector_success gauge
tidecache_scrape_collector_success{collector="origin"} %d
tidecache_scrape_collector_success{collector="volume"} 1
`, ok)
	}
	for _, tc := range []struct {
		name   string
		pools  *fakePools
		series int // origin series expected
		ok     int
	}{
		{"hardware LUN", &fakePools{pools: []engine.PoolInfo{poolWithOrigin("lun", "/dev/sdz")}}, 0, 1},
		{"raid0", &fakePools{pools: []engine.PoolInfo{poolWithOrigin("stripe", "/dev/md/tc-stripe")}}, 0, 1},
		{"array not running", &fakePools{pools: []engine.PoolInfo{poolWithOrigin("gone", "/dev/md/tc-gone")}}, 0, 1},
		{"no origin path", &fakePools{pools: []engine.PoolInfo{poolWithOrigin("new", "")}}, 0, 1},
		{"no pools", &fakePools{}, 0, 1},
		{"pool list fails", &fakePools{err: errors.New("scan: permission denied")}, 0, 0},
		// md99 resolves but its sysfs directory is missing: ErrNotArray,
		// absent like a LUN.
		{"md device without md directory", &fakePools{pools: []engine.PoolInfo{poolWithOrigin("broken", "/dev/md/tc-broken")}}, 0, 1},
		{"one healthy pool, one LUN", &fakePools{pools: []engine.PoolInfo{poolWithOrigin("slow", "/dev/md/tc-slow"), poolWithOrigin("lun", "/dev/sdz")}}, 10, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := originCollector(t, tc.pools)
			if err := testutil.CollectAndCompare(c, strings.NewReader(success(tc.ok)), "tidecache_scrape_collector_success"); err != nil {
				t.Error(err)
			}
			if n := testutil.CollectAndCount(c, originNames...); n != tc.series {
				t.Errorf("%d origin series, want %d", n, tc.series)
			}
		})
	}
}

// TestOriginSourceFromEngine: a Source that also lists pools enables the
// origin collector without Options.Pools.
func TestOriginSourceFromEngine(t *testing.T) {
	src := &poolsAndVolumes{fakePools: testPools()}
	c, err := newCollector(src, Options{SysRoot: originSysRoot})
	if err != nil {
		t.Fatal(err)
	}
	c.knameOf = testKname
	if n := testutil.CollectAndCount(c, "tidecache_origin_degraded"); n != 2 {
		t.Errorf("%d tidecache_origin_degraded series, want 2", n)
	}
	if c, _ := newCollector(&fakeSource{}, Options{}); c.pools != nil {
		t.Error("a Source without Pools enabled the origin collector")
	}
}

type poolsAndVolumes struct {
	fakeSource
	*fakePools
}

// TestOriginIO: the origin's I/O counters come from /sys/block/<dev>/stat
// for any origin, an md array or a LUN, in seconds where the kernel counts
// milliseconds; an origin that is not present gives none.
func TestOriginIO(t *testing.T) {
	pools := &fakePools{pools: []engine.PoolInfo{
		poolWithOrigin("slow", "/dev/md/tc-slow"), poolWithOrigin("lun", "/dev/sdz"), poolWithOrigin("gone", "/dev/md/tc-gone"),
	}}
	const want = `
# HELP tidecache_origin_ios_in_progress I/Os in flight on the origin device now: its queue depth, write-back included.
# TYPE tidecache_origin_ios_in_progress gauge
tidecache_origin_ios_in_progress{device="/dev/md126",pool="slow"} 17
tidecache_origin_ios_in_progress{device="/dev/sdz",pool="lun"} 0
# HELP tidecache_origin_read_time_seconds_total Time the origin's reads took, summed over reads: divided by the reads completed it is their average latency, which rises when write-back crowds the HDDs.
# TYPE tidecache_origin_read_time_seconds_total counter
tidecache_origin_read_time_seconds_total{device="/dev/md126",pool="slow"} 6
tidecache_origin_read_time_seconds_total{device="/dev/sdz",pool="lun"} 0.05
# HELP tidecache_origin_reads_completed_total Reads the origin device completed (/sys/block/<dev>/stat).
# TYPE tidecache_origin_reads_completed_total counter
tidecache_origin_reads_completed_total{device="/dev/md126",pool="slow"} 1200
tidecache_origin_reads_completed_total{device="/dev/sdz",pool="lun"} 10
# HELP tidecache_origin_io_time_seconds_total Time the origin had at least one I/O in flight: its rate is the device's utilisation, 0..1.
# TYPE tidecache_origin_io_time_seconds_total counter
tidecache_origin_io_time_seconds_total{device="/dev/md126",pool="slow"} 42
tidecache_origin_io_time_seconds_total{device="/dev/sdz",pool="lun"} 0.3
# HELP tidecache_origin_writes_completed_total Writes the origin device completed, the cache's write-back and writes that went around it included (/sys/block/<dev>/stat).
# TYPE tidecache_origin_writes_completed_total counter
tidecache_origin_writes_completed_total{device="/dev/md126",pool="slow"} 3400
tidecache_origin_writes_completed_total{device="/dev/sdz",pool="lun"} 20
# HELP tidecache_origin_write_time_seconds_total Time the origin's writes took, summed over writes.
# TYPE tidecache_origin_write_time_seconds_total counter
tidecache_origin_write_time_seconds_total{device="/dev/md126",pool="slow"} 51
tidecache_origin_write_time_seconds_total{device="/dev/sdz",pool="lun"} 0.4
`
	c := originCollector(t, pools)
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "tidecache_origin_ios_in_progress",
		"tidecache_origin_read_time_seconds_total", "tidecache_origin_reads_completed_total", "tidecache_origin_io_time_seconds_total",
		"tidecache_origin_writes_completed_total", "tidecache_origin_write_time_seconds_total"); err != nil {
		t.Error(err)
	}
}
