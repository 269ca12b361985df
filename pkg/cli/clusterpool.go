// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/tidecache/tidecache/pkg/api"
)

// The cluster's cache pool is the SSDs of every live node: a volume's
// write cache may be mirrored onto another node's SSD (protect peer), so
// the space a volume can get is the cluster's, not its node's alone.
// `tidectl pool show --etcd-endpoints` shows it from the nodes' records.

// clusterPoolRow is one pool of one node in the cluster's view.
type clusterPoolRow struct {
	Node string `json:"node"`
	Pool string `json:"pool"`
	// OriginFreeBytes is the free space of the pool's HDD array.
	OriginFreeBytes uint64 `json:"origin_free_bytes"`
	// SSDs and SSDBytes count the pool's SSDs on its node; 0 for a pool
	// of HDDs alone.
	SSDs     int    `json:"ssds"`
	SSDBytes uint64 `json:"ssd_bytes"`
	// SSDFreeBytes is the SSD space still free for caches and replicas.
	SSDFreeBytes uint64 `json:"ssd_free_bytes"`
	// Replicas and ReplicaBytes are the slices the pool keeps of other
	// nodes' write caches.
	Replicas     int    `json:"replicas"`
	ReplicaBytes uint64 `json:"replica_bytes"`
}

// clusterPoolView is the cluster's cache pool: every pool of every live
// node, and the totals.
type clusterPoolView struct {
	Pools []clusterPoolRow `json:"pools"`
	// Nodes counts the live nodes, NodesWithSSDs those whose pools have
	// SSDs.
	Nodes         int    `json:"nodes"`
	NodesWithSSDs int    `json:"nodes_with_ssds"`
	SSDs          int    `json:"ssds"`
	SSDBytes      uint64 `json:"ssd_bytes"`
	SSDFreeBytes  uint64 `json:"ssd_free_bytes"`
	ReplicaBytes  uint64 `json:"replica_bytes"`
}

// newClusterPoolView sums the nodes' records, keeping the pools named
// name ("" for every pool).
func newClusterPoolView(nodes []api.Node, name string) clusterPoolView {
	v := clusterPoolView{Pools: []clusterPoolRow{}, Nodes: len(nodes)}
	for _, n := range nodes {
		withSSD := false
		for _, p := range n.Pools {
			if name != "" && p.Name != name {
				continue
			}
			row := clusterPoolRow{Node: n.Name, Pool: p.Name, OriginFreeBytes: p.OriginFreeBytes, SSDFreeBytes: p.SSDFreeBytes,
				SSDs: p.SSDs, SSDBytes: p.SSDBytes}
			if p.SSDs == 0 && !p.NoSSDs {
				// An older daemon's record counts no members: its SSD
				// inventory (the disks it reads health from) does.
				for _, s := range n.SSDs {
					if s.Pool == p.Name {
						row.SSDs++
						row.SSDBytes += s.SizeBytes
					}
				}
			}
			for _, r := range n.Replicas {
				if r.Pool == p.Name {
					row.Replicas++
					row.ReplicaBytes += r.SizeBytes
				}
			}
			withSSD = withSSD || row.SSDs > 0
			v.SSDs += row.SSDs
			v.SSDBytes += row.SSDBytes
			v.SSDFreeBytes += row.SSDFreeBytes
			v.ReplicaBytes += row.ReplicaBytes
			v.Pools = append(v.Pools, row)
		}
		if withSSD {
			v.NodesWithSSDs++
		}
	}
	slices.SortFunc(v.Pools, func(a, b clusterPoolRow) int {
		return cmp.Or(cmp.Compare(a.Node, b.Node), cmp.Compare(a.Pool, b.Pool))
	})
	return v
}

// showClusterPools prints the cluster's cache pool (pool show with
// --etcd-endpoints), the pools named name or all of them.
func (g *Globals) showClusterPools(ctx context.Context, name string) error {
	st, err := g.store(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	items, _, _, err := st.ListNodes(ctx)
	if err != nil {
		return err
	}
	nodes := make([]api.Node, 0, len(items))
	for _, it := range items {
		nodes = append(nodes, it.Value)
	}
	v := newClusterPoolView(nodes, name)
	if g.JSON() {
		return g.Print(v)
	}
	if len(v.Pools) == 0 {
		if name != "" {
			return fmt.Errorf("no live node has a pool named %s (tidectl node list shows the nodes and their pools)", name)
		}
		fmt.Fprintf(g.Stdout, "no pools on the %d live nodes; create one on a node with `tidectl pool create`\n", v.Nodes)
		return nil
	}
	t := newTable(g.Stdout, "NODE", "POOL", "ORIGIN FREE", "SSDS", "SSD SIZE", "SSD FREE", "REPLICAS KEPT")
	for _, r := range v.Pools {
		ssdSize, ssdFree, replicas := "-", "-", "-"
		if r.SSDs > 0 {
			ssdSize, ssdFree = size(r.SSDBytes), size(r.SSDFreeBytes)
			replicas = strconv.Itoa(r.Replicas)
			if r.Replicas > 0 {
				replicas += " (" + size(r.ReplicaBytes) + ")"
			}
		}
		t.row(r.Node, r.Pool, size(r.OriginFreeBytes), strconv.Itoa(r.SSDs), ssdSize, ssdFree, replicas)
	}
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintf(g.Stdout, "cache pool: %d SSDs on %d of %d live nodes, %s of %s free; %s of that space keeps replicas of other nodes' write caches (tidectl node list says whose)\n",
		v.SSDs, v.NodesWithSSDs, v.Nodes, size(v.SSDFreeBytes), size(v.SSDBytes), size(v.ReplicaBytes))
	return nil
}
