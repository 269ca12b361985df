// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tidecache/tidecache/pkg/engine"
	"github.com/tidecache/tidecache/pkg/mdraid"
	"github.com/tidecache/tidecache/pkg/pool"
)

func newPoolCmd(g *Globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "pool",
		Short: "Create and inspect pools (an HDD array plus SSDs)",
	}
	cmd.AddCommand(newPoolCreateCmd(g), newPoolShowCmd(g), newPoolDeleteCmd(g), newPoolForceStartCmd(g), newPoolAddSSDCmd(g), newPoolRemoveSSDCmd(g), newPoolReplaceSSDCmd(g))
	return cmd
}

func newPoolDeleteCmd(g *Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a pool that holds no volume",
		Long: `Delete a pool: remove tidecache's superblock from each of its SSDs, then
from its origin. An md RAID10 that 'pool create --raid10' built is stopped
and its disks' md superblocks erased; an origin given with --origin is left
as it is but for tidecache's superblock. The devices are then free for
other use, a new pool included.

A pool with volumes is refused: delete them first ('tidectl volume
delete', which itself refuses a volume with dirty cache blocks). A pool
whose devices are open, mounted or held is refused too. If the command is
cut short, run it again: a pool with some superblocks already wiped is
found from the others and its deletion finished. An SSD of the pool that
is not present keeps its superblock; 'pool create --destroy-pool NAME'
takes it later. Works on this node's devices.`,
		Example:           `  tidectl pool delete old`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: g.completePools,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := pool.ValidateName("pool", args[0]); err != nil {
				return usageError{err}
			}
			if err := g.nodeOnly("pool delete", "run it on the node that holds the pool"); err != nil {
				return err
			}
			if err := g.confirm("delete pool " + args[0] + " (its superblocks, and the RAID10 'pool create --raid10' built)?"); err != nil {
				return err
			}
			e, err := g.Engine()
			if err != nil {
				return err
			}
			defer e.Close()
			rep, err := e.DeletePool(cmd.Context(), args[0])
			if err != nil {
				return unknownPool(cmd.Context(), e, args[0], err)
			}
			if g.JSON() {
				return g.Print(rep)
			}
			fmt.Fprintf(g.Stdout, "pool %s deleted: superblocks wiped on %s\n", rep.Pool, strings.Join(rep.Wiped, ", "))
			if rep.StoppedArray != "" {
				fmt.Fprintf(g.Stdout, "RAID10 %s stopped and its disks %s made plain disks again\n", rep.StoppedArray, strings.Join(rep.ArrayDisks, ", "))
			}
			for _, m := range rep.MissingMembers {
				fmt.Fprintf(g.Stderr, "warning: SSD %s of the pool is not present and keeps its superblock; pool create --destroy-pool %s takes it later\n", m, rep.Pool)
			}
			return nil
		},
	}
}

