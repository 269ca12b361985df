// SPDX-License-Identifier: Apache-2.0

package reconcile

import (
	"fmt"
	"strings"
	"time"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/engine"
	"github.com/tidecache/tidecache/pkg/policy"
	"github.com/tidecache/tidecache/pkg/pool"
)

// plan is what one reconcile pass is to do, in the order act does it.
// The zero plan of an existing volume changes nothing and only reports.
type plan struct {
	// decision is the policy's decision (mode, alerts, flush schedule,
	// SSD error latch).
	decision policy.Decision
	// tripped is set when the decision latches a new SSD error (recorded
	// in the status before anything else); acknowledged when a spec
	// update lifted the previous one.
	tripped, acknowledged bool
	// tuning is the write-tier tuning the policy asks for (nil: node
	// defaults).
	tuning *pool.Tuning
	// protect is the protection a new volume gets when its spec names
	// none: the policy's ("" lets the node choose).
	protect pool.Protection

	// create is set when the volume does not exist yet: act creates it in
	// decision.Mode, then sets tuning. Nothing below applies.
	create bool
	// noSSDs says the pool the volume is created in has no SSD: its write
	// cache waits for both legs on peers (VolumeSpec.ReplicaNode0).
	noSSDs bool

	// mismatch is the spec-mismatch alert, "" if the volume matches the
	// spec in what cannot change in place.
	mismatch string
	// driftErr is a drift check that failed for a reason other than
	// drift: the pass fails with it.
	driftErr error
	// drift describes each drifted device; reportDrift says the drift
	// policy is report: the status says so and nothing else is done. When
	// drift is found and not reported it is repaired first, since a mode
	// change refuses a stack that differs from its layout.
	drift       []string
	reportDrift bool
	// movePeer is set when the spec places the replica of a peer mirror
	// on another node than the one holding its leg 1 (the leader moved
	// it after the old peer was lost): act moves the leg first and looks
	// again, since the mode decision was made on the old leg's state.
	movePeer bool
	// movePeer0 is movePeer for leg 0 of a write cache on peers (the
	// spec's ReplicaNode0 against the layout's).
	movePeer0 bool
	// addPeer is set when the spec places a replica for a volume that
	// failed over onto its old replica and runs on one copy: act adds the
	// new replica as leg 1 of a mirror and looks again.
	addPeer bool
	// refuse is a terminal error: the decision cannot be carried out.
	refuse error
	// grow is the size in bytes the volume grows to, live, when its spec
	// asks for more than it has (0: no growth). A shared-origin volume is
	// cached whole and never grows here.
	grow uint64
	// setMode is the mode to switch to, "" to keep the mode.
	setMode pool.Mode
	// setTuning asks for tuning to be applied in place.
	setTuning bool
	// flush asks for the scheduled flush of the write tier.
	flush bool
	// requeue is when to reconcile again if the pass succeeds.
	requeue time.Duration
}

// decide turns an observation into a plan. It does no I/O and keeps no
// state: the same observation always gives the same plan, so its rules
// are tested on their own (decide_test.go). driftPolicy and resync are the
// controller's Config.DriftPolicy and ResyncInterval.
func decide(o observation, driftPolicy string, resync time.Duration) (plan, error) {
	d, err := policy.Decide(policy.Input{Spec: o.spec, SpecRevision: o.revision, Policy: o.policy, Drain: o.drain, Facts: o.facts, Latch: o.latch})
	if err != nil {
		return plan{}, err
	}
	p := plan{
		decision:     d,
		tripped:      d.Latch != nil && (o.latch == nil || o.latch.Revision != d.Latch.Revision),
		acknowledged: d.Latch == nil && o.latch != nil,
		tuning:       policyTuning(o.policy),
		protect:      pool.Protection(o.policy.Protect),
		requeue:      d.FlushIn,
	}
	if !o.exists {
		p.create, p.noSSDs = true, o.noSSDs
		return p, nil
	}
	if m := mismatch(o.spec, o.actual); m != "" {
		p.mismatch = policy.Alert{Name: api.AlertSpecMismatch, Severity: policy.SeverityWarning, Message: m}.String()
	}
	var drifts []*engine.DriftError
	collectDrift(o.drift, &drifts)
	switch {
	case o.drift == nil:
	case len(drifts) == 0:
		p.driftErr = fmt.Errorf("check tables: %w", o.drift)
		return p, nil
	default:
		for _, d := range drifts {
			p.drift = append(p.drift, d.Error())
		}
		if driftPolicy == DriftReport {
			p.reportDrift, p.requeue = true, resync
			return p, nil
		}
	}
	if want := up(o.spec.SizeBytes); !o.spec.CachesWhole() && want > o.actual.SizeBytes {
		p.grow = want
	}
	p.movePeer = o.spec.ReplicaNode != "" && o.actual.PeerNode != "" && o.spec.ReplicaNode != o.actual.PeerNode
	p.movePeer0 = o.spec.ReplicaNode0 != "" && o.actual.PeerNode0 != "" && o.spec.ReplicaNode0 != o.actual.PeerNode0
	p.addPeer = o.spec.ReplicaNode != "" && o.actual.PeerNode == "" && o.actual.TakenOverFrom() != "" && o.actual.Protection == pool.ProtectNone
	if o.actual.Mode != d.Mode {
		if d.Mode == pool.ModeWriteback && o.actual.WriteCacheBytes == 0 {
			p.refuse = Terminal(fmt.Errorf("volume has no write cache slice, cannot switch to writeback (%s)", d.Reason))
			return p, nil
		}
		p.setMode = d.Mode
	}
	p.setTuning = !o.actual.Tuning.Equal(p.tuning)
	if d.FlushNow && d.Mode == pool.ModeWriteback {
		p.flush = true
		if iv := time.Duration(o.policy.FlushInterval); iv > 0 {
			p.requeue = iv
		}
	}
	return p, nil
}

// driftReport is the status error of drift reported, not repaired.
func (p plan) driftReport() string {
	return "live tables differ from the layout (drift policy report, not repaired): " + strings.Join(p.drift, "; ")
}
