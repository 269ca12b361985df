// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/tidecache/tidecache/pkg/dm"
	"github.com/tidecache/tidecache/pkg/pool"
	"github.com/tidecache/tidecache/pkg/stack"
)

// Progress reports a long write-back (drain or flush) as it goes.
type Progress struct {
	Volume string
	// Phase is "drain" (write tier being emptied before removal) or "flush".
	Phase       string
	DirtyBlocks uint64
	StartBlocks uint64
	BlockSize   uint32
	// BlocksPerSecond is the recent write-back rate; zero until measured.
	BlocksPerSecond float64
	// ETA is the time left at that rate; zero when unknown.
	ETA     time.Duration
	Elapsed time.Duration
}

// ProgressFunc receives progress reports; it must not block.
type ProgressFunc func(Progress)

// errRedirtied says blocks became dirty again between the drain and the
// suspend; the drain is repeated.
var errRedirtied = errors.New("write cache became dirty again")

// maxDrainRounds bounds how often a drain is retried when writes keep
// landing in the cache between drain and suspend.
const maxDrainRounds = 5

// SetMode changes a volume's cache mode live. The top device keeps its
// name and stays open; only its table is swapped between a suspend and a
// resume. Leaving writeback first drains the write tier with the cleaner
// message and proves, with the device suspended, that no dirty block is
// left before the table loses the cache. The new mode is recorded in the
// superblocks while the device is suspended, before the new table goes
// live, so boot assembly always rebuilds a stack that holds every
// acknowledged write. Setting the current mode again is a no-op.
func (e *Engine) SetMode(ctx context.Context, name string, mode pool.Mode, progress ProgressFunc) error {
	if _, err := pool.ParseMode(string(mode)); err != nil {
		return err
	}
	unlock, p, v, err := e.lockVolume(ctx, name)
	if err != nil {
		return err
	}
	defer unlock()
	if v.Mode == mode {
		e.log.Info("mode unchanged", "volume", name, "mode", mode)
		return nil
	}
	if mode == pool.ModeWriteback && v.WriteCache == nil {
		return fmt.Errorf("volume %s: has no write cache slice, cannot switch to writeback", name)
	}
	origin, err := e.resolveOrigin(ctx, p.Layout)
	if err != nil {
		return err
	}
	// A peer mirror comes back with writeback only on both legs: its
	// export is attached first (its metadata is zeroed below, which needs
	// it), and a peer that does not answer refuses the switch.
	if mode == pool.ModeWriteback && v.Mode != pool.ModeWriteback {
		for _, r := range v.PeerLegs() {
			dev, err := e.attachRemote(ctx, r.RemoteLeg, v.WriteCache.Length, peerLegTimeouts(*v))
			if err != nil {
				return fmt.Errorf("volume %s: writeback mirrors the write cache onto node %s, which does not answer: %w", name, r.Node, err)
			}
			p.Remote[r.UUID] = dev
		}
	}
	devs := e.devices(p, origin)
	cur, err := stack.Build(*v, devs, e.cfg.Tuning)
	if err != nil {
		return err
	}
	want, err := stack.BuildMode(*v, mode, devs, e.cfg.Tuning)
	if err != nil {
		return err
	}
	top := cur.Top().Name
	if _, err := e.dm.Info(ctx, top); err != nil {
		return fmt.Errorf("volume %s is not active (%w); run `tidecached assemble` first", name, err)
	}
	if err := e.requireTargets(ctx, want); err != nil {
		return err
	}
	if _, err := e.upgradeStack(ctx, p, *v, cur, progress); err != nil {
		return fmt.Errorf("volume %s: current stack: %w", name, err)
	}
	// The running stack must be the one the layout describes before it is
	// changed; anything else is drift for an operator to look at.
	if err := e.activate(ctx, cur); err != nil {
		return fmt.Errorf("volume %s: current stack: %w", name, err)
	}

	wtier, hadWrite := cur.Find(stack.RoleWriteTier)
	_, getsWrite := want.Find(stack.RoleWriteTier)
	_, hadRead := cur.Find(stack.RoleReadTier)
	_, getsRead := want.Find(stack.RoleReadTier)

	// New tiers start from zeroed metadata: those slices hold nothing
	// dirty, since the layout records a mode without them.
	if err := e.zeroCacheHeads(p, *v, getsWrite && !hadWrite, getsRead && !hadRead); err != nil {
		return err
	}
	for _, d := range want.Devices[:len(want.Devices)-1] {
		if _, err := e.ensure(ctx, d); err != nil {
			return fmt.Errorf("volume %s: prepare %s: %w", name, d.Name, err)
		}
	}

	next := p.Layout.Clone()
	if err := next.SetMode(name, mode); err != nil {
		return err
	}
	if getsWrite && !hadWrite && v.WriteMirror != nil {
		// Both legs were zeroed above: a new mirror, no leg behind.
		if _, err := next.SetMirrorOutOfSync(name, nil); err != nil {
			return err
		}
	}
	check := func(ctx context.Context) error {
		if hadWrite && !getsWrite {
			// With the top device suspended nothing reaches the write
			// tier any more: its dirty count can only fall.
			if _, err := e.provenClean(ctx, name, wtier.Name); err != nil {
				return err
			}
		}
		return e.writeLayout(p, origin, next)
	}
	drainTier := "" // the write tier to empty first, if the new mode drops it
	if hadWrite && !getsWrite {
		drainTier = wtier.Name
	}
	if err := e.drainAndReload(ctx, *v, drainTier, wtier.Table, top, want.Top().Table, check, progress); err != nil {
		if p.Layout.Generation == next.Generation {
			// The new mode was recorded but the table was refused: record
			// the old mode again so layout and kernel agree.
			back := next.Clone()
			if rerr := back.SetMode(name, v.Mode); rerr == nil {
				err = errors.Join(err, e.writeLayout(p, origin, back))
			}
		}
		return fmt.Errorf("volume %s: switch %s -> %s: %w", name, v.Mode, mode, err)
	}
	// Tear down the tiers the new mode does not use, top-down.
	for i := len(cur.Devices) - 2; i >= 0; i-- {
		d := cur.Devices[i]
		if _, keep := want.Find(d.Role); keep {
			continue
		}
		if err := e.removeDevice(ctx, d.Name); err != nil {
			return fmt.Errorf("volume %s: mode is %s but cleanup failed: %w", name, mode, err)
		}
	}
	e.log.Info("mode changed", "volume", name, "from", v.Mode, "to", mode)
	return nil
}

