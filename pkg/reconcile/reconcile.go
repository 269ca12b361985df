// SPDX-License-Identifier: Apache-2.0

package reconcile

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/engine"
	"github.com/tidecache/tidecache/pkg/mdraid"
	"github.com/tidecache/tidecache/pkg/policy"
	"github.com/tidecache/tidecache/pkg/pool"
	"github.com/tidecache/tidecache/pkg/store"
)

// Result says when to reconcile a volume again regardless of changes. The
// zero Result waits for the next change or resync.
type Result struct {
	RequeueAfter time.Duration
}

// terminalError marks an error retrying cannot fix (invalid spec, no such
// pool, no space): the volume is not retried until something changes or
// the next resync.
type terminalError struct{ err error }

func (e *terminalError) Error() string { return e.err.Error() }
func (e *terminalError) Unwrap() error { return e.err }

// Terminal marks err as terminal. Terminal(nil) is nil.
func Terminal(err error) error {
	if err == nil || IsTerminal(err) {
		return err
	}
	return &terminalError{err}
}

// IsTerminal reports whether err was marked terminal.
func IsTerminal(err error) bool {
	var t *terminalError
	return errors.As(err, &t)
}

// classify marks the errors retrying cannot fix as terminal.
func classify(err error) error {
	for _, s := range []error{
		policy.ErrInvalid, store.ErrInvalidRecord, engine.ErrPoolNotFound,
		pool.ErrInvalidRequest, pool.ErrInvalidName, pool.ErrInvalidMode,
		pool.ErrNoSpace, pool.ErrNoWriteCache, pool.ErrTooSmall, pool.ErrVolumeExists,
	} {
		if errors.Is(err, s) {
			return Terminal(err)
		}
	}
	return err
}

// outcome is a reconcile's result for the worker: done means the volume
// needs no worker any more (not this node's, or gone).
type outcome struct {
	res  Result
	err  error
	done bool
}

// Reconcile brings one volume to the state its spec, the effective policy
// and this node's spec ask for, and writes the volume's status. It is
// idempotent and level-based: it reads the desired state from the store
// and the actual state from the engine every time. A non-nil error is
// retried with backoff unless IsTerminal. The controller calls it from the
// volume's worker; other callers must not run it concurrently for the same
// volume.
func (c *Controller) Reconcile(ctx context.Context, name string) (Result, error) {
	out := c.reconcile(ctx, name)
	return out.res, out.err
}

func (c *Controller) reconcile(ctx context.Context, name string) outcome {
	start := time.Now()
	out := c.reconcileVolume(ctx, name)
	result := ResultSuccess
	switch {
	case out.err != nil && IsTerminal(out.err):
		result = ResultTerminalError
		c.log.Error("reconcile failed; not retried until the spec changes or the next resync", "volume", name, "err", out.err)
	case out.err != nil:
		result = ResultError
		c.log.Warn("reconcile failed; retrying", "volume", name, "err", out.err)
	case out.res.RequeueAfter > 0:
		result = ResultRequeueAfter
	}
	c.cfg.Metrics.observe(result, time.Since(start).Seconds())
	return out
}

// state returns the remembered state of a volume, creating it on first
// sight. The flush schedule starts when the controller first sees the
// volume, so a daemon restart does not flush every volume at once. A
// latched SSD error is restored from the status this node wrote before it
// restarted.
func (c *Controller) state(ctx context.Context, name string, now time.Time) (*volState, error) {
	c.mu.Lock()
	vs, ok := c.vols[name]
	c.mu.Unlock()
	if ok {
		return vs, nil
	}
	vs = &volState{lastFlush: now, mediaBase: map[string]uint64{}}
	sctx, cancel := c.storeCtx(ctx)
	prev, _, err := c.store.GetVolumeStatus(sctx, name)
	cancel()
	switch {
	case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrInvalidRecord):
	case err != nil:
		return nil, fmt.Errorf("read previous status: %w", err)
	case prev.Node == c.cfg.Node:
		if vs.latch = policy.LatchFromAlerts(prev.Alerts, prev.ObservedRevision); vs.latch != nil {
			c.log.Warn("SSD error latched before restart still in force", "volume", name, "revision", prev.ObservedRevision, "evidence", vs.latch.Reason)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if cur, ok := c.vols[name]; ok {
		return cur, nil
	}
	c.vols[name] = vs
	return vs, nil
}

// forget drops everything remembered about a volume.
func (c *Controller) forget(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.owned, name)
	delete(c.vols, name)
}

