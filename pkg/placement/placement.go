// SPDX-License-Identifier: Apache-2.0

// Package placement decides which node hosts a new volume when its spec
// names none. Only the elected leader runs it, so two nodes never claim
// the same volume; the choice is pure (inventory in, node out) and the
// leader records it in the spec with a revision-checked update.
package placement

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/tidecache/tidecache/pkg/api"
)

// ErrNoCapacity means no live node has a pool with room for the volume.
var ErrNoCapacity = errors.New("no node has room for the volume")

// Choice is where a volume goes.
type Choice struct {
	Node, Pool string
}

// Place picks the node and pool for a volume spec among live nodes: the
// pool must have origin space for the volume and SSD space for its caches
// (a spec naming a pool only matches pools of that name). Among those, the
// pool with the most free SSD space wins, which spreads cache load; ties go
// to the node name, so every leader decides the same way.
//
// A pool without SSDs (a node that has none) counts when two other nodes
// can keep the legs of the volume's write cache and it asks for no read
// cache (PoolFits); with no free SSD space of its own it comes last.
func Place(spec api.VolumeSpec, nodes []api.Node) (Choice, error) {
	return PlaceOn(spec, nodes, "")
}

// PlaceOn is Place among the pools of the named node only ("" for every
// node), nodes still being every live node (the peers a node without SSDs
// caches on).
func PlaceOn(spec api.VolumeSpec, nodes []api.Node, node string) (Choice, error) {
	type candidate struct {
		Choice
		ssdFree uint64
	}
	var cands []candidate
	need := spec.WriteCacheBytes + spec.ReadCacheBytes
	for _, n := range nodes {
		if node != "" && n.Name != node {
			continue
		}
		for _, p := range n.Pools {
			if spec.Pool != "" && p.Name != spec.Pool {
				continue
			}
			if !PoolFits(spec, n, p, nodes) {
				continue
			}
			cands = append(cands, candidate{Choice{Node: n.Name, Pool: p.Name}, p.SSDFreeBytes})
		}
	}
	if len(cands) == 0 {
		return Choice{}, fmt.Errorf("volume %s (%d bytes, %d bytes of cache): %w among %d live nodes", spec.Name, spec.SizeBytes, need, ErrNoCapacity, len(nodes))
	}
	sort.Slice(cands, func(i, j int) bool {
		if cands[i].ssdFree != cands[j].ssdFree {
			return cands[i].ssdFree > cands[j].ssdFree
		}
		if cands[i].Node != cands[j].Node {
			return cands[i].Node < cands[j].Node
		}
		return cands[i].Pool < cands[j].Pool
	})
	return cands[0].Choice, nil
}

// PlaceReplica picks where a peer-protected volume's replica goes among
// the live nodes, but those excluded (drained, fenced): a node other than
// the volume's own that serves replicas (ReplicaAddress), with a pool
// whose SSDs have room for the replica slice. For a volume on a shared
// origin, only a node the export is served to, as its exporter's record
// among nodes says (excluded or not): the volume fails over (or moves) to
// its replica's node, which must reach the origin, and the exporter never
// serves itself. A node in another fault domain than the owner's wins
// over one in the same domain (nodes without a domain count as their
// own); then the most free SSD space; then the node name, so every leader
// decides the same way.
func PlaceReplica(spec api.VolumeSpec, nodes []api.Node, excluded map[string]bool) (Choice, error) {
	return placeLeg(spec, nodes, excluded, []string{domainOf(spec.Node, nodes)})
}

// PlaceReplicas picks where both legs of a write cache on peers go, for a
// volume whose node has no SSD (CacheOnPeers): leg 1 as PlaceReplica
// does, then leg 0 the same way (spec.ReplicaNode0 and ReplicaPool0 as
// the user's choice) on a third node, which wins in a fault domain that
// neither the owner nor leg 1 is in. Both legs hold every acknowledged
// write, so losing any one node, or one domain when there are three,
// loses none.
func PlaceReplicas(spec api.VolumeSpec, nodes []api.Node, excluded map[string]bool) (leg0, leg1 Choice, err error) {
	if leg1, err = PlaceReplica(spec, nodes, excluded); err != nil {
		return Choice{}, Choice{}, err
	}
	placed := spec
	placed.ReplicaNode, placed.ReplicaPool = leg1.Node, leg1.Pool
	if leg0, err = PlaceLeg0(placed, nodes, excluded); err != nil {
		return Choice{}, Choice{}, err
	}
	return leg0, leg1, nil
}

