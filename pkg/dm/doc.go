// SPDX-License-Identifier: Apache-2.0

// Package dm is tidecache's device-mapper client. It is the only package in
// tidecache that issues device-mapper ioctls, and it owns everything that
// turns dm text into Go values and back:
//
//   - Client: a pure-Go client for the ioctl interface of
//     /dev/mapper/control (create, load, suspend, resume, remove, info,
//     list, status, table, message, target versions);
//   - Table and Target: dm tables as the kernel and dmsetup print them;
//   - one file per target type tidecache uses (linear, writecache, cache,
//     fuaflush), each with a params type that prints and parses back to
//     the same string, an Equivalent method that ignores what the kernel
//     rewrites when it prints a table back (how the engine detects drift),
//     and a status parser that checks field counts against the target
//     version.
//
// # Why it exists
//
// tidecache composes upstream targets (dm-writecache, dm-cache with the smq
// policy, dm-linear) and must drive them from a daemon without forking
// dmsetup for every step and without cgo. No Go device-mapper library is
// served by our module proxy (anatol/devmapper.go is refused), so the client
// is ours; it speaks the version 4 ioctl interface described in
// include/uapi/linux/dm-ioctl.h through golang.org/x/sys/unix. dmsetup is
// for humans and tests only.
//
// # Errors callers must expect
//
// Every failed ioctl is an *IoctlError carrying the operation, the device
// name and the kernel's errno. Test it with errors.Is against:
//
//   - ErrNotFound: the device does not exist (ENXIO);
//   - ErrExists: Create found a device with that name or UUID (the kernel
//     answers EBUSY for this; EEXIST is accepted too);
//   - ErrBusy: the device is open (Remove) or otherwise busy (EBUSY);
//   - ErrClosed: the Client was closed.
//
// errors.Is also matches the raw unix.Errno (for example unix.EINVAL for a
// table the kernel refused; the kernel log says why). Malformed parameter or
// status strings give a *ParseError naming the argument that is wrong.
// Invalid device names and UUIDs are rejected before any ioctl (see
// ValidateName and ValidateUUID).
//
// # Contexts and blocking
//
// Every Client method takes a context, which is checked before each ioctl.
// The ioctls themselves cannot be cancelled: a Suspend that has to flush
// dirty data, or a Remove of a large table, runs to completion in the kernel
// even if the context ends meanwhile. Callers that must not leave a device
// suspended resume it with a context that is not cancelled
// (context.WithoutCancel).
//
// # Testing on a host
//
// NewClient builds a Client on any Control instead of
// /dev/mapper/control; package dmtest has a fake kernel to put behind it,
// with programmable target status and failure injection, so code that
// drives device-mapper runs in plain `go test`.
//
// # Device nodes
//
// tidecache runs where udev may be absent (our test VM has none), so Resume
// makes sure /dev/mapper/<name> is a block node with the device's dev_t
// (a udev symlink that resolves to the right device is left alone) and
// Remove deletes it. Open creates /dev/mapper/control (char 10:236, or the
// minor /proc/misc names) if it is missing, as libdevmapper does.
//
// # Privileges
//
// The kernel allows device-mapper ioctls only with CAP_SYS_ADMIN (EACCES
// otherwise); creating device nodes needs CAP_MKNOD.
package dm
