// SPDX-License-Identifier: Apache-2.0

package api

import (
	"errors"
	"fmt"
	"time"

	"github.com/tidecache/tidecache/pkg/pool"
)

// Fence cuts a node off the storage it could still write to after the
// cluster gave up on it: the shared origins other nodes export to it and
// the replicas they keep of its write caches. The leader writes one before
// it fails a volume over to another node, since a node whose lease expired
// may be partitioned rather than dead, and a half-dead owner writing back
// stale blocks to the origin, or acknowledging writes on a mirror the
// cluster no longer reads, would corrupt or lose data behind the new
// owner's back.
//
// Every node that exports storage to the fenced node removes its access
// (namespace disabled first, so the I/O it had in flight is finished or
// failed, then the export removed) and acknowledges the fence's revision
// in its node record (Node.FencesApplied). Only when every exporting node
// has done so does the leader move the volumes. The record stays until
// the fenced node has come back and released what it no longer owns
// (Node.Released), so a node that boots while fenced finds its exports
// refused and never resumes a volume that now runs elsewhere.
type Fence struct {
	// Node is the fenced node.
	Node string `json:"node"`
	// Reason says why, for people ("lease expired 40s ago; failing over
	// db to node b").
	Reason string `json:"reason,omitempty"`
	// Volumes are the volumes that fail over because of the fence.
	Volumes   []string  `json:"volumes,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
}

// Validate checks the fence record on its own.
func (f Fence) Validate() error {
	var errs []error
	if err := ValidateNodeName(f.Node); err != nil {
		errs = append(errs, err)
	}
	for _, v := range f.Volumes {
		if err := pool.ValidateName("volume", v); err != nil {
			errs = append(errs, fmt.Errorf("volumes: %w", err))
		}
	}
	if f.CreatedAt.IsZero() {
		errs = append(errs, errors.New("createdAt must be set"))
	}
	return errors.Join(errs...)
}

// FenceAck is a node's acknowledgement of a fence: it no longer serves
// anything to the fenced node. Revision is the fence record's
// ModRevision, so an acknowledgement of an older fence of the same node
// does not count for a newer one.
type FenceAck struct {
	Node     string `json:"node"`
	Revision int64  `json:"revision"`
}

// ReplicaOutdated says that a volume's replica lacks writes its owner
// acknowledged: the owner lost the replica's leg and goes on writing to
// its own. The owner writes it, in a transaction that holds only while
// the spec still names it, before it lets its mirror drop that leg, and
// deletes it once the leg is back in sync. The leader fails a volume over
// only in a transaction that holds only while no such record exists, so
// of the two, exactly one happens: the owner goes on alone, and the
// replica is known stale, or the volume moves to the replica, which holds
// every write the owner acknowledged (the owner's writes stall until then
// and never complete).
type ReplicaOutdated struct {
	Volume string `json:"volume"`
	// Owner is the node that writes without the replica, ReplicaNode the
	// node whose copy is stale.
	Owner       string    `json:"owner"`
	ReplicaNode string    `json:"replicaNode"`
	Since       time.Time `json:"since"`
}

// Validate checks the record on its own.
func (r ReplicaOutdated) Validate() error {
	var errs []error
	if err := pool.ValidateName("volume", r.Volume); err != nil {
		errs = append(errs, err)
	}
	if err := ValidateNodeName(r.Owner); err != nil {
		errs = append(errs, fmt.Errorf("owner: %w", err))
	}
	if err := ValidateNodeName(r.ReplicaNode); err != nil {
		errs = append(errs, fmt.Errorf("replicaNode: %w", err))
	}
	if r.Since.IsZero() {
		errs = append(errs, errors.New("since must be set"))
	}
	return errors.Join(errs...)
}
