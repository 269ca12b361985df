// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/store"
	"github.com/tidecache/tidecache/pkg/volmove"
)

func newVolumeMoveCmd(g *Globals) *cobra.Command {
	var to string
	cmd := &cobra.Command{
		Use:   "move NAME --to NODE",
		Short: "Hand a volume on a shared origin to another node, its write cache warm (cluster)",
		Long: `Hand a running volume on a shared origin (volume adopt --shared-origin) to
another node that sees the same origin, keeping its write cache: nothing is
written back to the origin for the move.

The new node takes the volume over from the replica it keeps of the write
cache, which holds every acknowledged write. When NODE does not keep the
replica yet, the replica moves there first (the write cache is copied to
NODE while the volume keeps running); then:

  1. the owner waits until its write mirror is whole and the device is
     closed: stop what uses it (the database, or unmount the file system)
     on the owner, as for any block device that changes host;
  2. it stops the volume, which commits the write cache on both copies,
     and hands the volume over in one etcd transaction;
  3. NODE starts the volume on its replica, dirty blocks included, and
     drops nothing; the old owner drops its own copy. The leader then
     places a new replica, and the write cache is copied onto it.

I/O stops only between 2 and 3. A move is refused while the replica is
recorded outdated (it missed writes), and never touches a volume whose
origin is its node's own. With --wait, progress is shown until the volume
runs on NODE, with the time the handover took.`,
		Example: `  # stop the application on the owner first, then
  tidectl volume move db --to node-b --wait
  # start the application on node-b`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: g.completeVolumes,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := g.needCluster("volume move"); err != nil {
				return err
			}
			if to == "" {
				return usageErrorf("volume move needs --to NODE: the node that takes the volume")
			}
			if err := api.ValidateNodeName(to); err != nil {
				return usageError{fmt.Errorf("--to: %w", err)}
			}
			st, err := g.store(cmd.Context())
			if err != nil {
				return err
			}
			defer st.Close()
			m := mover{g: g, st: st}
			if err := m.request(cmd.Context(), args[0], to); err != nil {
				return err
			}
			if !g.cl.wait {
				fmt.Fprintf(g.Stdout, "volume %s: move to node %s written; add --wait to follow it\n", args[0], to)
				return nil
			}
			return m.follow(cmd.Context(), args[0], to)
		},
	}
	cmd.Flags().StringVar(&to, "to", "", "the node that takes the volume (it must see the volume's shared origin)")
	_ = cmd.RegisterFlagCompletionFunc("to", g.completeNodes)
	return cmd
}

// mover writes a planned move into a volume's spec and follows it.
type mover struct {
	g  *Globals
	st *store.Store
}

// request asks for the move (package volmove), printing what it wrote.
func (m mover) request(ctx context.Context, name, to string) error {
	r, err := volmove.Ask(ctx, m.st, name, to)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return (&clusterBackend{g: m.g, st: m.st}).volumeNotFound(ctx, name)
	case errors.Is(err, volmove.ErrNodeNotLive):
		return suggestListed(err, to, func() ([]string, error) { return liveNodeNames(ctx, m.st) })
	case err != nil:
		return err
	}
	if r.ReplicaPlaced != "" {
		fmt.Fprintf(m.g.Stderr, "volume %s: its replica moves to node %s first (pool %s): the write cache is copied there while the volume runs\n",
			name, to, r.ReplicaPlaced)
	}
	if r.Written {
		fmt.Fprintf(m.g.Stderr, "volume %s: move to node %s written (revision %d); node %s hands it over once the replica holds every write and the device is closed\n",
			name, to, r.Revision, r.Spec.Node)
	}
	return nil
}

// follow shows the move's progress until the volume runs on to, with the
// time from the owner stopping it to to running it (as this command saw
// them, polling), or fails when the move was refused or called off.
// --timeout bounds the time without any change.
func (m mover) follow(ctx context.Context, name, to string) error {
	const poll = 200 * time.Millisecond
	var (
		last    string
		stall   = newStallClock()
		stopped time.Time
	)
	for {
		spec, _, err := m.st.GetVolumeSpec(ctx, name)
		if err != nil {
			return err
		}
		s, _, err := m.st.GetVolumeStatus(ctx, name)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		// The owner writes "moving" as it stops the volume; with an
		// error, it still waits (the device open) and I/O goes on, and
		// the stop seen before did not happen: the handover starts at
		// its next attempt.
		switch {
		case s.State == api.StateMoving && s.Error == "" && stopped.IsZero():
			stopped = time.Now()
		case s.State == api.StateMoving && s.Error != "":
			stopped = time.Time{}
		}
		var line string
		switch {
		case volmove.Arrived(spec, s, to):
			handover := "handed over"
			if !stopped.IsZero() {
				handover = fmt.Sprintf("handed over in %.1f s (I/O stopped from the owner's stop to this node running it)", time.Since(stopped).Seconds())
			}
			fmt.Fprintf(m.g.Stdout, "volume %s runs on node %s: %s; %d dirty blocks kept in its write cache\n", name, to, handover, s.DirtyBlocks)
			return nil
		case volmove.CalledOff(spec, to):
			return fmt.Errorf("volume %s stays on node %s: %s", name, spec.Node, volmove.WhyCalledOff(spec, s, to))
		case spec.Node == to:
			line = fmt.Sprintf("volume %s: handed over; node %s starts it on its replica (%s)", name, to, statusWord(s))
		case s.State == api.StateMoving:
			line = fmt.Sprintf("volume %s on %s: stopping for the move", name, s.Node)
		case s.PeerNode != to:
			line = fmt.Sprintf("volume %s on %s: waiting for its replica on node %s (replica now on %q, mirror %q)", name, s.Node, to, s.PeerNode, s.MirrorHealth)
		default:
			line = fmt.Sprintf("volume %s on %s: waiting for a whole mirror (health %q) and a closed device", name, s.Node, s.MirrorHealth)
		}
		if s.Error != "" {
			line += ": " + s.Error
		}
		stall.observe(line + s.State)
		if line != last {
			fmt.Fprintln(m.g.Stderr, line)
			last = line
		}
		if t := m.g.cl.timeout; stall.stalled(t) {
			return fmt.Errorf("volume %s: no progress of its move to node %s for %v (last: %s)", name, to, t, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(poll):
		}
	}
}

// statusWord is a status's state, or "no status yet".
func statusWord(s api.VolumeStatus) string {
	if s.State == "" {
		return "no status yet"
	}
	return s.State + " on " + s.Node
}
