// SPDX-License-Identifier: Apache-2.0

// Package blockdev inspects block devices before tidecache touches them.
//
// tidecache builds md arrays and device-mapper tables on disks a user hands
// it. Writing to a disk that still holds a filesystem, a RAID member, an LVM
// physical volume or a partition table destroys someone's data, and writing
// to a disk that the kernel is using (mounted, swap, held by md or dm) can do
// worse. This package answers the questions asked before any write:
//
//   - Resolve, Lookup: what device does this path name (following
//     /dev/disk/by-id symlinks), and is it a block device at all?
//   - Size, DevNumber, Name: how big is it, what are its major:minor numbers
//     and its kernel name (the one sysfs uses)?
//   - Prober.Probe: which on-disk signatures does it carry (through
//     "blkid -p", which reads the device itself, not a cache)?
//   - Checker.CheckUnused: is the device, or one of its partitions, mounted,
//     used as swap, held by md/dm, or opened exclusively by anyone?
//   - Partitions, ListBlockDevices: what sysfs knows about the devices.
//
// blkid does not know tidecache's own superblock; pkg/superblock recognises
// it separately, and callers that must tell "ours" from "foreign" ask both.
//
// Only Prober runs external commands, through command.Runner. Everything
// else reads /dev, /proc and /sys directly; the sysfs and procfs roots are
// parameters so that tests can use a fake tree.
package blockdev
