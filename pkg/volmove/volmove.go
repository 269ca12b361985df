// SPDX-License-Identifier: Apache-2.0

// Package volmove asks for a planned move of a volume on a shared origin
// to another node (spec.moveTo), for tidectl volume move and the CSI
// driver's ControllerPublishVolume alike. It checks the target before
// anything is written, places the replica on the target first when it is
// elsewhere, and writes the request; the owner's daemon carries the move
// out (package reconcile) and the caller follows it in the status.
package volmove

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/placement"
	"github.com/tidecache/tidecache/pkg/store"
)

var (
	// ErrNotShared: the volume caches an origin of its own node's, which
	// no other node sees.
	ErrNotShared = errors.New("only a volume on a shared origin (volume adopt --shared-origin) moves between nodes")
	// ErrNodeNotLive: the target is not registered (down, or no node).
	ErrNodeNotLive = errors.New("a volume moves only to a live node")
	// ErrNodeUnfit: the target is fenced, drained, or cannot keep the
	// replica. Its errors say which, without its text.
	ErrNodeUnfit = errors.New("the node cannot take the volume")
	// ErrMoving: another move of the volume is under way.
	ErrMoving = errors.New("another move of the volume is under way")
)

// unfitError is an ErrNodeUnfit that says why in its own words.
type unfitError struct{ error }

func (unfitError) Is(target error) bool { return target == ErrNodeUnfit }
func (e unfitError) Unwrap() error      { return e.error }

func unfit(format string, a ...any) error { return unfitError{fmt.Errorf(format, a...)} }

// Store is the part of *store.Store a request uses.
type Store interface {
	GetVolumeSpec(ctx context.Context, name string) (api.VolumeSpec, store.Meta, error)
	UpdateVolumeSpec(ctx context.Context, spec api.VolumeSpec, expectModRevision int64) (store.Meta, error)
	GetNode(ctx context.Context, name string) (api.Node, store.Meta, error)
	GetFence(ctx context.Context, node string) (api.Fence, store.Meta, error)
	GetNodeSpec(ctx context.Context, node string) (api.NodeSpec, store.Meta, error)
}

// Request is what Ask did.
type Request struct {
	// Spec is the volume's spec as it stands after the call.
	Spec api.VolumeSpec
	// Written is set when the call wrote the spec (false: the move was
	// asked for already, or the volume runs on the target).
	Written bool
	// Revision is the spec's revision written, when Written.
	Revision int64
	// ReplicaPlaced names the target's pool the replica moves to first,
	// when it was elsewhere.
	ReplicaPlaced string
}

// Ask asks for volume name to move to node to. It is idempotent: a move
// to the same node already asked for, or a volume already there, writes
// nothing. ErrNotShared, ErrNodeNotLive, ErrNodeUnfit and ErrMoving say
// why a move cannot be asked for; store.ErrNotFound that the volume does
// not exist; store.ErrConflict that the spec changed meanwhile (ask
// again).
func Ask(ctx context.Context, st Store, name, to string) (Request, error) {
	spec, meta, err := st.GetVolumeSpec(ctx, name)
	if err != nil {
		return Request{}, err
	}
	switch {
	case spec.SharedOrigin == nil:
		return Request{Spec: spec}, fmt.Errorf("volume %s caches an origin of node %s's own, which no other node sees: %w", name, spec.Node, ErrNotShared)
	case spec.MoveTo == to, spec.Node == to && spec.MoveTo == "":
		return Request{Spec: spec}, nil
	case spec.MoveTo != "":
		return Request{Spec: spec}, fmt.Errorf("volume %s is moving to node %s already (%w): let it end first", name, spec.MoveTo, ErrMoving)
	}
	n, _, err := st.GetNode(ctx, to)
	if errors.Is(err, store.ErrNotFound) {
		return Request{Spec: spec}, fmt.Errorf("node %s is not registered (down, or no such node): %w", to, ErrNodeNotLive)
	}
	if err != nil {
		return Request{Spec: spec}, err
	}
	if _, _, err := st.GetFence(ctx, to); err == nil {
		return Request{Spec: spec}, unfit("node %s is fenced until it has released what failed over and the fence is lifted", to)
	} else if !errors.Is(err, store.ErrNotFound) {
		return Request{Spec: spec}, err
	}
	if ns, _, err := st.GetNodeSpec(ctx, to); err == nil && ns.Drain {
		return Request{Spec: spec}, unfit("node %s is drained for maintenance: undrain it first (tidectl node undrain %s)", to, to)
	} else if err != nil && !errors.Is(err, store.ErrNotFound) {
		return Request{Spec: spec}, err
	}
	// The target must reach the origin: after the handover only it
	// runs the volume, and the exporter never serves itself.
	o := *spec.SharedOrigin
	exporter, _, err := st.GetNode(ctx, o.Node)
	if errors.Is(err, store.ErrNotFound) {
		return Request{Spec: spec}, unfit("node %s, which exports %s, is not registered: no node can take volume %s over while its origin is away", o.Node, o.Export, name)
	} else if err != nil {
		return Request{Spec: spec}, err
	}
	if served := o.Hosts([]api.Node{exporter}); !slices.Contains(served, to) {
		if len(served) == 0 {
			served = []string{"no node"}
		}
		return Request{Spec: spec}, unfit("node %s does not see export %s of node %s, which volume %s caches (it is served to: %s): the volume would have no origin there",
			to, o.Export, o.Node, name, strings.Join(served, ", "))
	}
	var r Request
	if spec.ReplicaNode != to {
		// The replica moves first: the same re-protection the leader
		// makes when a replica's node is lost, onto the target.
		want := spec
		want.ReplicaNode, want.ReplicaPool = "", ""
		choice, err := placement.PlaceReplica(want, []api.Node{exporter, n}, nil)
		if err != nil {
			return Request{Spec: spec}, unfit("node %s cannot keep the replica of volume %s, which it would start on: %w", to, name, err)
		}
		spec.ReplicaNode, spec.ReplicaPool = choice.Node, choice.Pool
		r.ReplicaPlaced = choice.Pool
	}
	spec.MoveTo, spec.MoveCalledOff = to, nil
	meta, err = st.UpdateVolumeSpec(ctx, spec, meta.ModRevision)
	if err != nil {
		return Request{}, err
	}
	r.Spec, r.Written, r.Revision = spec, true, meta.ModRevision
	return r, nil
}

// Arrived reports whether a move to node to has ended with the volume
// running there: the spec names to, and to's status says it is active.
func Arrived(spec api.VolumeSpec, st api.VolumeStatus, to string) bool {
	return spec.Node == to && st.Node == to && st.State == api.StateActive
}

// CalledOff reports whether a move to node to will not happen: the spec
// neither names to nor asks for the move any more (refused, cancelled,
// or superseded by a failover elsewhere).
func CalledOff(spec api.VolumeSpec, to string) bool {
	return spec.Node != to && spec.MoveTo != to
}

// WhyCalledOff says why a move to node to was called off: what the spec
// records (api.VolumeSpec.MoveCalledOff), else the status's error, else
// that it was (a spec written by an older release, or the move asked for
// elsewhere since).
func WhyCalledOff(spec api.VolumeSpec, st api.VolumeStatus, to string) string {
	switch c := spec.MoveCalledOff; {
	case c != nil && c.To == to:
		return c.Why
	case st.Error != "":
		return st.Error
	case spec.MoveTo != "":
		return fmt.Sprintf("a move to node %s was asked for since", spec.MoveTo)
	}
	return "the move was called off"
}
