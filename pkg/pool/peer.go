// SPDX-License-Identifier: Apache-2.0

package pool

import (
	"fmt"
	"slices"
)

// A peer-protected volume (ProtectPeer) mirrors its write cache onto a
// slice of another node's SSD. Two records describe the pair, one in each
// node's pool:
//
//   - the owner's volume has a Mirror whose Remote names the peer's
//     export: where to attach it, and the identity to check;
//   - the peer's pool holds a Replica: the slice it keeps for the owner,
//     and the only host it may serve it to.
//
// Each node can rebuild its half from its own superblocks, without the
// network or etcd: the owner starts its mirror on the local leg, and the
// peer builds the replica's device and exports it again.

// RemoteLeg is leg 1 of a peer mirror: a replica slice on another node,
// attached over NVMe/TCP. The attached device holds the leg's dm-raid
// metadata in its first MirrorMetaSectors and the leg's data after them.
type RemoteLeg struct {
	// Node is the peer node's name.
	Node string
	// NQN is the export's subsystem NQN, HostNQN this node's, the only
	// host the export admits.
	NQN, HostNQN string
	// Addr and Port are where the peer's NVMe/TCP target listens.
	Addr string
	Port int
	// UUID is the replica's identity: its namespace UUID on the wire, and
	// the Replica.UUID in the peer's layout.
	UUID string
}

// RemoteLegSectors is the size a peer's replica slice must have for a
// write cache of writeCache sectors: the leg's metadata, then its data.
func RemoteLegSectors(writeCache uint64) uint64 { return MirrorMetaSectors + writeCache }

// Replica is a slice of this pool's SSD held for another node's mirror: its
// peer leg. The pool's node builds a linear device on it and exports it
// over NVMe/TCP to the owner alone.
type Replica struct {
	// Volume is the owning volume's name (volume names are unique in a
	// cluster), Owner the node that runs it.
	Volume, Owner string
	// HostNQN is the owner's host NQN: the only host the export admits.
	HostNQN string
	// UUID is the replica's identity (RemoteLeg.UUID on the owner).
	UUID string
	// Extent holds the leg's metadata, then its data; see RemoteLegSectors.
	Extent Extent
}

// Replica returns the replica kept for the named volume.
func (l *Layout) Replica(volume string) (*Replica, bool) {
	for i := range l.Replicas {
		if l.Replicas[i].Volume == volume {
			return &l.Replicas[i], true
		}
	}
	return nil, false
}

// ReplicaRequest asks a pool to keep a replica slice for another node.
type ReplicaRequest struct {
	Volume, Owner, HostNQN string
	// WriteCache is the owner's write cache size in bytes; the slice is
	// RemoteLegSectors of it once rounded up like the owner's slice is.
	WriteCache uint64
}

// AddReplica allocates a replica slice on the member with the most free
// space and adds it to the layout, bumping the generation. A replica of
// that volume for that owner and size already there is returned as it is,
// so the call can be repeated.
func (l *Layout) AddReplica(req ReplicaRequest, uuid string) (Replica, error) {
	sectors := RemoteLegSectors(BytesToSectors(req.WriteCache))
	if r, ok := l.Replica(req.Volume); ok {
		if r.Owner != req.Owner || r.HostNQN != req.HostNQN || r.Extent.Length != sectors {
			return Replica{}, errorf(ErrVolumeExists, "pool %q already keeps a replica of volume %q for node %s (%s): delete it before keeping another",
				l.Name, req.Volume, r.Owner, formatSectors(r.Extent.Length))
		}
		return *r, nil
	}
	if err := ValidateName("volume", req.Volume); err != nil {
		return Replica{}, err
	}
	if req.Owner == "" || req.HostNQN == "" {
		return Replica{}, errorf(ErrInvalidRequest, "replica of volume %q: owner and host NQN are required", req.Volume)
	}
	if req.WriteCache < MinWriteCacheBytes {
		return Replica{}, errorf(ErrInvalidRequest, "replica of volume %q: write cache %s is below the minimum of %s",
			req.Volume, FormatBytes(req.WriteCache), FormatBytes(MinWriteCacheBytes))
	}
	if err := checkUUID(uuid); err != nil {
		return Replica{}, errorf(ErrInvalidRequest, "replica of volume %q: %v", req.Volume, err)
	}
	a := newAllocator(l)
	e, err := a.onMember(sectors, "", fmt.Sprintf("replica of volume %q for node %s", req.Volume, req.Owner))
	if err != nil {
		return Replica{}, err
	}
	r := Replica{Volume: req.Volume, Owner: req.Owner, HostNQN: req.HostNQN, UUID: uuid, Extent: e}
	next := l.Clone()
	next.Replicas = append(next.Replicas, r)
	next.Generation++
	if err := next.Validate(); err != nil {
		return Replica{}, fmt.Errorf("pool %q would be invalid after keeping a replica of %q: %w", l.Name, req.Volume, err)
	}
	*l = *next
	return r, nil
}

