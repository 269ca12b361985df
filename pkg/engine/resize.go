// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"context"
	"fmt"

	"github.com/tidecache/tidecache/pkg/pool"
	"github.com/tidecache/tidecache/pkg/stack"
)

// ResizeVolume grows a volume to size bytes, live: its last origin extent
// grows in place, or the volume gets further extents where the origin has
// room (pool.Layout.GrowVolume; data never moves). The last MiB of the new
// space is zeroed (signatures a deleted volume left there), the new size
// is recorded, then every device of its stack is reloaded bottom-up with
// the longer tables (each suspended for a moment; caches keep their
// contents). The filesystem on it is the user's to grow (resize2fs,
// xfs_growfs), online.
//
// A cut after the layout is written leaves tables of the old size until
// assembly builds them from the layout: the new space is only used once
// the filesystem is grown, after this returns.
func (e *Engine) ResizeVolume(ctx context.Context, name string, size uint64) (VolumeInfo, error) {
	unlock, p, v, err := e.lockVolume(ctx, name)
	if err != nil {
		return VolumeInfo{}, err
	}
	defer unlock()
	next := p.Layout.Clone()
	if err := next.GrowVolume(name, size); err != nil {
		return VolumeInfo{}, fmt.Errorf("pool %s: %w", p.Layout.Name, err)
	}
	grown, _ := next.Volume(name)
	if next.Generation == p.Layout.Generation {
		return e.volumeInfo(ctx, p, *v), nil
	}
	origin, err := e.resolveOrigin(ctx, p.Layout)
	if err != nil {
		return VolumeInfo{}, err
	}
	st, err := stack.Build(*grown, e.devices(p, origin), e.cfg.Tuning)
	if err != nil {
		return VolumeInfo{}, err
	}
	if _, err := e.dm.Info(ctx, st.Top().Name); err != nil {
		return VolumeInfo{}, fmt.Errorf("volume %s is not active (%w); run `tidecached assemble` first", name, err)
	}
	if err := e.wipeGrownEnd(origin, *grown, v.SizeSectors()); err != nil {
		return VolumeInfo{}, err
	}
	if err := e.writeLayout(p, origin, next); err != nil {
		return VolumeInfo{}, err
	}
	for _, d := range st.Devices {
		if err := e.repoint(ctx, d); err != nil {
			return VolumeInfo{}, fmt.Errorf("volume %s recorded at its new size, but %s: %w (tidectl volume repair %s)", name, d.Name, err, name)
		}
	}
	e.log.Info("volume grown", "volume", name, "pool", p.Layout.Name, "from_bytes", v.SizeSectors()*pool.SectorSize, "to_bytes", grown.SizeSectors()*pool.SectorSize, "origin_extents", len(grown.OriginTail)+1)
	return e.volumeInfo(ctx, p, *grown), nil
}
