// SPDX-License-Identifier: Apache-2.0

package csi_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tidecache/tidecache/pkg/api"
	tccsi "github.com/tidecache/tidecache/pkg/csi"
	"github.com/tidecache/tidecache/pkg/placement"
	"github.com/tidecache/tidecache/pkg/store"
)

// TestCreateVolume: WaitForFirstConsumer requests, the checks of every
// field, and the spec each successful call leaves in etcd.
func TestCreateVolume(t *testing.T) {
	st := openStore(t)
	register(t, st, twoNodes()...)
	c := serve(t, tccsi.Config{Store: st})
	tests := []struct {
		name   string
		modify func(*csi.CreateVolumeRequest)
		code   codes.Code
		msg    string // in the error message
		want   api.VolumeSpec
	}{
		{name: "preferred node", modify: func(r *csi.CreateVolumeRequest) {
			r.AccessibilityRequirements = &csi.TopologyRequirement{Requisite: onNode("n1", "n2"), Preferred: onNode("n2", "n1")}
		}, want: api.VolumeSpec{Name: "v", Node: "n2", Pool: "small", SizeBytes: gi, WriteCacheBytes: 64 * mi, Mode: "writeback"}},
		{name: "preferred node without room: next allowed", modify: func(r *csi.CreateVolumeRequest) {
			r.Parameters["writeCache"] = "512Mi"
			r.AccessibilityRequirements = &csi.TopologyRequirement{Requisite: onNode("n1", "n2"), Preferred: onNode("n2")}
		}, want: api.VolumeSpec{Name: "v", Node: "n1", Pool: "tank", SizeBytes: gi, WriteCacheBytes: 512 * mi, Mode: "writeback"}},
		{name: "all parameters", modify: func(r *csi.CreateVolumeRequest) {
			r.Parameters = map[string]string{"writeCache": "32M", "readCache": "64Mi", "readBlockSize": "128Ki", "mode": "writethrough",
				"protect": "local", "fsType": "xfs", "csi.storage.k8s.io/pvc/name": "data", "csi.storage.k8s.io/pvc/namespace": "shop"}
			r.CapacityRange = &csi.CapacityRange{RequiredBytes: 100<<20 + 1}
			r.AccessibilityRequirements = &csi.TopologyRequirement{Requisite: onNode("n1")}
		}, want: api.VolumeSpec{Name: "v", Node: "n1", Pool: "tank", SizeBytes: 101 * mi, WriteCacheBytes: 32 * mi, ReadCacheBytes: 64 * mi,
			ReadBlockSize: 128 << 10, Mode: "writethrough", Protect: "local", Claim: &api.Claim{Namespace: "shop", Name: "data"}}},
		{name: "no room on the requisite node", modify: func(r *csi.CreateVolumeRequest) {
			r.Parameters["writeCache"] = "512Mi"
			r.AccessibilityRequirements = &csi.TopologyRequirement{Requisite: onNode("n2")}
		}, code: codes.ResourceExhausted, msg: "n2: no pool with room"},
		{name: "unknown node", modify: func(r *csi.CreateVolumeRequest) {
			r.AccessibilityRequirements = &csi.TopologyRequirement{Requisite: onNode("n9")}
		}, code: codes.ResourceExhausted, msg: "n9: not a live tidecache node"},
		{name: "topology without our key", modify: func(r *csi.CreateVolumeRequest) {
			r.AccessibilityRequirements = &csi.TopologyRequirement{Requisite: []*csi.Topology{{Segments: map[string]string{"zone": "a"}}}}
		}, code: codes.InvalidArgument, msg: tccsi.TopologyKey},
		{name: "no name", modify: func(r *csi.CreateVolumeRequest) { r.Name = "" }, code: codes.InvalidArgument, msg: "name missing"},
		{name: "no capability", modify: func(r *csi.CreateVolumeRequest) { r.VolumeCapabilities = nil }, code: codes.InvalidArgument},
		{name: "multi-node access", modify: func(r *csi.CreateVolumeRequest) {
			r.VolumeCapabilities[0].AccessMode.Mode = csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER
		}, code: codes.InvalidArgument, msg: "MULTI_NODE_MULTI_WRITER"},
		{name: "unknown filesystem", modify: func(r *csi.CreateVolumeRequest) {
			r.VolumeCapabilities[0].GetMount().FsType = "btrfs"
		}, code: codes.InvalidArgument, msg: "btrfs"},
		{name: "bad parameter", modify: func(r *csi.CreateVolumeRequest) { r.Parameters["writeCache"] = "lots" },
			code: codes.InvalidArgument, msg: `writeCache "lots"`},
		{name: "snapshot source", modify: func(r *csi.CreateVolumeRequest) {
			r.VolumeContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: "s"}}}
		}, code: codes.InvalidArgument, msg: "snapshots"},
		{name: "limit below the smallest volume", modify: func(r *csi.CreateVolumeRequest) {
			r.CapacityRange = &csi.CapacityRange{LimitBytes: 1 << 20}
		}, code: codes.OutOfRange},
		{name: "required above limit", modify: func(r *csi.CreateVolumeRequest) {
			r.CapacityRange = &csi.CapacityRange{RequiredBytes: 2 * int64(gi), LimitBytes: int64(gi)}
		}, code: codes.InvalidArgument},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			csiName := "pvc-" + strings.Repeat("0", 7) + string(rune('a'+i))
			req := &csi.CreateVolumeRequest{
				Name: csiName, VolumeCapabilities: []*csi.VolumeCapability{mountCap()},
				Parameters: map[string]string{"writeCache": "64Mi", "mode": "writeback"},
			}
			tt.modify(req)
			resp, err := c.ctl.CreateVolume(testCtx(t), req)
			wantCode(t, err, tt.code)
			if err != nil {
				if !strings.Contains(status.Convert(err).Message(), tt.msg) {
					t.Fatalf("message %q lacks %q", status.Convert(err).Message(), tt.msg)
				}
				if _, _, err := st.GetVolumeSpec(testCtx(t), csiName); !errors.Is(err, store.ErrNotFound) {
					t.Fatalf("a refused request left a spec (or %v)", err)
				}
				return
			}
			v := resp.GetVolume()
			if v.GetVolumeId() != csiName || v.GetCapacityBytes() != int64(tt.want.SizeBytes) {
				t.Fatalf("volume %s of %d bytes, want %s of %d", v.GetVolumeId(), v.GetCapacityBytes(), csiName, tt.want.SizeBytes)
			}
			if top := v.GetAccessibleTopology(); len(top) != 1 || top[0].GetSegments()[tccsi.TopologyKey] != tt.want.Node {
				t.Fatalf("accessible topology %v, want node %s", top, tt.want.Node)
			}
			spec, _, err := st.GetVolumeSpec(testCtx(t), csiName)
			if err != nil {
				t.Fatal(err)
			}
			tt.want.Name = csiName
			if !reflect.DeepEqual(spec, tt.want) {
				t.Fatalf("spec in etcd:\n%+v\nwant\n%+v", spec, tt.want)
			}
			if inst := v.GetVolumeContext()["csi.tidecache.io/instance"]; inst == "" || inst == "0" {
				t.Fatalf("volume context %v has no instance", v.GetVolumeContext())
			}
			if fs := req.Parameters["fsType"]; fs != "" && v.GetVolumeContext()["fsType"] != fs {
				t.Fatalf("volume context %v lacks fsType %s", v.GetVolumeContext(), fs)
			}
		})
	}
}

