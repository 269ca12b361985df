// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/tidecache/tidecache/pkg/pool"
	"github.com/tidecache/tidecache/pkg/stack"
)

// ObserveRequest says how much of the node Observe reads beyond the
// superblocks, which it always reads once.
type ObserveRequest struct {
	// Volumes limits the per-volume kernel reads (status, drift) to these
	// names; nil reads every volume. A reconcile names its one volume, so
	// a pass costs one scan and that volume's dm ioctls, not every
	// volume's.
	Volumes []string
	// Drift compares the live tables of the volumes read with the stack
	// their layout describes, as CheckVolume does. It locates (and, for
	// an md array, assembles) each pool's origin, so a metrics scrape
	// leaves it off.
	Drift bool
}

// Observation is the node as one scan of the superblocks found it, with
// what the kernel reports about the volumes asked for.
type Observation struct {
	// Pools are every pool found, by name.
	Pools []PoolInfo
	// Volumes are the volumes asked for that exist, by name.
	Volumes []VolumeObservation
	// Corrupt are devices whose superblock cannot be trusted.
	Corrupt []CorruptDevice
}

// VolumeObservation is one volume of an Observation.
type VolumeObservation struct {
	Info VolumeInfo
	// Drift is nil when the live tables match the layout (or drift was
	// not asked for); otherwise the differences as joined *DriftError, or
	// the error that stopped the comparison, as CheckVolume returns them.
	Drift error
}

// Volume returns the observed volume name.
func (o Observation) Volume(name string) (VolumeObservation, bool) {
	i := slices.IndexFunc(o.Volumes, func(v VolumeObservation) bool { return v.Info.Name == name })
	if i < 0 {
		return VolumeObservation{}, false
	}
	return o.Volumes[i], true
}

// Pool returns the observed pool name.
func (o Observation) Pool(name string) (PoolInfo, bool) {
	i := slices.IndexFunc(o.Pools, func(p PoolInfo) bool { return p.Name == name })
	if i < 0 {
		return PoolInfo{}, false
	}
	return o.Pools[i], true
}

// VolumeInfos returns the Info of every observed volume, by name.
func (o Observation) VolumeInfos() []VolumeInfo {
	out := make([]VolumeInfo, len(o.Volumes))
	for i, v := range o.Volumes {
		out[i] = v.Info
	}
	return out
}

// Observe reads every block device's superblock once and returns the
// node's pools and the volumes req asks for, with their kernel status and,
// if asked, their drift. Pools, Pool, Volumes, Volume and CheckVolume each
// scan on their own; a caller that needs several of them (a reconcile
// pass, a metrics scrape) calls Observe instead. It changes nothing.
func (e *Engine) Observe(ctx context.Context, req ObserveRequest) (Observation, error) {
	found, err := e.scan(ctx)
	if err != nil {
		return Observation{}, err
	}
	obs := Observation{Corrupt: found.Corrupt}
	for _, p := range found.sortedPools() {
		obs.Pools = append(obs.Pools, e.poolInfo(p, p.Layout.Origin.Path))
		for i := range p.Layout.Volumes {
			v := &p.Layout.Volumes[i]
			if req.Volumes != nil && !slices.Contains(req.Volumes, v.Name) {
				continue
			}
			vo := VolumeObservation{Info: e.volumeInfo(ctx, p, *v)}
			if req.Drift {
				vo.Drift = e.checkStack(ctx, p, v)
			}
			obs.Volumes = append(obs.Volumes, vo)
		}
	}
	sort.Slice(obs.Volumes, func(i, j int) bool { return obs.Volumes[i].Info.Name < obs.Volumes[j].Info.Name })
	return obs, nil
}

// checkStack is CheckVolume on a volume already found by a scan.
func (e *Engine) checkStack(ctx context.Context, p *poolState, v *pool.Volume) error {
	origin, err := e.resolveOrigin(ctx, p.Layout)
	if err != nil {
		return err
	}
	st, err := stack.Build(*v, e.devices(p, origin), e.cfg.Tuning)
	if errors.Is(err, stack.ErrNoLeg) && v.CacheOnPeers() {
		// A write cache on peers whose legs are not attached (after a
		// boot, whose assembly leaves it to the daemon): its stack is
		// missing, and the repair, which attaches the legs, builds it.
		// As an error, the reconciler would retry the check for ever.
		return &DriftError{Device: stack.DeviceName(v.Name, stack.RoleTop), Want: "the stack on its peer legs",
			Got: "(not built: " + err.Error() + ")"}
	}
	if err != nil {
		return err
	}
	var drift []error
	for _, d := range st.Devices {
		info, err := e.dm.Info(ctx, d.Name)
		if err != nil {
			drift = append(drift, &DriftError{Device: d.Name, Want: d.Table.String(), Got: "(device missing: " + err.Error() + ")"})
			continue
		}
		if info.UUID != d.UUID {
			return fmt.Errorf("device %s has uuid %q, not %q: not tidecache's volume %s", d.Name, info.UUID, d.UUID, v.Name)
		}
		same, got, err := e.sameTable(ctx, d)
		if err != nil {
			return err
		}
		if !same {
			drift = append(drift, &DriftError{Device: d.Name, Want: d.Table.String(), Got: got.String()})
		}
	}
	return errors.Join(drift...)
}
