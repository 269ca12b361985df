package cli

import (
	"fmt"
	"os"
	"strings"

	units "github.com/docker/go-units"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/tidecache/tidecache/pkg/engine"
	"github.com/tidecache/tidecache/pkg/pool"
	"github.com/tidecache/tidecache/pkg/store"
)

func newVolumeCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "volume",
		Aliases: []string{"vol"},
		Short:   "Create, inspect, switch, flush and delete cached volumes",
	}
	cmd.AddCommand(newVolumeCreateCmd(g), newVolumeListCmd(g), newVolumeShowCmd(g),
		newVolumeDeleteCmd(g), newVolumeSetModeCmd(g), newVolumeFlushCmd(g),
		newVolumeCheckCmd(g), newVolumeRepairCmd(g), newVolumeTuneCmd(g))
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

func newVolumeCreateCmd(g *globals) *cobra.Command {
	var poolName, sizeS, writeS, readS, modeS, node string
	var blockSize uint32
	cmd := &cobra.Command{
		Use:   "create NAME --size SIZE [--write-cache SIZE] [--read-cache SIZE]",
		Short: "Carve a cached volume out of a pool",
		Long: `Create a volume: an extent of the pool's origin, a write-cache slice on an
SSD (dm-writecache) and optionally a read-cache slice (dm-cache, smq,
writethrough). The volume appears as /dev/mapper/tc-NAME.

Names use only a-z, 0-9 and '-', at most 48 characters, unique on the node.
The new cache slices are zeroed and the layout is recorded on every pool
device before the volume goes live.`,
		Example: `  tidectl volume create mysql --size 500G --write-cache 40G --read-cache 80G
  tidectl volume create scratch --size 10G --write-cache 1G --mode writethrough`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := pool.VolumeRequest{Name: args[0], BlockSize: blockSize}
			if err := pool.ValidateName("volume", req.Name); err != nil {
				return err
			}
			var err error
			if req.Size, err = parseSize("size", sizeS, false); err != nil {
				return err
			}
			if req.WriteCache, err = parseSize("write-cache", writeS, true); err != nil {
				return err
			}
			if req.ReadCache, err = parseSize("read-cache", readS, true); err != nil {
				return err
			}
			if req.Mode, err = pool.ParseMode(modeS); err != nil {
				return err
			}
			if req.Mode == pool.ModeWriteback && req.WriteCache == 0 {
				return fmt.Errorf("mode writeback needs --write-cache")
			}
			if g.cluster() {
				return clusterCreate(cmd, g, store.VolumeSpec{
					Name: req.Name, Node: node, Pool: poolName, SizeBytes: req.Size,
					WriteCacheBytes: req.WriteCache, ReadCacheBytes: req.ReadCache,
					Mode: string(req.Mode), BlockSize: req.BlockSize,
				})
			}
			if node != "" {
				return fmt.Errorf("--node needs --etcd-endpoints (cluster mode)")
			}
			e, err := g.engine()
			if err != nil {
				return err
			}
			defer e.Close()
			info, err := e.CreateVolume(cmd.Context(), poolName, req)
			if err != nil {
				return err
			}
			return printVolume(g, info)
		},
	}
	f := cmd.Flags()
	f.StringVar(&poolName, "pool", "", "pool to carve from (default: the only pool on the node)")
	f.StringVar(&sizeS, "size", "", "volume size (e.g. 100G)")
	f.StringVar(&writeS, "write-cache", "0", "write-back cache size on SSD (dm-writecache); 0 for none")
	f.StringVar(&readS, "read-cache", "0", "read cache size on SSD (dm-cache smq); 0 for none")
	f.StringVar(&modeS, "mode", string(pool.ModeWriteback), "initial mode: writeback, writethrough or passthrough")
	f.Uint32Var(&blockSize, "block-size", 4096, "write-cache block size in bytes (512-4096, power of two)")
	f.StringVar(&node, "node", "", "cluster mode: node to create the volume on (default: the leader places it)")
	_ = cmd.MarkFlagRequired("size")
	return cmd
}

func newVolumeListCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List volumes with their mode, state and dirty data",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if g.cluster() {
				vols, err := clusterVolumes(cmd.Context(), g)
				if err != nil {
					return err
				}
				return printClusterVolumes(g, vols)
			}
			e, err := g.engine()
			if err != nil {
				return err
			}
			defer e.Close()
			vols, err := e.Volumes(cmd.Context())
			if err != nil {
				return err
			}
			if g.output == "json" {
				if vols == nil {
					vols = []engine.VolumeInfo{}
				}
				return printJSON(g.stdout, vols)
			}
			t := newTable(g.stdout, "NAME", "POOL", "SIZE", "MODE", "STATE", "DIRTY", "WRITE-CACHE", "READ-CACHE", "DEVICE")
			for _, v := range vols {
				dirty, used := "-", "-"
				if v.WriteCache != nil {
					dirty = size(v.WriteCache.DirtyBytes)
					used = fmt.Sprintf("%s (%.0f%% used)", size(v.WriteCacheBytes), v.WriteCache.UsedPercent)
				} else if v.WriteCacheBytes > 0 {
					used = size(v.WriteCacheBytes) + " (off)"
				}
				read := "-"
				if v.ReadCacheBytes > 0 {
					read = size(v.ReadCacheBytes)
				}
				t.row(v.Name, v.Pool, size(v.SizeBytes), string(v.Mode), v.State, dirty, used, read, v.Device)
			}
			return t.flush()
		},
	}
}

func newVolumeShowCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "show NAME",
		Short: "Show a volume: layout, kernel state, hit ratios, dirty blocks",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if g.cluster() {
				return showClusterVolume(cmd.Context(), g, args[0])
			}
			e, err := g.engine()
			if err != nil {
				return err
			}
			defer e.Close()
			info, err := e.Volume(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return printVolume(g, info)
		},
	}
}

func printVolume(g *globals, v engine.VolumeInfo) error {
	if g.output == "json" {
		return printJSON(g.stdout, v)
	}
	w := g.stdout
	fmt.Fprintf(w, "Volume:       %s (uuid %s)\n", v.Name, v.UUID)
	fmt.Fprintf(w, "Pool:         %s\n", v.Pool)
	fmt.Fprintf(w, "Device:       %s\n", v.Device)
	fmt.Fprintf(w, "Size:         %s\n", size(v.SizeBytes))
	fmt.Fprintf(w, "Mode:         %s\n", v.Mode)
	fmt.Fprintf(w, "State:        %s\n", v.State)
	if v.Error != "" {
		fmt.Fprintf(w, "Error:        %s\n", v.Error)
	}
	fmt.Fprintf(w, "Write cache:  %s, block size %d\n", size(v.WriteCacheBytes), v.BlockSize)
	if wc := v.WriteCache; wc != nil {
		fmt.Fprintf(w, "  dirty:      %d blocks (%s), %.1f%% of cache, %d under writeback\n", wc.DirtyBlocks, size(wc.DirtyBytes), wc.UsedPercent, wc.WritebackBlocks)
		fmt.Fprintf(w, "  reads:      %d, hits %d (%s)\n", wc.Reads, wc.ReadHits, percent(wc.ReadHitRatio))
		fmt.Fprintf(w, "  writes:     %d, hits %d (%s), bypassed %d, blocked on free space %d\n", wc.Writes, wc.WriteHitsCommitted+wc.WriteHitsUncommitted, percent(wc.WriteHitRatio), wc.WritesAround, wc.WritesBlocked)
		fmt.Fprintf(w, "  flushes:    %d, discards %d, error %d\n", wc.Flushes, wc.Discards, wc.Error)
	}
	if v.ReadCacheBytes > 0 {
		fmt.Fprintf(w, "Read cache:   %s\n", size(v.ReadCacheBytes))
	}
	if rc := v.ReadCache; rc != nil {
		fmt.Fprintf(w, "  used:       %d/%d blocks of %s\n", rc.Used, rc.Total, size(rc.BlockSize*512))
		fmt.Fprintf(w, "  reads:      hits %d, misses %d (%s hit)\n", rc.ReadHits, rc.ReadMisses, percent(rc.ReadHitRatio))
		fmt.Fprintf(w, "  writes:     hits %d, misses %d; promotions %d, demotions %d, dirty %d\n", rc.WriteHits, rc.WriteMisses, rc.Promotions, rc.Demotions, rc.Dirty)
	}
	return nil
}

func newVolumeDeleteCmd(g *globals) *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a volume and free its extents",
		Long: `Delete a volume: remove its device-mapper devices and free its origin extent
and SSD slices. The volume must not be open (unmount it first).

A volume whose write cache still holds dirty blocks (writes acknowledged
but not yet on the HDDs) is refused: run 'tidectl volume flush NAME' first.
--force deletes anyway and discards those blocks.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if g.cluster() {
				if force {
					return fmt.Errorf("--force is not available in cluster mode: the owning node deletes the volume only once its cache is clean")
				}
				return clusterDelete(cmd, g, args[0])
			}
			e, err := g.engine()
			if err != nil {
				return err
			}
			defer e.Close()
			if err := e.DeleteVolume(cmd.Context(), args[0], force); err != nil {
				return err
			}
			if force {
				fmt.Fprintf(g.stderr, "warning: volume %s deleted with --force; any dirty cache blocks were discarded\n", args[0])
			}
			if g.output == "json" {
				return printJSON(g.stdout, map[string]string{"deleted": args[0]})
			}
			fmt.Fprintf(g.stdout, "volume %s deleted\n", args[0])
			return nil
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "delete even if the write cache holds dirty blocks (they are lost)")
	return cmd
}

func newVolumeSetModeCmd(g *globals) *cobra.Command {
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
the same stack.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			mode, err := pool.ParseMode(args[1])
			if err != nil {
				return err
			}
			if g.cluster() {
				return clusterSetMode(cmd, g, args[0], mode)
			}
			e, err := g.engine()
			if err != nil {
				return err
			}
			defer e.Close()
			pp := &progressPrinter{w: g.stderr, tty: isTerminal(g.stderr)}
			err = e.SetMode(cmd.Context(), args[0], mode, pp.print)
			pp.end()
			if err != nil {
				return err
			}
			info, err := e.Volume(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if g.output == "json" {
				return printJSON(g.stdout, info)
			}
			fmt.Fprintf(g.stdout, "volume %s is now %s (%s)\n", info.Name, info.Mode, info.State)
			return nil
		},
	}
}

func newVolumeFlushCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "flush NAME",
		Short: "Write every dirty cache block back to the HDDs and wait",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			e, err := g.engine()
			if err != nil {
				return err
			}
			defer e.Close()
			pp := &progressPrinter{w: g.stderr, tty: isTerminal(g.stderr)}
			left, err := e.Flush(cmd.Context(), args[0], pp.print)
			pp.end()
			if err != nil {
				return err
			}
			if g.output == "json" {
				return printJSON(g.stdout, map[string]any{"volume": args[0], "dirty_blocks": left})
			}
			fmt.Fprintf(g.stdout, "volume %s flushed: %d dirty blocks left\n", args[0], left)
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
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

func newVolumeCheckCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "check NAME",
		Short: "Compare a volume's live device-mapper tables with its recorded layout",
		Long: `Compare every device of a volume with the stack its layout describes and
