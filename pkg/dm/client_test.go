// SPDX-License-Identifier: Apache-2.0

//go:build linux

package dm_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tidecache/tidecache/pkg/dm"
	"github.com/tidecache/tidecache/pkg/dm/dmtest"
)

// newTestClient returns a Client on the fake kernel k that keeps its
// device nodes in devDir ("" for none) and offers bufSize bytes (0 for the
// default) for replies with data.
func newTestClient(t *testing.T, k *dmtest.Kernel, devDir string, bufSize int) *dm.Client {
	t.Helper()
	c := dm.NewClient(k, devDir)
	if bufSize > 0 {
		dm.SetBufferSize(c, bufSize)
	}
	return c
}

func TestClientLifecycle(t *testing.T) {
	ctx := context.Background()
	k := dmtest.New()
	devDir := t.TempDir()
	c := newTestClient(t, k, devDir, 0)

	v, err := c.Version(ctx)
	if err != nil || v != (dm.Version{Major: 4, Minor: 47, Patch: 0}) {
		t.Fatalf("Version = %v, %v", v, err)
	}

	info, err := c.Create(ctx, "tc-v-top", "TIDECACHE-v-top")
	if err != nil {
		t.Fatal(err)
	}
	want := dm.DeviceInfo{Name: "tc-v-top", UUID: "TIDECACHE-v-top", Major: 253, Minor: 0}
	if info != want {
		t.Errorf("Create = %+v, want %+v", info, want)
	}
	for _, dup := range [][2]string{{"tc-v-top", ""}, {"tc-other", "TIDECACHE-v-top"}} {
		_, err := c.Create(ctx, dup[0], dup[1])
		if !errors.Is(err, dm.ErrExists) || errors.Is(err, dm.ErrBusy) {
			t.Errorf("Create(%q, %q) = %v, want ErrExists", dup[0], dup[1], err)
		}
	}

	table := dm.Table{
		dm.LinearParams{Device: "/dev/vdb", Offset: 2048}.Target(0, 1000),
		dm.LinearParams{Device: "8:32", Offset: 0}.Target(1000, 24),
	}
	if err := c.Load(ctx, "tc-v-top", table); err != nil {
		t.Fatal(err)
	}
	if info, _ = c.Info(ctx, "tc-v-top"); !info.InactiveTable || info.LiveTable {
		t.Errorf("after Load: %+v", info)
	}
	if got, err := c.InactiveTable(ctx, "tc-v-top"); err != nil || !reflect.DeepEqual(got, table) {
		t.Errorf("InactiveTable = %v, %v", got, err)
	}
	if got, err := c.Table(ctx, "tc-v-top"); err != nil || len(got) != 0 {
		t.Errorf("Table before resume = %v, %v", got, err)
	}

	mknod := dm.CanMknod(t)
	if err := c.Resume(ctx, "tc-v-top"); err != nil && mknod {
		t.Fatal(err)
	}
	if mknod {
		dm.CheckNode(t, filepath.Join(devDir, "tc-v-top"), unix.Mkdev(253, 0))
	}
	info, _ = c.Info(ctx, "tc-v-top")
	if !info.LiveTable || info.InactiveTable || info.Suspended || info.TargetCount != 2 {
		t.Errorf("after Resume: %+v", info)
	}
	if got, err := c.Table(ctx, "tc-v-top"); err != nil || !reflect.DeepEqual(got, table) {
		t.Errorf("Table = %v, %v", got, err)
	}
	k.SetStatus("tc-v-top", "0 32640 32000 0")
	if got, err := c.Status(ctx, "tc-v-top"); err != nil || len(got) != 2 || got[1].Params != "0 32640 32000 0" || got[1].Start != 1000 {
		t.Errorf("Status = %v, %v", got, err)
	}

	k.SetMessageFunc(func(_, msg string) (string, error) { return "flushed", nil })
	if reply, err := c.Message(ctx, "tc-v-top", 0, "flush"); err != nil || reply != "flushed" {
		t.Errorf("Message = %q, %v", reply, err)
	}
	k.SetMessageFunc(nil)
	if reply, err := c.Message(ctx, "tc-v-top", 0, "cleaner"); err != nil || reply != "" {
		t.Errorf("Message = %q, %v", reply, err)
	}
	if d, _ := k.Device("tc-v-top"); !reflect.DeepEqual(d.Messages, []string{"flush", "cleaner"}) {
		t.Errorf("messages %q", d.Messages)
	}

	if err := c.Suspend(ctx, "tc-v-top", dm.SuspendOptions{NoFlush: true}); err != nil {
		t.Fatal(err)
	}
	if info, _ = c.Info(ctx, "tc-v-top"); !info.Suspended {
		t.Errorf("after Suspend: %+v", info)
	}
	if err := c.Load(ctx, "tc-v-top", table[:1]); err != nil {
		t.Fatal(err)
	}
	if err := c.ClearInactive(ctx, "tc-v-top"); err != nil {
		t.Fatal(err)
	}
	if info, _ = c.Info(ctx, "tc-v-top"); info.InactiveTable {
		t.Errorf("after ClearInactive: %+v", info)
	}
	if err := c.Resume(ctx, "tc-v-top"); err != nil && mknod {
		t.Fatal(err)
	}

	devs, err := c.List(ctx)
	if err != nil || !reflect.DeepEqual(devs, []dm.Device{{Name: "tc-v-top", Major: 253, Minor: 0, UUID: "TIDECACHE-v-top"}}) {
		t.Errorf("List = %+v, %v", devs, err)
	}

	k.SetOpenCount("tc-v-top", 1)
	if err := c.Remove(ctx, "tc-v-top"); !errors.Is(err, dm.ErrBusy) || errors.Is(err, dm.ErrNotFound) {
		t.Errorf("Remove of open device = %v, want ErrBusy", err)
	}
	k.SetOpenCount("tc-v-top", 0)
	if err := c.Remove(ctx, "tc-v-top"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(devDir, "tc-v-top")); !os.IsNotExist(err) {
		t.Errorf("node left after Remove: %v", err)
	}
	_, err = c.Info(ctx, "tc-v-top")
	if !errors.Is(err, dm.ErrNotFound) || !errors.Is(err, unix.ENXIO) {
		t.Errorf("Info after Remove = %v, want ErrNotFound", err)
	}
	var ie *dm.IoctlError
	if !errors.As(err, &ie) || ie.Op != "info" || ie.Name != "tc-v-top" {
		t.Errorf("error %#v", err)
	}
	if err := c.Remove(ctx, "tc-v-top"); !errors.Is(err, dm.ErrNotFound) {
		t.Errorf("second Remove = %v", err)
	}
}

