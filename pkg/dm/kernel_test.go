// SPDX-License-Identifier: Apache-2.0

//go:build linux && vmguest

// Tests against a real device-mapper: they run as root inside the test VM
// (tests/vm/dmkernel_test.go builds this package with -tags vmguest, boots
// a VM and runs the binary there). They use the whole disk named by
// TIDECACHE_TEST_DISK, which they overwrite; with the tag on and the
// variable unset they fail rather than skip, so a misconfigured run cannot
// pass silently.
//
// When TIDECACHE_GOLDEN_DIR is set, the tests also write what `dmsetup
// status` and `dmsetup table` print for a linear, a writecache, a cache
// and a raid1 device into that directory under the names of testdata/*-<series>.*,
// the kernel series given in TIDECACHE_GOLDEN_SERIES (see
// testdata/README.md).

package dm_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/tidecache/tidecache/pkg/dm"
)

// Regions of the test disk, in 512-byte sectors. Every test uses its own,
// so a failed test leaves nothing another one reads.
const (
	mib = 2048 // sectors

	linearOffset, linearLen = 1 * mib, 8 * mib

	wcOriginOffset, wcOriginLen = 16 * mib, 64 * mib
	wcCacheOffset, wcCacheLen   = 80 * mib, 32 * mib

	cacheOriginOffset, cacheOriginLen = 112 * mib, 64 * mib
	cacheMetaOffset, cacheMetaLen     = 176 * mib, 8 * mib
	cacheDataOffset, cacheDataLen     = 184 * mib, 32 * mib

	// raid1: two legs, each a metadata slice then a data slice.
	raidOffset, raidMetaLen, raidDataLen = 216 * mib, 1 * mib, 8 * mib

	diskNeeds = raidOffset + 2*(raidMetaLen+raidDataLen)
)

// testDisk returns the disk the tests may overwrite.
func testDisk(t *testing.T) string {
	t.Helper()
	d := os.Getenv("TIDECACHE_TEST_DISK")
	if d == "" {
		t.Fatal("TIDECACHE_TEST_DISK is not set: the vmguest tests need a whole disk they may overwrite (run them through tests/vm TestDMKernel)")
	}
	return d
}

// openClient opens the control device for one test.
func openClient(t *testing.T) (*dm.Client, context.Context) {
	t.Helper()
	c, err := dm.Open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return c, ctx
}

// devNum returns "major:minor" of a block device, as tables print it.
func devNum(t *testing.T, path string) string {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK {
		t.Fatalf("%s is not a block device", path)
	}
	return fmt.Sprintf("%d:%d", unix.Major(uint64(st.Rdev)), unix.Minor(uint64(st.Rdev)))
}

// removeLater removes a device at the end of the test if it still exists.
// Cleanups run last-in first-out, so devices stacked later go first.
func removeLater(t *testing.T, c *dm.Client, name string) {
	t.Helper()
	t.Cleanup(func() {
		if err := c.Remove(context.Background(), name); err != nil && !errors.Is(err, dm.ErrNotFound) {
			t.Errorf("cleanup: %v", err)
		}
	})
}

// mkdev creates a device with a live table and returns its node.
func mkdev(t *testing.T, c *dm.Client, ctx context.Context, name, uuid string, table dm.Table) string {
	t.Helper()
	if _, err := c.Create(ctx, name, uuid); err != nil {
		t.Fatal(err)
	}
	removeLater(t, c, name)
	if err := c.Load(ctx, name, table); err != nil {
		t.Fatal(err)
	}
	if err := c.Resume(ctx, name); err != nil {
		t.Fatal(err)
	}
	return dm.DevicePath(name)
}

// dmsetup runs dmsetup and returns its stdout.
func dmsetup(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command("dmsetup", args...)
	cmd.Env = append(os.Environ(), "DM_DISABLE_UDEV=1", "LC_ALL=C")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("dmsetup %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return string(out)
}

// sameAsDmsetup checks that our reading of a device's table and status is
// what dmsetup prints, and returns dmsetup's output of both.
func sameAsDmsetup(t *testing.T, c *dm.Client, ctx context.Context, name string) (table, status string) {
	t.Helper()
	table, status = dmsetup(t, "table", name), dmsetup(t, "status", name)
	got, err := c.Table(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if g, w := trimLines(got.String()), trimLines(table); g != w {
		t.Errorf("Table(%s):\n ours    %q\n dmsetup %q", name, g, w)
	}
	st, err := c.Status(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if g, w := trimLines(st.String()), trimLines(status); g != w {
		t.Errorf("Status(%s):\n ours    %q\n dmsetup %q", name, g, w)
	}
	return table, status
}

// trimLines drops trailing blanks of each line: dmsetup prints a blank
// after the target type even when the parameters are empty, and the cache
// target ends its status with one.
func trimLines(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}
	return strings.Join(lines, "\n")
}

// capture writes a golden line for testdata when TIDECACHE_GOLDEN_DIR is set.
func capture(t *testing.T, target, kind, content string) {
	t.Helper()
	dir := os.Getenv("TIDECACHE_GOLDEN_DIR")
	if dir == "" {
		return
	}
	series := os.Getenv("TIDECACHE_GOLDEN_SERIES")
	if series == "" {
		t.Fatal("TIDECACHE_GOLDEN_DIR without TIDECACHE_GOLDEN_SERIES (the kernel series the files are named for, e.g. 6.12)")
	}
	file := target + "-" + series + "." + kind
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, file), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// directBuf returns a page-aligned buffer for O_DIRECT I/O.
func directBuf(t *testing.T, n int) []byte {
	t.Helper()
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(b) })
	return b
}

