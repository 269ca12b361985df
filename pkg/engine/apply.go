// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tidecache/tidecache/pkg/blockdev"
	"github.com/tidecache/tidecache/pkg/dm"
	"github.com/tidecache/tidecache/pkg/stack"
)

// DriftError says a tidecache device exists with a table other than the
// one the layout asks for: someone changed it behind our back, or a change
// was interrupted.
type DriftError struct {
	Device    string
	Want, Got string
}

func (e *DriftError) Error() string {
	return fmt.Sprintf("device %s has table %q, layout wants %q", e.Device, e.Got, e.Want)
}

// ensure makes a dm device exist with the given table. It returns whether
// the device was created. An existing device with an equivalent table is
// left alone; one with another table gets a *DriftError and is not
// touched; a device of that name that tidecache does not own is refused.
func (e *Engine) ensure(ctx context.Context, d stack.Device) (bool, error) {
	info, err := e.dm.Info(ctx, d.Name)
	switch {
	case errors.Is(err, dm.ErrNotFound):
		return true, e.createDevice(ctx, d)
	case err != nil:
		return false, fmt.Errorf("inspect %s: %w", d.Name, err)
	}
	if info.UUID != d.UUID {
		return false, fmt.Errorf("device %s exists with uuid %q, not %q: not touching it", d.Name, info.UUID, d.UUID)
	}
	if !info.LiveTable {
		// A create that died between create and resume: finish it.
		if err := e.dm.Load(ctx, d.Name, d.Table); err != nil {
			return false, fmt.Errorf("load %s: %w", d.Name, err)
		}
		if err := e.dm.Resume(ctx, d.Name); err != nil {
			return false, fmt.Errorf("resume %s: %w", d.Name, err)
		}
		return true, nil
	}
	same, got, err := e.sameTable(ctx, d)
	if err != nil {
		return false, err
	}
	if !same {
		return false, &DriftError{Device: d.Name, Want: d.Table.String(), Got: got.String()}
	}
	if info.Suspended {
		if err := e.dm.Resume(ctx, d.Name); err != nil {
			return false, fmt.Errorf("resume %s left suspended: %w", d.Name, err)
		}
	}
	return false, nil
}

// createDevice creates, loads and resumes a new dm device; on failure it
// removes what it created.
func (e *Engine) createDevice(ctx context.Context, d stack.Device) error {
	if _, err := e.dm.Create(ctx, d.Name, d.UUID); err != nil {
		return fmt.Errorf("create %s: %w", d.Name, err)
	}
	err := e.dm.Load(ctx, d.Name, d.Table)
	if err == nil {
		err = e.dm.Resume(ctx, d.Name)
	}
	if err != nil {
		if rmErr := e.dm.Remove(ctx, d.Name); rmErr != nil {
			e.log.Warn("cleanup after failed create", "dm_name", d.Name, "err", rmErr)
		}
		return fmt.Errorf("create %s with table %q: %w", d.Name, d.Table.String(), err)
	}
	e.log.Info("device created", "dm_name", d.Name, "table", d.Table.String())
	return nil
}

// reload swaps the table of a live device: suspend, load, resume. The
// device is resumed on every path, with the old table if the new one was
// refused. check, if set, runs while the device is suspended and can veto
// the swap (for instance when dirty blocks reappeared).
//
// A dm-writecache in error is never reloaded: the new instance would start
// from the SSD's last committed metadata with its error flag cleared,
// dropping the mapping of blocks written since that commit while status
// and alerts call the volume healthy.
func (e *Engine) reload(ctx context.Context, name string, table dm.Table, check func(context.Context) error) (err error) {
	if wc, ok, err := e.writecacheStatus(ctx, name); err != nil {
		return err
	} else if ok && wc.Error != 0 {
		return fmt.Errorf("reload %s: write cache in error state (%d): the SSD failed; a reload would drop blocks written since its last commit (left as it is; see the runbook)", name, wc.Error)
	}
	if err := e.refuseWhileHeld(ctx, name); err != nil {
		return fmt.Errorf("reload %s: %w", name, err)
	}
	if err := e.dm.Suspend(ctx, name, dm.SuspendOptions{}); err != nil {
		return fmt.Errorf("suspend %s: %w", name, err)
	}
	defer func() {
		// Resume even if ctx is cancelled: a suspended device blocks I/O.
		if rerr := e.resume(context.WithoutCancel(ctx), name); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}()
	if check != nil {
		if err := check(ctx); err != nil {
			return err
		}
	}
	if err := e.dm.Load(ctx, name, table); err != nil {
		return fmt.Errorf("load %s with table %q: %w", name, table.String(), err)
	}
	return nil
}

