// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	units "github.com/docker/go-units"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/engine"
	"github.com/tidecache/tidecache/pkg/pool"
)

func newVolumeCmd(g *Globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "volume",
		Aliases: []string{"vol"},
		Short:   "Create, inspect, switch, flush and delete cached volumes",
	}
	cmd.AddCommand(newVolumeCreateCmd(g), newVolumeListCmd(g), newVolumeShowCmd(g),
		newVolumeDeleteCmd(g), newVolumeSetModeCmd(g), newVolumeFlushCmd(g),
		newVolumeCheckCmd(g), newVolumeRepairCmd(g), newVolumeTuneCmd(g),
		newVolumeAdoptCmd(g), newVolumeDetachCmd(g), newVolumeUncacheCmd(g), newVolumeResizeCmd(g), newVolumeMoveCmd(g),
		newVolumeImportCmd(g))
	return cmd
}

// parseSize reads a size like "10G", "512MiB" or "1T" (binary units).
func parseSize(flag, s string, allowZero bool) (uint64, error) {
	n, err := units.RAMInBytes(s)
	if err != nil {
		return 0, fmt.Errorf("invalid --%s %q: use a size like 512M, 10G or 1T", flag, s)
	}
	if n < 0 || (n == 0 && !allowZero) {
		return 0, fmt.Errorf("invalid --%s %q: must be greater than zero", flag, s)
	}
	return uint64(n), nil
}

// createFlags are the raw flags of `volume create`, parsed by request.
type createFlags struct {
	size, writeCache, readCache, readBlockSize, mode, protect string
	blockSize                                                 uint32
	allowFUAWindow                                            bool
	// adopt: the request caches an existing device whole, so it takes
	// no --size.
	adopt bool
}

// request turns the flags into a volume request, checking what needs no
// device so a typo is reported before anything is touched, in local and
// cluster mode alike.
func (c createFlags) request(name string) (pool.VolumeRequest, error) {
	req := pool.VolumeRequest{Name: name, BlockSize: c.blockSize}
	if err := pool.ValidateName("volume", req.Name); err != nil {
		return pool.VolumeRequest{}, err
	}
	var err error
	if !c.adopt {
		if req.Size, err = parseSize("size", c.size, false); err != nil {
			return pool.VolumeRequest{}, err
		}
	}
	if req.WriteCache, err = parseSize("write-cache", c.writeCache, true); err != nil {
		return pool.VolumeRequest{}, err
	}
	if req.ReadCache, err = parseSize("read-cache", c.readCache, true); err != nil {
		return pool.VolumeRequest{}, err
	}
	if c.readBlockSize != "" {
		if req.ReadCache == 0 {
			return pool.VolumeRequest{}, fmt.Errorf("--read-block-size needs --read-cache: only the read cache has that block size")
		}
		n, err := parseSize("read-block-size", c.readBlockSize, false)
		if err != nil {
			return pool.VolumeRequest{}, err
		}
		if n > pool.MaxReadBlockSize || !pool.ValidReadBlockSize(uint32(n)) {
			return pool.VolumeRequest{}, fmt.Errorf("invalid --read-block-size %q: want a power of two from 32K to 1M", c.readBlockSize)
		}
		req.ReadBlockSize = uint32(n)
	}
	if req.Mode, err = pool.ParseMode(c.mode); err != nil {
		return pool.VolumeRequest{}, err
	}
	if c.adopt && req.BlockSize == 0 {
		// Chosen by the engine from the filesystem on the device.
	} else if req.BlockSize < 512 || req.BlockSize > 4096 || req.BlockSize&(req.BlockSize-1) != 0 {
		return pool.VolumeRequest{}, fmt.Errorf("invalid --block-size %d: want a power of two from 512 to 4096 bytes", req.BlockSize)
	}
	if req.Mode == pool.ModeWriteback && req.WriteCache == 0 {
		return pool.VolumeRequest{}, fmt.Errorf("mode writeback needs --write-cache")
	}
	if c.allowFUAWindow && req.WriteCache == 0 {
		return pool.VolumeRequest{}, fmt.Errorf("--allow-fua-window needs --write-cache: only the write cache has that window")
	}
	req.FUAWindow = c.allowFUAWindow
	if c.protect != "" {
		if req.Protect, err = pool.ParseProtection(c.protect); err != nil {
			return pool.VolumeRequest{}, fmt.Errorf("invalid --protect %q: want none, local or peer", c.protect)
		}
	}
	if req.Protect != "" && req.Protect != pool.ProtectNone && req.WriteCache == 0 {
		return pool.VolumeRequest{}, fmt.Errorf("--protect %s needs --write-cache: it mirrors the write cache", req.Protect)
	}
	return req, nil
}

