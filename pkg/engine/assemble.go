// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/tidecache/tidecache/pkg/pool"
	"github.com/tidecache/tidecache/pkg/stack"
)

// AssembleReport says what boot assembly brought up and what it refused.
type AssembleReport struct {
	Pools   []PoolReport    `json:"pools"`
	Corrupt []CorruptReport `json:"corrupt_devices,omitempty"`
}

// PoolReport is the outcome for one pool.
type PoolReport struct {
	Name  string `json:"name"`
	UUID  string `json:"uuid"`
	Error string `json:"error,omitempty"`
	// Degraded names the missing members of a pool that was assembled
	// without them: they held only write mirror legs, and the volumes run
	// on the other leg until the member is back or replaced.
	Degraded string         `json:"degraded,omitempty"`
	Volumes  []VolumeReport `json:"volumes"`
}

// VolumeReport is the outcome for one volume.
type VolumeReport struct {
	Name   string    `json:"name"`
	Mode   pool.Mode `json:"mode"`
	Device string    `json:"device,omitempty"`
	Error  string    `json:"error,omitempty"`
	// Migrated is set when the volume was running tidecache's older stack
	// (dm-writecache as the top device) and was moved to the current one.
	Migrated bool `json:"migrated,omitempty"`
	// Deferred says why assembly left the volume to the daemon, which
	// starts it once etcd confirms this node owns it (a volume on a
	// shared origin may run on another node since this one was last up)
	// or once it reaches the nodes holding its write cache (a node
	// without SSDs). Not an error.
	Deferred string `json:"deferred,omitempty"`
}

// CorruptReport names a device whose superblock could not be trusted.
type CorruptReport struct {
	Device string `json:"device"`
	Error  string `json:"error"`
}

// ErrAssembleIncomplete is returned when some pool or volume was not
// brought up; the report says which and why.
var ErrAssembleIncomplete = errors.New("assembly incomplete")

// Assemble rebuilds every volume of every pool found on the node's
// devices, using the SSD superblocks alone: no cluster store, no network.
// It is idempotent: volumes already running with the right tables are
// left alone. A pool with a missing or corrupt member is refused as a
// whole, and a volume whose write tier cannot be built is torn down
// again, so an origin that may be missing dirty blocks is never exposed.
func (e *Engine) Assemble(ctx context.Context) (AssembleReport, error) {
	// Refusals are returned in the report, not logged as errors: the
	// caller prints or publishes it (logged at info level for the trail).
	var rep AssembleReport
	unlock, err := e.lock(ctx)
	if err != nil {
		return rep, err
	}
	defer unlock()
	found, err := e.scan(ctx)
	if err != nil {
		return rep, err
	}
	// Start md origins first and look again: an assembled origin's own
	// superblock may carry a newer layout than damaged SSD copies.
	if e.startOrigins(ctx, found) {
		if found, err = e.scan(ctx); err != nil {
			return rep, err
		}
	}
	failed := false
	for _, c := range found.Corrupt {
		rep.Corrupt = append(rep.Corrupt, CorruptReport{Device: c.Path, Error: c.Err.Error()})
		e.log.Info("damaged tidecache superblock", "device", c.Path, "err", c.Err)
		failed = true
	}
	// Before the volumes come up: udev hides the adopted devices' links
	// from then on (the file does not survive where /etc is not kept).
	var adopted []string
	for _, p := range found.sortedPools() {
		for _, path := range p.Adopted {
			adopted = append(adopted, path)
		}
	}
	if err := e.syncAdoptedRules(ctx, layoutsWith(found, nil, nil), "", adopted...); err != nil {
		e.log.Warn("udev rules for adopted devices not written", "err", err)
	}
	for _, p := range found.sortedPools() {
		pr := e.assemblePool(ctx, p, found.Corrupt)
		if pr.Error != "" {
			failed = true
		}
		for _, v := range pr.Volumes {
			if v.Error != "" {
				failed = true
			}
		}
		rep.Pools = append(rep.Pools, pr)
	}
	if failed {
		return rep, ErrAssembleIncomplete
	}
	return rep, nil
}

