// SPDX-License-Identifier: Apache-2.0

package blockdev

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"
)

// Mount is one line of the kernel's mount table (/proc/self/mountinfo).
type Mount struct {
	// Dev is the st_dev of the mounted filesystem (unix.Mkdev): the block
	// device's number, or an anonymous one (major 0) for btrfs, NFS and
	// pseudo filesystems.
	Dev        uint64
	MountPoint string
	// ReadOnly is the per-mount "ro" option (a read-only bind mount of a
	// writable filesystem is read-only here).
	ReadOnly bool
	FSType   string
	Source   string
}

// Mounts returns the mount table of the calling process's mount
// namespace, read from procRoot ("" means /proc) by prometheus/procfs, in
// the kernel's order: a later mount on a path is on top of an earlier one.
// Paths come unescaped (the kernel writes a space as \040).
func Mounts(procRoot string) ([]Mount, error) {
	pfs, err := procfs.NewFS(procRootOrDefault(procRoot))
	if err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	infos, err := pfs.GetMounts()
	if err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	out := make([]Mount, 0, len(infos))
	for _, m := range infos {
		dev, err := parseDevNum(m.MajorMinorVer)
		if err != nil {
			return nil, fmt.Errorf("read mount table: mount %d on %s: %w", m.MountID, m.MountPoint, err)
		}
		_, ro := m.Options["ro"]
		out = append(out, Mount{
			Dev:        unix.Mkdev(dev.major, dev.minor),
			MountPoint: UnescapeOctal(m.MountPoint),
			ReadOnly:   ro,
			FSType:     m.FSType,
			Source:     UnescapeOctal(m.Source),
		})
	}
	return out, nil
}

// swaps returns the devices and files in use as swap (/proc/swaps under
// procRoot), unescaped; none on a kernel without swap support.
func swaps(procRoot string) ([]string, error) {
	pfs, err := procfs.NewFS(procRootOrDefault(procRoot))
	if err != nil {
		return nil, fmt.Errorf("read swaps: %w", err)
	}
	list, err := pfs.Swaps()
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read swaps: %w", err)
	}
	out := make([]string, 0, len(list))
	for _, s := range list {
		out = append(out, UnescapeOctal(s.Filename))
	}
	return out, nil
}