// drainAndReload swaps the table of the live device top for table (see
// reload), after draining the write tier wtier unless wtier is "" (see
// drain; restore is its normal table). check runs while top is suspended;
// when it finds the write tier dirty again (errRedirtied: writes landed
// between the drain and the suspend), the drain and the swap are repeated,
// up to maxDrainRounds times in all. If the swap fails, the drained write
// tier's cleaner is turned off again, as when the drain itself fails.
func (e *Engine) drainAndReload(ctx context.Context, v pool.Volume, wtier string, restore dm.Table, top string, table dm.Table, check func(context.Context) error, progress ProgressFunc) error {
	for round := 1; ; round++ {
		if wtier != "" {
			if err := e.drain(ctx, v, wtier, restore, progress); err != nil {
				return err
			}
		}
		err := e.reload(ctx, top, table, check)
		if errors.Is(err, errRedirtied) && round < maxDrainRounds {
			e.log.Info("drain: cache dirtied again before suspend, draining again", "volume", v.Name, "round", round)
			continue
		}
		if err != nil && wtier != "" {
			if cerr := e.cleanerOff(ctx, v, wtier, restore); cerr != nil {
				err = errors.Join(err, cerr)
			}
		}
		return err
	}
}

// provenClean checks, while the device above it is suspended, that the
// write tier wtier holds no dirty block and is not in error; present is
// false when wtier is not a writecache device (nothing to check). A dirty
// tier gives errRedirtied, so the caller drains again.
func (e *Engine) provenClean(ctx context.Context, volume, wtier string) (present bool, err error) {
	wc, ok, err := e.writecacheStatus(ctx, wtier)
	switch {
	case err != nil || !ok:
		return false, err
	case wc.Error != 0:
		return true, fmt.Errorf("volume %s: write cache in error state (%d): dirty data cannot be written back; see the runbook", volume, wc.Error)
	case wc.DirtyBlocks() > 0:
		return true, fmt.Errorf("%w: %d blocks", errRedirtied, wc.DirtyBlocks())
	}
	return true, nil
}

