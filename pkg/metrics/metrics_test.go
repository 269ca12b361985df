// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	"golang.org/x/sys/unix"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/dm"
	"github.com/tidecache/tidecache/pkg/engine"
	"github.com/tidecache/tidecache/pkg/pool"
	"github.com/tidecache/tidecache/pkg/writeback"
)

// Status lines captured from Linux 6.1 (pkg/dm/testdata/*-6.1.status): a
// writecache with 4 KiB blocks after 256 blocks written and 272 read back,
// and a dm-cache read tier with 64 KiB blocks after smq promoted 40.
const (
	writecacheLine = "0 8160 7904 0 272 272 280 16 8 0 256 0 1 256"
	cacheLine      = "8 10/2048 128 40/512 40 90 0 65 0 40 0 2 metadata2 writethrough 2 migration_threshold 2048 smq 0 rw -"
)

// fakeSource returns fixed volumes, built the way engine.Volumes builds
// them from the kernel's status lines.
type fakeSource struct {
	vols []engine.VolumeInfo
	err  error
}

func (f *fakeSource) Volumes(context.Context) ([]engine.VolumeInfo, error) { return f.vols, f.err }

func writeCache(t *testing.T, line string, blockSize uint64) *engine.WriteCacheStatus {
	t.Helper()
	wc, err := dm.ParseWritecacheStatus(line, dm.Version{Major: 1, Minor: 6})
	if err != nil {
		t.Fatal(err)
	}
	s := &engine.WriteCacheStatus{WritecacheStatus: wc, DirtyBlocks: wc.DirtyBlocks()}
	s.DirtyBytes = s.DirtyBlocks * blockSize
	s.UsedPercent = float64(s.DirtyBlocks) / float64(wc.TotalBlocks) * 100
	if wc.Reads > 0 {
		s.ReadHitRatio = float64(wc.ReadHits) / float64(wc.Reads)
	}
	return s
}

func readCache(t *testing.T, line string) *engine.ReadCacheStatus {
	t.Helper()
	rc, err := dm.ParseCacheStatus(line, dm.Version{Major: 2, Minor: 3})
	if err != nil {
		t.Fatal(err)
	}
	s := &engine.ReadCacheStatus{CacheStatus: rc}
	if n := rc.ReadHits + rc.ReadMisses; n > 0 {
		s.ReadHitRatio = float64(rc.ReadHits) / float64(n)
	}
	return s
}

// testVolumes: a writeback volume with both tiers, a writethrough volume
// with a read tier, an inactive passthrough volume, and a volume whose
// SSD failed (writecache error -5, read tier in fail mode).
func testVolumes(t *testing.T) []engine.VolumeInfo {
	return []engine.VolumeInfo{
		{
			Name: "db", Pool: "fast", Mode: pool.ModeWriteback, State: api.StateActive, Device: "/dev/mapper/tc-db",
			SizeBytes: 64 << 30, WriteCacheBytes: 34 << 20, ReadCacheBytes: 33 << 20, BlockSize: 4096,
			WriteCache: writeCache(t, writecacheLine, 4096), ReadCache: readCache(t, cacheLine),
			FUAFlush:       &dm.FUAFlushStatus{FUAWrites: 1200, Flushes: 410, FlushErrors: 0},
			ReadFirst:      &dm.ReadFirstStatus{ReadsInFlight: 2, HeldNow: 16, HeldTotal: 5400, ReleasedAtMaxHold: 120, MaxHoldMs: 1000, IdleMs: 50},
			WritebackLimit: &writeback.Limit{Jobs: 16, Source: writeback.SourceOrigin},
			// A shared origin mirrored to a peer, the peer leg failed: one
			// copy of the two it wants, 3 writes the peer failed held.
			Protection: pool.ProtectPeer, PeerNode: "node-b", AdoptedDevice: "/dev/nvme1n1 (wwid uuid.0b5e2f4c)", CanFailOver: true,
			Mirror: &engine.MirrorStatus{RaidStatus: dm.RaidStatus{Type: "raid1", Health: []dm.LegHealth{dm.LegInSync, dm.LegDead},
				SyncDone: 69632, SyncTotal: 69632, SyncAction: "idle"}, Copies: 1, Degraded: true, SyncPercent: 100, PeerHeld: 3},
		},
		{
			Name: "logs", Pool: "fast", Mode: pool.ModeWritethrough, State: api.StateActive, Device: "/dev/mapper/tc-logs",
			SizeBytes: 8 << 30, ReadCacheBytes: 33 << 20, BlockSize: 4096,
			ReadCache:      readCache(t, cacheLine),
			FailedOverFrom: "node-a", FailedOverUnix: 1764000100,
		},
		{
			Name: "old", Pool: "slow", Mode: pool.ModePassthrough, State: api.StateInactive, Device: "/dev/mapper/tc-old",
			SizeBytes: 1 << 40, BlockSize: 4096, DataLossUnix: 1764000000,
			MovedFrom: "node-c", MovedUnix: 1764000200,
		},
		{
			Name: "broken", Pool: "slow", Mode: pool.ModeWriteback, State: api.StateError, Device: "/dev/mapper/tc-broken",
			Error:     "dm-writecache reports error -5",
			FUAWindow: true,
			SizeBytes: 1 << 30, WriteCacheBytes: 34 << 20, BlockSize: 4096,
			WriteCache: writeCache(t, "-5 8160 8000 12 0 0 0 0 0 0 0 0 0 0", 4096),
			ReadCache:  &engine.ReadCacheStatus{CacheStatus: dm.CacheStatus{Failed: true}},
		},
	}
}