// reconcileVolume reconciles one volume in four steps, each its own
// function so it can be read, and changed, on its own:
//
//   - observe reads the desired state (spec, effective policy, drain flag)
//     from the store and the actual state from one engine read;
//   - decide turns that observation into a plan, without I/O, so every
//     rule can be tested on the host without etcd or an engine;
//   - act carries the plan out through the engine, in a fixed order;
//   - report writes the volume's status from what the engine says last.
//
// A step that fails reports the error in the status and ends the pass.
func (c *Controller) reconcileVolume(ctx context.Context, name string) outcome {
	spec, rev, out, ok := c.load(ctx, name)
	if !ok {
		return out
	}
	st := api.VolumeStatus{Name: name, ObservedRevision: rev}
	if spec.SharedOrigin != nil {
		// The origin must be attached before the volume can be read
		// whole or started: after a reboot nothing attaches it but this,
		// and only for a node the spec names.
		if _, err := c.attachSharedOrigin(ctx, spec); err != nil {
			// A volume not created yet says what it waits for when the
			// pass comes to create it.
			if _, verr := c.engine.Volume(ctx, name); verr == nil {
				return c.fail(ctx, st, fmt.Errorf("shared origin: %w", err), nil)
			}
		}
	}
	obs, vs, err := c.observe(ctx, spec, rev)
	if err != nil {
		return c.fail(ctx, st, err, obs.actualPtr())
	}
	if spec.MoveTo != "" {
		if out, ok := c.moveOut(ctx, obs, st); ok {
			return out
		}
	}
	p, err := decide(obs, c.cfg.DriftPolicy, c.cfg.ResyncInterval)
	if err != nil {
		return c.fail(ctx, st, err, obs.actualPtr())
	}
	return c.act(ctx, obs, vs, p, st)
}

// load reads the volume's spec and settles whether this node manages the
// volume. ok is false when the pass ends here, with out.
func (c *Controller) load(ctx context.Context, name string) (spec api.VolumeSpec, rev int64, out outcome, ok bool) {
	sctx, cancel := c.storeCtx(ctx)
	spec, meta, err := c.store.GetVolumeSpec(sctx, name)
	cancel()
	switch {
	case errors.Is(err, store.ErrNotFound):
		c.cfg.Metrics.setClaim(name, nil)
		c.mu.Lock()
		delete(c.released, name)
		c.mu.Unlock()
		return spec, 0, c.reconcileDeleted(ctx, name), false
	case errors.Is(err, store.ErrInvalidRecord):
		// A malformed spec: leave the volume as it is and say why, if it
		// is ours. Its next valid write triggers a reconcile.
		c.mu.Lock()
		_, mine := c.owned[name]
		c.mu.Unlock()
		if !mine {
			return spec, 0, outcome{done: true}, false
		}
		// No status can be written: the store checks ownership against
		// the spec it cannot read. The log and the error metric report it.
		return spec, 0, outcome{err: Terminal(fmt.Errorf("volume spec unreadable, volume left as it is: %w", err))}, false
	case err != nil:
		return spec, 0, outcome{err: fmt.Errorf("read volume spec: %w", err)}, false
	}
	if spec.Node != c.cfg.Node {
		c.mu.Lock()
		_, was := c.owned[name]
		c.known[name] = spec.Node
		c.mu.Unlock()
		if was && spec.MovedFrom != c.cfg.Node {
			c.log.Warn("volume spec now names another node: this node stops managing the volume and leaves its devices as they are",
				"volume", name, "spec_node", spec.Node)
		}
		c.forget(name)
		c.cfg.Metrics.setClaim(name, nil)
		if spec.MovedFrom == c.cfg.Node {
			if err := c.releaseMoved(ctx, spec); err != nil {
				return spec, 0, outcome{err: err}, false
			}
		}
		return spec, 0, c.reconcileReplica(ctx, spec), false
	}
	c.mu.Lock()
	c.owned[name] = meta.ModRevision
	c.known[name] = spec.Node
	delete(c.released, name)
	c.mu.Unlock()
	c.cfg.Metrics.setClaim(name, spec.Claim)
	return spec, meta.ModRevision, outcome{}, true
}

