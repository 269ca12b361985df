// SPDX-License-Identifier: Apache-2.0

package pool

import (
	"fmt"
	"slices"
)

// Protection says how many copies of a volume's dirty cache blocks exist
// before a write is acknowledged, and where.
type Protection string

// The protections a volume can have.
const (
	// ProtectNone keeps one copy of the write cache: losing its SSD loses
	// the acknowledged writes that were not yet written back.
	ProtectNone Protection = "none"
	// ProtectLocal mirrors the write cache onto a second SSD of the same
	// node (Volume.WriteMirror): either SSD can die without losing a write.
	ProtectLocal Protection = "local"
	// ProtectPeer mirrors the write cache onto a slice of another node's
	// SSD, reached over NVMe/TCP (Mirror.Remote): the SSD or the whole
	// node can die without losing a write.
	ProtectPeer Protection = "peer"
)

// Protections lists the protections a volume can be created with.
var Protections = []Protection{ProtectNone, ProtectLocal, ProtectPeer}

// ParseProtection parses a protection name as written in Protections.
func ParseProtection(s string) (Protection, error) {
	p := Protection(s)
	if !slices.Contains(Protections, p) {
		return "", errorf(ErrInvalidRequest, "invalid protection %q: want none, local or peer", s)
	}
	return p, nil
}

// MirrorMetaSectors is the size of each leg's metadata slice: dm-raid's
// superblock (4 KiB) and its write-intent bitmap, which dm-raid keeps
// under 2^21 regions, so 256 KiB at most. One allocation unit holds both
// for any leg size.
const MirrorMetaSectors = Alignment

// Mirror is the second copy of a volume's write cache. The write tier's
// cache device is then a dm-raid RAID1 of two legs, each a data slice with
// its own metadata slice on the same SSD:
//
//	leg 0: Meta    + the volume's WriteCache
//	leg 1: LegMeta + Leg, on another SSD (protection local), or
//	       a peer node's replica slice, Remote (protection peer), which
//	       holds the leg's metadata in its first MirrorMetaSectors and
//	       its data after them
//
// dm-raid acknowledges a write (data and dm-writecache's metadata commits
// alike) only once every leg that is in service has it, and its bitmap
// records the regions written while a leg was out, so a leg that comes
// back resyncs only those.
type Mirror struct {
	Meta    Extent // leg 0's metadata, on the WriteCache's member; zero when Remote0
	Leg     Extent // leg 1's data: as long as WriteCache, on another member; zero when Remote
	LegMeta Extent // leg 1's metadata, on Leg's member; zero when Remote
	// Remote, when set, is leg 1 on a peer node (protection peer).
	Remote *RemoteLeg
	// Remote0, when set, is leg 0 on a peer node too: the volume of a
	// node without SSDs, whose write cache is on two other nodes'
	// replicas (WriteCache.Member is OnPeers). Remote is then set, on
	// another node than Remote0.
	Remote0 *RemoteLeg
	// OutOfSync lists the legs (0, 1) known to have missed writes: absent
	// at an assembly, or failed while the volume ran. Such a leg's copy is
	// stale until dm-raid has resynced it from the other, so the mirror is
	// never built on it alone: its own dm-raid superblock cannot tell it
	// missed anything, only this record can.
	OutOfSync []int
}

// SetMirrorOutOfSync records which legs of a volume's write mirror are out
// of sync, bumping the generation when that changes; changed is false when
// the record already said so.
func (l *Layout) SetMirrorOutOfSync(volume string, legs []int) (changed bool, err error) {
	v, ok := l.Volume(volume)
	if !ok {
		return false, errorf(ErrVolumeNotFound, "volume %q not in pool %q", volume, l.Name)
	}
	if v.WriteMirror == nil {
		return false, fmt.Errorf("volume %q has no write mirror", volume)
	}
	legs = slices.Sorted(slices.Values(legs))
	legs = slices.Compact(legs)
	if slices.Equal(legs, v.WriteMirror.OutOfSync) || (len(legs) == 0 && len(v.WriteMirror.OutOfSync) == 0) {
		return false, nil
	}
	next := l.Clone()
	nv, _ := next.Volume(volume)
	nv.WriteMirror.OutOfSync = legs
	if len(legs) == 0 {
		nv.WriteMirror.OutOfSync = nil
	}
	next.Generation++
	if err := next.Validate(); err != nil {
		return false, err
	}
	*l = *next
	return true, nil
}

// CanFailOver reports whether the volume can fail over to another node: a
// shared origin (an adopted device) whose write cache is mirrored to a
// peer. Local adoption refuses protect peer, so only the cluster's shared
// origins are both. Such a volume's peer leg must never drop out of its
// mirror before the cluster has recorded the replica behind.
func (v *Volume) CanFailOver() bool {
	return v.Adopted != nil && v.WriteMirror != nil && v.WriteMirror.Remote != nil
}

// OnPeers is the Member of a write cache that is on no SSD of the pool:
// the volume of a node without SSDs, whose write mirror has both legs on
// peer nodes (Mirror.Remote0 and Mirror.Remote). No member UUID can be
// "@peers" (checkUUID refuses '@').
const OnPeers = "@peers"