func newVolumeCreateCmd(g *Globals) *cobra.Command {
	var poolName, node string
	var cf createFlags
	cmd := &cobra.Command{
		Use:   "create NAME --size SIZE [--write-cache SIZE] [--read-cache SIZE [--read-block-size SIZE]]",
		Short: "Carve a cached volume out of a pool",
		Long: `Create a volume: an extent of the pool's origin, a write-cache slice on an
SSD (dm-writecache) and optionally a read-cache slice (dm-cache, smq,
writethrough). The volume appears as /dev/mapper/tc-NAME.

Names use only a-z, 0-9 and '-', at most 48 characters, unique on the node.
The new cache slices are zeroed and the layout is recorded on every pool
device before the volume goes live.

--read-block-size is the read cache's dm-cache block size, a power of two
from 32K to 1M (default: the node's, 256K). It is fixed for the life of the
volume. Small blocks suit the small random reads of a database: promoting a
hot 16K page copies little besides it. Large blocks suit scans and need
less kernel memory and metadata per GiB of cache, but every promotion
copies a whole block from the HDDs. The read cache must hold at least 16
blocks.

A write cache needs tidecache's fuaflush kernel module (dm-fuaflush, built
with DKMS): dm-writecache alone acknowledges a FUA write (O_DSYNC, an
ext4/XFS journal commit) before its mapping is committed, so a power cut
can lose it. Without the module, creating a write cache is refused.
--allow-fua-window creates it anyway, recording in the layout that the
operator accepted losing such writes acknowledged within the autocommit
time; volume show, a metric and an alert keep reporting it.

--protect says how many copies of the write cache exist. With local the
write cache is a RAID1 (dm-raid) of two slices on two SSDs of the pool,
each with a small metadata slice for dm-raid's superblock and write-intent
bitmap: a write is acknowledged once both SSDs have it, either SSD can die
without losing one, and the volume goes on, degraded, on the other. It
takes twice the write-cache space. With none the dirty blocks live on one
SSD: if it dies, the writes it held that were not yet on the HDDs are
lost. Without --protect a volume gets local when its pool has two SSDs
with room for the mirror, else none, with a warning; in cluster mode it
gets peer first, when another node serving replicas has room.

With peer (cluster mode only) the second leg is a slice of another node's
SSD: the leader picks a node that serves replicas (tidecached
--replica-address) with room, in another fault domain when it can, or
the one --replica-node names. That node exports the slice over NVMe/TCP
to this volume's node alone, and a write is acknowledged once both nodes'
SSDs have it. If the peer dies, I/O stalls a few seconds and goes on with
the local leg, degraded; when the peer is back the daemon attaches it
again and dm-raid resyncs what its bitmap recorded.`,
		Example: `  tidectl volume create mysql --size 500G --write-cache 40G --read-cache 80G
  tidectl volume create scans --size 2T --write-cache 40G --read-cache 200G --read-block-size 512K
  tidectl volume create scratch --size 10G --write-cache 1G --mode writethrough
  tidectl volume create ledger --size 200G --write-cache 20G --protect local
  tidectl volume create orders --size 200G --write-cache 20G --protect peer --node db1 --etcd-endpoints http://10.0.0.1:2389`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req, err := cf.request(args[0])
			if err != nil {
				return usageError{err}
			}
			if req.Protect == pool.ProtectPeer && !g.cluster() {
				return usageError{fmt.Errorf("--protect peer needs the cluster (--etcd-endpoints): the leader places the replica on another node, whose daemon exports it")}
			}
			if g.cl.replicaNode != "" {
				if req.Protect != pool.ProtectPeer {
					return usageError{fmt.Errorf("--replica-node needs --protect peer")}
				}
				if err := api.ValidateNodeName(g.cl.replicaNode); err != nil {
					return usageError{fmt.Errorf("--replica-node: %w", err)}
				}
			}
			if poolName != "" {
				if err := pool.ValidateName("pool", poolName); err != nil {
					return usageError{fmt.Errorf("--pool: %w", err)}
				}
			}
			if node != "" {
				if err := api.ValidateNodeName(node); err != nil {
					return usageError{fmt.Errorf("--node: %w", err)}
				}
			}
			b, err := g.backend(cmd.Context())
			if err != nil {
				return err
			}
			defer b.Close()
			v, err := b.CreateVolume(cmd.Context(), req, poolName, node)
			if err != nil {
				return err
			}
			if v.WriteCacheBytes > 0 && v.Protection == string(pool.ProtectNone) {
				fmt.Fprintf(g.Stderr, "warning: volume %s: the write cache has one copy, on one SSD: if that SSD dies, writes not yet on the HDDs are lost; --protect local or peer mirrors it on a second SSD\n", v.Name)
			}
			if g.cluster() && !g.cl.wait {
				if g.JSON() {
					return g.Print(v)
				}
				fmt.Fprintf(g.Stdout, "volume %s: spec written; add --wait to follow its node applying it\n", v.Name)
				return nil
			}
			return printVolume(g, v)
		},
	}
	f := cmd.Flags()
	f.StringVar(&poolName, "pool", "", "pool to carve from (default: the only pool on the node)")
	f.StringVar(&cf.size, "size", "", "volume size (e.g. 100G)")
	f.StringVar(&cf.writeCache, "write-cache", "0", "write-back cache size on SSD (dm-writecache); 0 for none")
	f.StringVar(&cf.readCache, "read-cache", "0", "read cache size on SSD (dm-cache smq); 0 for none")
	f.StringVar(&cf.readBlockSize, "read-block-size", "", "read cache block size, a power of two from 32K to 1M (default 256K; 64K suits a sparse hot set larger than the cache); needs --read-cache")
	f.StringVar(&cf.mode, "mode", string(pool.ModeWriteback), "initial mode: writeback, writethrough or passthrough")
	f.Uint32Var(&cf.blockSize, "block-size", 4096, "write-cache block size in bytes (512-4096, power of two)")
	f.StringVar(&node, "node", "", "cluster mode: node to create the volume on (default: the leader places it)")
	_ = cmd.RegisterFlagCompletionFunc("pool", g.completePools)
	_ = cmd.RegisterFlagCompletionFunc("node", g.completeNodes)
	_ = cmd.RegisterFlagCompletionFunc("mode", completeModes)
	f.StringVar(&cf.protect, "protect", "", "copies of the write cache: local (mirrored on two SSDs of the pool), peer (mirrored on another node's SSD over NVMe/TCP; cluster mode) or none (one SSD); default: peer in cluster mode when another node can keep the replica, else local when the pool has two SSDs with room, else none")
	_ = cmd.RegisterFlagCompletionFunc("protect", cobra.FixedCompletions([]string{string(pool.ProtectNone), string(pool.ProtectLocal), string(pool.ProtectPeer)}, cobra.ShellCompDirectiveNoFileComp))
	f.StringVar(&g.cl.replicaNode, "replica-node", "", "cluster mode, --protect peer: node to keep the replica on (default: the leader places it)")
	_ = cmd.RegisterFlagCompletionFunc("replica-node", g.completeNodes)
	f.BoolVar(&cf.allowFUAWindow, "allow-fua-window", false, "build the write cache without the fuaflush kernel target: FUA writes (O_DSYNC, journal commits) can be lost on power failure; recorded and alerted on")
	_ = cmd.MarkFlagRequired("size")
	return cmd
}

func newVolumeListCmd(g *Globals) *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List volumes with their mode, state and dirty data",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := g.backend(cmd.Context())
			if err != nil {
				return err
			}
			defer b.Close()
			vols, err := b.Volumes(cmd.Context())
			if err != nil {
				return err
			}
			if g.JSON() {
				return g.Print(vols)
			}
			t := newTable(g.Stdout, "NAME", "NODE", "POOL", "SIZE", "MODE", "STATE", "DIRTY", "WRITE-CACHE", "READ-CACHE", "HIT (W/R)", "ERROR")
			for _, v := range vols {
				mode := v.Mode
				switch {
				case mode == "":
					mode = "(" + v.DesiredMode + ")"
				case v.DesiredMode != "" && v.DesiredMode != mode:
					mode += " -> " + v.DesiredMode
				}
				node := v.Node
				if node == "" {
					node = "(unplaced)"
				}
				wc, rc := "-", "-"
				if v.WriteCacheBytes > 0 {
					wc = size(v.WriteCacheBytes)
					if v.WriteCache != nil {
						wc += fmt.Sprintf(" (%.0f%% used)", v.WriteCache.UsedPercent)
					}
				}
				if v.ReadCacheBytes > 0 {
					rc = size(v.ReadCacheBytes)
				}
				hits := fmt.Sprintf("%s/%s", percent(v.WriteHitRatio), percent(v.ReadHitRatio))
				t.row(v.Name, node, orDash(v.Pool), size(v.SizeBytes), mode, v.State, size(v.DirtyBytes), wc, rc, hits, v.Error)
			}
			return t.flush()
		},
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newVolumeShowCmd(g *Globals) *cobra.Command {
	return &cobra.Command{
		Use:               "show NAME",
		Short:             "Show a volume: layout, kernel state, hit ratios, dirty blocks",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: g.completeVolumes,
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := g.backend(cmd.Context())
			if err != nil {
				return err
			}
			defer b.Close()
			v, err := b.Volume(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return printVolume(g, v)
		},
	}
}