// fail marks err terminal if retrying cannot fix it and reports it in the
// volume's status (st as far as the pass got), with actual when known.
func (c *Controller) fail(ctx context.Context, st api.VolumeStatus, err error, actual *engine.VolumeInfo) outcome {
	err = classify(err)
	st.State, st.Error = api.StateError, err.Error()
	return outcome{err: errors.Join(err, c.putStatus(ctx, st, actual))}
}

// desired reads the effective policy and the node's drain flag for spec.
func (c *Controller) desired(ctx context.Context, spec api.VolumeSpec) (api.Policy, bool, error) {
	sctx, cancel := c.storeCtx(ctx)
	defer cancel()
	pols, _, invalid, err := c.store.ListPolicies(sctx)
	if err != nil {
		return api.Policy{}, false, fmt.Errorf("read policies: %w", err)
	}
	var def, named *api.Policy
	for i := range pols {
		switch pols[i].Value.Name {
		case api.DefaultPolicy:
			def = &pols[i].Value
		case spec.Policy:
			named = &pols[i].Value
		}
	}
	if spec.Policy != "" && spec.Policy != api.DefaultPolicy && named == nil {
		// Acting without the policy the user named could undo what it
		// asks for: leave the volume as it is until the policy exists.
		for _, r := range invalid {
			if strings.HasSuffix(r.Key, "/"+spec.Policy) {
				return api.Policy{}, false, Terminal(fmt.Errorf("policy %s is malformed, volume left as it is: %w", spec.Policy, r))
			}
		}
		return api.Policy{}, false, Terminal(fmt.Errorf("policy %s does not exist, volume left as it is", spec.Policy))
	}
	ns, _, err := c.store.GetNodeSpec(sctx, c.cfg.Node)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return api.Policy{}, false, fmt.Errorf("read node spec: %w", err)
	}
	return policy.Effective(def, named), ns.Drain, nil
}

// ssdFacts returns the health of the SSDs of a volume's pool. Media-error
// counters are cumulative, so each SSD's count when the controller first
// sees it for this volume is taken as already acknowledged, and the
// baseline moves to the current count when the operator acknowledges an
// SSD error (acked).
func (c *Controller) ssdFacts(ctx context.Context, name, poolName string, vs *volState, acked bool) []policy.SSD {
	if c.cfg.SSDs == nil {
		return nil
	}
	inv, err := c.cfg.SSDs.SSDs(ctx)
	if err != nil {
		c.log.Warn("SSD health unavailable; deciding without it", "volume", name, "err", err)
		return nil
	}
	var out []policy.SSD
	for _, s := range inv {
		if poolName == "" || s.Pool != poolName {
			continue
		}
		key := s.Serial
		if key == "" {
			key = s.Path
		}
		base, seen := vs.mediaBase[key]
		if !seen || acked || s.MediaErrors < base {
			if !seen && s.MediaErrors > 0 {
				c.log.Info("SSD has media errors from before this daemon watched it; only new ones count",
					"volume", name, "ssd", s.Path, "media_errors", s.MediaErrors)
			}
			base = s.MediaErrors
			vs.mediaBase[key] = base
		}
		out = append(out, policy.SSD{Path: s.Path, WearPercent: s.WearPercent, MediaErrors: s.MediaErrors - base, CriticalWarning: s.CriticalWarning})
	}
	return out
}

// originFacts returns the health of the pool's md origin array from sysfs;
// nil when the pool is not observed, its origin is not an md array, or it
// cannot be read (logged: the decision is taken without it).
func (c *Controller) originFacts(name string, p engine.PoolInfo, ok bool) *policy.Origin {
	if !ok || p.Origin.MDUUID == "" {
		return nil
	}
	h, err := mdraid.Manager{}.Health(p.Origin.Path)
	if err != nil {
		c.log.Warn("origin array health unavailable; deciding without it", "volume", name, "origin", p.Origin.Path, "err", err)
		return nil
	}
	o := &policy.Origin{Device: h.Device, Members: h.RaidDisks, Degraded: h.Degraded, Failed: h.FailedDevices,
		SyncAction: h.SyncAction, SyncProgress: -1}
	if r, ok := h.SyncProgress(); ok {
		o.SyncProgress = r
	}
	return o
}

