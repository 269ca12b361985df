// SPDX-License-Identifier: Apache-2.0

package csi_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	tccsi "github.com/tidecache/tidecache/pkg/csi"
)

// TestNodeRequests: what the node service answers without a device (the
// VM test TestCSISanity stages and publishes real ones): its identity and
// topology, and the codes for missing fields and unknown volumes.
func TestNodeRequests(t *testing.T) {
	c := serve(t, tccsi.Config{Node: true, NodeID: "db1.example.com", DeviceDir: t.TempDir(), DeviceTimeout: 500 * time.Millisecond})
	info, err := c.node.NodeGetInfo(testCtx(t), &csi.NodeGetInfoRequest{})
	wantCode(t, err, codes.OK)
	if info.GetNodeId() != "db1.example.com" || info.GetAccessibleTopology().GetSegments()[tccsi.TopologyKey] != "db1.example.com" {
		t.Fatalf("node info %v", info)
	}
	caps, err := c.node.NodeGetCapabilities(testCtx(t), &csi.NodeGetCapabilitiesRequest{})
	wantCode(t, err, codes.OK)
	if len(caps.GetCapabilities()) != 4 || caps.GetCapabilities()[0].GetRpc().GetType() != csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME ||
		caps.GetCapabilities()[1].GetRpc().GetType() != csi.NodeServiceCapability_RPC_GET_VOLUME_STATS ||
		caps.GetCapabilities()[2].GetRpc().GetType() != csi.NodeServiceCapability_RPC_GET_VOLUME_HEALTH ||
		caps.GetCapabilities()[3].GetRpc().GetType() != csi.NodeServiceCapability_RPC_EXPAND_VOLUME {
		t.Fatalf("node capabilities %v", caps)
	}
	pcaps, err := c.id.GetPluginCapabilities(testCtx(t), &csi.GetPluginCapabilitiesRequest{})
	wantCode(t, err, codes.OK)
	if len(pcaps.GetCapabilities()) != 2 || pcaps.GetCapabilities()[1].GetVolumeExpansion().GetType() != csi.PluginCapability_VolumeExpansion_ONLINE {
		t.Fatalf("a node-only driver advertises %v, want accessibility constraints and online expansion only", pcaps.GetCapabilities())
	}
	dir := t.TempDir()
	staging, target := filepath.Join(dir, "staging"), filepath.Join(dir, "target")
	block := &csi.VolumeCapability{
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
	}
	for _, tt := range []struct {
		name string
		call func() error
		code codes.Code
	}{
		{"stage without ID", func() error {
			_, err := c.node.NodeStageVolume(testCtx(t), &csi.NodeStageVolumeRequest{StagingTargetPath: staging, VolumeCapability: mountCap()})
			return err
		}, codes.InvalidArgument},
		{"stage without path", func() error {
			_, err := c.node.NodeStageVolume(testCtx(t), &csi.NodeStageVolumeRequest{VolumeId: "v", VolumeCapability: mountCap()})
			return err
		}, codes.InvalidArgument},
		{"stage without capability", func() error {
			_, err := c.node.NodeStageVolume(testCtx(t), &csi.NodeStageVolumeRequest{VolumeId: "v", StagingTargetPath: staging})
			return err
		}, codes.InvalidArgument},
		{"stage of a device that never comes", func() error {
			ctx, cancel := context.WithTimeout(t.Context(), time.Second) // the CO's deadline bounds the wait
			defer cancel()
			_, err := c.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: "v", StagingTargetPath: staging, VolumeCapability: block})
			return err
		}, codes.DeadlineExceeded},
		{"stage of an impossible ID", func() error {
			_, err := c.node.NodeStageVolume(testCtx(t), &csi.NodeStageVolumeRequest{VolumeId: "No Such/Volume", StagingTargetPath: staging, VolumeCapability: block})
			return err
		}, codes.NotFound},
		{"unstage without path", func() error {
			_, err := c.node.NodeUnstageVolume(testCtx(t), &csi.NodeUnstageVolumeRequest{VolumeId: "v"})
			return err
		}, codes.InvalidArgument},
		{"unstage of nothing staged", func() error {
			_, err := c.node.NodeUnstageVolume(testCtx(t), &csi.NodeUnstageVolumeRequest{VolumeId: "v", StagingTargetPath: staging})
			return err
		}, codes.OK},
		{"publish without target", func() error {
			_, err := c.node.NodePublishVolume(testCtx(t), &csi.NodePublishVolumeRequest{VolumeId: "v", StagingTargetPath: staging, VolumeCapability: mountCap()})
			return err
		}, codes.InvalidArgument},
		{"publish without capability", func() error {
			_, err := c.node.NodePublishVolume(testCtx(t), &csi.NodePublishVolumeRequest{VolumeId: "v", TargetPath: target, StagingTargetPath: staging})
			return err
		}, codes.InvalidArgument},
		{"publish without staging path", func() error {
			_, err := c.node.NodePublishVolume(testCtx(t), &csi.NodePublishVolumeRequest{VolumeId: "v", TargetPath: target, VolumeCapability: mountCap()})
			return err
		}, codes.InvalidArgument},
		{"publish of a volume not here", func() error {
			_, err := c.node.NodePublishVolume(testCtx(t), &csi.NodePublishVolumeRequest{VolumeId: "v", TargetPath: target, StagingTargetPath: staging, VolumeCapability: mountCap()})
			return err
		}, codes.NotFound},
		{"unpublish without ID", func() error {
			_, err := c.node.NodeUnpublishVolume(testCtx(t), &csi.NodeUnpublishVolumeRequest{TargetPath: target})
			return err
		}, codes.InvalidArgument},
		{"unpublish of nothing published", func() error {
			_, err := c.node.NodeUnpublishVolume(testCtx(t), &csi.NodeUnpublishVolumeRequest{VolumeId: "v", TargetPath: target})
			return err
		}, codes.OK},
		{"stats without path", func() error {
			_, err := c.node.NodeGetVolumeStats(testCtx(t), &csi.NodeGetVolumeStatsRequest{VolumeId: "v"})
			return err
		}, codes.InvalidArgument},
		{"stats of an unknown volume", func() error {
			_, err := c.node.NodeGetVolumeStats(testCtx(t), &csi.NodeGetVolumeStatsRequest{VolumeId: "v", VolumePath: dir})
			return err
		}, codes.NotFound},
		{"health without ID", func() error {
			_, err := c.node.NodeGetVolumeHealth(testCtx(t), &csi.NodeGetVolumeHealthRequest{})
			return err
		}, codes.InvalidArgument},
		{"health of an unknown volume", func() error {
			_, err := c.node.NodeGetVolumeHealth(testCtx(t), &csi.NodeGetVolumeHealthRequest{VolumeId: "v"})
			return err
		}, codes.NotFound},
	} {
		t.Run(tt.name, func(t *testing.T) { wantCode(t, tt.call(), tt.code) })
	}
}