// printVolume prints one volume: the record with -o json/yaml, else the
// same fields for people.
func printVolume(g *Globals, v Volume) error {
	if g.JSON() {
		return g.Print(v)
	}
	w := g.Stdout
	if v.UUID != "" {
		fmt.Fprintf(w, "Volume:       %s (uuid %s)\n", v.Name, v.UUID)
	} else {
		fmt.Fprintf(w, "Volume:       %s\n", v.Name)
	}
	fmt.Fprintf(w, "Node:         %s\n", orDash(v.Node))
	fmt.Fprintf(w, "Pool:         %s\n", orDash(v.Pool))
	if v.Policy != "" {
		fmt.Fprintf(w, "Policy:       %s\n", v.Policy)
	}
	fmt.Fprintf(w, "Device:       %s\n", v.Device)
	if v.SharedOrigin != "" {
		fmt.Fprintf(w, "Origin:       %s (shared: fails over to the replica's node)\n", v.SharedOrigin)
	}
	switch {
	case v.MovingTo != "":
		fmt.Fprintf(w, "Moving:       to node %s, once its replica there holds every write and the device is closed\n", v.MovingTo)
	case v.MovedFrom != "" && v.Protection == string(pool.ProtectNone):
		fmt.Fprintf(w, "Moved:        from node %s, now on %s: one copy of the write cache, the replica it took over, until a new replica is placed\n", v.MovedFrom, cmp.Or(v.Node, "?"))
	case v.MovedFrom != "":
		fmt.Fprintf(w, "Moved:        from node %s\n", v.MovedFrom)
	case v.FailedOverFrom != "":
		fmt.Fprintf(w, "Failed over:  from node %s, now on %s: one copy of the write cache, the replica it took over\n", v.FailedOverFrom, cmp.Or(v.Node, "?"))
	}
	if v.MoveCalledOff != "" && v.MovingTo == "" {
		fmt.Fprintf(w, "Last move:    %s\n", v.MoveCalledOff)
	}
	if v.DataLoss != "" {
		fmt.Fprintf(w, "Data loss:    %s\n", v.DataLoss)
	}
	if v.AdoptedDevice != "" {
		fmt.Fprintf(w, "Caches:       %s (adopted: mount %s, never the device itself)\n", v.AdoptedDevice, v.Device)
	}
	fmt.Fprintf(w, "Size:         %s\n", size(v.SizeBytes))
	switch {
	case v.Mode == "":
		fmt.Fprintf(w, "Mode:         (not applied yet; wanted %s)\n", orDash(v.DesiredMode))
	case v.DesiredMode != "" && v.DesiredMode != v.Mode:
		fmt.Fprintf(w, "Mode:         %s, changing to %s\n", v.Mode, v.DesiredMode)
	default:
		fmt.Fprintf(w, "Mode:         %s\n", v.Mode)
	}
	fmt.Fprintf(w, "State:        %s\n", v.State)
	if v.SpecRevision != 0 {
		status := "none yet (no node has applied it)"
		if v.UpdatedAt != nil {
			status = fmt.Sprintf("spec revision %d applied of %d, updated %s", v.ObservedRevision, v.SpecRevision, v.UpdatedAt.Format(time.RFC3339))
		}
		fmt.Fprintf(w, "Status:       %s\n", status)
	}
	if v.Error != "" {
		fmt.Fprintf(w, "Error:        %s\n", v.Error)
	}
	for _, a := range v.Alerts {
		fmt.Fprintf(w, "Alert:        %s\n", a)
	}
	fmt.Fprintf(w, "Write cache:  %s, block size %d\n", size(v.WriteCacheBytes), v.BlockSize)
	if v.WriteCacheBytes > 0 {
		fmt.Fprintf(w, "  durability: %s\n", durability(v))
		fmt.Fprintf(w, "  protection: %s\n", protection(v))
	}
	if v.WriteCacheBytes > 0 || !v.Tuning.Empty() {
		fmt.Fprintf(w, "  tuning:     %s\n", formatTuning(v.Tuning))
	}
	if v.WritebackJobs > 0 {
		fmt.Fprintf(w, "  write-back: at most %d blocks in flight to the HDDs (%s)\n", v.WritebackJobs, v.WritebackLimitReason)
	}
	if v.WritebackWatermarks != "" {
		fmt.Fprintf(w, "  runs:       %s\n", v.WritebackWatermarks)
	}
	if rf := v.ReadFirst; rf != nil {
		fmt.Fprintf(w, "  read-first: write-back held up to %d ms while reads wait on the HDDs; %d held now, %d since load, %d of them for the whole bound\n",
			rf.MaxHoldMs, rf.HeldNow, rf.HeldTotal, rf.ReleasedAtMaxHold)
	} else if v.Mode == string(pool.ModeWriteback) && v.WriteCache != nil {
		fmt.Fprintf(w, "  read-first: off: write-back competes with reads for the HDDs (tidectl volume tune %s --readfirst-max-hold 1000)\n", v.Name)
	}
	if wc := v.WriteCache; wc != nil {
		fmt.Fprintf(w, "  dirty:      %d blocks (%s), %.1f%% of cache, %d under writeback\n", wc.DirtyBlocks, size(wc.DirtyBytes), wc.UsedPercent, wc.WritebackBlocks)
		fmt.Fprintf(w, "  reads:      %d, hits %d (%s)\n", wc.Reads, wc.ReadHits, percent(wc.ReadHitRatio))
		fmt.Fprintf(w, "  writes:     %d, hits %d (%s), bypassed %d, blocked on free space %d\n", wc.Writes, wc.WriteHitsCommitted+wc.WriteHitsUncommitted, percent(wc.WriteHitRatio), wc.WritesAround, wc.WritesBlocked)
		fmt.Fprintf(w, "  flushes:    %d, discards %d, error %d\n", wc.Flushes, wc.Discards, wc.Error)
	} else if v.WriteCacheBytes > 0 {
		fmt.Fprintf(w, "  dirty:      %d blocks (%s)\n", v.DirtyBlocks, size(v.DirtyBytes))
	}
	if v.ReadCacheBytes > 0 {
		if v.ReadBlockSize > 0 {
			fmt.Fprintf(w, "Read cache:   %s, block size %s\n", size(v.ReadCacheBytes), size(uint64(v.ReadBlockSize)))
		} else {
			fmt.Fprintf(w, "Read cache:   %s\n", size(v.ReadCacheBytes))
		}
	}
	if rc := v.ReadCache; rc != nil {
		fmt.Fprintf(w, "  used:       %d/%d blocks of %s\n", rc.Used, rc.Total, size(rc.BlockSize*512))
		fmt.Fprintf(w, "  reads:      hits %d, misses %d (%s hit)\n", rc.ReadHits, rc.ReadMisses, percent(rc.ReadHitRatio))
		fmt.Fprintf(w, "  writes:     hits %d, misses %d; promotions %d, demotions %d, dirty %d\n", rc.WriteHits, rc.WriteMisses, rc.Promotions, rc.Demotions, rc.Dirty)
	}
	fmt.Fprintf(w, "Hit ratios:   reads %s, writes %s\n", percent(v.ReadHitRatio), percent(v.WriteHitRatio))
	return nil
}

