// SPDX-License-Identifier: Apache-2.0

package api

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/tidecache/tidecache/pkg/pool"
)

// Values of VolumeStatus.State (and of the engine's volume state). The
// first four are the engine's view of the device; the others are written
// by the reconciler while one of its steps is under way.
const (
	// StateActive: the device exists and serves I/O.
	StateActive = "active"
	// StateSuspended: the device exists with its I/O suspended.
	StateSuspended = "suspended"
	// StateInactive: the volume exists but has no device.
	StateInactive = "inactive"
	// StateError: the device or a tier failed; VolumeStatus.Error says how.
	StateError = "error"
	// StateCreating: the spec was seen and the volume is being created.
	StateCreating = "creating"
	// StateDraining: the write tier is being emptied for a mode change.
	StateDraining = "draining"
	// StateFlushing: a flush (scheduled, or before a delete) is running.
	StateFlushing = "flushing"
	// StateDeleting: the spec is gone and the volume waits to be deleted
	// (in use, or its write tier is being flushed).
	StateDeleting = "deleting"
	// StateDrift: the live tables differ from the layout and the drift
	// policy is "report"; no mode change or flush is made until it is
	// resolved.
	StateDrift = "drift"
	// StateMoving: a planned move (VolumeSpec.MoveTo) stopped the volume
	// here and hands it to the node keeping its replica.
	StateMoving = "moving"
)

// Alert names, the second word of each VolumeStatus.Alerts entry
// ("severity name: message"); stable for alerting rules.
const (
	// AlertSSDError: an SSD under the volume reported an error.
	AlertSSDError = "ssd_error"
	// AlertSSDWear: an SSD under the volume is at or above the policy's
	// wear threshold.
	AlertSSDWear = "ssd_wear"
	// AlertOriginDegraded: the pool's HDD array has lost redundancy.
	AlertOriginDegraded = "origin_degraded"
	// AlertDrift: live tables differ from the layout and are not repaired
	// (drift policy report).
	AlertDrift = "drift"
	// AlertSpecMismatch: the volume's pool or sizes differ from its spec;
	// they are not changed in place.
	AlertSpecMismatch = "spec_mismatch"
	// AlertMirrorDegraded: the write mirror runs on one leg (or, in
	// writethrough, cannot be built whole), so the dirty blocks have, or
	// would have, one copy.
	AlertMirrorDegraded = "mirror_degraded"
)

