// SPDX-License-Identifier: Apache-2.0

//go:build linux

package engine

// Host tests of the engine's device-mapper logic against the fake kernel
// of package dm/dmtest: the drain and its stall recovery, the table swap of
// a mode change and its rollback, the dirty check under suspend, the
// retried drain, and the create/remove paths. The VM tests prove the
// kernel agrees; these prove the decisions, in plain `go test`.

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tidecache/tidecache/pkg/dm"
	"github.com/tidecache/tidecache/pkg/dm/dmtest"
	"github.com/tidecache/tidecache/pkg/pool"
	"github.com/tidecache/tidecache/pkg/stack"
)

const hostVolume = "v1"

var (
	hostTop   = stack.DeviceName(hostVolume, stack.RoleTop)
	hostWTier = stack.DeviceName(hostVolume, stack.RoleWriteTier)
	hostVol   = pool.Volume{Name: hostVolume, BlockSize: 4096}

	// The writeback stack: fuaflush on top of the write tier.
	wtierTable = dm.Table{dm.WritecacheParams{Origin: "253:1", Cache: "253:2", BlockSize: 4096}.Target(0, 2048)}
	fuaTable   = dm.Table{dm.FUAFlushParams{Device: "253:3"}.Target(0, 2048)}
	// The write tier while a flush or a drain's first phase runs.
	flushingWtierTable = func() dm.Table {
		t, err := flushingTable(wtierTable)
		if err != nil {
			panic(err)
		}
		return t
	}()
	// The top table of writethrough: straight to the lower device.
	linearTable = dm.Table{dm.LinearParams{Device: "253:1"}.Target(0, 2048)}
)

// newHostEngine returns an Engine on a fake kernel that runs the top and
// write tier devices of hostVolume in writeback, polling every
// millisecond.
func newHostEngine(t *testing.T, drainTimeout time.Duration) (*Engine, *dmtest.Kernel) {
	t.Helper()
	e, k := newFakeDMEngine(t, drainTimeout)
	k.AddDevice(hostWTier, stack.DeviceUUID("u1", stack.RoleWriteTier), wtierTable)
	k.AddDevice(hostTop, stack.DeviceUUID("u1", stack.RoleTop), fuaTable)
	return e, k
}