// durability says whether the volume's FUA writes are durable when
// acknowledged.
func durability(v Volume) string {
	switch {
	case v.FUAWindow:
		return "FUA WINDOW ACCEPTED (--allow-fua-window): O_DSYNC writes and journal commits acknowledged within the autocommit time can be lost on power failure"
	case v.LegacyStack:
		return "OLD STACK without fuaflush: FUA writes can be lost on power failure; run `tidecached assemble` to move it to the current stack"
	case v.FUAFlush != nil:
		return fmt.Sprintf("every acknowledged write is durable (fuaflush: %d FUA writes, %d flushes, %d flush errors)", v.FUAFlush.FUAWrites, v.FUAFlush.Flushes, v.FUAFlush.FlushErrors)
	}
	return "every acknowledged write is durable (fuaflush above the write tier in writeback)"
}

// protection says how many copies of the write cache exist right now.
func protection(v Volume) string {
	m := v.Mirror
	var kind, where string
	switch v.Protection {
	case string(pool.ProtectLocal):
		kind, where = "local", "mirrored on two SSDs"
	case string(pool.ProtectPeer):
		peer := cmp.Or(v.PeerNode, "a peer node not placed yet")
		kind, where = "peer", "mirrored on this node's SSD and on "+peer+"'s, over NVMe/TCP"
		if v.PeerNode0 != "" {
			where = "on peers: mirrored on " + v.PeerNode0 + "'s SSD and on " + peer + "'s, over NVMe/TCP (this node has no SSD)"
		}
	default:
		return "NONE: one copy on one SSD; losing it loses the writes not yet on the HDDs (--protect local or peer mirrors it)"
	}
	switch {
	case m == nil:
		return fmt.Sprintf("%s (%s; the mirror is not running)", kind, where)
	case m.PeerHeld > 0:
		return fmt.Sprintf("%s, WAITING: %d write(s) %s failed are held on its leg, unacknowledged, until it takes them or the replica is recorded outdated in etcd (the daemon's log says which)",
			kind, m.PeerHeld, cmp.Or(v.PeerNode, "the peer"))
	case m.Degraded && m.SyncAction == "recover":
		return fmt.Sprintf("%s, DEGRADED: legs %s, rebuilding a leg, %.1f%% done", kind, m.Health, m.SyncPercent)
	case m.Degraded && kind == "peer":
		gone := v.PeerNode
		if v.PeerNode0 != "" && strings.HasPrefix(m.Health, "D") {
			gone = v.PeerNode0 // leg 0 is a peer's too
		}
		return fmt.Sprintf("%s, DEGRADED: legs %s, %d copy of the dirty blocks; the daemon attaches the peer leg again when %s answers (or tidectl volume repair %s)", kind, m.Health, m.Copies, cmp.Or(gone, "the peer"), v.Name)
	case m.Degraded:
		return fmt.Sprintf("%s, DEGRADED: legs %s, %d copy of the dirty blocks; replace or bring back the failed SSD, then tidectl volume repair %s", kind, m.Health, m.Copies, v.Name)
	case m.SyncAction == "resync":
		return fmt.Sprintf("%s: %s, legs %s, initial resync %.1f%% done (every write goes to both)", kind, where, m.Health, m.SyncPercent)
	}
	return fmt.Sprintf("%s: %s, legs %s", kind, where, m.Health)
}

// formatTuning prints a volume's own write-tier tuning: the knobs it sets,
// or "node defaults".
func formatTuning(t *pool.Tuning) string {
	if t.Empty() {
		return "node defaults"
	}
	var parts []string
	if t.HighWatermark != nil {
		parts = append(parts, fmt.Sprintf("high watermark %d%%", *t.HighWatermark))
	}
	if t.LowWatermark != nil {
		parts = append(parts, fmt.Sprintf("low watermark %d%%", *t.LowWatermark))
	}
	if t.WritebackJobs != nil {
		parts = append(parts, fmt.Sprintf("writeback jobs %d", *t.WritebackJobs))
	}
	if t.AutocommitTimeMs != nil {
		parts = append(parts, fmt.Sprintf("autocommit %d ms", *t.AutocommitTimeMs))
	}
	switch h := t.ReadFirstMaxHoldMs; {
	case h == nil:
	case *h == 0:
		parts = append(parts, "no read-first layer")
	default:
		parts = append(parts, fmt.Sprintf("read-first hold %d ms", *h))
	}
	return strings.Join(parts, ", ") + " (others: node defaults)"
}

func newVolumeDeleteCmd(g *Globals) *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a volume and free its extents",
		Long: `Delete a volume: remove its device-mapper devices and free its origin extent
and SSD slices. The volume must not be open (unmount it first).

A volume whose write cache still holds dirty blocks (writes acknowledged
but not yet on the HDDs) is refused: run 'tidectl volume flush NAME' first.
--force deletes anyway and discards those blocks.

In cluster mode the spec is deleted; the owning node deletes the volume
once its write cache is clean (--force is refused there).`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: g.completeVolumes,
		RunE: func(cmd *cobra.Command, args []string) error {
			q := "delete volume " + args[0] + "?"
			if force {
				q = "delete volume " + args[0] + " with --force, discarding the writes its write cache may hold that are not on the HDDs yet?"
			}
			if err := g.confirm(q); err != nil {
				return err
			}
			b, err := g.backend(cmd.Context())
			if err != nil {
				return err
			}
			defer b.Close()
			if err := b.DeleteVolume(cmd.Context(), args[0], force); err != nil {
				return err
			}
			if force {
				fmt.Fprintf(g.Stderr, "warning: volume %s deleted with --force; any dirty cache blocks were discarded\n", args[0])
			}
			if g.JSON() {
				return g.Print(map[string]string{"deleted": args[0]})
			}
			if !g.cluster() {
				fmt.Fprintf(g.Stdout, "volume %s deleted\n", args[0])
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "delete even if the write cache holds dirty blocks (they are lost); local mode only")
	return cmd
}

func newVolumeSetModeCmd(g *Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "set-mode NAME writeback|writethrough|passthrough",
		Short: "Switch a volume's cache mode live, without unmounting",
		Long: `Switch a volume's cache mode while it is in use:

  writeback     writes are acknowledged once on the SSD (dm-writecache) and
                written to the HDDs in the background
  writethrough  writes go to the HDDs; the read tier (if any) keeps
                serving hot reads; nothing dirty on SSD
  passthrough   everything goes to the HDDs; no SSD involved

Leaving writeback first writes every dirty block back to the HDDs
(progress and ETA are shown), then swaps the table while the device is
briefly suspended. The mode is recorded on disk so boot assembly rebuilds
the same stack.

In cluster mode the spec's mode is written and the owning node switches;
--wait follows it, with the drain's progress and ETA.`,
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: g.completeVolumeThenMode,
		RunE: func(cmd *cobra.Command, args []string) error {
			mode, err := pool.ParseMode(args[1])
			if err != nil {
				return usageError{err}
			}
			b, err := g.backend(cmd.Context())
			if err != nil {
				return err
			}
			defer b.Close()
			v, err := b.SetMode(cmd.Context(), args[0], mode)
			if err != nil {
				return err
			}
			if g.JSON() {
				return g.Print(v)
			}
			if !g.cluster() {
				fmt.Fprintf(g.Stdout, "volume %s is now %s (%s)\n", v.Name, v.Mode, v.State)
			} else if !g.cl.wait {
				fmt.Fprintf(g.Stdout, "volume %s: mode %s written; add --wait to follow its node applying it\n", v.Name, mode)
			}
			return nil
		},
	}
}