// pwrite writes data at byte offset off of path with O_DIRECT, bypassing
// the page cache, so another device mapping the same sectors sees it.
// Each chunk bytes go in one write call.
func pwrite(t *testing.T, path string, off int64, data []byte, chunk int) {
	t.Helper()
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	defer unix.Close(fd)
	buf := directBuf(t, chunk)
	for done := 0; done < len(data); done += chunk {
		copy(buf, data[done:done+chunk])
		if n, err := unix.Pwrite(fd, buf, off+int64(done)); err != nil || n != chunk {
			t.Fatalf("write %s at %d: %d, %v", path, off+int64(done), n, err)
		}
	}
}

// pread reads n bytes at byte offset off of path with O_DIRECT.
func pread(t *testing.T, path string, off int64, n int) ([]byte, error) {
	t.Helper()
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	defer unix.Close(fd)
	buf := directBuf(t, n)
	got, err := unix.Pread(fd, buf, off)
	if err != nil {
		return nil, err
	}
	if got != n {
		return nil, fmt.Errorf("read %s at %d: %d of %d bytes", path, off, got, n)
	}
	return bytes.Clone(buf), nil
}

func mustPread(t *testing.T, path string, off int64, n int) []byte {
	t.Helper()
	b, err := pread(t, path, off, n)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return b
}

// pattern returns n bytes that differ per 4 KiB block and per seed.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i/4096) ^ byte(i) ^ seed
	}
	return b
}

// syncDevice flushes a block device's write cache (fsync issues a FLUSH).
func syncDevice(t *testing.T, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		t.Fatalf("fsync %s: %v", path, err)
	}
}

// discard discards a byte range of a block device (BLKDISCARD) and
// reports whether the device supports it.
func discard(t *testing.T, path string, off, n uint64) bool {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := [2]uint64{off, n}
	_, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.BLKDISCARD, uintptr(unsafe.Pointer(&r[0])))
	switch e {
	case 0:
		return true
	case unix.EOPNOTSUPP:
		t.Logf("%s does not support discard", path)
		return false
	}
	t.Fatalf("BLKDISCARD %s: %v", path, e)
	return false
}

// zeroHead zeroes the first 64 KiB of a disk region, so a cache target
// built on it formats fresh metadata instead of loading an old one.
func zeroHead(t *testing.T, disk string, sector uint64) {
	t.Helper()
	pwrite(t, disk, int64(sector)*dm.SectorSize, make([]byte, 64<<10), 64<<10)
}

func TestKernelDisk(t *testing.T) {
	disk := testDisk(t)
	f, err := os.Open(disk)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	size, err := f.Seek(0, 2)
	if err != nil {
		t.Fatal(err)
	}
	if size < diskNeeds*dm.SectorSize {
		t.Fatalf("%s has %d bytes; the tests need %d", disk, size, diskNeeds*dm.SectorSize)
	}
}

func TestKernelVersions(t *testing.T) {
	c, ctx := openClient(t)
	v, err := c.Version(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v.Major != 4 || !v.AtLeast(dm.Version{Major: 4, Minor: 41}) {
		t.Errorf("ioctl interface %s: want 4.41 or newer (DM_GET_TARGET_VERSION, UUIDs in lists)", v)
	}
	t.Logf("ioctl interface %s", v)

	// The list holds the targets whose modules are loaded; the VM loads
	// only dm-mod at boot, and asking for one target's version loads its
	// module, as a table using it would.
	for _, typ := range []string{"writecache", "cache"} {
		if _, err := c.TargetVersion(ctx, typ); err != nil {
			t.Fatalf("TargetVersion(%s): %v", typ, err)
		}
	}
	all, err := c.TargetVersions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, typ := range []string{"linear", "error", "writecache", "cache"} {
		if _, ok := all[typ]; !ok {
			t.Errorf("TargetVersions has no %q: %v", typ, all)
		}
	}
	// The list agrees with dmsetup's, which prints "name vX.Y.Z" lines.
	for _, line := range strings.Split(strings.TrimSpace(dmsetup(t, "targets")), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			t.Fatalf("dmsetup targets line %q", line)
		}
		want, err := dm.ParseVersion(f[1])
		if err != nil {
			t.Fatal(err)
		}
		if got, ok := all[f[0]]; !ok || got != want {
			t.Errorf("target %s: TargetVersions says %v (listed %v), dmsetup %v", f[0], got, ok, want)
		}
	}
	for typ, ver := range all {
		one, err := c.TargetVersion(ctx, typ)
		if err != nil || one != ver {
			t.Errorf("TargetVersion(%s) = %v, %v; list says %v", typ, one, err, ver)
		}
	}
	for _, typ := range []string{"writecache", "cache", "linear"} {
		t.Logf("target %s %s", typ, all[typ])
	}
	if wc := all["writecache"]; !wc.AtLeast(dm.Version{Major: 1, Minor: 6}) {
		t.Errorf("writecache %s: the status parser and golden files expect 1.6.0 or newer", wc)
	}

	// The kernel loads a target's module on demand: dm-zero is not among
	// the modules the VM loads at boot.
	if _, listed := all["zero"]; listed {
		t.Log("zero target already loaded")
	}
	if zv, err := c.TargetVersion(ctx, "zero"); err != nil {
		t.Errorf("TargetVersion(zero) (loads dm-zero): %v", err)
	} else {
		t.Logf("target zero %s", zv)
	}

	_, err = c.TargetVersion(ctx, "no-such-target")
	var ie *dm.IoctlError
	if !errors.As(err, &ie) || !errors.Is(err, unix.EINVAL) {
		t.Errorf("TargetVersion(no-such-target) = %v, want an *IoctlError with EINVAL", err)
	}
}

// zeroTable maps n sectors of zeroes: a target with no device under it.
func zeroTable(n uint64) dm.Table {
	return dm.Table{{Start: 0, Length: n, Type: "zero"}}
}

