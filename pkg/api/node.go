// SPDX-License-Identifier: Apache-2.0

package api

import (
	"errors"
	"fmt"
	"time"

	"github.com/tidecache/tidecache/pkg/pool"
)

// Node is a node's inventory, written by its daemon under its lease: the
// record disappears when the node stops renewing it.
type Node struct {
	Name string `json:"name"`
	// Instance identifies the machine boot the daemon runs in (the
	// kernel's boot id): two daemons that were given one name, such as
	// clones of one VM or one image, never share it, while a daemon
	// restarted within one boot keeps it. The store refuses to register a
	// name whose live record carries another instance (store.Register).
	Instance string `json:"instance,omitempty"`
	// Address is where peers and tidectl reach the daemon (host:port).
	Address string `json:"address,omitempty"`
	// Addresses are the node's network addresses (loopback and link-local
	// left out): the NVMe/TCP targets of other nodes admit connections
	// from these only (their source-address allow-list).
	Addresses []string `json:"addresses,omitempty"`
	// NVMeUnauthenticated says the node serves NVMe/TCP on a network
	// address without in-band authentication (tidecached run
	// --insecure-nvme): only its source-address allow-list keeps others
	// from connecting as an allowed host.
	NVMeUnauthenticated bool `json:"nvmeUnauthenticated,omitempty"`
	// NVMeAuthKey is the node's public sealing key (base64), published
	// when its kernel has NVMe in-band authentication (host and target):
	// exporters seal the DH-HMAC-CHAP secret they make for this node to
	// it (api.NVMeSecret) and require the secret of its connections.
	// Empty: the node cannot authenticate, and an exporter serves it only
	// if that exporter was started with --insecure-nvme.
	NVMeAuthKey string `json:"nvmeAuthKey,omitempty"`
	// ReplicaAddress is where the node's NVMe/TCP target serves replicas
	// to peers (IPv4:port); empty when the node keeps none. The leader
	// places replicas only on nodes that have one.
	ReplicaAddress string `json:"replicaAddress,omitempty"`
	// FaultDomain groups nodes that can fail together (a rack, a power
	// feed); the leader puts a replica in another domain when it can.
	FaultDomain string `json:"faultDomain,omitempty"`
	// Replicas are the slices this node keeps for peers' mirrors.
	Replicas []ReplicaInventory `json:"replicas,omitempty"`
	// Exports are the shared devices this node's NVMe/TCP target serves
	// to the other nodes (tidecached run --export): an origin, such as a
	// SAN LUN, that a volume can fail over on.
	Exports []ExportInventory `json:"exports,omitempty"`
	// FencesApplied are the fences this node has carried out: it serves
	// nothing any more, no export and no replica, to those nodes.
	FencesApplied []FenceAck `json:"fencesApplied,omitempty"`
	// FenceReleased is the revision of this node's own fence that it has
	// complied with: it dropped every volume the cluster failed over
	// elsewhere, so the leader may lift the fence.
	FenceReleased int64 `json:"fenceReleased,omitempty"`
	// Version is the daemon's version.
	Version   string          `json:"version,omitempty"`
	Pools     []PoolInventory `json:"pools,omitempty"`
	SSDs      []SSDInventory  `json:"ssds,omitempty"`
	StartedAt time.Time       `json:"startedAt"`
	UpdatedAt time.Time       `json:"updatedAt"`
}

// ReplicaInventory is one replica a node keeps: how its owner attaches it.
type ReplicaInventory struct {
	Volume string `json:"volume"`
	Owner  string `json:"owner"`
	Pool   string `json:"pool"`
	// NQN and UUID are the export's subsystem NQN and namespace UUID.
	NQN       string `json:"nqn"`
	UUID      string `json:"uuid"`
	SizeBytes uint64 `json:"sizeBytes"`
	// Exported says the export is in place; Error says why not.
	Exported bool   `json:"exported"`
	Error    string `json:"error,omitempty"`
}

// ExportInventory is one shared device a node exports to the others.
type ExportInventory struct {
	Name string `json:"name"`
	// UUID is the namespace UUID every node sees the device by (its
	// wwid is "uuid.<UUID>"), the same on every node it is exported to.
	UUID      string `json:"uuid"`
	SizeBytes uint64 `json:"sizeBytes,omitempty"`
	// Hosts are the nodes it is exported to now.
	Hosts []string `json:"hosts,omitempty"`
	Error string   `json:"error,omitempty"`
}