// drain empties the write tier wtier (a writecache device) and polls its
// status until no dirty block is left. On failure or cancellation the
// volume's normal writecache table (restore) is loaded again, so the cache
// keeps absorbing writes.
//
// It runs in two phases, because the cleaner message that makes a write
// tier converge to empty (new writes go around it) also makes its next
// suspend write back everything first, in the kernel (flush_on_suspend):
// with the cleaner on for the whole drain, turning it off after a Ctrl-C
// waited for the whole drain anyway. So most of the write-back runs under
// the flushing table (see flushingTable; its suspend returns at once), and
// the cleaner only does the tail: once about two seconds of write-back are
// left, or when the dirty count stops falling because writes arrive as
// fast as they are written back.
func (e *Engine) drain(ctx context.Context, v pool.Volume, wtier string, restore dm.Table, progress ProgressFunc) (err error) {
	// A write tier in error is left exactly as it is: dm-writecache
	// writes nothing back once in error, so a drain cannot succeed, and
	// any reload (the restore below, or a drift repair of the cleaner
	// table) would start a new instance from the SSD's committed metadata:
	// its error flag cleared, so status, metrics and alerts would say the
	// volume is healthy while its SSD still fails, and without the blocks
	// acknowledged since the last commit, which only the running instance
	// maps (their reads would silently return older data).
	wc, _, err := e.writecacheStatus(ctx, wtier)
	switch {
	case err != nil:
		return fmt.Errorf("volume %s: drain: %w", v.Name, err)
	case wc.Error != 0:
		return fmt.Errorf("volume %s: drain: write cache in error state (%d): the SSD failed; dirty data cannot be written back (volume left as it is, reads still work: see the runbook)", v.Name, wc.Error)
	}
	if e.cfg.DrainTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, e.cfg.DrainTimeout)
		defer cancel()
	}
	changed := false // the write tier runs another table, or the cleaner
	defer func() {
		if err == nil || !changed {
			return
		}
		if cerr := e.cleanerOff(ctx, v, wtier, restore); cerr != nil {
			err = errors.Join(err, cerr)
		}
	}()
	if wc.DirtyBlocks() > minCleanerTail {
		flushing, err := flushingTable(restore)
		if err != nil {
			return fmt.Errorf("volume %s: drain: %w", v.Name, err)
		}
		if err := e.reload(ctx, wtier, flushing, nil); err != nil {
			return fmt.Errorf("volume %s: start drain: %w", v.Name, err)
		}
		changed = true
		if err := e.waitTail(ctx, v, wtier, progress); err != nil {
			return err
		}
	}
	if _, err := e.dm.Message(ctx, wtier, 0, "cleaner"); err != nil {
		return fmt.Errorf("volume %s: drain (cleaner message): %w", v.Name, err)
	}
	changed = true
	return e.waitClean(ctx, v, wtier, "drain", progress)
}

// minCleanerTail is the fewest dirty blocks a drain leaves to the cleaner
// (see drain): below it the first phase is skipped.
const minCleanerTail = 64

// tailStallPolls is how many polls in a row the first phase of a drain
// may go without a new low of the dirty count before the cleaner takes
// over: 10 s at the default poll interval.
const tailStallPolls = 50