// resumeAttempts bounds the retries of a resume after a reload: the
// device's I/O waits while it stays suspended, so a transient failure is
// worth another try, but not for ever.
var resumeAttempts = []time.Duration{0, 100 * time.Millisecond, 500 * time.Millisecond, 2 * time.Second}

// resume resumes a device suspended for a reload, retrying a failure a
// few times. If it still fails, the error says that the device is left
// suspended (its I/O waits, nothing is lost) and how to resume it.
func (e *Engine) resume(ctx context.Context, name string) error {
	var err error
	for i, wait := range resumeAttempts {
		time.Sleep(wait)
		if err = e.dm.Resume(ctx, name); err == nil {
			if i > 0 {
				e.log.Warn("resume succeeded after retries", "dm_name", name, "attempts", i+1)
			}
			return nil
		}
		e.log.Warn("resume failed", "dm_name", name, "attempt", i+1, "err", err)
	}
	return fmt.Errorf("resume %s: %w (tried %d times; the device stays suspended and its I/O waits: "+
		"resume it with `dmsetup resume %s` once the cause is fixed)", name, err, len(resumeAttempts), name)
}

// removeDevice removes a tidecache device if it exists. Devices without
// the tidecache UUID are never removed.
func (e *Engine) removeDevice(ctx context.Context, name string) error {
	info, err := e.dm.Info(ctx, name)
	if errors.Is(err, dm.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("inspect %s: %w", name, err)
	}
	if !stack.Owned(info.UUID) {
		return fmt.Errorf("device %s (uuid %q) is not tidecache's: not removing it", name, info.UUID)
	}
	if info.OpenCount > 0 {
		return fmt.Errorf("remove %s: %w (open count %d: unmount it or stop what uses it)", name, dm.ErrBusy, info.OpenCount)
	}
	if err := e.refuseWhileHeld(ctx, name); err != nil {
		return fmt.Errorf("remove %s: %w", name, err)
	}
	if err := e.dm.Remove(ctx, name); err != nil {
		return fmt.Errorf("remove %s: %w", name, err)
	}
	e.log.Info("device removed", "dm_name", name)
	return nil
}

// sameTable compares the live table of a device with the wanted one,
// ignoring what the kernel rewrites: device paths become major:minor and
// option order is the target's own (see dm.Target.Equivalent).
func (e *Engine) sameTable(ctx context.Context, d stack.Device) (bool, dm.Table, error) {
	got, err := e.dm.Table(ctx, d.Name)
	if err != nil {
		return false, nil, fmt.Errorf("table of %s: %w", d.Name, err)
	}
	same, err := d.Table.Equivalent(got, e.disks.devNumber)
	if _, missing := errors.AsType[*blockdev.NotExistError](err); missing {
		// The wanted table names a device that does not exist (a layer
		// not created yet): whatever runs is not it.
		return false, got, nil
	}
	if err != nil {
		return false, got, fmt.Errorf("compare table of %s: %w", d.Name, err)
	}
	if !same && d.Role == stack.RoleWriteTier && e.flushRunning(d.Name) {
		// A flush running without the node lock (see Flush) wants its
		// flushing table: it is not drift while the flush lives.
		if flushing, ferr := flushingTable(d.Table); ferr == nil {
			if same, err = flushing.Equivalent(got, e.disks.devNumber); err != nil {
				return false, got, fmt.Errorf("compare table of %s: %w", d.Name, err)
			}
		}
	}
	return same, got, nil
}

// ErrPeerLegHeld is returned for a reload or removal in a volume whose
// peer leg holds I/O its peer failed (dm-errhold): a suspend, and the
// flush a removal makes, wait for every I/O in flight below the device,
// and the held I/O completes only when the daemon's guard retries it, or
// fails it once the replica is recorded outdated. Going ahead would hang
// the command, and the engine's lock with it.
var ErrPeerLegHeld = errors.New("the volume's peer leg holds writes its peer failed; they complete once the peer takes them or the daemon records the replica outdated")

// refuseWhileHeld returns ErrPeerLegHeld when the volume the device
// belongs to has I/O held in its peer leg.
func (e *Engine) refuseWhileHeld(ctx context.Context, name string) error {
	volume, ok := stack.VolumeOf(name)
	if !ok {
		return nil
	}
	held, _, err := e.peerSlices(ctx, volume)
	switch {
	case err != nil:
		return err
	case held > 0:
		return fmt.Errorf("%w (%d held)", ErrPeerLegHeld, held)
	}
	return nil
}
