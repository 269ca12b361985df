// SPDX-License-Identifier: Apache-2.0

// Package superblock owns the on-disk record that lets a node rebuild every
// volume of a pool from its disks alone: the encoding of a pool.Layout into
// a checksummed, versioned slot image, and the two-slot protocol that
// updates it without ever destroying the last good copy.
//
// Every SSD member and the origin of a pool carry the same layout in the
// first 2 MiB of the device (inside pool.ReservedSectors): slot A at byte 0
// and slot B at byte SlotSize. Write puts a new generation into the slot
// that does not hold the current one and syncs; Read returns the valid slot
// with the highest generation. A torn or lost write therefore leaves the
// previous generation readable. docs/superblock.md has the byte layout.
//
// Nothing here opens a device: callers pass an io.ReaderAt / io.WriterAt
// (an *os.File on the block device, or memory in tests) and a sync
// function (File.Sync).
//
// # Errors callers must expect
//
//   - ErrNoSuperblock: no slot carries the magic; the device is not ours.
//   - *CorruptError: a slot carries the magic but fails its checks and no
//     other slot is usable, or the two slots contradict each other. The
//     caller must not assemble from this device and names it to the user.
//   - *VersionError: a slot was written by a newer tidecache. Refuse; never
//     fall back to an older slot, which may describe a stale layout.
//   - ErrDeviceMismatch, ErrStaleGeneration: Write refused to overwrite a
//     superblock of another pool or device, or to go back in generation.
//
// Example, reading a device at boot:
//
//	f, err := os.Open("/dev/nvme0n1")
//	...
//	res, err := superblock.ReadDetailed(f)
//	var ce *superblock.CorruptError
//	switch {
//	case errors.Is(err, superblock.ErrNoSuperblock): // not a tidecache device: skip it
//	case errors.As(err, &ce):                        // ours but unreadable: refuse, report /dev/nvme0n1
//	case err != nil:                                 // I/O error or newer format: refuse
//	}
//	for _, w := range res.Warnings { log.Warn("superblock", "device", "/dev/nvme0n1", "err", w) }
package superblock
