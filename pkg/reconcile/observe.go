package reconcile

import (
	"context"
	"fmt"
	"time"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/engine"
	"github.com/tidecache/tidecache/pkg/policy"
)

// observation is everything decide needs about one volume: the desired
// state read from the store and the actual state from one engine read.
// It holds values only, so a test can write one by hand.
type observation struct {
	spec     api.VolumeSpec
	revision int64 // the spec's ModRevision
	// policy is the effective policy; drain the node's drain flag.
	policy api.Policy
	drain  bool
	// exists says whether the engine knows the volume; actual and drift
	// are its state and the result of comparing its live tables with its
	// layout (nil, joined *engine.DriftError, or the error that stopped
	// the comparison).
	exists bool
	actual engine.VolumeInfo
	drift  error
	// facts are the health facts the policy rules read; latch is the SSD
	// error latched by the previous decision, nil if none.
	facts policy.Facts
	latch *policy.Latch
}

// actualPtr is the volume's actual state for the status, nil when the
// engine does not know it (or was not read).
func (o observation) actualPtr() *engine.VolumeInfo {
	if !o.exists {
		return nil
	}
	a := o.actual
	return &a
}

// observe reads the desired state of spec's volume and the actual state,
// and returns what the controller remembers of the volume. The engine is
// read once (engine.Observe: one scan of the superblocks for
// the volume, its drift and its pool's origin) however many facts the
// rules need. On error the observation holds what was read so far.
func (c *Controller) observe(ctx context.Context, spec api.VolumeSpec, rev int64) (observation, *volState, error) {
	o := observation{spec: spec, revision: rev}
	var err error
	if o.policy, o.drain, err = c.desired(ctx, spec); err != nil {
		return o, nil, err
	}
	node, err := c.engine.Observe(ctx, engine.ObserveRequest{Volumes: []string{spec.Name}, Drift: true})
	if err != nil {
		return o, nil, fmt.Errorf("read volume: %w", err)
	}
	vo, exists := node.Volume(spec.Name)
	o.exists, o.actual, o.drift = exists, vo.Info, vo.Drift

	now := time.Now()
	vs, err := c.state(ctx, spec.Name, now)
	if err != nil {
		return o, nil, err
	}
	poolName := spec.Pool
	if exists {
		poolName = o.actual.Pool
	}
	acked := vs.latch != nil && rev > vs.latch.Revision
	o.latch = vs.latch
	o.facts = policy.Facts{Now: now, LastFlush: vs.lastFlush}
	o.facts.SSDs = c.ssdFacts(ctx, spec.Name, poolName, vs, acked)
	pi, ok := node.Pool(poolName)
	o.facts.Origin = c.originFacts(spec.Name, pi, ok)
	if exists && o.actual.WriteCache != nil {
		o.facts.WritecacheError = o.actual.WriteCache.Error
		o.facts.DirtyBlocks = o.actual.WriteCache.DirtyBlocks
	}
	return o, vs, nil
}