func newPoolForceStartCmd(g *Globals) *cobra.Command {
	var acceptLoss []string
	cmd := &cobra.Command{
		Use:   "force-start NAME [--accept-data-loss VOLUME]...",
		Short: "Start a pool without its missing SSDs (dead or gone for good)",
		Long: `Start a pool that 'tidecached assemble' refuses because an SSD is missing,
when that SSD is dead or gone for good (find it first: see the runbook, "A
pool is REFUSED"). The pool's layout is changed to do without it, written
to the SSDs that are present and to the origin, and the pool assembled:

  - a volume in passthrough or writethrough had nothing dirty on the SSD:
    its tiers there are dropped and it comes up on the origin (passthrough
    if it has no write cache left);
  - a volume whose write cache is mirrored keeps it: the mirror runs on its
    surviving leg, which holds every acknowledged write;
  - a volume in writeback whose only write cache was on the missing SSD has
    lost the writes that were not yet on the HDDs. It is refused unless
    named with --accept-data-loss, and then comes up in passthrough with
    the loss recorded in its layout ('volume show' says so). Check its
    filesystem or database before use.

Refused while a volume of the pool runs. Works on this node's devices.`,
		Example: `  tidectl pool force-start fast
  tidectl pool force-start fast --accept-data-loss db`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: g.completePools,
		RunE: func(cmd *cobra.Command, args []string) error {
			q := "start pool " + args[0] + " without its missing SSDs, giving them up for good?"
			if len(acceptLoss) > 0 {
				q = "start pool " + args[0] + " without its missing SSDs, and " + strings.Join(acceptLoss, ", ") + " without the writes their lost write cache held?"
			}
			if err := g.confirm(q); err != nil {
				return err
			}
			e, err := g.poolEngine("pool force-start", args[0])
			if err != nil {
				return err
			}
			defer e.Close()
			rep, err := e.ForceStartPool(cmd.Context(), args[0], acceptLoss)
			err = unknownPool(cmd.Context(), e, args[0], err)
			err = unknownAcceptedVolume(cmd.Context(), e, args[0], acceptLoss, err)
			if g.JSON() && rep.Generation != 0 {
				if perr := g.Print(rep); perr != nil {
					return perr
				}
				return err
			}
			if rep.Generation != 0 {
				for _, m := range rep.GivenUp {
					fmt.Fprintf(g.Stdout, "SSD %s (last seen at %s) given up\n", m.UUID, m.Path)
				}
				for _, v := range rep.Volumes {
					fmt.Fprintf(g.Stdout, "volume %s: %s dropped, %s -> %s\n", v.Name, strings.Join(v.Dropped, " and "), v.ModeBefore, v.Mode)
					if v.DataLoss {
						fmt.Fprintf(g.Stderr, "warning: volume %s lost the writes its write cache held; check its filesystem or database before use\n", v.Name)
					}
				}
				for _, v := range rep.Assembly.Volumes {
					state := v.Device
					if v.Error != "" {
						state = "NOT STARTED: " + v.Error
					}
					fmt.Fprintf(g.Stdout, "  %-20s %-12s %s\n", v.Name, v.Mode, state)
				}
			}
			return err
		},
	}
	cmd.Flags().StringArrayVar(&acceptLoss, "accept-data-loss", nil, "start this writeback volume although the writes its lost write cache held are gone (repeat for several)")
	return cmd
}

// poolReader reads one pool on this node's devices (*engine.Engine).
type poolReader interface {
	Pool(ctx context.Context, name string) (engine.PoolInfo, error)
}

// unknownAcceptedVolume adds to err, when it says that a volume
// --accept-data-loss names is not in the pool, the pool's volumes closest
// to the first such name; any other err is returned as it is.
func unknownAcceptedVolume(ctx context.Context, e poolReader, poolName string, acceptLoss []string, err error) error {
	if !errors.Is(err, pool.ErrVolumeNotFound) {
		return err
	}
	p, perr := e.Pool(ctx, poolName)
	if perr != nil {
		return err
	}
	for _, name := range acceptLoss {
		if !slices.Contains(p.Volumes, name) {
			return didYouMean(err, name, p.Volumes)
		}
	}
	return err
}

func newPoolAddSSDCmd(g *Globals) *cobra.Command {
	var req engine.AddSSDRequest
	cmd := &cobra.Command{
		Use:   "add-ssd NAME --ssd DEV",
		Short: "Add an SSD to a pool",
		Long: `Add an SSD to a pool: its space becomes free for the caches of new volumes.
The device is checked as 'pool create' checks its SSDs: it must be unused
(not mounted, held or open), carry no filesystem, RAID or partition
signature unless --force, and belong to no other tidecache pool unless
--destroy-pool names that pool.

The new SSD gets the pool's layout first, then the other SSDs and the
origin: after a power cut in between, assembly finishes the job, and so
does running the command again (an SSD that is already a member is left
as it is). A pool with a missing SSD is refused: bring it back, or
'tidectl pool force-start' without it, first. Works on this node's
devices.`,
		Example:           `  tidectl pool add-ssd fast --ssd /dev/nvme2n1`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: g.completePools,
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Pool = args[0]
			e, err := g.poolEngine("pool add-ssd", args[0])
			if err != nil {
				return err
			}
			defer e.Close()
			info, err := e.AddSSD(cmd.Context(), req)
			if err != nil {
				return unknownPool(cmd.Context(), e, args[0], err)
			}
			if g.JSON() {
				return g.Print(info)
			}
			fmt.Fprintf(g.Stdout, "pool %s: %s is a member (%d SSDs)\n", info.Name, req.Device, len(info.Members))
			return nil
		},
	}
	cmd.Flags().StringVar(&req.Device, "ssd", "", "the SSD to add (a whole disk or a partition)")
	cmd.Flags().BoolVar(&req.Force, "force", false, "overwrite a device that carries a filesystem, RAID or partition signature (its data is lost)")
	cmd.Flags().StringVar(&req.DestroyPool, "destroy-pool", "", "take the device although it belongs to this (other) tidecache pool, by name or UUID")
	_ = cmd.MarkFlagRequired("ssd")
	return cmd
}

