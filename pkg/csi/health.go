// SPDX-License-Identifier: Apache-2.0

package csi

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/pool"
)

// NodeGetVolumeHealth reports what is wrong with a volume on this node, as
// its device stack shows it: every adverse condition one entry, none when
// the volume is sound.
func (n *node) NodeGetVolumeHealth(ctx context.Context, req *csi.NodeGetVolumeHealthRequest) (*csi.NodeGetVolumeHealthResponse, error) {
	id := req.GetVolumeId()
	if id == "" {
		return nil, errorf(errInvalid, "volume ID missing")
	}
	if _, _, err := n.device(id); err != nil {
		return nil, err
	}
	// The node service runs tidectl rather than reading device-mapper
	// itself: one reading of the stack for people, the daemon and
	// Kubernetes alike.
	out, err := n.d.cfg.Runner.Run(ctx, n.d.cfg.Tidectl, "-o", "json", "volume", "show", id)
	if err != nil {
		return nil, fmt.Errorf("volume %s: read its health: %w", id, err)
	}
	entries, err := healthEntries(out)
	if err != nil {
		return nil, fmt.Errorf("volume %s: read its health: %w", id, err)
	}
	return &csi.NodeGetVolumeHealthResponse{VolumeHealth: &csi.VolumeHealth{VolumeId: id, HealthStatuses: entries}}, nil
}

// volumeHealth is the part of `tidectl -o json volume show` (docs/cli.md;
// the engine's VolumeInfo) that says whether the volume is sound.
type volumeHealth struct {
	State      string `json:"state"`
	Error      string `json:"error"`
	Protection string `json:"protection"`
	WriteCache *struct {
		Error int64 `json:"error"`
	} `json:"write_cache"`
	Mirror *struct {
		Copies      int     `json:"copies"`
		Degraded    bool    `json:"degraded"`
		SyncPercent float64 `json:"sync_percent"`
	} `json:"mirror"`
	MirrorOutOfSync []int  `json:"mirror_out_of_sync"`
	PeerNode        string `json:"peer_node"`
	DataLoss        string `json:"data_loss"`
	FailedOverFrom  string `json:"failed_over_from"`
	MovedFrom       string `json:"moved_from"`
	// OriginArray is the md array under the volume's origin extent
	// (mdraid.Health), absent when the origin is not md.
	OriginArray *struct {
		Device            string   `json:"device"`
		Level             string   `json:"level"`
		RaidDisks         int      `json:"raid_disks"`
		Degraded          int      `json:"degraded"`
		FailedDevices     []string `json:"failed_devices"`
		RebuildingDevices []string `json:"rebuilding_devices"`
		SyncAction        string   `json:"sync_action"`
	} `json:"origin_array"`
}

// healthEntries maps a volume's status to CSI health entries:
//   - INACCESSIBLE when the stack is in error or the write cache failed an
//     I/O (dm-writecache then fails every write and flush);
//   - DEGRADED while the device is suspended (I/O waits), or the write
//     cache keeps fewer copies than its protection asks (a mirror leg
//     missing, rebuilding or recorded out of sync, or a volume that failed
//     over running on its one copy until it is protected again), or the
//     HDD array under the volume has lost redundancy (a failed or
//     rebuilding member);
//   - DATA_LOSS when a forced start gave up the write cache with its dirty
//     blocks: the filesystem may lack acknowledged writes.
//
// A volume that failed over runs on its replica with every acknowledged
// write: that is not a fault in itself, only its single copy is.
func healthEntries(show []byte) ([]*csi.VolumeHealth_VolumeHealthEntry, error) {
	var h volumeHealth
	if err := json.Unmarshal(show, &h); err != nil {
		return nil, fmt.Errorf("tidectl volume show: %w", err)
	}
	var out []*csi.VolumeHealth_VolumeHealthEntry
	add := func(status csi.VolumeHealthErrorType, reason, format string, a ...any) {
		out = append(out, &csi.VolumeHealth_VolumeHealthEntry{Status: status, Reason: reason, Message: fmt.Sprintf(format, a...)})
	}
	switch h.State {
	case api.StateActive:
	case api.StateSuspended:
		add(csi.VolumeHealthErrorType_DEGRADED, "DeviceSuspended", "the volume's device is suspended: I/O waits until it is resumed")
	case api.StateError:
		add(csi.VolumeHealthErrorType_INACCESSIBLE, "DeviceStackError", "the volume's device stack is in error: %s", h.Error)
	case api.StateInactive:
		add(csi.VolumeHealthErrorType_INACCESSIBLE, "DeviceInactive", "the volume's device stack is not built on this node")
	default:
		add(csi.VolumeHealthErrorType_INACCESSIBLE, "DeviceStackUnknownState", "the volume's device stack is in state %q", h.State)
	}
	if wc := h.WriteCache; wc != nil && wc.Error != 0 {
		add(csi.VolumeHealthErrorType_INACCESSIBLE, "WriteCacheIOError",
			"the write cache failed an I/O (errno %d) and now fails every write: see the runbook, \"An SSD dies\"", -wc.Error)
	}
	if m := h.Mirror; m != nil && m.Degraded {
		where := "the second SSD"
		if h.Protection == string(pool.ProtectPeer) && h.PeerNode != "" {
			where = "node " + h.PeerNode
		}
		add(csi.VolumeHealthErrorType_DEGRADED, "WriteCacheMirrorDegraded",
			"the write cache keeps %d copy of its dirty blocks: the leg on %s is missing or rebuilding (%.0f%% synced)", m.Copies, where, m.SyncPercent)
	} else if len(h.MirrorOutOfSync) > 0 {
		add(csi.VolumeHealthErrorType_DEGRADED, "WriteCacheMirrorOutOfSync",
			"write cache mirror legs %v lack writes and wait for a resync", h.MirrorOutOfSync)
	}
	switch {
	case h.Protection != string(pool.ProtectNone):
	case h.FailedOverFrom != "":
		add(csi.VolumeHealthErrorType_DEGRADED, "FailedOverSingleCopy",
			"the volume failed over from node %s and its write cache keeps one copy of its dirty blocks until the leader places a new replica", h.FailedOverFrom)
	case h.MovedFrom != "":
		add(csi.VolumeHealthErrorType_DEGRADED, "MovedSingleCopy",
			"the volume moved from node %s and its write cache keeps one copy of its dirty blocks until the leader places a new replica", h.MovedFrom)
	}
	if a := h.OriginArray; a != nil && a.Degraded > 0 {
		add(csi.VolumeHealthErrorType_DEGRADED, "OriginArrayDegraded",
			"the HDD array %s (%s) runs with %d of its %d members missing or out of sync (failed: %v, rebuilding: %v, sync: %s): another failure can lose the volume's data on it",
			a.Device, a.Level, a.Degraded, a.RaidDisks, a.FailedDevices, a.RebuildingDevices, cmp.Or(a.SyncAction, "none"))
	}
	if h.DataLoss != "" {
		add(csi.VolumeHealthErrorType_DATA_LOSS, "ForcedStartLostWrites", "%s", h.DataLoss)
	}
	return out, nil
}