// waitTail polls a write tier under the flushing table until what is left
// would take the cleaner about two seconds at the rate measured, or until
// the dirty count stops falling (see drain).
func (e *Engine) waitTail(ctx context.Context, v pool.Volume, wtier string, progress ProgressFunc) error {
	start := time.Now()
	var first, low, last uint64
	lastAt, rate, sinceLow := start, 0.0, 0
	tick := time.NewTicker(e.cfg.PollInterval)
	defer tick.Stop()
	for n := 0; ; n++ {
		wc, ok, err := e.writecacheStatus(ctx, wtier)
		switch {
		case err != nil:
			return fmt.Errorf("volume %s: drain: %w", v.Name, err)
		case !ok:
			return fmt.Errorf("volume %s: drain: write tier vanished", v.Name)
		case wc.Error != 0:
			return fmt.Errorf("volume %s: drain: write cache in error state (%d): the SSD failed; dirty data cannot be written back", v.Name, wc.Error)
		}
		dirty, now := wc.DirtyBlocks(), time.Now()
		if n == 0 {
			first, low, last = dirty, dirty, dirty
		} else if dt := now.Sub(lastAt).Seconds(); dt > 0 && last >= dirty {
			rate = 0.7*rate + 0.3*float64(last-dirty)/dt
		}
		if dirty < low {
			low, sinceLow = dirty, 0
		} else {
			sinceLow++
		}
		last, lastAt = dirty, now
		if progress != nil {
			p := Progress{Volume: v.Name, Phase: "drain", DirtyBlocks: dirty, StartBlocks: first, BlockSize: blockSize(v), BlocksPerSecond: rate, Elapsed: now.Sub(start)}
			if rate > 0 {
				p.ETA = time.Duration(float64(dirty) / rate * float64(time.Second))
			}
			progress(p)
		}
		if dirty <= max(minCleanerTail, uint64(2*rate)) || sinceLow >= tailStallPolls {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("volume %s: drain interrupted with %d dirty blocks left (the volume stays in writeback; nothing is lost): %w", v.Name, dirty, ctx.Err())
		case <-tick.C:
		}
	}
}

// cleanerOff turns the cleaner of the write tier wtier off again after a
// drain that did not lead to its removal, by reloading its normal table
// (restore), so the cache absorbs writes again. A write tier in error is
// left as it is (see drain). It runs even if ctx is cancelled.
func (e *Engine) cleanerOff(ctx context.Context, v pool.Volume, wtier string, restore dm.Table) error {
	ctx = context.WithoutCancel(ctx)
	if e.writeTierFailed(ctx, v, wtier) != nil {
		return nil // failed during the drain: keep the running instance
	}
	if err := e.reload(ctx, wtier, restore, nil); err != nil {
		return fmt.Errorf("turn cleaner off again: %w", err)
	}
	return nil
}

// writeTierFailed returns an error when the writecache device wtier
// reports an I/O error (dm-writecache's error field is not 0).
func (e *Engine) writeTierFailed(ctx context.Context, v pool.Volume, wtier string) error {
	wc, ok, err := e.writecacheStatus(ctx, wtier)
	if err != nil || !ok || wc.Error == 0 {
		return nil
	}
	return fmt.Errorf("volume %s: drain: write cache in error state (%d): the SSD failed; dirty data cannot be written back (volume left as it is, reads still work: see the runbook)", v.Name, wc.Error)
}

// Flush writes back every block that is dirty when it starts, reporting
// progress, and returns the number of dirty blocks left at the end (new
// writes keep being cached meanwhile). A volume without a write tier has
// nothing to flush.
//
// It does not use dm-writecache's flush message: that message returns
// only once everything is written back, in the kernel, where nothing can
// interrupt it (a Ctrl-C would leave tidectl unkillable for as long as the
// HDDs take). The write tier is reloaded instead with a flushing table
// (see flushingTable) and the status polled; when the blocks that were
// dirty have been written back, or when ctx ends, the normal table is
// loaded again. Either way the volume stays in writeback and its cache
// absorbs writes throughout: dm-writecache reads its metadata back on
// load, so a reload drops nothing. Write-back stays bounded by the same
// writeback_jobs as always, so reads still get through.
//
// The node lock is held for the two reloads only, not while the HDDs
// write back: flushes of several volumes run side by side, and other
// commands do not wait for them. The volume's flush lock (flushLockPath)
// says meanwhile that the flushing table is wanted, so that a drift check
// or repair leaves it alone; a command that changes the write tier
// meanwhile (a mode change, tune) wins, and the flush ends early.
func (e *Engine) Flush(ctx context.Context, name string, progress ProgressFunc) (left uint64, err error) {
	wtier := stack.DeviceName(name, stack.RoleWriteTier)
	release, err := e.lockFile(ctx, e.flushLockPath(wtier), "the flush of volume "+name+" already running")
	if err != nil {
		return 0, fmt.Errorf("volume %s: flush: %w", name, err)
	}
	defer release()
	v, flushing, err := e.startFlush(ctx, name, wtier, progress)
	if err != nil || flushing == nil {
		return 0, err
	}
	defer func() {
		// The normal table again, even when ctx was cancelled: the cache
		// goes on absorbing writes with its usual watermarks.
		if eerr := e.endFlush(ctx, name, wtier, flushing); eerr != nil {
			err = errors.Join(err, eerr)
		}
	}()
	return e.waitFlushed(ctx, v, wtier, flushing, progress)
}