func TestKernelLifecycle(t *testing.T) {
	c, ctx := openClient(t)
	const name, uuid = "tck-life", "TCK-life"
	node := dm.DevicePath(name)

	info, err := c.Create(ctx, name, uuid)
	if err != nil {
		t.Fatal(err)
	}
	removeLater(t, c, name)
	if info.Name != name || info.UUID != uuid || info.LiveTable || info.InactiveTable || info.OpenCount != 0 {
		t.Errorf("Create = %+v", info)
	}
	if tbl, err := c.Table(ctx, name); err != nil || len(tbl) != 0 {
		t.Errorf("Table of a device without a table = %v, %v; want empty", tbl, err)
	}
	if st, err := c.Status(ctx, name); err != nil || len(st) != 0 {
		t.Errorf("Status of a device without a table = %v, %v; want empty", st, err)
	}

	// Load fills the inactive slot only; ClearInactive empties it.
	zero := zeroTable(8192)
	if err := c.Load(ctx, name, zero); err != nil {
		t.Fatal(err)
	}
	info, err = c.Info(ctx, name)
	if err != nil || !info.InactiveTable || info.LiveTable {
		t.Errorf("after Load: %+v, %v; want an inactive table only", info, err)
	}
	if tbl, err := c.InactiveTable(ctx, name); err != nil || tbl.String() != zero.String() {
		t.Errorf("InactiveTable = %q, %v; want %q", tbl, err, zero)
	}
	if err := c.ClearInactive(ctx, name); err != nil {
		t.Fatal(err)
	}
	if info, err = c.Info(ctx, name); err != nil || info.InactiveTable {
		t.Errorf("after ClearInactive: %+v, %v", info, err)
	}
	if err := c.Load(ctx, name, zero); err != nil {
		t.Fatal(err)
	}

	// Resume makes the table live and the node appear.
	if err := c.Resume(ctx, name); err != nil {
		t.Fatal(err)
	}
	info, err = c.Info(ctx, name)
	if err != nil || !info.LiveTable || info.InactiveTable || info.Suspended || info.TargetCount != 1 {
		t.Errorf("after Resume: %+v, %v", info, err)
	}
	if got, want := devNum(t, node), fmt.Sprintf("%d:%d", info.Major, info.Minor); got != want {
		t.Errorf("%s is %s, device is %s", node, got, want)
	}
	if tbl, err := c.Table(ctx, name); err != nil || tbl.String() != zero.String() {
		t.Errorf("Table = %q, %v; want %q", tbl, err, zero)
	}
	if st, err := c.Status(ctx, name); err != nil || len(st) != 1 || st[0].Type != "zero" || st[0].Params != "" {
		t.Errorf("Status = %q, %v", st, err)
	}
	sameAsDmsetup(t, c, ctx, name)
	if b := mustPread(t, node, 4096, 4096); !bytes.Equal(b, make([]byte, 4096)) {
		t.Error("zero target read non-zero bytes")
	}
	if out := dmsetup(t, "info", "-c", "--noheadings", "-o", "name,uuid", name); strings.TrimSpace(out) != name+":"+uuid {
		t.Errorf("dmsetup info: %q", out)
	}

	// Suspend, also twice and with each option, and resume.
	for _, opts := range []dm.SuspendOptions{{}, {NoFlush: true}, {SkipLockfs: true}, {NoFlush: true, SkipLockfs: true}} {
		if err := c.Suspend(ctx, name, opts); err != nil {
			t.Fatalf("Suspend(%+v): %v", opts, err)
		}
		if err := c.Suspend(ctx, name, opts); err != nil {
			t.Errorf("second Suspend(%+v): %v", opts, err)
		}
		if info, err := c.Info(ctx, name); err != nil || !info.Suspended {
			t.Errorf("after Suspend(%+v): %+v, %v", opts, info, err)
		}
		if !strings.Contains(dmsetup(t, "info", name), "SUSPENDED") {
			t.Errorf("dmsetup does not see the device suspended (%+v)", opts)
		}
		if err := c.Resume(ctx, name); err != nil {
			t.Fatal(err)
		}
		if info, err := c.Info(ctx, name); err != nil || info.Suspended {
			t.Errorf("after Resume: %+v, %v", info, err)
		}
	}

	// Swap the table live: reads now fail with EIO.
	if err := c.Load(ctx, name, dm.Table{{Length: 8192, Type: "error"}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Resume(ctx, name); err != nil {
		t.Fatal(err)
	}
	if tbl, err := c.Table(ctx, name); err != nil || len(tbl) != 1 || tbl[0].Type != "error" {
		t.Errorf("Table after swap = %q, %v", tbl, err)
	}
	if _, err := pread(t, node, 0, 4096); !errors.Is(err, unix.EIO) {
		t.Errorf("read of an error target: %v, want EIO", err)
	}

	if err := c.Remove(ctx, name); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(node); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s after Remove: %v", node, err)
	}
	_, err = c.Info(ctx, name)
	var ie *dm.IoctlError
	if !errors.Is(err, dm.ErrNotFound) || !errors.As(err, &ie) || ie.Op != "info" || ie.Name != name || ie.Errno != unix.ENXIO {
		t.Errorf("Info after Remove = %v, want ErrNotFound from an info ioctl", err)
	}
}

func TestKernelErrors(t *testing.T) {
	c, ctx := openClient(t)
	const missing = "tck-missing"
	for op, call := range map[string]func() error{
		"info":    func() error { _, err := c.Info(ctx, missing); return err },
		"load":    func() error { return c.Load(ctx, missing, zeroTable(8)) },
		"resume":  func() error { return c.Resume(ctx, missing) },
		"suspend": func() error { return c.Suspend(ctx, missing, dm.SuspendOptions{}) },
		"remove":  func() error { return c.Remove(ctx, missing) },
		"status":  func() error { _, err := c.Status(ctx, missing); return err },
		"table":   func() error { _, err := c.Table(ctx, missing); return err },
		"message": func() error { _, err := c.Message(ctx, missing, 0, "flush"); return err },
	} {
		if err := call(); !errors.Is(err, dm.ErrNotFound) || errors.Is(err, dm.ErrBusy) {
			t.Errorf("%s of a missing device: %v, want ErrNotFound", op, err)
		}
	}

	// Duplicates: the kernel answers EBUSY, which Create reports as
	// ErrExists, not ErrBusy.
	node := mkdev(t, c, ctx, "tck-dup", "TCK-dup", zeroTable(8192))
	for _, dup := range [][2]string{{"tck-dup", ""}, {"tck-dup", "TCK-other"}, {"tck-dup2", "TCK-dup"}} {
		_, err := c.Create(ctx, dup[0], dup[1])
		if err == nil {
			removeLater(t, c, dup[0])
		}
		if !errors.Is(err, dm.ErrExists) || errors.Is(err, dm.ErrBusy) {
			t.Errorf("Create(%q, %q) = %v, want ErrExists", dup[0], dup[1], err)
		}
	}

	// Open devices cannot be removed: held by a process...
	f, err := os.Open(node)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := c.Info(ctx, "tck-dup"); err != nil || info.OpenCount != 1 {
		t.Errorf("Info while open: %+v, %v; want open count 1", info, err)
	}
	if err := c.Remove(ctx, "tck-dup"); !errors.Is(err, dm.ErrBusy) || errors.Is(err, dm.ErrExists) {
		t.Errorf("Remove of an open device = %v, want ErrBusy", err)
	}
	f.Close()

	// ... or by another dm device.
	mkdev(t, c, ctx, "tck-holder", "", dm.Table{dm.LinearParams{Device: node, Offset: 0}.Target(0, 4096)})
	if info, err := c.Info(ctx, "tck-dup"); err != nil || info.OpenCount != 1 {
		t.Errorf("Info while held: %+v, %v; want open count 1", info, err)
	}
	if err := c.Remove(ctx, "tck-dup"); !errors.Is(err, dm.ErrBusy) {
		t.Errorf("Remove of a held device = %v, want ErrBusy", err)
	}
	if err := c.Remove(ctx, "tck-holder"); err != nil {
		t.Fatal(err)
	}
	if err := c.Remove(ctx, "tck-dup"); err != nil {
		t.Errorf("Remove once free: %v", err)
	}

	// Tables the kernel refuses leave the device as it was.
	if _, err := c.Create(ctx, "tck-bad", ""); err != nil {
		t.Fatal(err)
	}
	removeLater(t, c, "tck-bad")
	for _, bad := range []dm.Table{
		{dm.LinearParams{Device: "/dev/tck-no-such-disk", Offset: 0}.Target(0, 8)},
		{dm.LinearParams{Device: testDisk(t), Offset: 1 << 40}.Target(0, 8)},
		{{Length: 8, Type: "no-such-target"}},
		{dm.WritecacheParams{Mode: 's', Origin: testDisk(t), Cache: testDisk(t), BlockSize: 3000}.Target(0, 8)},
	} {
		err := c.Load(ctx, "tck-bad", bad)
		var ie *dm.IoctlError
		if !errors.As(err, &ie) || ie.Op != "load" {
			t.Errorf("Load(%q) = %v, want an *IoctlError from load", bad, err)
			continue
		}
		t.Logf("Load(%q): %v", bad, err)
	}
	if info, err := c.Info(ctx, "tck-bad"); err != nil || info.InactiveTable || info.LiveTable {
		t.Errorf("after refused loads: %+v, %v", info, err)
	}

	// A message to a target without a message handler.
	mkdev(t, c, ctx, "tck-nomsg", "", zeroTable(8))
	if _, err := c.Message(ctx, "tck-nomsg", 0, "flush"); !errors.Is(err, unix.EINVAL) {
		t.Errorf("Message to a zero target = %v, want EINVAL", err)
	}

	// Rejected before any ioctl: no *IoctlError.
	for _, call := range []func() error{
		func() error { _, err := c.Create(ctx, "tck/slash", ""); return err },
		func() error { _, err := c.Create(ctx, strings.Repeat("x", dm.MaxNameLen+1), ""); return err },
		func() error { _, err := c.Message(ctx, "tck-nomsg", 0, " "); return err },
		func() error { return c.Load(ctx, "tck-nomsg", dm.Table{}) },
	} {
		err := call()
		var ie *dm.IoctlError
		if err == nil || errors.As(err, &ie) {
			t.Errorf("want a validation error, got %v", err)
		}
	}
}

func TestKernelList(t *testing.T) {
	c, ctx := openClient(t)
	mkdev(t, c, ctx, "tck-list-a", "TCK-list-a", zeroTable(8))
	mkdev(t, c, ctx, "tck-list-b", "", zeroTable(8))
	if _, err := c.Create(ctx, "tck-list-c", "TCK-list-c"); err != nil { // no table
		t.Fatal(err)
	}
	removeLater(t, c, "tck-list-c")

	devs, err := c.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]dm.Device{}
	for _, d := range devs {
		found[d.Name] = d
	}
	for name, uuid := range map[string]string{"tck-list-a": "TCK-list-a", "tck-list-b": "", "tck-list-c": "TCK-list-c"} {
		d, ok := found[name]
		if !ok {
			t.Errorf("List has no %s: %+v", name, devs)
			continue
		}
		info, err := c.Info(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if d.UUID != uuid || d.Major != info.Major || d.Minor != info.Minor {
			t.Errorf("List entry %+v, want uuid %q and %d:%d", d, uuid, info.Major, info.Minor)
		}
	}
	// dmsetup sees the same devices.
	var ours []string
	for _, d := range devs {
		ours = append(ours, d.Name)
	}
	var theirs []string
	for _, line := range strings.Split(strings.TrimSpace(dmsetup(t, "ls")), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			theirs = append(theirs, f[0])
		}
	}
	slices.Sort(ours)
	slices.Sort(theirs)
	if !slices.Equal(ours, theirs) {
		t.Errorf("List %v, dmsetup ls %v", ours, theirs)
	}
}

