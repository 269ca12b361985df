// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidecache/tidecache/tests/vm/harness/internal/wire"
)

func TestMatchConsole(t *testing.T) {
	for _, tc := range []struct {
		line  string
		what  string // "" for no match
		fatal bool
	}{
		{"[  812.301234] watchdog: BUG: soft lockup - CPU#1 stuck for 23s! [blkid:161]", "soft lockup", true},
		{"[  812.3] watchdog: Watchdog detected hard LOCKUP on cpu 1", "hard lockup", true},
		{"[  812.3] Kernel panic - not syncing: Hard LOCKUP", "kernel panic", true},
		{"[  900.1] rcu: INFO: rcu_preempt self-detected stall on CPU", "RCU stall", true},
		{"[  900.1] rcu: INFO: rcu_sched self-detected stall on CPU", "RCU stall", true},
		{"[  900.1] rcu: INFO: rcu_preempt detected stalls on CPUs/tasks:", "RCU stall", true},
		{"[  900.1] rcu: INFO: rcu_preempt detected expedited stalls on CPUs/tasks: { 1-... } 21002 jiffies s: 2465 root: 0x2/.", "RCU stall", true},
		{"[    3.2] Kernel panic - not syncing: Attempted to kill init! exitcode=0x00000100", "kernel panic", true},
		{"[   44.0] BUG: unable to handle page fault for address: ffffc90000c1f000", "kernel oops", true},
		{"[  968.1] INFO: task blkid:161 blocked for more than 120 seconds.", "hung task", false},

		// Lines that must not match: boot messages near the signs' words,
		// the hung-task advice, a trace line.
		{"[    0.000000] Kernel command line: console=ttyS0 quiet panic=-1 oops=panic mitigations=off", "", false},
		{"[    0.000000] rcu: Preemptible hierarchical RCU implementation.", "", false},
		{"[    0.000000] rcu: \tRCU CPU stall warnings timeout set to 21 (rcu_cpu_stall_timeout).", "", false},
		{"[    0.000000] rcu: RCU calculated value of scheduler-enlistment delay is 25 jiffies.", "", false},
		{"[    0.210000] NMI watchdog: Perf NMI watchdog permanently disabled", "", false},
		{"[    0.220000] watchdog: Disabling watchdog on nohz_full cores by default", "", false},
		{`[  968.1] "echo 0 > /proc/sys/kernel/hung_task_timeout_secs" disables this message.`, "", false},
		{"[  812.4] CPU: 1 PID: 161 Comm: blkid Not tainted 6.1.0-56-amd64 #1  Debian 6.1.158-1", "", false},
		{"[   12.0] EXT4-fs (dm-0): mounted filesystem with ordered data mode. Quota mode: none.", "", false},
		{"[   12.0] device-mapper: writecache: I/O error detected, switching to read-only mode", "", false},
		{"reboot: Power down", "", false},
		{"", "", false},
	} {
		sign, ok := matchConsole(tc.line)
		if ok != (tc.what != "") || sign.what != tc.what || sign.fatal != tc.fatal {
			t.Errorf("matchConsole(%q) = %+v, %v; want %q (fatal %v)", tc.line, sign, ok, tc.what, tc.fatal)
		}
	}
}