// flushLockPath is the lock file a flush of the write tier wtier holds
// while it runs, beside the node lock.
func (e *Engine) flushLockPath(wtier string) string {
	return filepath.Join(filepath.Dir(e.cfg.LockPath), "flush", wtier+".lock")
}

// flushRunning reports whether a live flush (this process or another)
// wants the flushing table on the write tier wtier.
func (e *Engine) flushRunning(wtier string) bool {
	return heldByOther(e.flushLockPath(wtier))
}

// startFlush loads the flushing table on the write tier of volume name,
// under the node lock, and returns it with the volume; a nil table when
// there is nothing to flush.
func (e *Engine) startFlush(ctx context.Context, name, wtier string, progress ProgressFunc) (pool.Volume, dm.Table, error) {
	unlock, p, v, err := e.lockVolume(ctx, name)
	if err != nil {
		return pool.Volume{}, nil, err
	}
	defer unlock()
	if _, err := e.dm.Info(ctx, stack.DeviceName(name, stack.RoleTop)); err != nil {
		return *v, nil, fmt.Errorf("volume %s is not active (%w); run `tidecached assemble` first", name, err)
	}
	_, wc, ok, err := e.writeTier(ctx, name)
	if err != nil || !ok || v.Mode != pool.ModeWriteback {
		// No write tier in this mode: nothing is dirty, nothing to do.
		return *v, nil, err
	}
	if wc.Error != 0 {
		return *v, nil, fmt.Errorf("volume %s: flush: write cache in error state (%d): the SSD failed; dirty data cannot be written back", name, wc.Error)
	}
	if wc.DirtyBlocks() == 0 {
		return *v, nil, nil
	}
	origin, err := e.resolveOrigin(ctx, p.Layout)
	if err != nil {
		return *v, nil, err
	}
	st, err := stack.Build(*v, e.devices(p, origin), e.cfg.Tuning)
	if err != nil {
		return *v, nil, err
	}
	if _, err := e.upgradeStack(ctx, p, *v, st, progress); err != nil {
		return *v, nil, fmt.Errorf("volume %s: flush: %w", name, err)
	}
	d, ok := st.Find(stack.RoleWriteTier)
	if !ok || d.Name != wtier {
		return *v, nil, fmt.Errorf("volume %s: writeback stack without a write tier %s", name, wtier)
	}
	flushing, err := flushingTable(d.Table)
	if err != nil {
		return *v, nil, fmt.Errorf("volume %s: flush: %w", name, err)
	}
	if err := e.reload(ctx, wtier, flushing, nil); err != nil {
		return *v, nil, fmt.Errorf("volume %s: start flush: %w", name, err)
	}
	return *v, flushing, nil
}

// flushEndWait bounds how long the end of a flush waits for the node lock
// to load the normal table again.
const flushEndWait = 2 * time.Minute

// endFlush loads the normal write tier table again, under the node lock,
// if the flushing table is still the one running: a command that changed
// the write tier while the flush waited has the last word. The normal
// table is built from the layout as it is now (a tune meanwhile holds).
func (e *Engine) endFlush(ctx context.Context, name, wtier string, flushing dm.Table) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), flushEndWait)
	defer cancel()
	unlock, p, v, err := e.lockVolume(ctx, name)
	if err != nil {
		return fmt.Errorf("volume %s: end flush: %w (its write tier keeps the flushing table until tidectl volume repair %s, or tidecached's drift check, loads the normal one)", name, err, name)
	}
	defer unlock()
	live, err := e.dm.Table(ctx, wtier)
	if err != nil {
		return nil // the write tier is gone: a mode change removed it
	}
	if same, err := flushing.Equivalent(live, e.disks.devNumber); err != nil || !same {
		return err
	}
	if e.writeTierFailed(ctx, *v, wtier) != nil {
		return nil // never reload a failed write tier (see drain)
	}
	origin, err := e.resolveOrigin(ctx, p.Layout)
	if err != nil {
		return fmt.Errorf("volume %s: end flush: %w", name, err)
	}
	st, err := stack.Build(*v, e.devices(p, origin), e.cfg.Tuning)
	if err != nil {
		return fmt.Errorf("volume %s: end flush: %w", name, err)
	}
	normal, ok := st.Find(stack.RoleWriteTier)
	if !ok {
		return nil
	}
	if err := e.reload(ctx, wtier, normal.Table, nil); err != nil {
		return fmt.Errorf("volume %s: end flush (normal write tier table): %w", name, err)
	}
	return nil
}

