// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"strings"
	"testing"

	"github.com/tidecache/tidecache/pkg/pool"
)

// TestProtectionLine checks the "Protection:" line of volume show says
// what an operator must know first: no copy, a rebuild, a degraded
// mirror, and writes held on a peer leg (the volume's writes wait).
func TestProtectionLine(t *testing.T) {
	peer := string(pool.ProtectPeer)
	for _, c := range []struct {
		name string
		v    Volume
		want string
	}{
		{"unprotected", Volume{Name: "db"}, "NONE: one copy on one SSD"},
		{"peer in sync", Volume{Name: "db", Protection: peer, PeerNode: "b", Mirror: &Mirror{Health: "AA", Copies: 2}},
			"peer: mirrored on this node's SSD and on b's, over NVMe/TCP, legs AA"},
		{"peer degraded", Volume{Name: "db", Protection: peer, PeerNode: "b", Mirror: &Mirror{Health: "AD", Copies: 1, Degraded: true}},
			"peer, DEGRADED: legs AD, 1 copy of the dirty blocks; the daemon attaches the peer leg again when b answers"},
		{"peer failing writes, held", Volume{Name: "db", Protection: peer, PeerNode: "b", Mirror: &Mirror{Health: "AA", Copies: 2, PeerHeld: 3}},
			"peer, WAITING: 3 write(s) b failed are held on its leg, unacknowledged, until it takes them or the replica is recorded outdated in etcd"},
		{"on peers in sync", Volume{Name: "db", Protection: peer, PeerNode0: "c", PeerNode: "b", Mirror: &Mirror{Health: "AA", Copies: 2}},
			"peer: on peers: mirrored on c's SSD and on b's, over NVMe/TCP (this node has no SSD), legs AA"},
		{"on peers, leg 0 gone", Volume{Name: "db", Protection: peer, PeerNode0: "c", PeerNode: "b", Mirror: &Mirror{Health: "DA", Copies: 1, Degraded: true}},
			"peer, DEGRADED: legs DA, 1 copy of the dirty blocks; the daemon attaches the peer leg again when c answers"},
		{"local rebuilding", Volume{Name: "db", Protection: string(pool.ProtectLocal), Mirror: &Mirror{Health: "Aa", Copies: 1, Degraded: true, SyncAction: "recover", SyncPercent: 42}},
			"local, DEGRADED: legs Aa, rebuilding a leg, 42.0% done"},
	} {
		if got := protection(c.v); !strings.HasPrefix(got, c.want) {
			t.Errorf("%s:\n got  %s\n want %s…", c.name, got, c.want)
		}
	}
}