func TestKernelLinear(t *testing.T) {
	c, ctx := openClient(t)
	disk := testDisk(t)
	p := dm.LinearParams{Device: disk, Offset: linearOffset}
	node := mkdev(t, c, ctx, "tck-linear", "TCK-linear", dm.Table{p.Target(0, linearLen)})

	// The kernel prints the device as major:minor; otherwise our String.
	want := dm.LinearParams{Device: devNum(t, disk), Offset: linearOffset}
	table, status := sameAsDmsetup(t, c, ctx, "tck-linear")
	tbl, err := dm.ParseTable(table)
	if err != nil || len(tbl) != 1 {
		t.Fatalf("dmsetup table %q: %v", table, err)
	}
	if tbl[0].Params != want.String() {
		t.Errorf("kernel table params %q, LinearParams.String %q", tbl[0].Params, want.String())
	}
	if got, err := dm.ParseLinearParams(tbl[0].Params); err != nil || got != want {
		t.Errorf("ParseLinearParams(%q) = %+v, %v", tbl[0].Params, got, err)
	}
	st, err := dm.ParseTable(status)
	if err != nil || len(st) != 1 {
		t.Fatalf("dmsetup status %q: %v", status, err)
	}
	if err := dm.ParseLinearStatus(st[0].Params); err != nil {
		t.Error(err)
	}
	capture(t, "linear", "table", table)
	capture(t, "linear", "status", status)

	// Data written through the device lands at the offset on the disk.
	data := pattern(64<<10, 'L')
	pwrite(t, node, 1<<20, data, len(data))
	if got := mustPread(t, disk, linearOffset*dm.SectorSize+1<<20, len(data)); !bytes.Equal(got, data) {
		t.Error("data written through the linear device is not at its offset on the disk")
	}
}

