// SPDX-License-Identifier: Apache-2.0

package csi_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/tidecache/tidecache/pkg/api"
	tccsi "github.com/tidecache/tidecache/pkg/csi"
)

// sanCluster: san exports four devices; pv-a, pv-b and pv-c are the
// class's to give (pv-c seen by n1 only), data is not; n1 and n2 cache,
// n3 has no pool.
func sanCluster() []api.Node {
	pools := []api.PoolInventory{{Name: "fast", SSDFreeBytes: gi}}
	return []api.Node{
		{Name: "san", ReplicaAddress: "10.0.0.9:4420", Exports: []api.ExportInventory{
			{Name: "pv-a", UUID: "4e0b5c7e-0000-5000-8000-00000000000a", SizeBytes: 2 * gi, Hosts: []string{"n1", "n2", "n3"}},
			{Name: "pv-b", UUID: "4e0b5c7e-0000-5000-8000-00000000000b", SizeBytes: gi, Hosts: []string{"n1", "n2", "n3"}},
			{Name: "pv-c", UUID: "4e0b5c7e-0000-5000-8000-00000000000c", SizeBytes: 4 * gi, Hosts: []string{"n1"}},
			{Name: "pv-bad", SizeBytes: 8 * gi, Hosts: []string{"n1", "n2"}, Error: "device missing"},
			{Name: "data", UUID: "4e0b5c7e-0000-5000-8000-0000000000d0", SizeBytes: gi, Hosts: []string{"n1", "n2"}},
		}},
		{Name: "n1", ReplicaAddress: "10.0.0.1:4420", Pools: pools},
		{Name: "n2", ReplicaAddress: "10.0.0.2:4420", Pools: pools},
		{Name: "n3"},
	}
}

func sharedClass() map[string]string {
	return map[string]string{"sharedOrigin": "san", "exports": "pv-*", "writeCache": "64Mi"}
}

