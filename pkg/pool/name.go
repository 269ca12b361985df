// SPDX-License-Identifier: Apache-2.0

package pool

import (
	"fmt"
	"strings"
)

// MaxNameLen is the longest pool or volume name.
const MaxNameLen = 48

// ReservedVolumeSuffixes are endings a volume name may not have. The stack
// package names a volume's devices "tc-<volume>" and "tc-<volume>-<role>";
// a volume called "db-origin" would take the name of the origin device of
// volume "db". The list holds "-" + every role of package stack except the
// top device; a test there keeps the two in step.
var ReservedVolumeSuffixes = []string{"-origin", "-rmeta", "-rdata", "-rtier", "-wdata", "-wtier",
	"-wmeta0", "-wleg0", "-wmeta1", "-wleg1", "-rfirst"}

// ValidateName checks a pool or volume name; kind ("pool", "volume") only
// shapes the message. A name is 1 to MaxNameLen characters from a-z, 0-9
// and '-', starts and ends with a letter or digit, and has no "--".
//
// The rules keep names usable unquoted everywhere they end up: dm device
// names (tc-<volume>-<role>), etcd keys, Kubernetes object names and metric
// labels. "--" is refused because LVM and udev use it to escape '-' inside
// dm names (vg--name-lv), and "tc-a--b" would read as such an escape. A
// volume name also may not end in one of ReservedVolumeSuffixes.
func ValidateName(kind, name string) error {
	bad := func(why string) error {
		return errorf(ErrInvalidName, "invalid %s name %q: %s", kind, name, why)
	}
	switch {
	case name == "":
		return bad("empty")
	case len(name) > MaxNameLen:
		return bad(fmt.Sprintf("longer than %d characters", MaxNameLen))
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return bad("only a-z, 0-9 and '-' allowed")
		}
	}
	switch {
	case name[0] == '-':
		return bad("must start with a letter or digit")
	case name[len(name)-1] == '-':
		return bad("must end with a letter or digit")
	case strings.Contains(name, "--"):
		return bad(`must not contain "--"`)
	}
	if kind == "volume" {
		for _, s := range ReservedVolumeSuffixes {
			if strings.HasSuffix(name, s) {
				return bad(fmt.Sprintf("must not end in %q (reserved for the volume's own devices)", s))
			}
		}
	}
	return nil
}
