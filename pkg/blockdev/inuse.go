// SPDX-License-Identifier: Apache-2.0

package blockdev

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrInUse matches every *InUseError under errors.Is.
var ErrInUse = errors.New("device in use")

// InUseError reports a device that must not be written to because the
// kernel or another process is using it.
type InUseError struct {
	// Path is the device as the caller named it.
	Path string
	// Reason says who uses it: "mounted at /mnt", "partition vdb1 used as
	// swap", "held by md127", "held by dm-3 (tc-db-origin)", "opened
	// exclusively by another process".
	Reason string
}

func (e *InUseError) Error() string { return "device " + e.Path + " is in use: " + e.Reason }

// Is makes errors.Is(err, ErrInUse) true.
func (e *InUseError) Is(target error) bool { return target == ErrInUse }

// Checker tells whether a block device is free for tidecache to take.
// The zero value reads the real /sys and /proc.
type Checker struct {
	// SysRoot is where sysfs is mounted; "" means "/sys".
	SysRoot string
	// ProcRoot is where procfs is mounted; "" means "/proc".
	ProcRoot string
	// NvmetAllowed, if set, names the nvmet subsystems whose namespaces
	// on the device are not a use of it: the caller's own exports of it.
	NvmetAllowed func(subsystemNQN string) bool
}

// CheckUnused returns nil if nothing uses the device at path or any of its
// partitions, a *InUseError saying why if something does, a
// *NotExistError if path does not exist, and another error if it cannot
// tell.
//
// It looks, in this order, at /proc/self/mountinfo (by device number, and
// by source path for filesystems such as btrfs that report an anonymous
// device number), /proc/swaps, the holders directory in sysfs (md arrays
// and dm devices stacked on it), the open files of every process
// (/proc/<pid>/fd: a database or a VM writing the raw device, named by pid
// and command), and finally opens each partition and the device itself
// with O_EXCL: the kernel refuses that (EBUSY) while a filesystem, md, dm
// or a process such as mkfs holds the device, which also catches mounts in
// other mount namespaces. The exclusive open is released at once; a user
// that arrives afterwards is not detected, so writers open the device with
// OpenForWrite, which keeps the exclusive claim while they write.
//
// A regular file (a test image) is only checked for existence.
func (c Checker) CheckUnused(ctx context.Context, path string) error {
	dev, err := Lookup(path)
	if err != nil {
		return err
	}
	if dev.Regular {
		return nil
	}
	name, err := nameByNumber(c.SysRoot, dev.Major, dev.Minor)
	if err != nil {
		return fmt.Errorf("check %s: %w", path, err)
	}
	return c.check(ctx, path, dev.Path, name, devNum{dev.Major, dev.Minor})
}

// member is the device under check or one of its partitions.
type member struct {
	name   string // kernel name
	path   string // /dev node
	num    devNum
	prefix string // "" for the device, "partition vdb1 " for a partition
}

