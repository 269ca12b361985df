// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/tidecache/tidecache/pkg/dm"
	"github.com/tidecache/tidecache/pkg/pool"
	"github.com/tidecache/tidecache/pkg/stack"
)

// ErrNoFUAFlush is returned when a writeback stack needs tidecache's
// fuaflush target and the kernel does not have it. Without it a FUA write
// (O_DSYNC, a journal commit block) into a new cache block is acknowledged
// before dm-writecache has committed its mapping, and a power cut loses it:
// tidecache refuses to build such a stack unless the volume records that
// its operator accepted that window.
var ErrNoFUAFlush = errors.New("the fuaflush kernel target (module " + dm.FUAFlushModule + ") is not available")

// fuaFlushFix tells the operator how to get the target, or how to run
// without it knowingly.
const fuaFlushFix = "install it with DKMS (`make kmod-install` in the tidecache sources, or the tidecache-dkms package, which the .deb installs), " +
	"and with Secure Boot enroll the DKMS signing key (`mokutil --import /var/lib/dkms/mok.pub`, then reboot); " +
	"to run writeback without it, accepting that O_DSYNC writes and filesystem journal commits acknowledged " +
	"within the autocommit time are lost on power failure, create the volume with --allow-fua-window"

// ErrNoReadFirst is returned when a writeback stack has the readfirst
// layer under its write tier and the kernel does not have the target.
var ErrNoReadFirst = errors.New("the readfirst kernel target (module " + dm.ReadFirstModule + ") is not available")

// readFirstFix tells the operator how to get the readfirst target, or how
// to run a volume without it.
const readFirstFix = "it comes with dm-fuaflush in tidecache's DKMS package (`make kmod-install` in the tidecache sources, " +
	"or the tidecache-dkms package); to run the volume without it, and let write-back compete with reads for the HDDs, " +
	"set `tidectl volume tune <volume> --readfirst-max-hold 0`"

// ErrNoErrHold is returned when a volume that can fail over has the
// errhold target under its peer leg and the kernel does not have it.
// Without it an I/O error from the peer makes md drop the leg and
// acknowledge writes on the local leg alone, which a failover to the
// replica would lose: tidecache refuses to build such a mirror.
var ErrNoErrHold = errors.New("the errhold kernel target (module " + dm.ErrHoldModule + ") is not available")

// errHoldFix tells the operator how to get the errhold target.
const errHoldFix = "it comes with dm-fuaflush in tidecache's DKMS package (`make kmod-install` in the tidecache sources, " +
	"or the tidecache-dkms package); a volume on a shared origin mirrored to a peer needs it to hold the writes its peer " +
	"fails until the cluster has recorded the replica outdated"

// requireTargets makes sure the kernel has every target type a stack uses
// that is not always loaded: fuaflush, readfirst and errhold, which come
// from tidecache's own modules, and dm-raid for a mirrored write cache.
// It tries modprobe once
// before giving up, so a DKMS-installed module loads on first use. It runs
// before any device is touched, so a refusal leaves the volume as it was.
func (e *Engine) requireTargets(ctx context.Context, st stack.Stack) error {
	if hasTarget(st, dm.RaidTarget) {
		if err := e.loadTarget(ctx, dm.RaidTarget, dm.RaidModule); err != nil {
			return fmt.Errorf("volume %s: the write mirror needs the dm-raid target: %w", st.Volume, err)
		}
	}
	if hasTarget(st, dm.ReadFirstTarget) {
		if err := e.loadTarget(ctx, dm.ReadFirstTarget, dm.ReadFirstModule); err != nil {
			return fmt.Errorf("volume %s: %w (%v); %s", st.Volume, ErrNoReadFirst, err, readFirstFix)
		}
	}
	if hasTarget(st, dm.ErrHoldTarget) {
		if err := e.loadTarget(ctx, dm.ErrHoldTarget, dm.ErrHoldModule); err != nil {
			return fmt.Errorf("volume %s: %w (%v); %s", st.Volume, ErrNoErrHold, err, errHoldFix)
		}
	}
	if st.Top().Table[0].Type != dm.FUAFlushTarget {
		return nil
	}
	if err := e.loadTarget(ctx, dm.FUAFlushTarget, dm.FUAFlushModule); err != nil {
		// err names the command already ("modprobe dm-fuaflush: ...").
		return fmt.Errorf("volume %s: %w (%v); %s", st.Volume, ErrNoFUAFlush, err, fuaFlushFix)
	}
	return nil
}

// hasTarget reports whether any device of the stack uses the target type.
func hasTarget(st stack.Stack, target string) bool {
	for _, d := range st.Devices {
		for _, t := range d.Table {
			if t.Type == target {
				return true
			}
		}
	}
	return false
}

// loadTarget makes sure the kernel has a target type, loading its module
// with modprobe when it has not.
func (e *Engine) loadTarget(ctx context.Context, target, module string) error {
	if _, err := e.targetVersion(ctx, target); err == nil {
		return nil
	}
	_, loadErr := e.runner.Run(ctx, "modprobe", module)
	e.forgetTargetVersions()
	if _, err := e.targetVersion(ctx, target); err == nil {
		e.log.Info("kernel module loaded", "module", module)
		return nil
	}
	if loadErr == nil {
		loadErr = fmt.Errorf("module %s loaded but registered no %s target", module, target)
	}
	return loadErr
}

// forgetTargetVersions drops the cached list of loaded dm targets, so the
// next lookup sees a module loaded since.
func (e *Engine) forgetTargetVersions() {
	e.mu.Lock()
	e.versions = nil
	e.mu.Unlock()
}

