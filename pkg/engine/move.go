// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/tidecache/tidecache/pkg/dm"
	"github.com/tidecache/tidecache/pkg/stack"
)

// A planned move hands a running volume on a shared origin to the node
// keeping its replica, the cache warm: the old owner stops the volume
// (StopForMove) without writing its cache back, the spec is handed over,
// the new owner takes the volume over from the replica (TakeOver), and the
// old owner drops its copy (ReleaseVolume). Stopping commits
// dm-writecache's metadata through the mirror to both legs, so the
// replica then holds the write cache exactly as the owner left it.

// ErrMirrorNotWhole is returned when a volume's write mirror lacks a leg
// or is resyncing one: its replica may lack acknowledged writes, and the
// volume cannot be handed to the replica's node.
var ErrMirrorNotWhole = errors.New("write mirror not whole")

// StopForMove stops a volume on a shared origin whose replica node to
// takes it over next: it refuses unless the replica is on to and holds
// every acknowledged write (both legs in sync, none recorded behind, no
// I/O held for the peer) and the device is closed; it then removes the
// volume's devices, which commits the write cache on both legs, and
// detaches the peer leg. The layout keeps the volume: until the spec is
// handed over, this node still owns it and can start it again. A volume
// already stopped is checked against its layout alone.
func (e *Engine) StopForMove(ctx context.Context, name, to string) error {
	unlock, p, v, err := e.lockVolume(ctx, name)
	if err != nil {
		return err
	}
	defer unlock()
	m := v.WriteMirror
	switch {
	case v.Adopted == nil || m == nil || m.Remote == nil:
		return fmt.Errorf("volume %s does not cache a shared origin with a peer-mirrored write cache: only such a volume moves", name)
	case m.Remote.Node != to:
		return fmt.Errorf("volume %s: its replica is on node %s, not on node %s: %w", name, m.Remote.Node, to, ErrMirrorNotWhole)
	case len(m.OutOfSync) > 0:
		return fmt.Errorf("volume %s: legs %v of its write mirror are recorded out of sync: %w", name, m.OutOfSync, ErrMirrorNotWhole)
	}
	top := stack.DeviceName(name, stack.RoleTop)
	switch info, err := e.dm.Info(ctx, top); {
	case errors.Is(err, dm.ErrNotFound):
		// Stopped already (a move that was interrupted, or a reboot):
		// the layout, checked above, is all there is to go by.
	case err != nil:
		return fmt.Errorf("volume %s: %w", name, err)
	case info.OpenCount > 0:
		return fmt.Errorf("volume %s: %w: %s is open %d time(s); stop what uses it (unmount it) before the move",
			name, ErrInUse, dm.DevicePath(top), info.OpenCount)
	default:
		ms, ok, err := e.mirrorStatus(ctx, name)
		if err != nil {
			return fmt.Errorf("volume %s: %w", name, err)
		}
		if !ok {
			return fmt.Errorf("volume %s: its write mirror is not running: %w", name, ErrMirrorNotWhole)
		}
		if ms.Degraded || ms.Copies < 2 {
			return fmt.Errorf("volume %s: mirror health %q, %.1f%% in sync: %w", name, ms.HealthString(), ms.SyncPercent, ErrMirrorNotWhole)
		}
		if v.CanFailOver() {
			held, _, err := e.peerSlices(ctx, name)
			if err != nil {
				return fmt.Errorf("volume %s: %w", name, err)
			}
			if held > 0 {
				return fmt.Errorf("volume %s: the peer leg holds %d I/O(s) the peer failed: %w", name, held, ErrMirrorNotWhole)
			}
		}
		// Removing the write tier suspends it first, and dm-writecache
		// commits its metadata on suspend: through the mirror, onto the
		// replica too.
		if err := e.removeStack(ctx, *v); err != nil {
			return err
		}
	}
	if err := e.detachPeerLeg(ctx, m.Remote.NQN); err != nil {
		return fmt.Errorf("volume %s stopped, but its peer leg stays attached: %w", name, err)
	}
	e.log.Info("volume stopped for a planned move: its write cache stays on both legs, nothing written back",
		"volume", name, "pool", p.Layout.Name, "to", to)
	return nil
}
