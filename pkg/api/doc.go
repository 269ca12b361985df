// SPDX-License-Identifier: Apache-2.0

// Package api holds the one definition of every record that crosses
// packages: the volume spec and status, the node and its inventories, the
// node spec and the policy, with the values their fields take (volume
// states, alert names, policy choices) and the name rules. Each record has
// one Validate, which every writer and reader calls, so a record accepted
// in one place is accepted everywhere.
//
// The store persists these records in etcd, the policy and placement
// packages decide from them, the reconciler and the daemon fill them in,
// and tidectl (and later the CSI driver) shows and edits them. Because all
// of those import this package, it is pure: it imports only the standard
// library and package pool, does no I/O, reads no clock and keeps no
// state. A package documented as pure (policy, placement) can therefore
// use the records without pulling in the etcd client; deps_test.go keeps
// it that way.
//
// The JSON tags are the stored format (docs/etcd-schema.md): renaming a
// field or changing its meaning needs a new store.APIVersion.
package api