func newPoolRemoveSSDCmd(g *Globals) *cobra.Command {
	var device string
	cmd := &cobra.Command{
		Use:   "remove-ssd NAME --ssd DEV",
		Short: "Move the caches off an SSD and take it out of a pool",
		Long: `Take an SSD out of a pool, for instance before replacing it ('pool add-ssd'
the new one first, then 'pool remove-ssd' the old one). Each volume with a
cache slice on it is moved, live and one at a time: drained to
passthrough (with progress), its slices given new places on the pool's
other SSDs, then back to its mode there; its device stays mounted. Then
the pool's layout drops the SSD and its superblock is wiped: it is a plain
device again.

A write cache mirrored on two SSDs (--protect local) gets both legs
placed anew on two other SSDs and resyncs: in a pool of two SSDs, use
'pool replace-ssd', which adds the new one first. Nothing changes unless
every volume fits on the other SSDs. Refused: a write cache mirrored on a
peer node with its local leg on the SSD, a replica kept there for a peer
node, the last SSD of a pool of SSDs alone, a pool with a missing SSD. After a power cut, run it again: it goes on where it stopped. Works
on this node's devices.`,
		Example:           `  tidectl pool remove-ssd fast --ssd /dev/nvme1n1`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: g.completePools,
		RunE: func(cmd *cobra.Command, args []string) error {
			e, err := g.poolEngine("pool remove-ssd", args[0])
			if err != nil {
				return err
			}
			defer e.Close()
			pp := newProgressPrinter(g.Stderr)
			info, err := e.RemoveSSD(cmd.Context(), args[0], device, pp.print)
			pp.end()
			if err != nil {
				return unknownPool(cmd.Context(), e, args[0], err)
			}
			if g.JSON() {
				return g.Print(info)
			}
			fmt.Fprintf(g.Stdout, "pool %s: %s removed (%d SSDs left); it is a plain device again\n", info.Name, device, len(info.Members))
			return nil
		},
	}
	cmd.Flags().StringVar(&device, "ssd", "", "the SSD to take out")
	_ = cmd.MarkFlagRequired("ssd")
	return cmd
}

func newPoolReplaceSSDCmd(g *Globals) *cobra.Command {
	var req engine.AddSSDRequest
	var old string
	cmd := &cobra.Command{
		Use:   "replace-ssd NAME --old DEV --new DEV",
		Short: "Put a new SSD in a pool in place of an old one",
		Long: `Replace an SSD of a pool: 'pool add-ssd NAME --ssd NEW', then 'pool
remove-ssd NAME --ssd OLD', which moves every cache slice off the old SSD
(live, volume by volume, with progress) before it leaves the pool. The old
SSD must still work: for one that died, see 'pool force-start'. After an
interruption, run it again: both steps go on where they stopped. The new
SSD is checked as 'pool add-ssd' checks it (--force, --destroy-pool).`,
		Example:           `  tidectl pool replace-ssd fast --old /dev/nvme1n1 --new /dev/nvme3n1`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: g.completePools,
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Pool = args[0]
			e, err := g.poolEngine("pool replace-ssd", args[0])
			if err != nil {
				return err
			}
			defer e.Close()
			if _, err := e.AddSSD(cmd.Context(), req); err != nil {
				return unknownPool(cmd.Context(), e, args[0], err)
			}
			fmt.Fprintf(g.Stderr, "pool %s: %s added; moving the caches off %s\n", req.Pool, req.Device, old)
			pp := newProgressPrinter(g.Stderr)
			info, err := e.RemoveSSD(cmd.Context(), req.Pool, old, pp.print)
			pp.end()
			if err != nil {
				return err
			}
			if g.JSON() {
				return g.Print(info)
			}
			fmt.Fprintf(g.Stdout, "pool %s: %s replaced by %s; %s is a plain device again\n", info.Name, old, req.Device, old)
			return nil
		},
	}
	cmd.Flags().StringVar(&old, "old", "", "the SSD to take out")
	cmd.Flags().StringVar(&req.Device, "new", "", "the SSD to put in")
	cmd.Flags().BoolVar(&req.Force, "force", false, "overwrite a new SSD that carries a filesystem, RAID or partition signature (its data is lost)")
	cmd.Flags().StringVar(&req.DestroyPool, "destroy-pool", "", "take the new SSD although it belongs to this (other) tidecache pool, by name or UUID")
	_ = cmd.MarkFlagRequired("old")
	_ = cmd.MarkFlagRequired("new")
	return cmd
}