// VolumeSpec is the desired state of one volume, written by users through
// tidectl. Only the owning node acts on it.
type VolumeSpec struct {
	// Name is the volume name (pool.ValidateName rules); the device is
	// /dev/mapper/tc-<Name>.
	Name string `json:"name"`
	// Node is the node that holds the volume. Empty means "not placed
	// yet": the leader picks a node with room and updates the spec.
	Node string `json:"node,omitempty"`
	// Pool is the pool on Node the volume is carved from. Empty means the
	// node picks (it has one pool, or the leader chose when placing).
	Pool string `json:"pool,omitempty"`
	// SizeBytes is the volume size on the origin.
	SizeBytes uint64 `json:"sizeBytes"`
	// WriteCacheBytes is the write tier (dm-writecache) slice; 0 means
	// none, and then Mode cannot be writeback.
	WriteCacheBytes uint64 `json:"writeCacheBytes,omitempty"`
	// ReadCacheBytes is the read tier (dm-cache) slice; 0 means none.
	ReadCacheBytes uint64 `json:"readCacheBytes,omitempty"`
	// Mode is writeback, writethrough or passthrough. Empty means the
	// policy's Mode, else writeback when there is a write tier, else
	// writethrough.
	Mode string `json:"mode,omitempty"`
	// BlockSize is the dm-writecache block size; 0 means
	// pool.DefaultBlockSize, except on a shared origin not Provisioned,
	// where it means the unit of the filesystem on the device, else the
	// device's logical block size (what its users address).
	BlockSize uint32 `json:"blockSize,omitempty"`
	// ReadBlockSize is the read tier's dm-cache block size in bytes, a
	// power of two from 32 KiB to 1 MiB; 0 means the node's default. It
	// needs ReadCacheBytes and is fixed once the volume exists.
	ReadBlockSize uint32 `json:"readBlockSize,omitempty"`
	// AllowFUAWindow builds the write tier without tidecache's fuaflush
	// kernel target (tidectl volume create --allow-fua-window): FUA writes
	// can then be lost on power failure. It needs WriteCacheBytes and is
	// fixed once the volume exists.
	AllowFUAWindow bool `json:"allowFUAWindow,omitempty"`
	// Protect is how many copies the write cache keeps: "none", "local",
	// mirrored on two SSDs of the node, or "peer", mirrored on a slice of
	// another node's SSD over NVMe/TCP. Empty (and no policy naming one)
	// means peer when another live node serving replicas has room, else
	// local when the pool has two SSDs with room, else none. It needs
	// WriteCacheBytes and is fixed once the volume exists.
	Protect string `json:"protect,omitempty"`
	// ReplicaNode and ReplicaPool say where a peer-protected volume's
	// replica (its write mirror's second leg) lives. The leader fills them
	// in when they are empty, for protect peer, and for a spec naming no
	// protection whose policy names none when another node can keep the
	// replica (peer is then the default); a user may name the node.
	ReplicaNode string `json:"replicaNode,omitempty"`
	ReplicaPool string `json:"replicaPool,omitempty"`
	// ReplicaNode0 and ReplicaPool0 say where leg 0 of the write mirror
	// lives when it is a replica too: the volume's node has no SSD (its
	// pool is its origin alone, PoolInventory.NoSSDs), so both legs of its
	// write cache are on two other nodes' SSDs. The leader fills them with
	// ReplicaNode, on another node than both the volume's and ReplicaNode.
	ReplicaNode0 string `json:"replicaNode0,omitempty"`
	ReplicaPool0 string `json:"replicaPool0,omitempty"`
	// Policy names a Policy record; empty means DefaultPolicy.
	Policy string `json:"policy,omitempty"`
	// SharedOrigin, when set, makes the volume cache a device that other
	// nodes see too, whole, instead of an extent of its node's pool: an
	// export of another node (tidecached run --export). Such a volume
	// fails over: when its node is lost, the leader fences that node and
	// moves the volume to the node keeping its replica. It needs Node,
	// protect peer and a write cache, and SizeBytes 0 (the size is the
	// device's).
	SharedOrigin *SharedOrigin `json:"sharedOrigin,omitempty"`
	// Adopted says the volume caches a device of its node whole, one that
	// held data before (tidectl volume adopt on that node), brought under
	// the cluster by tidectl volume import. The node never creates such a
	// volume from its spec, since that would carve an empty one: it needs
	// Node and SizeBytes 0 (the size is the device's).
	Adopted bool `json:"adopted,omitempty"`
	// FailedOverFrom is set by the leader when it moved the volume to its
	// replica's node: the node it ran on, now fenced. The new node runs
	// the volume on that replica, one copy of its write cache.
	FailedOverFrom string `json:"failedOverFrom,omitempty"`
	// MoveTo asks for a planned move of a volume on a shared origin to
	// that node (tidectl volume move), which must keep its replica: the
	// owner waits until its write mirror is whole and the device is
	// closed, stops the volume without writing its cache back, and hands
	// the spec over (MovedFrom). The replica holds every acknowledged
	// write, so the new node starts on it with the cache warm.
	MoveTo string `json:"moveTo,omitempty"`
	// MovedFrom is set by the old owner when it handed the volume over in
	// a planned move: the new node takes it over from its replica as
	// after a failover, and the old node drops its copy, unfenced.
	MovedFrom string `json:"movedFrom,omitempty"`
	// MoveCalledOff says why the last planned move asked for did not
	// happen (the replica recorded outdated at the handover, its node lost
	// or drained): written with the spec that drops MoveTo, kept until a
	// move is asked for again, so tidectl volume move --wait and the CSI
	// attacher can say why after the status has moved on.
	MoveCalledOff *CalledOffMove `json:"moveCalledOff,omitempty"`
	// Claim is the Kubernetes PersistentVolumeClaim the volume was made
	// for, when the CSI driver made it: the daemon exports it as
	// tidecache_volume_claim_info, so dashboards show a claim's cache.
	Claim *Claim `json:"claim,omitempty"`
}