// TestCreateVolumeIdempotent: the same request returns the same volume
// and writes nothing new; a request under the same name that the volume
// does not satisfy is AlreadyExists.
func TestCreateVolumeIdempotent(t *testing.T) {
	st := openStore(t)
	register(t, st, twoNodes()...)
	c := serve(t, tccsi.Config{Store: st})
	name := "Sanity-Volume_" + strings.Repeat("x", 114) // 128 characters, not a tidecache name
	base := func() *csi.CreateVolumeRequest {
		return &csi.CreateVolumeRequest{
			Name: name, VolumeCapabilities: []*csi.VolumeCapability{mountCap()},
			CapacityRange:             &csi.CapacityRange{RequiredBytes: 32 << 20, LimitBytes: 32 << 20},
			Parameters:                map[string]string{"writeCache": "16Mi"},
			AccessibilityRequirements: &csi.TopologyRequirement{Requisite: onNode("n1")},
		}
	}
	first, err := c.ctl.CreateVolume(testCtx(t), base())
	wantCode(t, err, codes.OK)
	id := first.GetVolume().GetVolumeId()
	if id != tccsi.VolumeName(name) || len(id) > 48 {
		t.Fatalf("volume ID %q, want VolumeName(%q) = %q", id, name, tccsi.VolumeName(name))
	}
	_, meta, err := st.GetVolumeSpec(testCtx(t), id)
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.ctl.CreateVolume(testCtx(t), base())
	wantCode(t, err, codes.OK)
	if again.GetVolume().GetVolumeId() != id || again.GetVolume().GetCapacityBytes() != 32<<20 {
		t.Fatalf("second create: %v, want %s of 32 MiB", again.GetVolume(), id)
	}
	const instance = "csi.tidecache.io/instance"
	if a, b := first.GetVolume().GetVolumeContext()[instance], again.GetVolume().GetVolumeContext()[instance]; a == "" || a != b {
		t.Fatalf("instances %q and %q: want the same one for the same volume", a, b)
	}
	if _, meta2, _ := st.GetVolumeSpec(testCtx(t), id); meta2.ModRevision != meta.ModRevision {
		t.Fatalf("second create rewrote the spec (revision %d -> %d)", meta.ModRevision, meta2.ModRevision)
	}
	for _, tt := range []struct {
		name   string
		modify func(*csi.CreateVolumeRequest)
		msg    string
	}{
		{"larger", func(r *csi.CreateVolumeRequest) { r.CapacityRange = &csi.CapacityRange{RequiredBytes: 64 << 20} }, "outside the capacity range"},
		{"other write cache", func(r *csi.CreateVolumeRequest) { r.Parameters["writeCache"] = "32Mi" }, "writeCache 16 MiB, asked 32 MiB"},
		{"other mode", func(r *csi.CreateVolumeRequest) { r.Parameters["mode"] = "writethrough" }, "mode unset, asked writethrough"},
		{"other node", func(r *csi.CreateVolumeRequest) {
			r.AccessibilityRequirements = &csi.TopologyRequirement{Requisite: onNode("n2")}
		}, "exists on node n1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req := base()
			tt.modify(req)
			_, err := c.ctl.CreateVolume(testCtx(t), req)
			wantCode(t, err, codes.AlreadyExists)
			if !strings.Contains(status.Convert(err).Message(), tt.msg) {
				t.Fatalf("message %q lacks %q", status.Convert(err).Message(), tt.msg)
			}
		})
	}
	// A smaller request the volume still satisfies is the same volume.
	req := base()
	req.CapacityRange = &csi.CapacityRange{RequiredBytes: 16 << 20}
	_, err = c.ctl.CreateVolume(testCtx(t), req)
	wantCode(t, err, codes.OK)
}

