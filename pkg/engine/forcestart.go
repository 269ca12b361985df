// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tidecache/tidecache/pkg/dm"
	"github.com/tidecache/tidecache/pkg/pool"
	"github.com/tidecache/tidecache/pkg/stack"
)

// ForceStartReport says what starting a pool without its missing SSDs
// changed, and how the assembly that followed went.
type ForceStartReport struct {
	Pool string `json:"pool"`
	// GivenUp lists the missing SSDs, by member UUID and last path.
	GivenUp []MissingMember `json:"given_up"`
	// Volumes lists the volumes that lost a tier, with any data loss.
	Volumes []ForcedVolumeReport `json:"volumes"`
	// Generation is the layout generation written without the missing
	// SSDs; 0 when nothing was written.
	Generation uint64     `json:"generation"`
	Assembly   PoolReport `json:"assembly"`
}

// MissingMember is an SSD of a pool that is not on the node.
type MissingMember struct {
	UUID string `json:"uuid"`
	Path string `json:"last_path"`
}

// ForcedVolumeReport is pool.ForcedVolume for output.
type ForcedVolumeReport struct {
	Name       string    `json:"name"`
	Dropped    []string  `json:"dropped"`
	ModeBefore pool.Mode `json:"mode_before"`
	Mode       pool.Mode `json:"mode"`
	DataLoss   bool      `json:"data_loss"`
}

// ForceStartPool starts a pool that assembly refuses because SSDs are
// missing (dead, or gone for good). The layout is changed first
// (pool.Layout.ForceWithout): tiers on the missing SSDs are dropped,
// volumes without a write tier run in passthrough on the origin, and a
// writeback volume whose write cache is lost is refused unless it is named
// in acceptLoss, which records the loss in the volume. The layout is
// written to the SSDs that are present and the origin, then the pool is
// assembled. Nothing of a missing SSD that no slice uses any more is
// needed again: it leaves the layout, and if it comes back its superblock
// (an older generation) is ignored. A missing SSD that still holds a
// write mirror's leg stays a member; the mirror runs degraded and resyncs
// the leg if the SSD comes back.
//
// It is refused while any volume of the pool runs (a pool assembly
// refused has none) and for a pool with nothing missing.
func (e *Engine) ForceStartPool(ctx context.Context, name string, acceptLoss []string) (ForceStartReport, error) {
	rep := ForceStartReport{Pool: name}
	if err := e.forceLayout(ctx, name, acceptLoss, &rep); err != nil {
		return rep, err
	}
	asm, err := e.Assemble(ctx)
	for _, pr := range asm.Pools {
		if pr.Name == name {
			rep.Assembly = pr
		}
	}
	if err != nil {
		return rep, fmt.Errorf("pool %s: layout written without the missing SSDs, but assembly: %w", name, err)
	}
	return rep, nil
}

func (e *Engine) forceLayout(ctx context.Context, name string, acceptLoss []string, rep *ForceStartReport) error {
	unlock, _, p, err := e.lockPool(ctx, name)
	if err != nil {
		return err
	}
	defer unlock()
	missing := p.missing()
	if len(missing) == 0 {
		return fmt.Errorf("pool %s has every SSD: `tidecached assemble` starts it", name)
	}
	for _, uuid := range missing {
		m, _ := p.Layout.Member(uuid)
		rep.GivenUp = append(rep.GivenUp, MissingMember{UUID: uuid, Path: m.Path})
	}
	for _, v := range p.Layout.Volumes {
		if _, err := e.dm.Info(ctx, stack.DeviceName(v.Name, stack.RoleTop)); err == nil {
			return fmt.Errorf("pool %s: volume %s is running: force-start is for a pool that assembly refused; if its SSD failed while it ran, see the runbook (An SSD reports I/O errors)", name, v.Name)
		} else if !errors.Is(err, dm.ErrNotFound) {
			return fmt.Errorf("pool %s: volume %s: %w", name, v.Name, err)
		}
	}
	origin, err := e.resolveOrigin(ctx, p.Layout)
	if err != nil {
		return err
	}
	next := p.Layout.Clone()
	forced, err := next.ForceWithout(missing, acceptLoss, time.Now())
	if err != nil {
		return fmt.Errorf("pool %s: %w", name, err)
	}
	if err := e.writeLayoutPresent(p, origin, next); err != nil {
		return err
	}
	rep.Generation = next.Generation
	for _, f := range forced {
		rep.Volumes = append(rep.Volumes, ForcedVolumeReport{Name: f.Name, Dropped: f.Dropped, ModeBefore: f.ModeBefore, Mode: f.Mode, DataLoss: f.DataLoss})
		if f.DataLoss {
			e.log.Warn("write cache given up with its dirty blocks (accepted)", "pool", name, "volume", f.Name, "missing", missing)
		}
	}
	e.log.Warn("pool started without missing SSDs", "pool", name, "missing", missing, "generation", next.Generation)
	return nil
}
