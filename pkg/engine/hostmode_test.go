// SPDX-License-Identifier: Apache-2.0

//go:build linux

package engine

// SetMode end to end on the host: the pool's SSD and origin are sparse
// files (fileDisks), its devices run on the dmtest fake kernel.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tidecache/tidecache/pkg/dm"
	"github.com/tidecache/tidecache/pkg/dm/dmtest"
	"github.com/tidecache/tidecache/pkg/pool"
	"github.com/tidecache/tidecache/pkg/stack"
)

// fileDisks stands in for the node's block devices: a fixed list of
// files, opened plainly, whose paths tables keep as they are.
type fileDisks struct{ paths []string }

func (f fileDisks) list() ([]string, error)                  { return f.paths, nil }
func (fileDisks) openForWrite(path string) (*os.File, error) { return os.OpenFile(path, os.O_RDWR, 0) }
func (fileDisks) devNumber(ref string) (string, error)       { return ref, nil }

// hostPool is a pool with one writeback volume "db" running on a fake
// kernel.
type hostPool struct {
	e      *Engine
	k      *dmtest.Kernel
	uuid   string
	origin string
	devs   stack.Devices
	vol    pool.Volume
}

func newHostPool(t *testing.T) *hostPool {
	t.Helper()
	ctx := context.Background()
	e, k := newFakeDMEngine(t, 10*time.Second)
	dir := t.TempDir()
	origin, ssd := filepath.Join(dir, "origin"), filepath.Join(dir, "ssd")
	sparseFiles(t, map[string]int64{origin: 256 << 20, ssd: 128 << 20})
	e.disks = fileDisks{paths: []string{origin, ssd}}
	member := newUUID()
	l, err := pool.New("tank", newUUID(), pool.Origin{Path: origin, SizeSectors: 256 << 20 / pool.SectorSize},
		[]pool.Member{{UUID: member, Path: ssd, SizeSectors: 128 << 20 / pool.SectorSize}})
	if err != nil {
		t.Fatal(err)
	}
	v, err := l.AddVolume(pool.VolumeRequest{Name: "db", Size: 64 << 20, WriteCache: 32 << 20}, newUUID(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if v.Mode != pool.ModeWriteback {
		t.Fatalf("volume mode %s, want writeback", v.Mode)
	}
	ps := &poolState{Layout: l, Members: map[string]string{member: ssd}, Generations: map[string]uint64{}}
	if err := e.writeLayout(ps, origin, l); err != nil {
		t.Fatal(err)
	}
	hp := &hostPool{e: e, k: k, uuid: l.UUID, origin: origin, devs: e.devices(ps, origin), vol: v}
	if err := e.activate(ctx, hp.build(t, v.Mode)); err != nil {
		t.Fatal(err)
	}
	return hp
}

// sparseFiles creates each file of sizes, sparse, as a stand-in device.
func sparseFiles(t *testing.T, sizes map[string]int64) {
	t.Helper()
	for path, size := range sizes {
		if err := os.WriteFile(path, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(path, size); err != nil {
			t.Fatal(err)
		}
	}
}

// build returns the stack of the volume in mode m.
func (hp *hostPool) build(t *testing.T, m pool.Mode) stack.Stack {
	t.Helper()
	st, err := stack.BuildMode(hp.vol, m, hp.devs, hp.e.cfg.Tuning)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// recorded returns the volume and the layout generation the superblocks
// hold now.
func (hp *hostPool) recorded(t *testing.T) (pool.Volume, uint64) {
	t.Helper()
	found, err := hp.e.scan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	p, ok := found.Pools[hp.uuid]
	if !ok {
		t.Fatal("pool not found by scan")
	}
	v, ok := p.Layout.Volume("db")
	if !ok {
		t.Fatal("volume db not in the layout")
	}
	return *v, p.Layout.Generation
}

// drainsOnCleaner makes the write tier report 10 dirty blocks, 4 fewer
// on every status read once it got the cleaner message.
func (hp *hostPool) drainsOnCleaner() {
	since := 0 // status reads since the cleaner message
	hp.k.SetStatusFunc(stack.DeviceName("db", stack.RoleWriteTier), wcStatus(func(_ int, msgs []string) wcState {
		if !slices.Contains(msgs, "cleaner") {
			return wcState{dirty: 10}
		}
		dirty := uint64(max(10-4*since, 0))
		since++
		return wcState{dirty: dirty, writeback: min(dirty, 2)}
	}))
}

func TestHostSetModeRoundTrip(t *testing.T) {
	ctx := context.Background()
	hp := newHostPool(t)
	hp.drainsOnCleaner()
	wb, wt := hp.build(t, pool.ModeWriteback), hp.build(t, pool.ModeWritethrough)

	var drained []uint64
	err := hp.e.SetMode(ctx, "db", pool.ModeWritethrough, func(p Progress) { drained = append(drained, p.DirtyBlocks) })
	if err != nil {
		t.Fatal(err)
	}
	if want := []uint64{10, 6, 2, 0}; !slices.Equal(drained, want) {
		t.Errorf("drain progress %v, want %v", drained, want)
	}
	assertResumed(t, hp.k, wt.Top().Name, wt.Top().Table)
	for _, r := range []stack.Role{stack.RoleWriteTier, stack.RoleWriteData} {
		if _, ok := hp.k.Device(stack.DeviceName("db", r)); ok {
			t.Errorf("%s still there in writethrough", stack.DeviceName("db", r))
		}
	}
	if v, _ := hp.recorded(t); v.Mode != pool.ModeWritethrough {
		t.Errorf("superblocks record mode %s, want writethrough", v.Mode)
	}

	// Back to writeback: the write tier is rebuilt, its metadata zeroed.
	if err := hp.e.SetMode(ctx, "db", pool.ModeWriteback, nil); err != nil {
		t.Fatal(err)
	}
	for _, d := range wb.Devices {
		assertResumed(t, hp.k, d.Name, d.Table)
	}
	if v, _ := hp.recorded(t); v.Mode != pool.ModeWriteback {
		t.Errorf("superblocks record mode %s, want writeback", v.Mode)
	}
}

// TestHostSetModeRollback fails a switch from writeback to writethrough
// half way: the old top table stays live and resumed, the error is
// returned, and the superblocks record writeback again.
func TestHostSetModeRollback(t *testing.T) {
	for _, c := range []struct {
		name    string
		fail    dmtest.Failure
		wantErr error
		// layoutWrites: how many generations the failed switch used: 0
		// when it failed before recording the new mode, 2 when it
		// recorded it and then the old one again.
		layoutWrites uint64
		// cleanerOff: the drained write tier's table was reloaded to turn
		// its cleaner off, as the volume stays in writeback.
		cleanerOff bool
	}{
		{"new top table refused", dmtest.Failure{Op: dmtest.OpLoad, Device: "tc-db", Errno: unix.EINVAL}, unix.EINVAL, 2, true},
		{"top cannot be suspended", dmtest.Failure{Op: dmtest.OpSuspend, Device: "tc-db", Errno: unix.EIO}, unix.EIO, 0, true},
		{"cleaner refused", dmtest.Failure{Op: dmtest.OpMessage, Device: "tc-db-wtier", Errno: unix.EIO}, unix.EIO, 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			hp := newHostPool(t)
			hp.drainsOnCleaner()
			wb := hp.build(t, pool.ModeWriteback)
			_, gen := hp.recorded(t)
			hp.k.Fail(c.fail)
			err := hp.e.SetMode(context.Background(), "db", pool.ModeWritethrough, nil)
			checkErr(t, err, c.wantErr, "volume db: switch writeback -> writethrough")
			for _, d := range wb.Devices {
				assertResumed(t, hp.k, d.Name, d.Table)
			}
			v, gen2 := hp.recorded(t)
			if v.Mode != pool.ModeWriteback {
				t.Errorf("superblocks record mode %s, want writeback", v.Mode)
			}
			if gen2-gen != c.layoutWrites {
				t.Errorf("layout generation %d -> %d, want %d writes", gen, gen2, c.layoutWrites)
			}
			if reloaded := len(hp.k.CallsOf("tc-db-wtier", dmtest.OpLoad)) > 1; reloaded != c.cleanerOff {
				t.Errorf("write tier reloaded: %v, want %v", reloaded, c.cleanerOff)
			}
		})
	}
}

// flushingLoaded reports whether a status read finds the flushing table
// (watermarks 0) live on the write tier.
func flushingLoaded(q dmtest.StatusQuery) bool {
	return strings.Contains(q.Live.String(), "high_watermark 0 low_watermark 0")
}

// TestHostFlush: a flush reloads the write tier with the flushing table
// (watermarks 0), waits until the blocks dirty at its start are written
// back, and loads the normal table again, also when it fails or is
// interrupted: the volume stays in writeback with its usual table.
func TestHostFlush(t *testing.T) {
	wtier := stack.DeviceName("db", stack.RoleWriteTier)
	for _, c := range []struct {
		name string
		// status of the write tier: dirty blocks and allocations since the
		// table was loaded, from the status read and the table.
		status   func(n int, q dmtest.StatusQuery) (dirty, allocated uint64)
		fail     *dmtest.Failure
		cancel   bool // cancel the context after the flush started
		wantErr  error
		wantText string
		wantLeft uint64
	}{
		{name: "written back", status: func(n int, q dmtest.StatusQuery) (uint64, uint64) {
			if flushingLoaded(q) {
				return uint64(max(10-4*n, 0)), 0
			}
			return 10, 0
		}},
		{name: "new writes keep coming: done when the first 10 are written", status: func(n int, q dmtest.StatusQuery) (uint64, uint64) {
			if flushingLoaded(q) {
				// 3 new blocks per poll, 7 written back: 10 written by the
				// second poll, with 6 new ones dirty.
				return uint64(max(10-4*n, 6)), uint64(3 * n)
			}
			return 10, 0
		}, wantLeft: 6},
		{name: "interrupted", cancel: true, status: func(n int, q dmtest.StatusQuery) (uint64, uint64) { return 10, 0 },
			wantErr: context.Canceled, wantText: "flush interrupted with 10 of 10 blocks still to write back"},
		{name: "flushing table refused", fail: &dmtest.Failure{Op: dmtest.OpLoad, Device: wtier, Errno: unix.EINVAL},
			status: func(n int, q dmtest.StatusQuery) (uint64, uint64) { return 10, 0 }, wantErr: unix.EINVAL, wantText: "start flush"},
	} {
		t.Run(c.name, func(t *testing.T) {
			hp := newHostPool(t)
			normal, _ := hp.build(t, pool.ModeWriteback).Find(stack.RoleWriteTier)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			reads := 0
			hp.k.SetStatusFunc(wtier, func(q dmtest.StatusQuery) (string, error) {
				if flushingLoaded(q) {
					reads++
					if c.cancel && reads == 2 {
						cancel()
					}
				}
				dirty, allocated := c.status(reads, q)
				return fmt.Sprintf("0 1000 %d 0 0 0 0 0 0 0 %d 0 0 0", 1000-dirty, allocated), nil
			})
			if c.fail != nil {
				hp.k.Fail(*c.fail)
			}
			hp.k.ResetCalls()
			left, err := hp.e.Flush(ctx, "db", nil)
			checkErr(t, err, c.wantErr, c.wantText)
			if err == nil && left != c.wantLeft {
				t.Errorf("%d dirty blocks left, want %d", left, c.wantLeft)
			}
			assertResumed(t, hp.k, wtier, normal.Table)
			d, _ := hp.k.Device(wtier)
			if slices.Contains(d.Messages, "flush") {
				t.Errorf("flush message sent (%q): it blocks in the kernel until the flush ends", d.Messages)
			}
			loads := hp.k.CallsOf(wtier, dmtest.OpLoad)
			if c.fail == nil && len(loads) != 2 {
				t.Errorf("write tier loaded %d times, want 2 (flushing table, then the normal one)", len(loads))
			}
		})
	}
}

// TestHostFlushWithoutNodeLock: while a flush waits for the HDDs it holds
// neither the node lock (other commands and other volumes' flushes do not
// queue behind it) nor leaves its flushing table open to a drift repair;
// a command that changes the write tier meanwhile has the last word and
// ends the flush early; a flushing table with no flush alive (one killed)
// is drift again.
func TestHostFlushWithoutNodeLock(t *testing.T) {
	wtier := stack.DeviceName("db", stack.RoleWriteTier)
	for _, c := range []struct {
		name string
		// meanwhile runs while the flush waits, with the dirty count
		// held at 10; it returns the table the write tier must end with
		// (nil: the normal one).
		meanwhile func(t *testing.T, hp *hostPool, normal dm.Table) dm.Table
		wantText  string
	}{
		{name: "node lock free, no drift", meanwhile: func(t *testing.T, hp *hostPool, normal dm.Table) dm.Table {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			unlock, err := hp.e.lock(ctx)
			if err != nil {
				t.Fatalf("node lock while a flush waits: %v", err)
			}
			unlock()
			if err := hp.e.CheckVolume(ctx, "db"); err != nil {
				t.Errorf("drift check while a flush runs: %v, want none (the flushing table is wanted)", err)
			}
			return nil
		}},
		{name: "a tune meanwhile wins", meanwhile: func(t *testing.T, hp *hostPool, normal dm.Table) dm.Table {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			unlock, err := hp.e.lock(ctx)
			if err != nil {
				t.Fatalf("node lock while a flush waits: %v", err)
			}
			defer unlock()
			p, err := dm.ParseWritecacheParams(normal[0].Params)
			if err != nil {
				t.Fatal(err)
			}
			jobs := uint64(7)
			p.WritebackJobs = &jobs
			tuned := dm.Table{p.Target(normal[0].Start, normal[0].Length)}
			if err := hp.e.reload(ctx, wtier, tuned, nil); err != nil {
				t.Fatal(err)
			}
			return tuned
		}, wantText: "flush ended early: another command"},
	} {
		t.Run(c.name, func(t *testing.T) {
			hp := newHostPool(t)
			normal, _ := hp.build(t, pool.ModeWriteback).Find(stack.RoleWriteTier)
			var done atomic.Bool
			waiting := make(chan struct{}, 1)
			hp.k.SetStatusFunc(wtier, func(q dmtest.StatusQuery) (string, error) {
				dirty := 10
				if flushingLoaded(q) {
					if done.Load() {
						dirty = 0
					} else {
						select {
						case waiting <- struct{}{}:
						default:
						}
					}
				}
				return fmt.Sprintf("0 1000 %d 0 0 0 0 0 0 0 0 0 0 0", 1000-dirty), nil
			})
			hp.k.ResetCalls()
			ended := make(chan error, 1)
			go func() {
				_, err := hp.e.Flush(context.Background(), "db", nil)
				ended <- err
			}()
			select {
			case <-waiting:
			case err := <-ended:
				t.Fatalf("flush ended before it waited: %v", err)
			}
			want := c.meanwhile(t, hp, normal.Table)
			done.Store(true)
			err := <-ended
			checkErr(t, err, nil, c.wantText)
			if want == nil {
				want = normal.Table
			}
			assertResumed(t, hp.k, wtier, want)
		})
	}

	t.Run("a flushing table with no flush alive is drift", func(t *testing.T) {
		ctx := context.Background()
		hp := newHostPool(t)
		normal, _ := hp.build(t, pool.ModeWriteback).Find(stack.RoleWriteTier)
		f, err := flushingTable(normal.Table)
		if err != nil {
			t.Fatal(err)
		}
		hp.k.SetStatus(wtier, "0 1000 990 0 0 0 0 0 0 0 0 0 0 0")
		if err := hp.e.reload(ctx, wtier, f, nil); err != nil {
			t.Fatal(err)
		}
		// A flush killed: its lock file is left, its flock gone.
		release, err := hp.e.lockFile(ctx, hp.e.flushLockPath(wtier), "test")
		if err != nil {
			t.Fatal(err)
		}
		release()
		var drift *DriftError
		if err := hp.e.CheckVolume(ctx, "db"); !errors.As(err, &drift) || drift.Device != wtier {
			t.Fatalf("drift check of a flushing table left by a dead flush: %v, want drift of %s", err, wtier)
		}
	})
}

// TestHostCreateWipesOriginEnds checks that a volume carved where an older
// one was does not show that volume's filesystem: both ends of its origin
// extent are zeroed before it is recorded (the middle keeps its bytes, as
// with lvm).
func TestHostCreateWipesOriginEnds(t *testing.T) {
	ctx := context.Background()
	hp := newHostPool(t)
	// The next extent of the origin, after db's, as an older volume's data.
	start := int64(hp.vol.Origin.End()) * pool.SectorSize
	const size = 32 << 20
	old := bytes.Repeat([]byte{0xa5}, size)
	f, err := os.OpenFile(hp.origin, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(old, start); err != nil {
		t.Fatal(err)
	}
	f.Close()
	info, err := hp.e.CreateVolume(ctx, "tank", pool.VolumeRequest{Name: "logs", Size: size, Mode: pool.ModePassthrough})
	if err != nil {
		t.Fatal(err)
	}
	found, err := hp.e.scan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, v, err := findVolume(found, info.Name)
	if err != nil {
		t.Fatal(err)
	}
	if got := int64(v.Origin.Offset) * pool.SectorSize; got != start {
		t.Fatalf("logs carved at byte %d, want %d (after db)", got, start)
	}
	b, err := os.ReadFile(hp.origin)
	if err != nil {
		t.Fatal(err)
	}
	ext := b[start : start+size]
	zero := make([]byte, originWipeBytes)
	if !bytes.Equal(ext[:originWipeBytes], zero) || !bytes.Equal(ext[size-originWipeBytes:], zero) {
		t.Fatal("the ends of the new volume's origin extent still hold the old data")
	}
	if ext[originWipeBytes] != 0xa5 || ext[size-originWipeBytes-1] != 0xa5 {
		t.Fatal("more than the ends was written")
	}
}
