// SPDX-License-Identifier: Apache-2.0

package csi

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/placement"
	"github.com/tidecache/tidecache/pkg/pool"
	"github.com/tidecache/tidecache/pkg/store"
)

// controller writes and removes volume specs; the daemons build and
// remove the volumes.
type controller struct {
	csi.UnimplementedControllerServer
	d  *Driver
	st *store.Store
}

// pollInterval is how often CreateVolume re-reads a spec while it waits
// for the leader to place it.
const pollInterval = 250 * time.Millisecond

// conflictRetries bounds the re-reads after a revision conflict.
const conflictRetries = 3

func (c *controller) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	rpc := func(t csi.ControllerServiceCapability_RPC_Type) *csi.ControllerServiceCapability {
		return &csi.ControllerServiceCapability{Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: t}}}
	}
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: []*csi.ControllerServiceCapability{
		rpc(csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME),
		rpc(csi.ControllerServiceCapability_RPC_GET_CAPACITY),
		rpc(csi.ControllerServiceCapability_RPC_EXPAND_VOLUME),
		rpc(csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME),
	}}, nil
}

// CreateVolume writes the volume's spec, or finds the spec a previous
// call with the same name wrote. With a topology requirement the spec
// names the first preferred, then requisite, node that has room; without
// one it names none and the call waits for the leader to place it.
func (c *controller) CreateVolume(ctx context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	if req.GetName() == "" {
		return nil, errorf(errInvalid, "name missing")
	}
	if err := checkCapabilities(req.GetVolumeCapabilities()); err != nil {
		return nil, err
	}
	if req.GetVolumeContentSource() != nil {
		return nil, errorf(errInvalid, "volume content source not supported: tidecache has no snapshots or clones")
	}
	params, err := ParseParameters(req.GetParameters())
	if err != nil {
		return nil, err
	}
	size, err := volumeSize(req.GetCapacityRange(), c.d.cfg.DefaultVolumeBytes)
	if err != nil {
		return nil, err
	}
	nodes, err := topologyNodes(req.GetAccessibilityRequirements())
	if err != nil {
		return nil, err
	}
	if params.SharedOrigin != "" {
		vol, err := c.createShared(ctx, VolumeName(req.GetName()), req.GetCapacityRange(), params, nodes)
		if err != nil {
			return nil, err
		}
		c.d.log.Info("volume ready for staging", "volume", vol.VolumeId, "csi_name", req.GetName(), "shared_origin", params.SharedOrigin)
		return &csi.CreateVolumeResponse{Volume: vol}, nil
	}
	want := params.spec(VolumeName(req.GetName()), size)
	if err := want.Validate(); err != nil {
		return nil, errorf(errInvalid, "volume %s: %v", want.Name, err)
	}
	var (
		spec    api.VolumeSpec
		created int64
	)
	for try := 0; ; try++ {
		spec, created, err = c.createOrFind(ctx, want, req.GetCapacityRange(), params, nodes)
		if !errors.Is(err, store.ErrConflict) || try == conflictRetries {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	if spec.Node == "" {
		if spec, err = c.waitPlaced(ctx, spec.Name); err != nil {
			return nil, err
		}
	}
	if len(nodes) > 0 && !slices.Contains(nodes, spec.Node) {
		return nil, errorf(errExists, "volume %s exists on node %s, which the topology requirement does not allow (%s)", spec.Name, spec.Node, strings.Join(nodes, ", "))
	}
	vol := &csi.Volume{
		VolumeId:           spec.Name,
		CapacityBytes:      int64(spec.SizeBytes),
		AccessibleTopology: []*csi.Topology{{Segments: map[string]string{TopologyKey: spec.Node}}},
	}
	// The spec's create revision tells this volume from an earlier one of
	// the same name; the node service keys the filesystem it makes to it.
	vol.VolumeContext = map[string]string{contextInstance: strconv.FormatInt(created, 10)}
	if params.FSType != "" {
		vol.VolumeContext[ParamFSType] = params.FSType
	}
	c.d.log.Info("volume ready for staging", "volume", spec.Name, "csi_name", req.GetName(), "node", spec.Node)
	return &csi.CreateVolumeResponse{Volume: vol}, nil
}

// createOrFind returns the spec of want.Name and the etcd revision that
// created it: the existing one if it is compatible with the request, else
// a new one it writes. ErrConflict means another writer got there between
// the read and the write.
func (c *controller) createOrFind(ctx context.Context, want api.VolumeSpec, r *csi.CapacityRange, params Parameters, nodes []string) (api.VolumeSpec, int64, error) {
	have, meta, err := c.st.GetVolumeSpec(ctx, want.Name)
	switch {
	case err == nil:
		if why := params.mismatch(have); why != "" {
			return api.VolumeSpec{}, 0, errorf(errExists, "volume %s exists with other parameters: %s", have.Name, why)
		}
		if !fits(have.SizeBytes, r) {
			return api.VolumeSpec{}, 0, errorf(errExists, "volume %s exists with %d bytes, outside the capacity range asked (required %d, limit %d)",
				have.Name, have.SizeBytes, r.GetRequiredBytes(), r.GetLimitBytes())
		}
		return have, meta.CreateRevision, nil
	case !errors.Is(err, store.ErrNotFound):
		return api.VolumeSpec{}, 0, err
	}
	live, _, _, err := c.st.ListNodes(ctx)
	if err != nil {
		return api.VolumeSpec{}, 0, err
	}
	choice, err := choose(want, values(live), nodes)
	if err != nil {
		return api.VolumeSpec{}, 0, err
	}
	if len(nodes) > 0 {
		want.Node, want.Pool = choice.Node, choice.Pool
	}
	meta, err = c.st.CreateVolumeSpec(ctx, want)
	if err != nil {
		return api.VolumeSpec{}, 0, err
	}
	c.d.log.Info("volume spec written", "volume", want.Name, "node", want.Node, "size", want.SizeBytes)
	return want, meta.CreateRevision, nil
}

// choose picks where a new volume goes: among the nodes the topology
// requirement lists, in its order, the first whose pool has room, as the
// leader's placement would judge it; without a requirement it checks
// only that some live node has room, and the leader chooses.
func choose(spec api.VolumeSpec, live []api.Node, nodes []string) (placement.Choice, error) {
	if len(nodes) == 0 {
		return placement.Place(spec, live)
	}
	var why []string
	for _, name := range nodes {
		choice, not := placeOn(spec, live, name)
		if not == "" {
			return choice, nil
		}
		why = append(why, not)
	}
	return placement.Choice{}, errorf(errNoRoom, "volume %s (%s, %s of cache): no node the topology allows can hold it (%s)",
		spec.Name, pool.FormatBytes(spec.SizeBytes), pool.FormatBytes(spec.WriteCacheBytes+spec.ReadCacheBytes), strings.Join(why, "; "))
}

// placeOn places spec on the named node as the leader's placement would,
// or says why it cannot go there.
func placeOn(spec api.VolumeSpec, live []api.Node, node string) (placement.Choice, string) {
	i := slices.IndexFunc(live, func(n api.Node) bool { return n.Name == node })
	if i < 0 {
		return placement.Choice{}, node + ": not a live tidecache node"
	}
	choice, err := placement.PlaceOn(spec, live, node)
	if err != nil {
		return placement.Choice{}, node + ": no pool with room"
	}
	return choice, ""
}

// waitPlaced re-reads a spec until the leader has named its node, within
// the call's deadline and PlacementTimeout.
func (c *controller) waitPlaced(ctx context.Context, name string) (api.VolumeSpec, error) {
	ctx, cancel := context.WithTimeout(ctx, c.d.cfg.PlacementTimeout)
	defer cancel()
	for {
		spec, _, err := c.st.GetVolumeSpec(ctx, name)
		if err == nil && spec.Node != "" {
			return spec, nil
		}
		if err != nil && ctx.Err() == nil {
			return api.VolumeSpec{}, err
		}
		select {
		case <-ctx.Done():
			return api.VolumeSpec{}, fmt.Errorf("volume %s: its spec is written, but no leader placed it on a node in time (is a tidecached running and leading?): %w", name, ctx.Err())
		case <-time.After(pollInterval):
		}
	}
}

// DeleteVolume deletes the spec; the volume's node removes the volume
// once its cache is clean. An unknown volume is deleted already.
func (c *controller) DeleteVolume(ctx context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	id := req.GetVolumeId()
	if id == "" {
		return nil, errorf(errInvalid, "volume ID missing")
	}
	if pool.ValidateName("volume", id) != nil {
		return &csi.DeleteVolumeResponse{}, nil // no volume can have this ID
	}
	for try := 0; ; try++ {
		_, meta, err := c.st.GetVolumeSpec(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			return &csi.DeleteVolumeResponse{}, nil
		}
		if err != nil {
			return nil, err
		}
		err = c.st.DeleteVolumeSpec(ctx, id, meta.ModRevision)
		switch {
		case err == nil, errors.Is(err, store.ErrNotFound):
			c.d.log.Info("volume spec deleted", "volume", id)
			return &csi.DeleteVolumeResponse{}, nil
		case !errors.Is(err, store.ErrConflict) || try == conflictRetries:
			return nil, err
		}
	}
}

func (c *controller) ValidateVolumeCapabilities(ctx context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	id := req.GetVolumeId()
	if id == "" {
		return nil, errorf(errInvalid, "volume ID missing")
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, errorf(errInvalid, "volume capabilities missing")
	}
	if pool.ValidateName("volume", id) != nil {
		return nil, errorf(errNotFound, "volume %q: no such volume", id)
	}
	spec, _, err := c.st.GetVolumeSpec(ctx, id)
	if err != nil {
		return nil, err
	}
	if err := checkCapabilities(req.GetVolumeCapabilities()); err != nil {
		return &csi.ValidateVolumeCapabilitiesResponse{Message: err.Error()}, nil
	}
	if len(req.GetParameters()) > 0 {
		params, err := ParseParameters(req.GetParameters())
		if err != nil {
			return &csi.ValidateVolumeCapabilitiesResponse{Message: err.Error()}, nil
		}
		if why := params.mismatch(spec); why != "" {
			return &csi.ValidateVolumeCapabilitiesResponse{Message: "volume " + id + " differs from the parameters: " + why}, nil
		}
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext:      req.GetVolumeContext(),
		VolumeCapabilities: req.GetVolumeCapabilities(),
		Parameters:         req.GetParameters(),
	}}, nil
}

// GetCapacity reports the origin space of the pools whose SSDs have room
// for the caches the parameters ask for, on the node the topology names
// or on every live node: what the daemons last published in their
// inventories.
func (c *controller) GetCapacity(ctx context.Context, req *csi.GetCapacityRequest) (*csi.GetCapacityResponse, error) {
	params, err := ParseParameters(req.GetParameters())
	if err != nil {
		return nil, err
	}
	for _, vc := range req.GetVolumeCapabilities() {
		if checkCapability(vc) != nil {
			return &csi.GetCapacityResponse{}, nil // none for volumes it cannot make
		}
	}
	only := ""
	if top := req.GetAccessibleTopology(); top != nil {
		only = top.GetSegments()[TopologyKey]
		if only == "" {
			return nil, errorf(errInvalid, "accessible topology without the %s segment", TopologyKey)
		}
	}
	live, _, _, err := c.st.ListNodes(ctx)
	if err != nil {
		return nil, err
	}
	if params.SharedOrigin != "" {
		specs, _, _, err := c.st.ListVolumeSpecs(ctx)
		if err != nil {
			return nil, err
		}
		avail, largest := sharedCapacity(values(live), specs, params, only)
		return &csi.GetCapacityResponse{AvailableCapacity: int64(avail), MaximumVolumeSize: wrapInt64(largest)}, nil
	}
	avail, largest := capacity(values(live), only, api.VolumeSpec{WriteCacheBytes: params.WriteCacheBytes, ReadCacheBytes: params.ReadCacheBytes})
	return &csi.GetCapacityResponse{
		AvailableCapacity: int64(avail),
		MaximumVolumeSize: wrapInt64(largest),
		MinimumVolumeSize: wrapInt64(pool.MinVolumeBytes),
	}, nil
}

// capacity sums the origin free space of node's pools (every node's when
// node is empty) that can hold the caches of caches (a StorageClass's,
// placement.PoolFits: on their SSDs, or on two peers' for a node without
// SSDs), and returns the largest of them.
func capacity(nodes []api.Node, node string, caches api.VolumeSpec) (total, largest uint64) {
	for _, n := range nodes {
		if node != "" && n.Name != node {
			continue
		}
		for _, p := range n.Pools {
			if !placement.PoolFits(caches, n, p, nodes) {
				continue
			}
			total += p.OriginFreeBytes
			largest = max(largest, p.OriginFreeBytes)
		}
	}
	return total, largest
}

// volumeSize turns a capacity range into the size to create: the
// required bytes (the default when none), rounded up to the pool's 1 MiB
// allocation unit and raised to the smallest volume, within the limit.
func volumeSize(r *csi.CapacityRange, def uint64) (uint64, error) {
	req, limit := r.GetRequiredBytes(), r.GetLimitBytes()
	if req < 0 || limit < 0 {
		return 0, errorf(errInvalid, "capacity range: negative bytes (required %d, limit %d)", req, limit)
	}
	if limit > 0 && req > limit {
		return 0, errorf(errInvalid, "capacity range: required %d bytes above the limit of %d", req, limit)
	}
	size := uint64(req)
	if size == 0 {
		size = def
		if limit > 0 {
			size = min(size, uint64(limit))
		}
	}
	size = max(size, pool.MinVolumeBytes)
	const unit = pool.Alignment * pool.SectorSize
	size = pool.BytesToSectors(size) * pool.SectorSize
	if limit > 0 && size > uint64(limit) {
		return 0, errorf(errOutOfRange, "capacity range: a volume is a multiple of %s and at least %s; the limit of %d bytes allows none",
			pool.FormatBytes(unit), pool.FormatBytes(pool.MinVolumeBytes), limit)
	}
	return size, nil
}

// fits reports whether a volume of size bytes meets the range.
func fits(size uint64, r *csi.CapacityRange) bool {
	if req := r.GetRequiredBytes(); req > 0 && size < uint64(req) {
		return false
	}
	if limit := r.GetLimitBytes(); limit > 0 && size > uint64(limit) {
		return false
	}
	return true
}

// topologyNodes returns the node names a topology requirement allows,
// preferred ones first in their order, then the requisite ones; nil when
// there is no requirement.
func topologyNodes(req *csi.TopologyRequirement) ([]string, error) {
	var out []string
	for _, list := range [][]*csi.Topology{req.GetPreferred(), req.GetRequisite()} {
		for _, t := range list {
			name, ok := t.GetSegments()[TopologyKey]
			if !ok {
				return nil, errorf(errInvalid, "topology %v has no %s segment", t.GetSegments(), TopologyKey)
			}
			if err := api.ValidateNodeName(name); err != nil {
				return nil, errorf(errInvalid, "topology segment %s: %v", TopologyKey, err)
			}
			if !slices.Contains(out, name) {
				out = append(out, name)
			}
		}
	}
	// A preferred node outside a non-empty requisite list is not allowed.
	if requisite := req.GetRequisite(); len(requisite) > 0 {
		out = slices.DeleteFunc(out, func(name string) bool {
			return !slices.ContainsFunc(requisite, func(t *csi.Topology) bool { return t.GetSegments()[TopologyKey] == name })
		})
	}
	return out, nil
}

func values(items []store.Item[api.Node]) []api.Node {
	out := make([]api.Node, 0, len(items))
	for _, it := range items {
		out = append(out, it.Value)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func wrapInt64(v uint64) *wrapperspb.Int64Value { return wrapperspb.Int64(int64(v)) }
