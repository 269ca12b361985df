//go:build linux

package engine

// SetMode end to end on the host: the pool's SSD and origin are sparse
// files (fileDisks), its devices run on the dmtest fake kernel.

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

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
	for path, size := range map[string]int64{origin: 256 << 20, ssd: 128 << 20} {
		if err := os.WriteFile(path, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(path, size); err != nil {
			t.Fatal(err)
		}
	}
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
	hp := &hostPool{e: e, k: k, uuid: l.UUID, origin: origin, devs: ps.devices(origin), vol: v}
	if err := e.activate(ctx, hp.build(t, v.Mode)); err != nil {
		t.Fatal(err)
	}
	return hp
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

func TestHostFlush(t *testing.T) {
	wtier := stack.DeviceName("db", stack.RoleWriteTier)
	for _, c := range []struct {
		name    string
		fail    *dmtest.Failure
		wantErr error
	}{
		{name: "written back"},
		{name: "flush message fails", fail: &dmtest.Failure{Op: dmtest.OpMessage, Device: wtier, Errno: unix.EIO}, wantErr: unix.EIO},
	} {
		t.Run(c.name, func(t *testing.T) {
			hp := newHostPool(t)
			hp.k.SetStatusFunc(wtier, wcStatus(func(_ int, msgs []string) wcState {
				if slices.Contains(msgs, "flush") {
					return wcState{}
				}
				return wcState{dirty: 10, writeback: 10}
			}))
			if c.fail != nil {
				hp.k.Fail(*c.fail)
			}
			left, err := hp.e.Flush(context.Background(), "db", nil)
			checkErr(t, err, c.wantErr, "")
			if err == nil && left != 0 {
				t.Errorf("%d dirty blocks left, want 0", left)
			}
			d, _ := hp.k.Device(wtier)
			if want := c.fail == nil; slices.Contains(d.Messages, "flush") != want {
				t.Errorf("messages %q", d.Messages)
			}
		})
	}
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