const volumeExposition = `
# HELP tidecache_volume_data_loss_timestamp_seconds When the volume's write cache was given up with the writes it held (tidectl pool force-start --accept-data-loss), as a Unix time; absent if never.
# TYPE tidecache_volume_data_loss_timestamp_seconds gauge
tidecache_volume_data_loss_timestamp_seconds{pool="slow",volume="old"} 1.764e+09
# HELP tidecache_volume_failed_over_timestamp_seconds When this node took the volume over from its replica after the cluster fenced the node it ran on (label from), as a Unix time; absent if it never failed over.
# TYPE tidecache_volume_failed_over_timestamp_seconds gauge
tidecache_volume_failed_over_timestamp_seconds{from="node-a",pool="fast",volume="logs"} 1.7640001e+09
# HELP tidecache_volume_moved_timestamp_seconds When this node took the volume over from its replica in a planned move from the node it ran on (label from: tidectl volume move, CSI ControllerPublishVolume), as a Unix time; absent if it never moved here.
# TYPE tidecache_volume_moved_timestamp_seconds gauge
tidecache_volume_moved_timestamp_seconds{from="node-c",pool="slow",volume="old"} 1.7640002e+09
# HELP tidecache_volume_fua_flush_errors_total Flushes of the write tier that failed; each failed the FUA writes waiting for it.
# TYPE tidecache_volume_fua_flush_errors_total counter
tidecache_volume_fua_flush_errors_total{pool="fast",volume="db"} 0
# HELP tidecache_volume_fua_flushes_total Flushes the fuaflush target sent to the write tier; concurrent FUA writes share one.
# TYPE tidecache_volume_fua_flushes_total counter
tidecache_volume_fua_flushes_total{pool="fast",volume="db"} 410
# HELP tidecache_volume_fua_window 1 if the volume's FUA writes (O_DSYNC, journal commits) can be lost on power failure: its write tier runs without the fuaflush target, because the operator accepted that window (--allow-fua-window) or the volume still runs the old stack.
# TYPE tidecache_volume_fua_window gauge
tidecache_volume_fua_window{pool="fast",volume="db"} 0
tidecache_volume_fua_window{pool="slow",volume="broken"} 1
# HELP tidecache_volume_fua_writes_total FUA writes the fuaflush target held until a flush of the write tier committed them.
# TYPE tidecache_volume_fua_writes_total counter
tidecache_volume_fua_writes_total{pool="fast",volume="db"} 1200
# HELP tidecache_volume_info Always 1; labels carry the volume's cache mode (writeback, writethrough, passthrough), state (active, suspended, inactive, error) and device path.
# TYPE tidecache_volume_info gauge
tidecache_volume_info{device="/dev/mapper/tc-broken",mode="writeback",pool="slow",state="error",volume="broken"} 1
tidecache_volume_info{device="/dev/mapper/tc-db",mode="writeback",pool="fast",state="active",volume="db"} 1
tidecache_volume_info{device="/dev/mapper/tc-logs",mode="writethrough",pool="fast",state="active",volume="logs"} 1
tidecache_volume_info{device="/dev/mapper/tc-old",mode="passthrough",pool="slow",state="inactive",volume="old"} 1
# HELP tidecache_volume_readfirst_held_writes Write-back I/Os the readfirst layer holds right now.
# TYPE tidecache_volume_readfirst_held_writes gauge
tidecache_volume_readfirst_held_writes{pool="fast",volume="db"} 16
# HELP tidecache_volume_readfirst_held_writes_total Write-back I/Os the readfirst layer under the write tier held while reads were waiting on the HDD array (dm-readfirst <writes held total>); counts from the layer's last table load.
# TYPE tidecache_volume_readfirst_held_writes_total counter
tidecache_volume_readfirst_held_writes_total{pool="fast",volume="db"} 5400
# HELP tidecache_volume_readfirst_max_hold_seconds The longest the readfirst layer holds one write-back I/O while reads wait (its max_hold_ms in force).
# TYPE tidecache_volume_readfirst_max_hold_seconds gauge
tidecache_volume_readfirst_max_hold_seconds{pool="fast",volume="db"} 1
# HELP tidecache_volume_readfirst_released_at_max_hold_total Held write-back I/Os that went because they had waited the layer's hold bound, not because reads paused: reads kept the array busy for that long. A rate close to that of tidecache_volume_readfirst_held_writes_total means write-back runs at its slowest under the read load.
# TYPE tidecache_volume_readfirst_released_at_max_hold_total counter
tidecache_volume_readfirst_released_at_max_hold_total{pool="fast",volume="db"} 120
# HELP tidecache_volume_size_bytes Size of the volume (its extent on the HDD array).
# TYPE tidecache_volume_size_bytes gauge
tidecache_volume_size_bytes{pool="fast",volume="db"} 6.8719476736e+10
tidecache_volume_size_bytes{pool="fast",volume="logs"} 8.589934592e+09
tidecache_volume_size_bytes{pool="slow",volume="broken"} 1.073741824e+09
tidecache_volume_size_bytes{pool="slow",volume="old"} 1.099511627776e+12
# HELP tidecache_volume_dirty_blocks Write-tier blocks not yet written back to the HDD array (<#blocks> - <#free blocks>).
# TYPE tidecache_volume_dirty_blocks gauge
tidecache_volume_dirty_blocks{pool="fast",volume="db"} 256
tidecache_volume_dirty_blocks{pool="slow",volume="broken"} 160
# HELP tidecache_volume_dirty_bytes Bytes on the write tier not yet written back to the HDD array.
# TYPE tidecache_volume_dirty_bytes gauge
tidecache_volume_dirty_bytes{pool="fast",volume="db"} 1.048576e+06
tidecache_volume_dirty_bytes{pool="slow",volume="broken"} 655360
# HELP tidecache_volume_cache_used_bytes Bytes of the write tier in use; dm-writecache frees a block once written back, so this equals the dirty bytes.
# TYPE tidecache_volume_cache_used_bytes gauge
tidecache_volume_cache_used_bytes{pool="fast",volume="db"} 1.048576e+06
tidecache_volume_cache_used_bytes{pool="slow",volume="broken"} 655360
# HELP tidecache_volume_cache_size_bytes Usable data bytes of the write tier (dm-writecache <#blocks> times the block size).
# TYPE tidecache_volume_cache_size_bytes gauge
tidecache_volume_cache_size_bytes{pool="fast",volume="db"} 3.342336e+07
tidecache_volume_cache_size_bytes{pool="slow",volume="broken"} 3.342336e+07
# HELP tidecache_volume_writeback_blocks Write-tier blocks being written back right now (dm-writecache <#blocks under writeback>).
# TYPE tidecache_volume_writeback_blocks gauge
tidecache_volume_writeback_blocks{pool="fast",volume="db"} 0
tidecache_volume_writeback_blocks{pool="slow",volume="broken"} 12
# HELP tidecache_volume_error 1 if dm-writecache reports an I/O error (its <error> field is not 0): the SSD failed and writes are refused until the volume is repaired.
# TYPE tidecache_volume_error gauge
tidecache_volume_error{pool="fast",volume="db"} 0
tidecache_volume_error{pool="slow",volume="broken"} 1
# HELP tidecache_volume_writeback_jobs The write tier's bound on blocks in write-back at once (dm-writecache writeback_jobs): derived from the origin array unless the volume's or the node's tuning sets it. Each block queued ahead of a read on the HDDs delays it by a disk's service time.
# TYPE tidecache_volume_writeback_jobs gauge
tidecache_volume_writeback_jobs{pool="fast",volume="db"} 16
# HELP tidecache_volume_writes_allocated_total Blocks written into new blocks of the write tier (dm-writecache <#writes allocated>): its rate is the incoming dirty data. When it stays above the rate of tidecache_volume_written_back_blocks_total the cache fills.
# TYPE tidecache_volume_writes_allocated_total counter
tidecache_volume_writes_allocated_total{pool="fast",volume="db"} 256
tidecache_volume_writes_allocated_total{pool="slow",volume="broken"} 0
# HELP tidecache_volume_writes_around_total Blocks written around the write tier straight to the HDD array (dm-writecache <#writes bypassed>): it had no free block, or it was being drained. A rising rate on a full cache means writes run at HDD speed.
# TYPE tidecache_volume_writes_around_total counter
tidecache_volume_writes_around_total{pool="fast",volume="db"} 0
tidecache_volume_writes_around_total{pool="slow",volume="broken"} 0
# HELP tidecache_volume_writes_blocked_total Times a write waited for a free block of the write tier (dm-writecache <#writes blocked on freelist>): the cache was full and the block rewritten was under write-back. A rising rate means writes wait for the HDDs.
# TYPE tidecache_volume_writes_blocked_total counter
tidecache_volume_writes_blocked_total{pool="fast",volume="db"} 0
tidecache_volume_writes_blocked_total{pool="slow",volume="broken"} 0
# HELP tidecache_volume_reads_total Read requests the write tier received (dm-writecache <#reads>).
# TYPE tidecache_volume_reads_total counter
tidecache_volume_reads_total{pool="fast",volume="db"} 272
tidecache_volume_reads_total{pool="slow",volume="broken"} 0
# HELP tidecache_volume_writes_total Write requests the write tier received (dm-writecache <#writes>).
# TYPE tidecache_volume_writes_total counter
tidecache_volume_writes_total{pool="fast",volume="db"} 280
tidecache_volume_writes_total{pool="slow",volume="broken"} 0
# HELP tidecache_volume_read_hits_total Reads served from the write tier (dm-writecache <#read hits>).
# TYPE tidecache_volume_read_hits_total counter
tidecache_volume_read_hits_total{pool="fast",volume="db"} 272
tidecache_volume_read_hits_total{pool="slow",volume="broken"} 0
# HELP tidecache_volume_write_hits_total Writes to a block already in the write tier (dm-writecache <#write hits uncommitted> + <#write hits committed>).
# TYPE tidecache_volume_write_hits_total counter
tidecache_volume_write_hits_total{pool="fast",volume="db"} 24
tidecache_volume_write_hits_total{pool="slow",volume="broken"} 0
# HELP tidecache_volume_read_hit_ratio Share of reads served by the tier since its counters started (0..1): tier=write from dm-writecache, tier=read from dm-cache. For a recent ratio use rate() of the counters.
# TYPE tidecache_volume_read_hit_ratio gauge
tidecache_volume_read_hit_ratio{pool="fast",tier="read",volume="db"} 0.3076923076923077
tidecache_volume_read_hit_ratio{pool="fast",tier="read",volume="logs"} 0.3076923076923077
tidecache_volume_read_hit_ratio{pool="fast",tier="write",volume="db"} 1
tidecache_volume_read_hit_ratio{pool="slow",tier="write",volume="broken"} 0
# HELP tidecache_volume_read_cache_error 1 if the read tier failed (dm-cache Fail), needs a metadata check or has read-only metadata.
# TYPE tidecache_volume_read_cache_error gauge
tidecache_volume_read_cache_error{pool="fast",volume="db"} 0
tidecache_volume_read_cache_error{pool="fast",volume="logs"} 0
tidecache_volume_read_cache_error{pool="slow",volume="broken"} 1
# HELP tidecache_volume_read_cache_hits_total Reads served from the read tier (dm-cache <#read hits>).
# TYPE tidecache_volume_read_cache_hits_total counter
tidecache_volume_read_cache_hits_total{pool="fast",volume="db"} 40
tidecache_volume_read_cache_hits_total{pool="fast",volume="logs"} 40
# HELP tidecache_volume_read_cache_misses_total Reads the read tier passed to the HDD array (dm-cache <#read misses>).
# TYPE tidecache_volume_read_cache_misses_total counter
tidecache_volume_read_cache_misses_total{pool="fast",volume="db"} 90
tidecache_volume_read_cache_misses_total{pool="fast",volume="logs"} 90
# HELP tidecache_volume_read_cache_used_bytes Bytes of the read tier holding cached blocks (dm-cache <#used cache blocks> times the cache block size).
# TYPE tidecache_volume_read_cache_used_bytes gauge
tidecache_volume_read_cache_used_bytes{pool="fast",volume="db"} 2.62144e+06
tidecache_volume_read_cache_used_bytes{pool="fast",volume="logs"} 2.62144e+06
# HELP tidecache_volume_read_cache_size_bytes Data bytes of the read tier (dm-cache <#total cache blocks> times the cache block size).
# TYPE tidecache_volume_read_cache_size_bytes gauge
tidecache_volume_read_cache_size_bytes{pool="fast",volume="db"} 3.3554432e+07
tidecache_volume_read_cache_size_bytes{pool="fast",volume="logs"} 3.3554432e+07
# HELP tidecache_volume_read_cache_promotions_total Blocks the smq policy promoted into the read tier (dm-cache <#promotions>).
# TYPE tidecache_volume_read_cache_promotions_total counter
tidecache_volume_read_cache_promotions_total{pool="fast",volume="db"} 40
tidecache_volume_read_cache_promotions_total{pool="fast",volume="logs"} 40
# HELP tidecache_volume_read_cache_demotions_total Blocks the smq policy demoted from the read tier (dm-cache <#demotions>).
# TYPE tidecache_volume_read_cache_demotions_total counter
tidecache_volume_read_cache_demotions_total{pool="fast",volume="db"} 0
tidecache_volume_read_cache_demotions_total{pool="fast",volume="logs"} 0
# HELP tidecache_volume_write_copies Copies of the write cache that hold every acknowledged write right now: 1 unprotected, 2 mirrored (--protect local), 1 while a mirror is degraded, 0 when the write tier is in error.
# TYPE tidecache_volume_write_copies gauge
tidecache_volume_write_copies{pool="fast",volume="db"} 1
tidecache_volume_write_copies{pool="slow",volume="broken"} 0
# HELP tidecache_volume_write_copies_wanted Copies of the write cache the volume's protection asks for: 1 (none) or 2 (local, peer, and a volume that failed over or moved from its node onto its replica).
# TYPE tidecache_volume_write_copies_wanted gauge
tidecache_volume_write_copies_wanted{pool="fast",volume="db"} 2
tidecache_volume_write_copies_wanted{pool="slow",volume="broken"} 1
# HELP tidecache_volume_mirror_sync_ratio Share of the write mirror resynced or rebuilt (dm-raid sync ratio, 0..1); 1 when both legs are in sync.
# TYPE tidecache_volume_mirror_sync_ratio gauge
tidecache_volume_mirror_sync_ratio{pool="fast",volume="db"} 1
# HELP tidecache_volume_mirror_leg_in_sync 1 while the write mirror's leg (label leg: 0, 1) is alive and holds every acknowledged write, 0 while it failed, is absent or is being rebuilt. Label node names the node whose SSD holds a remote leg (a peer mirror's leg 1, either leg of a write cache on peers), empty for a leg on this node's own SSDs.
# TYPE tidecache_volume_mirror_leg_in_sync gauge
tidecache_volume_mirror_leg_in_sync{leg="0",node="",pool="fast",volume="db"} 1
tidecache_volume_mirror_leg_in_sync{leg="1",node="node-b",pool="fast",volume="db"} 0
# HELP tidecache_volume_mirror_peer_held_ios I/Os the peer failed that the peer leg of a volume that can fail over holds right now (dm-errhold): writes that wait, unacknowledged, until the peer takes them or the replica is recorded outdated in etcd.
# TYPE tidecache_volume_mirror_peer_held_ios gauge
tidecache_volume_mirror_peer_held_ios{pool="fast",volume="db"} 3
# HELP tidecache_scrape_collector_success 1 if the source of this collector answered during the scrape, 0 if it failed (the daemon logs why).
# TYPE tidecache_scrape_collector_success gauge
tidecache_scrape_collector_success{collector="volume"} 1
`

