// SPDX-License-Identifier: Apache-2.0

package stack

import (
	"fmt"

	"github.com/tidecache/tidecache/pkg/dm"
	"github.com/tidecache/tidecache/pkg/pool"
)

// Replica returns the device of a replica this node keeps for a peer
// mirror: a linear mapping of its slice, which the node exports over
// NVMe/TCP to the owner. Its UUID carries UUIDPrefix, so udev and the
// superblock scan leave its contents (the owner's leg) alone.
func Replica(r pool.Replica, devs Devices) (Device, error) {
	p, err := devs.path(r.Extent)
	if err != nil {
		return Device{}, fmt.Errorf("replica of volume %s: %w", r.Volume, err)
	}
	return Device{
		Name:  ReplicaNamePrefix + r.Volume,
		UUID:  UUIDPrefix + string(ReplicaRole) + "-" + r.UUID,
		Role:  ReplicaRole,
		Table: dm.Table{dm.LinearParams{Device: p, Offset: r.Extent.Offset}.Target(0, r.Extent.Length)},
	}, nil
}
