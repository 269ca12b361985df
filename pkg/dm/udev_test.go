// SPDX-License-Identifier: Apache-2.0

//go:build linux

package dm_test

import (
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/tidecache/tidecache/pkg/dm"
	"github.com/tidecache/tidecache/pkg/dm/dmtest"
)

// fakeUdev wraps the fake kernel: for every resume and remove it records
// the cookie, marks the reply "uevent generated" as the kernel does, and
// plays udev's part after a delay: 95-dm-notify.rules' `dmsetup
// udevcomplete` decrements the cookie's semaphore.
type fakeUdev struct {
	*dmtest.Kernel
	delay     time.Duration
	cookies   []uint32
	completed atomic.Int32
	errs      chan error
}

const offEventNr, offFlags = 32, 28 // struct dm_ioctl

func (f *fakeUdev) Ioctl(cmd uintptr, raw []byte) error {
	isSuspend := cmd == unix.DM_DEV_SUSPEND && binary.NativeEndian.Uint32(raw[offFlags:])&unix.DM_SUSPEND_FLAG == 0
	if !isSuspend && cmd != unix.DM_DEV_REMOVE {
		return f.Kernel.Ioctl(cmd, raw)
	}
	cookie := binary.NativeEndian.Uint32(raw[offEventNr:])
	if err := f.Kernel.Ioctl(cmd, raw); err != nil {
		return err
	}
	f.cookies = append(f.cookies, cookie)
	if cookie == 0 {
		return nil
	}
	flags := binary.NativeEndian.Uint32(raw[offFlags:])
	binary.NativeEndian.PutUint32(raw[offFlags:], flags|unix.DM_UEVENT_GENERATED_FLAG)
	go func() {
		time.Sleep(f.delay)
		key := 0x0D4D<<16 | cookie&0xFFFF
		id, _, errno := unix.Syscall(unix.SYS_SEMGET, uintptr(key), 0, 0)
		if errno != 0 {
			f.errs <- errno
			return
		}
		op := [3]int16{0, -1, 0} // struct sembuf: sem_num, sem_op, sem_flg
		if _, _, errno := unix.Syscall(unix.SYS_SEMOP, id, uintptr(unsafe.Pointer(&op)), 1); errno != 0 {
			f.errs <- errno
			return
		}
		f.completed.Add(1)
		f.errs <- nil
	}()
	return nil
}

// semaphoreExists reports whether the semaphore of a cookie is still there.
func semaphoreExists(cookie uint32) bool {
	_, _, errno := unix.Syscall(unix.SYS_SEMGET, uintptr(0x0D4D<<16|cookie&0xFFFF), 0, 0)
	return errno != unix.ENOENT
}

func TestUdevCookie(t *testing.T) {
	if _, _, errno := unix.Syscall(unix.SYS_SEMGET, unix.IPC_PRIVATE, 1, 0o600); errno != 0 {
		t.Skipf("no System V semaphores here: %v", errno)
	}
	inner := func(uuid string) dm.UdevFlags {
		if strings.HasPrefix(uuid, "TC-inner-") {
			return dm.UdevInner
		}
		return 0
	}
	for _, tc := range []struct {
		name, uuid string
		udev       bool
		want       dm.UdevFlags // 0: no cookie
	}{
		{"top", "TC-top-1", true, dm.UdevPrimarySource},
		{"inner", "TC-inner-1", true, dm.UdevPrimarySource | dm.UdevInner},
		{"no-udev", "TC-inner-2", false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeUdev{Kernel: dmtest.New(), delay: 150 * time.Millisecond, errs: make(chan error, 4)}
			c := dm.NewClient(f, "")
			t.Cleanup(func() { c.Close() })
			if tc.udev {
				dm.EnableUdev(c)
			}
			c.SetUdevFlags(inner)
			ctx := context.Background()
			if _, err := c.Create(ctx, tc.name, tc.uuid); err != nil {
				t.Fatal(err)
			}
			if err := c.Load(ctx, tc.name, dm.Table{{Length: 8, Type: "zero"}}); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			if err := c.Resume(ctx, tc.name); err != nil {
				t.Fatal(err)
			}
			waited := time.Since(start)
			if err := c.Remove(ctx, tc.name); err != nil {
				t.Fatal(err)
			}
			if len(f.cookies) != 2 {
				t.Fatalf("cookies of resume and remove: %v", f.cookies)
			}
			for i, cookie := range f.cookies {
				if tc.want == 0 {
					if cookie != 0 {
						t.Errorf("call %d: cookie %#x without udev, want none", i, cookie)
					}
					continue
				}
				if got := dm.UdevFlags(cookie >> 16); got != tc.want {
					t.Errorf("call %d: cookie %#x has flags %#x, want %#x", i, cookie, got, tc.want)
				}
				if cookie&0xFFFF == 0 {
					t.Errorf("call %d: cookie %#x names no semaphore", i, cookie)
				}
				if semaphoreExists(cookie) {
					t.Errorf("call %d: the semaphore of cookie %#x is left behind", i, cookie)
				}
				if err := <-f.errs; err != nil {
					t.Errorf("call %d: udev's part: %v", i, err)
				}
			}
			if tc.want != 0 && (f.completed.Load() != 2 || waited < f.delay) {
				t.Errorf("resume returned after %v, udev completed %d cookies: want the wait for udev's rules (%v)", waited, f.completed.Load(), f.delay)
			}
		})
	}
}

// TestUdevCookieTimeout: a udev that never completes (rules without
// 95-dm-notify) delays a resume by at most the timeout, and the
// semaphore is removed all the same.
func TestUdevCookieTimeout(t *testing.T) {
	if _, _, errno := unix.Syscall(unix.SYS_SEMGET, unix.IPC_PRIVATE, 1, 0o600); errno != 0 {
		t.Skipf("no System V semaphores here: %v", errno)
	}
	f := &fakeUdev{Kernel: dmtest.New(), delay: time.Hour, errs: make(chan error, 4)}
	c := dm.NewClient(f, "")
	t.Cleanup(func() { c.Close() })
	dm.EnableUdev(c)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := c.Create(ctx, "stuck", "TC-top-2"); err != nil {
		t.Fatal(err)
	}
	if err := c.Load(ctx, "stuck", dm.Table{{Length: 8, Type: "zero"}}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err := c.Resume(ctx, "stuck")
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("resume waited %v for a udev that never answers; the context gave 300ms", d)
	}
	if len(f.cookies) != 1 || semaphoreExists(f.cookies[0]) {
		t.Errorf("cookies %v: want one, its semaphore removed", f.cookies)
	}
}
