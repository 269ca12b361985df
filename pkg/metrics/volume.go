// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidecache/tidecache/pkg/dm"
	"github.com/tidecache/tidecache/pkg/engine"
	"github.com/tidecache/tidecache/pkg/pool"
)

// Per-volume metrics, from engine.VolumeInfo: the layout (size, mode) and
// the status lines of the volume's dm-writecache (write tier, top device)
// and dm-cache (read tier, tc-<volume>-rtier) targets.

var volumeLabels = []string{"volume", "pool"}

func volumeDesc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc(namespace+"_volume_"+name, help, volumeLabels, nil)
}

var (
	volumeInfoDesc = prometheus.NewDesc(namespace+"_volume_info",
		"Always 1; labels carry the volume's cache mode (writeback, writethrough, passthrough), "+
			"state (active, suspended, inactive, error) and device path.",
		[]string{"volume", "pool", "mode", "state", "device"}, nil)
	volumeSizeDesc = volumeDesc("size_bytes", "Size of the volume (its extent on the HDD array).")

	// Write tier (dm-writecache status).
	volumeReadsDesc       = volumeDesc("reads_total", "Read requests the write tier received (dm-writecache <#reads>).")
	volumeWritesDesc      = volumeDesc("writes_total", "Write requests the write tier received (dm-writecache <#writes>).")
	volumeReadHitsDesc    = volumeDesc("read_hits_total", "Reads served from the write tier (dm-writecache <#read hits>).")
	volumeWriteHitsDesc   = volumeDesc("write_hits_total", "Writes to a block already in the write tier (dm-writecache <#write hits uncommitted> + <#write hits committed>).")
	volumeDirtyBlocksDesc = volumeDesc("dirty_blocks", "Write-tier blocks not yet written back to the HDD array (<#blocks> - <#free blocks>).")
	volumeDirtyBytesDesc  = volumeDesc("dirty_bytes", "Bytes on the write tier not yet written back to the HDD array.")
	volumeCacheUsedDesc   = volumeDesc("cache_used_bytes", "Bytes of the write tier in use; dm-writecache frees a block once written back, so this equals the dirty bytes.")
	volumeCacheSizeDesc   = volumeDesc("cache_size_bytes", "Usable data bytes of the write tier (dm-writecache <#blocks> times the block size).")
	volumeWritebackDesc   = volumeDesc("writeback_blocks", "Write-tier blocks being written back right now (dm-writecache <#blocks under writeback>).")
	volumeWBJobsDesc      = volumeDesc("writeback_jobs", "The write tier's bound on blocks in write-back at once (dm-writecache writeback_jobs): derived from the origin array unless the volume's or the node's tuning sets it. Each block queued ahead of a read on the HDDs delays it by a disk's service time.")
	volumeAllocDesc       = volumeDesc("writes_allocated_total", "Blocks written into new blocks of the write tier (dm-writecache <#writes allocated>): its rate is the incoming dirty data. When it stays above the rate of tidecache_volume_written_back_blocks_total the cache fills.")
	volumeAroundDesc      = volumeDesc("writes_around_total", "Blocks written around the write tier straight to the HDD array (dm-writecache <#writes bypassed>): it had no free block, or it was being drained. A rising rate on a full cache means writes run at HDD speed.")
	volumeBlockedDesc     = volumeDesc("writes_blocked_total", "Times a write waited for a free block of the write tier (dm-writecache <#writes blocked on freelist>): the cache was full and the block rewritten was under write-back. A rising rate means writes wait for the HDDs.")
	volumeErrorDesc       = volumeDesc("error", "1 if dm-writecache reports an I/O error (its <error> field is not 0): the SSD failed and writes are refused until the volume is repaired.")
	volumeHitRatioDesc    = prometheus.NewDesc(namespace+"_volume_read_hit_ratio", "Share of reads served by the tier since its counters started (0..1): tier=write from dm-writecache, tier=read from dm-cache. For a recent ratio use rate() of the counters.", []string{"volume", "pool", "tier"}, nil)
	volumeRCHitsDesc      = volumeDesc("read_cache_hits_total", "Reads served from the read tier (dm-cache <#read hits>).")
	volumeRCMissesDesc    = volumeDesc("read_cache_misses_total", "Reads the read tier passed to the HDD array (dm-cache <#read misses>).")
	volumeRCUsedDesc      = volumeDesc("read_cache_used_bytes", "Bytes of the read tier holding cached blocks (dm-cache <#used cache blocks> times the cache block size).")
	volumeRCSizeDesc      = volumeDesc("read_cache_size_bytes", "Data bytes of the read tier (dm-cache <#total cache blocks> times the cache block size).")
	volumeRCPromoteDesc   = volumeDesc("read_cache_promotions_total", "Blocks the smq policy promoted into the read tier (dm-cache <#promotions>).")
	volumeRCDemoteDesc    = volumeDesc("read_cache_demotions_total", "Blocks the smq policy demoted from the read tier (dm-cache <#demotions>).")
	volumeRCErrorDesc     = volumeDesc("read_cache_error", "1 if the read tier failed (dm-cache Fail), needs a metadata check or has read-only metadata.")
	volumeFUAWindowDesc   = volumeDesc("fua_window", "1 if the volume's FUA writes (O_DSYNC, journal commits) can be lost on power failure: its write tier runs without the fuaflush target, because the operator accepted that window (--allow-fua-window) or the volume still runs the old stack.")
	volumeFUAWritesDesc   = volumeDesc("fua_writes_total", "FUA writes the fuaflush target held until a flush of the write tier committed them.")
	volumeFUAFlushesDesc  = volumeDesc("fua_flushes_total", "Flushes the fuaflush target sent to the write tier; concurrent FUA writes share one.")
	volumeFUAErrorsDesc   = volumeDesc("fua_flush_errors_total", "Flushes of the write tier that failed; each failed the FUA writes waiting for it.")
	volumeRFHeldDesc      = volumeDesc("readfirst_held_writes_total", "Write-back I/Os the readfirst layer under the write tier held while reads were waiting on the HDD array (dm-readfirst <writes held total>); counts from the layer's last table load.")
	volumeRFLateDesc      = volumeDesc("readfirst_released_at_max_hold_total", "Held write-back I/Os that went because they had waited the layer's hold bound, not because reads paused: reads kept the array busy for that long. A rate close to that of tidecache_volume_readfirst_held_writes_total means write-back runs at its slowest under the read load.")
	volumeRFHeldNowDesc   = volumeDesc("readfirst_held_writes", "Write-back I/Os the readfirst layer holds right now.")
	volumeRFMaxHoldDesc   = volumeDesc("readfirst_max_hold_seconds", "The longest the readfirst layer holds one write-back I/O while reads wait (its max_hold_ms in force).")
	volumeCopiesDesc      = volumeDesc("write_copies", "Copies of the write cache that hold every acknowledged write right now: 1 unprotected, 2 mirrored (--protect local), 1 while a mirror is degraded, 0 when the write tier is in error.")
	volumeCopiesWantDesc  = volumeDesc("write_copies_wanted", "Copies of the write cache the volume's protection asks for: 1 (none) or 2 (local, peer, and a volume that failed over or moved from its node onto its replica).")
	volumeFailedOverDesc  = prometheus.NewDesc(namespace+"_volume_failed_over_timestamp_seconds",
		"When this node took the volume over from its replica after the cluster fenced the node it ran on (label from), as a Unix time; absent if it never failed over.",
		[]string{"volume", "pool", "from"}, nil)
	volumeMovedDesc = prometheus.NewDesc(namespace+"_volume_moved_timestamp_seconds",
		"When this node took the volume over from its replica in a planned move from the node it ran on (label from: tidectl volume move, CSI ControllerPublishVolume), as a Unix time; absent if it never moved here.",
		[]string{"volume", "pool", "from"}, nil)
	volumeDataLossDesc   = volumeDesc("data_loss_timestamp_seconds", "When the volume's write cache was given up with the writes it held (tidectl pool force-start --accept-data-loss), as a Unix time; absent if never.")
	volumeMirrorSyncDesc = volumeDesc("mirror_sync_ratio", "Share of the write mirror resynced or rebuilt (dm-raid sync ratio, 0..1); 1 when both legs are in sync.")
	volumeLegInSyncDesc  = prometheus.NewDesc(namespace+"_volume_mirror_leg_in_sync",
		"1 while the write mirror's leg (label leg: 0, 1) is alive and holds every acknowledged write, 0 while it failed, is absent or is being rebuilt. Label node names the node whose SSD holds a remote leg (a peer mirror's leg 1, either leg of a write cache on peers), empty for a leg on this node's own SSDs.",
		[]string{"volume", "pool", "leg", "node"}, nil)
	volumePeerHeldDesc = volumeDesc("mirror_peer_held_ios", "I/Os the peer failed that the peer leg of a volume that can fail over holds right now (dm-errhold): writes that wait, unacknowledged, until the peer takes them or the replica is recorded outdated in etcd.")
	volumeDescs        = []*prometheus.Desc{
		volumeInfoDesc, volumeSizeDesc,
		volumeReadsDesc, volumeWritesDesc, volumeReadHitsDesc, volumeWriteHitsDesc,
		volumeDirtyBlocksDesc, volumeDirtyBytesDesc, volumeCacheUsedDesc, volumeCacheSizeDesc,
		volumeWritebackDesc, volumeErrorDesc, volumeHitRatioDesc,
		volumeWBJobsDesc, volumeAllocDesc, volumeAroundDesc, volumeBlockedDesc,
		volumeRCHitsDesc, volumeRCMissesDesc, volumeRCUsedDesc, volumeRCSizeDesc,
		volumeRCPromoteDesc, volumeRCDemoteDesc, volumeRCErrorDesc,
		volumeFUAWindowDesc, volumeFUAWritesDesc, volumeFUAFlushesDesc, volumeFUAErrorsDesc,
		volumeRFHeldDesc, volumeRFLateDesc, volumeRFHeldNowDesc, volumeRFMaxHoldDesc,
		volumeCopiesDesc, volumeCopiesWantDesc, volumeMirrorSyncDesc, volumeLegInSyncDesc, volumePeerHeldDesc, volumeDataLossDesc,
		volumeFailedOverDesc, volumeMovedDesc,
	}
)

