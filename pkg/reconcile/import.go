// SPDX-License-Identifier: Apache-2.0

package reconcile

import (
	"cmp"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/engine"
	"github.com/tidecache/tidecache/pkg/pool"
)

// SpecOf returns the spec that describes a volume of node as it is, in
// every field a reconcile compares with the volume: written for a volume
// made without the cluster (tidectl volume import), it raises no mismatch
// and changes nothing. An adopted volume's spec says so (api.VolumeSpec
// Adopted), so the node never carves one from it.
func SpecOf(v engine.VolumeInfo, node string) api.VolumeSpec {
	spec := api.VolumeSpec{
		Name: v.Name, Node: node, Pool: v.Pool, SizeBytes: v.SizeBytes,
		WriteCacheBytes: v.WriteCacheBytes, ReadCacheBytes: v.ReadCacheBytes,
		Mode: string(v.Mode), BlockSize: v.BlockSize, ReadBlockSize: v.ReadBlockSize,
		AllowFUAWindow: v.FUAWindow,
	}
	if v.WriteCacheBytes > 0 {
		spec.Protect = string(cmp.Or(v.Protection, pool.ProtectNone))
	}
	if v.AdoptedDevice != "" {
		spec.SizeBytes, spec.Adopted = 0, true
	}
	return spec
}