func (c Checker) check(ctx context.Context, path, devPathName, name string, num devNum) error {
	members, err := c.members(devPathName, name, num)
	if err != nil {
		return fmt.Errorf("check %s: %w", path, err)
	}
	inUse := func(m member, reason string) error {
		return &InUseError{Path: path, Reason: m.prefix + reason}
	}

	mounts, err := Mounts(c.ProcRoot)
	if err != nil {
		return fmt.Errorf("check %s: %w", path, err)
	}
	for _, mnt := range mounts {
		for _, m := range members {
			if mnt.Dev == unix.Mkdev(m.num.major, m.num.minor) || (unix.Major(mnt.Dev) == 0 && sourceIs(mnt.Source, m)) {
				return inUse(m, "mounted at "+mnt.MountPoint)
			}
		}
	}

	if err := ctx.Err(); err != nil {
		return fmt.Errorf("check %s: %w", path, err)
	}
	swapped, err := swaps(c.ProcRoot)
	if err != nil {
		return fmt.Errorf("check %s: %w", path, err)
	}
	for _, swap := range swapped {
		for _, m := range members {
			if sourceIs(swap, m) {
				return inUse(m, "used as swap")
			}
		}
	}

	for _, m := range members {
		hs, err := holders(c.SysRoot, m.name)
		if err != nil {
			return fmt.Errorf("check %s: %w", path, err)
		}
		if len(hs) > 0 {
			return inUse(m, "held by "+strings.Join(hs, ", "))
		}
	}

	// The kernel's NVMe target opens the devices it exports without an
	// exclusive claim, as no holder and no process: only its configfs
	// tree tells that other nodes may be writing the device.
	for _, ns := range nvmetNamespaces(c.SysRoot) {
		if c.NvmetAllowed != nil && c.NvmetAllowed(ns.subsystem) {
			continue
		}
		for _, m := range members {
			if sourceIs(ns.devicePath, m) {
				return inUse(m, fmt.Sprintf("exported over NVMe by the kernel's target (nvmet subsystem %s, namespace %s): other nodes may be writing it", ns.subsystem, ns.id))
			}
		}
	}

	if err := ctx.Err(); err != nil {
		return fmt.Errorf("check %s: %w", path, err)
	}
	if m, procs := c.openedBy(members); len(procs) > 0 {
		return inUse(m, "open by "+describeProcs(procs))
	}

	// Partitions first: while a partition is claimed the whole disk is
	// refused too, and the partition's name is the better reason.
	for i := len(members) - 1; i >= 0; i-- {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("check %s: %w", path, err)
		}
		m := members[i]
		fd, err := unix.Open(m.path, unix.O_RDONLY|unix.O_EXCL|unix.O_CLOEXEC, 0)
		switch {
		case err == nil:
			unix.Close(fd)
		case errors.Is(err, unix.EBUSY):
			return inUse(m, "opened exclusively by another process")
		case errors.Is(err, unix.ENOENT) && m.prefix != "":
			// No node for the partition (no devtmpfs?): the whole-disk
			// open below still sees its users.
		default:
			return fmt.Errorf("check %s: open %s exclusively: %w", path, m.path, err)
		}
	}
	return nil
}

func (c Checker) members(devPathName, name string, num devNum) ([]member, error) {
	members := []member{{name: name, path: devPathName, num: num}}
	parts, err := Partitions(c.SysRoot, name)
	if err != nil {
		return nil, err
	}
	for _, p := range parts {
		n, err := devNumberFromSysfs(c.SysRoot, p)
		if err != nil {
			return nil, err
		}
		members = append(members, member{name: p, path: devPath(p), num: n, prefix: "partition " + p + " "})
	}
	return members, nil
}

// nvmetNamespace is a namespace of the kernel's NVMe target.
type nvmetNamespace struct {
	subsystem, id, devicePath string
}

// nvmetNamespaces lists the namespaces configured in the kernel's NVMe
// target (<sysRoot>/kernel/config/nvmet), enabled or not: none when nvmet
// is not loaded or configfs not mounted.
func nvmetNamespaces(sysRoot string) []nvmetNamespace {
	root := sysRootOrDefault(sysRoot)
	paths, _ := filepath.Glob(filepath.Join(root, "kernel", "config", "nvmet", "subsystems", "*", "namespaces", "*", "device_path"))
	var out []nvmetNamespace
	for _, p := range paths {
		b, err := os.ReadFile(p)
		dev := strings.TrimSpace(string(b))
		if err != nil || dev == "" {
			continue
		}
		nsDir := filepath.Dir(p)
		out = append(out, nvmetNamespace{
			subsystem:  filepath.Base(filepath.Dir(filepath.Dir(nsDir))),
			id:         filepath.Base(nsDir),
			devicePath: dev,
		})
	}
	return out
}

// sourceIs tells whether a device path found in the mount table or /proc/swaps
// names m: by device number when the path can be stat'ed, else by name.
func sourceIs(source string, m member) bool {
	if !strings.HasPrefix(source, "/") {
		return false
	}
	var st unix.Stat_t
	if err := unix.Stat(source, &st); err == nil {
		if st.Mode&unix.S_IFMT != unix.S_IFBLK {
			return false
		}
		rdev := uint64(st.Rdev)
		return devNum{unix.Major(rdev), unix.Minor(rdev)} == m.num
	}
	return filepath.Base(source) == m.name
}

// UnescapeOctal undoes the kernel's \ooo escaping of paths in procfs
// (mountinfo, swaps): \040 is a space.
func UnescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