func newPoolCreateCmd(g *Globals) *cobra.Command {
	var req engine.CreatePoolRequest
	cmd := &cobra.Command{
		Use:   "create NAME [--ssd DEV...] [--origin DEV | --raid10 DISK...]",
		Short: "Create a pool from SSDs and an HDD array (or either alone)",
		Long: `Create a pool: the SSDs hold cache slices, the origin holds the data.

The origin is either an existing array (hardware RAID LUN, md device) given
with --origin, or four or more disks given with --raid10 that tidecache
assembles into an md RAID10 (/dev/md/tc-<pool>). 'volume create' carves
new, empty volumes from it.

Without either, the pool is SSDs alone: it caches devices that already
hold data, where they are ('tidectl volume adopt'), and nothing else.

Without --ssd, the pool is its origin alone, for a node with no SSD: its
volumes have no cache on the node (create them with --mode passthrough),
and 'tidectl pool show --etcd-endpoints' lists it with the cluster's
cache pool.

Every device is checked first: it must be a block device (a regular file,
directory or character device is refused), not be mounted, used as swap,
held by md or dm, or open in another process (named by pid and command),
and carry no filesystem, RAID or partition-table signature. --force
overwrites such signatures (the data on them is lost); a device in use is
always refused.

A device that belongs to another tidecache pool (its superblock, even a
damaged one, or a disk of that pool's RAID10) is refused even with --force:
that pool's cache may hold the only copy of recent writes, also while the
pool is not assembled or was refused at boot. --destroy-pool NAME (or the
pool's UUID) takes the devices of that one pool, destroying it; for a
damaged superblock that names no pool, give the device's path instead.

Nothing is written before all checks pass, and every superblock write
opens its device exclusively (O_EXCL), so a device mounted or claimed in
the meantime is refused, not overwritten. A small superblock recording the
pool layout is written to the first 4 MiB of every SSD and of the origin
(never to an adopted device).`,
		Example: `  tidectl pool create fast --ssd /dev/nvme0n1 --origin /dev/md0
  tidectl pool create fast --ssd /dev/nvme0n1 --ssd /dev/nvme1n1 --raid10 /dev/sda /dev/sdb /dev/sdc /dev/sdd
  tidectl pool create fast --ssd /dev/nvme0n1 --origin /dev/md0 --destroy-pool old   # reuse pool old's devices
  tidectl pool create fast --ssd /dev/nvme0n1 --ssd /dev/nvme1n1   # SSDs only, to adopt devices that hold data
  tidectl pool create slow --raid10 /dev/sda /dev/sdb /dev/sdc /dev/sdd   # no SSD on this node`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Name = args[0]
			if err := validatePoolRequest(req); err != nil {
				return usageError{err}
			}
			if err := g.nodeOnly("pool create", "run it on the node whose disks it takes; its daemon then publishes the pool (`tidectl node list`)"); err != nil {
				return err
			}
			e, err := g.Engine()
			if err != nil {
				return err
			}
			defer e.Close()
			info, err := e.CreatePool(cmd.Context(), req)
			if err != nil {
				return err
			}
			return printPool(g, info)
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&req.SSDs, "ssd", nil, "SSD device to hold cache slices (repeatable)")
	f.StringVar(&req.Origin, "origin", "", "existing HDD array device to carve volumes from")
	f.StringSliceVar(&req.RAID10, "raid10", nil, "disks to assemble into an md RAID10 origin (comma-separated or repeated)")
	f.BoolVar(&req.Force, "force", false, "overwrite devices that carry filesystem, RAID or partition signatures (destroys their data; never another tidecache pool's devices)")
	f.StringVar(&req.DestroyPool, "destroy-pool", "", "take the devices of this other tidecache pool (name or UUID; a device path for a damaged superblock naming no pool), destroying that pool and any dirty data in its cache")
	f.BoolVar(&req.AssumeClean, "assume-clean", false, "skip the initial RAID10 resync (only for new, zeroed disks)")
	cmd.MarkFlagsMutuallyExclusive("origin", "raid10")
	return cmd
}

