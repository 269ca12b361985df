// SPDX-License-Identifier: Apache-2.0

package nvmeof

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// nqnPrefix starts every NQN tidecache makes. NVMe names a subsystem or a
// host "nqn.<yyyy-mm>.<reverse domain>:<name>"; the date is when the
// naming scheme was set and never changes.
const nqnPrefix = "nqn.2026-11.io.tidecache:"

// ReplicaNQN names the subsystem exporting one replica. It is derived from
// the replica's UUID, so a replica deleted and made again under the same
// volume name is a new subsystem and never mistaken for the old one.
func ReplicaNQN(replicaUUID string) string { return nqnPrefix + "replica:" + replicaUUID }

// IsReplicaNQN reports whether a subsystem NQN is a tidecache replica's.
func IsReplicaNQN(nqn string) bool { return strings.HasPrefix(nqn, nqnPrefix+"replica:") }

// HostNQN is the host NQN tidecache connects with from a node: the identity
// a replica's export admits (its allow-list holds this NQN alone).
func HostNQN(node string) string { return nqnPrefix + "node:" + node }

// maxNQNLen is the longest NQN the NVMe specification allows, in bytes.
const maxNQNLen = 223

// ExportNQN names the subsystem that exports a shared device (tidecached
// run --export NAME=DEVICE) to one node: one subsystem per export and
// host, so that fencing a node removes its subsystem and touches no
// other node's. A name too long for an NQN (node names may have 253
// characters) ends in a digest of the node's name instead; the host a
// subsystem serves is read from its allow-list, never parsed from here.
func ExportNQN(export, node string) string {
	nqn := ExportNQNPrefix(export) + node
	if len(nqn) <= maxNQNLen {
		return nqn
	}
	sum := sha256.Sum256([]byte(node))
	return ExportNQNPrefix(export) + "h-" + hex.EncodeToString(sum[:16])
}

// ExportNQNPrefix begins the NQN of every subsystem of one export; the
// ':' after the name keeps export "db" apart from export "db-2".
func ExportNQNPrefix(export string) string { return nqnPrefix + "export:" + export + ":" }

// IsExportNQN reports whether a subsystem NQN is one of a shared export's.
func IsExportNQN(nqn string) bool { return strings.HasPrefix(nqn, nqnPrefix+"export:") }

// exportNamespace is the namespace of ExportUUID's name-based UUIDs (a
// random UUID chosen once, like the NQN date, and never changed).
var exportNamespace = [16]byte{0x5d, 0x1c, 0x0e, 0x7a, 0x93, 0x2b, 0x4f, 0x61, 0xa8, 0x4e, 0x17, 0xc3, 0x6b, 0x90, 0xd2, 0x35}

// ExportUUID is the namespace UUID of a shared device's export: a SHA-1
// name-based UUID (RFC 9562 version 5) of the export's name, so every
// subsystem of the export, on every boot, presents the same namespace
// and every node finds the device by the same wwid, "uuid.<UUID>".
func ExportUUID(export string) string { return nameUUID(exportNamespace, export) }

// hostIDNamespace is the namespace of HostID's UUIDs (another random
// UUID chosen once).
var hostIDNamespace = [16]byte{0x8e, 0x42, 0x17, 0xd0, 0x3a, 0x65, 0x4c, 0x0b, 0x9f, 0x21, 0x6e, 0x88, 0xc4, 0x13, 0x57, 0xa9}

// HostID is the host identifier a node connects with under a host NQN: a
// name-based UUID of the NQN, the same on every connect. The kernel
// keeps one host per (NQN, ID) pair and, since 6.x (Debian's 6.12 does),
// refuses a connect whose ID is another NQN's: without an ID of its own,
// every connect would take the machine's default (/etc/nvme/hostid),
// which belongs to the machine's default NQN.
func HostID(hostNQN string) string { return nameUUID(hostIDNamespace, hostNQN) }

// nameUUID is a SHA-1 name-based UUID (RFC 9562 version 5) of name in
// namespace.
func nameUUID(namespace [16]byte, name string) string {
	h := sha1.New()
	h.Write(namespace[:])
	h.Write([]byte(name))
	var u [16]byte
	copy(u[:], h.Sum(nil))
	u[6] = u[6]&0x0f | 0x50 // version 5
	u[8] = u[8]&0x3f | 0x80 // RFC variant
	x := hex.EncodeToString(u[:])
	return x[:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:]
}

// NodeOfHostNQN returns the node a HostNQN names; ok is false for a host
// NQN tidecache did not make.
func NodeOfHostNQN(hostNQN string) (node string, ok bool) {
	node, ok = strings.CutPrefix(hostNQN, nqnPrefix+"node:")
	if !ok || node == "" {
		return "", false
	}
	return node, true
}
