// SPDX-License-Identifier: Apache-2.0

package csi_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/tidecache/tidecache/pkg/api"
	tccsi "github.com/tidecache/tidecache/pkg/csi"
)

// TestControllerPublish: a volume is published where it runs at once; a
// volume on a shared origin published on another node is moved there
// (spec.moveTo written), and the call returns once the node's daemons
// report it running there; any other volume is refused on another node;
// missing fields, an unknown volume or node are told apart by their
// codes, as csi-sanity checks them; unpublish has nothing to undo.
func TestControllerPublish(t *testing.T) {
	st := openStore(t)
	register(t, st,
		api.Node{Name: "n1", ReplicaAddress: "10.0.0.1:4420", Pools: []api.PoolInventory{{Name: "fast", SSDFreeBytes: 1 << 30}}},
		api.Node{Name: "n2", ReplicaAddress: "10.0.0.2:4420", Pools: []api.PoolInventory{{Name: "fast", SSDFreeBytes: 1 << 30}}},
		api.Node{Name: "san", Exports: []api.ExportInventory{{Name: "lun0", Hosts: []string{"n1", "n2", "n3"}}}},
	)
	for _, spec := range []api.VolumeSpec{
		{Name: "logs", Node: "n1", Pool: "fast", SizeBytes: 1 << 30, WriteCacheBytes: 64 << 20},
		{Name: "db", Node: "n1", Pool: "fast", WriteCacheBytes: 64 << 20, Protect: "peer", ReplicaNode: "n2", ReplicaPool: "fast",
			SharedOrigin: &api.SharedOrigin{Node: "san", Export: "lun0"}},
	} {
		if _, err := st.CreateVolumeSpec(testCtx(t), spec); err != nil {
			t.Fatal(err)
		}
	}
	c := serve(t, tccsi.Config{Store: st, Controller: true})
	mount := &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}
	publish := func(ctx context.Context, volume, node string, vc *csi.VolumeCapability) error {
		_, err := c.ctl.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: volume, NodeId: node, VolumeCapability: vc})
		return err
	}
	for _, tc := range []struct {
		name, volume, node string
		vc                 *csi.VolumeCapability
		want               codes.Code
	}{
		{"no volume ID", "", "n1", mount, codes.InvalidArgument},
		{"no node ID", "logs", "", mount, codes.InvalidArgument},
		{"no capability", "nosuch", "n1", nil, codes.InvalidArgument},
		{"unknown volume", "nosuch", "n1", mount, codes.NotFound},
		{"unknown node", "logs", "n9", mount, codes.NotFound},
		{"where it runs", "logs", "n1", mount, codes.OK},
		{"a node-local volume elsewhere", "logs", "n2", mount, codes.FailedPrecondition},
		{"a shared-origin volume where it runs", "db", "n1", mount, codes.OK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantCode(t, publish(testCtx(t), tc.volume, tc.node, tc.vc), tc.want)
		})
	}

	// db on n2: the move is asked for; the call waits for it.
	ctx, cancel := context.WithTimeout(testCtx(t), time.Second)
	defer cancel()
	wantCode(t, publish(ctx, "db", "n2", mount), codes.DeadlineExceeded)
	spec, meta, err := st.GetVolumeSpec(testCtx(t), "db")
	if err != nil || spec.MoveTo != "n2" || spec.Node != "n1" {
		t.Fatalf("spec after the first publish on n2: node %s, moveTo %q (%v); want n1, n2", spec.Node, spec.MoveTo, err)
	}
	// The daemons hand it over (n1) and run it (n2) while the attacher's
	// next call waits.
	go func() {
		time.Sleep(300 * time.Millisecond)
		moved := spec
		moved.Node, moved.MovedFrom, moved.MoveTo, moved.ReplicaNode, moved.ReplicaPool = "n2", "n1", "", "", ""
		if _, err := st.FailOverVolumeSpec(context.Background(), moved, meta.ModRevision); err != nil {
			t.Errorf("hand over: %v", err)
		}
		time.Sleep(300 * time.Millisecond)
		if err := st.PutVolumeStatus(context.Background(), api.VolumeStatus{Name: "db", Node: "n2", State: api.StateActive, Mode: "writeback", UpdatedAt: time.Now().UTC()}); err != nil {
			t.Errorf("status: %v", err)
		}
	}()
	wantCode(t, publish(testCtx(t), "db", "n2", mount), codes.OK)
	// Published again where it now runs: at once, nothing written.
	wantCode(t, publish(testCtx(t), "db", "n2", mount), codes.OK)
	if spec, _, err := st.GetVolumeSpec(testCtx(t), "db"); err != nil || spec.Node != "n2" || spec.MoveTo != "" {
		t.Fatalf("spec after the move: node %s, moveTo %q (%v); want n2, none", spec.Node, spec.MoveTo, err)
	}

	// n2 loses its power as it takes db over and is not registered for
	// a while: the attacher's next call (the last one ran out of time)
	// is answered at once, db is n2's; n2's daemon starts it when back.
	down, err := st.Register(testCtx(t), api.Node{Name: "n3"}, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	spec, meta, err = st.GetVolumeSpec(testCtx(t), "db")
	if err != nil {
		t.Fatal(err)
	}
	onN3 := spec
	onN3.Node, onN3.MovedFrom = "n3", "n2"
	if _, err := st.FailOverVolumeSpec(testCtx(t), onN3, meta.ModRevision); err != nil {
		t.Fatal(err)
	}
	if err := down.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	wantCode(t, publish(testCtx(t), "db", "n3", mount), codes.OK)
	spec, meta, err = st.GetVolumeSpec(testCtx(t), "db")
	if err != nil || spec.Node != "n3" || spec.MoveTo != "" {
		t.Fatalf("spec after publishing on n3, down: node %s, moveTo %q (%v); want n3 untouched", spec.Node, spec.MoveTo, err)
	}
	// db back on n2 for what follows.
	spec.Node, spec.MovedFrom = "n2", "n3"
	if _, err := st.FailOverVolumeSpec(testCtx(t), spec, meta.ModRevision); err != nil {
		t.Fatal(err)
	}

	// Back to n1, but the owner calls the move off (the replica missed
	// writes): the attacher is told why, from the spec, though the
	// owner's status says nothing of it any more.
	const why = "move to node n1 refused at the handover: this node recorded the replica there outdated"
	go func() {
		for {
			time.Sleep(100 * time.Millisecond)
			spec, meta, err := st.GetVolumeSpec(context.Background(), "db")
			if err != nil || spec.MoveTo != "n1" {
				continue
			}
			spec.MoveTo, spec.MoveCalledOff = "", &api.CalledOffMove{To: "n1", Why: why}
			if _, err := st.UpdateVolumeSpec(context.Background(), spec, meta.ModRevision); err != nil {
				t.Errorf("call the move off: %v", err)
			}
			return
		}
	}()
	err = publish(testCtx(t), "db", "n1", mount)
	if wantCode(t, err, codes.FailedPrecondition); !strings.Contains(err.Error(), why) {
		t.Fatalf("publish of a move called off: %v, want it to say why (%q)", err, why)
	}
	// Asked again, the move starts afresh: the old reason goes.
	ctx, cancel = context.WithTimeout(testCtx(t), 500*time.Millisecond)
	defer cancel()
	wantCode(t, publish(ctx, "db", "n1", mount), codes.DeadlineExceeded)
	if spec, _, err := st.GetVolumeSpec(testCtx(t), "db"); err != nil || spec.MoveTo != "n1" || spec.MoveCalledOff != nil {
		t.Fatalf("spec after asking again: moveTo %q, called off %+v (%v); want n1 and no reason left", spec.MoveTo, spec.MoveCalledOff, err)
	}

	_, err = c.ctl.ControllerUnpublishVolume(testCtx(t), &csi.ControllerUnpublishVolumeRequest{VolumeId: "db", NodeId: "n1"})
	wantCode(t, err, codes.OK)
	_, err = c.ctl.ControllerUnpublishVolume(testCtx(t), &csi.ControllerUnpublishVolumeRequest{NodeId: "n1"})
	wantCode(t, err, codes.InvalidArgument)
}