// PoolInventory describes one pool on a node.
type PoolInventory struct {
	Name string `json:"name"`
	UUID string `json:"uuid,omitempty"`
	// Origin is the origin device path.
	Origin string `json:"origin,omitempty"`
	// OriginFreeBytes and SSDFreeBytes are the free space the allocator
	// can still carve (SSDFreeBytes: summed over members).
	OriginFreeBytes uint64 `json:"originFreeBytes"`
	SSDFreeBytes    uint64 `json:"ssdFreeBytes"`
	// SSDs and SSDBytes count the pool's SSD members and their size, as
	// its layout has them (present or not); 0 in an older daemon's record.
	SSDs     int    `json:"ssds,omitempty"`
	SSDBytes uint64 `json:"ssdBytes,omitempty"`
	// NoSSDs says the pool is its origin alone (the node has no SSD): a
	// volume's write cache in it has both legs on other nodes' replicas
	// (VolumeSpec.ReplicaNode0). A pool whose SSDs are merely absent is
	// not one; a record of an older daemon never says so.
	NoSSDs bool `json:"noSSDs,omitempty"`
}

// SSDInventory describes one SSD on a node and its health.
type SSDInventory struct {
	Path   string `json:"path"`
	Model  string `json:"model,omitempty"`
	Serial string `json:"serial,omitempty"`
	// Pool is the pool the SSD is a member of, empty if none.
	Pool      string `json:"pool,omitempty"`
	SizeBytes uint64 `json:"sizeBytes"`
	// WearPercent is the NVMe "percentage used" (may exceed 100); nil when
	// the device does not report it.
	WearPercent     *int   `json:"wearPercent,omitempty"`
	MediaErrors     uint64 `json:"mediaErrors,omitempty"`
	CriticalWarning bool   `json:"criticalWarning,omitempty"`
}

// Validate checks the node record on its own and reports every problem.
func (n Node) Validate() error {
	var errs []error
	if err := ValidateNodeName(n.Name); err != nil {
		errs = append(errs, err)
	}
	for _, p := range n.Pools {
		if err := pool.ValidateName("pool", p.Name); err != nil {
			errs = append(errs, err)
		}
	}
	for _, s := range n.SSDs {
		if s.Path == "" {
			errs = append(errs, errors.New("ssd with empty path"))
		}
		if s.WearPercent != nil && *s.WearPercent < 0 {
			errs = append(errs, fmt.Errorf("ssd %s: wearPercent %d: must not be negative", s.Path, *s.WearPercent))
		}
	}
	return errors.Join(errs...)
}

// NodeSpec is the desired state of a node, written by users.
type NodeSpec struct {
	Name string `json:"name"`
	// Drain asks the node to bring every volume it owns to passthrough
	// with clean caches, for maintenance. Clearing it restores the modes
	// the specs and policies ask for.
	Drain bool `json:"drain,omitempty"`
	// RotateNVMeSecrets asks the node to replace the NVMe authentication
	// secrets it makes for the hosts it exports to (tidectl node
	// rotate-nvme-secrets): a request serial, the time it was made in
	// Unix nanoseconds; the node rotates once per new value.
	RotateNVMeSecrets int64 `json:"rotateNVMeSecrets,omitempty"`
}

// Validate checks the node spec on its own.
func (n NodeSpec) Validate() error { return ValidateNodeName(n.Name) }

// MaxNodeNameLen is the longest node name.
const MaxNodeNameLen = 253

// ValidateNodeName checks a node name: 1 to MaxNodeNameLen characters
// from a-z, 0-9, '-' and '.', starting and ending with a letter or digit.
// These are lowercase DNS names, which host names and Kubernetes node names
// already are; the daemon lowercases the host name. No '/' can appear, so a
// name is always one etcd key segment.
func ValidateNodeName(name string) error {
	if why := dnsNameProblem(name); why != "" {
		return fmt.Errorf("invalid node name %q: %s", name, why)
	}
	return nil
}

// dnsNameProblem says why name is not a lowercase DNS name of 1 to
// MaxNodeNameLen characters from a-z, 0-9, '-' and '.', starting and
// ending with a letter or digit; "" when it is one. Node names and the
// names of Kubernetes objects (a claim and its namespace) are such names.
func dnsNameProblem(name string) string {
	if name == "" {
		return "empty"
	}
	if len(name) > MaxNodeNameLen {
		return fmt.Sprintf("longer than %d characters", MaxNodeNameLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return "only a-z, 0-9, '-' and '.' allowed"
		}
	}
	if first, last := name[0], name[len(name)-1]; first == '-' || first == '.' || last == '-' || last == '.' {
		return "must start and end with a letter or digit"
	}
	return ""
}
