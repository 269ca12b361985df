// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/tidecache/tidecache/pkg/dm"
	"github.com/tidecache/tidecache/pkg/pool"
	"github.com/tidecache/tidecache/pkg/stack"
	"github.com/tidecache/tidecache/pkg/writeback"
)

// devices is p.devices with the write-back bound of every origin device
// the pool's volumes write back to (the pool's origin and each adopted
// device), derived from what sysfs says about it (pkg/writeback). Every
// stack the engine builds goes through here, so a write tier never runs
// at the kernel's default, which floods an HDD array's queue.
func (e *Engine) devices(p *poolState, origin string) stack.Devices {
	d := p.devices(origin)
	d.WritebackLimits = map[string]uint64{}
	add := func(dev string) {
		if dev != "" {
			d.WritebackLimits[dev] = e.originLimit(dev).Jobs
		}
	}
	add(origin)
	for _, dev := range p.Adopted {
		add(dev)
	}
	return d
}

// originLimit derives the write-back bound for the origin device dev. A
// device sysfs cannot describe gets the bound for an array whose disks
// cannot be counted, never the kernel's default.
func (e *Engine) originLimit(dev string) writeback.Limit {
	o, err := writeback.Probe(e.cfg.SysRoot, dev)
	if err != nil {
		e.log.Warn("origin not described by sysfs; write-back bounded as for an array of unknown size", "device", dev, "err", err)
		o = writeback.Origin{Device: dev, IOsPerBlock: 1, Rotational: true}
	}
	return o.Limit()
}

// watermarks are the percent of a volume's write cache in use at which its
// write-back starts and stops, as its table sets them (stack.WritecacheParams:
// the volume's tuning over the node's, dm-writecache's defaults for one
// neither sets), and who set them.
func (e *Engine) watermarks(v pool.Volume) (high, low int, source string) {
	high, low = stack.WritecacheParams(v, "", "", e.cfg.Tuning).Watermarks()
	source = writeback.SourceNode
	if t := v.Tuning; t != nil && (t.HighWatermark != nil || t.LowWatermark != nil) {
		source = writeback.SourceVolume
	}
	return high, low, source
}

// writebackLimit says which write-back bound a volume's write tier runs
// with and why: the volume's own tuning, the node's, or the one derived
// from its origin (nil for a volume without a write cache). It only reads
// sysfs: the origin is not assembled for it.
func (e *Engine) writebackLimit(p *poolState, v pool.Volume) *writeback.Limit {
	switch {
	case v.WriteCache == nil:
		return nil
	case v.Tuning != nil && v.Tuning.WritebackJobs != nil:
		return &writeback.Limit{Jobs: *v.Tuning.WritebackJobs, Source: writeback.SourceVolume,
			Reason: "set for this volume (tidectl volume tune or a policy)"}
	case e.cfg.Tuning.WritebackJobs != nil:
		return &writeback.Limit{Jobs: *e.cfg.Tuning.WritebackJobs, Source: writeback.SourceNode,
			Reason: "set in the node's configuration"}
	}
	dev := p.Layout.Origin.Path
	if v.Adopted != nil {
		dev = p.Adopted[v.UUID]
	}
	if dev == "" {
		return nil
	}
	l := e.originLimit(dev)
	return &l
}

// retuneWriteTier reloads the running write tier of a volume whose table
// differs from the wanted one only in its options (write-back bound,
// watermarks, autocommit) or in whether it writes back through the
// readfirst layer: the stack of a volume made before tidecache bounded
// write-back or held it for reads, or one whose node tuning changed.
// dm-writecache reads its metadata back on load, and its metadata does
// not name the device it writes back to, so nothing dirty is dropped (as
// in SetTuning). A cleaner left on by an interrupted drain of a volume
// the layout still records in writeback is turned off the same way. It
// reports whether it changed anything.
func (e *Engine) retuneWriteTier(ctx context.Context, v pool.Volume, want stack.Stack) (bool, error) {
	wtier, ok := want.Find(stack.RoleWriteTier)
	if !ok || len(wtier.Table) != 1 {
		return false, nil
	}
	if _, err := e.dm.Info(ctx, wtier.Name); err != nil {
		return false, nil // not running: it is created with the wanted table
	}
	layerSame, err := e.readFirstInPlace(ctx, v, want)
	if err != nil {
		return false, err
	}
	same, got, err := e.sameTable(ctx, wtier)
	if err != nil || (same && layerSame) || len(got) != 1 || got[0].Type != "writecache" {
		return false, err
	}
	wantP, err := dm.ParseWritecacheParams(wtier.Table[0].Params)
	if err != nil {
		return false, fmt.Errorf("volume %s: wanted write tier table: %w", v.Name, err)
	}
	gotP, err := dm.ParseWritecacheParams(got[0].Params)
	if err != nil {
		return false, fmt.Errorf("volume %s: running write tier table: %w", v.Name, err)
	}
	// Only the options, and the readfirst layer below, may differ: the
	// same cache device, mode, block size and length, or this is drift
	// for an operator, not a retune.
	onlyOptions := wantP
	onlyOptions.HighWatermark, onlyOptions.LowWatermark = gotP.HighWatermark, gotP.LowWatermark
	onlyOptions.WritebackJobs, onlyOptions.AutocommitBlocks = gotP.WritebackJobs, gotP.AutocommitBlocks
	onlyOptions.AutocommitTimeMs, onlyOptions.MaxAgeMs = gotP.AutocommitTimeMs, gotP.MaxAgeMs
	onlyOptions.PauseWritebackMs, onlyOptions.Cleaner = gotP.PauseWritebackMs, gotP.Cleaner
	if !e.sameWriteTier(onlyOptions, wtier.Table[0], got) {
		onlyOptions.Origin = readFirstAlternative(v, want)
		if onlyOptions.Origin == "" || !e.sameWriteTier(onlyOptions, wtier.Table[0], got) {
			return false, nil
		}
	}
	if err := e.writeTierFailed(ctx, v, wtier.Name); err != nil {
		return false, nil // never reload a failed write tier (see drain)
	}
	if err := e.swapWriteTier(ctx, v, want, nil); err != nil {
		return false, fmt.Errorf("volume %s: apply write tier options: %w", v.Name, err)
	}
	e.log.Info("write tier options applied", "volume", v.Name, "dm_name", wtier.Name, "was", got.String(), "now", wtier.Table.String())
	return true, nil
}