func newVolumeFlushCmd(g *Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "flush NAME",
		Short: "Write every dirty cache block back to the HDDs and wait (this node)",
		Long: `Write every dirty block of the volume's write cache back to the HDDs and
wait until none is left, showing progress and an ETA. The volume stays in
use and in its mode. Works on this node's devices; in a cluster, run it on
the node that holds the volume, or give its policy a --flush-interval.`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: g.completeVolumes,
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := g.local("volume flush", "run it on the node that holds the volume (`tidectl volume list --etcd-endpoints …` shows it), or give its policy a --flush-interval")
			if err != nil {
				return err
			}
			defer b.Close()
			left, err := b.Flush(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if g.JSON() {
				return g.Print(map[string]any{"volume": args[0], "dirty_blocks": left})
			}
			fmt.Fprintf(g.Stdout, "volume %s flushed: %d dirty blocks left\n", args[0], left)
			return nil
		},
	}
}

// isTerminal reports whether w is a terminal, to choose progress style.
func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	return term.IsTerminal(int(f.Fd()))
}

// checkResult is what `volume check -o json` prints.
type checkResult struct {
	Volume  string       `json:"volume"`
	Drifted bool         `json:"drifted"`
	Drift   []driftEntry `json:"drift"`
}

type driftEntry struct {
	Device string `json:"device"`
	Want   string `json:"want"`
	Got    string `json:"got"`
}

func newVolumeCheckCmd(g *Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "check NAME",
		Short: "Compare a volume's live device-mapper tables with its recorded layout",
		Long: `Compare every device of a volume with the stack its layout describes and
report each difference (a table changed by hand, a missing device). Changes
nothing. Exit status 0: it matches; 3: it has drifted ('volume repair'
fixes it); 1: the check could not run. Works on this node's devices.`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: g.completeVolumes,
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := g.local("volume check", "run it on the node that holds the volume; its daemon also checks every volume each --resync-interval and reports drift in the volume's status")
			if err != nil {
				return err
			}
			defer b.Close()
			err = b.Check(cmd.Context(), args[0])
			drift, onlyDrift := driftFindings(err)
			if err != nil && !onlyDrift {
				return err
			}
			res := checkResult{Volume: args[0], Drifted: err != nil, Drift: drift}
			if g.JSON() {
				if perr := g.Print(res); perr != nil {
					return perr
				}
			} else if !res.Drifted {
				fmt.Fprintf(g.Stdout, "volume %s matches its layout\n", args[0])
			}
			if res.Drifted {
				return Found(fmt.Errorf("volume %s has drifted:\n%w", args[0], err))
			}
			return nil
		},
	}
}

// driftFindings splits what CheckVolume returned into its drift findings
// (the joined *engine.DriftError values); only reports whether err holds
// nothing else, so `volume check` can tell "drifted" (ExitFound) from
// "could not check" (ExitError).
func driftFindings(err error) (found []driftEntry, only bool) {
	found = []driftEntry{}
	if err == nil {
		return found, false
	}
	errs := []error{err}
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		errs = joined.Unwrap()
	}
	only = true
	for _, e := range errs {
		var d *engine.DriftError
		if !errors.As(e, &d) {
			only = false
			continue
		}
		found = append(found, driftEntry{Device: d.Device, Want: d.Want, Got: d.Got})
	}
	return found, only
}

func newVolumeRepairCmd(g *Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "repair NAME",
		Short: "Bring a volume's devices back to its recorded layout",
		Long: `Create missing devices of a volume and reload every device whose table
differs from the layout (suspend, load, resume). A write tier is only ever
reloaded as a write tier, so its dirty blocks stay reachable. Works on this
node's devices.

For a mirrored write cache (--protect local) it also gives a failed leg
back to dm-raid once its SSD answers again: the mirror's table is loaded
again, and dm-raid resyncs, from its write-intent bitmap, only the regions
written while the leg was out ('volume show' follows the rebuild). A leg
whose SSD still fails is failed again at its first error; the other leg
serves the volume throughout.`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: g.completeVolumes,
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := g.local("volume repair", "run it on the node that holds the volume; a daemon with --drift-policy repair repairs drift itself")
			if err != nil {
				return err
			}
			defer b.Close()
			changed, err := b.Repair(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if g.JSON() {
				return g.Print(map[string]any{"volume": args[0], "repaired": append([]string{}, changed...)})
			}
			if len(changed) == 0 {
				fmt.Fprintf(g.Stdout, "volume %s: nothing to repair\n", args[0])
				return nil
			}
			fmt.Fprintf(g.Stdout, "volume %s: repaired %s\n", args[0], strings.Join(changed, ", "))
			return nil
		},
	}
}

// tuneFlags are the raw flags of `volume tune`, turned into a tuning by
// tuning.
type tuneFlags struct {
	high, low        int
	jobs, autocommit uint64
	readFirstHold    uint64
	reset            bool
}

