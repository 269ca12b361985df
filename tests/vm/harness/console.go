// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"
)

// The guest kernel says on its console when it is stuck. Under TCG on a
// loaded host a guest can spin in the kernel (a CI run once printed
// `watchdog: BUG: soft lockup - CPU#1 stuck for 23s! [blkid:161]` and never
// answered again), and the command waiting on it waited until go test's
// timeout, 35 minutes later. So while a VM runs, a consoleWatch reads what
// the guest has appended to its console log every consolePoll and looks
// for consoleSigns. On a sign that the kernel is stuck or dead (a soft or
// hard lockup, an RCU stall, a panic, an oops) it logs the sign and ends
// the VM: every pending and later call on it fails at once with an error
// that says so and carries the console lines around the sign (errors.Is
// ErrGuestStuck), and qemu is killed.
//
// A hung task ("task blkid:161 blocked for more than 120 seconds") is only
// logged: it says that a task has waited two minutes for I/O, which a test
// may cause on purpose (a suspended device, a cut link under a remote
// disk, a throttled disk image under load), and the kernel goes on. A
// command that never ends is bounded by Config.CommandTimeout instead.

// ErrGuestStuck marks the error of a VM call that failed because the guest
// kernel reported on its console that it was stuck or had died; the
// harness then stopped qemu.
var ErrGuestStuck = errors.New("guest kernel stuck")

const (
	consolePoll      = 2 * time.Second // how often the console log is read
	consoleTraceWait = time.Second     // for the trace after a fatal sign
	excerptBefore    = 5               // console lines kept before a sign
	excerptAfter     = 40              // and after it (the trace)
	maxConsoleLine   = 64 << 10        // an unfinished line longer is cut
)

// consoleSign is a guest kernel message that matters to a test.
type consoleSign struct {
	text  string // found anywhere in a console line
	what  string // what it means, for the error
	fatal bool   // the kernel is stuck or dead: end the VM; else only log
}

// consoleSigns are the kernel's own words (6.1: kernel/watchdog.c,
// kernel/rcu/tree_stall.h, kernel/hung_task.c, kernel/panic.c,
// arch/x86/mm/fault.c).
var consoleSigns = []consoleSign{
	{"BUG: soft lockup", "soft lockup", true},
	{"hard LOCKUP", "hard lockup", true},
	{"self-detected stall on CPU", "RCU stall", true}, // rcu: INFO: rcu_preempt self-detected stall on CPU
	{"detected stalls on CPUs/tasks", "RCU stall", true},
	{"detected expedited stalls on CPUs/tasks", "RCU stall", true},
	{"Kernel panic", "kernel panic", true},
	{"BUG: unable to handle", "kernel oops", true},
	{"blocked for more than", "hung task", false},
}

// matchConsole returns the sign that a console line shows, if any.
func matchConsole(line string) (consoleSign, bool) {
	for _, s := range consoleSigns {
		if strings.Contains(line, s.text) {
			return s, true
		}
	}
	return consoleSign{}, false
}

// guestStuckError ends a VM whose guest kernel printed a fatal sign.
type guestStuckError struct {
	sign    consoleSign
	line    string
	lineNo  int // 1-based, in console
	console string
	excerpt []string
}

func (e *guestStuckError) Error() string {
	return fmt.Sprintf("the guest kernel is stuck (%s), so the harness stopped qemu: %q at line %d of %s\n--- console excerpt ---\n%s",
		e.sign.what, strings.TrimSpace(e.line), e.lineNo, e.console, strings.Join(e.excerpt, "\n"))
}

func (e *guestStuckError) Is(target error) bool { return target == ErrGuestStuck }

// consoleWatch follows one VM's console log; see the comment at the top.
type consoleWatch struct {
	path      string
	log       *slog.Logger
	poll      time.Duration
	traceWait time.Duration
	// stop ends the VM on a fatal sign; it receives the error that calls
	// on the VM report from then on.
	stop func(error)

	off    int64    // bytes of the file read so far
	part   []byte   // an unfinished last line
	lineNo int      // complete lines read so far
	before []string // the last excerptBefore lines read
}

// run reads the console every w.poll until ctx ends or done is closed
// (qemu has exited), and once more then: a guest that panics ends qemu at
// once, and its last lines say why.
func (w *consoleWatch) run(ctx context.Context, done <-chan struct{}) {
	tick := time.NewTicker(w.poll)
	defer tick.Stop()
	for {
		last := false
		select {
		case <-ctx.Done():
			return
		case <-done:
			last = true
		case <-tick.C:
		}
		if w.scan(ctx, last) || last {
			return
		}
	}
}

// scan reads what the guest appended and acts on the signs in it. It
// reports whether it stopped the VM.
func (w *consoleWatch) scan(ctx context.Context, last bool) bool {
	first := w.lineNo + 1 // number of lines[0]
	lines := w.read(last)
	defer func() { w.before = lastN(append(w.before, lines...), excerptBefore) }()
	for i, line := range lines {
		sign, ok := matchConsole(line)
		if !ok {
			continue
		}
		if !sign.fatal {
			w.log.Warn("guest kernel: "+sign.what+" (only logged)", "line", strings.TrimSpace(line), "console", w.path)
			continue
		}
		if len(lines)-i-1 < excerptAfter && !last {
			// The trace follows within moments: wait for it.
			select {
			case <-ctx.Done():
			case <-time.After(w.traceWait):
			}
			lines = append(lines, w.read(false)...)
		}
		all := append(append([]string(nil), w.before...), lines...)
		at := len(w.before) + i
		err := &guestStuckError{sign: sign, line: line, lineNo: first + i, console: w.path,
			excerpt: all[max(0, at-excerptBefore):min(len(all), at+1+excerptAfter)]}
		w.log.Error("guest kernel stuck: stopping the VM", "sign", sign.what, "line", strings.TrimSpace(line),
			"console", w.path, "excerpt", strings.Join(err.excerpt, "\n"))
		w.stop(err)
		return true
	}
	return false
}

// read returns the lines the guest completed since the last read, without
// carriage returns; with last, an unfinished line too.
func (w *consoleWatch) read(last bool) []string {
	f, err := os.Open(w.path)
	if err != nil {
		return nil // qemu makes it as it starts
	}
	defer f.Close()
	b, _ := io.ReadAll(io.NewSectionReader(f, w.off, 1<<62))
	w.off += int64(len(b))
	b = append(w.part, b...)
	end := bytes.LastIndexByte(b, '\n') + 1
	if last || len(b)-end > maxConsoleLine {
		end = len(b)
	}
	w.part = append([]byte(nil), b[end:]...)
	if end == 0 {
		return nil
	}
	text := strings.TrimSuffix(string(bytes.ReplaceAll(b[:end], []byte("\r"), nil)), "\n")
	lines := strings.Split(text, "\n")
	w.lineNo += len(lines)
	return lines
}

// lastN returns the last n of s, in a slice of its own.
func lastN(s []string, n int) []string {
	return append([]string(nil), s[max(0, len(s)-n):]...)
}
