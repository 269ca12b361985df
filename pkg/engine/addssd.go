// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"context"
	"fmt"

	"github.com/tidecache/tidecache/pkg/blockdev"
	"github.com/tidecache/tidecache/pkg/pool"
	"github.com/tidecache/tidecache/pkg/superblock"
)

// AddSSDRequest asks to add an SSD to a pool.
type AddSSDRequest struct {
	Pool   string
	Device string
	// Force and DestroyPool allow a device with signatures, or one of
	// another pool, as for CreatePoolRequest.
	Force       bool
	DestroyPool string
}

// AddSSD adds an SSD to a pool: its space is then free for the slices of
// new volumes (and for a mirror leg or read cache of existing ones, later).
// The device is checked as pool create checks its devices (unused, no
// signature without Force, no other pool's device without DestroyPool).
//
// The new SSD's superblock is written first, then the other members' and
// the origin's. A power cut in between leaves the newest layout on the new
// SSD, naming every member, and assembly copies it to the members that
// are behind; the other order would leave a layout that names an SSD
// without a superblock, and assembly would refuse the pool as missing it.
// Adding an SSD that is already a member (a second run after a cut) says
// so and changes nothing.
func (e *Engine) AddSSD(ctx context.Context, req AddSSDRequest) (PoolInfo, error) {
	dev, err := blockdev.LookupBlock(req.Device)
	if err != nil {
		return PoolInfo{}, fmt.Errorf("pool %s: add SSD: %w", req.Pool, err)
	}
	unlock, found, p, err := e.lockPool(ctx, req.Pool)
	if err != nil {
		return PoolInfo{}, err
	}
	defer unlock()
	origin, err := e.resolveOrigin(ctx, p.Layout)
	if err != nil {
		return PoolInfo{}, err
	}
	for uuid, path := range p.Members {
		if path == dev.Path {
			if _, listed := p.Layout.Member(uuid); listed {
				e.log.Info("SSD already a member", "pool", req.Pool, "device", dev.Path, "member", uuid)
				return e.poolInfo(p, origin), e.catchUp(p, origin)
			}
		}
	}
	if missing := p.missing(); len(missing) > 0 {
		return PoolInfo{}, fmt.Errorf("pool %s: SSD members %v are missing: bring them back or `tidectl pool force-start %s` before adding one", req.Pool, missing, req.Pool)
	}
	if _, err := e.checkFree(ctx, dev.Path, CreatePoolRequest{Force: req.Force, DestroyPool: req.DestroyPool}, found); err != nil {
		return PoolInfo{}, fmt.Errorf("pool %s: %w", req.Pool, err)
	}
	size, err := blockdev.Size(dev.Path)
	if err != nil {
		return PoolInfo{}, fmt.Errorf("pool %s: %w", req.Pool, err)
	}
	m := pool.Member{UUID: newUUID(), Path: dev.Path, SizeSectors: size / pool.SectorSize}
	next := p.Layout.Clone()
	if err := next.AddMember(m); err != nil {
		return PoolInfo{}, err
	}
	if err := e.wipeSuperblock(dev.Path); err != nil {
		return PoolInfo{}, fmt.Errorf("pool %s: %w", req.Pool, err)
	}
	if err := e.writeSuperblock(dev.Path, superblock.Superblock{Role: superblock.RoleSSD, DeviceUUID: m.UUID, Layout: *next}); err != nil {
		return PoolInfo{}, fmt.Errorf("pool %s: %w", req.Pool, err)
	}
	if err := e.pause(ctx, "add-ssd:new-member"); err != nil {
		return PoolInfo{}, err
	}
	p.Members[m.UUID] = dev.Path
	p.Generations[m.UUID] = next.Generation
	if err := e.writeLayout(p, origin, next); err != nil {
		return PoolInfo{}, err
	}
	e.log.Info("SSD added", "pool", req.Pool, "device", dev.Path, "member", m.UUID, "size_bytes", size, "generation", next.Generation)
	return e.poolInfo(p, origin), nil
}

// catchUp writes the newest layout to the members behind it (an add-ssd
// cut after the new SSD's superblock), which assembly would do too.
func (e *Engine) catchUp(p *poolState, origin string) error {
	if len(p.missing()) > 0 {
		return nil
	}
	for _, gen := range p.Generations {
		if gen != p.Layout.Generation {
			return e.writeLayout(p, origin, p.Layout)
		}
	}
	return nil
}
