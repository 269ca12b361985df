// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"context"
	"fmt"

	"github.com/tidecache/tidecache/pkg/pool"
	"github.com/tidecache/tidecache/pkg/stack"
)

// SetTuning sets a volume's write-tier tuning (watermarks, write-back
// jobs, autocommit time, the readfirst layer's hold bound; nil returns to
// the node defaults). It is recorded
// in the superblocks and, when the volume is in writeback, applied by reloading
// the writecache table with the same cache device: dm-writecache reads its
// metadata back on load, so no dirty block is dropped and nothing needs to
// drain. The new tuning is recorded while the device is suspended, before
// the new table goes live, like a mode change. The same tuning again is a
// no-op. It reports whether anything changed.
func (e *Engine) SetTuning(ctx context.Context, name string, t *pool.Tuning) (bool, error) {
	if err := t.Validate(); err != nil {
		return false, fmt.Errorf("volume %s: %w", name, err)
	}
	unlock, p, v, err := e.lockVolume(ctx, name)
	if err != nil {
		return false, err
	}
	defer unlock()
	if v.Tuning.Equal(t) {
		return false, nil
	}
	next := p.Layout.Clone()
	if err := next.SetTuning(name, t); err != nil {
		return false, err
	}
	origin, err := e.resolveOrigin(ctx, p.Layout)
	if err != nil {
		return false, err
	}
	nv, _ := next.Volume(name)
	if v.Mode != pool.ModeWriteback {
		// No write tier running: the tuning applies when it comes back.
		return true, e.writeLayout(p, origin, next)
	}
	devs := e.devices(p, origin)
	cur, err := stack.Build(*v, devs, e.cfg.Tuning)
	if err != nil {
		return false, err
	}
	if _, err := e.upgradeStack(ctx, p, *v, cur, nil); err != nil {
		return false, err
	}
	st, err := stack.Build(*nv, devs, e.cfg.Tuning)
	if err != nil {
		return false, err
	}
	if err := e.swapWriteTier(ctx, *nv, st, func(context.Context) error {
		return e.writeLayout(p, origin, next)
	}); err != nil {
		return false, fmt.Errorf("volume %s: apply tuning: %w", name, err)
	}
	wtier, _ := st.Find(stack.RoleWriteTier)
	e.log.Info("tuning applied", "volume", name, "table", wtier.Table.String())
	return true, nil
}