// create creates a missing volume in the mode decided.
func (c *Controller) create(ctx context.Context, spec api.VolumeSpec, d policy.Decision, p plan, st api.VolumeStatus) outcome {
	if spec.SharedOrigin != nil {
		return c.createShared(ctx, spec, d, st)
	}
	if spec.Adopted {
		// Made by tidectl volume adopt, with data on it: creating it here
		// would carve an empty volume under its name.
		err := Terminal(fmt.Errorf("volume %s caches a device adopted on this node and is not here (its pool not assembled, or the device missing): "+
			"find the device and run `tidecached assemble`, or adopt it again with tidectl volume adopt on this node", spec.Name))
		st.State, st.Error = api.StateError, err.Error()
		return outcome{err: errors.Join(err, c.putStatus(ctx, st, nil))}
	}
	tuning := p.tuning
	req := pool.VolumeRequest{
		Name: spec.Name, Size: spec.SizeBytes, WriteCache: spec.WriteCacheBytes, ReadCache: spec.ReadCacheBytes,
		Mode: d.Mode, BlockSize: spec.BlockSize, ReadBlockSize: spec.ReadBlockSize,
		FUAWindow: spec.AllowFUAWindow, Protect: cmp.Or(pool.Protection(spec.Protect), p.protect),
	}
	if req.WriteCache == 0 && spec.Protect == "" {
		req.Protect = "" // a policy's protection concerns write caches only
	}
	switch {
	case req.Protect != "" || req.WriteCache == 0:
	case p.noSSDs:
		// A write cache on a node without SSD is on two peers or nowhere.
		req.Protect = pool.ProtectPeer
	default:
		peer, err := c.defaultPeer(ctx, spec)
		if err != nil {
			return outcome{err: err}
		}
		if peer {
			req.Protect = pool.ProtectPeer
		}
	}
	if req.Protect == pool.ProtectPeer {
		// Not an error of this volume while it waits: the replicas are
		// on their way.
		wait := func(err error) outcome {
			st.State, st.Error = api.StateCreating, err.Error()
			c.log.Info("volume waits for its peer replica", "volume", spec.Name, "why", err)
			return outcome{res: Result{RequeueAfter: replicaWait}, err: c.putStatus(ctx, st, nil)}
		}
		if spec.ReplicaNode0 != "" || p.noSSDs {
			leg0, err := c.peerLeg0(ctx, spec)
			if err != nil {
				return wait(err)
			}
			req.Peer0 = &leg0
		}
		leg, err := c.peerLeg(ctx, spec)
		if err != nil {
			return wait(err)
		}
		req.Peer = &leg
	}
	st.State = api.StateCreating
	if err := c.putStatus(ctx, st, nil); err != nil {
		return outcome{err: err}
	}
	c.log.Info("creating volume", "volume", spec.Name, "pool", spec.Pool, "mode", d.Mode, "revision", st.ObservedRevision)
	info, err := c.engine.CreateVolume(ctx, spec.Pool, req)
	if err != nil {
		err = classify(fmt.Errorf("create volume: %w", err))
		st.State, st.Error = api.StateError, err.Error()
		return outcome{err: errors.Join(err, c.putStatus(ctx, st, nil))}
	}
	if !tuning.Equal(info.Tuning) {
		if _, err := c.engine.SetTuning(ctx, spec.Name, tuning); err != nil {
			st.State, st.Error = api.StateError, fmt.Sprintf("apply policy tuning: %v", err)
			return outcome{err: errors.Join(err, c.putStatus(ctx, st, &info))}
		}
		if info, err = c.engine.Volume(ctx, spec.Name); err != nil {
			return outcome{err: fmt.Errorf("read volume: %w", err)}
		}
	}
	st.State = ""
	return outcome{res: Result{RequeueAfter: d.FlushIn}, err: c.putStatus(ctx, st, &info)}
}

