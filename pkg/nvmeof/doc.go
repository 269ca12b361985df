// SPDX-License-Identifier: Apache-2.0

// Package nvmeof carries one block device from a node to another over
// NVMe/TCP with the kernel's own target and initiator, for the peer leg
// of a mirrored write cache: the peer exports a slice of its SSD, the
// owner attaches it and uses it as the second leg of its dm-raid mirror.
//
// The target side writes the nvmet configfs tree
// (/sys/kernel/config/nvmet): one subsystem per export, named by the
// caller, whose only allowed host is the owner's host NQN
// (attr_allow_any_host is 0, never 1), one namespace holding the device,
// and a TCP port the subsystem is linked to. The initiator side writes a
// connect string to /dev/nvme-fabrics, as nvme-cli does, with the
// controller-loss, reconnect and fast-I/O-fail timeouts set so that a dead
// peer fails the leg within seconds instead of after the kernel's default
// 600 s, and finds the namespace's block device in sysfs.
//
// Nothing here reads or writes user data: the kernel moves it. Every call
// is idempotent: exporting what is exported, or attaching what is
// attached, changes nothing and returns the same answer.
package nvmeof