report each difference (a table changed by hand, a missing device). Changes
nothing; exits non-zero when the volume has drifted. 'volume repair' fixes it.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			e, err := g.engine()
			if err != nil {
				return err
			}
			defer e.Close()
			if err := e.CheckVolume(cmd.Context(), args[0]); err != nil {
				return fmt.Errorf("volume %s has drifted:\n%w", args[0], err)
			}
			fmt.Fprintf(g.stdout, "volume %s matches its layout\n", args[0])
			return nil
		},
	}
}

func newVolumeRepairCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "repair NAME",
		Short: "Bring a volume's devices back to its recorded layout",
		Long: `Create missing devices of a volume and reload every device whose table
differs from the layout (suspend, load, resume). A write tier is only ever
reloaded as a write tier, so its dirty blocks stay reachable.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			e, err := g.engine()
			if err != nil {
				return err
			}
			defer e.Close()
			changed, err := e.RepairVolume(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if len(changed) == 0 {
				fmt.Fprintf(g.stdout, "volume %s: nothing to repair\n", args[0])
				return nil
			}
			fmt.Fprintf(g.stdout, "volume %s: repaired %s\n", args[0], strings.Join(changed, ", "))
			return nil
		},
	}
}

func newVolumeTuneCmd(g *globals) *cobra.Command {
	var high, low int
	var jobs uint64
	var reset bool
	cmd := &cobra.Command{
		Use:   "tune NAME [--high-watermark N] [--low-watermark N] [--writeback-jobs N] | --reset",
		Short: "Set a volume's write-cache watermarks and write-back concurrency, live",
		Long: `Set dm-writecache's knobs for one volume: write-back starts when the cache is
--high-watermark percent full and stops at --low-watermark; --writeback-jobs
bounds the blocks written back at once (lower values leave the HDDs more
room for reads). --reset returns to the node defaults.

The change is recorded on disk (boot assembly keeps it) and applied by
reloading the writecache table in place: no drain, no dirty block lost.
In cluster mode the daemon sets these from the volume's policy.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f := cmd.Flags()
			var t *pool.Tuning
			if !reset {
				t = &pool.Tuning{}
				if f.Changed("high-watermark") {
					t.HighWatermark = &high
				}
				if f.Changed("low-watermark") {
					t.LowWatermark = &low
				}
				if f.Changed("writeback-jobs") {
					t.WritebackJobs = &jobs
				}
				if t.Empty() {
					return fmt.Errorf("nothing to set: give --high-watermark, --low-watermark, --writeback-jobs or --reset")
				}
				if err := t.Validate(); err != nil {
					return err
				}
			}
			e, err := g.engine()
			if err != nil {
				return err
			}
			defer e.Close()
			changed, err := e.SetTuning(cmd.Context(), args[0], t)
			if err != nil {
				return err
			}
			if !changed {
				fmt.Fprintf(g.stdout, "volume %s: tuning unchanged\n", args[0])
				return nil
			}
			fmt.Fprintf(g.stdout, "volume %s: tuning applied\n", args[0])
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&high, "high-watermark", 50, "percent of the write cache in use at which write-back starts")
	f.IntVar(&low, "low-watermark", 45, "percent at which write-back stops")
	f.Uint64Var(&jobs, "writeback-jobs", 0, "blocks written back at once, at most")
	f.BoolVar(&reset, "reset", false, "return to the node defaults")
	cmd.MarkFlagsMutuallyExclusive("reset", "high-watermark")
	cmd.MarkFlagsMutuallyExclusive("reset", "low-watermark")
	cmd.MarkFlagsMutuallyExclusive("reset", "writeback-jobs")
	return cmd
}
