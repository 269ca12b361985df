// SPDX-License-Identifier: Apache-2.0

// Package csi is tidecache's Kubernetes CSI driver: the Identity,
// Controller and Node services of the Container Storage Interface.
//
// It owns the translation between CSI requests and tidecache records, and
// nothing else:
//
//   - The controller service turns CreateVolume and DeleteVolume into
//     volume specs in etcd, through package store (the only package that
//     talks to etcd). A tidecache volume lives on one node, so its
//     accessible topology is that node (TopologyKey). With
//     WaitForFirstConsumer the topology requirement names the node; with
//     immediate binding the spec names none, the daemons' leader places
//     it, and CreateVolume waits for that. GetCapacity reads the node
//     inventories the daemons publish.
//   - The node service stages a volume by waiting for its device
//     (/dev/mapper/tc-<volume>, built by tidecached from the spec), making
//     a filesystem only when blkid finds no signature on it, and mounting
//     it; publishing bind-mounts the staged filesystem (or the device, for
//     block access) into the pod. It needs no etcd. Every external program
//     (blkid, mkfs, mount, umount) runs through package command.
//
// The volume ID is the tidecache volume name (VolumeName maps CSI names).
// Every call is idempotent. The gRPC status codes are chosen in one place
// (codes.go) from the sentinel errors of this package and of package
// store.
//
// What the driver does not do, and why, is in docs/csi.md: no expansion
// (growing a volume exists only on the node itself), no snapshots or
// clones, no multi-node access (a volume is a device on one node).
package csi