// PlaceLeg0 picks where leg 0 of a write cache on peers goes, leg 1 being
// on spec.ReplicaNode (placing both, or re-protecting leg 0 after its node
// was lost): as PlaceReplica does, on neither the owner's node nor leg
// 1's, spec.ReplicaNode0 and ReplicaPool0 as the user's choice, a node in
// a fault domain neither the owner nor leg 1 is in first.
func PlaceLeg0(spec api.VolumeSpec, nodes []api.Node, excluded map[string]bool) (Choice, error) {
	without := map[string]bool{spec.ReplicaNode: true}
	for n, ex := range excluded {
		without[n] = without[n] || ex
	}
	spec0 := spec
	spec0.ReplicaNode, spec0.ReplicaPool = spec.ReplicaNode0, spec.ReplicaPool0
	spec0.ReplicaNode0, spec0.ReplicaPool0 = "", ""
	leg0, err := placeLeg(spec0, nodes, without, []string{domainOf(spec.Node, nodes), domainOf(spec.ReplicaNode, nodes)})
	if err != nil {
		return Choice{}, fmt.Errorf("leg 0 of the write cache on peers (leg 1 on node %s): %w", spec.ReplicaNode, err)
	}
	return leg0, nil
}

// PoolFits reports whether pool p of node n can hold spec's volume:
// origin space for it, and SSD space for its caches, or, for a pool
// without SSDs, no read cache and a write cache that two other nodes of
// nodes can keep (PlaceReplicas finds its legs).
func PoolFits(spec api.VolumeSpec, n api.Node, p api.PoolInventory, nodes []api.Node) bool {
	switch {
	case p.OriginFreeBytes < spec.SizeBytes:
		return false
	case !p.NoSSDs:
		return p.SSDFreeBytes >= spec.WriteCacheBytes+spec.ReadCacheBytes
	case spec.ReadCacheBytes > 0:
		return false
	case spec.WriteCacheBytes == 0:
		return true
	}
	owned := spec
	owned.Node, owned.Pool = n.Name, p.Name
	_, _, err := PlaceReplicas(owned, nodes, nil)
	return err == nil
}

// CacheOnPeers reports whether a volume's write cache goes on two peers:
// its node's pool (spec.Pool, or the node's only pool) has no SSD.
func CacheOnPeers(spec api.VolumeSpec, nodes []api.Node) bool {
	if spec.WriteCacheBytes == 0 {
		return false
	}
	for _, n := range nodes {
		if n.Name != spec.Node {
			continue
		}
		for _, p := range n.Pools {
			if p.Name == spec.Pool || spec.Pool == "" && len(n.Pools) == 1 {
				return p.NoSSDs
			}
		}
	}
	return false
}

// domainOf returns the fault domain of the named node, "" if it has none
// or is not among nodes.
func domainOf(name string, nodes []api.Node) string {
	for _, n := range nodes {
		if n.Name == name {
			return n.FaultDomain
		}
	}
	return ""
}

// placeLeg places one replica leg: see PlaceReplica. A candidate in one
// of the avoid domains loses to one outside them.
func placeLeg(spec api.VolumeSpec, nodes []api.Node, excluded map[string]bool, avoid []string) (Choice, error) {
	type candidate struct {
		Choice
		sameDomain bool
		ssdFree    uint64
	}
	var cands []candidate
	var served []string // for a shared origin, the nodes its export reaches
	if o := spec.SharedOrigin; o != nil {
		served = o.Hosts(nodes)
	}
	need := spec.WriteCacheBytes + 1<<20 // the leg's data and its dm-raid metadata
	for _, n := range nodes {
		if n.Name == spec.Node || n.Name == spec.ReplicaNode0 || n.ReplicaAddress == "" || excluded[n.Name] {
			continue // leg 0's node (a write cache on peers) never takes leg 1 too
		}
		if spec.ReplicaNode != "" && n.Name != spec.ReplicaNode {
			continue
		}
		if spec.SharedOrigin != nil && !slices.Contains(served, n.Name) {
			continue
		}
		for _, p := range n.Pools {
			if spec.ReplicaPool != "" && p.Name != spec.ReplicaPool {
				continue
			}
			if p.SSDFreeBytes < need {
				continue
			}
			same := n.FaultDomain != "" && slices.Contains(avoid, n.FaultDomain)
			cands = append(cands, candidate{Choice{Node: n.Name, Pool: p.Name}, same, p.SSDFreeBytes})
		}
	}
	if len(cands) == 0 {
		if o := spec.SharedOrigin; o != nil {
			return Choice{}, fmt.Errorf("replica of volume %s (%d bytes of write cache): %w: no other live node that export %s of node %s is served to (%s) serves replicas with a pool with that much free SSD space",
				spec.Name, spec.WriteCacheBytes, ErrNoCapacity, o.Export, o.Node, listOrNone(served))
		}
		return Choice{}, fmt.Errorf("replica of volume %s (%d bytes of write cache): %w: no other live node serving replicas has a pool with that much free SSD space", spec.Name, spec.WriteCacheBytes, ErrNoCapacity)
	}
	sort.Slice(cands, func(i, j int) bool {
		a, b := cands[i], cands[j]
		if a.sameDomain != b.sameDomain {
			return !a.sameDomain
		}
		if a.ssdFree != b.ssdFree {
			return a.ssdFree > b.ssdFree
		}
		if a.Node != b.Node {
			return a.Node < b.Node
		}
		return a.Pool < b.Pool
	})
	return cands[0].Choice, nil
}

// listOrNone joins names for a message, "none" when there are none.
func listOrNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}