// validatePoolRequest checks what `pool create` can check without a
// device, so a typo is reported before anything is opened.
func validatePoolRequest(req engine.CreatePoolRequest) error {
	if err := pool.ValidateName("pool", req.Name); err != nil {
		return err
	}
	if len(req.SSDs) == 0 && req.Origin == "" && len(req.RAID10) == 0 {
		return fmt.Errorf("give --ssd for the cache slices, --origin or --raid10 for the data, or both")
	}
	if n := len(req.RAID10); n > 0 && (n%2 != 0 || n < 4) {
		return fmt.Errorf("--raid10 needs an even number of disks, at least 4 (got %d)", n)
	}
	for _, group := range [][]string{req.SSDs, req.RAID10, {req.Origin}} {
		for _, dev := range group {
			if dev != "" && !strings.HasPrefix(dev, "/") {
				return fmt.Errorf("device %q: give an absolute path such as /dev/nvme0n1", dev)
			}
		}
	}
	return nil
}

func newPoolShowCmd(g *Globals) *cobra.Command {
	return &cobra.Command{
		Use:     "show [NAME]",
		Aliases: []string{"list", "ls"},
		Short:   "Show pools found on this node's devices, or with --etcd-endpoints the cluster's cache pool",
		Long: `Show the pools found on this node's devices: their origin, SSDs, volumes
and free space.

With --etcd-endpoints, show the cluster's cache pool instead, from the live
nodes' records: each node's pools, their free HDD space, their SSDs, the
SSD space still free and the replica slices they keep of other nodes'
write caches, and the totals. A volume protected by a peer (--protect
peer) takes its write cache from its own node's SSDs and its mirror from
another node's, so the cluster's free SSD space is what new volumes can
get.`,
		Example: `  tidectl pool show
  tidectl pool show fast
  tidectl pool show --etcd-endpoints http://10.0.0.1:2379`,
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: g.completePools,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				if err := pool.ValidateName("pool", args[0]); err != nil {
					return usageError{err}
				}
			}
			if g.clusterExplicit() {
				name := ""
				if len(args) == 1 {
					name = args[0]
				}
				return g.showClusterPools(cmd.Context(), name)
			}
			e, err := g.Engine()
			if err != nil {
				return err
			}
			defer e.Close()
			var pools []engine.PoolInfo
			if len(args) == 1 {
				p, err := e.Pool(cmd.Context(), args[0])
				if err != nil {
					return unknownPool(cmd.Context(), e, args[0], err)
				}
				pools = append(pools, p)
			} else if pools, err = e.Pools(cmd.Context()); err != nil {
				return err
			}
			if g.JSON() {
				views := []poolView{}
				for _, p := range pools {
					views = append(views, newPoolView(p))
				}
				return g.Print(views)
			}
			if len(pools) == 0 {
				fmt.Fprintln(g.Stdout, "no pools found; create one with `tidectl pool create`")
				return nil
			}
			for i, p := range pools {
				if i > 0 {
					fmt.Fprintln(g.Stdout)
				}
				if err := printPool(g, p); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

// poolView is a pool as `pool show` prints it: the engine's PoolInfo with
// the health of an md origin array, read from sysfs.
type poolView struct {
	engine.PoolInfo
	Origin originView `json:"origin"`
}

type originView struct {
	engine.OriginInfo
	// Array is the md array's redundancy and sync state; absent for an
	// origin that is not an md array.
	Array *mdraid.Health `json:"array,omitempty"`
	// ArrayError says why an md origin's state could not be read.
	ArrayError string `json:"array_error,omitempty"`
}

func newPoolView(p engine.PoolInfo) poolView {
	v := poolView{PoolInfo: p, Origin: originView{OriginInfo: p.Origin}}
	if p.Origin.MDUUID == "" {
		return v
	}
	h, err := mdraid.Manager{}.Health(p.Origin.Path)
	if err != nil {
		v.Origin.ArrayError = err.Error()
		return v
	}
	v.Origin.Array = &h
	return v
}

// arrayState is the STATE column of an md origin: "ok", or what is
// degraded and how far a rebuild or other sync has come.
func arrayState(o originView) string {
	a := o.Array
	if a == nil {
		if o.ArrayError != "" {
			return "unknown: " + o.ArrayError
		}
		return "ok"
	}
	var parts []string
	if a.Degraded > 0 {
		s := fmt.Sprintf("DEGRADED: %d of %d slots not in sync", a.Degraded, a.RaidDisks)
		if len(a.FailedDevices) > 0 {
			s += ", failed " + strings.Join(a.FailedDevices, " ")
		}
		parts = append(parts, s)
	}
	if len(a.RebuildingDevices) > 0 {
		parts = append(parts, "rebuilding "+strings.Join(a.RebuildingDevices, " "))
	}
	if r, ok := a.SyncProgress(); ok {
		parts = append(parts, fmt.Sprintf("%s %.1f%%", a.SyncAction, r*100))
	} else if a.Degraded > 0 && !a.Rebuilding() {
		parts = append(parts, "no rebuild running")
	}
	if len(parts) == 0 {
		return "ok"
	}
	return strings.Join(parts, "; ")
}

func printPool(g *Globals, info engine.PoolInfo) error {
	p := newPoolView(info)
	if g.JSON() {
		return g.Print(p)
	}
	fmt.Fprintf(g.Stdout, "Pool %s (uuid %s, layout generation %d)\n", p.Name, p.UUID, p.Generation)
	origin := p.Origin.Path
	if p.Origin.MDUUID != "" {
		origin += " (md " + p.Origin.MDUUID + ")"
	}
	t := newTable(g.Stdout, "DEVICE", "ROLE", "SIZE", "FREE", "STATE")
	if origin != "" {
		t.row(origin, "origin", size(p.Origin.SizeBytes), size(p.Origin.FreeBytes), arrayState(p.Origin))
	} else {
		t.row("-", "origin", "-", "-", "none: SSDs only, caching adopted devices")
	}
	for _, m := range p.Members {
		state := "ok"
		if !m.Present {
			state = "MISSING"
		} else if m.Generation != p.Generation {
			state = fmt.Sprintf("stale (gen %d)", m.Generation)
		}
		t.row(m.Path, "ssd", size(m.SizeBytes), size(m.FreeBytes), state)
	}
	if err := t.flush(); err != nil {
		return err
	}
	vols := "none"
	if len(p.Volumes) > 0 {
		vols = strings.Join(p.Volumes, ", ")
	}
	fmt.Fprintf(g.Stdout, "Volumes: %s\n", vols)
	for _, r := range p.Replicas {
		fmt.Fprintf(g.Stdout, "Replica: %s of node %s's volume %s (%s, exported as %s)\n",
			pool.FormatBytes(r.SizeBytes), r.Owner, r.Volume, r.Member, r.NQN)
	}
	return nil
}

// poolEngine checks a command's pool name, refuses an explicit
// --etcd-endpoints (nodeOnly) and opens the node's engine.
func (g *Globals) poolEngine(what, poolName string) (*engine.Engine, error) {
	if err := pool.ValidateName("pool", poolName); err != nil {
		return nil, usageError{err}
	}
	if err := g.nodeOnly(what, "run it on the node that holds the pool"); err != nil {
		return nil, err
	}
	return g.Engine()
}