// mismatch describes spec fields the existing volume does not match and
// that cannot be changed in place, "" when there are none. A larger size
// is not one: the volume grows to it (plan.grow).
func mismatch(spec api.VolumeSpec, v engine.VolumeInfo) string {
	var diffs []string
	if spec.Pool != "" && spec.Pool != v.Pool {
		diffs = append(diffs, fmt.Sprintf("pool %s, spec asks %s", v.Pool, spec.Pool))
	}
	for _, f := range []struct {
		what      string
		spec, got uint64
	}{
		{"size", spec.SizeBytes, v.SizeBytes},
		{"write cache", spec.WriteCacheBytes, v.WriteCacheBytes},
		{"read cache", spec.ReadCacheBytes, v.ReadCacheBytes},
	} {
		if f.what == "size" && spec.CachesWhole() {
			continue // cached whole: the size is the device's
		}
		if f.what == "size" && up(f.spec) > f.got {
			continue // grown in place (plan.grow)
		}
		if f.what == "size" && up(f.spec) < f.got {
			diffs = append(diffs, fmt.Sprintf("size %d bytes, spec asks %d (volumes only grow)", f.got, f.spec))
			continue
		}
		if up(f.spec) != f.got {
			diffs = append(diffs, fmt.Sprintf("%s %d bytes, spec asks %d", f.what, f.got, f.spec))
		}
	}
	// 0 in the spec means the node's default, whatever the volume has.
	if spec.ReadBlockSize != 0 && spec.ReadBlockSize != v.ReadBlockSize {
		diffs = append(diffs, fmt.Sprintf("read block size %d bytes, spec asks %d", v.ReadBlockSize, spec.ReadBlockSize))
	}
	// An empty protection lets the node choose; a named one must match.
	// A volume taken over from its replica has one copy by force, which
	// the mirror rule reports (failedOverFacts).
	if want, got := pool.Protection(spec.Protect), cmp.Or(v.Protection, pool.ProtectNone); want != "" && want != got && v.TakenOverFrom() == "" {
		diffs = append(diffs, fmt.Sprintf("protection %s, spec asks %s", got, want))
	}
	if spec.AllowFUAWindow != v.FUAWindow {
		diffs = append(diffs, fmt.Sprintf("FUA window allowed %t, spec asks %t", v.FUAWindow, spec.AllowFUAWindow))
	}
	if len(diffs) == 0 {
		return ""
	}
	return "volume differs from its spec (not changed in place; recreate the volume to change it): " + strings.Join(diffs, "; ")
}

// up rounds a spec's size up to the allocator's alignment, as the volume
// built from it is.
func up(b uint64) uint64 { return pool.BytesToSectors(b) * pool.SectorSize }

// collectDrift gathers the *engine.DriftError leaves of a joined error.
func collectDrift(err error, out *[]*engine.DriftError) {
	if err == nil {
		return
	}
	if d, ok := err.(*engine.DriftError); ok {
		*out = append(*out, d)
		return
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			collectDrift(e, out)
		}
		return
	}
	if u := errors.Unwrap(err); u != nil {
		collectDrift(u, out)
	}
}

// reconcileDeleted handles a volume without a spec. If this node owned it,
// a user deleted the spec: the volume is deleted, but only once its write
// tier is clean (it is flushed first) and nobody has it open. A volume
// this node never owned is left alone (reported by the resync). The store
// deletes a volume's status with its spec, so progress and refusals here
// are reported in the log and the error metric only.
func (c *Controller) reconcileDeleted(ctx context.Context, name string) outcome {
	if out, kept := c.dropReplica(ctx, name); kept {
		return out
	}
	c.mu.Lock()
	_, owned := c.owned[name]
	delete(c.known, name)
	c.mu.Unlock()
	_, err := c.engine.Volume(ctx, name)
	switch {
	case errors.Is(err, engine.ErrVolumeNotFound):
		c.forget(name)
		return outcome{done: true}
	case err != nil:
		return outcome{err: fmt.Errorf("read volume: %w", err)}
	case !owned:
		return outcome{done: true}
	}
	err = c.engine.DeleteVolume(ctx, name, false)
	switch {
	case err == nil:
		c.log.Info("volume deleted: its spec was removed", "volume", name)
		c.forget(name)
		return outcome{done: true}
	case errors.Is(err, engine.ErrDirty):
		c.log.Info("spec removed: flushing the volume's write tier before deleting it", "volume", name)
		if _, err := c.engine.Flush(ctx, name, nil); err != nil {
			return outcome{err: fmt.Errorf("spec removed; delete waits for a clean write tier, flush failed: %w", err)}
		}
		// Delete right away; if new writes dirtied it again, this repeats.
		return outcome{res: Result{RequeueAfter: time.Millisecond}}
	case errors.Is(err, engine.ErrInUse):
		return outcome{res: Result{RequeueAfter: c.cfg.ResyncInterval},
			err: Terminal(fmt.Errorf("spec removed; delete waits until the volume is no longer open: %w", err))}
	default:
		return outcome{err: fmt.Errorf("spec removed; delete volume: %w", err)}
	}
}

