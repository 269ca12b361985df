// SPDX-License-Identifier: Apache-2.0

//go:build vm

package vm_test

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// laneCount is how many scenarios run beside each other: one per core of
// CI's two-core host, each VM with one vCPU (besideAnother).
const laneCount = 2

// gatherFor is how long the lanes stay shut after the first scenario asks
// for one: go test resumes every paused parallel test at once, and the
// lanes go to the longest of them, so they must all have asked.
const gatherFor = time.Second

// lanes hands the lanes to the scenarios that run beside another, the
// longest first. go test resumes parallel tests in no set order; left to
// it, the README's scenario (ten minutes) could start last and run alone
// for minutes after the others had finished, one core idle. Longest first
// keeps both lanes busy to the end (the order makes a difference of about
// four minutes to .ci/run). The go test -parallel limit must let every
// such scenario resume (the Makefile passes -parallel 64): they wait here,
// not in go test.
type lanes struct {
	mu      sync.Mutex
	free    int
	open    bool // the first callers have been gathered
	waiting []*laneWaiter
}

type laneWaiter struct {
	about time.Duration
	ready chan struct{}
}

var beside = &lanes{free: laneCount}

// acquire waits for a lane for t, a scenario that runs about as long as
// about under CI, and frees it when t and its cleanups registered later
// (its VMs) are done.
func (l *lanes) acquire(t *testing.T, about time.Duration) {
	t.Helper()
	w := &laneWaiter{about: about, ready: make(chan struct{})}
	l.mu.Lock()
	first := !l.open && len(l.waiting) == 0
	l.waiting = append(l.waiting, w)
	l.grantLocked()
	l.mu.Unlock()
	if first {
		time.AfterFunc(gatherFor, func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.open = true
			l.grantLocked()
		})
	}
	start := time.Now()
	select {
	case <-w.ready:
	case <-t.Context().Done():
		t.Fatal("the test ended waiting for a lane")
	}
	t.Cleanup(l.release)
	if waited := time.Since(start); waited > gatherFor+time.Second {
		t.Logf("ran after waiting %s for a lane (longest first)", waited.Round(time.Second))
	}
}

func (l *lanes) release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.free++
	l.grantLocked()
}

// grantLocked gives the free lanes to the longest scenarios waiting, once
// the lanes are open.
func (l *lanes) grantLocked() {
	for l.open && l.free > 0 && len(l.waiting) > 0 {
		i := 0
		for j, w := range l.waiting {
			if w.about > l.waiting[i].about {
				i = j
			}
		}
		close(l.waiting[i].ready)
		l.waiting = slices.Delete(l.waiting, i, i+1)
		l.free--
	}
}