// CacheOnPeers reports whether the volume's write cache is on peer nodes
// only: both legs of its mirror are replicas on other nodes.
func (v *Volume) CacheOnPeers() bool {
	return v.WriteCache != nil && v.WriteCache.Member == OnPeers
}

// PeerLeg is a leg of a write mirror that is on a peer node.
type PeerLeg struct {
	// Index is the leg's place in the mirror: 0 or 1.
	Index int
	RemoteLeg
}

// PeerLegs returns the legs of the volume's write mirror that are on peer
// nodes, leg 0 first: none without a peer mirror, leg 1 for protection
// peer, both for a write cache on peers.
func (v *Volume) PeerLegs() []PeerLeg {
	m := v.WriteMirror
	if m == nil {
		return nil
	}
	var legs []PeerLeg
	for i, r := range []*RemoteLeg{m.Remote0, m.Remote} {
		if r != nil {
			legs = append(legs, PeerLeg{Index: i, RemoteLeg: *r})
		}
	}
	return legs
}

// Protection returns the volume's protection.
func (v *Volume) Protection() Protection {
	switch {
	case v.WriteMirror == nil:
		return ProtectNone
	case v.WriteMirror.Remote != nil:
		return ProtectPeer
	}
	return ProtectLocal
}

// placeMirror allocates a mirrored write cache of length sectors: leg 0 on
// the member with the most free space, leg 1 on the next one, each with its
// metadata slice on its own member.
func (a *allocator) placeMirror(length uint64, what string) (data Extent, m Mirror, err error) {
	if len(a.l.Members) < 2 {
		return Extent{}, Mirror{}, errorf(ErrNoSpace, "%s: protection local needs two SSDs in pool %q, it has %d; add an SSD or create the volume with --protect none",
			what, a.l.Name, len(a.l.Members))
	}
	if data, err = a.onMember(length, "", what+" (leg 0)"); err != nil {
		return Extent{}, Mirror{}, err
	}
	if m.Meta, err = a.onMember(MirrorMetaSectors, data.Member, what+" (leg 0 metadata)"); err != nil {
		return Extent{}, Mirror{}, err
	}
	if m.Meta.Member != data.Member {
		return Extent{}, Mirror{}, errorf(ErrNoSpace, "%s: no room for leg 0's %s metadata slice next to its data on %s",
			what, formatSectors(MirrorMetaSectors), a.l.devicePath(data.Member))
	}
	if m.Leg, err = a.onMemberExcept(length, data.Member, what+" (leg 1)"); err != nil {
		return Extent{}, Mirror{}, err
	}
	if m.LegMeta, err = a.onMember(MirrorMetaSectors, m.Leg.Member, what+" (leg 1 metadata)"); err != nil {
		return Extent{}, Mirror{}, err
	}
	if m.LegMeta.Member != m.Leg.Member {
		return Extent{}, Mirror{}, errorf(ErrNoSpace, "%s: no room for leg 1's %s metadata slice next to its data on %s",
			what, formatSectors(MirrorMetaSectors), a.l.devicePath(m.Leg.Member))
	}
	return data, m, nil
}

// onMemberExcept is onMember restricted to the members other than skip.
func (a *allocator) onMemberExcept(length uint64, skip, what string) (Extent, error) {
	var best Extent
	var bestFree uint64
	found := false
	for _, mb := range a.l.Members {
		if mb.UUID == skip {
			continue
		}
		e, ok := a.firstFit(mb.UUID, length)
		if !ok {
			continue
		}
		if free := a.freeTotal(mb.UUID); !found || free > bestFree {
			best, bestFree, found = e, free, true
		}
	}
	if !found {
		return Extent{}, errorf(ErrNoSpace, "not enough free space on the SSDs: %s needs %s on an SSD other than %s, and none has a free extent that large",
			what, formatSectors(length), a.l.devicePath(skip))
	}
	a.take(best)
	return best, nil
}

// validateMirror checks a mirror against its volume's write cache.
func validateMirror(v *Volume, add func(format string, a ...any)) {
	m := v.WriteMirror
	who := fmt.Sprintf("volume %q", v.Name)
	switch {
	case v.WriteCache == nil:
		add("%s: write mirror without a write cache", who)
	case m.Remote0 != nil:
		validateOnPeers(v, add)
	case v.CacheOnPeers():
		add("%s: write cache on peers without a peer leg 0", who)
	case m.Remote != nil:
		validateRemote(v, add)
	case m.Leg.Member == v.WriteCache.Member:
		add("%s: both legs of the write mirror are on member %s, want two SSDs", who, m.Leg.Member)
	case m.Leg.Length != v.WriteCache.Length:
		add("%s: write mirror leg is %s, the write cache %s: want equal legs", who, formatSectors(m.Leg.Length), formatSectors(v.WriteCache.Length))
	case m.Meta.Member != v.WriteCache.Member || m.LegMeta.Member != m.Leg.Member:
		add("%s: each write mirror metadata slice must be on its leg's SSD", who)
	case m.Meta.Length < MirrorMetaSectors || m.LegMeta.Length < MirrorMetaSectors:
		add("%s: write mirror metadata slices must be at least %s", who, formatSectors(MirrorMetaSectors))
	case !validOutOfSync(m.OutOfSync):
		add("%s: write mirror legs out of sync %v: want at most one of 0 and 1", who, m.OutOfSync)
	}
}
