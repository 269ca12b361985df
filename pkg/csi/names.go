// SPDX-License-Identifier: Apache-2.0

package csi

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/tidecache/tidecache/pkg/pool"
)

// hashLen is how many hex digits of the SHA-256 of a CSI name end the
// volume name made from it: 48 bits, so two CSI names of one cluster
// meet by chance about once in 2^24 volumes.
const hashLen = 12

// VolumeName returns the tidecache volume name for a CSI volume name,
// the same for the same name every time, so a retried CreateVolume finds
// the volume its first try made.
//
// A CSI name that already is a valid volume name (pool.ValidateName:
// Kubernetes' "pvc-<uuid>" is) is kept as it is, so operators see the
// PersistentVolume's name in tidectl, /dev/mapper and metrics. Any other
// name (upper case, '_' or '.', longer than 48 characters, a reserved
// suffix) becomes its lower-cased, cleaned start, then '-' and 12 hex
// digits of its SHA-256: readable, within the limit, and not the name of
// another CSI volume unless the hashes meet.
func VolumeName(csiName string) string {
	if pool.ValidateName("volume", csiName) == nil {
		return csiName
	}
	sum := sha256.Sum256([]byte(csiName))
	suffix := hex.EncodeToString(sum[:])[:hashLen]
	var b strings.Builder
	for _, c := range strings.ToLower(csiName) {
		ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		switch {
		case ok:
			b.WriteRune(c)
		case b.Len() > 0 && !strings.HasSuffix(b.String(), "-"):
			b.WriteByte('-')
		}
	}
	head := b.String()
	if keep := pool.MaxNameLen - 1 - hashLen; len(head) > keep {
		head = head[:keep]
	}
	head = strings.TrimRight(head, "-")
	if head == "" {
		head = "csi"
	}
	return head + "-" + suffix
}