// tuning returns the tuning the flags make of the volume's current one
// (cur, nil for node defaults): the knobs given on the command line
// (changed reports which) replace the current values, the others are
// kept, as `policy set` does; --reset returns nil (node defaults). The
// result is checked like the engine will.
func (o tuneFlags) tuning(changed func(flag string) bool, cur *pool.Tuning) (*pool.Tuning, error) {
	if err := o.check(changed); err != nil || o.reset {
		return nil, err
	}
	t, named := &pool.Tuning{}, o.named(changed)
	if cur != nil {
		c := *cur
		t = &c
	}
	if named.HighWatermark != nil {
		t.HighWatermark = named.HighWatermark
	}
	if named.LowWatermark != nil {
		t.LowWatermark = named.LowWatermark
	}
	if named.WritebackJobs != nil {
		t.WritebackJobs = named.WritebackJobs
	}
	if named.AutocommitTimeMs != nil {
		t.AutocommitTimeMs = named.AutocommitTimeMs
	}
	if named.ReadFirstMaxHoldMs != nil {
		t.ReadFirstMaxHoldMs = named.ReadFirstMaxHoldMs
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return t, nil
}

// named returns the knobs given on the command line, and only those.
func (o tuneFlags) named(changed func(flag string) bool) *pool.Tuning {
	t := &pool.Tuning{}
	if changed("high-watermark") {
		t.HighWatermark = &o.high
	}
	if changed("low-watermark") {
		t.LowWatermark = &o.low
	}
	if changed("writeback-jobs") {
		t.WritebackJobs = &o.jobs
	}
	if changed("autocommit-ms") {
		t.AutocommitTimeMs = &o.autocommit
	}
	if changed("readfirst-max-hold") {
		t.ReadFirstMaxHoldMs = &o.readFirstHold
	}
	return t
}

// check checks the flags on their own, before the current tuning is
// known: something to set, each value in its range. The watermarks'
// order is checked against the current tuning later.
func (o tuneFlags) check(changed func(flag string) bool) error {
	if o.reset {
		return nil
	}
	t := o.named(changed)
	if t.Empty() {
		return fmt.Errorf("nothing to set: give --high-watermark, --low-watermark, --writeback-jobs, --autocommit-ms, --readfirst-max-hold or --reset")
	}
	for _, w := range []*int{t.HighWatermark, t.LowWatermark} {
		if w != nil && (*w < 0 || *w > 100) {
			return fmt.Errorf("watermark %d%%: want 0 to 100", *w)
		}
	}
	ranges := *t
	ranges.HighWatermark, ranges.LowWatermark = nil, nil
	return ranges.Validate()
}

func newVolumeTuneCmd(g *Globals) *cobra.Command {
	var o tuneFlags
	cmd := &cobra.Command{
		Use:   "tune NAME [--high-watermark N] [--low-watermark N] [--writeback-jobs N] [--autocommit-ms N] [--readfirst-max-hold N] | --reset",
		Short: "Set a volume's write-cache watermarks, write-back concurrency, autocommit time and read-first hold, live",
		Long: `Set dm-writecache's knobs for one volume: write-back starts when the cache is
--high-watermark percent full and stops at --low-watermark; --writeback-jobs
bounds the blocks written back at once. Each call changes the knobs it names
and keeps the others, like 'policy set'; --reset returns every knob to the
node defaults.

The default watermarks are 50 and 10: the kernel's high one, and a low one
under the kernel's 45, so an idle cache writes back most of what it holds
while the HDDs have nothing else to do, and the next burst or bulk load
finds it nearly empty. A higher low watermark keeps more of the newest
writes in the cache (dm-writecache frees a block once written back, so only
dirty blocks serve reads) at the cost of room for the next burst.

Without --writeback-jobs a volume gets a bound derived from its origin
array: 8 I/Os in flight per disk, divided by the disk I/Os one block costs
(2 copies on RAID10): 16 for a 4-disk RAID10, 48 for 12 disks. A hardware
RAID LUN hides its disks and gets the value for 4; set its own here. 'volume
show' prints the bound in force and why. A higher value writes back faster
only until every disk is busy; past that, each block queued ahead of a read
adds a disk's service time to it (the kernel's default, tens of thousands,
makes reads wait minutes once the cache is full).

--autocommit-ms is how often dm-writecache commits its metadata on its own
(kernel default 1000 ms; 1 to 60000). Every acknowledged write is durable
whatever this says (fuaflush commits before a FUA write completes, and an
fsync commits at once); a volume created with --allow-fua-window has no
fuaflush, and there this is the longest a FUA write (O_DSYNC on ext4 and
XFS, a journal's commit blocks) stays acknowledged but not durable. The
cost of a shorter time is more metadata writes to the SSD.

--readfirst-max-hold is the longest dm-readfirst, under the write tier,
holds one write-back I/O while reads wait on the HDDs (default 1000 ms;
0 to 60000). Write-back goes as soon as reads pause for 50 ms, so an idle
volume drains at full speed, while reads that miss the cache do not queue
behind it. 0 takes the layer out of the stack: write-back then competes
with reads for the disks, which after a write burst larger than the cache
makes reads slower than without any cache.

The change is recorded on disk (boot assembly keeps it) and applied by
reloading the writecache table in place: no drain, no dirty block lost.
Works on this node's devices; in a cluster the daemon sets these from the
volume's policy ('tidectl policy set'), which would undo a local tune.`,
		Example: `  tidectl volume tune mysql --high-watermark 40 --low-watermark 30
  tidectl volume tune mysql --autocommit-ms 100
  tidectl volume tune mysql --readfirst-max-hold 250
  tidectl volume tune mysql --reset`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: g.completeVolumes,
		RunE: func(cmd *cobra.Command, args []string) error {
			// Check the flags alone before any device is opened.
			if err := o.check(cmd.Flags().Changed); err != nil {
				return usageError{err}
			}
			b, err := g.local("volume tune", "in a cluster a volume's tuning comes from its policy, which would undo a local tune: use `tidectl policy set`")
			if err != nil {
				return err
			}
			defer b.Close()
			var applied *pool.Tuning
			changed, err := b.Tune(cmd.Context(), args[0], func(cur *pool.Tuning) (*pool.Tuning, error) {
				t, err := o.tuning(cmd.Flags().Changed, cur)
				applied = t
				return t, err
			})
			if err != nil {
				return err
			}
			if g.JSON() {
				return g.Print(map[string]any{"volume": args[0], "changed": changed, "tuning": applied})
			}
			if !changed {
				fmt.Fprintf(g.Stdout, "volume %s: tuning unchanged (%s)\n", args[0], formatTuning(applied))
				return nil
			}
			fmt.Fprintf(g.Stdout, "volume %s: tuning applied: %s\n", args[0], formatTuning(applied))
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.high, "high-watermark", pool.DefaultHighWatermark, "percent of the write cache in use at which write-back starts")
	f.IntVar(&o.low, "low-watermark", pool.DefaultLowWatermark, "percent at which write-back stops")
	f.Uint64Var(&o.jobs, "writeback-jobs", 0, "blocks written back at once, at most (default: derived from the origin array; see above)")
	f.Uint64Var(&o.autocommit, "autocommit-ms", 1000, "milliseconds between dm-writecache's own metadata commits (1-60000)")
	f.Uint64Var(&o.readFirstHold, "readfirst-max-hold", 1000, "milliseconds write-back may be held while reads wait on the HDDs (0-60000; 0: no read-first layer)")
	f.BoolVar(&o.reset, "reset", false, "return every knob to the node defaults")
	for _, knob := range []string{"high-watermark", "low-watermark", "writeback-jobs", "autocommit-ms", "readfirst-max-hold"} {
		cmd.MarkFlagsMutuallyExclusive("reset", knob)
	}
	return cmd
}

func newVolumeAdoptCmd(g *Globals) *cobra.Command {
	var poolName, device, shared, node string
	var cf createFlags
	cf.adopt = true
	cmd := &cobra.Command{
		Use:   "adopt NAME --device DEV --write-cache SIZE [--read-cache SIZE] [--pool POOL]",
		Short: "Put a cache in front of a device that already holds data",
		Long: `Adopt a device that already holds a filesystem or a database (an md array,
a partition, a LUN): its data stays where it is, and /dev/mapper/tc-NAME
shows it through the pool's SSD caches. Nothing is written to the device
itself but through the cache; the layout lives on the pool's SSDs only,
and names the device by what identifies it across reboots (md array UUID,
WWN or serial of a disk, GPT partition UUID). At boot 'tidecached
assemble' finds it by those, checks its size, and refuses it rather than
guess when they do not match.

The device must not be in use. For a database on /srv/db (from /dev/md0):

  systemctl stop mariadb
  umount /srv/db
  tidectl volume adopt db --device /dev/md0 --write-cache 40G --read-cache 80G
  mount /dev/mapper/tc-db /srv/db
  # in /etc/fstab, replace the old source of /srv/db (UUID=..., /dev/md0)
  # with /dev/mapper/tc-db, and keep the other fields
  systemctl start mariadb

From then on, mount the volume, never the device: with a write cache in
writeback the device alone may lack acknowledged writes until they are
written back. 'tidectl volume detach NAME' writes the cache back and gives
the device back exactly as a plain device again.

The pool may be one of SSDs alone ('pool create NAME --ssd DEV').
--protect local mirrors the write cache on two SSDs of the pool (the
default when it has two with room).

A device of one node is adopted on that node, without --etcd-endpoints.
In cluster mode, --shared-origin NODE/EXPORT adopts a device another node
exports to every node ('tidecached run --export EXPORT=DEV' there, as a
SAN would): the volume starts on --node, its write cache mirrored to a
replica on a third node (--protect peer, the only protection it takes),
and it fails over: when its node is lost for the policy's failoverAfter
(30s), the leader fences that node (the exporting nodes cut it off) and
moves the volume to the replica's node, which runs it on the replica,
every acknowledged write included.`,
		Example: `  tidectl volume adopt db --device /dev/md0 --write-cache 40G --read-cache 80G
  tidectl volume adopt logs --device /dev/disk/by-partuuid/8e3f1a2b-0c1d-4e5f-9a8b-7c6d5e4f3a2b --write-cache 8G --pool fast
  tidectl --etcd-endpoints http://10.0.0.1:2389 volume adopt db --shared-origin san1/lun0 --node db1 --write-cache 40G`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req, err := cf.request(args[0])
			if err != nil {
				return usageError{err}
			}
			if shared != "" || node != "" || g.cl.replicaNode != "" {
				return adoptShared(cmd.Context(), g, req, shared, node, device, poolName)
			}
			if device == "" || !strings.HasPrefix(device, "/") {
				return usageErrorf("--device %q: give the absolute path of the device that holds the data, such as /dev/md0", device)
			}
			if req.Protect == pool.ProtectPeer {
				return usageErrorf("--protect peer needs --shared-origin (cluster mode), a device every node sees, so that the volume can run on its replica's node; a device of this node alone takes --protect local or none")
			}
			if poolName != "" {
				if err := pool.ValidateName("pool", poolName); err != nil {
					return usageError{fmt.Errorf("--pool: %w", err)}
				}
			}
			b, err := g.local("volume adopt", "run it on the node that has the device")
			if err != nil {
				return err
			}
			defer b.Close()
			info, err := b.e.AdoptVolume(cmd.Context(), engine.AdoptRequest{Pool: poolName, Device: device, Volume: req})
			if err != nil {
				return unknownPool(cmd.Context(), b.e, poolName, err)
			}
			v := localVolume(info, b.node)
			if v.WriteCacheBytes > 0 && v.Protection == string(pool.ProtectNone) {
				fmt.Fprintf(g.Stderr, "warning: volume %s: the write cache has one copy, on one SSD: if that SSD dies, writes not yet on %s are lost; --protect local mirrors it on a second SSD\n", v.Name, device)
			}
			if v.WriteCacheBytes > 0 && v.BlockSize < pool.DefaultBlockSize {
				fmt.Fprintf(g.Stderr, "note: volume %s: the write cache works in %d-byte blocks, the unit of the filesystem on %s (a larger block could not be mounted); dm-writecache keeps %d times as much metadata in RAM per GiB as at 4 KiB\n",
					v.Name, v.BlockSize, device, pool.DefaultBlockSize/v.BlockSize)
			}
			if !g.JSON() {
				fmt.Fprintf(g.Stderr, "volume %s: %s is now cached; mount %s, never %s itself, and change /etc/fstab to it\n", v.Name, device, v.Device, device)
			}
			return printVolume(g, v)
		},
	}
	f := cmd.Flags()
	f.StringVar(&device, "device", "", "the device that holds the data (md array, partition, LUN)")
	f.StringVar(&shared, "shared-origin", "", "cluster mode: NODE/EXPORT, a device node NODE exports to every node (tidecached run --export); the volume fails over to its replica's node")
	f.StringVar(&node, "node", "", "cluster mode, with --shared-origin: the node the volume starts on")
	f.StringVar(&g.cl.replicaNode, "replica-node", "", "cluster mode, with --shared-origin: node to keep the replica on, where the volume fails over to (default: the leader places it)")
	f.StringVar(&poolName, "pool", "", "pool whose SSDs cache it (default: the only pool on the node)")
	f.StringVar(&cf.writeCache, "write-cache", "0", "write-back cache size on SSD (dm-writecache); 0 for none")
	f.StringVar(&cf.readCache, "read-cache", "0", "read cache size on SSD (dm-cache smq); 0 for none")
	f.StringVar(&cf.readBlockSize, "read-block-size", "", "read cache block size, a power of two from 32K to 1M (default 256K); needs --read-cache")
	f.StringVar(&cf.mode, "mode", string(pool.ModeWriteback), "initial mode: writeback, writethrough or passthrough")
	f.Uint32Var(&cf.blockSize, "block-size", 0, "write-cache block size in bytes (512-4096, power of two); default: the unit of the filesystem on the device (an ext4 block, an XFS sector), at most 4096, which it must not exceed")
	f.StringVar(&cf.protect, "protect", "", "copies of the write cache: local (two SSDs of the pool) or none; default local when the pool has two SSDs with room")
	_ = cmd.RegisterFlagCompletionFunc("pool", g.completePools)
	_ = cmd.RegisterFlagCompletionFunc("mode", completeModes)
	cmd.MarkFlagsMutuallyExclusive("device", "shared-origin")
	cmd.MarkFlagsOneRequired("device", "shared-origin")
	return cmd
}

// adoptShared writes the spec of a volume on a shared origin (cluster
// mode) and waits for its node to apply it.
func adoptShared(ctx context.Context, g *Globals, req pool.VolumeRequest, shared, node, device, poolName string) error {
	exporter, export, ok := strings.Cut(shared, "/")
	switch {
	case shared == "":
		return usageErrorf("--node and --replica-node go with --shared-origin (cluster mode); a device of this node is adopted with --device alone")
	case !ok || exporter == "" || export == "":
		return usageErrorf("--shared-origin %q: want NODE/EXPORT, the node exporting the device and the export's name (tidecached run --export EXPORT=DEV on that node)", shared)
	case node == "":
		return usageErrorf("--shared-origin needs --node: the node the volume starts on")
	case g.cl.replicaNode == node:
		return usageErrorf("--replica-node %s is the volume's own node: the replica, where it fails over to, must be on another", node)
	case node == exporter, g.cl.replicaNode == exporter:
		// Its daemon serves the export to the other nodes, never to
		// itself: the volume could neither start nor fail over there.
		return usageErrorf("node %s exports %s: the volume runs on, and keeps its replica on, nodes it is exported to (--node and --replica-node name others)", exporter, export)
	case req.WriteCache == 0:
		return usageErrorf("--shared-origin needs --write-cache: the volume fails over on the replica of its write cache")
	case req.Protect != "" && req.Protect != pool.ProtectPeer:
		return usageErrorf("--shared-origin mirrors the write cache to another node (--protect peer): --protect %s would leave nothing to fail over to", req.Protect)
	}
	if err := g.needCluster("volume adopt --shared-origin"); err != nil {
		return err
	}
	spec := api.VolumeSpec{
		Name: req.Name, Node: node, Pool: poolName, WriteCacheBytes: req.WriteCache, ReadCacheBytes: req.ReadCache,
		Mode: string(req.Mode), BlockSize: req.BlockSize, ReadBlockSize: req.ReadBlockSize, Protect: string(pool.ProtectPeer),
		SharedOrigin: &api.SharedOrigin{Node: exporter, Export: export}, ReplicaNode: g.cl.replicaNode,
	}
	if err := spec.Validate(); err != nil {
		return usageError{err}
	}
	st, err := g.store(ctx)
	if err != nil {
		return err
	}
	b := &clusterBackend{g: g, st: st}
	defer b.Close()
	if err := b.checkPlacement(ctx, node, poolName); err != nil {
		return err
	}
	meta, err := st.CreateVolumeSpec(ctx, spec)
	if err != nil {
		return err
	}
	fmt.Fprintf(g.Stderr, "volume %s: spec written (revision %d): node %s adopts %s of node %s\n", spec.Name, meta.ModRevision, node, export, exporter)
	if err := b.waitApplied(ctx, spec.Name, meta.ModRevision, spec.Mode); err != nil {
		return err
	}
	v, err := b.Volume(ctx, spec.Name)
	if err != nil {
		return err
	}
	return printVolume(g, v)
}

func newVolumeDetachCmd(g *Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "detach NAME",
		Short: "Write an adopted device's cache back and give the device back",
		Long: `Detach an adopted volume: drain it to passthrough (every dirty block written
back to the device, with progress), remove its device-mapper devices and
free its SSD slices. The device is then a plain device again, holding all
of its data; mount it (and put it back in /etc/fstab) in place of
/dev/mapper/tc-NAME.

The volume must not be open: unmount it first. A volume carved from its
pool's origin has no device to give back: 'tidectl volume delete' is for
those.`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: g.completeVolumes,
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := g.local("volume detach", "run it on the node that holds the volume")
			if err != nil {
				return err
			}
			defer b.Close()
			info, err := b.info(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			pp := newProgressPrinter(g.Stderr)
			err = b.e.DetachVolume(cmd.Context(), args[0], pp.print)
			pp.end()
			if err != nil {
				return err
			}
			if g.JSON() {
				return g.Print(map[string]string{"detached": args[0], "device": info.AdoptedDevice})
			}
			fmt.Fprintf(g.Stdout, "volume %s detached: %s is a plain device again; mount it in place of %s\n", args[0], info.AdoptedDevice, info.Device)
			return nil
		},
	}
}

