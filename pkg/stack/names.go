// SPDX-License-Identifier: Apache-2.0

package stack

import (
	"fmt"
	"slices"
	"strings"

	"github.com/tidecache/tidecache/pkg/dm"
)

// Role says what one dm device does inside a volume's stack.
type Role string

// The roles of the devices of one volume, bottom-up.
const (
	RoleOrigin     Role = "origin" // linear: the volume's extent of the origin array
	RoleReadMeta   Role = "rmeta"  // linear: dm-cache metadata slice
	RoleReadData   Role = "rdata"  // linear: dm-cache data slice
	RoleReadTier   Role = "rtier"  // cache: smq read tier in writethrough
	RoleWriteData  Role = "wdata"  // linear: dm-writecache cache slice; raid1 of the legs below when mirrored
	RoleWriteMeta0 Role = "wmeta0" // linear: mirror leg 0's dm-raid metadata slice
	RoleWriteLeg0  Role = "wleg0"  // linear: mirror leg 0's data slice (the volume's write cache slice)
	RoleWriteMeta1 Role = "wmeta1" // linear (errhold on a peer that can take over): mirror leg 1's dm-raid metadata slice
	RoleWriteLeg1  Role = "wleg1"  // linear (errhold on a peer that can take over): mirror leg 1's data slice, on another SSD
	RoleReadFirst  Role = "rfirst" // readfirst: under the write tier, holds its write-back while reads wait
	RoleWriteTier  Role = "wtier"  // writecache: the write-back tier
	RoleTop        Role = "top"    // the user's device: fuaflush over the write tier, or linear
)

// Roles lists every role top-down: the order to remove a volume's devices
// in, whatever its mode and protection.
var Roles = []Role{RoleTop, RoleWriteTier, RoleWriteData, RoleWriteLeg1, RoleWriteMeta1, RoleWriteLeg0, RoleWriteMeta0,
	RoleReadFirst, RoleReadTier, RoleReadData, RoleReadMeta, RoleOrigin}

// NamePrefix starts the name of every dm device tidecache creates.
const NamePrefix = "tc-"

// UUIDPrefix starts the dm UUID of every device tidecache creates. A device
// whose UUID lacks it is never touched, whatever its name.
const UUIDPrefix = "TIDECACHE-"

// DeviceName returns the dm name of a volume's device in the given role:
// "tc-<volume>" for the top device, "tc-<volume>-<role>" below it.
func DeviceName(volume string, role Role) string {
	if role == RoleTop {
		return NamePrefix + volume
	}
	return NamePrefix + volume + "-" + string(role)
}

// VolumeOf returns the volume whose device DeviceName named dmName, and
// false for a name DeviceName does not make. Volume names never end in a
// role's suffix (pool.ReservedVolumeSuffixes), so the split is unique.
func VolumeOf(dmName string) (string, bool) {
	rest, ok := strings.CutPrefix(dmName, NamePrefix)
	if !ok || rest == "" {
		return "", false
	}
	for _, r := range Roles {
		if v, ok := strings.CutSuffix(rest, "-"+string(r)); ok && r != RoleTop && v != "" {
			return v, true
		}
	}
	return rest, true
}

// DeviceUUID returns the dm UUID of a volume's device in the given role:
// "TIDECACHE-<role>-<volume uuid>". It is unique per device even when a
// volume is deleted and another with the same name is created.
func DeviceUUID(volumeUUID string, role Role) string {
	return UUIDPrefix + string(role) + "-" + volumeUUID
}

// Owned reports whether a dm UUID marks a device tidecache created.
func Owned(dmUUID string) bool {
	return strings.HasPrefix(dmUUID, UUIDPrefix)
}

// UdevFlags gives the udev flags of a dm device by its UUID
// (dm.Client.SetUdevFlags): every tidecache device but the top one is
// dm.UdevInner, so that udev neither probes it into /dev/disk/by-uuid
// (an origin extent shows the same filesystem as the volume, without the
// writes its cache holds) nor hands it to systemd or udisks. The top
// device, and devices that are not tidecache's, get none.
func UdevFlags(dmUUID string) dm.UdevFlags {
	if !Owned(dmUUID) || strings.HasPrefix(dmUUID, UUIDPrefix+string(RoleTop)+"-") {
		return 0
	}
	return dm.UdevInner
}

// ParseUUID splits a tidecache dm UUID into role and volume UUID.
func ParseUUID(dmUUID string) (Role, string, error) {
	rest, ok := strings.CutPrefix(dmUUID, UUIDPrefix)
	if !ok {
		return "", "", fmt.Errorf("dm uuid %q: not a tidecache device", dmUUID)
	}
	role, vol, ok := strings.Cut(rest, "-")
	if !ok || vol == "" {
		return "", "", fmt.Errorf("dm uuid %q: missing volume uuid", dmUUID)
	}
	if r := Role(role); slices.Contains(Roles, r) {
		return r, vol, nil
	}
	return "", "", fmt.Errorf("dm uuid %q: unknown role %q", dmUUID, role)
}

// ReplicaNamePrefix starts the dm name of a replica device: a slice this
// node keeps for another node's mirror ("tcr-<volume>"). It is not
// NamePrefix, so a replica is never taken for a device of a local volume.
const ReplicaNamePrefix = "tcr-"

// ReplicaRole is the role part of a replica device's dm UUID.
const ReplicaRole Role = "replica"
