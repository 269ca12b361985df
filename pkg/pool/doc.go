// SPDX-License-Identifier: Apache-2.0

// Package pool owns the layout of a tidecache pool: which extents of the
// origin (the HDD RAID10 array) and of the SSD members belong to which
// volume, the rules a layout must obey, and the allocator that carves new
// volumes out of free space.
//
// Everything here is pure data and arithmetic: no device is opened, no
// ioctl is issued. The superblock package stores a Layout on disk, the
// stack package turns a Volume into device-mapper tables, and the engine
// glues them together.
//
// # Units
//
// All offsets and lengths are in 512-byte sectors (SectorSize). Every
// extent starts and ends on a 1 MiB boundary (Alignment), and no extent
// touches the first 4 MiB of a device (ReservedSectors), where the
// superblock slots live. Request sizes (VolumeRequest) are in bytes and
// are rounded up to Alignment.
//
// # Changing a layout
//
// A Layout carries a Generation that every successful change bumps
// (AddVolume, RemoveVolume, SetMode). A failed change leaves the Layout
// exactly as it was, so callers can try a change on the live value and
// only persist it when it succeeded:
//
//	next := cur.Clone()
//	v, err := next.AddVolume(pool.VolumeRequest{Name: "db", Size: 100 << 30, WriteCache: 10 << 30}, uuid, time.Now())
//	switch {
//	case errors.Is(err, pool.ErrNoSpace):     // tell the user which device is full
//	case errors.Is(err, pool.ErrVolumeExists): // idempotent create: compare and move on
//	case err != nil:                           // invalid request
//	}
//	// write next to every superblock, then build v's stack
//
// # Errors callers test for
//
// Every error of AddVolume, RemoveVolume, SetMode, ValidateName, ParseMode
// and the size checks matches one of ErrNoSpace, ErrVolumeExists,
// ErrVolumeNotFound, ErrNoWriteCache, ErrTooSmall, ErrInvalidName,
// ErrInvalidMode or ErrInvalidRequest with errors.Is, and its message names
// the device, volume or name at fault and the sizes involved, ready to show
// to a user: "SSD /dev/nvme0n1 is too small: it has 32 MiB, a pool member
// needs at least 64 MiB". Validate joins one error per problem found.
package pool