// Claim names a PersistentVolumeClaim.
type Claim struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// Validate checks both names are DNS names, as Kubernetes makes a claim's
// name (a DNS-1123 subdomain) and its namespace (a DNS-1123 label, which
// is one too).
func (c Claim) Validate() error {
	var errs []error
	if why := dnsNameProblem(c.Namespace); why != "" {
		errs = append(errs, fmt.Errorf("claim namespace %q: %s", c.Namespace, why))
	}
	if why := dnsNameProblem(c.Name); why != "" {
		errs = append(errs, fmt.Errorf("claim name %q: %s", c.Name, why))
	}
	return errors.Join(errs...)
}

// CachesWhole reports whether the volume caches a whole device (a shared
// origin, or one adopted on its node) rather than an extent of its pool:
// its size is the device's, never the spec's to set.
func (v VolumeSpec) CachesWhole() bool { return v.SharedOrigin != nil || v.Adopted }

// CalledOffMove is a planned move that will not happen, and why.
type CalledOffMove struct {
	// To is the node the volume was to move to.
	To string `json:"to"`
	// Why is a sentence for the operator.
	Why string `json:"why"`
}

// SharedOrigin names a device one node exports to the others.
type SharedOrigin struct {
	// Node is the node that exports it, Export the export's name there
	// (tidecached run --export NAME=DEVICE).
	Node   string `json:"node"`
	Export string `json:"export"`
	// Provisioned marks an export the CSI driver gave to a claim from a
	// class whose exports' content may be replaced (csi ParamExports):
	// what is on it is an earlier tenant's, which the node service wipes
	// before it makes the claim's filesystem on the cached device. Its
	// write cache works in the pool's block size (4 KiB), not in the
	// export's logical block or an old filesystem's unit (512 bytes on
	// most LUNs), which would cut every read of cached data into
	// 512-byte requests and keep eight times the metadata in RAM.
	Provisioned bool `json:"provisioned,omitempty"`
}

// Same reports whether o and p name the same export, whatever else they
// say of it.
func (o SharedOrigin) Same(p SharedOrigin) bool {
	return o.Node == p.Node && o.Export == p.Export
}

// Hosts returns the nodes the export o names is served to now, by its
// exporter's record among nodes (none when that record is not there):
// only those can run a volume on it, and so keep its replica (where it
// fails over to) or take it in a move; the exporter never serves itself.
func (o SharedOrigin) Hosts(nodes []Node) []string {
	e, _ := o.Inventory(nodes)
	return e.Hosts
}

// Inventory returns the exporter's record of the export o names, found
// among nodes; false when the exporter or its export is not there.
func (o SharedOrigin) Inventory(nodes []Node) (ExportInventory, bool) {
	for _, n := range nodes {
		if n.Name != o.Node {
			continue
		}
		for _, e := range n.Exports {
			if e.Name == o.Export {
				return e, true
			}
		}
	}
	return ExportInventory{}, false
}

