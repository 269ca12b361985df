// SPDX-License-Identifier: Apache-2.0

package reconcile

import (
	"context"
	"time"
)

// worker is the goroutine of one volume. Requests to reconcile it coalesce
// in kick (capacity one): however many arrive while a reconcile runs, one
// more reconcile follows, and it reads the latest desired state. So at most
// one reconcile per volume is in flight and the latest state wins.
type worker struct {
	kick chan struct{}
}

// enqueue asks for name to be reconciled soon, starting its worker if it
// has none. Before Run and after Run's context ends it does nothing.
func (c *Controller) enqueue(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.runCtx == nil || c.runCtx.Err() != nil {
		return
	}
	w, ok := c.workers[name]
	if !ok {
		w = &worker{kick: make(chan struct{}, 1)}
		c.workers[name] = w
		c.wg.Add(1)
		go c.work(c.runCtx, name, w)
	}
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// work runs the reconciles of one volume: on each kick, and after the
// delay the last reconcile asked for (RequeueAfter, or an exponential
// backoff after a transient error). It ends when the volume needs no more
// attention (not this node's, or gone) and nothing is pending.
func (c *Controller) work(ctx context.Context, name string, w *worker) {
	defer c.wg.Done()
	var timer *time.Timer
	var wake <-chan time.Time
	failures := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.kick:
		case <-wake:
		}
		if timer != nil {
			timer.Stop()
			timer, wake = nil, nil
		}
		select {
		case c.sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		out := c.reconcile(ctx, name)
		<-c.sem
		if ctx.Err() != nil {
			return
		}

		after := out.res.RequeueAfter
		switch {
		case out.err != nil && !IsTerminal(out.err):
			failures++
			after = c.backoff(failures)
		default:
			failures = 0
		}
		if after > 0 {
			timer = time.NewTimer(after)
			wake = timer.C
			continue
		}
		if out.done {
			c.mu.Lock()
			if len(w.kick) == 0 && c.workers[name] == w {
				delete(c.workers, name)
				c.mu.Unlock()
				return
			}
			c.mu.Unlock()
		}
	}
}