// RemoveReplica drops the replica kept for the named volume and frees its
// slice, bumping the generation. The caller unexports and removes its
// device first.
func (l *Layout) RemoveReplica(volume string) error {
	i := slices.IndexFunc(l.Replicas, func(r Replica) bool { return r.Volume == volume })
	if i < 0 {
		return errorf(ErrVolumeNotFound, "pool %q keeps no replica of volume %q", l.Name, volume)
	}
	l.Replicas = slices.Delete(slices.Clone(l.Replicas), i, i+1)
	if len(l.Replicas) == 0 {
		l.Replicas = nil // as a layout without replicas decodes
	}
	l.Generation++
	return nil
}

// validateRemote checks a peer mirror: leg 0's metadata next to the write
// cache, no local slices for leg 1, and a complete remote record.
func validateRemote(v *Volume, add func(format string, a ...any)) {
	m := v.WriteMirror
	who := fmt.Sprintf("volume %q", v.Name)
	switch {
	case m.Leg != (Extent{}) || m.LegMeta != (Extent{}):
		add("%s: a peer mirror has no local leg 1 slices", who)
	case m.Meta.Member != v.WriteCache.Member:
		add("%s: write mirror metadata must be on the write cache's SSD", who)
	case m.Meta.Length < MirrorMetaSectors:
		add("%s: write mirror metadata slice must be at least %s", who, formatSectors(MirrorMetaSectors))
	case remoteLegProblem(m.Remote) != "":
		add("%s: peer leg %s", who, remoteLegProblem(m.Remote))
	case !validOutOfSync(m.OutOfSync):
		add("%s: write mirror legs out of sync %v: want at most one of 0 and 1", who, m.OutOfSync)
	}
}

// validateOnPeers checks the mirror of a write cache on peers alone (a
// node without SSDs): no slice on the pool's devices, two complete remote
// legs on two different nodes.
func validateOnPeers(v *Volume, add func(format string, a ...any)) {
	m := v.WriteMirror
	who := fmt.Sprintf("volume %q", v.Name)
	switch {
	case !v.CacheOnPeers():
		add("%s: a mirror with a peer leg 0 needs its write cache on peers (member %s), not on %s", who, OnPeers, v.WriteCache)
	case v.WriteCache.Offset != 0 || v.WriteCache.Length == 0 || v.WriteCache.Length%Alignment != 0:
		add("%s: write cache on peers %s: want offset 0 and a length that is a non-zero multiple of %d sectors", who, v.WriteCache, Alignment)
	case m.Meta != (Extent{}) || m.Leg != (Extent{}) || m.LegMeta != (Extent{}):
		add("%s: a mirror on peers has no local slices", who)
	case m.Remote == nil:
		add("%s: write mirror has a peer leg 0 and no leg 1: want two peer legs", who)
	case remoteLegProblem(m.Remote0) != "":
		add("%s: peer leg 0 %s", who, remoteLegProblem(m.Remote0))
	case remoteLegProblem(m.Remote) != "":
		add("%s: peer leg 1 %s", who, remoteLegProblem(m.Remote))
	case m.Remote0.Node == m.Remote.Node:
		add("%s: both legs of the write mirror are on node %s: want two nodes", who, m.Remote.Node)
	case m.Remote0.UUID == m.Remote.UUID || m.Remote0.NQN == m.Remote.NQN:
		add("%s: both peer legs name replica %s (%s): want two replicas", who, m.Remote.UUID, m.Remote.NQN)
	case !validOutOfSync(m.OutOfSync):
		add("%s: write mirror legs out of sync %v: want at most one of 0 and 1", who, m.OutOfSync)
	}
}

