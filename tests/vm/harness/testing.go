// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// MustBoot boots cfg for a test: the VM lives as long as the test (it is
// killed at cleanup, when t.Context ends), logs through t unless cfg.Logger
// is set, and a boot failure fails the test. After the test, the console
// log's tail is logged if the test failed.
func MustBoot(t testing.TB, cfg Config) *VM {
	t.Helper()
	var w *testWriter
	if cfg.Logger == nil {
		w = &testWriter{t: t}
		cfg.Logger = slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	v, err := Boot(t.Context(), cfg)
	if errors.Is(err, ErrSilentBoot) || errors.Is(err, ErrDiedBeforeInit) {
		// The guest never ran (an emulator or host hiccup, seen once in
		// many CI runs), or only its kernel did, and died before /init
		// (an emulator fault seen with 6.12): its disks are as they
		// were, so boot again once. The first boot's console stays in
		// its own directory.
		t.Logf("vm %s: boot again once: %v", cfg.Name, err)
		v, err = Boot(t.Context(), cfg)
	}
	if err != nil {
		w.stop()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		v.Kill()
		w.stop()
		if t.Failed() {
			t.Logf("vm %s console tail (%s):\n%s", v.Name(), v.BootDir(), tail(v.ConsoleLog(), 30))
		}
	})
	return v
}

// MustRun runs shell in the guest and returns its stdout; a transport
// error or a non-zero exit fails the test with the command's output.
func (v *VM) MustRun(t testing.TB, shell string) string {
	t.Helper()
	res, err := v.Run(t.Context(), shell)
	if err != nil {
		t.Fatalf("%v\nstdout:\n%s\nstderr:\n%s", err, res.Stdout, res.Stderr)
	}
	if res.ExitCode != 0 {
		t.Fatalf("vm %s: %q: exit code %d\nstdout:\n%s\nstderr:\n%s", v.Name(), shell, res.ExitCode, res.Stdout, res.Stderr)
	}
	return res.Stdout
}

// TestDir returns a fresh directory <cache>/tests/<TestName> for a test's
// disk images, binaries and VM state: visible to the guest (t.TempDir is
// too, unless TMPDIR is under /run), and, unlike t.TempDir, kept with its
// path logged when the test fails; it is removed when the test passes.
func TestDir(t testing.TB) string {
	t.Helper()
	cache, err := CacheDir()
	if err != nil {
		t.Fatal(err)
	}
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' {
			return r
		}
		return '_'
	}, t.Name())
	dir := filepath.Join(cache, "tests", name)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kept test directory %s", dir)
			return
		}
		os.RemoveAll(dir)
	})
	return dir
}

// testWriter sends log lines to t.Log until stop: the VM's goroutines may
// still log while they wind down, and t.Log after the test has completed
// panics.
type testWriter struct {
	mu      sync.Mutex
	t       testing.TB
	stopped bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.stopped {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func (w *testWriter) stop() {
	if w == nil {
		return
	}
	w.mu.Lock()
	w.stopped = true
	w.mu.Unlock()
}