// TestCreateVolumeImmediate: without a topology requirement the spec names
// no node and CreateVolume returns once the leader placed it; with no
// leader it gives up at PlacementTimeout, the spec stays, and a retry
// returns the volume once it is placed.
func TestCreateVolumeImmediate(t *testing.T) {
	st := openStore(t)
	nodes := twoNodes()
	register(t, st, nodes...)
	c := serve(t, tccsi.Config{Store: st, PlacementTimeout: 2 * time.Second})
	req := func(name string) *csi.CreateVolumeRequest {
		return &csi.CreateVolumeRequest{Name: name, VolumeCapabilities: []*csi.VolumeCapability{mountCap()},
			CapacityRange: &csi.CapacityRange{RequiredBytes: int64(gi)}, Parameters: map[string]string{"writeCache": "256Mi"}}
	}

	_, err := c.ctl.CreateVolume(testCtx(t), req("unled"))
	wantCode(t, err, codes.DeadlineExceeded)
	spec, meta, err := st.GetVolumeSpec(testCtx(t), "unled")
	if err != nil || spec.Node != "" {
		t.Fatalf("after the timeout: spec %+v, %v; want it kept, unplaced", spec, err)
	}
	lead(t, st, nodes, "unled", meta.ModRevision)
	resp, err := c.ctl.CreateVolume(testCtx(t), req("unled"))
	wantCode(t, err, codes.OK)
	if n := resp.GetVolume().GetAccessibleTopology()[0].GetSegments()[tccsi.TopologyKey]; n != "n1" {
		t.Fatalf("retry after placement: node %q, want n1", n)
	}

	// The leader places it while the call waits.
	go func() {
		for {
			_, meta, err := st.GetVolumeSpec(t.Context(), "led")
			if err == nil {
				lead(t, st, nodes, "led", meta.ModRevision)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	resp, err = c.ctl.CreateVolume(testCtx(t), req("led"))
	wantCode(t, err, codes.OK)
	if n := resp.GetVolume().GetAccessibleTopology()[0].GetSegments()[tccsi.TopologyKey]; n != "n1" {
		t.Fatalf("placed while waiting: node %q, want n1", n)
	}

	// No live node has room: refused before anything is written.
	big := req("huge")
	big.CapacityRange.RequiredBytes = int64(100 * gi)
	_, err = c.ctl.CreateVolume(testCtx(t), big)
	wantCode(t, err, codes.ResourceExhausted)
	if _, _, err := st.GetVolumeSpec(testCtx(t), "huge"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("refused volume has a spec (or %v)", err)
	}
}

// lead does what the daemons' leader does for an unplaced spec: the same
// placement, recorded with a revision-checked update.
func lead(t *testing.T, st *store.Store, nodes []api.Node, name string, rev int64) {
	spec, _, err := st.GetVolumeSpec(t.Context(), name)
	if err != nil {
		t.Error(err)
		return
	}
	choice, err := placement.Place(spec, nodes)
	if err != nil {
		t.Error(err)
		return
	}
	spec.Node, spec.Pool = choice.Node, choice.Pool
	if _, err := st.UpdateVolumeSpec(t.Context(), spec, rev); err != nil {
		t.Error(err)
	}
}

func TestDeleteVolume(t *testing.T) {
	st := openStore(t)
	register(t, st, twoNodes()...)
	c := serve(t, tccsi.Config{Store: st})
	req := &csi.CreateVolumeRequest{Name: "pvc-1", VolumeCapabilities: []*csi.VolumeCapability{mountCap()},
		AccessibilityRequirements: &csi.TopologyRequirement{Requisite: onNode("n1")}}
	first, err := c.ctl.CreateVolume(testCtx(t), req)
	wantCode(t, err, codes.OK)
	for _, tt := range []struct {
		id   string
		code codes.Code
	}{
		{"pvc-1", codes.OK},
		{"pvc-1", codes.OK}, // deleted already
		{"never-was", codes.OK},
		{"Not A Volume Name!", codes.OK},
		{"", codes.InvalidArgument},
	} {
		_, err := c.ctl.DeleteVolume(testCtx(t), &csi.DeleteVolumeRequest{VolumeId: tt.id})
		wantCode(t, err, tt.code)
	}
	if _, _, err := st.GetVolumeSpec(testCtx(t), "pvc-1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("spec after DeleteVolume: %v, want not found", err)
	}
	// The same name again is another volume: another instance, so the
	// node service does not take what the first left for its own.
	second, err := c.ctl.CreateVolume(testCtx(t), req)
	wantCode(t, err, codes.OK)
	const instance = "csi.tidecache.io/instance"
	if a, b := first.GetVolume().GetVolumeContext()[instance], second.GetVolume().GetVolumeContext()[instance]; a == b {
		t.Fatalf("a volume created again under its name has the same instance %q", a)
	}
}

func TestGetCapacity(t *testing.T) {
	st := openStore(t)
	register(t, st, twoNodes()...)
	c := serve(t, tccsi.Config{Store: st})
	for _, tt := range []struct {
		name          string
		params        map[string]string
		top           *csi.Topology
		code          codes.Code
		avail, larget uint64
	}{
		{"whole cluster", nil, nil, codes.OK, 12 * gi, 10 * gi},
		{"one node", nil, onNode("n2")[0], codes.OK, 2 * gi, 2 * gi},
		{"caches that fit n1 only", map[string]string{"writeCache": "256Mi"}, nil, codes.OK, 10 * gi, 10 * gi},
		{"caches that fit nowhere on n2", map[string]string{"writeCache": "256Mi"}, onNode("n2")[0], codes.OK, 0, 0},
		{"unknown node", nil, onNode("n9")[0], codes.OK, 0, 0},
		{"bad parameter", map[string]string{"mode": "fast"}, nil, codes.InvalidArgument, 0, 0},
		{"foreign topology", nil, &csi.Topology{Segments: map[string]string{"zone": "a"}}, codes.InvalidArgument, 0, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := c.ctl.GetCapacity(testCtx(t), &csi.GetCapacityRequest{Parameters: tt.params, AccessibleTopology: tt.top,
				VolumeCapabilities: []*csi.VolumeCapability{mountCap()}})
			wantCode(t, err, tt.code)
			if err != nil {
				return
			}
			if resp.GetAvailableCapacity() != int64(tt.avail) || resp.GetMaximumVolumeSize().GetValue() != int64(tt.larget) {
				t.Fatalf("available %d, largest %d; want %d, %d", resp.GetAvailableCapacity(), resp.GetMaximumVolumeSize().GetValue(), tt.avail, tt.larget)
			}
			if resp.GetMinimumVolumeSize().GetValue() != 16<<20 {
				t.Fatalf("minimum volume size %v, want 16 MiB", resp.GetMinimumVolumeSize())
			}
		})
	}
}

// TestGetCapacityNodeWithoutSSDs: a node without SSDs offers its origin
// to a class with a write cache when two other nodes serving replicas can
// each keep a leg of it, never to a class with a read cache.
func TestGetCapacityNodeWithoutSSDs(t *testing.T) {
	st := openStore(t)
	nodes := twoNodes()
	for i := range nodes {
		nodes[i].ReplicaAddress = "10.0.0.9:4420"
	}
	nodes = append(nodes, api.Node{Name: "n3", Pools: []api.PoolInventory{{Name: "hdd", OriginFreeBytes: 50 * gi, NoSSDs: true}}})
	register(t, st, nodes...)
	c := serve(t, tccsi.Config{Store: st})
	for _, tt := range []struct {
		name   string
		params map[string]string
		avail  uint64
	}{
		{"write cache both peers can keep", map[string]string{"writeCache": "64Mi"}, 50 * gi},
		{"write cache only n1 can keep", map[string]string{"writeCache": "256Mi"}, 0},
		{"a read cache", map[string]string{"writeCache": "64Mi", "readCache": "64Mi"}, 0},
		{"no cache", nil, 50 * gi},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := c.ctl.GetCapacity(testCtx(t), &csi.GetCapacityRequest{Parameters: tt.params, AccessibleTopology: onNode("n3")[0],
				VolumeCapabilities: []*csi.VolumeCapability{mountCap()}})
			if err != nil {
				t.Fatal(err)
			}
			if resp.GetAvailableCapacity() != int64(tt.avail) {
				t.Fatalf("available on n3 %d, want %d", resp.GetAvailableCapacity(), tt.avail)
			}
		})
	}
}

