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

	"github.com/tidecache/tidecache/pkg/command"
)

// Identity is what names a disk, a LUN or a partition across reboots and
// renames, as the kernel and the partition table report it. An md array's
// identity is its array UUID (package mdraid); a dm device has none here.
type Identity struct {
	// WWN is the kernel's wwid of a disk or LUN (SCSI VPD page 0x83, an
	// NVMe namespace's EUI-64/NGUID/UUID); Serial its serial number.
	WWN, Serial string
	// PartUUID is a partition's GPT partition UUID, or the MBR disk
	// signature and number ("8e3f1a2b-01").
	PartUUID string
}

// Identify reads the identity of the block device at path: for a
// partition its partuuid (blkid), for a whole disk its wwid and serial
// (sysfs). A device with none of them gets an empty Identity, not an
// error. sysRoot "" means "/sys".
func (p Prober) Identify(ctx context.Context, sysRoot, path string) (Identity, error) {
	name, err := Name(sysRoot, path)
	if err != nil {
		return Identity{}, fmt.Errorf("identify %s: %w", path, err)
	}
	id, partition, err := sysfsIdentity(sysRoot, name)
	if err != nil {
		return Identity{}, fmt.Errorf("identify %s: %w", path, err)
	}
	if !partition {
		return id, nil
	}
	out, err := p.Runner.Run(ctx, "blkid", "-p", "-s", "PART_ENTRY_UUID", "-o", "value", path)
	var ee *command.ExitError
	switch {
	case errors.As(err, &ee) && ee.Code == blkidExitNotFound:
		return id, nil
	case err != nil:
		return Identity{}, fmt.Errorf("identify %s: %w", path, err)
	}
	id.PartUUID = strings.TrimSpace(string(out))
	return id, nil
}

// sysfsIdentity reads the wwid and serial of the whole disk kname from
// <sysRoot>/class/block/<kname> (the attributes sit on the block device
// for NVMe and virtio, on its device for SCSI), and reports whether
// kname is a partition, whose identity is in its partition table.
func sysfsIdentity(sysRoot, kname string) (Identity, bool, error) {
	dir := filepath.Join(sysRootOrDefault(sysRoot), "class", "block", kname)
	if _, err := os.Stat(dir); err != nil {
		return Identity{}, false, fmt.Errorf("no block device %s in sysfs: %w", kname, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "partition")); err == nil {
		return Identity{}, true, nil
	}
	var id Identity
	var err error
	if id.WWN, err = firstAttr(dir, "wwid", "device/wwid"); err != nil {
		return Identity{}, false, err
	}
	if id.Serial, err = firstAttr(dir, "serial", "device/serial"); err != nil {
		return Identity{}, false, err
	}
	return id, false, nil
}

// firstAttr returns the first of the sysfs attributes under dir that
// exists and is not blank, trimmed; "" when none is.
func firstAttr(dir string, names ...string) (string, error) {
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, n))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			return "", err
		}
		if v := strings.TrimSpace(string(b)); v != "" {
			return v, nil
		}
	}
	return "", nil
}
