package nvmeof

import "strings"

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