// newFakeDMEngine returns an Engine on a fake kernel without devices that
// knows the fuaflush and readfirst targets, polling every millisecond, with its lock file
// and sysfs root in a temporary directory.
func newFakeDMEngine(t *testing.T, drainTimeout time.Duration) (*Engine, *dmtest.Kernel) {
	t.Helper()
	k := dmtest.New()
	k.SetTarget(dm.FUAFlushTarget, dm.Version{Major: 1})
	k.SetTarget(dm.ReadFirstTarget, dm.Version{Major: 1})
	cfg := DefaultConfig()
	cfg.SysRoot = t.TempDir()
	cfg.LockPath = filepath.Join(t.TempDir(), "engine.lock")
	cfg.UdevRulesDir = t.TempDir()
	cfg.ExpectedPoolsFile = filepath.Join(t.TempDir(), ExpectedPoolsFileName)
	cfg.PollInterval = time.Millisecond
	cfg.DrainTimeout = drainTimeout
	e, err := NewWithClient(cfg, k.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	return e, k
}

// wcState is what a dm-writecache reports in its status.
type wcState struct {
	dirty, writeback uint64
	errno            int
}

// wcStatus returns a status function for a writecache of 1000 blocks
// whose state script decides from the number of the status read (from 1)
// and the messages received so far.
func wcStatus(script func(n int, msgs []string) wcState) dmtest.StatusFunc {
	return func(q dmtest.StatusQuery) (string, error) {
		s := script(q.N, q.Messages)
		// <error> <#blocks> <#free> <#under writeback>, then the ten
		// counters of writecache 1.6.0.
		return fmt.Sprintf("%d 1000 %d %d 0 0 0 0 0 0 0 0 0 0", s.errno, 1000-s.dirty, s.writeback), nil
	}
}

// sharedWC is a writecache state the test changes between polls.
type sharedWC struct {
	mu sync.Mutex
	wcState
}

func (w *sharedWC) set(s wcState) {
	w.mu.Lock()
	w.wcState = s
	w.mu.Unlock()
}

func (w *sharedWC) status(int, []string) wcState {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.wcState
}

// assertResumed fails unless the device runs live table, with no inactive
// table, not suspended.
func assertResumed(t *testing.T, k *dmtest.Kernel, name string, live dm.Table) {
	t.Helper()
	d, ok := k.Device(name)
	if !ok {
		t.Fatalf("%s is gone", name)
	}
	if d.Suspended {
		t.Errorf("%s left suspended", name)
	}
	if d.Inactive != nil {
		t.Errorf("%s left with an inactive table %v", name, d.Inactive)
	}
	if !reflect.DeepEqual(d.Live, live) {
		t.Errorf("%s live table %v, want %v", name, d.Live, live)
	}
}

func ops(calls []dmtest.Call) []dmtest.Op {
	var out []dmtest.Op
	for _, c := range calls {
		out = append(out, c.Op)
	}
	return out
}

// checkErr fails unless err matches want (errors.Is) and contains text;
// both empty: no error.
func checkErr(t *testing.T, err, want error, text string) {
	t.Helper()
	switch {
	case want == nil && text == "":
		if err != nil {
			t.Fatalf("error %v, want none", err)
		}
	case err == nil:
		t.Fatalf("no error, want %v %q", want, text)
	case want != nil && !errors.Is(err, want):
		t.Errorf("error %v, want %v", err, want)
	case !strings.Contains(err.Error(), text):
		t.Errorf("error %q lacks %q", err, text)
	}
}

func TestHostDrain(t *testing.T) {
	// Status read 1 is drain's error check before the cleaner message;
	// the polls start at read 2.
	for _, c := range []struct {
		name    string
		timeout time.Duration
		script  func(n int, msgs []string) wcState
		fail    *dmtest.Failure
		cancel  int // cancel the context at this progress report
		wantErr error
		errText string
		// The messages the write tier received, and whether its normal
		// table was loaded again to turn the cleaner off.
		messages []string
		restored bool
		progress []uint64 // dirty counts reported, if checked
		live     dm.Table // the write tier's table at the end; default wtierTable
	}{{
		name: "dirty blocks go to zero",
		script: func(n int, _ []string) wcState {
			dirty := uint64(min(max(50-20*(n-2), 0), 50))
			return wcState{dirty: dirty, writeback: min(dirty, 10)}
		},
		messages: []string{"cleaner"},
		progress: []uint64{50, 30, 10, 0},
	}, {
		// More than the cleaner's tail: written back under the flushing
		// table (whose suspend does not wait for the write-back), the
		// last few under the cleaner.
		name: "most under the flushing table, the tail under the cleaner",
		script: func(n int, _ []string) wcState {
			dirty := uint64(min(max(200-100*(n-2), 0), 200))
			return wcState{dirty: dirty, writeback: min(dirty, 10)}
		},
		messages: []string{"cleaner"},
		restored: true,
		// Status reads 1 and 2 (200) are the drain's and the reload's.
		progress: []uint64{100, 0, 0},
		live:     flushingWtierTable,
	}, {
		name:     "interrupted under the flushing table: normal table again, no cleaner",
		script:   func(int, []string) wcState { return wcState{dirty: 500, writeback: 10} },
		cancel:   2,
		wantErr:  context.Canceled,
		errText:  "drain interrupted with 500 dirty blocks left",
		restored: true,
	}, {
		name: "stall recovered by a flush",
		script: func(_ int, msgs []string) wcState {
			if slices.Contains(msgs, "flush") {
				return wcState{}
			}
			return wcState{dirty: 7} // dirty, none in write-back: stalled
		},
		messages: []string{"cleaner", "flush"},
		progress: append(slices.Repeat([]uint64{7}, drainStallPolls), 0),
	}, {
		name:     "write-back under way is no stall: timeout",
		timeout:  30 * time.Millisecond,
		script:   func(int, []string) wcState { return wcState{dirty: 5, writeback: 1} },
		wantErr:  context.DeadlineExceeded, // from the wait or from a status read
		messages: []string{"cleaner"},
		restored: true,
	}, {
		name:     "cancelled",
		script:   func(int, []string) wcState { return wcState{dirty: 5, writeback: 1} },
		cancel:   3,
		wantErr:  context.Canceled,
		messages: []string{"cleaner"},
		restored: true,
	}, {
		name: "cache fails during the drain: left as it is",
		script: func(n int, _ []string) wcState {
			if n >= 4 {
				return wcState{dirty: 5, errno: -5}
			}
			return wcState{dirty: 5, writeback: 1}
		},
		errText:  "write cache in error state (-5)",
		messages: []string{"cleaner"},
	}, {
		name:    "cache failed before the drain: no cleaner",
		script:  func(int, []string) wcState { return wcState{dirty: 5, errno: -5} },
		errText: "the SSD failed",
	}, {
		name:    "cleaner message refused",
		script:  func(int, []string) wcState { return wcState{dirty: 5} },
		fail:    &dmtest.Failure{Op: dmtest.OpMessage, Device: hostWTier, Errno: unix.EIO},
		wantErr: unix.EIO,
		errText: "drain (cleaner message)",
	}} {
		t.Run(c.name, func(t *testing.T) {
			timeout := c.timeout
			if timeout == 0 {
				timeout = 10 * time.Second // a drain that never ends fails
			}
			e, k := newHostEngine(t, timeout)
			k.SetStatusFunc(hostWTier, wcStatus(c.script))
			if c.fail != nil {
				k.Fail(*c.fail)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var reports []Progress
			err := e.drain(ctx, hostVol, hostWTier, wtierTable, func(p Progress) {
				reports = append(reports, p)
				if len(reports) == c.cancel {
					cancel()
				}
			})
			checkErr(t, err, c.wantErr, c.errText)

			d, _ := k.Device(hostWTier)
			if !slices.Equal(d.Messages, c.messages) {
				t.Errorf("messages %q, want %q", d.Messages, c.messages)
			}
			if restored := len(k.CallsOf(hostWTier, dmtest.OpLoad)) > 0; restored != c.restored {
				t.Errorf("write tier table reloaded: %v, want %v", restored, c.restored)
			}
			live := c.live
			if live == nil {
				live = wtierTable
			}
			assertResumed(t, k, hostWTier, live)
			if c.progress != nil {
				var dirty []uint64
				for _, p := range reports {
					dirty = append(dirty, p.DirtyBlocks)
					if p.Phase != "drain" || p.Volume != hostVolume || p.BlockSize != 4096 || p.StartBlocks < p.DirtyBlocks {
						t.Errorf("progress %+v", p)
					}
				}
				if !slices.Equal(dirty, c.progress) {
					t.Errorf("progress reported dirty %v, want %v", dirty, c.progress)
				}
			}
		})
	}
}

// TestHostReload covers the table swap of a mode change (reload) and the
// dirty check it runs under suspend (provenClean): whatever fails, the
// device runs again with the table it had or the new one, and is resumed.
func TestHostReload(t *testing.T) {
	clean := func(int, []string) wcState { return wcState{} }
	for _, c := range []struct {
		name    string
		script  func(n int, msgs []string) wcState // write tier status
		fail    *dmtest.Failure
		noCheck bool
		wantErr error
		errText string
		ops     []dmtest.Op // on the top device
		live    dm.Table
	}{{
		name:   "swapped",
		script: clean,
		ops:    []dmtest.Op{dmtest.OpStatus, dmtest.OpSuspend, dmtest.OpLoad, dmtest.OpResume},
		live:   linearTable,
	}, {
		name:    "load refused: old table resumed",
		script:  clean,
		fail:    &dmtest.Failure{Op: dmtest.OpLoad, Device: hostTop, Errno: unix.EINVAL},
		wantErr: unix.EINVAL,
		errText: "load " + hostTop,
		ops:     []dmtest.Op{dmtest.OpStatus, dmtest.OpSuspend, dmtest.OpLoad, dmtest.OpResume},
		live:    fuaTable,
	}, {
		name:    "suspend refused: nothing changed",
		script:  clean,
		fail:    &dmtest.Failure{Op: dmtest.OpSuspend, Device: hostTop, Errno: unix.EBUSY},
		wantErr: dm.ErrBusy,
		errText: "suspend " + hostTop,
		ops:     []dmtest.Op{dmtest.OpStatus, dmtest.OpSuspend},
		live:    fuaTable,
	}, {
		name:    "dirty under suspend: refused and resumed",
		script:  func(int, []string) wcState { return wcState{dirty: 3} },
		wantErr: errRedirtied,
		errText: "3 blocks",
		ops:     []dmtest.Op{dmtest.OpStatus, dmtest.OpSuspend, dmtest.OpResume},
		live:    fuaTable,
	}, {
		name:    "write cache in error under suspend: refused and resumed",
		script:  func(int, []string) wcState { return wcState{errno: -5} },
		errText: "write cache in error state (-5)",
		ops:     []dmtest.Op{dmtest.OpStatus, dmtest.OpSuspend, dmtest.OpResume},
		live:    fuaTable,
	}, {
		name:    "status unreadable under suspend: refused and resumed",
		script:  clean,
		fail:    &dmtest.Failure{Op: dmtest.OpStatus, Device: hostWTier, Errno: unix.EIO},
		wantErr: unix.EIO,
		ops:     []dmtest.Op{dmtest.OpStatus, dmtest.OpSuspend, dmtest.OpResume},
		live:    fuaTable,
	}} {
		t.Run(c.name, func(t *testing.T) {
			e, k := newHostEngine(t, 0)
			k.SetStatusFunc(hostWTier, wcStatus(c.script))
			if c.fail != nil {
				k.Fail(*c.fail)
			}
			checked := false
			check := func(ctx context.Context) error {
				checked = true
				if d, _ := k.Device(hostTop); !d.Suspended {
					t.Error("check ran with the top device not suspended")
				}
				_, err := e.provenClean(ctx, hostVolume, hostWTier)
				return err
			}
			err := e.reload(context.Background(), hostTop, linearTable, check)
			checkErr(t, err, c.wantErr, c.errText)
			if got := ops(k.CallsOf(hostTop)); !slices.Equal(got, c.ops) {
				t.Errorf("ioctls on %s: %v, want %v", hostTop, got, c.ops)
			}
			if wantCheck := slices.Contains(c.ops, dmtest.OpResume); checked != wantCheck {
				t.Errorf("check ran: %v, want %v", checked, wantCheck)
			}
			assertResumed(t, k, hostTop, c.live)
		})
	}
}

// TestHostReloadResumeFails checks that a resume failing after a reload
// is retried (a suspended device blocks its I/O), and that one failing
// every time is reported with the way out.
func TestHostReloadResumeFails(t *testing.T) {
	t.Run("transient", func(t *testing.T) {
		e, k := newHostEngine(t, 0)
		k.Fail(dmtest.Failure{Op: dmtest.OpResume, Device: hostTop, Times: 2, Errno: unix.EIO})
		if err := e.reload(context.Background(), hostTop, linearTable, nil); err != nil {
			t.Fatalf("reload: %v", err)
		}
		if d, _ := k.Device(hostTop); d.Suspended {
			t.Fatalf("%s left suspended", hostTop)
		}
	})
	t.Run("persistent", func(t *testing.T) {
		e, k := newHostEngine(t, 0)
		k.Fail(dmtest.Failure{Op: dmtest.OpResume, Device: hostTop, Times: -1, Errno: unix.EIO})
		err := e.reload(context.Background(), hostTop, linearTable, nil)
		checkErr(t, err, unix.EIO, "dmsetup resume "+hostTop)
		if got := ops(k.CallsOf(hostTop)); slices.Index(got, dmtest.OpResume) < 0 || len(slices.DeleteFunc(got, func(o dmtest.Op) bool { return o != dmtest.OpResume })) != 4 {
			t.Errorf("resume attempts: %v, want 4", got)
		}
	})
}

func TestHostReloadRefusesFailedWriteCache(t *testing.T) {
	e, k := newHostEngine(t, 0)
	k.SetStatusFunc(hostWTier, wcStatus(func(int, []string) wcState { return wcState{errno: -5} }))
	err := e.reload(context.Background(), hostWTier, wtierTable, nil)
	checkErr(t, err, nil, "write cache in error state (-5)")
	if got := ops(k.CallsOf(hostWTier)); !slices.Equal(got, []dmtest.Op{dmtest.OpStatus}) {
		t.Errorf("ioctls on %s: %v, want only the status read", hostWTier, got)
	}
}

// TestHostModeChangeRollback runs the dm steps of a switch from writeback
// to writethrough (drain, then swap the top table with the write tier
// proven clean under suspend) with a failure injected half way.
func TestHostModeChangeRollback(t *testing.T) {
	for _, c := range []struct {
		name    string
		fail    dmtest.Failure
		wantErr error
		errText string
	}{
		{"load of the new top refused", dmtest.Failure{Op: dmtest.OpLoad, Device: hostTop, Errno: unix.EINVAL}, unix.EINVAL, "load " + hostTop},
		{"suspend of the top refused", dmtest.Failure{Op: dmtest.OpSuspend, Device: hostTop, Errno: unix.EIO}, unix.EIO, "suspend " + hostTop},
		{"write tier unreadable under suspend", dmtest.Failure{Op: dmtest.OpStatus, Device: hostWTier, Nth: 3, Errno: unix.EIO}, unix.EIO, "status of " + hostWTier},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, k := newHostEngine(t, 0)
			// Clean once the cleaner runs: status read 1 is the error
			// check, 2 the first poll, 3 the check under suspend.
			k.SetStatusFunc(hostWTier, wcStatus(func(_ int, msgs []string) wcState {
				if slices.Contains(msgs, "cleaner") {
					return wcState{}
				}
				return wcState{dirty: 9, writeback: 9}
			}))
			k.Fail(c.fail)
			check := func(ctx context.Context) error {
				_, err := e.provenClean(ctx, hostVolume, hostWTier)
				return err
			}
			err := e.drainAndReload(context.Background(), hostVol, hostWTier, wtierTable, hostTop, linearTable, check, nil)
			checkErr(t, err, c.wantErr, c.errText)
			assertResumed(t, k, hostTop, fuaTable)
			assertResumed(t, k, hostWTier, wtierTable)
			// The volume stays in writeback: its write tier must cache
			// writes again, so its table is reloaded without the cleaner.
			if n := len(k.CallsOf(hostWTier, dmtest.OpLoad)); n != 1 {
				t.Errorf("write tier table loaded %d times, want once to turn the cleaner off", n)
			}
		})
	}
}

