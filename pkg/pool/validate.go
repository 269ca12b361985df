// SPDX-License-Identifier: Apache-2.0

package pool

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxUUIDLen bounds pool, member and volume UUIDs, so a dm UUID built from
// one ("TIDECACHE-<role>-<uuid>") stays well inside dm's 128 bytes.
const MaxUUIDLen = 64

// checkUUID checks an identifier: 1 to MaxUUIDLen characters from
// A-Z, a-z, 0-9, '-', '_', '.' and ':' (md UUIDs use colons).
func checkUUID(s string) error {
	if s == "" {
		return errors.New("empty uuid")
	}
	if len(s) > MaxUUIDLen {
		return fmt.Errorf("uuid %q longer than %d characters", s, MaxUUIDLen)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-_.:", c) >= 0) {
			return fmt.Errorf("uuid %q: only A-Z, a-z, 0-9, '-', '_', '.' and ':' allowed", s)
		}
	}
	return nil
}

// checkPath checks a path hint: empty, or valid UTF-8 without control
// characters, so it survives JSON and log lines unchanged.
func checkPath(s string) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("path %q is not valid UTF-8", s)
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return fmt.Errorf("path %q contains control characters", s)
		}
	}
	return nil
}

// ValidBlockSize reports whether b is a dm-writecache block size tidecache
// uses: a power of two from 512 to 4096 bytes.
func ValidBlockSize(b uint32) bool {
	return b >= 512 && b <= 4096 && b&(b-1) == 0
}

// ValidReadBlockSize reports whether b is a dm-cache block size a volume
// may choose: a power of two from MinReadBlockSize to MaxReadBlockSize
// bytes. 0 (the node default) is not a choice and is not valid here.
func ValidReadBlockSize(b uint32) bool {
	return b >= MinReadBlockSize && b <= MaxReadBlockSize && b&(b-1) == 0
}

