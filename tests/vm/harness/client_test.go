// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidecache/tidecache/tests/vm/harness/internal/wire"
)

// clientVM returns a VM whose control channel is connected to serve, which
// plays the guest agent.
func clientVM(t *testing.T, serve func(dec *wire.Decoder, enc func(wire.Response))) *VM {
	host, guest := net.Pipe()
	v := &VM{
		cfg:     Config{Name: "fake"},
		log:     slog.New(slog.DiscardHandler),
		conn:    host,
		pending: map[uint64]chan wire.Response{},
		broken:  make(chan struct{}),
	}
	var wmu sync.Mutex
	go serve(wire.NewDecoder(guest), func(r wire.Response) {
		wmu.Lock()
		defer wmu.Unlock()
		wire.Encode(guest, r)
	})
	go v.readLoop()
	t.Cleanup(func() { host.Close(); guest.Close() })
	return v
}

func TestClientConcurrentOutOfOrder(t *testing.T) {
	release := make(chan struct{})
	v := clientVM(t, func(dec *wire.Decoder, reply func(wire.Response)) {
		for {
			var req wire.Request
			if err := dec.Decode(&req); err != nil {
				return
			}
			go func() {
				if req.Shell == "slow" {
					<-release
				}
				reply(wire.Response{ID: req.ID, ExitCode: len(req.Shell), Stdout: []byte(req.Shell), Stderr: []byte("e")})
			}()
		}
	})
	slow := make(chan Result)
	go func() {
		res, err := v.Run(context.Background(), "slow")
		if err != nil {
			t.Error(err)
		}
		slow <- res
	}()
	res, err := v.Run(context.Background(), "fast!")
	if err != nil || res.Stdout != "fast!" || res.ExitCode != 5 || res.Stderr != "e" {
		t.Fatalf("fast: %+v, %v", res, err)
	}
	close(release)
	if res := <-slow; res.Stdout != "slow" {
		t.Fatalf("slow: %+v", res)
	}
}

func TestClientCancelAndGuestError(t *testing.T) {
	canceled := make(chan uint64, 1)
	v := clientVM(t, func(dec *wire.Decoder, reply func(wire.Response)) {
		for {
			var req wire.Request
			if err := dec.Decode(&req); err != nil {
				return
			}
			switch {
			case req.Op == wire.OpCancel:
				canceled <- req.Target
			case req.Shell == "hang":
				if req.TimeoutMS <= 0 || req.TimeoutMS > 1000 {
					reply(wire.Response{ID: req.ID, Error: "no timeout passed"})
				}
			default:
				reply(wire.Response{ID: req.ID, ExitCode: -1, Error: "exec: not found"})
			}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := v.Run(ctx, "hang"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want DeadlineExceeded, got %v", err)
	}
	select {
	case id := <-canceled:
		if id == 0 {
			t.Error("cancel without target")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no cancel request reached the guest")
	}
	if _, err := v.Run(context.Background(), "other"); err == nil || !strings.Contains(err.Error(), "exec: not found") {
		t.Fatalf("guest error not returned: %v", err)
	}
}

func TestClientChannelLoss(t *testing.T) {
	got := make(chan struct{})
	v := clientVM(t, func(dec *wire.Decoder, reply func(wire.Response)) {
		var req wire.Request
		dec.Decode(&req)
		close(got)
	})
	done := make(chan error)
	go func() {
		_, err := v.Run(context.Background(), "never answered")
		done <- err
	}()
	<-got
	v.conn.Close() // as when qemu exits
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("no error after the channel closed")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run hangs after the channel closed")
	}
	if _, err := v.Run(context.Background(), "after"); err == nil {
		t.Fatal("Run on a closed channel succeeded")
	}
}

func TestTail(t *testing.T) {
	if got := tail("a\nb\nc\n", 2); got != "b\nc" {
		t.Errorf("got %q", got)
	}
	if got := tail("a\nb", 5); got != "a\nb" {
		t.Errorf("got %q", got)
	}
	// A guest that printed nothing: the boot failure report must not
	// panic on it (it did once, hiding the failure).
	for _, s := range []string{"", "\n", "\n\n"} {
		if got := tail(s, 40); got != "" {
			t.Errorf("tail(%q) = %q, want empty", s, got)
		}
	}
}

// TestClientCommandTimeout checks Config.CommandTimeout: a command whose
// context has no deadline gets it, in the guest too, and fails when it
// passes; a context with its own deadline keeps it, longer or not.
func TestClientCommandTimeout(t *testing.T) {
	timeouts := make(chan int64, 2)
	v := clientVM(t, func(dec *wire.Decoder, reply func(wire.Response)) {
		for {
			var req wire.Request
			if err := dec.Decode(&req); err != nil {
				return
			}
			if req.Op == "" {
				timeouts <- req.TimeoutMS
			}
			if req.Shell == "quick" {
				reply(wire.Response{ID: req.ID})
			}
		}
	})
	v.cfg.CommandTimeout = 200 * time.Millisecond
	start := time.Now()
	_, err := v.Run(context.Background(), "hang")
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "Config.CommandTimeout (200ms)") {
		t.Fatalf("want DeadlineExceeded naming Config.CommandTimeout, got %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the default deadline ended the command after %v", took)
	}
	if ms := <-timeouts; ms <= 0 || ms > 200 {
		t.Errorf("the guest got timeout_ms %d, want the default's 200", ms)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	if _, err := v.Run(ctx, "quick"); err != nil {
		t.Fatal(err)
	}
	if ms := <-timeouts; ms < 3500_000 {
		t.Errorf("the guest got timeout_ms %d, want the caller's hour", ms)
	}
}