// volumeMetricNames are the series the volume part emits, plus its
// success gauge (the duration varies, so tests leave it out).
var volumeMetricNames = []string{
	"tidecache_volume_info", "tidecache_volume_size_bytes",
	"tidecache_volume_dirty_blocks", "tidecache_volume_dirty_bytes",
	"tidecache_volume_cache_used_bytes", "tidecache_volume_cache_size_bytes",
	"tidecache_volume_writeback_blocks", "tidecache_volume_error",
	"tidecache_volume_writeback_jobs", "tidecache_volume_writes_allocated_total",
	"tidecache_volume_writes_around_total", "tidecache_volume_writes_blocked_total",
	"tidecache_volume_reads_total", "tidecache_volume_writes_total",
	"tidecache_volume_read_hits_total", "tidecache_volume_write_hits_total",
	"tidecache_volume_read_hit_ratio", "tidecache_volume_read_cache_error",
	"tidecache_volume_read_cache_hits_total", "tidecache_volume_read_cache_misses_total",
	"tidecache_volume_read_cache_used_bytes", "tidecache_volume_read_cache_size_bytes",
	"tidecache_volume_read_cache_promotions_total", "tidecache_volume_read_cache_demotions_total",
	"tidecache_volume_fua_window", "tidecache_volume_fua_writes_total",
	"tidecache_volume_fua_flushes_total", "tidecache_volume_fua_flush_errors_total",
	"tidecache_volume_readfirst_held_writes_total", "tidecache_volume_readfirst_released_at_max_hold_total",
	"tidecache_volume_readfirst_held_writes", "tidecache_volume_readfirst_max_hold_seconds",
	"tidecache_volume_write_copies", "tidecache_volume_write_copies_wanted", "tidecache_volume_mirror_sync_ratio",
	"tidecache_volume_mirror_leg_in_sync", "tidecache_volume_mirror_peer_held_ios",
	"tidecache_volume_data_loss_timestamp_seconds", "tidecache_volume_failed_over_timestamp_seconds", "tidecache_volume_moved_timestamp_seconds", "tidecache_scrape_collector_success",
}