func TestValidateVolumeCapabilities(t *testing.T) {
	st := openStore(t)
	register(t, st, twoNodes()...)
	c := serve(t, tccsi.Config{Store: st})
	_, err := c.ctl.CreateVolume(testCtx(t), &csi.CreateVolumeRequest{Name: "pvc-2", VolumeCapabilities: []*csi.VolumeCapability{mountCap()},
		Parameters: map[string]string{"writeCache": "16Mi"}, AccessibilityRequirements: &csi.TopologyRequirement{Requisite: onNode("n1")}})
	wantCode(t, err, codes.OK)
	multi := mountCap()
	multi.AccessMode.Mode = csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
	for _, tt := range []struct {
		name      string
		req       *csi.ValidateVolumeCapabilitiesRequest
		code      codes.Code
		confirmed bool
	}{
		{"supported", &csi.ValidateVolumeCapabilitiesRequest{VolumeId: "pvc-2", VolumeCapabilities: []*csi.VolumeCapability{mountCap()},
			Parameters: map[string]string{"writeCache": "16Mi"}}, codes.OK, true},
		{"multi-node", &csi.ValidateVolumeCapabilitiesRequest{VolumeId: "pvc-2", VolumeCapabilities: []*csi.VolumeCapability{multi}}, codes.OK, false},
		{"other parameters", &csi.ValidateVolumeCapabilitiesRequest{VolumeId: "pvc-2", VolumeCapabilities: []*csi.VolumeCapability{mountCap()},
			Parameters: map[string]string{"writeCache": "32Mi"}}, codes.OK, false},
		{"unknown volume", &csi.ValidateVolumeCapabilitiesRequest{VolumeId: "pvc-3", VolumeCapabilities: []*csi.VolumeCapability{mountCap()}}, codes.NotFound, false},
		{"no ID", &csi.ValidateVolumeCapabilitiesRequest{VolumeCapabilities: []*csi.VolumeCapability{mountCap()}}, codes.InvalidArgument, false},
		{"no capabilities", &csi.ValidateVolumeCapabilitiesRequest{VolumeId: "pvc-2"}, codes.InvalidArgument, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := c.ctl.ValidateVolumeCapabilities(testCtx(t), tt.req)
			wantCode(t, err, tt.code)
			if got := resp.GetConfirmed() != nil; err == nil && got != tt.confirmed {
				t.Fatalf("confirmed %v (message %q), want %v", got, resp.GetMessage(), tt.confirmed)
			}
		})
	}
}