// Validate checks the spec on its own and reports every problem, not just
// the first. The minimum sizes of package pool are not enforced here but
// when the node creates the volume (the error then shows in the status): a
// stored spec must stay valid if they change.
func (v VolumeSpec) Validate() error {
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	if err := pool.ValidateName("volume", v.Name); err != nil {
		add(err)
	}
	if v.Node != "" {
		if err := ValidateNodeName(v.Node); err != nil {
			add(err)
		}
	}
	if v.Pool != "" {
		if err := pool.ValidateName("pool", v.Pool); err != nil {
			add(err)
		}
	}
	switch o := v.SharedOrigin; {
	case v.Adopted:
		if o != nil {
			add(errors.New("adopted and sharedOrigin exclude each other: a shared origin is adopted by its spec"))
		}
		if v.SizeBytes != 0 {
			add(errors.New("adopted is cached whole: sizeBytes must be 0"))
		}
		if v.Node == "" {
			add(errors.New("adopted needs node: the node whose device the volume caches"))
		}
	case o == nil && v.SizeBytes == 0:
		add(errors.New("sizeBytes must be greater than 0"))
	case o == nil:
	default:
		if err := ValidateNodeName(o.Node); err != nil {
			add(fmt.Errorf("sharedOrigin.node: %w", err))
		}
		if err := pool.ValidateName("export", o.Export); err != nil {
			add(fmt.Errorf("sharedOrigin.export: %w", err))
		}
		if v.SizeBytes != 0 {
			add(errors.New("sharedOrigin is cached whole: sizeBytes must be 0"))
		}
		if v.Node == "" {
			add(errors.New("sharedOrigin needs node: name the node the volume starts on"))
		}
		if v.WriteCacheBytes == 0 || v.Protect != string(pool.ProtectPeer) {
			add(fmt.Errorf("sharedOrigin needs writeCacheBytes and protect %s: the volume fails over to the node keeping its replica", pool.ProtectPeer))
		}
	}
	if v.FailedOverFrom != "" {
		if err := ValidateNodeName(v.FailedOverFrom); err != nil {
			add(fmt.Errorf("failedOverFrom: %w", err))
		}
		if v.SharedOrigin == nil {
			add(errors.New("failedOverFrom needs sharedOrigin: only a volume on a shared origin fails over"))
		}
	}
	for _, f := range []struct{ field, node string }{{"moveTo", v.MoveTo}, {"movedFrom", v.MovedFrom}} {
		if f.node == "" {
			continue
		}
		if err := ValidateNodeName(f.node); err != nil {
			add(fmt.Errorf("%s: %w", f.field, err))
		}
		if v.SharedOrigin == nil {
			add(fmt.Errorf("%s needs sharedOrigin: only a volume on a shared origin moves between nodes", f.field))
		}
	}
	switch {
	case v.MoveTo != "" && v.MoveTo == v.Node:
		add(fmt.Errorf("moveTo %s is the volume's node already", v.MoveTo))
	case v.MoveTo != "" && v.MoveTo != v.ReplicaNode:
		add(fmt.Errorf("moveTo %s must keep the replica (replicaNode %q): the new node starts on the replica's copy of the write cache", v.MoveTo, v.ReplicaNode))
	}
	if c := v.MoveCalledOff; c != nil {
		if err := ValidateNodeName(c.To); err != nil {
			add(fmt.Errorf("moveCalledOff.to: %w", err))
		}
		if c.Why == "" {
			add(errors.New("moveCalledOff.why must say why the move was called off"))
		}
	}
	if v.MovedFrom != "" && v.FailedOverFrom != "" {
		add(errors.New("movedFrom and failedOverFrom exclude each other: a volume last changed node by a planned move or by a failover"))
	}
	if v.Claim != nil {
		if err := v.Claim.Validate(); err != nil {
			add(err)
		}
	}
	if v.Mode != "" {
		if m, err := pool.ParseMode(v.Mode); err != nil {
			add(err)
		} else if m == pool.ModeWriteback && v.WriteCacheBytes == 0 {
			add(errors.New("mode writeback needs writeCacheBytes greater than 0"))
		}
	}
	if v.BlockSize != 0 && !pool.ValidBlockSize(v.BlockSize) {
		add(fmt.Errorf("blockSize %d: want a power of two from 512 to 4096", v.BlockSize))
	}
	if v.ReadBlockSize != 0 {
		switch {
		case v.ReadCacheBytes == 0:
			add(fmt.Errorf("readBlockSize %d needs readCacheBytes greater than 0", v.ReadBlockSize))
		case !pool.ValidReadBlockSize(v.ReadBlockSize):
			add(fmt.Errorf("readBlockSize %d: want a power of two from %d to %d", v.ReadBlockSize, pool.MinReadBlockSize, pool.MaxReadBlockSize))
		}
	}
	if v.AllowFUAWindow && v.WriteCacheBytes == 0 {
		add(errors.New("allowFUAWindow needs writeCacheBytes greater than 0"))
	}
	if v.Protect != "" {
		if p, err := pool.ParseProtection(v.Protect); err != nil {
			add(err)
		} else if p != pool.ProtectNone && v.WriteCacheBytes == 0 {
			add(fmt.Errorf("protect %s needs writeCacheBytes greater than 0", p))
		}
	}
	if v.ReplicaNode != "" || v.ReplicaPool != "" {
		switch {
		case v.Protect != "" && v.Protect != string(pool.ProtectPeer):
			add(fmt.Errorf("replicaNode and replicaPool need protect %s (or none named, for the default)", pool.ProtectPeer))
		case v.ReplicaNode == "" && v.ReplicaPool != "":
			add(errors.New("replicaPool needs replicaNode"))
		case v.ReplicaNode != "" && v.ReplicaNode == v.Node:
			add(fmt.Errorf("replicaNode %s is the volume's own node: a peer replica must be on another node", v.ReplicaNode))
		}
		if v.ReplicaNode != "" {
			if err := ValidateNodeName(v.ReplicaNode); err != nil {
				add(fmt.Errorf("replicaNode: %w", err))
			}
		}
		if v.ReplicaPool != "" {
			if err := pool.ValidateName("pool", v.ReplicaPool); err != nil {
				add(fmt.Errorf("replicaPool: %w", err))
			}
		}
	}
	if v.ReplicaNode0 != "" || v.ReplicaPool0 != "" {
		switch {
		case v.ReplicaNode0 == "":
			add(errors.New("replicaPool0 needs replicaNode0"))
		case v.ReplicaNode == "":
			add(errors.New("replicaNode0 needs replicaNode: a write cache on peers has both its legs on other nodes"))
		case v.ReplicaNode0 == v.Node:
			add(fmt.Errorf("replicaNode0 %s is the volume's own node: leg 0 is a replica on another node only when the volume's node has no SSD", v.ReplicaNode0))
		case v.ReplicaNode0 == v.ReplicaNode:
			add(fmt.Errorf("replicaNode0 and replicaNode are both %s: the two legs of a write cache on peers must be on two nodes", v.ReplicaNode0))
		}
		if v.SharedOrigin != nil {
			add(errors.New("replicaNode0 is not available with sharedOrigin yet: a volume on a shared origin runs on a node with an SSD"))
		}
		if v.ReplicaNode0 != "" {
			if err := ValidateNodeName(v.ReplicaNode0); err != nil {
				add(fmt.Errorf("replicaNode0: %w", err))
			}
		}
		if v.ReplicaPool0 != "" {
			if err := pool.ValidateName("pool", v.ReplicaPool0); err != nil {
				add(fmt.Errorf("replicaPool0: %w", err))
			}
		}
	}
	if v.Policy != "" {
		if err := pool.ValidateName("policy", v.Policy); err != nil {
			add(err)
		}
	}
	return errors.Join(errs...)
}