func newVolumeUncacheCmd(g *Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "uncache NAME",
		Short: "Keep a volume and drop its caches, freeing their SSD slices",
		Long: `Uncache a volume: drain it to passthrough (every dirty block written back to
the HDDs, with progress; the write cache proven clean while the device is
briefly suspended), then free its write-cache slice, its mirror and its
read-cache slices in the pool. The volume keeps its data and its device,
/dev/mapper/tc-NAME, which stays mounted throughout; it runs in passthrough
from then on and cannot be switched to writeback or writethrough again.

Running it again after an interruption finishes the job; on a volume
without caches it does nothing. An adopted volume is detached instead
('tidectl volume detach'), which gives its device back. A volume whose
write cache is mirrored on a peer node is refused.`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: g.completeVolumes,
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := g.local("volume uncache", "run it on the node that holds the volume")
			if err != nil {
				return err
			}
			defer b.Close()
			before, err := b.info(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			pp := newProgressPrinter(g.Stderr)
			err = b.e.UncacheVolume(cmd.Context(), args[0], pp.print)
			pp.end()
			if err != nil {
				return err
			}
			if g.JSON() {
				return g.Print(map[string]any{"uncached": args[0], "device": before.Device,
					"freed_write_cache_bytes": before.WriteCacheBytes, "freed_read_cache_bytes": before.ReadCacheBytes})
			}
			if before.WriteCacheBytes == 0 && before.ReadCacheBytes == 0 {
				fmt.Fprintf(g.Stdout, "volume %s has no cache: nothing to do\n", args[0])
				return nil
			}
			fmt.Fprintf(g.Stdout, "volume %s uncached: %s runs on its HDD extent alone; its cache slices are free in the pool\n", args[0], before.Device)
			return nil
		},
	}
}

