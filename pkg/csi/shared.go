// SPDX-License-Identifier: Apache-2.0

package csi

import (
	"cmp"
	"context"
	"errors"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/store"
)

// A StorageClass with ParamSharedOrigin provisions volumes on shared
// origins: each claim gets one whole export of that node (tidecached run
// --export) that no volume caches yet, whose name matches ParamExports
// and whose size meets the claim, the smallest such; the volume caches it
// on a node that sees it, with its write cache mirrored to another node,
// so it fails over and follows its pod (ControllerPublishVolume moves it,
// cache warm). The store's origin claim (store.ErrOriginTaken) keeps two
// claims off one export when two provisioners race; the loser takes the
// next. The volume reports the export's size, and every node that sees the
// export and has a pool as its topology. DeleteVolume deletes the spec,
// which frees the export for the next claim: its content is the next
// volume's to replace, which is what ParamExports says.

// createShared is CreateVolume for a class on shared origins: the volume
// name and the topology nodes (preferred first) are checked already.
func (c *controller) createShared(ctx context.Context, name string, r *csi.CapacityRange, params Parameters, nodes []string) (*csi.Volume, error) {
	for try := 0; ; try++ {
		spec, created, err := c.createOrFindShared(ctx, name, r, params, nodes)
		if errors.Is(err, store.ErrConflict) && try < conflictRetries {
			continue
		}
		if err != nil {
			return nil, err
		}
		live, _, _, err := c.st.ListNodes(ctx)
		if err != nil {
			return nil, err
		}
		size, hosts := exportOf(values(live), *spec.SharedOrigin)
		if size > 0 && !fits(size, r) {
			return nil, errorf(errExists, "volume %s exists on export %s of node %s, %d bytes, outside the capacity range asked (required %d, limit %d)",
				spec.Name, spec.SharedOrigin.Export, spec.SharedOrigin.Node, size, r.GetRequiredBytes(), r.GetLimitBytes())
		}
		vol := &csi.Volume{VolumeId: spec.Name, CapacityBytes: int64(size)}
		if len(hosts) == 0 {
			hosts = []string{spec.Node}
		}
		for _, h := range hosts {
			vol.AccessibleTopology = append(vol.AccessibleTopology, &csi.Topology{Segments: map[string]string{TopologyKey: h}})
		}
		vol.VolumeContext = map[string]string{contextInstance: strconv.FormatInt(created, 10)}
		if params.FSType != "" {
			vol.VolumeContext[ParamFSType] = params.FSType
		}
		return vol, nil
	}
}

// createOrFindShared returns the spec of volume name and the revision
// that created it: the existing one if it matches the parameters, else
// a new one on a free export.
func (c *controller) createOrFindShared(ctx context.Context, name string, r *csi.CapacityRange, params Parameters, nodes []string) (api.VolumeSpec, int64, error) {
	have, meta, err := c.st.GetVolumeSpec(ctx, name)
	switch {
	case err == nil:
		if why := params.mismatch(have); why != "" {
			return api.VolumeSpec{}, 0, errorf(errExists, "volume %s exists with other parameters: %s", have.Name, why)
		}
		return have, meta.CreateRevision, nil
	case !errors.Is(err, store.ErrNotFound):
		return api.VolumeSpec{}, 0, err
	}
	items, _, _, err := c.st.ListNodes(ctx)
	if err != nil {
		return api.VolumeSpec{}, 0, err
	}
	live := values(items)
	specs, _, _, err := c.st.ListVolumeSpecs(ctx)
	if err != nil {
		return api.VolumeSpec{}, 0, err
	}
	free, err := freeExports(live, specs, params, r)
	if err != nil {
		return api.VolumeSpec{}, 0, err
	}
	want := params.spec(name, 0)
	if len(nodes) == 0 {
		for _, n := range live {
			nodes = append(nodes, n.Name)
		}
	}
	var why []string
	for _, node := range nodes {
		choice, not := placeOn(want, live, node)
		if not != "" {
			why = append(why, not)
			continue
		}
		seen := false
		for _, e := range free {
			if !slices.Contains(e.Hosts, node) {
				continue
			}
			seen = true
			want.Node, want.Pool = choice.Node, choice.Pool
			want.SharedOrigin = &api.SharedOrigin{Node: params.SharedOrigin, Export: e.Name, Provisioned: true}
			if err := want.Validate(); err != nil {
				return api.VolumeSpec{}, 0, errorf(errInvalid, "volume %s: %v", name, err)
			}
			meta, err := c.st.CreateVolumeSpec(ctx, want)
			if errors.Is(err, store.ErrOriginTaken) {
				continue // another claim got it first
			}
			if err != nil {
				return api.VolumeSpec{}, 0, err
			}
			c.d.log.Info("volume spec written on a shared origin", "volume", name, "node", want.Node, "origin", params.SharedOrigin+"/"+e.Name,
				"size", e.SizeBytes)
			return want, meta.CreateRevision, nil
		}
		if !seen {
			why = append(why, node+": sees none of the free exports")
		}
	}
	return api.VolumeSpec{}, 0, errorf(errNoRoom, "volume %s: no node the topology allows can cache a free export of node %s (%s)",
		name, params.SharedOrigin, strings.Join(why, "; "))
}

