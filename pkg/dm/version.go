// SPDX-License-Identifier: Apache-2.0

package dm

import (
	"fmt"
	"strconv"
	"strings"
)

// Version is a device-mapper version triple: of the ioctl interface
// (Client.Version) or of a target type (Client.TargetVersions).
type Version struct{ Major, Minor, Patch uint32 }

// String returns "major.minor.patch", e.g. "4.47.0".
func (v Version) String() string {
	return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch)
}

// AtLeast reports whether v is o or newer.
func (v Version) AtLeast(o Version) bool {
	if v.Major != o.Major {
		return v.Major > o.Major
	}
	if v.Minor != o.Minor {
		return v.Minor > o.Minor
	}
	return v.Patch >= o.Patch
}

// IsZero reports whether v is the zero Version, which the status parsers
// read as "target version unknown".
func (v Version) IsZero() bool { return v == Version{} }

// ParseVersion parses "major.minor.patch" as printed by String and by
// `dmsetup targets` (which prefixes a 'v', also accepted).
func ParseVersion(s string) (Version, error) {
	parts := strings.Split(strings.TrimPrefix(s, "v"), ".")
	if len(parts) != 3 {
		return Version{}, &ParseError{What: "dm version", Arg: "version", Value: s, Err: fmt.Errorf("want major.minor.patch")}
	}
	var n [3]uint32
	for i, p := range parts {
		u, err := strconv.ParseUint(p, 10, 32)
		if err != nil {
			return Version{}, &ParseError{What: "dm version", Arg: "version", Value: s, Err: numErr(err)}
		}
		n[i] = uint32(u)
	}
	return Version{n[0], n[1], n[2]}, nil
}
