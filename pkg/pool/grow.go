// SPDX-License-Identifier: Apache-2.0

package pool

import (
	"cmp"
	"fmt"
	"slices"
)

// GrowVolume gives the named volume size bytes (rounded up to the
// alignment). Data on the HDDs never moves; the new sectors are placed, in
// this order of preference:
//
//  1. right after the volume's last extent, which then simply grows;
//  2. what is still missing, in the first free extent that holds all of
//     it: one new extent in OriginTail;
//  3. else in the largest free extents, as few as hold it.
//
// The extents only ever get longer or more numerous, so every sector the
// volume had keeps its place in the volume (the filesystem's data stays
// where it is). Shrinking is refused (it would cut off the end of the
// filesystem on it), and so are adopted volumes (their origin is a device
// tidecache does not own), and growth that would take the volume past
// MaxOriginExtents. The same size again is a no-op.
func (l *Layout) GrowVolume(name string, size uint64) error {
	v, ok := l.Volume(name)
	if !ok {
		return errorf(ErrVolumeNotFound, "volume %q not found in pool %q", name, l.Name)
	}
	if v.Adopted != nil {
		return errorf(ErrInvalidRequest, "volume %q caches the device %s, which tidecache does not own: grow the device, then detach and adopt it again", name, v.Adopted)
	}
	want, have := BytesToSectors(size), v.SizeSectors()
	switch {
	case want == have:
		return nil
	case want < have:
		return errorf(ErrInvalidRequest, "volume %q is %s: shrinking it to %s would cut off the end of its filesystem; tidecache only grows volumes",
			name, FormatBytes(have*SectorSize), FormatBytes(want*SectorSize))
	}
	grow := want - have
	a := newAllocator(l)
	free := a.free("")
	var total uint64
	for _, e := range free {
		total += e.Length
	}
	if total < grow {
		return errorf(ErrNoSpace, "not enough free space on %s: volume %q needs %s more, %s is free",
			l.devicePath(""), name, formatSectors(grow), formatSectors(total))
	}

	next := l.Clone()
	nv, _ := next.Volume(name)
	last := &nv.Origin
	if n := len(nv.OriginTail); n > 0 {
		last = &nv.OriginTail[n-1]
	}
	end := last.End()
	for i, e := range free {
		if e.Offset == end {
			n := min(e.Length, grow)
			last.Length += n
			grow -= n
			free = slices.Delete(free, i, i+1)
			break
		}
	}
	if grow > 0 {
		nv.OriginTail = append(nv.OriginTail, placeGrowth(free, grow)...)
	}
	if n := len(nv.OriginTail) + 1; n > MaxOriginExtents {
		return errorf(ErrNoSpace, "volume %q would need %d extents on %s to grow by %s, at most %d are allowed: the free space there is too fragmented; copy the volume's data to a new volume instead",
			name, n, l.devicePath(""), formatSectors(want-have), MaxOriginExtents)
	}
	next.Generation++
	if err := next.Validate(); err != nil {
		return fmt.Errorf("pool %q after growing volume %q: %w", l.Name, name, err)
	}
	*l = *next
	return nil
}

// placeGrowth returns extents of free, in volume order, that together hold
// length sectors: the first one that holds all of it, else the largest
// ones, the last cut to what is still missing. free must hold at least
// length sectors.
func placeGrowth(free []Extent, length uint64) []Extent {
	for _, e := range free {
		if e.Length >= length {
			e.Length = length
			return []Extent{e}
		}
	}
	bySize := slices.Clone(free)
	slices.SortStableFunc(bySize, func(x, y Extent) int { return cmp.Compare(y.Length, x.Length) })
	var out []Extent
	for _, e := range bySize {
		if length == 0 {
			break
		}
		e.Length = min(e.Length, length)
		length -= e.Length
		out = append(out, e)
	}
	return out
}
