// SPDX-License-Identifier: Apache-2.0

// Package stack turns the desired state of one cached volume into the
// device-mapper devices that implement it. It owns the naming of every
// device tidecache creates and the dm UUID that marks tidecache ownership,
// so no other package invents a device name and the daemon can tell its
// own devices from everything else on the machine.
//
// Building a stack is pure: a pool.Volume, the resolved paths of its
// devices and the tuning go in, an ordered list of dm devices with their
// tables comes out. Nothing here opens a device or issues an ioctl; the
// engine applies the result. That keeps the table grammar testable on a
// host without device-mapper, with golden files.
//
// A volume in writeback mode with a read tier is built bottom-up as:
//
//	tc-<vol>-origin  linear      the volume's extent of the HDD array
//	tc-<vol>-rmeta   linear      read-tier metadata slice on an SSD
//	tc-<vol>-rdata   linear      read-tier data slice on an SSD
//	tc-<vol>-rtier   cache       smq, writethrough: rmeta+rdata over origin
//	tc-<vol>-wdata   linear      write-tier slice on an SSD
//	tc-<vol>-wtier   writecache  wdata over rtier (or over origin)
//	tc-<vol>         fuaflush    the write tier, FUA writes made durable
//
// A volume whose write cache is mirrored (pool.Volume.WriteMirror,
// protection local) has, instead of the plain wdata slice:
//
//	tc-<vol>-wmeta0  linear      leg 0's dm-raid metadata slice
//	tc-<vol>-wleg0   linear      leg 0's data slice (the write cache slice)
//	tc-<vol>-wmeta1  linear      leg 1's metadata slice, on another SSD
//	tc-<vol>-wleg1   linear      leg 1's data slice
//	tc-<vol>-wdata   raid        raid1 of the two legs, under the write tier
//
// fuaflush is tidecache's own target (kernel/dm-fuaflush): dm-writecache
// in SSD mode commits its metadata on a flush but not on a FUA write, so
// without it an O_DSYNC write or a journal commit block landing in a new
// cache block is acknowledged before it would survive a power cut. A
// volume whose operator accepted that window (pool.Volume.FUAWindow) has a
// linear top instead.
//
// The top device keeps its name in every mode; a mode change reloads only
// its table (fuaflush over the write tier in writeback, linear over the
// read tier in writethrough, linear over the origin in passthrough), so the
// block device users mount never goes away.
package stack
