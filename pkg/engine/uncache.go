// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"context"
	"fmt"

	"github.com/tidecache/tidecache/pkg/pool"
	"github.com/tidecache/tidecache/pkg/stack"
)

// UncacheVolume keeps a volume and drops its caches: it is drained to
// passthrough first (every dirty block written back, with progress; the
// write tier proven clean while the top device is suspended, as for any
// switch to passthrough), then the layout frees its cache slices. The
// device stays open and mounted throughout: in passthrough its table is
// the origin extent alone, with or without slices in the layout.
//
// It is crash-safe in two steps, each one recorded: a cut before the
// layout is written leaves a volume in passthrough that still owns its
// slices, and running UncacheVolume again finishes; the layout itself is
// written as every layout is (superblock generations). A volume without
// caches is left alone.
func (e *Engine) UncacheVolume(ctx context.Context, name string, progress ProgressFunc) error {
	if err := e.checkUncache(ctx, name); err != nil {
		return err
	}
	if err := e.SetMode(ctx, name, pool.ModePassthrough, progress); err != nil {
		return fmt.Errorf("volume %s: drain before uncaching: %w", name, err)
	}
	unlock, p, v, err := e.lockVolume(ctx, name)
	if err != nil {
		return err
	}
	defer unlock()
	next := p.Layout.Clone()
	if err := next.Uncache(name); err != nil {
		return fmt.Errorf("pool %s: %w", p.Layout.Name, err)
	}
	if next.Generation == p.Layout.Generation {
		e.log.Info("volume has no cache", "volume", name)
		return nil
	}
	origin, err := e.resolveOrigin(ctx, p.Layout)
	if err != nil {
		return err
	}
	after, _ := next.Volume(name)
	want, err := stack.Build(*after, e.devices(p, origin), e.cfg.Tuning)
	if err != nil {
		return err
	}
	// The running stack must already be the one without caches: the
	// slices are freed only once nothing maps them.
	if err := e.activate(ctx, want); err != nil {
		return fmt.Errorf("volume %s: %w", name, err)
	}
	if err := e.writeLayout(p, origin, next); err != nil {
		return err
	}
	e.log.Info("volume uncached: its cache slices are free", "volume", name, "pool", p.Layout.Name,
		"write_cache", extentBytes(v.WriteCache), "read_cache", extentBytes(v.ReadCache))
	return nil
}

// checkUncache refuses, before anything is drained, what Layout.Uncache
// would refuse once drained: an unknown, adopted or peer-protected volume.
func (e *Engine) checkUncache(ctx context.Context, name string) error {
	unlock, p, v, err := e.lockVolume(ctx, name)
	if err != nil {
		return err
	}
	defer unlock()
	probe := p.Layout.Clone()
	if err := probe.SetMode(name, pool.ModePassthrough); err != nil {
		return err
	}
	if err := probe.Uncache(name); err != nil {
		if v.Adopted != nil {
			return fmt.Errorf("%w: `tidectl volume detach %s`", err, name)
		}
		return err
	}
	return nil
}

// extentBytes is the size of an extent for logs; 0 for none.
func extentBytes(x *pool.Extent) uint64 {
	if x == nil {
		return 0
	}
	return x.Length * pool.SectorSize
}