// sameWriteTier reports whether the running write tier table got is the
// wanted target want with the parameters p.
func (e *Engine) sameWriteTier(p dm.WritecacheParams, want dm.Target, got dm.Table) bool {
	eq, err := dm.Table{p.Target(want.Start, want.Length)}.Equivalent(got, e.disks.devNumber)
	return err == nil && eq
}

// readFirstAlternative returns the other device a volume's write tier may
// write back to while the readfirst layer is put in or taken out: the
// layer's lower device when want has the layer, the layer itself when it
// has not.
func readFirstAlternative(v pool.Volume, want stack.Stack) string {
	if rf, ok := want.Find(stack.RoleReadFirst); ok {
		p, err := dm.ParseReadFirstParams(rf.Table[0].Params)
		if err != nil {
			return ""
		}
		return p.Device
	}
	return dm.DevicePath(stack.DeviceName(v.Name, stack.RoleReadFirst))
}

// readFirstInPlace reports whether the volume's readfirst device is as
// want has it: running with the wanted table, or absent when want has
// none.
func (e *Engine) readFirstInPlace(ctx context.Context, v pool.Volume, want stack.Stack) (bool, error) {
	rf, wanted := want.Find(stack.RoleReadFirst)
	if !wanted {
		_, err := e.dm.Info(ctx, stack.DeviceName(v.Name, stack.RoleReadFirst))
		return errors.Is(err, dm.ErrNotFound), nil
	}
	if _, err := e.dm.Info(ctx, rf.Name); err != nil {
		return false, nil
	}
	same, _, err := e.sameTable(ctx, rf)
	return same, err
}

// swapWriteTier brings the readfirst layer and the write tier of a
// running writeback volume to want, in the order that keeps the stack
// whole: the layer is created (or given its new hold bound) before the
// write tier is reloaded onto it, and removed only once the write tier no
// longer writes back through it. check runs while the write tier is
// suspended and can veto its new table (see reload). The write tier is
// always reloaded: its suspend waits for the write-back in flight, which
// the layer may hold for up to its bound.
func (e *Engine) swapWriteTier(ctx context.Context, v pool.Volume, want stack.Stack, check func(context.Context) error) error {
	wtier, ok := want.Find(stack.RoleWriteTier)
	if !ok {
		return fmt.Errorf("volume %s: writeback stack without a write tier", v.Name)
	}
	rf, wantLayer := want.Find(stack.RoleReadFirst)
	created := false
	if wantLayer {
		if err := e.requireTargets(ctx, want); err != nil {
			return err
		}
		var err error
		created, err = e.ensure(ctx, rf)
		var drift *DriftError
		if errors.As(err, &drift) {
			// Another hold bound: its suspend releases what it holds.
			err = e.reload(ctx, rf.Name, rf.Table, nil)
		}
		if err != nil {
			return fmt.Errorf("readfirst layer: %w", err)
		}
	}
	if err := e.reload(ctx, wtier.Name, wtier.Table, check); err != nil {
		if created {
			if rerr := e.removeDevice(context.WithoutCancel(ctx), rf.Name); rerr != nil {
				err = errors.Join(err, rerr)
			}
		}
		return err
	}
	if !wantLayer {
		if err := e.removeDevice(ctx, stack.DeviceName(v.Name, stack.RoleReadFirst)); err != nil {
			return fmt.Errorf("remove the readfirst layer: %w", err)
		}
	}
	return nil
}
