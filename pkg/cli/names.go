// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"context"
	"slices"

	"github.com/tidecache/tidecache/pkg/engine"
	"github.com/tidecache/tidecache/pkg/store"
)

// The names a command line can give, read where the command reads them:
// shell completion offers them (complete.go) and a name that does not
// exist gets the closest of them (suggest.go).

// volumeLister and poolLister are the parts of this node's engine that
// list its volumes and pools: *engine.Engine and nodeEngine.
type volumeLister interface {
	Volumes(ctx context.Context) ([]engine.VolumeInfo, error)
}

type poolLister interface {
	Pools(ctx context.Context) ([]engine.PoolInfo, error)
}

// localVolumeNames lists the volumes of every pool on this node.
func localVolumeNames(ctx context.Context, e volumeLister) ([]string, error) {
	vols, err := e.Volumes(ctx)
	var names []string
	for _, v := range vols {
		names = append(names, v.Name)
	}
	return names, err
}

// localPoolNames lists the pools on this node's devices.
func localPoolNames(ctx context.Context, e poolLister) ([]string, error) {
	pools, err := e.Pools(ctx)
	var names []string
	for _, p := range pools {
		names = append(names, p.Name)
	}
	return names, err
}

// clusterVolumeNames lists the volumes that have a spec in the cluster.
func clusterVolumeNames(ctx context.Context, st *store.Store) ([]string, error) {
	specs, _, _, err := st.ListVolumeSpecs(ctx)
	var names []string
	for _, s := range specs {
		names = append(names, s.Value.Name)
	}
	return names, err
}

// clusterPoolNames lists the pools that live nodes report, each once.
func clusterPoolNames(ctx context.Context, st *store.Store) ([]string, error) {
	nodes, _, _, err := st.ListNodes(ctx)
	var names []string
	for _, n := range nodes {
		for _, p := range n.Value.Pools {
			if !slices.Contains(names, p.Name) {
				names = append(names, p.Name)
			}
		}
	}
	return names, err
}

// liveNodeNames lists the nodes registered in the cluster.
func liveNodeNames(ctx context.Context, st *store.Store) ([]string, error) {
	nodes, _, _, err := st.ListNodes(ctx)
	var names []string
	for _, n := range nodes {
		names = append(names, n.Value.Name)
	}
	return names, err
}

// knownNodeNames lists the nodes `node drain` and `undrain` accept: the
// live ones and those with a spec, live or not.
func knownNodeNames(ctx context.Context, st *store.Store) ([]string, error) {
	names, err := liveNodeNames(ctx, st)
	if err != nil {
		return nil, err
	}
	specs, _, _, err := st.ListNodeSpecs(ctx)
	for _, s := range specs {
		if !slices.Contains(names, s.Value.Name) {
			names = append(names, s.Value.Name)
		}
	}
	return names, err
}

// policyNames lists the cluster's policies.
func policyNames(ctx context.Context, st *store.Store) ([]string, error) {
	items, _, _, err := st.ListPolicies(ctx)
	var names []string
	for _, it := range items {
		names = append(names, it.Value.Name)
	}
	return names, err
}