// waitStatus polls a writecache status until done returns true.
func waitStatus(t *testing.T, c *dm.Client, ctx context.Context, name string, v dm.Version, what string, done func(dm.WritecacheStatus) bool) dm.WritecacheStatus {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		s := wcStatus(t, c, ctx, name, v)
		if done(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still %+v after 60 s", what, s)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func wcStatus(t *testing.T, c *dm.Client, ctx context.Context, name string, v dm.Version) dm.WritecacheStatus {
	t.Helper()
	st, err := c.Status(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != 1 || st[0].Type != "writecache" {
		t.Fatalf("status of %s: %q", name, st)
	}
	s, err := dm.ParseWritecacheStatus(st[0].Params, v)
	if err != nil {
		t.Fatal(err)
	}
	if s.Error != 0 {
		t.Fatalf("writecache %s in error state: %+v", name, s)
	}
	return s
}

func TestKernelWritecache(t *testing.T) {
	c, ctx := openClient(t)
	disk := testDisk(t)
	ver, err := c.TargetVersion(ctx, "writecache")
	if err != nil {
		t.Fatal(err)
	}

	zeroHead(t, disk, wcCacheOffset)
	origin := mkdev(t, c, ctx, "tck-wc-origin", "TCK-wc-origin",
		dm.Table{dm.LinearParams{Device: disk, Offset: wcOriginOffset}.Target(0, wcOriginLen)})
	cache := mkdev(t, c, ctx, "tck-wc-cache", "TCK-wc-cache",
		dm.Table{dm.LinearParams{Device: disk, Offset: wcCacheOffset}.Target(0, wcCacheLen)})
	wm := func(v int) *int { return &v }
	u := func(v uint64) *uint64 { return &v }
	params := dm.WritecacheParams{
		Mode: dm.WritecacheSSD, Origin: origin, Cache: cache, BlockSize: 4096,
		HighWatermark: wm(50), LowWatermark: wm(45), WritebackJobs: u(1024), AutocommitTimeMs: u(1000),
	}
	if err := params.Validate(); err != nil {
		t.Fatal(err)
	}
	const name = "tck-wc"
	top := mkdev(t, c, ctx, name, "TCK-wc", dm.Table{params.Target(0, wcOriginLen)})

	// The table as the kernel prints it is our String with devices as
	// major:minor: the engine's drift check depends on it.
	kernelParams := params
	kernelParams.Origin, kernelParams.Cache = devNum(t, origin), devNum(t, cache)
	table, _ := sameAsDmsetup(t, c, ctx, name)
	tbl, err := dm.ParseTable(table)
	if err != nil || len(tbl) != 1 {
		t.Fatalf("dmsetup table %q: %v", table, err)
	}
	if tbl[0].Params != kernelParams.String() {
		t.Errorf("kernel table params %q\n WritecacheParams.String %q", tbl[0].Params, kernelParams.String())
	}
	if got, err := dm.ParseWritecacheParams(tbl[0].Params); err != nil || got.String() != tbl[0].Params {
		t.Errorf("ParseWritecacheParams(%q) = %+v, %v", tbl[0].Params, got, err)
	}

	s := wcStatus(t, c, ctx, name, ver)
	// 32 MiB of 4 KiB blocks, less the metadata.
	if !s.HasStats || s.TotalBlocks == 0 || s.TotalBlocks > wcCacheLen/8 || s.FreeBlocks != s.TotalBlocks || s.DirtyBlocks() != 0 {
		t.Errorf("fresh writecache status %+v", s)
	}
	total := s.TotalBlocks

	// 1 MiB in 4 KiB writes: 256 dirty blocks, well below the 50 % high
	// watermark, so they stay on the cache.
	data := pattern(1<<20, 'W')
	pwrite(t, top, 0, data, 4096)
	s = wcStatus(t, c, ctx, name, ver)
	if s.DirtyBlocks() != 256 || s.Writes != 256 || s.WritesAllocate != 256 || s.TotalBlocks != total {
		t.Errorf("after 256 writes of 4 KiB: %+v (dirty %d)", s, s.DirtyBlocks())
	}
	// Rewrites hit cached blocks, a flush commits, a discard is counted:
	// every counter of the status line moves.
	pwrite(t, top, 0, data[:64<<10], 4096)
	syncDevice(t, top)
	pwrite(t, top, 64<<10, data[64<<10:96<<10], 4096)
	discarded := discard(t, top, 32<<20, 1<<20)
	if got := mustPread(t, top, 0, len(data)); !bytes.Equal(got, data) {
		t.Fatal("read back through the writecache differs")
	}
	if got := mustPread(t, top, 0, 64<<10); !bytes.Equal(got, data[:64<<10]) {
		t.Fatal("second read back through the writecache differs")
	}
	s = wcStatus(t, c, ctx, name, ver)
	if s.Reads == 0 || s.ReadHits == 0 || s.Writes != 256+16+8 || s.WriteHitsCommitted+s.WriteHitsUncommitted != 16+8 ||
		s.Flushes == 0 || (discarded && s.Discards == 0) || s.DirtyBlocks() != 256 {
		t.Errorf("after rewrites, a flush, a discard and reads: %+v", s)
	}
	_, status := sameAsDmsetup(t, c, ctx, name)
	capture(t, "writecache", "table", table)
	capture(t, "writecache", "status", status)

	// flush is refused while suspended...
	if err := c.Suspend(ctx, name, dm.SuspendOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = c.Message(ctx, name, 0, "flush")
	if err := c.Resume(ctx, name); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(err, dm.ErrBusy) {
		t.Errorf("flush message to a suspended writecache = %v, want ErrBusy", err)
	}
	// ... and writes everything back otherwise.
	if _, err := c.Message(ctx, name, 0, "flush"); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, c, ctx, name, ver, "after flush", func(s dm.WritecacheStatus) bool {
		return s.DirtyBlocks() == 0 && s.WritebackBlocks == 0
	})
	if got := mustPread(t, disk, wcOriginOffset*dm.SectorSize, len(data)); !bytes.Equal(got, data) {
		t.Error("after flush, the origin region of the disk does not hold the data")
	}

	if _, err := c.Message(ctx, name, 0, "clear_stats"); err != nil {
		t.Fatal(err)
	}
	if s := wcStatus(t, c, ctx, name, ver); s.Reads != 0 || s.Writes != 0 || s.Flushes != 0 {
		t.Errorf("after clear_stats: %+v", s)
	}
	if _, err := c.Message(ctx, name, 0, "no-such-message"); !errors.Is(err, unix.EINVAL) {
		t.Errorf("unknown message: %v, want EINVAL", err)
	}
	if _, err := c.Message(ctx, name, 0, "flush_on_suspend"); err != nil {
		t.Errorf("flush_on_suspend: %v", err)
	}

	// cleaner: everything is written back and new blocks bypass the
	// cache. The kernel's table does not show it (checked on 6.1), so the
	// engine's drift check does not see a drained volume as drifted, and
	// reloading the table read back turns the cleaner off again.
	more := pattern(1<<20, 'C')
	pwrite(t, top, 4<<20, more, 4096)
	if d := wcStatus(t, c, ctx, name, ver).DirtyBlocks(); d != 256 {
		t.Fatalf("before cleaner: %d dirty blocks, want 256", d)
	}
	if _, err := c.Message(ctx, name, 0, "cleaner"); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, c, ctx, name, ver, "cleaner", func(s dm.WritecacheStatus) bool {
		return s.DirtyBlocks() == 0 && s.WritebackBlocks == 0
	})
	got, err := c.Table(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if got.String() != tbl.String() {
		t.Errorf("table after the cleaner message:\n %q\nwas\n %q", got, tbl)
	}
	if p, err := dm.ParseWritecacheParams(got[0].Params); err != nil || p.Cleaner {
		t.Errorf("table after the cleaner message parses as %+v, %v", p, err)
	}
	before := wcStatus(t, c, ctx, name, ver)
	pwrite(t, top, 8<<20, pattern(64<<10, 'B'), 4096)
	s = wcStatus(t, c, ctx, name, ver)
	if s.DirtyBlocks() != 0 || s.WritesAround-before.WritesAround != 16 {
		t.Errorf("writes in cleaner mode should bypass the cache: before %+v, after %+v", before, s)
	}
	if got := mustPread(t, disk, (wcOriginOffset+8*mib)*dm.SectorSize, 64<<10); !bytes.Equal(got, pattern(64<<10, 'B')) {
		t.Error("a write that bypassed the cache is not on the origin")
	}

	// Reloading the live table makes a new target: cleaner off, writes
	// are cached again.
	if err := c.Suspend(ctx, name, dm.SuspendOptions{}); err != nil {
		t.Fatal(err)
	}
	loadErr := c.Load(ctx, name, got)
	if err := c.Resume(ctx, name); err != nil {
		t.Fatal(err)
	}
	if loadErr != nil {
		t.Fatal(loadErr)
	}
	pwrite(t, top, 12<<20, pattern(64<<10, 'D'), 4096)
	if d := wcStatus(t, c, ctx, name, ver).DirtyBlocks(); d != 16 {
		t.Errorf("after reloading the table: %d dirty blocks, want 16 (cleaner off)", d)
	}

	// A suspend without flush keeps the dirty blocks; the data survives.
	if err := c.Suspend(ctx, name, dm.SuspendOptions{NoFlush: true}); err != nil {
		t.Fatal(err)
	}
	if err := c.Resume(ctx, name); err != nil {
		t.Fatal(err)
	}
	if got := mustPread(t, top, 12<<20, 64<<10); !bytes.Equal(got, pattern(64<<10, 'D')) {
		t.Error("data after noflush suspend/resume differs")
	}
	if got := mustPread(t, top, 4<<20, len(more)); !bytes.Equal(got, more) {
		t.Error("data written back by the cleaner reads back wrong")
	}

	// The origin is held by the writecache.
	if err := c.Remove(ctx, "tck-wc-origin"); !errors.Is(err, dm.ErrBusy) {
		t.Errorf("Remove of the origin under a writecache = %v, want ErrBusy", err)
	}
}

func TestKernelCache(t *testing.T) {
	c, ctx := openClient(t)
	disk := testDisk(t)
	ver, err := c.TargetVersion(ctx, "cache")
	if err != nil {
		t.Fatal(err)
	}

	zeroHead(t, disk, cacheMetaOffset)
	slice := func(role string, off, n uint64) string {
		return mkdev(t, c, ctx, "tck-cache-"+role, "TCK-cache-"+role,
			dm.Table{dm.LinearParams{Device: disk, Offset: off}.Target(0, n)})
	}
	origin := slice("origin", cacheOriginOffset, cacheOriginLen)
	meta := slice("meta", cacheMetaOffset, cacheMetaLen)
	data := slice("data", cacheDataOffset, cacheDataLen)
	params := dm.CacheParams{
		Metadata: meta, Cache: data, Origin: origin, BlockSize: 128,
		Features: []string{"metadata2", "writethrough"}, Policy: "smq",
	}
	if err := params.Validate(); err != nil {
		t.Fatal(err)
	}
	const name = "tck-cache"
	top := mkdev(t, c, ctx, name, "TCK-cache", dm.Table{params.Target(0, cacheOriginLen)})

	kernelParams := params
	kernelParams.Metadata, kernelParams.Cache, kernelParams.Origin = devNum(t, meta), devNum(t, data), devNum(t, origin)
	table, status := sameAsDmsetup(t, c, ctx, name)
	tbl, err := dm.ParseTable(table)
	if err != nil || len(tbl) != 1 {
		t.Fatalf("dmsetup table %q: %v", table, err)
	}
	if tbl[0].Params != kernelParams.String() {
		t.Errorf("kernel table params %q\n CacheParams.String %q", tbl[0].Params, kernelParams.String())
	}

	parse := func(status string) dm.CacheStatus {
		t.Helper()
		st, err := dm.ParseTable(status)
		if err != nil || len(st) != 1 || st[0].Type != "cache" {
			t.Fatalf("status %q: %v", status, err)
		}
		s, err := dm.ParseCacheStatus(st[0].Params, ver)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := parse(status)
	if s.Failed || s.NeedsCheck || s.MetadataMode != "rw" || s.BlockSize != 128 || s.Total != cacheDataLen/128 ||
		s.Used != 0 || s.Dirty != 0 || s.Policy != "smq" || !slices.Contains(s.Features, "writethrough") ||
		!slices.Contains(s.Features, "metadata2") || s.MetadataTotal == 0 {
		t.Errorf("fresh cache status %+v", s)
	}

	// Writes go through to the origin.
	blocks := pattern(4<<20, 'R')
	pwrite(t, top, 0, blocks, 64<<10)
	if got := mustPread(t, disk, cacheOriginOffset*dm.SectorSize, len(blocks)); !bytes.Equal(got, blocks) {
		t.Error("writethrough: data is not on the origin region of the disk")
	}
	// Repeated reads get blocks promoted. smq re-ranks its hotspots once
	// per period (about a second) at the next I/O, so reads within the
	// first second after creation promote nothing: read until it does.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if got := mustPread(t, top, 0, len(blocks)); !bytes.Equal(got, blocks) {
			t.Fatal("read back through the cache differs")
		}
		table, status = sameAsDmsetup(t, c, ctx, name)
		s = parse(status)
		if s.Promotions > 0 && s.ReadHits > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if s.ReadMisses == 0 || s.ReadHits == 0 || s.WriteMisses == 0 || s.Promotions == 0 || s.Used == 0 || s.Dirty != 0 {
		t.Errorf("after writes and repeated reads: %+v", s)
	}
	// A write to a cached block goes to both devices.
	again := pattern(64<<10, 'S')
	pwrite(t, top, 0, again, len(again))
	if got := mustPread(t, disk, cacheOriginOffset*dm.SectorSize, len(again)); !bytes.Equal(got, again) {
		t.Error("writethrough of a cached block: data is not on the origin")
	}
	if got := mustPread(t, top, 0, len(again)); !bytes.Equal(got, again) {
		t.Error("writethrough of a cached block: stale data read back")
	}
	table, status = sameAsDmsetup(t, c, ctx, name)
	if s = parse(status); s.Dirty != 0 {
		t.Errorf("writethrough cache has %d dirty blocks", s.Dirty)
	}
	capture(t, "cache", "table", table)
	capture(t, "cache", "status", status)
	t.Logf("cache status: %+v", s)
}

// readsOf returns the reads completed by a block device so far
// (/sys/dev/block/<major:minor>/stat, field 1).
func readsOf(t *testing.T, path string) uint64 {
	t.Helper()
	b, err := os.ReadFile("/sys/dev/block/" + devNum(t, path) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	if len(f) < 1 {
		t.Fatalf("stat of %s: %q", path, b)
	}
	var n uint64
	if _, err := fmt.Sscan(f[0], &n); err != nil {
		t.Fatalf("stat of %s: %q: %v", path, b, err)
	}
	return n
}

// waitRaid polls a raid target's status until done returns true, for at
// most timeout, and fails t naming want after that.
func waitRaid(t *testing.T, c *dm.Client, ctx context.Context, name string, timeout time.Duration, want string, done func(dm.RaidStatus) bool) dm.RaidStatus {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		s, err := c.Status(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		st, err := dm.ParseRaidStatus(s[0].Params)
		if err != nil {
			t.Fatal(err)
		}
		if done(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still %+v after %v, want %s", name, st, timeout, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestKernelRaid1 builds the write mirror's raid1 as tidecache loads it
// for a volume whose second leg is a peer's SSD: min_recovery_rate, and
// write_mostly on that leg. The kernel must print the table back with
// write_mostly, write every block to both legs, and serve reads from the
// other leg alone while both are in sync: the point of write_mostly, as
// a read of the peer's leg crosses the network.
func TestKernelRaid1(t *testing.T) {
	c, ctx := openClient(t)
	disk := testDisk(t)
	var legs []dm.RaidLeg
	var data []string
	off := uint64(raidOffset)
	for i := range 2 {
		zeroHead(t, disk, off)
		meta := mkdev(t, c, ctx, fmt.Sprintf("tck-rmeta%d", i), fmt.Sprintf("TCK-rmeta%d", i),
			dm.Table{dm.LinearParams{Device: disk, Offset: off}.Target(0, raidMetaLen)})
		off += raidMetaLen
		d := mkdev(t, c, ctx, fmt.Sprintf("tck-rdata%d", i), fmt.Sprintf("TCK-rdata%d", i),
			dm.Table{dm.LinearParams{Device: disk, Offset: off}.Target(0, raidDataLen)})
		off += raidDataLen
		legs = append(legs, dm.RaidLeg{Meta: meta, Data: d})
		data = append(data, d)
	}
	p := dm.Raid1Params{Legs: legs, MinRecoveryRate: 65536, WriteMostly: []int{1}}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	node := mkdev(t, c, ctx, "tck-raid1", "TCK-raid1", dm.Table{p.Target(0, raidDataLen)})

	// The initial resync of a new array, then both legs in sync.
	waitRaid(t, c, ctx, "tck-raid1", 60*time.Second, "AA, idle, in sync", func(st dm.RaidStatus) bool {
		return st.HealthString() == "AA" && st.SyncAction == "idle" && st.SyncDone == st.SyncTotal
	})

	table, status := sameAsDmsetup(t, c, ctx, "tck-raid1")
	tbl, err := dm.ParseTable(table)
	if err != nil || len(tbl) != 1 {
		t.Fatalf("dmsetup table %q: %v", table, err)
	}
	got, err := dm.ParseRaid1Params(tbl[0].Params)
	if err != nil {
		t.Fatalf("ParseRaid1Params(%q): %v", tbl[0].Params, err)
	}
	if !slices.Equal(got.WriteMostly, []int{1}) || got.MinRecoveryRate != 65536 {
		t.Errorf("kernel table %q: write_mostly %v, min_recovery_rate %d; want [1], 65536", tbl[0].Params, got.WriteMostly, got.MinRecoveryRate)
	}
	canon := func(ref string) (string, error) {
		if ref == dm.MissingLeg || strings.Contains(ref, ":") {
			return ref, nil
		}
		return devNum(t, ref), nil
	}
	if same, err := p.Equivalent(got, canon); err != nil || !same {
		t.Errorf("kernel table %q is not what was loaded (%s): %v", tbl[0].Params, p, err)
	}
	capture(t, "raid", "table", table)
	capture(t, "raid", "status", status)

	// Every write reaches both legs.
	written := pattern(1<<20, 'R')
	pwrite(t, node, 0, written, 64<<10)
	syncDevice(t, node)
	for i, d := range data {
		if b := mustPread(t, d, 0, len(written)); !bytes.Equal(b, written) {
			t.Errorf("leg %d (%s) does not hold what was written through the mirror", i, d)
		}
	}
	// Reads go to leg 0 only: leg 1 is write-mostly.
	before := []uint64{readsOf(t, data[0]), readsOf(t, data[1])}
	for off := int64(0); off < int64(len(written)); off += 4096 {
		if b := mustPread(t, node, off, 4096); !bytes.Equal(b, written[off:off+4096]) {
			t.Fatalf("read at %d through the mirror differs from what was written", off)
		}
	}
	after := []uint64{readsOf(t, data[0]), readsOf(t, data[1])}
	if after[0]-before[0] < 256 || after[1] != before[1] {
		t.Errorf("256 reads of 4 KiB through the mirror: leg 0 served %d, leg 1 (write_mostly) %d; want all on leg 0, none on leg 1",
			after[0]-before[0], after[1]-before[1])
	}

	// The write-mostly leg fails (a peer gone): md drops it, and the
	// kernel prints its slot as write_mostly -1. The table must still
	// parse and name the same legs, or the daemon could not compare it
	// with the volume's (it could not re-protect the volume).
	if err := c.Load(ctx, "tck-rdata1", dm.Table{{Start: 0, Length: raidDataLen, Type: "error"}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Resume(ctx, "tck-rdata1"); err != nil {
		t.Fatal(err)
	}
	pwrite(t, node, 0, pattern(64<<10, 'F'), 64<<10)
	syncDevice(t, node)
	waitRaid(t, c, ctx, "tck-raid1", 30*time.Second, "AD", func(st dm.RaidStatus) bool { return st.HealthString() == "AD" })
	table, _ = sameAsDmsetup(t, c, ctx, "tck-raid1")
	t.Logf("with the write-mostly leg failed: %s", strings.TrimSpace(table))
	if tbl, err = dm.ParseTable(table); err != nil || len(tbl) != 1 {
		t.Fatalf("dmsetup table %q: %v", table, err)
	}
	failed, err := dm.ParseRaid1Params(tbl[0].Params)
	if err != nil {
		t.Fatalf("ParseRaid1Params(%q) with the write-mostly leg failed: %v", tbl[0].Params, err)
	}
	if same, err := p.Equivalent(failed, canon); err != nil || !same {
		t.Errorf("kernel table %q with leg 1 failed does not name the legs loaded (%s): %v", tbl[0].Params, p, err)
	}
	if got := mustPread(t, node, 0, 64<<10); !bytes.Equal(got, pattern(64<<10, 'F')) {
		t.Error("the write made while leg 1 failed does not read back from leg 0")
	}
}