func newVolumeResizeCmd(g *Globals) *cobra.Command {
	var sizeArg string
	cmd := &cobra.Command{
		Use:   "resize NAME --size SIZE",
		Short: "Grow a volume, live",
		Long: `Grow a volume to SIZE. Its data on the HDD array never moves: its last
extent there grows when the space right after it is free; otherwise the
volume gets a further extent wherever the array has room (one that holds
all of the growth when there is one, else the largest free ones), mapped
after the others as one more line of its dm-linear table. A volume has at
most 64 extents. The new size is recorded, then each device of the volume
is reloaded with it; the device stays mounted, I/O goes on, and its caches
keep their contents. Shrinking is refused.

In cluster mode the spec's size is written and the volume's node grows it;
--wait follows it until the node reports the new size.

Grow the filesystem yourself afterwards, online: 'resize2fs
/dev/mapper/tc-NAME' for ext4, 'xfs_growfs MOUNTPOINT' for XFS. An
adopted volume is grown by growing its device, then detaching and adopting
it again.`,
		Example:           `  tidectl volume resize mysql --size 800G && resize2fs /dev/mapper/tc-mysql`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: g.completeVolumes,
		RunE: func(cmd *cobra.Command, args []string) error {
			size, err := parseSize("size", sizeArg, false)
			if err != nil {
				return usageError{err}
			}
			b, err := g.backend(cmd.Context())
			if err != nil {
				return err
			}
			defer b.Close()
			v, err := b.Resize(cmd.Context(), args[0], size)
			if err != nil {
				return err
			}
			if g.JSON() {
				return g.Print(v)
			}
			if g.cluster() && !g.cl.wait {
				fmt.Fprintf(g.Stdout, "volume %s: size %s written; add --wait to follow its node growing it, then grow its filesystem there\n", v.Name, pool.FormatBytes(size))
				return nil
			}
			fmt.Fprintf(g.Stdout, "volume %s is now %s; grow its filesystem: resize2fs %s (ext4) or xfs_growfs <mount point> (XFS)\n",
				v.Name, pool.FormatBytes(v.SizeBytes), v.Device)
			return nil
		},
	}
	cmd.Flags().StringVar(&sizeArg, "size", "", "the new size, larger than the current one (e.g. 800G)")
	_ = cmd.MarkFlagRequired("size")
	return cmd
}