// TestHostDrainRetries: blocks written between the drain and the suspend
// make the check under suspend refuse the swap; the engine drains again,
// up to maxDrainRounds times.
func TestHostDrainRetries(t *testing.T) {
	for _, c := range []struct {
		name      string
		redirtied int // rounds whose check finds dirty blocks
		wantErr   error
		rounds    int
		live      dm.Table
	}{
		{"clean at once", 0, nil, 1, linearTable},
		{"redirtied twice", 2, nil, 3, linearTable},
		{"always redirtied: gives up", 100, errRedirtied, maxDrainRounds, fuaTable},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, k := newHostEngine(t, 0)
			wc := &sharedWC{}
			k.SetStatusFunc(hostWTier, wcStatus(wc.status))
			rounds := 0
			check := func(ctx context.Context) error {
				rounds++
				if rounds <= c.redirtied {
					wc.set(wcState{dirty: 4}) // writes landed before the suspend
				}
				_, err := e.provenClean(ctx, hostVolume, hostWTier)
				wc.set(wcState{}) // the next drain cleans them
				return err
			}
			err := e.drainAndReload(context.Background(), hostVol, hostWTier, wtierTable, hostTop, linearTable, check, nil)
			checkErr(t, err, c.wantErr, "")
			if rounds != c.rounds {
				t.Errorf("%d rounds, want %d", rounds, c.rounds)
			}
			d, _ := k.Device(hostWTier)
			if n := len(d.Messages); n != c.rounds {
				t.Errorf("%d cleaner messages, want one per round (%d)", n, c.rounds)
			}
			if n := len(k.CallsOf(hostTop, dmtest.OpSuspend)); n != c.rounds {
				t.Errorf("%d suspends of %s, want %d", n, hostTop, c.rounds)
			}
			assertResumed(t, k, hostTop, c.live)
			// Cleaner turned off again only when the write tier stays.
			if n, want := len(k.CallsOf(hostWTier, dmtest.OpLoad)), btoi(c.wantErr != nil); n != want {
				t.Errorf("write tier table loaded %d times, want %d", n, want)
			}
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestHostCreateAndRemove(t *testing.T) {
	ctx := context.Background()
	dev := stack.Device{Name: stack.DeviceName(hostVolume, stack.RoleReadTier), UUID: stack.DeviceUUID("u1", stack.RoleReadTier), Table: linearTable}

	t.Run("create with a refused table is undone", func(t *testing.T) {
		e, k := newHostEngine(t, 0)
		k.Fail(dmtest.Failure{Op: dmtest.OpLoad, Device: dev.Name, Errno: unix.EINVAL})
		_, err := e.ensure(ctx, dev)
		checkErr(t, err, unix.EINVAL, "create "+dev.Name)
		if _, ok := k.Device(dev.Name); ok {
			t.Errorf("%s left behind", dev.Name)
		}
	})
	t.Run("interrupted create is finished", func(t *testing.T) {
		e, k := newHostEngine(t, 0)
		k.AddDevice(dev.Name, dev.UUID, nil)
		if created, err := e.ensure(ctx, dev); err != nil || !created {
			t.Fatalf("ensure = %v, %v", created, err)
		}
		assertResumed(t, k, dev.Name, linearTable)
	})
	t.Run("suspended device with the wanted table is resumed", func(t *testing.T) {
		e, k := newHostEngine(t, 0)
		k.AddDevice(dev.Name, dev.UUID, linearTable)
		if err := e.dm.Suspend(ctx, dev.Name, dm.SuspendOptions{}); err != nil {
			t.Fatal(err)
		}
		if created, err := e.ensure(ctx, dev); err != nil || created {
			t.Fatalf("ensure = %v, %v", created, err)
		}
		assertResumed(t, k, dev.Name, linearTable)
	})
	t.Run("drifted table is left alone", func(t *testing.T) {
		e, k := newHostEngine(t, 0)
		k.AddDevice(dev.Name, dev.UUID, fuaTable)
		_, err := e.ensure(ctx, dev)
		var drift *DriftError
		if !errors.As(err, &drift) || drift.Device != dev.Name {
			t.Fatalf("ensure = %v, want a DriftError", err)
		}
		if n := len(k.CallsOf(dev.Name, dmtest.OpLoad, dmtest.OpSuspend, dmtest.OpResume)); n != 0 {
			t.Errorf("%d changes to a drifted device", n)
		}
	})

	for _, c := range []struct {
		name    string
		uuid    string
		open    int32
		fail    *dmtest.Failure
		errText string
		wantErr error
		removed bool
		calls   int // remove ioctls issued
	}{
		{name: "removed", uuid: dev.UUID, removed: true, calls: 1},
		{name: "open: refused, not retried", uuid: dev.UUID, open: 1, wantErr: dm.ErrBusy, errText: "open count 1"},
		{name: "not ours: refused", uuid: "LVM-abc", errText: "not tidecache's"},
		{name: "kernel says busy: not retried", uuid: dev.UUID, wantErr: dm.ErrBusy, calls: 1,
			fail: &dmtest.Failure{Op: dmtest.OpRemove, Errno: unix.EBUSY}},
	} {
		t.Run("remove "+c.name, func(t *testing.T) {
			e, k := newHostEngine(t, 0)
			k.AddDevice(dev.Name, c.uuid, linearTable)
			k.SetOpenCount(dev.Name, c.open)
			if c.fail != nil {
				k.Fail(*c.fail)
			}
			err := e.removeDevice(ctx, dev.Name)
			checkErr(t, err, c.wantErr, c.errText)
			if _, ok := k.Device(dev.Name); ok == c.removed {
				t.Errorf("device present: %v, want %v", ok, !c.removed)
			}
			if n := len(k.CallsOf(dev.Name, dmtest.OpRemove)); n != c.calls {
				t.Errorf("%d remove ioctls, want %d", n, c.calls)
			}
		})
	}
	t.Run("remove of a missing device", func(t *testing.T) {
		e, _ := newHostEngine(t, 0)
		if err := e.removeDevice(ctx, dev.Name); err != nil {
			t.Fatal(err)
		}
	})
}
