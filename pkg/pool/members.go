// SPDX-License-Identifier: Apache-2.0

package pool

import (
	"fmt"
	"slices"
)

// AddMember adds an SSD to the pool and bumps the generation: its space
// is free for new slices. The member's UUID and path must be new to the
// pool.
func (l *Layout) AddMember(m Member) error {
	if _, dup := l.Member(m.UUID); dup {
		return errorf(ErrInvalidRequest, "pool %q already has a member %s", l.Name, m.UUID)
	}
	if err := CheckMemberSize(m.Path, m.SizeSectors*SectorSize); err != nil {
		return err
	}
	next := l.Clone()
	next.Members = append(next.Members, m)
	next.Generation++
	if err := next.Validate(); err != nil {
		return fmt.Errorf("pool %q with SSD %s: %w", l.Name, m.Path, err)
	}
	*l = *next
	return nil
}

// MoveOff gives the named volume's write-cache and read-cache slices that
// lie on member new places on the pool's other SSDs, of the same sizes,
// and bumps the generation. The volume must be in passthrough, where no
// tier runs: the old slices hold nothing the origin lacks, and the new
// ones start empty. A write cache mirrored on two SSDs of the pool
// (protection local) with a leg on member gets both legs placed anew, on
// two other SSDs; one mirrored on a peer node with its local leg on
// member is refused (the peer's replica is the cluster's to place). A lack
// of room is ErrNoSpace. A volume with nothing on member is left alone.
func (l *Layout) MoveOff(volume, member string) error {
	v, ok := l.Volume(volume)
	if !ok {
		return errorf(ErrVolumeNotFound, "volume %q not found in pool %q", volume, l.Name)
	}
	onIt := func(x *Extent) bool { return x != nil && x.Member == member }
	moveW, moveR := onIt(v.WriteCache), onIt(v.ReadCache) || onIt(v.ReadMeta)
	m := v.WriteMirror
	if m != nil && m.Remote == nil && (m.Leg.Member == member || m.LegMeta.Member == member || m.Meta.Member == member) {
		moveW = true
	}
	if m != nil && m.Remote != nil && moveW {
		return errorf(ErrInvalidRequest, "volume %q mirrors its write cache on node %s with its local leg on SSD %s: it cannot be moved off it", volume, m.Remote.Node, l.devicePath(member))
	}
	if !moveW && !moveR {
		return nil
	}
	if v.Mode != ModePassthrough {
		return errorf(ErrInvalidRequest, "volume %q is in %s: drain it to passthrough before moving its slices", volume, v.Mode)
	}
	// Allocate on a copy of the layout without the member and without the
	// slices being moved.
	scratch := l.Clone()
	scratch.Members = slices.DeleteFunc(scratch.Members, func(m Member) bool { return m.UUID == member })
	sv, _ := scratch.Volume(volume)
	if moveW {
		sv.WriteCache, sv.WriteMirror = nil, nil
	}
	if moveR {
		sv.ReadCache, sv.ReadMeta = nil, nil
	}
	a := newAllocator(scratch)
	next := l.Clone()
	nv, _ := next.Volume(volume)
	switch {
	case moveW && m != nil:
		e, mirror, err := a.placeMirror(v.WriteCache.Length, "write cache of volume "+quote(volume))
		if err != nil {
			return err
		}
		nv.WriteCache, nv.WriteMirror = &e, &mirror
	case moveW:
		e, err := a.onMember(v.WriteCache.Length, "", "write cache of volume "+quote(volume))
		if err != nil {
			return err
		}
		nv.WriteCache = &e
	}
	if moveR {
		e, err := a.onMember(v.ReadCache.Length, "", "read cache of volume "+quote(volume))
		if err != nil {
			return err
		}
		meta, err := a.onMember(v.ReadMeta.Length, e.Member, "read meta of volume "+quote(volume))
		if err != nil {
			return err
		}
		nv.ReadCache, nv.ReadMeta = &e, &meta
	}
	next.Generation++
	if err := next.Validate(); err != nil {
		return fmt.Errorf("pool %q after moving volume %q off %s: %w", l.Name, volume, member, err)
	}
	*l = *next
	return nil
}

// RemoveMember drops an SSD that no slice uses from the pool and bumps the
// generation. The last SSD of a pool without an origin is refused: the
// layout lives on its SSDs.
func (l *Layout) RemoveMember(member string) error {
	if _, ok := l.Member(member); !ok {
		return errorf(ErrInvalidRequest, "pool %q has no SSD member %s", l.Name, member)
	}
	if l.holdsSlice(member) {
		return errorf(ErrInvalidRequest, "SSD %s of pool %q still holds slices: move them off first", l.devicePath(member), l.Name)
	}
	if !l.HasOrigin() && len(l.Members) == 1 {
		return errorf(ErrInvalidRequest, "SSD %s is the last of pool %q, which has no origin: the pool's layout lives on its SSDs (pool delete removes the pool)", l.devicePath(member), l.Name)
	}
	next := l.Clone()
	next.Members = slices.DeleteFunc(next.Members, func(m Member) bool { return m.UUID == member })
	next.Generation++
	if err := next.Validate(); err != nil {
		return err
	}
	*l = *next
	return nil
}
