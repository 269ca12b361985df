// SPDX-License-Identifier: Apache-2.0

package blockdev

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ErrNotBlockDevice is wrapped by errors about a path that exists but is
// neither a block device nor (where allowed) a regular file.
var ErrNotBlockDevice = errors.New("not a block device")

// NotExistError reports a device path that does not exist. It matches
// fs.ErrNotExist under errors.Is.
type NotExistError struct {
	Path string
}

func (e *NotExistError) Error() string { return "device " + e.Path + " does not exist" }

// Is makes errors.Is(err, fs.ErrNotExist) true.
func (e *NotExistError) Is(target error) bool { return target == fs.ErrNotExist }

// Device is a resolved device path.
type Device struct {
	// Path is the path with every symlink resolved, e.g. /dev/vdb for
	// /dev/disk/by-id/virtio-ssd0.
	Path string
	// Regular is true when Path is a regular file (a disk image used in
	// tests) rather than a block device. Major and Minor are then zero.
	Regular bool
	// Major and Minor are the device numbers of a block device.
	Major, Minor uint32
}

// Lookup resolves path and checks that it is a block device or a regular
// file. A missing path gives a *NotExistError; anything else (a directory,
// a character device) an error wrapping ErrNotBlockDevice.
func Lookup(path string) (Device, error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return Device{}, &NotExistError{Path: path}
		}
		return Device{}, fmt.Errorf("resolve %s: %w", path, err)
	}
	var st unix.Stat_t
	if err := unix.Stat(real, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return Device{}, &NotExistError{Path: path}
		}
		return Device{}, fmt.Errorf("stat %s: %w", real, err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFBLK:
		rdev := uint64(st.Rdev)
		return Device{Path: real, Major: unix.Major(rdev), Minor: unix.Minor(rdev)}, nil
	case unix.S_IFREG:
		return Device{Path: real, Regular: true}, nil
	default:
		return Device{}, notBlockDevice(path, real, st.Mode)
	}
}

// LookupBlock is Lookup for callers that will write to the device: it
// refuses a regular file too, so that a mistyped path or a disk image is
// never taken for a disk. Every refusal wraps ErrNotBlockDevice and says
// what the path is: "/root/ssd.img is a regular file, not a block device".
func LookupBlock(path string) (Device, error) {
	d, err := Lookup(path)
	if err != nil {
		return Device{}, err
	}
	if d.Regular {
		return Device{}, notBlockDevice(path, d.Path, unix.S_IFREG)
	}
	return d, nil
}

// notBlockDevice names path (and what it resolves to, if that differs) and
// the kind of file it is.
func notBlockDevice(path, real string, mode uint32) error {
	if path != real {
		path += " (-> " + real + ")"
	}
	return fmt.Errorf("%s is %s, %w", path, fileKind(mode), ErrNotBlockDevice)
}

// fileKind says what a stat mode is, for error messages.
func fileKind(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return "a regular file"
	case unix.S_IFDIR:
		return "a directory"
	case unix.S_IFCHR:
		return "a character device"
	case unix.S_IFIFO:
		return "a named pipe"
	case unix.S_IFSOCK:
		return "a socket"
	}
	return fmt.Sprintf("a file of type %#o", mode&unix.S_IFMT)
}

// Resolve returns path with symlinks resolved, after checking that it names
// a block device or a regular file (a test image; use Lookup to tell them
// apart). Errors are as for Lookup.
func Resolve(path string) (string, error) {
	d, err := Lookup(path)
	if err != nil {
		return "", err
	}
	return d.Path, nil
}

// DevNumber returns the major and minor numbers of the block device at path.
func DevNumber(path string) (major, minor uint32, err error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return 0, 0, &NotExistError{Path: path}
		}
		return 0, 0, fmt.Errorf("stat %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK {
		return 0, 0, notBlockDevice(path, path, st.Mode)
	}
	rdev := uint64(st.Rdev)
	return unix.Major(rdev), unix.Minor(rdev), nil
}

// LogicalBlockSize returns the logical block size of the block device at
// path (BLKSSZGET): the smallest unit it can address, 512 or 4096 bytes.
func LogicalBlockSize(path string) (uint32, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("logical block size of %s: %w", path, err)
	}
	defer f.Close()
	n, err := unix.IoctlGetInt(int(f.Fd()), unix.BLKSSZGET)
	if err != nil {
		return 0, fmt.Errorf("logical block size of %s: BLKSSZGET: %w", path, err)
	}
	return uint32(n), nil
}

// Size returns the size in bytes of the block device (BLKGETSIZE64) or
// regular file at path.
func Size(path string) (uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return 0, &NotExistError{Path: path}
		}
		return 0, fmt.Errorf("size of %s: %w", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("size of %s: %w", path, err)
	}
	switch {
	case fi.Mode().IsRegular():
		return uint64(fi.Size()), nil
	case fi.Mode()&fs.ModeDevice != 0 && fi.Mode()&fs.ModeCharDevice == 0:
		var size uint64
		sc, err := f.SyscallConn()
		if err != nil {
			return 0, fmt.Errorf("size of %s: %w", path, err)
		}
		var errno unix.Errno
		if err := sc.Control(func(fd uintptr) {
			_, _, errno = unix.Syscall(unix.SYS_IOCTL, fd, unix.BLKGETSIZE64, uintptr(unsafe.Pointer(&size)))
		}); err != nil {
			return 0, fmt.Errorf("size of %s: %w", path, err)
		}
		if errno != 0 {
			return 0, fmt.Errorf("size of %s: BLKGETSIZE64: %w", path, errno)
		}
		return size, nil
	default:
		return 0, fmt.Errorf("size of %s: %w", path, ErrNotBlockDevice)
	}
}

// Name returns the kernel name of the block device at path ("vdb", "md127",
// "dm-3"), the name sysfs uses under class/block. It is found through
// <sysRoot>/dev/block/MAJOR:MINOR, so it is right even for device nodes
// that are not symlinks (/dev/mapper/* without udev). sysRoot "" means
// "/sys".
func Name(sysRoot, path string) (string, error) {
	major, minor, err := DevNumber(path)
	if err != nil {
		return "", err
	}
	return nameByNumber(sysRoot, major, minor)
}

func nameByNumber(sysRoot string, major, minor uint32) (string, error) {
	link := filepath.Join(sysRootOrDefault(sysRoot), "dev", "block", fmt.Sprintf("%d:%d", major, minor))
	target, err := os.Readlink(link)
	if err != nil {
		return "", fmt.Errorf("kernel name of device %d:%d: %w", major, minor, err)
	}
	return filepath.Base(target), nil
}

// devPath maps a kernel name to its /dev path: sysfs writes '/' in names
// (cciss/c0d0) as '!'.
func devPath(name string) string {
	return "/dev/" + strings.ReplaceAll(name, "!", "/")
}

func sysRootOrDefault(s string) string {
	if s == "" {
		return "/sys"
	}
	return s
}

func procRootOrDefault(s string) string {
	if s == "" {
		return "/proc"
	}
	return s
}
