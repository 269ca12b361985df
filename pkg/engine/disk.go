// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/tidecache/tidecache/pkg/blockdev"
	"github.com/tidecache/tidecache/pkg/pool"
	"github.com/tidecache/tidecache/pkg/stack"
	"github.com/tidecache/tidecache/pkg/superblock"
)

// metadataHeadBytes is how much of a cache slice is zeroed before a cache
// target is first built on it. Both dm-writecache (superblock in its first
// block, at most 4 KiB) and dm-cache (superblock in the first 4 KiB
// metadata block) format a device whose superblock reads as zeroes instead
// of loading whatever an earlier volume left there.
const metadataHeadBytes = 64 << 10

// readSuperblock reads the tidecache superblock of a device.
func readSuperblock(path string) (superblock.Superblock, error) {
	f, err := os.Open(path)
	if err != nil {
		return superblock.Superblock{}, fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	sb, err := superblock.Read(f)
	if err != nil {
		return superblock.Superblock{}, fmt.Errorf("read superblock of %s: %w", path, err)
	}
	return sb, nil
}

// disks is how the engine reaches block devices besides device-mapper
// and reading superblocks: the devices a scan reads, opening a device for
// writing, and the device numbers of table references. hostDisks is the
// node's; host tests put files in its place.
type disks interface {
	// list returns the paths of every block device on the node.
	list() ([]string, error)
	// openForWrite opens a device to write to it (see hostDisks).
	openForWrite(path string) (*os.File, error)
	// devNumber turns a device reference of a table (a path or
	// "major:minor") into "major:minor".
	devNumber(ref string) (string, error)
}

// hostDisks are the node's block devices, found through sysfs under
// sysRoot.
type hostDisks struct{ sysRoot string }

func (h hostDisks) list() ([]string, error) { return blockdev.ListBlockDevices(h.sysRoot) }

// openForWrite is the only way the engine opens a device to write to it:
// superblocks (writeSuperblock), their wipe (wipeSuperblock) and the heads
// of cache slices (zeroHead) all go through it. The device is opened with
// O_EXCL, so the write fails with a *blockdev.InUseError ("device X is in
// use: mounted at /mnt") instead of landing under a filesystem, an md
// array or another program that claimed the device after the checks ran;
// the claim lasts until the file is closed. A device held only by
// tidecache's own dm devices (a pool member under its volumes' slices) is
// opened shared: dm's claim keeps everyone else out. See
// blockdev.Checker.OpenForWrite.
//
// It reads the real /sys and /proc, whatever sysRoot says: the in-use
// checks must see the node as it is.
func (hostDisks) openForWrite(path string) (*os.File, error) {
	return blockdev.Checker{}.OpenForWrite(context.Background(), path, stack.Owned)
}

// devNumber resolves a path with stat(2); "major:minor" is returned as is.
func (hostDisks) devNumber(ref string) (string, error) {
	if !strings.HasPrefix(ref, "/") {
		return ref, nil
	}
	maj, min, err := blockdev.DevNumber(ref)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%d:%d", maj, min), nil
}

// writeSuperblock writes one superblock copy to a device and syncs it.
func (e *Engine) writeSuperblock(path string, sb superblock.Superblock) error {
	f, err := e.disks.openForWrite(path)
	if err != nil {
		return fmt.Errorf("write superblock: %w", err)
	}
	defer f.Close()
	if err := superblock.Write(f, f.Sync, sb); err != nil {
		return fmt.Errorf("write superblock to %s: %w", path, err)
	}
	return f.Close()
}

// wipeSuperblock removes tidecache's superblock from a device.
func (e *Engine) wipeSuperblock(path string) error {
	f, err := e.disks.openForWrite(path)
	if err != nil {
		return fmt.Errorf("wipe superblock: %w", err)
	}
	defer f.Close()
	if err := superblock.Wipe(f, f.Sync); err != nil {
		return fmt.Errorf("wipe superblock on %s: %w", path, err)
	}
	return f.Close()
}

// zeroHead zeroes the first bytes of an extent on a device and syncs, so a
// cache target built on it starts with fresh metadata.
func (e *Engine) zeroHead(path string, x pool.Extent) error {
	n := int64(metadataHeadBytes)
	if max := int64(x.Length) * pool.SectorSize; n > max {
		n = max
	}
	f, err := e.disks.openForWrite(path)
	if err != nil {
		return fmt.Errorf("zero cache metadata: %w", err)
	}
	defer f.Close()
	if _, err := f.WriteAt(make([]byte, n), int64(x.Offset)*pool.SectorSize); err != nil {
		return fmt.Errorf("zero cache metadata on %s at sector %d: %w", path, x.Offset, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	return f.Close()
}

// isNoSuperblock reports whether err says the device carries no tidecache
// superblock at all (as opposed to a damaged one).
func isNoSuperblock(err error) bool { return errors.Is(err, superblock.ErrNoSuperblock) }