func TestClientGrowsBuffer(t *testing.T) {
	ctx := context.Background()
	k := dmtest.New()
	k.SetTarget("fake", dm.Version{Major: 1})
	c := newTestClient(t, k, "", 320) // room for 8 bytes of payload only

	long := strings.Repeat("p", 5000)
	for i := range 40 {
		name := "dev-" + strings.Repeat("x", i)
		if _, err := c.Create(ctx, name, "UUID-"+name); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Load(ctx, "dev-", dm.Table{{Start: 0, Length: 8, Type: "fake", Params: long}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Resume(ctx, "dev-"); err != nil {
		t.Fatal(err)
	}
	k.SetStatus("dev-", long+"status")

	k.ResetCalls()
	got, err := c.Table(ctx, "dev-")
	if err != nil || len(got) != 1 || got[0].Params != long {
		t.Fatalf("Table = %d targets, %v", len(got), err)
	}
	if n := len(k.Calls()); n < 2 {
		t.Errorf("Table took %d ioctls, expected retries with larger buffers", n)
	}
	if got, err := c.Status(ctx, "dev-"); err != nil || got[0].Params != long+"status" {
		t.Fatalf("Status: %v", err)
	}
	devs, err := c.List(ctx)
	if err != nil || len(devs) != 40 {
		t.Fatalf("List = %d devices, %v", len(devs), err)
	}
	for _, d := range devs {
		if d.UUID != "UUID-"+d.Name {
			t.Errorf("device %s has uuid %q", d.Name, d.UUID)
		}
	}
	vers, err := c.TargetVersions(ctx)
	if err != nil || !reflect.DeepEqual(vers, k.Targets()) {
		t.Errorf("TargetVersions = %v, %v", vers, err)
	}

	// A long message reply: the message is sent again with a larger buffer.
	longReply := strings.Repeat("r", 1000)
	k.SetMessageFunc(func(_, msg string) (string, error) { return longReply, nil })
	reply, err := c.Message(ctx, "dev-", 0, "stats")
	if err != nil || reply != longReply {
		t.Errorf("Message = %d bytes, %v", len(reply), err)
	}
	if d, _ := k.Device("dev-"); len(d.Messages) < 2 {
		t.Errorf("message delivered %d times, want a retry", len(d.Messages))
	}
}

func TestClientTargetVersion(t *testing.T) {
	ctx := context.Background()
	c := newTestClient(t, dmtest.New(), "", 0)
	v, err := c.TargetVersion(ctx, "writecache")
	if err != nil || v != (dm.Version{Major: 1, Minor: 6, Patch: 0}) {
		t.Errorf("TargetVersion = %v, %v", v, err)
	}
	if _, err := c.TargetVersion(ctx, "nosuch"); !errors.Is(err, unix.EINVAL) {
		t.Errorf("unknown target: %v", err)
	}
	if _, err := c.TargetVersion(ctx, "a/b"); err == nil {
		t.Error("bad target name accepted")
	}
}

func TestClientRejectsBeforeIoctl(t *testing.T) {
	ctx := context.Background()
	k := dmtest.New()
	c := newTestClient(t, k, t.TempDir(), 0)
	long := strings.Repeat("n", dm.MaxNameLen+1)
	for name, err := range map[string]error{
		"empty name":     func() error { _, err := c.Info(ctx, ""); return err }(),
		"long name":      func() error { _, err := c.Create(ctx, long, ""); return err }(),
		"slash":          c.Remove(ctx, "a/b"),
		"dot":            c.Resume(ctx, ".."),
		"control":        c.Suspend(ctx, "control", dm.SuspendOptions{}),
		"long uuid":      func() error { _, err := c.Create(ctx, "x", strings.Repeat("u", dm.MaxUUIDLen+1)); return err }(),
		"empty table":    c.Load(ctx, "x", nil),
		"gap":            c.Load(ctx, "x", dm.Table{{Start: 8, Length: 8, Type: "zero"}}),
		"zero length":    c.Load(ctx, "x", dm.Table{{Start: 0, Length: 0, Type: "zero"}}),
		"long type":      c.Load(ctx, "x", dm.Table{{Start: 0, Length: 8, Type: strings.Repeat("t", 16)}}),
		"NUL in params":  c.Load(ctx, "x", dm.Table{{Start: 0, Length: 8, Type: "zero", Params: "a\x00b"}}),
		"empty message":  func() error { _, err := c.Message(ctx, "x", 0, " "); return err }(),
		"NUL in message": func() error { _, err := c.Message(ctx, "x", 0, "a\x00"); return err }(),
	} {
		if err == nil {
			t.Errorf("%s: accepted", name)
		} else if !strings.HasPrefix(err.Error(), "dm ") {
			t.Errorf("%s: error %q lacks context", name, err)
		}
	}
	if n := len(k.Calls()); n != 0 {
		t.Errorf("%d ioctls issued for invalid requests", n)
	}
	// The longest valid name and uuid go through.
	if _, err := c.Create(ctx, long[:dm.MaxNameLen], strings.Repeat("u", dm.MaxUUIDLen)); err != nil {
		t.Errorf("longest name: %v", err)
	}
}

func TestClientContextAndClose(t *testing.T) {
	k := dmtest.New()
	c := newTestClient(t, k, t.TempDir(), 0)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Create(ctx, "x", ""); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: %v", err)
	}
	if len(k.Calls()) != 0 {
		t.Error("ioctl issued with a cancelled context")
	}

	k.Interrupt(3)
	if _, err := c.Create(context.Background(), "x", ""); err != nil {
		t.Errorf("after EINTR: %v", err)
	}
	if n := len(k.Calls()); n != 4 {
		t.Errorf("%d ioctls, want 3 interrupted + 1", n)
	}

	if err := c.Close(); err != nil || !k.Closed() {
		t.Fatalf("Close = %v", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
	if _, err := c.Info(context.Background(), "x"); !errors.Is(err, dm.ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
}

func TestIoctlError(t *testing.T) {
	for _, c := range []struct {
		err                  *dm.IoctlError
		msg                  string
		notFound, exists, bz bool
	}{
		{&dm.IoctlError{Op: "info", Name: "a", Errno: unix.ENXIO}, "dm info a: no such device or address", true, false, false},
		{&dm.IoctlError{Op: "create", Name: "a", Errno: unix.EBUSY}, "dm create a: device or resource busy", false, true, false},
		{&dm.IoctlError{Op: "create", Name: "a", Errno: unix.EEXIST}, "dm create a: file exists", false, true, false},
		{&dm.IoctlError{Op: "remove", Name: "a", Errno: unix.EBUSY}, "dm remove a: device or resource busy", false, false, true},
		{&dm.IoctlError{Op: "list", Errno: unix.EACCES}, "dm list: permission denied", false, false, false},
	} {
		var err error = c.err
		if err.Error() != c.msg {
			t.Errorf("Error() = %q, want %q", err.Error(), c.msg)
		}
		if errors.Is(err, dm.ErrNotFound) != c.notFound || errors.Is(err, dm.ErrExists) != c.exists || errors.Is(err, dm.ErrBusy) != c.bz {
			t.Errorf("%v: Is(NotFound, Exists, Busy) = %v %v %v", err,
				errors.Is(err, dm.ErrNotFound), errors.Is(err, dm.ErrExists), errors.Is(err, dm.ErrBusy))
		}
		if !errors.Is(err, c.err.Errno) {
			t.Errorf("%v does not match its errno", err)
		}
	}
}
