// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"context"
	"fmt"
	"slices"

	"github.com/tidecache/tidecache/pkg/dm"
	"github.com/tidecache/tidecache/pkg/pool"
	"github.com/tidecache/tidecache/pkg/stack"
)

// MovePeerLeg re-protects a peer-protected volume on another node: its
// leg 1 (index 1), or leg 0 of a write cache on peers (index 0), moves to
// leg, a replica the new peer keeps and exports, after the old peer was
// lost or drained. In writeback the new export is attached and the
// running mirror reloaded with it in the leg's place and dm-raid told to
// rebuild that leg in full from the other (the new replica holds nothing
// yet); the volume stays online throughout and its status shows the
// rebuild's progress. The layout then records the new leg, out of sync
// until dm-raid reports it rebuilt (RecordMirrors). In another mode only
// the layout changes: the next switch to writeback builds the mirror on
// the new leg.
//
// The other leg must hold every acknowledged write: a volume whose other
// leg missed writes (failed, or being rebuilt from this one) is refused,
// since the old peer's leg is then the only complete copy. Moving to the
// leg it has already is no change.
//
// The reload comes before the layout record. A crash between the two
// leaves the layout naming the old peer, absent at boot, so the volume
// starts on the other leg alone and the move is made again; the reverse
// order could leave a layout naming a leg that dm-raid was never told to
// rebuild, which it refuses to load beside the other.
func (e *Engine) MovePeerLeg(ctx context.Context, name string, index int, leg pool.RemoteLeg) error {
	unlock, p, v, err := e.lockVolume(ctx, name)
	if err != nil {
		return err
	}
	defer unlock()
	next := p.Layout.Clone()
	changed, err := next.MovePeerLeg(name, index, leg)
	if err != nil {
		return fmt.Errorf("move peer leg %d of volume %s to node %s: %w", index, name, leg.Node, err)
	}
	if !changed {
		return nil
	}
	old := *v.WriteMirror.Remote
	if index == 0 {
		old = *v.WriteMirror.Remote0
	}
	other := 1 - index
	ms, running, err := e.mirrorStatus(ctx, name)
	if err != nil {
		return err
	}
	if running && slices.Contains(outOfSync(ms.RaidStatus), other) {
		return fmt.Errorf("move peer leg %d of volume %s to node %s: leg %d lacks writes (mirror health %s): the leg on node %s may be the only complete copy; bring it back first",
			index, name, leg.Node, other, ms.HealthString(), old.Node)
	}
	origin, err := e.resolveOrigin(ctx, p.Layout)
	if err != nil {
		return err
	}
	nv, _ := next.Volume(name)
	if running {
		if err := e.rebuildOnNewLeg(ctx, p, *nv, index, origin); err != nil {
			return fmt.Errorf("move peer leg %d of volume %s to node %s: %w", index, name, leg.Node, err)
		}
	}
	if err := e.writeLayoutPresent(p, origin, next); err != nil {
		return fmt.Errorf("move peer leg %d of volume %s to node %s: record the new leg: %w", index, name, leg.Node, err)
	}
	// The old peer is gone; its controller (reconnecting, or already
	// given up) is of no more use here.
	if err := e.detachPeerLeg(ctx, old.NQN); err != nil {
		e.log.Warn("old peer leg not detached", "volume", name, "node", old.Node, "nqn", old.NQN, "err", err)
	}
	e.log.Warn("write mirror re-protected on another node: the leg rebuilding from the other",
		"volume", name, "leg", index, "from_node", old.Node, "to_node", leg.Node, "running", running)
	return nil
}

// rebuildOnNewLeg attaches a running mirror's new peer leg (v as the
// layout will record it) and swaps leg index for it in three reloads:
//  1. the mirror without that leg ("- -"), so that dm-raid stops using it;
//  2. the leg's two slices pointed at the new export;
//  3. the mirror with the leg back and a rebuild of it from the other.
//
// Pointing the slices at the new export while dm-raid still counted the
// leg in sync (a healthy old peer, as in a drain) would let it read blocks
// of an empty replica as data.
func (e *Engine) rebuildOnNewLeg(ctx context.Context, p *poolState, v pool.Volume, index int, origin string) error {
	if _, err := e.attachPeerLegs(ctx, p, v); err != nil {
		return err
	}
	st, err := stack.Build(v, e.devices(p, origin), e.cfg.Tuning)
	if err != nil {
		return err
	}
	raid, ok := st.Find(stack.RoleWriteData)
	if !ok || len(raid.Table) != 1 {
		return fmt.Errorf("volume %s: no write mirror in the stack", v.Name)
	}
	params, err := dm.ParseRaid1Params(raid.Table[0].Params)
	if err != nil {
		return err
	}
	if len(params.Legs) != 2 {
		return fmt.Errorf("write mirror %s: want 2 legs, have %d", raid.Name, len(params.Legs))
	}
	length := raid.Table[0].Length
	without := params.WithoutLeg(index)
	if err := e.reload(ctx, raid.Name, dm.Table{without.Target(0, length)}, nil); err != nil {
		return fmt.Errorf("reload write mirror %s without leg %d: %w", raid.Name, index, err)
	}
	roles := map[int][]stack.Role{0: {stack.RoleWriteMeta0, stack.RoleWriteLeg0}, 1: {stack.RoleWriteMeta1, stack.RoleWriteLeg1}}[index]
	for _, d := range st.Devices {
		if !slices.Contains(roles, d.Role) {
			continue
		}
		if err := e.repoint(ctx, d); err != nil {
			return err
		}
	}
	params.Rebuild = []int{index}
	if err := e.reload(ctx, raid.Name, dm.Table{params.Target(0, length)}, nil); err != nil {
		return fmt.Errorf("reload write mirror %s with leg %d to rebuild: %w", raid.Name, index, err)
	}
	return nil
}