// Validate checks that the layout is internally consistent: the pool name
// and every volume name are valid and volume names unique; the pool, member
// and volume UUIDs are set and unique; every extent lies on a known device,
// after ReservedSectors, inside the device, aligned to Alignment and not
// empty; no two extents on one device overlap; modes and block sizes are
// valid; a read block size is only set on a volume with a read tier; a
// writeback volume has a write cache slice; a read tier has both its
// slices on SSD members. It reports every problem it finds, each naming
// the volume, member or extent at fault, joined with errors.Join.
//
// Validate does not enforce the minimum sizes (see MinMemberBytes): those
// are creation policy, and a layout on disk must keep loading if they
// change.
func (l *Layout) Validate() error {
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }

	if err := ValidateName("pool", l.Name); err != nil {
		errs = append(errs, err)
	}
	if err := checkUUID(l.UUID); err != nil {
		add("pool %q: %w", l.Name, err)
	}
	if l.HasOrigin() && l.Origin.SizeSectors == 0 {
		add("pool %q: origin has size 0", l.Name)
	}
	if err := checkPath(l.Origin.Path); err != nil {
		add("pool %q: origin %w", l.Name, err)
	}
	if l.Origin.MDUUID != "" {
		if err := checkUUID(l.Origin.MDUUID); err != nil {
			add("pool %q: origin md %w", l.Name, err)
		}
	}

	paths := map[string]string{} // path hint -> who uses it
	if l.Origin.Path != "" {
		paths[l.Origin.Path] = "the origin"
	}
	members := map[string]uint64{} // uuid -> size
	for i, m := range l.Members {
		who := fmt.Sprintf("member %d (%s)", i, m.Path)
		if err := checkPath(m.Path); err != nil {
			add("member %d: %w", i, err)
			who = fmt.Sprintf("member %d", i)
		}
		switch err := checkUUID(m.UUID); {
		case err != nil:
			add("%s: %w", who, err)
		case m.UUID == l.UUID:
			add("%s: uuid %s is the pool's uuid", who, m.UUID)
		default:
			if _, dup := members[m.UUID]; dup {
				add("%s: duplicate member uuid %s", who, m.UUID)
			}
			members[m.UUID] = m.SizeSectors
		}
		if m.SizeSectors == 0 {
			add("%s: size 0", who)
		}
		if m.Path != "" {
			if other, dup := paths[m.Path]; dup {
				add("%s: path %s is also %s", who, m.Path, other)
			} else {
				paths[m.Path] = "member " + m.UUID
			}
		}
	}

	names := map[string]bool{}
	uuids := map[string]string{}
	var used []owned
	for i := range l.Volumes {
		v := &l.Volumes[i]
		who := fmt.Sprintf("volume %q", v.Name)
		if err := ValidateName("volume", v.Name); err != nil {
			errs = append(errs, err)
		} else if names[v.Name] {
			add("%s: duplicate volume name", who)
		}
		names[v.Name] = true
		if err := checkUUID(v.UUID); err != nil {
			add("%s: %w", who, err)
		} else if other, dup := uuids[v.UUID]; dup {
			add("%s: uuid %s is also the uuid of volume %q", who, v.UUID, other)
		} else {
			uuids[v.UUID] = v.Name
		}
		if _, err := ParseMode(string(v.Mode)); err != nil {
			add("%s: %w", who, err)
		} else if v.Mode == ModeWriteback && v.WriteCache == nil {
			add("%s: mode writeback: %w", who, ErrNoWriteCache)
		}
		if err := v.Tuning.Validate(); err != nil {
			add("%s: tuning: %v", who, err)
		}
		if !ValidBlockSize(v.BlockSize) {
			add("%s: block size %d: want a power of two from 512 to 4096", who, v.BlockSize)
		}
		if v.ReadBlockSize != 0 {
			switch {
			case !ValidReadBlockSize(v.ReadBlockSize):
				add("%s: read block size %d: want a power of two from %s to %s", who, v.ReadBlockSize, FormatBytes(MinReadBlockSize), FormatBytes(MaxReadBlockSize))
			case v.ReadCache == nil:
				add("%s: read block size %d set without a read cache", who, v.ReadBlockSize)
			}
		}
		switch {
		case v.WriteMirror != nil:
			validateMirror(v, add)
		case v.CacheOnPeers():
			add("%s: write cache on peers without a mirror: want two peer legs", who)
		}
		if a := v.Adopted; a != nil {
			validateAdopted(v, add)
			switch {
			case l.HasOrigin() && l.Origin.MDUUID != "" && a.MDUUID == l.Origin.MDUUID,
				l.HasOrigin() && l.Origin.Path != "" && a.Path == l.Origin.Path:
				add("%s: adopted device %s is the pool's origin", who, a.Path)
			}
			for _, o := range l.Volumes[:i] {
				if o.Adopted != nil && o.Adopted.Same(a) {
					add("%s: adopted device %s is also adopted by volume %q", who, a, o.Name)
				}
			}
		} else if !l.HasOrigin() {
			add("%s: the pool has no origin (SSDs only): a volume there must adopt a device", who)
		}
		if (v.ReadCache == nil) != (v.ReadMeta == nil) {
			add("%s: read tier needs both a read cache and a read meta slice", who)
		}
		switch {
		case len(v.OriginTail) > 0 && v.Adopted != nil:
			add("%s: an adopted device is mapped whole, it has no further origin extents", who)
		case len(v.OriginTail)+1 > MaxOriginExtents:
			add("%s: %d origin extents, at most %d", who, len(v.OriginTail)+1, MaxOriginExtents)
		}
		for _, re := range v.Extents() {
			onSSD := re.Role != "origin extent"
			switch {
			case onSSD && re.Member == "":
				add("%s: %s is on the origin, want an SSD member", who, re.Role)
				continue
			case !onSSD && re.Member != "":
				add("%s: %s is on member %s, want the origin", who, re.Role, re.Member)
				continue
			}
			size := l.Origin.SizeSectors
			if onSSD {
				var ok bool
				if size, ok = members[re.Member]; !ok {
					add("%s: %s %s: unknown member", who, re.Role, re.Extent)
					continue
				}
			}
			if err := checkExtent(re.Extent, size); err != nil {
				add("%s: %s %s: %w", who, re.Role, re.Extent, err)
				continue
			}
			used = append(used, owned{volume: v.Name, RoleExtent: re})
		}
	}

	used = append(used, l.validateReplicas(members, add)...)

	// Overlaps: sort by device and offset; an extent starting before the
	// furthest-reaching earlier extent on the same device ends overlaps it.
	slices.SortFunc(used, func(a, b owned) int {
		return cmp.Or(cmp.Compare(a.Member, b.Member), cmp.Compare(a.Offset, b.Offset))
	})
	for i, reach := 1, 0; i < len(used); i++ {
		a, b := used[reach], used[i]
		if a.Member != b.Member {
			reach = i
			continue
		}
		if b.Offset < a.End() {
			add("volume %q %s %s overlaps volume %q %s %s", b.volume, b.Role, b.Extent, a.volume, a.Role, a.Extent)
		}
		if b.End() > a.End() {
			reach = i
		}
	}
	return errors.Join(errs...)
}

type owned struct {
	volume string
	RoleExtent
}

// checkExtent checks one extent against the size of its device.
func checkExtent(e Extent, deviceSectors uint64) error {
	switch {
	case e.Length == 0:
		return errors.New("empty")
	case e.Offset%Alignment != 0 || e.Length%Alignment != 0:
		return fmt.Errorf("not aligned to %d sectors", Alignment)
	case e.Offset < ReservedSectors:
		return fmt.Errorf("starts inside the reserved first %d sectors", ReservedSectors)
	case e.Offset > deviceSectors || e.Length > deviceSectors-e.Offset:
		return fmt.Errorf("ends beyond the device (%d sectors)", deviceSectors)
	}
	return nil
}
