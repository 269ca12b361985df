// SPDX-License-Identifier: Apache-2.0

//go:build linux

package dm

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// udev and device-mapper agree through a cookie, the protocol of
// libdevmapper that the dm udev rules (55-dm.rules, 60-persistent-
// storage-dm.rules, 95-dm-notify.rules of Debian's dmsetup) expect:
//
//   - the tool passes a cookie in the event_nr field of a resume, remove or
//     rename ioctl: flags for the rules in its upper 16 bits, the low 16
//     bits of a System V semaphore's key in its lower 16;
//   - the kernel puts DM_COOKIE=<cookie> in the uevent; the rules read the
//     flags (`dmsetup udevflags`), and their last step (`dmsetup
//     udevcomplete`) decrements the semaphore;
//   - the tool waits for the semaphore to reach zero: udev is done, links
//     such as /dev/disk/by-uuid are in place.
//
// Without a cookie the rules treat a resume as a replay of the device's
// "add" event, which they disable (no by-uuid link for /dev/mapper/tc-db),
// and they cannot tell the devices a user mounts from those inside a
// stack, which carry the same filesystem signature.

// UdevFlags are the flags a cookie passes to the dm udev rules
// (libdevmapper's DM_UDEV_*_FLAG).
type UdevFlags uint16

const (
	// UdevDisableDMRules: no /dev/mapper link by udev.
	UdevDisableDMRules UdevFlags = 1 << iota
	// UdevDisableSubsystemRules: no LVM-style subsystem rules.
	UdevDisableSubsystemRules
	// UdevDisableDiskRules: no blkid probe, no /dev/disk/by-* links.
	UdevDisableDiskRules
	// UdevDisableOtherRules: later rules (systemd, udisks, md) ignore it.
	UdevDisableOtherRules
	// UdevLowPriority: its links lose to any other device's.
	UdevLowPriority
	// UdevDisableLibraryFallback: the tool will not make nodes itself.
	UdevDisableLibraryFallback
	// UdevPrimarySource: the event comes from the tool that made the
	// device (a real change, not a replay), so the rules process it.
	UdevPrimarySource
)

// UdevInner is what a device inside a stack gets: the rules keep blkid,
// by-uuid links and systemd away from it, since it shows the same
// filesystem as the device above it, perhaps without the writes that the
// layers above still hold.
const UdevInner = UdevDisableSubsystemRules | UdevDisableDiskRules | UdevDisableOtherRules | UdevLowPriority

const (
	cookieMagic   = 0x0D4D // libdevmapper's DM_COOKIE_MAGIC, the key's upper half
	udevFlagShift = 16
	udevControl   = "/run/udev/control" // udevd's socket: udev is running
	// UdevTimeout bounds the wait for udev to finish a device's rules;
	// past it the Client goes on (it makes /dev/mapper nodes itself) and
	// logs nothing: a stuck udev must not hold a storage operation.
	UdevTimeout = 30 * time.Second

	semSETVAL = 16 // SETVAL for semctl, from <linux/sem.h>
)

// udevSync is one cookie: its semaphore, and what to pass the kernel.
type udevSync struct {
	cookie uint32
	semid  int
}

// udevRunning reports whether udevd runs with the dm rules that complete
// a cookie (95-dm-notify.rules, from dmsetup): without either, nothing
// would, and every resume would wait for UdevTimeout.
func udevRunning() bool {
	if _, err := os.Stat(udevControl); err != nil {
		return false
	}
	for _, dir := range []string{"/etc/udev/rules.d", "/run/udev/rules.d", "/usr/lib/udev/rules.d", "/lib/udev/rules.d"} {
		if _, err := os.Stat(dir + "/95-dm-notify.rules"); err == nil {
			return true
		}
	}
	return false
}

// beginUdev makes a cookie with flags: a new semaphore holding 2 (one for
// the transaction, one for the uevent the ioctl will send).
func beginUdev(flags UdevFlags) (*udevSync, error) {
	for range 16 {
		low := uint32(rand.N(0xFFFF)) + 1
		key := cookieMagic<<udevFlagShift | low
		id, _, errno := unix.Syscall(unix.SYS_SEMGET, uintptr(key), 1, 0o600|unix.IPC_CREAT|unix.IPC_EXCL)
		if errno == unix.EEXIST {
			continue
		}
		if errno != 0 {
			return nil, fmt.Errorf("udev cookie semaphore: semget: %w", errno)
		}
		s := &udevSync{cookie: uint32(flags)<<udevFlagShift | low, semid: int(id)}
		if _, _, errno := unix.Syscall6(unix.SYS_SEMCTL, id, 0, semSETVAL, 2, 0, 0); errno != 0 {
			s.destroy()
			return nil, fmt.Errorf("udev cookie semaphore: set value: %w", errno)
		}
		return s, nil
	}
	return nil, errors.New("udev cookie semaphore: no free key")
}

// semop applies one operation to the semaphore, waiting at most timeout
// (0: do not wait).
func (s *udevSync) semop(op int16, flags int16, timeout time.Duration) error {
	buf := struct {
		num   uint16
		op    int16
		flags int16
		_     [2]byte
	}{op: op, flags: flags}
	var ts *unix.Timespec
	if timeout > 0 {
		t := unix.NsecToTimespec(timeout.Nanoseconds())
		ts = &t
	}
	for {
		_, _, errno := unix.Syscall6(unix.SYS_SEMTIMEDOP, uintptr(s.semid), uintptr(unsafe.Pointer(&buf)), 1, uintptr(unsafe.Pointer(ts)), 0, 0)
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 {
			return errno
		}
		return nil
	}
}

// end waits until udev has run the rules of the event the ioctl sent
// (replyFlags says whether it sent one), at most timeout or until ctx
// ends, then removes the semaphore. It returns whether udev finished.
func (s *udevSync) end(ctx context.Context, replyFlags uint32, timeout time.Duration) bool {
	defer s.destroy()
	if replyFlags&unix.DM_UEVENT_GENERATED_FLAG == 0 {
		// No uevent: nothing will decrement for it.
		if s.semop(-1, unix.IPC_NOWAIT, 0) != nil {
			return false
		}
	}
	if s.semop(-1, unix.IPC_NOWAIT, 0) != nil {
		return false
	}
	deadline := time.Now().Add(timeout)
	for {
		// Wait for zero in short steps, so that ctx is honoured.
		step := min(time.Until(deadline), 200*time.Millisecond)
		if step <= 0 || ctx.Err() != nil {
			return false
		}
		err := s.semop(0, 0, step)
		if err == nil {
			return true
		}
		if err != unix.EAGAIN {
			return false
		}
	}
}

func (s *udevSync) destroy() {
	_, _, _ = unix.Syscall6(unix.SYS_SEMCTL, uintptr(s.semid), 0, unix.IPC_RMID, 0, 0, 0)
}