// TestIdentity: plugin info, capabilities, and Probe following etcd.
func TestIdentity(t *testing.T) {
	st := openStore(t)
	c := serve(t, tccsi.Config{Store: st})
	info, err := c.id.GetPluginInfo(testCtx(t), &csi.GetPluginInfoRequest{})
	wantCode(t, err, codes.OK)
	if info.GetName() != tccsi.DefaultName || info.GetVendorVersion() == "" {
		t.Fatalf("plugin info %v", info)
	}
	caps, err := c.id.GetPluginCapabilities(testCtx(t), &csi.GetPluginCapabilitiesRequest{})
	wantCode(t, err, codes.OK)
	var got []string
	for _, cp := range caps.GetCapabilities() {
		if e := cp.GetVolumeExpansion(); e != nil {
			got = append(got, "expansion "+e.GetType().String())
			continue
		}
		got = append(got, cp.GetService().GetType().String())
	}
	if strings.Join(got, ",") != "VOLUME_ACCESSIBILITY_CONSTRAINTS,expansion ONLINE,CONTROLLER_SERVICE" {
		t.Fatalf("plugin capabilities %v", got)
	}
	probe, err := c.id.Probe(testCtx(t), &csi.ProbeRequest{})
	wantCode(t, err, codes.OK)
	if !probe.GetReady().GetValue() {
		t.Fatal("probe not ready with etcd up")
	}
	ctl, err := c.ctl.ControllerGetCapabilities(testCtx(t), &csi.ControllerGetCapabilitiesRequest{})
	wantCode(t, err, codes.OK)
	got = nil
	for _, cp := range ctl.GetCapabilities() {
		got = append(got, cp.GetRpc().GetType().String())
	}
	if strings.Join(got, ",") != "CREATE_DELETE_VOLUME,GET_CAPACITY,EXPAND_VOLUME,PUBLISH_UNPUBLISH_VOLUME" {
		t.Fatalf("controller capabilities %v", got)
	}

	// etcd gone: the controller is not ready, and says so without an error.
	cfg := store.DefaultConfig()
	cfg.Endpoints, cfg.RequestTimeout = []string{"http://127.0.0.1:1"}, 500*time.Millisecond
	dead, err := store.Open(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close()
	c = serve(t, tccsi.Config{Store: dead})
	probe, err = c.id.Probe(testCtx(t), &csi.ProbeRequest{})
	wantCode(t, err, codes.OK)
	if probe.GetReady().GetValue() {
		t.Fatal("probe ready with etcd unreachable")
	}
}