func TestVolumeMetrics(t *testing.T) {
	c, err := newCollector(&fakeSource{vols: testVolumes(t)}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := testutil.CollectAndCompare(c, strings.NewReader(volumeExposition), volumeMetricNames...); err != nil {
		t.Error(err)
	}
	// Optional parts are off: no dm-stats or SSD series, no success
	// gauge for them.
	if n := testutil.CollectAndCount(c, "tidecache_volume_io_latency_seconds", "tidecache_ssd_wear_ratio"); n != 0 {
		t.Errorf("%d series of disabled collectors", n)
	}
}

// TestLegHoldersOnPeers checks the leg gauges of a node without SSDs: both
// legs of its write cache are remote, and each names the node holding it.
func TestLegHoldersOnPeers(t *testing.T) {
	v := engine.VolumeInfo{
		Name: "db", Pool: "hdd", Mode: pool.ModeWriteback, State: api.StateActive, Device: "/dev/mapper/tc-db",
		SizeBytes: 1 << 30, WriteCacheBytes: 34 << 20, BlockSize: 4096, WriteCache: writeCache(t, writecacheLine, 4096),
		Protection: pool.ProtectPeer, PeerNode: "node-b", PeerNode0: "node-c",
		Mirror: &engine.MirrorStatus{RaidStatus: dm.RaidStatus{Type: "raid1", Health: []dm.LegHealth{dm.LegDead, dm.LegInSync},
			SyncDone: 69632, SyncTotal: 69632, SyncAction: "idle"}, Copies: 1, Degraded: true, SyncPercent: 100},
	}
	c, err := newCollector(&fakeSource{vols: []engine.VolumeInfo{v}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := `
# HELP tidecache_volume_mirror_leg_in_sync 1 while the write mirror's leg (label leg: 0, 1) is alive and holds every acknowledged write, 0 while it failed, is absent or is being rebuilt. Label node names the node whose SSD holds a remote leg (a peer mirror's leg 1, either leg of a write cache on peers), empty for a leg on this node's own SSDs.
# TYPE tidecache_volume_mirror_leg_in_sync gauge
tidecache_volume_mirror_leg_in_sync{leg="0",node="node-c",pool="hdd",volume="db"} 0
tidecache_volume_mirror_leg_in_sync{leg="1",node="node-b",pool="hdd",volume="db"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "tidecache_volume_mirror_leg_in_sync"); err != nil {
		t.Error(err)
	}
}

func TestVolumeSourceFails(t *testing.T) {
	var logs bytes.Buffer
	c, err := newCollector(&fakeSource{err: errors.New("scan: /dev/nvme0n1: input/output error")},
		Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	want := `
# HELP tidecache_scrape_collector_success 1 if the source of this collector answered during the scrape, 0 if it failed (the daemon logs why).
# TYPE tidecache_scrape_collector_success gauge
tidecache_scrape_collector_success{collector="volume"} 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), volumeMetricNames...); err != nil {
		t.Error(err)
	}
	if !strings.Contains(logs.String(), "collector=volume") || !strings.Contains(logs.String(), "input/output error") {
		t.Errorf("log = %q", logs.String())
	}
}

// Captured from Linux 6.1 (see pkg/dm/stats_test.go): 200 reads and 1000
// writes, histogram bounds 100 µs, 1 ms, 10 ms.
const statsPrintLine = "0+131072 200 197 25600 60313210 1000 978 8000 264499990 0 321558080 321558080 59923700 261634380 58:1130:12:0\n"

var testBounds = []time.Duration{100 * time.Microsecond, time.Millisecond, 10 * time.Millisecond}

// fakeStats answers the dm-stats messages of dm.EnsureStats and
// dm.ReadStats for a set of devices.
type fakeStats struct {
	regions map[string]string // device -> @stats_list line of its region; "" none yet
	print   map[string]string // device -> @stats_print reply
	created []string
}

func (f *fakeStats) Message(_ context.Context, name string, _ uint64, msg string) (string, error) {
	list, ok := f.regions[name]
	if !ok {
		return "", &dm.IoctlError{Op: "message", Name: name, Errno: unix.ENXIO}
	}
	switch {
	case strings.HasPrefix(msg, "@stats_list"):
		return list, nil
	case strings.HasPrefix(msg, "@stats_create"):
		f.created = append(f.created, name)
		f.regions[name] = "0: 0+131072 131072 tidecache - precise_timestamps histogram:100000,1000000,10000000\n"
		return "0", nil
	case strings.HasPrefix(msg, "@stats_print 0"):
		return f.print[name], nil
	}
	return "", &dm.IoctlError{Op: "message", Name: name, Errno: unix.EINVAL}
}

const latencyExposition = `
# HELP tidecache_volume_io_latency_seconds Latency of the I/Os completed on the volume's device, reads and writes together (dm-stats keeps one histogram per region), from submission to completion.
# TYPE tidecache_volume_io_latency_seconds histogram
tidecache_volume_io_latency_seconds_bucket{pool="fast",volume="db",le="0.0001"} 58
tidecache_volume_io_latency_seconds_bucket{pool="fast",volume="db",le="0.001"} 1188
tidecache_volume_io_latency_seconds_bucket{pool="fast",volume="db",le="0.01"} 1200
tidecache_volume_io_latency_seconds_bucket{pool="fast",volume="db",le="+Inf"} 1200
tidecache_volume_io_latency_seconds_sum{pool="fast",volume="db"} 0.3248132
tidecache_volume_io_latency_seconds_count{pool="fast",volume="db"} 1200
# HELP tidecache_volume_io_completed_total I/Os completed on the volume's device (dm-stats reads / writes completed).
# TYPE tidecache_volume_io_completed_total counter
tidecache_volume_io_completed_total{op="read",pool="fast",volume="db"} 200
tidecache_volume_io_completed_total{op="write",pool="fast",volume="db"} 1000
# HELP tidecache_volume_io_bytes_total Bytes transferred by the I/Os completed on the volume's device (dm-stats sectors read / written).
# TYPE tidecache_volume_io_bytes_total counter
tidecache_volume_io_bytes_total{op="read",pool="fast",volume="db"} 1.31072e+07
tidecache_volume_io_bytes_total{op="write",pool="fast",volume="db"} 4.096e+06
# HELP tidecache_volume_io_time_seconds_total Sum of the latencies of the I/Os completed on the volume's device (dm-stats read / write time); divided by the rate of tidecache_volume_io_completed_total it gives the mean latency per op.
# TYPE tidecache_volume_io_time_seconds_total counter
tidecache_volume_io_time_seconds_total{op="read",pool="fast",volume="db"} 0.06031321
tidecache_volume_io_time_seconds_total{op="write",pool="fast",volume="db"} 0.26449999
# HELP tidecache_volume_io_in_flight I/Os in progress on the volume's device (dm-stats in flight).
# TYPE tidecache_volume_io_in_flight gauge
tidecache_volume_io_in_flight{pool="fast",volume="db"} 0
# HELP tidecache_scrape_collector_success 1 if the source of this collector answered during the scrape, 0 if it failed (the daemon logs why).
# TYPE tidecache_scrape_collector_success gauge
tidecache_scrape_collector_success{collector="dmstats"} 1
tidecache_scrape_collector_success{collector="volume"} 1
`

var latencyMetricNames = []string{
	"tidecache_volume_io_latency_seconds", "tidecache_volume_io_completed_total",
	"tidecache_volume_io_bytes_total", "tidecache_volume_io_time_seconds_total",
	"tidecache_volume_io_in_flight", "tidecache_scrape_collector_success",
}

func TestLatencyMetrics(t *testing.T) {
	vols := testVolumes(t)
	// tc-db has no region yet; tc-logs and tc-broken vanished since the
	// volume list was read (ENXIO: skipped); tc-old is inactive and never
	// asked.
	st := &fakeStats{
		regions: map[string]string{"tc-db": ""},
		print:   map[string]string{"tc-db": statsPrintLine},
	}
	c, err := newCollector(&fakeSource{vols: vols}, Options{Stats: st, LatencyBounds: testBounds})
	if err != nil {
		t.Fatal(err)
	}
	if err := testutil.CollectAndCompare(c, strings.NewReader(latencyExposition), latencyMetricNames...); err != nil {
		t.Error(err)
	}
	// The region is created once and found again at the next scrape.
	if err := testutil.CollectAndCompare(c, strings.NewReader(latencyExposition), latencyMetricNames...); err != nil {
		t.Error(err)
	}
	if len(st.created) != 1 {
		t.Errorf("regions created: %q, want one for tc-db", st.created)
	}

	// A region whose histogram does not match the bounds (someone changed
	// it behind our back between list and print) fails this scrape only
	// for dm-stats.
	st.print["tc-db"] = "0+131072 1 0 8 1 0 0 0 0 0 1 1 1 0 1:0\n"
	var logs bytes.Buffer
	c.log = slog.New(slog.NewTextHandler(&logs, nil))
	want := `
# HELP tidecache_scrape_collector_success 1 if the source of this collector answered during the scrape, 0 if it failed (the daemon logs why).
# TYPE tidecache_scrape_collector_success gauge
tidecache_scrape_collector_success{collector="dmstats"} 0
tidecache_scrape_collector_success{collector="volume"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), latencyMetricNames...); err != nil {
		t.Error(err)
	}
	if !strings.Contains(logs.String(), "volume db") || !strings.Contains(logs.String(), "histogram buckets") {
		t.Errorf("log = %q", logs.String())
	}
}

func TestDefaultLatencyBounds(t *testing.T) {
	c, err := newCollector(&fakeSource{}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.boundNs) != len(DefaultLatencyBounds) || c.boundNs[0] != 50000 || c.boundNs[len(c.boundNs)-1] != 10e9 {
		t.Errorf("bounds in ns: %v", c.boundNs)
	}
	for _, bad := range [][]time.Duration{
		{time.Millisecond, time.Millisecond},
		{2 * time.Millisecond, time.Millisecond},
		{time.Nanosecond},
	} {
		if _, err := newCollector(&fakeSource{}, Options{LatencyBounds: bad}); err == nil {
			t.Errorf("bounds %v accepted", bad)
		}
	}
	if _, err := newCollector(nil, Options{}); err == nil {
		t.Error("nil source accepted")
	}
}

type fakeSSDs struct {
	ssds []SSDHealth
	err  error
}

func (f *fakeSSDs) SSDs(context.Context) ([]SSDHealth, error) { return f.ssds, f.err }

func intp(v int) *int { return &v }

const ssdExposition = `
# HELP tidecache_ssd_info 1 for each SSD of a pool whose health is read, with its model and serial number.
# TYPE tidecache_ssd_info gauge
tidecache_ssd_info{device="/dev/nvme0n1",model="Samsung SSD 980 PRO 2TB",serial="S6B0NL0T123456"} 1
tidecache_ssd_info{device="/dev/sdc",model="TIDESATA",serial="SATA0001"} 1
# HELP tidecache_ssd_wear_ratio Share of the SSD's rated endurance used (NVMe percentage used / 100); may exceed 1. Absent when the SSD does not report it.
# TYPE tidecache_ssd_wear_ratio gauge
tidecache_ssd_wear_ratio{device="/dev/nvme0n1"} 0.03
# HELP tidecache_ssd_media_errors_total Unrecovered data-integrity errors over the SSD's life (NVMe media errors; ATA attribute 187).
# TYPE tidecache_ssd_media_errors_total counter
tidecache_ssd_media_errors_total{device="/dev/nvme0n1"} 0
tidecache_ssd_media_errors_total{device="/dev/sdc"} 7
# HELP tidecache_ssd_error_log_entries_total Entries of the SSD's error log over its life (NVMe num_err_log_entries; ATA SMART error log count).
# TYPE tidecache_ssd_error_log_entries_total counter
tidecache_ssd_error_log_entries_total{device="/dev/nvme0n1"} 2
tidecache_ssd_error_log_entries_total{device="/dev/sdc"} 3
# HELP tidecache_ssd_critical_warning 1 if the SSD raises a critical warning (NVMe critical warning not 0, or ATA SMART status failed).
# TYPE tidecache_ssd_critical_warning gauge
tidecache_ssd_critical_warning{device="/dev/nvme0n1"} 0
tidecache_ssd_critical_warning{device="/dev/sdc"} 1
# HELP tidecache_scrape_collector_success 1 if the source of this collector answered during the scrape, 0 if it failed (the daemon logs why).
# TYPE tidecache_scrape_collector_success gauge
tidecache_scrape_collector_success{collector="ssd"} 0
`

func TestSSDMetrics(t *testing.T) {
	ssds := &fakeSSDs{
		ssds: []SSDHealth{
			{Path: "/dev/nvme0n1", Model: "Samsung SSD 980 PRO 2TB", Serial: "S6B0NL0T123456",
				WearPercent: intp(3), ErrorLogEntries: 2},
			{Path: "/dev/sdc", Model: "TIDESATA", Serial: "SATA0001", MediaErrors: 7, ErrorLogEntries: 3, CriticalWarning: true},
		},
		err: errors.New("SSD /dev/nvme1n1: nvme smart-log: exit status 1"),
	}
	c, err := newCollector(&fakeSource{}, Options{SSDs: ssds})
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"tidecache_ssd_info", "tidecache_ssd_wear_ratio", "tidecache_ssd_media_errors_total",
		"tidecache_ssd_error_log_entries_total", "tidecache_ssd_critical_warning"}
	// Only the ssd collector's success: the volume one is 1 here.
	exp := strings.Replace(ssdExposition, `tidecache_scrape_collector_success{collector="ssd"} 0`,
		"tidecache_scrape_collector_success{collector=\"ssd\"} 0\ntidecache_scrape_collector_success{collector=\"volume\"} 1", 1)
	if err := testutil.CollectAndCompare(c, strings.NewReader(exp), append(names, "tidecache_scrape_collector_success")...); err != nil {
		t.Error(err)
	}
}

// fullCollector enables every part, with data in each.
func fullCollector(t *testing.T) *collector {
	t.Helper()
	st := &fakeStats{regions: map[string]string{"tc-db": ""}, print: map[string]string{"tc-db": statsPrintLine}}
	ssds := &fakeSSDs{ssds: []SSDHealth{{Path: "/dev/nvme0n1", Model: "QEMU NVMe Ctrl", Serial: "TIDE0001", WearPercent: intp(0)}}}
	c, err := newCollector(&fakeSource{vols: testVolumes(t)}, Options{Stats: st, LatencyBounds: testBounds, SSDs: ssds,
		Pools: testPools(), SysRoot: originSysRoot})
	if err != nil {
		t.Fatal(err)
	}
	c.knameOf = testKname
	// It saw the volumes 30 s ago, db with 60 fewer dirty blocks, so the
	// write cache forecast has a rate.
	past := testVolumes(t)
	past[0].WriteCache.FreeBlocks += 60
	now := time.Date(2026, 11, 28, 9, 0, 30, 0, time.UTC)
	c.fill.observe(now.Add(-30*time.Second), past)
	c.now = func() time.Time { return now }
	return c
}

func TestLint(t *testing.T) {
	problems, err := testutil.CollectAndLint(fullCollector(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}

func TestRegister(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	if err := Register(reg, &fakeSource{vols: testVolumes(t)}, Options{}); err != nil {
		t.Fatal(err)
	}
	d, err := NewDaemonMetrics(reg, "v0.3.0-12-gabcdef")
	if err != nil {
		t.Fatal(err)
	}
	d.SetEtcdUp(true)
	d.SetLeader(false)
	d.SetReplicas([]Replica{{Volume: "gone", Owner: "n3", Exported: true}})
	d.SetReplicas([]Replica{{Volume: "orders", Owner: "n2", Exported: true}, {Volume: "ledger", Owner: "n2"}})
	d.SetExports(map[string]int{"gone": 1})
	d.SetExports(map[string]int{"lun0": 2, "lun1": 0})
	d.SetFencesApplied(1)
	d.SetNVMeUnauthenticated(true)
	d.SetNVMeAllowed(2)
	var nilDaemon *DaemonMetrics
	nilDaemon.SetEtcdUp(true) // a nil *DaemonMetrics records nothing
	want := `
# HELP tidecache_export_hosts Per shared device this node exports (tidecached run --export): the number of nodes it is exported to now, each through its own NVMe/TCP subsystem.
# TYPE tidecache_export_hosts gauge
tidecache_export_hosts{export="lun0"} 2
tidecache_export_hosts{export="lun1"} 0
# HELP tidecache_fences_applied Fenced nodes this node has cut off from everything it serves (exports and replicas) and acknowledged.
# TYPE tidecache_fences_applied gauge
tidecache_fences_applied 1
# HELP tidecache_nvme_unauthenticated 1 when this node serves NVMe/TCP on a network address and may admit a host without in-band authentication (a kernel without it, or --insecure-nvme): only its source-address allow-list keeps other machines from connecting as such a host.
# TYPE tidecache_nvme_unauthenticated gauge
tidecache_nvme_unauthenticated 1
# HELP tidecache_nvme_allowed_addresses Source addresses the allow-list of this node's NVMe/TCP port admits (the nodes its subsystems allow, fenced ones left out); 0 while none is applied: the node serves no NVMe/TCP, or etcd has not answered since a first start.
# TYPE tidecache_nvme_allowed_addresses gauge
tidecache_nvme_allowed_addresses 2
# HELP tidecache_build_info Always 1; the version label is the version tidecached was built from.
# TYPE tidecache_build_info gauge
tidecache_build_info{version="v0.3.0-12-gabcdef"} 1
# HELP tidecache_etcd_up 1 when the cluster store (etcd) answered the daemon's last request or health check, else 0. The kernel tables and I/O are unaffected while it is 0.
# TYPE tidecache_etcd_up gauge
tidecache_etcd_up 1
# HELP tidecache_leader 1 while this node holds the cluster leadership (placement of new volumes), else 0.
# TYPE tidecache_leader gauge
tidecache_leader 0
# HELP tidecache_replica_exported Per replica this node keeps for another node's mirrored write cache (--protect peer): 1 while it is exported over NVMe/TCP to its owner, 0 when it is not (the owner's mirror then runs on one copy).
# TYPE tidecache_replica_exported gauge
tidecache_replica_exported{owner="n2",volume="ledger"} 0
tidecache_replica_exported{owner="n2",volume="orders"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "tidecache_build_info", "tidecache_etcd_up", "tidecache_leader", "tidecache_replica_exported",
		"tidecache_export_hosts", "tidecache_fences_applied", "tidecache_nvme_unauthenticated", "tidecache_nvme_allowed_addresses"); err != nil {
		t.Error(err)
	}
	// The pedantic registry checks every metric against its Describe.
	if n, err := testutil.GatherAndCount(reg); err != nil || n == 0 {
		t.Errorf("gather: %d series, %v", n, err)
	}
	// No global state: a second registry takes the same collectors.
	if err := Register(prometheus.NewRegistry(), &fakeSource{}, Options{}); err != nil {
		t.Error(err)
	}
	if err := Register(reg, &fakeSource{}, Options{}); err == nil {
		t.Error("registering twice on one registry: no error")
	}
}

// exposition returns the text format of everything the package exports,
// every part enabled.
func exposition(t *testing.T) []byte {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(fullCollector(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := NewDaemonMetrics(reg, "dev"); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&buf, mf); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

func TestExpositionHasEveryDescribedMetric(t *testing.T) {
	text := string(exposition(t))
	for _, name := range describedNames(t) {
		if !strings.Contains(text, "# TYPE "+name+" ") {
			t.Errorf("%s described but not in the full exposition", name)
		}
	}
}

// describedNames returns the names of every metric the package defines.
func describedNames(t *testing.T) []string {
	t.Helper()
	ch := make(chan *prometheus.Desc, 100)
	fullCollector(t).Describe(ch)
	close(ch)
	var names []string
	for d := range ch {
		s := d.String() // Desc{fqName: "name", help: ...}
		_, rest, _ := strings.Cut(s, `fqName: `)
		q, err := strconv.QuotedPrefix(rest)
		if err != nil {
			t.Fatalf("desc %s: %v", s, err)
		}
		name, _ := strconv.Unquote(q)
		names = append(names, name)
	}
	return append(names, "tidecache_etcd_up", "tidecache_leader", "tidecache_build_info")
}