// KeepsReplica reports whether node keeps a replica of the volume: leg 1
// of its write mirror (ReplicaNode) or, for a write cache on peers, leg 0
// (ReplicaNode0).
func (v VolumeSpec) KeepsReplica(node string) bool {
	return node != "" && (v.ReplicaNode == node || v.ReplicaNode0 == node)
}

// VolumeStatus is the observed state of one volume, written only by the
// daemon of the node that owns it (VolumeSpec.Node).
type VolumeStatus struct {
	Name string `json:"name"`
	Node string `json:"node"`
	// ObservedRevision is the ModRevision of the spec this status reflects.
	// A status whose ObservedRevision is below the spec's ModRevision is
	// for an older spec: the change has not been applied yet.
	ObservedRevision int64 `json:"observedRevision"`
	// Mode is the mode the kernel tables are in now.
	Mode string `json:"mode,omitempty"`
	// SizeBytes is the volume's size as its node built it: below the
	// spec's while a growth is on its way (ControllerExpandVolume waits
	// for it).
	SizeBytes uint64 `json:"sizeBytes,omitempty"`
	// State is the reconciler's one-word summary (one of the State
	// constants); Error the last error, empty when healthy.
	State string `json:"state,omitempty"`
	Error string `json:"error,omitempty"`
	// DirtyBlocks and DirtyBytes are what the write tier holds that the
	// origin does not.
	DirtyBlocks uint64 `json:"dirtyBlocks"`
	DirtyBytes  uint64 `json:"dirtyBytes"`
	// ReadHitRatio and WriteHitRatio are in [0, 1].
	ReadHitRatio  float64 `json:"readHitRatio"`
	WriteHitRatio float64 `json:"writeHitRatio"`
	// Protection is the write cache's: none, local or peer. MirrorCopies counts
	// the mirror legs alive and in sync (2 when protected, fewer when
	// degraded); MirrorHealth is dm-raid's health string ("AA", "AD").
	Protection   string `json:"protection,omitempty"`
	MirrorCopies int    `json:"mirrorCopies,omitempty"`
	MirrorHealth string `json:"mirrorHealth,omitempty"`
	// PeerNode is the node whose replica is leg 1 of a peer mirror, as
	// the volume's layout says: the node a replica moved away from keeps
	// its copy until the owner reports another peer here.
	PeerNode string `json:"peerNode,omitempty"`
	// PeerNode0 is the node whose replica is leg 0 of a write cache on
	// peers (the volume's node has no SSD), as the layout says; empty for
	// a leg 0 on the node's own SSD.
	PeerNode0 string `json:"peerNode0,omitempty"`
	// WritebackJobs is the write tier's bound on write-back I/Os in flight
	// (dm-writecache writeback_jobs) and WritebackLimitReason who chose it
	// and why (the volume's tuning, the node's, or the origin array).
	WritebackJobs        uint64 `json:"writebackJobs,omitempty"`
	WritebackLimitReason string `json:"writebackLimitReason,omitempty"`
	// WritebackWatermarks says when write-back runs: the write cache's
	// use at which it starts and stops, and who set them.
	WritebackWatermarks string `json:"writebackWatermarks,omitempty"`
	// Alerts are raised conditions in words ("SSD wear 92% >= 90%").
	Alerts    []string  `json:"alerts,omitempty"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// Validate checks the status on its own and reports every problem.
func (v VolumeStatus) Validate() error {
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	if err := pool.ValidateName("volume", v.Name); err != nil {
		add(err)
	}
	if err := ValidateNodeName(v.Node); err != nil {
		add(err)
	}
	if v.ObservedRevision < 0 {
		add(fmt.Errorf("observedRevision %d: must not be negative", v.ObservedRevision))
	}
	if v.Mode != "" {
		if _, err := pool.ParseMode(v.Mode); err != nil {
			add(err)
		}
	}
	for _, r := range []struct {
		name string
		v    float64
	}{{"readHitRatio", v.ReadHitRatio}, {"writeHitRatio", v.WriteHitRatio}} {
		if math.IsNaN(r.v) || r.v < 0 || r.v > 1 {
			add(fmt.Errorf("%s %v: want a ratio in [0, 1]", r.name, r.v))
		}
	}
	return errors.Join(errs...)
}