// flushingTable is the write tier table t with every block due for
// write-back at once: both watermarks at 0; max_age set, whose timer
// queues write-back again every max_age/16 even when no write arrives (a
// block written again while its write-back ran would otherwise wait for
// the next allocation); and no pause_writeback, so that writes going
// around a full cache do not hold the flush the user asked for. The
// write-back bound (writeback_jobs) is kept.
func flushingTable(t dm.Table) (dm.Table, error) {
	if len(t) != 1 || t[0].Type != "writecache" {
		return nil, fmt.Errorf("write tier table %q is not one writecache target", t.String())
	}
	p, err := dm.ParseWritecacheParams(t[0].Params)
	if err != nil {
		return nil, err
	}
	zero, age, noPause := 0, uint64(flushMaxAge/time.Millisecond), uint64(0)
	p.HighWatermark, p.LowWatermark, p.MaxAgeMs, p.PauseWritebackMs = &zero, &zero, &age, &noPause
	return dm.Table{p.Target(t[0].Start, t[0].Length)}, nil
}

// flushMaxAge is the flushing table's max_age: its timer fires every
// 100 ms.
const flushMaxAge = 1600 * time.Millisecond

// waitFlushed polls the flushing write tier until every block dirty at the
// start has been written back: until no block is dirty, or the blocks
// written back (dirty at start + blocks allocated since the flushing table
// was loaded - dirty now; its counters start at 0) reach the count dirty at
// the start. Write-back takes the oldest blocks first, so by then those
// are the ones written. It returns the dirty blocks left.
func (e *Engine) waitFlushed(ctx context.Context, v pool.Volume, wtier string, flushing dm.Table, progress ProgressFunc) (uint64, error) {
	start := time.Now()
	var first uint64
	rate := 0.0
	var lastWritten uint64
	lastAt := start
	tick := time.NewTicker(e.cfg.PollInterval)
	defer tick.Stop()
	for n := 0; ; n++ {
		wc, ok, err := e.writecacheStatus(ctx, wtier)
		switch {
		case err != nil:
			return 0, fmt.Errorf("volume %s: flush: %w", v.Name, err)
		case !ok:
			return 0, fmt.Errorf("volume %s: flush: its write tier was removed while the flush ran (a mode change, which writes every block back first)", v.Name)
		case wc.Error != 0:
			return 0, fmt.Errorf("volume %s: flush: write cache in error state (%d): the SSD failed; dirty data cannot be written back", v.Name, wc.Error)
		}
		dirty := wc.DirtyBlocks()
		if n == 0 {
			first = dirty
		}
		if live, err := e.dm.Table(context.WithoutCancel(ctx), wtier); err != nil {
			return 0, fmt.Errorf("volume %s: flush: %w", v.Name, err)
		} else if same, err := flushing.Equivalent(live, e.disks.devNumber); err != nil || !same {
			// Without the flushing table, write-back stops at the low
			// watermark: waiting on would wait for nothing.
			return dirty, cmp.Or(err, fmt.Errorf("volume %s: flush ended early: another command (a mode change, tune or repair) changed the write tier while it ran, with %d of %d blocks still to write back", v.Name, first-min(first, flushedSoFar(first, wc.WritesAllocate, dirty)), first))
		}
		written := flushedSoFar(first, wc.WritesAllocate, dirty)
		now := time.Now()
		if dt := now.Sub(lastAt).Seconds(); n > 0 && dt > 0 && written >= lastWritten {
			inst := float64(written-lastWritten) / dt
			if rate == 0 {
				rate = inst
			} else {
				rate = 0.7*rate + 0.3*inst
			}
		}
		lastWritten, lastAt = written, now
		due := first - min(written, first)
		if progress != nil {
			p := Progress{Volume: v.Name, Phase: "flush", DirtyBlocks: due, StartBlocks: first, BlockSize: blockSize(v), BlocksPerSecond: rate, Elapsed: now.Sub(start)}
			if rate > 0 {
				p.ETA = time.Duration(float64(due) / rate * float64(time.Second))
			}
			progress(p)
		}
		if dirty == 0 || written >= first {
			return dirty, nil
		}
		select {
		case <-ctx.Done():
			return dirty, fmt.Errorf("volume %s: flush interrupted with %d of %d blocks still to write back (the volume stays in writeback; nothing is lost): %w", v.Name, due, first, ctx.Err())
		case <-tick.C:
		}
	}
}