// startOrigins assembles the md array of every pool that has one and
// reports whether it tried any. Failures are left for resolveOrigin to
// report per pool.
func (e *Engine) startOrigins(ctx context.Context, found scanResult) bool {
	tried := false
	for _, p := range found.sortedPools() {
		if p.Layout.Origin.MDUUID == "" {
			continue
		}
		tried = true
		if _, err := e.md.AssembleByUUID(ctx, p.Layout.Origin.MDUUID, mdName(p.Layout.Origin.Path)); err != nil {
			e.log.Warn("origin array not assembled", "pool", p.Layout.Name, "md_uuid", p.Layout.Origin.MDUUID, "err", err)
		}
	}
	return tried
}

func (e *Engine) assemblePool(ctx context.Context, p *poolState, corrupt []CorruptDevice) PoolReport {
	l := p.Layout
	pr := PoolReport{Name: l.Name, UUID: l.UUID, Volumes: []VolumeReport{}}
	// A missing member refuses the pool: its caches may hold dirty data.
	// The exception is a member that only holds write mirror legs whose
	// other leg is present: that leg has every acknowledged write, so the
	// volumes run degraded (stack.Build leaves the absent leg out).
	missingWhy := ""
	missing := p.missing()
	if len(missing) > 0 {
		var why []string
		for _, uuid := range missing {
			m, _ := l.Member(uuid) // missing() lists members of l
			hint := m.Path
			msg := fmt.Sprintf("SSD member %s (last seen at %s) not found", uuid, hint)
			for _, c := range corrupt {
				if c.Path == hint {
					msg = fmt.Sprintf("SSD member %s: %s has a damaged superblock: %v", uuid, c.Path, c.Err)
				}
			}
			why = append(why, msg)
		}
		missingWhy = strings.Join(why, "; ")
	}
	origin, err := e.resolveOrigin(ctx, l)
	if missingWhy != "" {
		unbuildable := err
		if err == nil {
			unbuildable = needsMissing(p, origin, missing)
		}
		if unbuildable != nil {
			pr.Error = "pool not assembled, its cache may hold dirty data: " + missingWhy + " (" + strings.ReplaceAll(unbuildable.Error(), "\n", "; ") + ")"
			e.log.Info("pool refused", "pool", l.Name, "reason", pr.Error)
			return pr
		}
	}
	if err != nil {
		pr.Error = err.Error()
		e.log.Info("pool refused", "pool", l.Name, "err", err)
		return pr
	}
	if missingWhy != "" {
		pr.Degraded = "write mirrors run on one leg: " + missingWhy
		e.log.Warn("pool degraded", "pool", l.Name, "reason", missingWhy)
	}
	// A member that missed the last update gets the newest layout again
	// (not while a member is missing: the layout can only be recorded on
	// every member).
	for uuid, gen := range p.Generations {
		if missingWhy != "" {
			break
		}
		if gen != l.Generation {
			e.log.Warn("member superblock is behind, rewriting it", "pool", l.Name, "member", uuid, "generation", gen, "newest", l.Generation)
			if err := e.writeLayout(p, origin, l); err != nil {
				pr.Error = err.Error()
				return pr
			}
			break
		}
	}
	for _, v := range l.Volumes {
		vr := VolumeReport{Name: v.Name, Mode: v.Mode}
		switch {
		case v.CanFailOver() || v.FailedOver != nil:
			// Proof of ownership is etcd's: the cluster may have failed
			// the volume over while this node was down, and a copy
			// started here would write stale blocks to the shared origin
			// (which fences this node then anyway). Its daemon attaches
			// the origin and starts it only for a spec that names it.
			vr.Deferred = "on a shared origin: started by tidecached once etcd confirms this node owns it"
		case v.CacheOnPeers() && v.Mode == pool.ModeWriteback:
			// Its write cache is on two other nodes, reached over the
			// network, which boot assembly does not use; the HDDs alone
			// lack the dirty blocks the cache may hold, so the volume is
			// never started on them. Its daemon attaches the legs.
			vr.Deferred = fmt.Sprintf("write cache on nodes %s and %s: started by tidecached once it reaches them (never on the HDDs alone, which lack the writes the cache holds)",
				v.WriteMirror.Remote0.Node, v.WriteMirror.Remote.Node)
		}
		if vr.Deferred != "" {
			e.log.Info("volume left to the daemon", "volume", v.Name, "pool", l.Name, "why", vr.Deferred)
			pr.Volumes = append(pr.Volumes, vr)
			continue
		}
		// An adopted device that was not found, or not the one adopted,
		// is never guessed at: the volume stays down, with the reason.
		err := p.AdoptedErr[v.UUID]
		var st stack.Stack
		if err == nil {
			st, err = stack.Build(v, e.devices(p, origin), e.cfg.Tuning)
		}
		if err == nil {
			// Legs left out miss every write from now on: record that
			// before the mirror runs without them.
			err = e.markAbsentLegs(ctx, p, v, st)
		}
		if err == nil {
			// A volume still running tidecache's older stack is moved
			// to the current one live; if that fails it keeps running
			// as it was, so nothing below may tear it down.
			migrated, uerr := e.upgradeStack(ctx, p, v, st, nil)
			vr.Migrated = migrated
			if uerr != nil {
				vr.Error = uerr.Error()
				e.log.Warn("volume left on its old stack", "volume", v.Name, "pool", l.Name, "err", uerr)
				pr.Volumes = append(pr.Volumes, vr)
				continue
			}
			err = e.activate(ctx, st)
			if err != nil && !isDrift(err) && !errors.Is(err, ErrNoFUAFlush) {
				// Do not leave a half stack: in particular never leave
				// the origin extent reachable without its write tier.
				// (A missing fuaflush target is found before any device
				// is touched: nothing to undo.)
				if rerr := e.removeStack(ctx, v); rerr != nil {
					err = errors.Join(err, rerr)
				}
			}
		}
		if err != nil {
			vr.Error = err.Error()
			e.log.Info("volume not assembled", "volume", v.Name, "pool", l.Name, "err", err)
		} else {
			vr.Device = st.Top().Path()
			e.log.Info("volume assembled", "volume", v.Name, "pool", l.Name, "mode", v.Mode, "device", vr.Device)
		}
		pr.Volumes = append(pr.Volumes, vr)
	}
	// Replicas kept for peers get their devices back; the daemon exports
	// them (ServeReplicas), which needs the network.
	for _, r := range l.Replicas {
		d, err := stack.Replica(r, p.devices(origin))
		if err == nil {
			_, err = e.ensure(ctx, d)
		}
		if err != nil {
			e.log.Warn("replica device not built", "volume", r.Volume, "owner", r.Owner, "pool", l.Name, "err", err)
		}
	}
	return pr
}

// needsMissing returns, for a pool with missing members, why it cannot run
// without them: a volume has an extent on one that is not a write mirror
// leg, or its mirror's only present leg is stale, or a missing member
// holds no mirror leg at all (the exception is for mirrors; a pool with
// any other member missing is refused as a whole, as it always was). nil
// means every missing member holds mirror legs, and only mirror legs,
// whose other, in-sync legs are present.
func needsMissing(p *poolState, origin string, missing []string) error {
	var errs []error
	for _, m := range missing {
		if !holdsMirrorLeg(p.Layout, m) {
			errs = append(errs, fmt.Errorf("SSD member %s holds no write mirror leg", m))
		}
	}
	for _, v := range p.Layout.Volumes {
		if _, err := stack.Build(v, p.devices(origin), stack.Tuning{}); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// holdsMirrorLeg reports whether a member holds a leg of some volume's
// write mirror.
func holdsMirrorLeg(l *pool.Layout, member string) bool {
	for _, v := range l.Volumes {
		if m := v.WriteMirror; m != nil && (v.WriteCache.Member == member || m.Leg.Member == member) {
			return true
		}
	}
	return false
}

func isDrift(err error) bool {
	var d *DriftError
	return errors.As(err, &d)
}
