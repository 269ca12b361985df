// SPDX-License-Identifier: Apache-2.0

package reconcile

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/engine"
	"github.com/tidecache/tidecache/pkg/policy"
)

// act carries a plan out through the engine, in this order: record a newly
// latched SSD error, create a missing volume, repair (or report) drift,
// grow, change the mode, apply the tuning, flush; then report. Each engine step
// that fails ends the pass with the error in the status.
func (c *Controller) act(ctx context.Context, o observation, vs *volState, p plan, st api.VolumeStatus) outcome {
	name, d := o.spec.Name, p.decision
	switch {
	case p.tripped:
		c.log.Error("SSD error: the volume is to run in a safer mode, kept there until its spec is updated (the mode change is logged, or its failure reported, next)",
			"volume", name, "mode", d.Mode, "revision", o.revision, "evidence", d.Latch.Reason)
	case p.acknowledged:
		c.log.Info("SSD error acknowledged by a spec update", "volume", name, "revision", o.revision)
	}
	vs.latch = d.Latch
	st.Alerts = d.AlertStrings()
	actual := o.actual
	if p.tripped && o.exists {
		// Record the latch (its alert) before acting on it, so a restart
		// in the middle of the switch still finds it. The switch goes
		// ahead even if the store refuses the write.
		if err := c.putStatus(ctx, st, &actual); err != nil {
			c.log.Warn("SSD error latch not recorded in the status yet", "volume", name, "err", err)
		}
	}
	if p.create {
		return c.create(ctx, o.spec, d, p, st)
	}
	if p.mismatch != "" {
		st.Alerts = append(st.Alerts, p.mismatch)
	}
	if p.driftErr != nil {
		return c.fail(ctx, st, p.driftErr, &actual)
	}

	changed := false
	if len(p.drift) > 0 {
		if p.reportDrift {
			c.cfg.Metrics.driftSeen(DriftReported)
			c.log.Warn("drift: live tables differ from the layout; reported only (drift policy report)", "volume", name, "drift", p.drift)
			st.State, st.Error = api.StateDrift, p.driftReport()
			st.Alerts = append(st.Alerts, policy.Alert{Name: api.AlertDrift, Severity: policy.SeverityWarning, Message: st.Error}.String())
			return c.report(ctx, st, Result{RequeueAfter: p.requeue}, actual)
		}
		repaired, err := c.engine.RepairVolume(ctx, name)
		if err != nil {
			return c.fail(ctx, st, fmt.Errorf("repair drift (%s): %w", strings.Join(p.drift, "; "), err), &actual)
		}
		c.cfg.Metrics.driftSeen(DriftRepaired)
		c.log.Warn("drift repaired: live tables differed from the layout", "volume", name, "drift", p.drift, "reloaded", repaired)
		changed = true
	}
	if p.movePeer0 {
		return c.movePeer(ctx, o.spec, st, actual, 0)
	}
	if p.movePeer {
		return c.movePeer(ctx, o.spec, st, actual, 1)
	}
	if p.addPeer {
		return c.addPeer(ctx, o.spec, st, actual)
	}
	if p.refuse != nil {
		return c.fail(ctx, st, p.refuse, &actual)
	}
	if p.grow > 0 {
		c.log.Info("growing volume", "volume", name, "from_bytes", actual.SizeBytes, "to_bytes", p.grow, "revision", o.revision)
		if _, err := c.engine.ResizeVolume(ctx, name, p.grow); err != nil {
			return c.fail(ctx, st, classify(fmt.Errorf("grow to %d bytes: %w", p.grow, err)), &actual)
		}
		changed = true
	}
	if p.setMode != "" {
		c.log.Info("changing mode", "volume", name, "from", actual.Mode, "to", p.setMode, "reason", d.Reason, "revision", o.revision)
		err := c.withProgress(ctx, st, &actual, api.StateDraining, func(pf engine.ProgressFunc) error {
			return c.engine.SetMode(ctx, name, p.setMode, pf)
		})
		if err != nil {
			return c.fail(ctx, st, fmt.Errorf("set mode %s: %w", p.setMode, err), &actual)
		}
		changed = true
	}
	if p.setTuning {
		// Watermarks and write-back jobs from the policy: a reload of the
		// writecache table in place (no drain), recorded in the layout.
		if _, err := c.engine.SetTuning(ctx, name, p.tuning); err != nil {
			return c.fail(ctx, st, fmt.Errorf("apply policy tuning: %w", err), &actual)
		}
		c.log.Info("policy tuning applied", "volume", name, "policy", o.policy.Name)
		changed = true
	}
	if p.flush {
		err := c.withProgress(ctx, st, &actual, api.StateFlushing, func(pf engine.ProgressFunc) error {
			_, err := c.engine.Flush(ctx, name, pf)
			return err
		})
		if err != nil {
			return c.fail(ctx, st, fmt.Errorf("scheduled flush: %w", err), &actual)
		}
		vs.lastFlush = time.Now()
		changed = true
	}
	if changed {
		// What the engine did is reported as the engine now sees it.
		var err error
		if actual, err = c.engine.Volume(ctx, name); err != nil {
			return c.fail(ctx, st, fmt.Errorf("read volume: %w", err), nil)
		}
	}
	return c.report(ctx, st, Result{RequeueAfter: p.requeue}, actual)
}

// report writes the volume's status from its actual state and ends the
// pass with res; a status the store refuses is retried.
func (c *Controller) report(ctx context.Context, st api.VolumeStatus, res Result, actual engine.VolumeInfo) outcome {
	return outcome{res: res, err: c.putStatus(ctx, st, &actual)}
}