// writeTier returns the name and status of the dm-writecache device of a
// volume: tc-<vol>-wtier, or the top device of a stack built before the
// write tier had its own device (see migrateLegacyTop). ok is false when
// the volume has no write tier running.
func (e *Engine) writeTier(ctx context.Context, volume string) (name string, wc dm.WritecacheStatus, ok bool, err error) {
	for _, r := range []stack.Role{stack.RoleWriteTier, stack.RoleTop} {
		name = stack.DeviceName(volume, r)
		wc, ok, err = e.writecacheStatus(ctx, name)
		if err != nil || ok {
			return name, wc, ok, err
		}
	}
	return "", dm.WritecacheStatus{}, false, nil
}

// legacyTop reports whether a volume's top device runs dm-writecache
// itself: the stack of tidecache before the fuaflush target, where FUA
// writes were not made durable.
func (e *Engine) legacyTop(ctx context.Context, volume string) (bool, error) {
	_, ok, err := e.writecacheStatus(ctx, stack.DeviceName(volume, stack.RoleTop))
	return ok, err
}

// migrateLegacyTop moves a running volume from the stack where dm-writecache
// was the top device to the one where it is tc-<vol>-wtier under fuaflush,
// live: the top device is only suspended and reloaded, never closed, so a
// mounted filesystem stays mounted.
//
// Two dm-writecache instances must never run over the same cache slice,
// and one cannot be moved from a device to another, so the old write tier
// is emptied first and a new one started on the same slice:
//
//  1. drain the old write tier (cleaner), like a switch to writethrough;
//  2. suspend the top device, prove no block is dirty, load a linear table
//     over the lower device and resume: the old writecache is gone, and its
//     suspend committed metadata that maps nothing;
//  3. zero the slice's metadata head, create tc-<vol>-wtier on it (over
//     the readfirst layer, created first, when the stack has one);
//  4. suspend the top device again and load fuaflush over the new tier.
//
// The layout is not rewritten: it says writeback throughout, and boot
// assembly after a crash at any step builds the new stack over a write
// slice that holds no dirty block (drained, then zeroed). Writes between
// steps 2 and 4 go straight to the lower device, as in writethrough.
func (e *Engine) migrateLegacyTop(ctx context.Context, p *poolState, v pool.Volume, want stack.Stack, progress ProgressFunc) error {
	top := stack.DeviceName(v.Name, stack.RoleTop)
	oldTable, err := e.dm.Table(ctx, top)
	if err != nil {
		return fmt.Errorf("volume %s: table of %s: %w", v.Name, top, err)
	}
	wtier, ok := want.Find(stack.RoleWriteTier)
	if !ok {
		return fmt.Errorf("volume %s: migrate: the wanted stack has no write tier", v.Name)
	}
	wc, err := dm.ParseWritecacheParams(oldTable[0].Params)
	if err != nil {
		return fmt.Errorf("volume %s: migrate: %w", v.Name, err)
	}
	e.log.Info("migrating volume to the fuaflush stack: draining the old write tier first", "volume", v.Name)
	check := func(ctx context.Context) error {
		present, err := e.provenClean(ctx, v.Name, top)
		if err == nil && !present {
			err = fmt.Errorf("volume %s: %s is no longer a writecache", v.Name, top)
		}
		return err
	}
	lower := dm.Table{dm.LinearParams{Device: wc.Origin}.Target(0, oldTable[0].Length)}
	if err := e.drainAndReload(ctx, v, top, oldTable, top, lower, check, progress); err != nil {
		return fmt.Errorf("volume %s: migrate: %w", v.Name, err)
	}
	if err := e.zeroCacheHeads(p, v, true, false); err != nil {
		return fmt.Errorf("volume %s: migrate: %w", v.Name, err)
	}
	if rf, ok := want.Find(stack.RoleReadFirst); ok {
		if _, err := e.ensure(ctx, rf); err != nil {
			return fmt.Errorf("volume %s: migrate: %w", v.Name, err)
		}
	}
	if _, err := e.ensure(ctx, wtier); err != nil {
		return fmt.Errorf("volume %s: migrate: %w", v.Name, err)
	}
	if err := e.reload(ctx, top, want.Top().Table, nil); err != nil {
		return fmt.Errorf("volume %s: migrate: %w", v.Name, err)
	}
	e.log.Info("volume migrated to the fuaflush stack", "volume", v.Name)
	return nil
}

// upgradeStack brings a running volume whose top device is still the old
// dm-writecache top onto the stack the layout describes (see
// migrateLegacyTop), or whose write tier runs with other options than
// want's (see retuneWriteTier: the write-back bound of a volume made
// before tidecache set one), and reports whether it did. It does nothing
// for a volume that is not running or already has the current stack. Every path that creates or reloads a
// volume's devices calls it first: creating tc-<vol>-wtier next to a
// writecache top would run two write tiers over one cache slice.
func (e *Engine) upgradeStack(ctx context.Context, p *poolState, v pool.Volume, want stack.Stack, progress ProgressFunc) (bool, error) {
	legacy, err := e.legacyTop(ctx, v.Name)
	if err != nil {
		return false, err
	}
	if !legacy {
		if v.Mode != pool.ModeWriteback {
			return false, nil
		}
		return e.retuneWriteTier(ctx, v, want)
	}
	if v.Mode != pool.ModeWriteback {
		// The layout says the write tier is gone but the kernel still runs
		// one: an interrupted mode change. Leave it for an operator.
		return false, &DriftError{Device: stack.DeviceName(v.Name, stack.RoleTop), Want: want.Top().Table.String(), Got: "writecache (left by an interrupted mode change)"}
	}
	if err := e.requireTargets(ctx, want); err != nil {
		return false, err
	}
	if err := e.migrateLegacyTop(ctx, p, v, want, progress); err != nil {
		return false, err
	}
	return true, nil
}