// remoteLegProblem says what a peer leg's record lacks, or "".
func remoteLegProblem(r *RemoteLeg) string {
	switch {
	case r.Node == "" || r.NQN == "" || r.HostNQN == "" || r.Addr == "" || r.Port <= 0 || r.Port > 65535:
		return fmt.Sprintf("needs a node, NQNs and a TCP address, got %+v", *r)
	case checkUUID(r.UUID) != nil:
		return checkUUID(r.UUID).Error()
	}
	return ""
}

// validOutOfSync reports whether legs is a valid record of out-of-sync
// legs: none, or one of 0 and 1 (both out of sync would mean no copy
// holds every write).
func validOutOfSync(legs []int) bool {
	return len(legs) <= 1 && !slices.ContainsFunc(legs, func(i int) bool { return i != 0 && i != 1 })
}

// validateReplicas checks the replica records and returns their extents
// for the overlap check.
func (l *Layout) validateReplicas(members map[string]uint64, add func(format string, a ...any)) []owned {
	var used []owned
	seen := map[string]bool{}
	for _, r := range l.Replicas {
		who := fmt.Sprintf("replica of volume %q", r.Volume)
		if seen[r.Volume] {
			add("%s: duplicate", who)
		}
		seen[r.Volume] = true
		if r.Owner == "" || r.HostNQN == "" {
			add("%s: owner and host NQN are required", who)
		}
		if err := checkUUID(r.UUID); err != nil {
			add("%s: %v", who, err)
		}
		size, ok := members[r.Extent.Member]
		if !ok {
			add("%s: %s: unknown member", who, r.Extent)
			continue
		}
		if err := checkExtent(r.Extent, size); err != nil {
			add("%s: %s: %w", who, r.Extent, err)
			continue
		}
		used = append(used, owned{volume: "replica " + r.Volume, RoleExtent: RoleExtent{"replica", r.Extent}})
	}
	return used
}

// MovePeerLeg points leg index of a peer-protected volume at another
// replica, leg (re-protection after the leg's node was lost): leg 1, or
// leg 0 of a write cache on peers (a node without SSDs). The moved leg is
// recorded out of sync: the new replica holds nothing until dm-raid has
// copied the other leg onto it. Moving to the leg it has already is no
// change. The other leg must hold every write: a mirror whose only
// complete copy is the moved leg cannot give it up.
func (l *Layout) MovePeerLeg(volume string, index int, leg RemoteLeg) (changed bool, err error) {
	v, ok := l.Volume(volume)
	if !ok {
		return false, errorf(ErrVolumeNotFound, "volume %q not in pool %q", volume, l.Name)
	}
	m := v.WriteMirror
	var cur *RemoteLeg
	if m != nil {
		cur = map[int]*RemoteLeg{0: m.Remote0, 1: m.Remote}[index]
	}
	other := 1 - index
	switch {
	case index != 0 && index != 1:
		return false, fmt.Errorf("volume %q: no leg %d: a mirror has legs 0 and 1", volume, index)
	case cur == nil:
		return false, fmt.Errorf("volume %q has no peer leg %d to move", volume, index)
	case *cur == leg:
		return false, nil
	case slices.Contains(m.OutOfSync, other):
		return false, fmt.Errorf("volume %q: leg %d missed writes that only the peer leg %d on node %s holds: its leg cannot be moved before it is back and leg %d resynced",
			volume, other, index, cur.Node, other)
	}
	next := l.Clone()
	nv, _ := next.Volume(volume)
	if index == 0 {
		nv.WriteMirror.Remote0 = &leg
	} else {
		nv.WriteMirror.Remote = &leg
	}
	nv.WriteMirror.OutOfSync = []int{index}
	next.Generation++
	if err := next.Validate(); err != nil {
		return false, err
	}
	*l = *next
	return true, nil
}