// TestCreateVolumeSharedOrigin: a class on shared origins gives each
// claim a whole free export of its node, the smallest that fits, seen by
// the node the volume starts on; never one outside its pattern, a broken
// one, or one another volume caches; and a deleted claim's export goes
// to the next.
func TestCreateVolumeSharedOrigin(t *testing.T) {
	st := openStore(t)
	register(t, st, sanCluster()...)
	c := serve(t, tccsi.Config{Store: st})
	create := func(name string, required uint64, params map[string]string, nodes ...string) (*csi.Volume, error) {
		req := &csi.CreateVolumeRequest{Name: name, Parameters: params, VolumeCapabilities: []*csi.VolumeCapability{mountCap()},
			CapacityRange: &csi.CapacityRange{RequiredBytes: int64(required)}}
		if len(nodes) > 0 {
			req.AccessibilityRequirements = &csi.TopologyRequirement{Preferred: onNode(nodes...), Requisite: onNode(nodes...)}
		}
		resp, err := c.ctl.CreateVolume(testCtx(t), req)
		return resp.GetVolume(), err
	}
	origin := func(name string) string {
		t.Helper()
		spec, _, err := st.GetVolumeSpec(testCtx(t), name)
		if err != nil {
			t.Fatal(err)
		}
		// Provisioned: the export's content is the class's to replace,
		// so its write cache takes the pool's 4 KiB block.
		if spec.SharedOrigin == nil || !spec.SharedOrigin.Provisioned || spec.Protect != "peer" || spec.SizeBytes != 0 || spec.WriteCacheBytes != 64*mi {
			t.Fatalf("spec of %s: %+v, want a peer-protected volume on a provisioned shared origin, cached whole", name, spec)
		}
		return spec.Node + " " + spec.SharedOrigin.Node + "/" + spec.SharedOrigin.Export
	}
	capacity := func(node string) (avail, largest int64) {
		t.Helper()
		req := &csi.GetCapacityRequest{Parameters: sharedClass(), VolumeCapabilities: []*csi.VolumeCapability{mountCap()}}
		if node != "" {
			req.AccessibleTopology = onNode(node)[0]
		}
		resp, err := c.ctl.GetCapacity(testCtx(t), req)
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetAvailableCapacity(), resp.GetMaximumVolumeSize().GetValue()
	}

	if a, l := capacity(""); a != int64(7*gi) || l != int64(4*gi) {
		t.Fatalf("capacity before any claim: %d, largest %d; want 7 GiB (pv-a, pv-b, pv-c), 4 GiB", a, l)
	}
	if a, l := capacity("n2"); a != int64(3*gi) || l != int64(2*gi) {
		t.Fatalf("capacity on n2: %d, largest %d; want 3 GiB (pv-a, pv-b), 2 GiB", a, l)
	}
	if a, _ := capacity("n3"); a != 0 {
		t.Fatalf("capacity on n3, which has no pool: %d, want 0", a)
	}

	vol, err := create("claim-1", gi, sharedClass(), "n2")
	if err != nil {
		t.Fatal(err)
	}
	if got := origin("claim-1"); got != "n2 san/pv-b" {
		t.Fatalf("claim-1 on %s, want n2 caching san/pv-b, the smallest export that fits", got)
	}
	var topo []string
	for _, tp := range vol.GetAccessibleTopology() {
		topo = append(topo, tp.GetSegments()[tccsi.TopologyKey])
	}
	if vol.GetCapacityBytes() != int64(gi) || !slices.Equal(topo, []string{"n1", "n2"}) || vol.GetVolumeContext()["csi.tidecache.io/instance"] == "" {
		t.Fatalf("volume %+v: want 1 GiB, reachable from n1 and n2 (n3 has no pool), and an instance", vol)
	}
	// Asked again (the provisioner retries): the same volume.
	again, err := create("claim-1", gi, sharedClass(), "n2")
	if err != nil || again.GetVolumeId() != vol.GetVolumeId() || again.GetCapacityBytes() != vol.GetCapacityBytes() {
		t.Fatalf("create again: %+v, %v; want the same volume", again, err)
	}
	if _, err := create("claim-1", 3*gi, sharedClass(), "n2"); grpcstatus.Code(err) != codes.AlreadyExists {
		t.Fatalf("create again, larger: %v, want AlreadyExists", err)
	}
	if _, err := create("claim-1", gi, map[string]string{"writeCache": "64Mi"}, "n2"); grpcstatus.Code(err) != codes.AlreadyExists {
		t.Fatalf("create again in a node-local class: %v, want AlreadyExists", err)
	}

	if _, err := create("claim-2", gi, sharedClass(), "n2"); err != nil {
		t.Fatal(err)
	}
	if got := origin("claim-2"); got != "n2 san/pv-a" {
		t.Fatalf("claim-2 on %s, want n2 caching san/pv-a (pv-b is claim-1's)", got)
	}
	// pv-c is the only one left; n2 does not see it.
	_, err = create("claim-3", gi, sharedClass(), "n2")
	if grpcstatus.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "n2: sees none of the free exports") {
		t.Fatalf("claim on n2 with only pv-c free: %v, want ResourceExhausted saying n2 sees none", err)
	}
	if _, err := create("claim-3", gi, sharedClass(), "n1"); err != nil {
		t.Fatal(err)
	}
	if got := origin("claim-3"); got != "n1 san/pv-c" {
		t.Fatalf("claim-3 on %s, want n1 caching san/pv-c", got)
	}
	_, err = create("claim-4", gi, sharedClass())
	if grpcstatus.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "no free export matching exports of pv-*") {
		t.Fatalf("claim with every export taken: %v, want ResourceExhausted (data and pv-bad never given)", err)
	}
	if a, _ := capacity(""); a != 0 {
		t.Fatalf("capacity with every export taken: %d, want 0", a)
	}

	// A deleted claim's export goes to the next claim.
	if _, err := c.ctl.DeleteVolume(testCtx(t), &csi.DeleteVolumeRequest{VolumeId: "claim-1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := create("claim-4", gi, sharedClass()); err != nil {
		t.Fatal(err)
	}
	if got := origin("claim-4"); !strings.HasSuffix(got, " san/pv-b") {
		t.Fatalf("claim-4 on %s, want pv-b, freed by claim-1", got)
	}

	// Parameters a class on shared origins cannot have.
	for _, tc := range []struct {
		name   string
		modify func(map[string]string)
		msg    string
	}{
		{"no pattern", func(p map[string]string) { delete(p, "exports") }, "sharedOrigin needs exports"},
		{"pattern alone", func(p map[string]string) { delete(p, "sharedOrigin") }, "exports needs sharedOrigin"},
		{"bad pattern", func(p map[string]string) { p["exports"] = "pv-[" }, `exports "pv-[": want a pattern`},
		{"no write cache", func(p map[string]string) { delete(p, "writeCache") }, "sharedOrigin needs writeCache"},
		{"local protection", func(p map[string]string) { p["protect"] = "local" }, "protect local would leave nothing to fail over to"},
		{"bad node name", func(p map[string]string) { p["sharedOrigin"] = "San_1" }, `sharedOrigin "San_1"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := sharedClass()
			tc.modify(p)
			_, err := create("claim-x", gi, p)
			if grpcstatus.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("create: %v, want InvalidArgument saying %q", err, tc.msg)
			}
		})
	}
}
