// SPDX-License-Identifier: Apache-2.0

package blockdev

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// OpenForWrite opens the block device at path for reading and writing, the
// one way a caller that is about to write metadata (a superblock, a wipe,
// the head of a cache slice) should open it. It opens with O_EXCL, which a
// block device takes as an exclusive claim: the kernel refuses it (EBUSY)
// while the device is mounted, is an md member or under a dm table, or is
// claimed by another process (mkfs, another tidectl); and while the file
// stays open nobody else can claim it. That closes the window between
// CheckUnused and the write.
//
// A device that the caller's own device-mapper tables hold (the SSD of an
// assembled pool, under its volumes' slices) cannot be claimed: dm holds
// the claim. When every holder in sysfs is a dm device whose dm UUID
// ownDM accepts, the device is opened without O_EXCL; as long as dm holds
// it, no filesystem, md array or exclusive opener can take it either.
// ownDM nil accepts none.
//
// Errors: *NotExistError; an error wrapping ErrNotBlockDevice for anything
// that is not a block device (regular files included); *InUseError when
// the claim is refused, with the reason CheckUnused finds ("mounted at
// /mnt", "held by md127") or else "claimed exclusively by another
// process"; any other error as returned by open(2), wrapped.
func (c Checker) OpenForWrite(ctx context.Context, path string, ownDM func(dmUUID string) bool) (*os.File, error) {
	dev, err := LookupBlock(path)
	if err != nil {
		return nil, err
	}
	fd, err := unix.Open(dev.Path, unix.O_RDWR|unix.O_EXCL|unix.O_CLOEXEC, 0)
	if err == nil {
		return os.NewFile(uintptr(fd), dev.Path), nil
	}
	if !errors.Is(err, unix.EBUSY) {
		return nil, fmt.Errorf("open %s for writing: %w", path, err)
	}
	name, nerr := nameByNumber(c.SysRoot, dev.Major, dev.Minor)
	if nerr == nil && ownDM != nil {
		if own, herr := heldOnlyBy(c.SysRoot, name, ownDM); herr == nil && own {
			fd, err := unix.Open(dev.Path, unix.O_RDWR|unix.O_CLOEXEC, 0)
			if err != nil {
				return nil, fmt.Errorf("open %s for writing: %w", path, err)
			}
			return os.NewFile(uintptr(fd), dev.Path), nil
		}
	}
	// Say who holds it if the other checks can tell.
	if nerr == nil {
		var iu *InUseError
		if cerr := c.check(ctx, path, dev.Path, name, devNum{dev.Major, dev.Minor}); errors.As(cerr, &iu) {
			return nil, iu
		}
	}
	return nil, &InUseError{Path: path, Reason: "claimed exclusively by another process (open with O_EXCL: device or resource busy)"}
}

// heldOnlyBy reports whether the device devName has at least one holder in
// sysfs and every holder is a dm device whose UUID ok accepts.
func heldOnlyBy(sysRoot, devName string, ok func(dmUUID string) bool) (bool, error) {
	root := sysRootOrDefault(sysRoot)
	entries, err := os.ReadDir(filepath.Join(root, "class", "block", devName, "holders"))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return false, err
	}
	if len(entries) == 0 {
		return false, nil
	}
	for _, e := range entries {
		raw, err := os.ReadFile(filepath.Join(root, "class", "block", e.Name(), "dm", "uuid"))
		if err != nil || !ok(strings.TrimSpace(string(raw))) {
			return false, nil
		}
	}
	return true, nil
}