// putStatus fills st from the volume's actual state (when known) and
// writes it. A failed write is returned as a transient error: the status
// is rewritten by the retry.
func (c *Controller) putStatus(ctx context.Context, st api.VolumeStatus, actual *engine.VolumeInfo) error {
	st.Node = c.cfg.Node
	st.UpdatedAt = time.Now().UTC()
	if actual != nil {
		st.Mode, st.SizeBytes = string(actual.Mode), actual.SizeBytes
		if st.State == "" {
			st.State = actual.State
		}
		switch {
		case st.Error == "":
			st.Error = actual.Error
		case actual.Error != "":
			st.Error += "; " + actual.Error
		}
		if wc := actual.WriteCache; wc != nil {
			st.DirtyBlocks, st.DirtyBytes = wc.DirtyBlocks, wc.DirtyBytes
			st.ReadHitRatio, st.WriteHitRatio = wc.ReadHitRatio, wc.WriteHitRatio
		}
		if rc := actual.ReadCache; rc != nil {
			st.ReadHitRatio = rc.ReadHitRatio
		}
		st.Protection, st.PeerNode, st.PeerNode0 = string(actual.Protection), actual.PeerNode, actual.PeerNode0
		if l := actual.WritebackLimit; l != nil {
			st.WritebackJobs, st.WritebackLimitReason = l.Jobs, l.Source+": "+l.Reason
			st.WritebackWatermarks = l.Watermarks()
		}
		if m := actual.Mirror; m != nil {
			st.MirrorCopies, st.MirrorHealth = m.Copies, m.HealthString()
		}
	}
	if st.State == "" && st.Error != "" {
		st.State = api.StateError
	}
	sctx, cancel := c.storeCtx(ctx)
	defer cancel()
	if err := c.store.PutVolumeStatus(sctx, st); err != nil {
		return fmt.Errorf("write status: %w", err)
	}
	return nil
}

// withProgress runs a long engine step (drain, flush) and rewrites the
// volume's status every ProgressInterval with the dirty blocks left, so
// `tidectl --wait` can show progress.
func (c *Controller) withProgress(ctx context.Context, st api.VolumeStatus, actual *engine.VolumeInfo, state string, run func(engine.ProgressFunc) error) error {
	var mu sync.Mutex
	var last *engine.Progress
	progress := func(p engine.Progress) {
		mu.Lock()
		last = &p
		mu.Unlock()
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(c.cfg.ProgressInterval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			mu.Lock()
			p := last
			mu.Unlock()
			if p == nil {
				continue
			}
			s := st
			s.State = state
			var a engine.VolumeInfo
			if actual != nil {
				a = *actual
			}
			a.State, a.Error = state, ""
			if a.WriteCache != nil {
				wc := *a.WriteCache
				wc.DirtyBlocks, wc.DirtyBytes = p.DirtyBlocks, p.DirtyBlocks*uint64(p.BlockSize)
				a.WriteCache = &wc
			}
			if err := c.putStatus(ctx, s, &a); err != nil {
				c.log.Debug("progress status not written", "volume", st.Name, "err", err)
			}
		}
	})
	err := run(progress)
	close(done)
	wg.Wait()
	return err
}

// policyTuning is the write-tier tuning an effective policy asks for; nil
// when it sets none (node defaults).
func policyTuning(p api.Policy) *pool.Tuning {
	t := &pool.Tuning{HighWatermark: p.HighWatermark, LowWatermark: p.LowWatermark, WritebackJobs: p.WritebackJobs,
		AutocommitTimeMs: p.AutocommitTimeMs}
	if t.Empty() {
		return nil
	}
	return t
}
