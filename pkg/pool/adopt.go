// SPDX-License-Identifier: Apache-2.0

package pool

import (
	"fmt"
	"strings"
)

// Adopted is a device that held data before tidecache cached it (tidectl
// volume adopt): an md array, a partition or a LUN with a filesystem or a
// database on it. The volume's origin is that whole device, and tidecache
// writes nothing to it except through the cache: no superblock, no
// reserved head. The layout, on the pool's SSDs, is the only record, so
// the device is found again at assembly by the stable identifiers below
// and checked against all of them before use. A path alone never
// identifies it: device names change between boots.
type Adopted struct {
	// Path is a hint, the name the device had when it was adopted.
	Path string
	// MDUUID is the array UUID of an md array.
	MDUUID string
	// WWN and Serial identify a disk or a LUN (the kernel's wwid and
	// serial attributes), PartUUID a GPT partition.
	WWN, Serial, PartUUID string
	// SizeSectors is the device's size when it was adopted; a device that
	// is smaller at assembly is not the same device, or lost its tail.
	SizeSectors uint64
}

// HasIdentity reports whether a carries at least one identifier that
// survives a reboot and a change of device name.
func (a *Adopted) HasIdentity() bool {
	return a.MDUUID != "" || a.WWN != "" || a.Serial != "" || a.PartUUID != ""
}

// String describes the device for messages: its path hint and the
// identifiers it is known by.
func (a *Adopted) String() string {
	var ids []string
	for _, id := range []struct{ name, v string }{
		{"md uuid", a.MDUUID}, {"wwn", a.WWN}, {"serial", a.Serial}, {"partuuid", a.PartUUID},
	} {
		if id.v != "" {
			ids = append(ids, id.name+" "+id.v)
		}
	}
	return fmt.Sprintf("%s (%s)", a.Path, strings.Join(ids, ", "))
}

// Same reports whether a and o name the same device, by their most
// specific identifier: a partition by its partuuid, an md array by its
// uuid, a disk or LUN by its wwn, else its serial.
func (a *Adopted) Same(o *Adopted) bool {
	switch {
	case a.PartUUID != "" || o.PartUUID != "":
		return a.PartUUID == o.PartUUID
	case a.MDUUID != "" || o.MDUUID != "":
		return a.MDUUID == o.MDUUID
	case a.WWN != "" || o.WWN != "":
		return a.WWN == o.WWN
	default:
		return a.Serial != "" && a.Serial == o.Serial
	}
}

// AdoptedSectors is the part of an adopted device a volume maps: the
// device rounded down to 4 KiB, the largest block of every cache target.
// A filesystem's size is a whole number of its blocks, so no filesystem
// reaches into the (at most 3.5 KiB) tail left out.
func AdoptedSectors(size uint64) uint64 { return size &^ (adoptedGrain - 1) }

// adoptedGrain is AdoptedSectors' rounding, in sectors.
const adoptedGrain = 4096 / SectorSize

// validateAdopted checks an adopted volume's device and origin extent.
func validateAdopted(v *Volume, add func(string, ...any)) {
	who := fmt.Sprintf("volume %q", v.Name)
	a := v.Adopted
	if err := checkPath(a.Path); err != nil {
		add("%s: adopted device %w", who, err)
	}
	if !a.HasIdentity() {
		add("%s: adopted device %s has no stable identifier (md uuid, wwn, serial or partuuid)", who, a.Path)
	}
	for _, id := range []string{a.MDUUID, a.PartUUID} {
		if id != "" {
			if err := checkUUID(id); err != nil {
				add("%s: adopted device: %w", who, err)
			}
		}
	}
	for _, id := range []string{a.WWN, a.Serial} {
		if err := checkPath(id); err != nil {
			add("%s: adopted device identifier %w", who, err)
		}
	}
	o := v.Origin
	switch {
	case a.SizeSectors == 0:
		add("%s: adopted device %s has size 0", who, a.Path)
	case o.Member != "" || o.Offset != 0 || o.Length != AdoptedSectors(a.SizeSectors) || o.Length == 0:
		add("%s: origin %s: an adopted device is mapped whole, want [0+%d) of it", who, o, AdoptedSectors(a.SizeSectors))
	}
}
