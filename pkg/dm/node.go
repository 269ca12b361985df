// SPDX-License-Identifier: Apache-2.0

//go:build linux

package dm

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

const (
	// miscMajor is the major number of misc character devices; the
	// device-mapper control node is misc minor 236 (MAPPER_CTRL_MINOR)
	// unless /proc/misc says otherwise.
	miscMajor        = 10
	mapperCtrlMinor  = 236
	miscDeviceName   = "device-mapper"
	procMisc         = "/proc/misc"
	nodeMode         = 0o600
	mapperDirMode    = 0o755
	nodeCreateTrials = 10
)

// ensureNode makes dir/name a device node of the given type (unix.S_IFBLK
// or unix.S_IFCHR) and number. A node, or a symlink to one, that already
// has that type and number is left alone; anything else at that path is
// replaced atomically (mknod under a temporary name, then rename).
func ensureNode(dir, name string, typ uint32, dev uint64) error {
	path := filepath.Join(dir, name)
	var st unix.Stat_t
	err := unix.Stat(path, &st)
	if err == nil && st.Mode&unix.S_IFMT == typ && uint64(st.Rdev) == dev {
		return nil
	}
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if err := os.MkdirAll(dir, mapperDirMode); err != nil {
		return err
	}
	for range nodeCreateTrials {
		tmp := filepath.Join(dir, "."+name+".tmp"+strconv.FormatUint(rand.Uint64(), 36))
		err := unix.Mknod(tmp, typ|nodeMode, int(dev))
		if errors.Is(err, unix.EEXIST) {
			continue
		}
		if err != nil {
			return &os.PathError{Op: "mknod", Path: tmp, Err: err}
		}
		if err := unix.Rename(tmp, path); err != nil {
			_ = unix.Unlink(tmp)
			return &os.PathError{Op: "rename", Path: path, Err: err}
		}
		return nil
	}
	return fmt.Errorf("mknod %s: no free temporary name", path)
}

// removeNode deletes dir/name if it is a block device node or a symlink
// (a udev link); a missing node is not an error.
func removeNode(dir, name string) error {
	path := filepath.Join(dir, name)
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return &os.PathError{Op: "lstat", Path: path, Err: err}
	}
	if t := st.Mode & unix.S_IFMT; t != unix.S_IFBLK && t != unix.S_IFLNK {
		return nil
	}
	if err := unix.Unlink(path); err != nil && !errors.Is(err, unix.ENOENT) {
		return &os.PathError{Op: "unlink", Path: path, Err: err}
	}
	return nil
}

// controlMinor returns the misc minor of the device-mapper control device
// from /proc/misc, or 236 when it is not listed (dm-mod not loaded yet:
// opening the node loads it through its char-major-10-236 alias).
func controlMinor(procMiscPath string) uint32 {
	f, err := os.Open(procMiscPath)
	if err != nil {
		return mapperCtrlMinor
	}
	defer f.Close()
	if m, ok := parseMiscMinor(f, miscDeviceName); ok {
		return m
	}
	return mapperCtrlMinor
}

// parseMiscMinor finds name in /proc/misc text ("<minor> <name>" lines).
func parseMiscMinor(r io.Reader, name string) (uint32, bool) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 || f[1] != name {
			continue
		}
		if m, err := strconv.ParseUint(f[0], 10, 32); err == nil {
			return uint32(m), true
		}
	}
	return 0, false
}
