// SPDX-License-Identifier: Apache-2.0

package pool

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// ForcedVolume says what starting a pool without some of its SSDs does to
// one volume.
type ForcedVolume struct {
	Name string
	// Dropped names the cache tiers given up: "write cache", "read cache".
	Dropped []string
	// ModeBefore and Mode are the mode recorded before and after.
	ModeBefore, Mode Mode
	// DataLoss is set when the write cache was in writeback: the dirty
	// blocks it held are lost (the caller accepted it).
	DataLoss bool
}

// ForceWithout changes the layout so that the pool can start without the
// SSD members in missing (dead, or gone for good). For each volume with a
// slice on one of them:
//
//   - a read tier there is dropped: dm-cache runs it in writethrough, so
//     it never holds a block the origin lacks;
//   - a write cache there whose mirror has a leg on a surviving SSD is
//     kept: assembly runs the mirror on that leg (degraded), which holds
//     every acknowledged write;
//   - any other write cache there is dropped. In passthrough or
//     writethrough it held nothing dirty. In writeback it may have: that
//     is refused (ErrDirtyCacheLost) unless the volume is in acceptLoss,
//     and then the loss is recorded in the volume (DataLoss);
//   - a volume left without a write tier runs in passthrough, one left
//     with a write cache but without its read tier keeps its mode.
//
// Members that no slice uses any more leave the layout; one that still
// holds a mirror leg stays (missing), and the pool assembles degraded. A
// pool of SSDs alone cannot lose every SSD: its layout lives on them. The
// generation is bumped once.
func (l *Layout) ForceWithout(missing, acceptLoss []string, now time.Time) ([]ForcedVolume, error) {
	gone := func(m string) bool { return slices.Contains(missing, m) }
	for _, m := range missing {
		if _, ok := l.Member(m); !ok {
			return nil, errorf(ErrInvalidRequest, "pool %q has no SSD member %s", l.Name, m)
		}
	}
	for _, name := range acceptLoss {
		if _, ok := l.Volume(name); !ok {
			return nil, errorf(ErrVolumeNotFound, "--accept-data-loss %s: pool %q has no such volume", name, l.Name)
		}
	}
	var out []ForcedVolume
	var refused []string
	next := l.Clone()
	for i := range next.Volumes {
		v := &next.Volumes[i]
		fv := ForcedVolume{Name: v.Name, ModeBefore: v.Mode}
		if (v.ReadCache != nil && gone(v.ReadCache.Member)) || (v.ReadMeta != nil && gone(v.ReadMeta.Member)) {
			v.ReadCache, v.ReadMeta, v.ReadBlockSize = nil, nil, 0
			fv.Dropped = append(fv.Dropped, "read cache")
		}
		if w := v.WriteCache; w != nil && gone(w.Member) && !survivingLeg(v, gone) {
			if v.Mode == ModeWriteback {
				if !slices.Contains(acceptLoss, v.Name) {
					refused = append(refused, v.Name)
					continue
				}
				v.DataLoss = &DataLoss{Unix: now.Unix(), Member: w.Member}
				fv.DataLoss = true
			}
			v.WriteCache, v.WriteMirror, v.Tuning, v.FUAWindow = nil, nil, nil, false
			fv.Dropped = append(fv.Dropped, "write cache")
		}
		if len(fv.Dropped) == 0 {
			continue
		}
		if v.WriteCache == nil || (v.Mode == ModeWritethrough && v.ReadCache == nil) {
			v.Mode = ModePassthrough
		}
		fv.Mode = v.Mode
		out = append(out, fv)
	}
	if len(refused) > 0 {
		return nil, errorf(ErrDirtyCacheLost, "volume(s) %s ran in writeback with their write cache on the missing SSD: the writes it held are lost if the pool starts without it; find the SSD, or start with --accept-data-loss %s",
			strings.Join(refused, ", "), strings.Join(refused, " --accept-data-loss "))
	}
	var members []Member
	for _, m := range next.Members {
		if !gone(m.UUID) || next.holdsSlice(m.UUID) {
			members = append(members, m)
		}
	}
	if !next.HasOrigin() && !slices.ContainsFunc(members, func(m Member) bool { return !gone(m.UUID) }) {
		return nil, errorf(ErrInvalidRequest, "pool %q has no origin and no SSD left: there is nowhere to keep its layout", l.Name)
	}
	next.Members = members
	next.Generation++
	if err := next.Validate(); err != nil {
		return nil, fmt.Errorf("pool %q without SSDs %v: %w", l.Name, missing, err)
	}
	*l = *next
	return out, nil
}

// survivingLeg reports whether v's write cache is mirrored with a leg on
// an SSD that is not gone (a peer leg counts: it is on another node).
func survivingLeg(v *Volume, gone func(string) bool) bool {
	m := v.WriteMirror
	if m == nil {
		return false
	}
	if m.Remote != nil {
		return true
	}
	return !gone(m.Leg.Member)
}

// holdsSlice reports whether any volume or replica has a slice on member.
func (l *Layout) holdsSlice(member string) bool {
	for _, v := range l.Volumes {
		for _, x := range []*Extent{v.WriteCache, v.ReadCache, v.ReadMeta} {
			if x != nil && x.Member == member {
				return true
			}
		}
		if m := v.WriteMirror; m != nil && m.Remote == nil && (m.Leg.Member == member || m.LegMeta.Member == member || m.Meta.Member == member) {
			return true
		}
	}
	for _, r := range l.Replicas {
		if r.Extent.Member == member {
			return true
		}
	}
	return false
}
