// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A command that waits for the node lock says who holds it (a flush or a
// drain can hold it for as long as the HDDs take) instead of hanging
// silently, and gives up with that holder named when its context ends.
func TestLockWaitSaysWhoHoldsIt(t *testing.T) {
	lockPath := filepath.Join(t.TempDir(), "engine.lock")
	newEngine := func(log *slog.Logger) *Engine {
		return &Engine{cfg: Config{LockPath: lockPath}, log: log}
	}
	unlock, err := newEngine(slog.New(slog.DiscardHandler)).lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	holder, err := os.ReadFile(lockPath)
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("pid %d (", os.Getpid()); !strings.HasPrefix(string(holder), want) || !strings.Contains(string(holder), " since ") {
		t.Fatalf("lock file %q: want the holder's pid, command and start", holder)
	}

	var logs bytes.Buffer
	waiter := newEngine(slog.New(slog.NewTextHandler(&logs, nil)))
	ctx, cancel := context.WithTimeout(context.Background(), lockWaitSay+500*time.Millisecond)
	defer cancel()
	_, err = waiter.lock(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), strings.TrimSpace(string(holder))) {
		t.Errorf("lock while held: err = %v, want a deadline naming the holder %q", err, holder)
	}
	if !strings.Contains(logs.String(), "waiting for the node lock") || !strings.Contains(logs.String(), fmt.Sprintf("pid %d", os.Getpid())) {
		t.Errorf("the waiter said nothing about the holder:\n%s", logs.String())
	}
}

// heldByOther tells a flush in progress (its lock held) from one that
// ended or never ran, without taking the lock itself.
func TestHeldByOther(t *testing.T) {
	path := filepath.Join(t.TempDir(), "flush.lock")
	if heldByOther(path) {
		t.Fatal("a missing lock file is held")
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("heldByOther created the file: %v", err)
	}
	e := &Engine{cfg: Config{LockPath: path}, log: slog.New(slog.DiscardHandler)}
	unlock, err := e.lockFile(context.Background(), path, "a flush")
	if err != nil {
		t.Fatal(err)
	}
	if !heldByOther(path) {
		t.Error("a lock taken by lockFile is not seen as held")
	}
	unlock()
	if heldByOther(path) {
		t.Error("a released lock is still seen as held")
	}
	// The probe left no lock behind: the lock can be taken again at once.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	unlock, err = e.lockFile(ctx, path, "a flush")
	if err != nil {
		t.Fatalf("lock after the probes: %v", err)
	}
	unlock()
}