// flushedSoFar is how many blocks a flush has written back: those dirty at
// its start, plus those allocated since its table was loaded (its
// counters start at 0), less those dirty now.
func flushedSoFar(first, allocated, dirty uint64) uint64 {
	if first+allocated > dirty {
		return first + allocated - dirty
	}
	return 0
}

// drainStallPolls is how many polls in a row a drain sees dirty blocks
// that are neither fewer nor in write-back before it sends a flush.
const drainStallPolls = 10

// waitClean polls the write tier until it reports no dirty blocks. It
// reports progress with a rate smoothed over the last polls.
func (e *Engine) waitClean(ctx context.Context, v pool.Volume, wtier, phase string, progress ProgressFunc) error {
	start := time.Now()
	var first, last uint64
	stalled := 0 // polls in a row with dirty blocks left and none in write-back
	lastAt := start
	rate := 0.0
	tick := time.NewTicker(e.cfg.PollInterval)
	defer tick.Stop()
	for n := 0; ; n++ {
		wc, ok, err := e.writecacheStatus(ctx, wtier)
		if err != nil {
			return fmt.Errorf("volume %s: %s: %w", v.Name, phase, err)
		}
		if !ok {
			return fmt.Errorf("volume %s: %s: write tier vanished", v.Name, phase)
		}
		if wc.Error != 0 {
			return fmt.Errorf("volume %s: %s: write cache in error state (%d): the SSD failed; dirty data cannot be written back", v.Name, phase, wc.Error)
		}
		dirty := wc.DirtyBlocks()
		now := time.Now()
		if n == 0 {
			first, last = dirty, dirty
		} else if dt := now.Sub(lastAt).Seconds(); dt > 0 && last >= dirty {
			inst := float64(last-dirty) / dt
			if rate == 0 {
				rate = inst
			} else {
				rate = 0.7*rate + 0.3*inst
			}
		}
		if dirty > 0 && dirty >= last && wc.WritebackBlocks == 0 {
			stalled++
		} else {
			stalled = 0
		}
		last, lastAt = dirty, now
		if stalled >= drainStallPolls {
			// In cleaner mode dm-writecache queues its write-back when a
			// block is taken from the free list; a cached block written
			// again while its write-back ran is dirty once more, and
			// nothing may queue the write-back for it. Seen in CI: one
			// block left for minutes under a steady write load. The flush
			// message commits and writes back everything there is.
			e.log.Info("drain: write-back stalled, sending flush", "volume", v.Name, "dirty_blocks", dirty)
			if _, err := e.dm.Message(ctx, wtier, 0, "flush"); err != nil {
				return fmt.Errorf("volume %s: %s: flush after a stalled write-back: %w", v.Name, phase, err)
			}
			stalled = 0
		}
		if progress != nil {
			p := Progress{Volume: v.Name, Phase: phase, DirtyBlocks: dirty, StartBlocks: first, BlockSize: blockSize(v), BlocksPerSecond: rate, Elapsed: now.Sub(start)}
			if rate > 0 {
				p.ETA = time.Duration(float64(dirty) / rate * float64(time.Second))
			}
			progress(p)
		}
		if dirty == 0 && wc.WritebackBlocks == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("volume %s: %s interrupted with %d dirty blocks left: %w", v.Name, phase, dirty, ctx.Err())
		case <-tick.C:
		}
	}
}