func describeVolume(ch chan<- *prometheus.Desc) {
	for _, d := range volumeDescs {
		ch <- d
	}
}

// sectorSize is the unit of dm-cache block sizes.
const sectorSize = 512

// emitVolume sends the metrics of one volume. Tiers the volume does not
// have, or whose status could not be read, give no series.
func emitVolume(ch chan<- prometheus.Metric, v engine.VolumeInfo) {
	gauge(ch, volumeInfoDesc, 1, v.Name, v.Pool, string(v.Mode), v.State, v.Device)
	gauge(ch, volumeSizeDesc, float64(v.SizeBytes), v.Name, v.Pool)

	if v.DataLossUnix != 0 {
		gauge(ch, volumeDataLossDesc, float64(v.DataLossUnix), v.Name, v.Pool)
	}
	if v.FailedOverFrom != "" {
		gauge(ch, volumeFailedOverDesc, float64(v.FailedOverUnix), v.Name, v.Pool, v.FailedOverFrom)
	}
	if v.MovedFrom != "" {
		gauge(ch, volumeMovedDesc, float64(v.MovedUnix), v.Name, v.Pool, v.MovedFrom)
	}
	if v.WriteCacheBytes > 0 {
		gauge(ch, volumeFUAWindowDesc, boolValue(v.FUAWindow || v.LegacyStack), v.Name, v.Pool)
	}
	if f := v.FUAFlush; f != nil {
		counter(ch, volumeFUAWritesDesc, f.FUAWrites, v.Name, v.Pool)
		counter(ch, volumeFUAFlushesDesc, f.Flushes, v.Name, v.Pool)
		counter(ch, volumeFUAErrorsDesc, f.FlushErrors, v.Name, v.Pool)
	}
	if r := v.ReadFirst; r != nil {
		counter(ch, volumeRFHeldDesc, r.HeldTotal, v.Name, v.Pool)
		counter(ch, volumeRFLateDesc, r.ReleasedAtMaxHold, v.Name, v.Pool)
		gauge(ch, volumeRFHeldNowDesc, float64(r.HeldNow), v.Name, v.Pool)
		gauge(ch, volumeRFMaxHoldDesc, float64(r.MaxHoldMs)/1000, v.Name, v.Pool)
	}
	if wc := v.WriteCache; wc != nil {
		wanted, copies := 1, 1
		switch {
		case v.Protection == pool.ProtectLocal || v.Protection == pool.ProtectPeer:
			wanted, copies = 2, 0
			if m := v.Mirror; m != nil {
				copies = m.Copies
				gauge(ch, volumeMirrorSyncDesc, ratio(m.SyncDone, m.SyncTotal), v.Name, v.Pool)
				for i, h := range m.Health {
					holder := ""
					switch {
					case i == 0:
						holder = v.PeerNode0
					case v.Protection == pool.ProtectPeer:
						holder = v.PeerNode
					}
					gauge(ch, volumeLegInSyncDesc, boolValue(h == dm.LegInSync), v.Name, v.Pool, strconv.Itoa(i), holder)
				}
				if v.CanFailOver { // its peer leg holds the replica's errors
					gauge(ch, volumePeerHeldDesc, float64(m.PeerHeld), v.Name, v.Pool)
				}
			}
		case v.TakenOverFrom() != "":
			// It was peer-protected; since it failed over or moved it
			// runs on the replica it took over, one copy.
			wanted = 2
		}
		if wc.Error != 0 {
			copies = 0
		}
		gauge(ch, volumeCopiesDesc, float64(copies), v.Name, v.Pool)
		gauge(ch, volumeCopiesWantDesc, float64(wanted), v.Name, v.Pool)
		bs := uint64(v.BlockSize)
		gauge(ch, volumeDirtyBlocksDesc, float64(wc.DirtyBlocks), v.Name, v.Pool)
		gauge(ch, volumeDirtyBytesDesc, float64(wc.DirtyBytes), v.Name, v.Pool)
		gauge(ch, volumeCacheUsedDesc, float64(wc.DirtyBlocks*bs), v.Name, v.Pool)
		gauge(ch, volumeCacheSizeDesc, float64(wc.TotalBlocks*bs), v.Name, v.Pool)
		gauge(ch, volumeWritebackDesc, float64(wc.WritebackBlocks), v.Name, v.Pool)
		gauge(ch, volumeErrorDesc, boolValue(wc.Error != 0), v.Name, v.Pool)
		if wc.HasStats { // dm-writecache 1.6+ (Linux 5.15+)
			counter(ch, volumeReadsDesc, wc.Reads, v.Name, v.Pool)
			counter(ch, volumeWritesDesc, wc.Writes, v.Name, v.Pool)
			counter(ch, volumeReadHitsDesc, wc.ReadHits, v.Name, v.Pool)
			counter(ch, volumeWriteHitsDesc, wc.WriteHitsUncommitted+wc.WriteHitsCommitted, v.Name, v.Pool)
			counter(ch, volumeAllocDesc, wc.WritesAllocate, v.Name, v.Pool)
			counter(ch, volumeAroundDesc, wc.WritesAround, v.Name, v.Pool)
			counter(ch, volumeBlockedDesc, wc.WritesBlocked, v.Name, v.Pool)
			gauge(ch, volumeHitRatioDesc, wc.ReadHitRatio, v.Name, v.Pool, "write")
		}
	}

	if l := v.WritebackLimit; l != nil && v.Mode == pool.ModeWriteback {
		gauge(ch, volumeWBJobsDesc, float64(l.Jobs), v.Name, v.Pool)
	}

	if rc := v.ReadCache; rc != nil {
		gauge(ch, volumeRCErrorDesc, boolValue(rc.Failed || rc.NeedsCheck || rc.MetadataMode == "ro"), v.Name, v.Pool)
		if !rc.Failed { // a failed cache prints no counters
			bs := rc.BlockSize * sectorSize
			counter(ch, volumeRCHitsDesc, rc.ReadHits, v.Name, v.Pool)
			counter(ch, volumeRCMissesDesc, rc.ReadMisses, v.Name, v.Pool)
			gauge(ch, volumeRCUsedDesc, float64(rc.Used*bs), v.Name, v.Pool)
			gauge(ch, volumeRCSizeDesc, float64(rc.Total*bs), v.Name, v.Pool)
			counter(ch, volumeRCPromoteDesc, rc.Promotions, v.Name, v.Pool)
			counter(ch, volumeRCDemoteDesc, rc.Demotions, v.Name, v.Pool)
			gauge(ch, volumeHitRatioDesc, rc.ReadHitRatio, v.Name, v.Pool, "read")
		}
	}
}

// ratio is a/b, 1 when b is 0 (nothing to sync).
func ratio(a, b uint64) float64 {
	if b == 0 {
		return 1
	}
	return float64(a) / float64(b)
}