// TestConsoleWatch appends a hung task and then a soft lockup to a console
// log under a fake VM: the hung task changes nothing, and the lockup makes
// the pending command, and every later one, fail at once with the excerpt.
func TestConsoleWatch(t *testing.T) {
	console := filepath.Join(t.TempDir(), "console.log")
	appendConsole := func(lines ...string) {
		f, err := os.OpenFile(console, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		for _, l := range lines {
			fmt.Fprint(f, l+"\r\n")
		}
	}
	appendConsole("[    1.0] booted")
	v := clientVM(t, func(dec *wire.Decoder, reply func(wire.Response)) {
		for {
			var req wire.Request
			if err := dec.Decode(&req); err != nil {
				return
			}
			if req.Shell != "blkid" { // blkid hangs, as in the guest that spun
				reply(wire.Response{ID: req.ID, Stdout: []byte(req.Shell)})
			}
		}
	})
	v.console = console
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	v.watchConsole(ctx, 20*time.Millisecond)

	hung := make(chan error, 1)
	go func() {
		_, err := v.Run(context.Background(), "blkid")
		hung <- err
	}()
	appendConsole("[  968.1] INFO: task blkid:161 blocked for more than 120 seconds.",
		"[  968.2]       Not tainted 6.1.0-56-amd64 #1 Debian 6.1.158-1")
	time.Sleep(200 * time.Millisecond)
	if res, err := v.Run(context.Background(), "echo ok"); err != nil || res.Stdout != "echo ok" {
		t.Fatalf("after a hung task: %+v, %v; want the VM to go on", res, err)
	}
	select {
	case err := <-hung:
		t.Fatalf("blkid returned after a hung task: %v", err)
	default:
	}

	lockup := "[ 1000.5] watchdog: BUG: soft lockup - CPU#1 stuck for 23s! [blkid:161]"
	// The line comes in two writes, as a serial console may leave it.
	appendConsole("[ 1000.1] one", "[ 1000.2] two", "[ 1000.3] three", "[ 1000.4] before the lockup")
	f, _ := os.OpenFile(console, os.O_APPEND|os.O_WRONLY, 0o644)
	fmt.Fprint(f, lockup[:20])
	f.Close()
	time.Sleep(100 * time.Millisecond)
	appendConsole(lockup[20:], "[ 1000.6] Modules linked in: dm_mod", "[ 1000.7] RIP: 0010:blkid_probe+0x42/0x90")

	var err error
	select {
	case err = <-hung:
	case <-time.After(5 * time.Second):
		t.Fatal("the pending command still waits after a soft lockup")
	}
	if !errors.Is(err, ErrGuestStuck) {
		t.Fatalf("pending command: %v; want ErrGuestStuck", err)
	}
	t.Logf("the pending command's error:\n%v", err)
	for _, want := range []string{`vm fake: "blkid": the guest kernel is stuck (soft lockup)`, "line 8 of " + console,
		"--- console excerpt ---\n[  968.2]", "[ 1000.4] before the lockup\n" + lockup + "\n", "RIP: 0010:blkid_probe"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "\r") || strings.Contains(err.Error(), "booted") {
		t.Errorf("excerpt has a carriage return or more than %d lines before the sign:\n%v", excerptBefore, err)
	}
	if _, err := v.Run(context.Background(), "echo later"); !errors.Is(err, ErrGuestStuck) {
		t.Fatalf("a later command: %v; want ErrGuestStuck", err)
	}
}

// TestConsoleWatchLastRead checks the read after qemu has exited: a guest
// that panics ends qemu at once, and its last line has no newline yet.
func TestConsoleWatchLastRead(t *testing.T) {
	console := filepath.Join(t.TempDir(), "console.log")
	if err := os.WriteFile(console, []byte("[ 3.1] Run /init as init process\n[ 3.2] Kernel panic - not syncing: Attempted to kill init!"), 0o644); err != nil {
		t.Fatal(err)
	}
	var got error
	w := &consoleWatch{path: console, log: slog.New(slog.DiscardHandler), poll: time.Hour, traceWait: time.Hour, stop: func(err error) { got = err }}
	done := make(chan struct{})
	close(done)
	w.run(context.Background(), done)
	if !errors.Is(got, ErrGuestStuck) || !strings.Contains(got.Error(), "(kernel panic)") || !strings.Contains(got.Error(), "line 2 of") {
		t.Fatalf("stop got %v; want the panic on line 2", got)
	}
}

// TestDiedBeforeInit: a guest whose console shows a fatal sign before
// /init's first line died in its kernel's start-up (MustBoot boots it
// again); one that printed the line had run user space, which may have
// written its disks (its failure stands).
func TestDiedBeforeInit(t *testing.T) {
	for _, tc := range []struct {
		name    string
		console string
		want    bool
	}{
		{"oops during the kernel's start-up", "[    2.172481] Oops: int3: 0000 [#1] PREEMPT SMP NOPTI\n[    2.180294] Kernel panic - not syncing: Fatal exception in interrupt\n", true},
		{"oops after /init started", initStarted + "\n[    2.769187] Invalid ELF header magic: != ELF\n[    3.2] Kernel panic - not syncing: Fatal exception\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := diedBeforeInit(tc.console); got != tc.want {
				t.Fatalf("diedBeforeInit = %t, want %t", got, tc.want)
			}
		})
	}
	if !strings.HasPrefix(initScript, "#!/bin/busybox sh\n# tidecache VM init, generated by tests/vm/harness (initramfs.go).\necho \""+initStarted+"\"\n") {
		t.Fatalf("/init does not print %q first:\n%s", initStarted, initScript[:200])
	}
}
