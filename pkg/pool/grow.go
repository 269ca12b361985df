// SPDX-License-Identifier: Apache-2.0

package pool

import "fmt"

// GrowVolume gives the named volume's origin extent size bytes (rounded
// up to the alignment), in place: the sectors right after it on the
// origin must be free. Shrinking is refused (it would cut off the end of
// the filesystem on it), and so are adopted volumes (their origin is a
// device tidecache does not own). The same size again is a no-op.
func (l *Layout) GrowVolume(name string, size uint64) error {
	v, ok := l.Volume(name)
	if !ok {
		return errorf(ErrVolumeNotFound, "volume %q not found in pool %q", name, l.Name)
	}
	if v.Adopted != nil {
		return errorf(ErrInvalidRequest, "volume %q caches the device %s, which tidecache does not own: grow the device, then detach and adopt it again", name, v.Adopted)
	}
	want := BytesToSectors(size)
	switch {
	case want == v.Origin.Length:
		return nil
	case want < v.Origin.Length:
		return errorf(ErrInvalidRequest, "volume %q is %s: shrinking it to %s would cut off the end of its filesystem; tidecache only grows volumes",
			name, FormatBytes(v.Origin.Length*SectorSize), FormatBytes(want*SectorSize))
	}
	end := v.Origin.Offset + v.Origin.Length
	grow := want - v.Origin.Length
	var after uint64 // free sectors right after the extent
	for _, e := range newAllocator(l).free("") {
		if e.Offset == end {
			after = e.Length
		}
	}
	if after < grow {
		return errorf(ErrNoSpace, "not enough free space: volume %q needs %s more right after its extent on %s, and %s is free there; a volume that is followed by another cannot grow in place (tidecache does not move data on the HDDs)",
			name, formatSectors(grow), l.devicePath(""), formatSectors(after))
	}
	next := l.Clone()
	nv, _ := next.Volume(name)
	nv.Origin.Length = want
	next.Generation++
	if err := next.Validate(); err != nil {
		return fmt.Errorf("pool %q after growing volume %q: %w", l.Name, name, err)
	}
	*l = *next
	return nil
}