// freeExports lists the exports of the class's node that a new volume may
// take: matching the class's pattern, healthy, cached by no volume, and of
// a size within the capacity range, smallest first.
func freeExports(live []api.Node, specs []store.Item[api.VolumeSpec], params Parameters, r *csi.CapacityRange) ([]api.ExportInventory, error) {
	i := slices.IndexFunc(live, func(n api.Node) bool { return n.Name == params.SharedOrigin })
	if i < 0 {
		return nil, errorf(errNoRoom, "node %s, which exports the class's shared origins, is not a live tidecache node", params.SharedOrigin)
	}
	taken := map[string]bool{}
	for _, it := range specs {
		if o := it.Value.SharedOrigin; o != nil && o.Node == params.SharedOrigin {
			taken[o.Export] = true
		}
	}
	var free []api.ExportInventory
	var matching int
	for _, e := range live[i].Exports {
		if ok, _ := path.Match(params.Exports, e.Name); !ok || e.Error != "" {
			continue
		}
		matching++
		if !taken[e.Name] && fits(e.SizeBytes, r) {
			free = append(free, e)
		}
	}
	if len(free) == 0 {
		return nil, errorf(errNoRoom, "node %s has no free export matching %s of %s (required %d, limit %d bytes): %d match, every one cached by a volume or of another size",
			params.SharedOrigin, ParamExports, params.Exports, r.GetRequiredBytes(), r.GetLimitBytes(), matching)
	}
	slices.SortFunc(free, func(a, b api.ExportInventory) int {
		return cmp.Or(cmp.Compare(a.SizeBytes, b.SizeBytes), cmp.Compare(a.Name, b.Name))
	})
	return free, nil
}

// exportOf returns the size of a shared origin and the nodes it is
// exported to that have a pool to cache it in, as the node records show.
func exportOf(live []api.Node, o api.SharedOrigin) (size uint64, hosts []string) {
	e, _ := o.Inventory(live)
	size, hosts = e.SizeBytes, slices.Clone(e.Hosts)
	hosts = slices.DeleteFunc(hosts, func(h string) bool {
		return !slices.ContainsFunc(live, func(n api.Node) bool { return n.Name == h && len(n.Pools) > 0 })
	})
	slices.Sort(hosts)
	return size, hosts
}

// sharedCapacity is GetCapacity for a class on shared origins: the free
// exports' sizes (on node only, when given, and only if it has room for
// the caches there), and the largest.
func sharedCapacity(live []api.Node, specs []store.Item[api.VolumeSpec], params Parameters, only string) (total, largest uint64) {
	free, err := freeExports(live, specs, params, nil)
	if err != nil {
		return 0, 0
	}
	if only != "" {
		if _, not := placeOn(params.spec("capacity", 0), live, only); not != "" {
			return 0, 0
		}
	}
	for _, e := range free {
		if only != "" && !slices.Contains(e.Hosts, only) {
			continue
		}
		total += e.SizeBytes
		largest = max(largest, e.SizeBytes)
	}
	return total, largest
}
