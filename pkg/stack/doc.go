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
//	tc-<vol>         writecache  wdata over rtier (or over origin)
//
// The top device keeps its name in every mode; a mode change reloads only
// its table (writecache in writeback, linear over the read tier in
// writethrough, linear over the origin in passthrough), so the block device
// users mount never goes away.
package stack
