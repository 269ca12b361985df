// SPDX-License-Identifier: Apache-2.0

package csi_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/tidecache/tidecache/pkg/api"
	tccsi "github.com/tidecache/tidecache/pkg/csi"
	"github.com/tidecache/tidecache/pkg/store"
)

// growingNode plays the daemon of the node that holds volume: whenever its
// spec changes it reports the spec's size in the status, or, above
// refuseAbove, an error as the engine would when the pool has no room.
func growingNode(t *testing.T, st *store.Store, volume string, refuseAbove uint64) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		var seen int64
		for ctx.Err() == nil {
			spec, meta, err := st.GetVolumeSpec(ctx, volume)
			if err == nil && meta.ModRevision != seen {
				s := api.VolumeStatus{Name: volume, Node: spec.Node, ObservedRevision: meta.ModRevision, Mode: "writeback",
					State: api.StateActive, SizeBytes: min(spec.SizeBytes, refuseAbove), UpdatedAt: time.Now().UTC()}
				if spec.SizeBytes > refuseAbove {
					s.State, s.Error = api.StateError, "grow to 6 GiB: not enough free space on origin /dev/md/tc-tank"
				}
				if st.PutVolumeStatus(ctx, s) == nil {
					seen = meta.ModRevision
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
}

// TestControllerExpandVolume: the spec's size is raised, the call returns
// once the node reports the volume at that size, and asks for the node
// step only for a filesystem; the refusals, each with its code.
func TestControllerExpandVolume(t *testing.T) {
	st := openStore(t)
	register(t, st, twoNodes()...)
	c := serve(t, tccsi.Config{Store: st, PlacementTimeout: 5 * time.Second})
	_, err := c.ctl.CreateVolume(testCtx(t), &csi.CreateVolumeRequest{Name: "pvc-1", VolumeCapabilities: []*csi.VolumeCapability{mountCap()},
		AccessibilityRequirements: &csi.TopologyRequirement{Requisite: onNode("n1")}})
	wantCode(t, err, codes.OK)
	growingNode(t, st, "pvc-1", 5*gi)
	block := &csi.VolumeCapability{AccessMode: mountCap().AccessMode, AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}}

	for _, tt := range []struct {
		name      string
		id        string
		required  int64
		cap       *csi.VolumeCapability
		code      codes.Code
		want      uint64 // capacity returned and size in the spec
		wantNode  bool   // NodeExpansionRequired
		wantWrite bool   // the spec was written
	}{
		{name: "grow a filesystem volume", id: "pvc-1", required: 2*int64(gi) + 1, cap: mountCap(), want: 2*gi + mi, wantNode: true, wantWrite: true},
		{name: "the same again: nothing written", id: "pvc-1", required: 2*int64(gi) + 1, cap: mountCap(), want: 2*gi + mi, wantNode: true},
		{name: "less than it has: its size", id: "pvc-1", required: int64(gi), cap: mountCap(), want: 2*gi + mi, wantNode: true},
		{name: "a raw block volume needs no node step", id: "pvc-1", required: 3 * int64(gi), cap: block, want: 3 * gi, wantWrite: true},
		{name: "more than the pool has free", id: "pvc-1", required: 20 * int64(gi), cap: mountCap(), code: codes.OutOfRange, want: 3 * gi},
		{name: "the node refuses", id: "pvc-1", required: 6 * int64(gi), cap: mountCap(), code: codes.OutOfRange, want: 6 * gi, wantWrite: true},
		{name: "no such volume", id: "pvc-9", required: int64(gi), cap: mountCap(), code: codes.NotFound},
		{name: "no capacity", id: "pvc-1", cap: mountCap(), code: codes.InvalidArgument},
		{name: "no ID", required: int64(gi), cap: mountCap(), code: codes.InvalidArgument},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, before, _ := st.GetVolumeSpec(testCtx(t), "pvc-1")
			req := &csi.ControllerExpandVolumeRequest{VolumeId: tt.id, VolumeCapability: tt.cap}
			if tt.required > 0 {
				req.CapacityRange = &csi.CapacityRange{RequiredBytes: tt.required}
			}
			resp, err := c.ctl.ControllerExpandVolume(testCtx(t), req)
			wantCode(t, err, tt.code)
			if tt.code == codes.OK && (uint64(resp.GetCapacityBytes()) != tt.want || resp.GetNodeExpansionRequired() != tt.wantNode) {
				t.Errorf("response %v, want %d bytes, node expansion %t", resp, tt.want, tt.wantNode)
			}
			spec, after, err := st.GetVolumeSpec(testCtx(t), "pvc-1")
			if err != nil {
				t.Fatal(err)
			}
			if wrote := after.ModRevision != before.ModRevision; wrote != tt.wantWrite {
				t.Errorf("spec written: %t, want %t", wrote, tt.wantWrite)
			}
			if tt.want != 0 && spec.SizeBytes != tt.want {
				t.Errorf("spec asks %d bytes, want %d", spec.SizeBytes, tt.want)
			}
		})
	}
	if _, err := c.ctl.ControllerExpandVolume(testCtx(t), &csi.ControllerExpandVolumeRequest{VolumeId: "pvc-1",
		CapacityRange: &csi.CapacityRange{RequiredBytes: 7 * int64(gi)}}); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("growing past what the node refused: %v, want its refusal again", err)
	}
}
