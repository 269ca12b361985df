package store

import "github.com/tidecache/tidecache/pkg/api"

// The records moved to package api. These aliases keep the callers that
// still name them through store compiling (pkg/cli, pkg/etcdserver's test,
// tests/bench/controlplane); new code uses api directly.

// VolumeSpec is api.VolumeSpec.
//
// Deprecated: use api.VolumeSpec.
type VolumeSpec = api.VolumeSpec

// VolumeStatus is api.VolumeStatus.
//
// Deprecated: use api.VolumeStatus.
type VolumeStatus = api.VolumeStatus

// Node is api.Node.
//
// Deprecated: use api.Node.
type Node = api.Node

// NodeSpec is api.NodeSpec.
//
// Deprecated: use api.NodeSpec.
type NodeSpec = api.NodeSpec

// Policy is api.Policy.
//
// Deprecated: use api.Policy.
type Policy = api.Policy

// Duration is api.Duration.
//
// Deprecated: use api.Duration.
type Duration = api.Duration
