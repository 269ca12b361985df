// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"cmp"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/dm"
	"github.com/tidecache/tidecache/pkg/engine"
	"github.com/tidecache/tidecache/pkg/mdraid"
	"github.com/tidecache/tidecache/pkg/pool"
)

// Volume is how tidectl prints a volume with -o json or -o yaml, in local
// and cluster mode alike: one schema, documented in docs/cli.md. Fields a
// backend cannot know are empty (the kernel counters of a remote volume,
// the revisions of a local one), never renamed.
type Volume struct {
	Name string `json:"name"`
	// Node holds the volume: the spec's node in cluster mode, this host's
	// name locally; empty while the cluster has not placed it.
	Node   string `json:"node"`
	Pool   string `json:"pool"`
	UUID   string `json:"uuid,omitempty"`
	Device string `json:"device"`
	// Policy is the cluster policy the volume follows (cluster mode).
	Policy string `json:"policy,omitempty"`

	SizeBytes       uint64 `json:"size_bytes"`
	WriteCacheBytes uint64 `json:"write_cache_bytes"`
	ReadCacheBytes  uint64 `json:"read_cache_bytes"`
	BlockSize       uint32 `json:"block_size"`
	ReadBlockSize   uint32 `json:"read_block_size,omitempty"`

	// Mode is the mode the kernel tables are in now; empty for a cluster
	// volume no node has applied yet. DesiredMode is the mode asked for:
	// the spec's in cluster mode, the layout's locally (then equal to
	// Mode once a change has finished).
	Mode        string `json:"mode"`
	DesiredMode string `json:"desired_mode"`
	// State is one of the api.State* words; Error the last error.
	State string `json:"state"`
	Error string `json:"error,omitempty"`

	DirtyBlocks   uint64  `json:"dirty_blocks"`
	DirtyBytes    uint64  `json:"dirty_bytes"`
	ReadHitRatio  float64 `json:"read_hit_ratio"`
	WriteHitRatio float64 `json:"write_hit_ratio"`

	// FUAWindow: the operator accepted losing FUA writes (see volume
	// create --allow-fua-window). LegacyStack: the volume still runs the
	// stack from before the fuaflush target.
	FUAWindow   bool         `json:"fua_window"`
	LegacyStack bool         `json:"legacy_stack,omitempty"`
	Tuning      *pool.Tuning `json:"tuning,omitempty"`
	// WritebackJobs bounds the write tier's write-back I/Os in flight;
	// WritebackLimitReason says who chose the bound and why.
	WritebackJobs        uint64 `json:"writeback_jobs,omitempty"`
	WritebackLimitReason string `json:"writeback_limit_reason,omitempty"`
	// WritebackWatermarks says when write-back runs (the write cache's
	// use at which it starts and stops) and who set them.
	WritebackWatermarks string   `json:"writeback_watermarks,omitempty"`
	Alerts              []string `json:"alerts,omitempty"`
	// Protection is none, local (write cache mirrored on two SSDs) or
	// peer (mirrored on an SSD of PeerNode, over NVMe/TCP); Mirror is
	// dm-raid's view of the mirror where it runs.
	Protection string `json:"protection,omitempty"`
	PeerNode   string `json:"peer_node,omitempty"`
	// PeerNode0 keeps leg 0 when the volume's node has no SSD: its write
	// cache is on PeerNode0's and PeerNode's SSDs.
	PeerNode0 string  `json:"peer_node0,omitempty"`
	Mirror    *Mirror `json:"mirror,omitempty"`

	// AdoptedDevice is the device an adopted volume caches (volume adopt),
	// with the identifiers assembly finds it by.
	AdoptedDevice string `json:"adopted_device,omitempty"`
	// DataLoss records writes lost by a pool force-start, if any.
	DataLoss string `json:"data_loss,omitempty"`
	// SharedOrigin is the NODE/EXPORT a volume that can fail over caches;
	// FailedOverFrom the node it ran on before it failed over to Node;
	// MovingTo the node a planned move hands it to, MovedFrom the node
	// it ran on before its last planned move.
	SharedOrigin   string `json:"shared_origin,omitempty"`
	FailedOverFrom string `json:"failed_over_from,omitempty"`
	MovingTo       string `json:"moving_to,omitempty"`
	MovedFrom      string `json:"moved_from,omitempty"`
	// MoveCalledOff says why the last planned move asked for did not
	// happen (cluster), until another is asked for.
	MoveCalledOff string `json:"move_called_off,omitempty"`
	// OriginArray is the md array the volume's origin extent lies on, as
	// this node's sysfs shows it (volume show, local); OriginArrayError
	// says why it could not be read. Both absent for an origin that is not
	// an md array, and for adopted volumes.
	OriginArray      *mdraid.Health `json:"origin_array,omitempty"`
	OriginArrayError string         `json:"origin_array_error,omitempty"`

	// SpecRevision and ObservedRevision are the etcd revision of the spec
	// and the one the node last applied (cluster mode).
	SpecRevision     int64      `json:"spec_revision,omitempty"`
	ObservedRevision int64      `json:"observed_revision,omitempty"`
	UpdatedAt        *time.Time `json:"updated_at,omitempty"`

	// The kernel's own counters, read on the node that holds the volume.
	WriteCache *engine.WriteCacheStatus `json:"write_cache,omitempty"`
	ReadCache  *engine.ReadCacheStatus  `json:"read_cache,omitempty"`
	FUAFlush   *dm.FUAFlushStatus       `json:"fua_flush,omitempty"`
	ReadFirst  *dm.ReadFirstStatus      `json:"read_first,omitempty"`
}

// Mirror is the state of a mirrored write cache, in both modes: the
// health of each leg (A in sync, a resyncing, D failed, - absent), the
// copies that exist now, and a resync's progress where the node reports it.
type Mirror struct {
	Health      string  `json:"health"`
	Copies      int     `json:"copies"`
	Degraded    bool    `json:"degraded"`
	SyncAction  string  `json:"sync_action,omitempty"`
	SyncTotal   uint64  `json:"sync_total_sectors,omitempty"`
	SyncPercent float64 `json:"sync_percent,omitempty"`
	// OutOfSync lists the legs the layout records as lacking writes.
	OutOfSync []int `json:"out_of_sync,omitempty"`
	// PeerHeld counts the writes the peer failed that wait on its leg.
	PeerHeld uint64 `json:"peer_held,omitempty"`
}

// statePending is the State of a cluster volume whose node has not
// written a status yet (not placed, node down, or just created).
const statePending = "pending"

// localVolume is a volume as the engine of node sees it.
func localVolume(v engine.VolumeInfo, node string) Volume {
	out := Volume{
		Name: v.Name, Node: node, Pool: v.Pool, UUID: v.UUID, Device: v.Device,
		SizeBytes: v.SizeBytes, WriteCacheBytes: v.WriteCacheBytes, ReadCacheBytes: v.ReadCacheBytes,
		BlockSize: v.BlockSize, ReadBlockSize: v.ReadBlockSize,
		Mode: string(v.Mode), DesiredMode: string(v.Mode), State: v.State, Error: v.Error,
		FUAWindow: v.FUAWindow, LegacyStack: v.LegacyStack, Tuning: v.Tuning,
		WriteCache: v.WriteCache, ReadCache: v.ReadCache, FUAFlush: v.FUAFlush, ReadFirst: v.ReadFirst,
	}
	if wc := v.WriteCache; wc != nil {
		out.DirtyBlocks, out.DirtyBytes = wc.DirtyBlocks, wc.DirtyBytes
		out.WriteHitRatio, out.ReadHitRatio = wc.WriteHitRatio, wc.ReadHitRatio
	}
	if rc := v.ReadCache; rc != nil {
		out.ReadHitRatio = rc.ReadHitRatio
	}
	out.Protection, out.PeerNode, out.PeerNode0 = string(v.Protection), v.PeerNode, v.PeerNode0
	out.AdoptedDevice = v.AdoptedDevice
	out.DataLoss = v.DataLoss
	if l := v.WritebackLimit; l != nil {
		out.WritebackJobs, out.WritebackLimitReason = l.Jobs, l.Source+": "+l.Reason
		out.WritebackWatermarks = l.Watermarks()
	}
	out.FailedOverFrom, out.MovedFrom = v.FailedOverFrom, v.MovedFrom
	if m := v.Mirror; m != nil {
		out.Mirror = &Mirror{Health: m.HealthString(), Copies: m.Copies, Degraded: m.Degraded,
			SyncAction: m.SyncAction, SyncTotal: m.SyncTotal, SyncPercent: m.SyncPercent, OutOfSync: v.MirrorOutOfSync, PeerHeld: m.PeerHeld}
	}
	return out
}

// clusterVolume is a volume as the cluster store records it: the spec,
// with the status its node last wrote (nil before any).
func clusterVolume(spec api.VolumeSpec, rev int64, st *api.VolumeStatus) Volume {
	out := Volume{
		Name: spec.Name, Node: spec.Node, Pool: spec.Pool, Device: "/dev/mapper/tc-" + spec.Name,
		Policy:    spec.Policy,
		SizeBytes: spec.SizeBytes, WriteCacheBytes: spec.WriteCacheBytes, ReadCacheBytes: spec.ReadCacheBytes,
		BlockSize: spec.BlockSize, ReadBlockSize: spec.ReadBlockSize,
		DesiredMode: spec.Mode, State: statePending, FUAWindow: spec.AllowFUAWindow,
		Protection:     spec.Protect,
		PeerNode:       spec.ReplicaNode,
		PeerNode0:      spec.ReplicaNode0,
		SpecRevision:   rev,
		FailedOverFrom: spec.FailedOverFrom,
		MovingTo:       spec.MoveTo,
		MovedFrom:      spec.MovedFrom,
	}
	if o := spec.SharedOrigin; o != nil {
		out.SharedOrigin = o.Node + "/" + o.Export
	}
	if c := spec.MoveCalledOff; c != nil {
		out.MoveCalledOff = c.Why
	}
	if out.BlockSize == 0 && spec.WriteCacheBytes > 0 {
		out.BlockSize = pool.DefaultBlockSize
	}
	if st == nil {
		return out
	}
	out.Node = st.Node
	out.Mode, out.State, out.Error = st.Mode, st.State, st.Error
	out.DirtyBlocks, out.DirtyBytes = st.DirtyBlocks, st.DirtyBytes
	out.ReadHitRatio, out.WriteHitRatio = st.ReadHitRatio, st.WriteHitRatio
	out.Alerts = st.Alerts
	out.WritebackJobs, out.WritebackLimitReason = st.WritebackJobs, st.WritebackLimitReason
	out.WritebackWatermarks = st.WritebackWatermarks
	out.Protection = cmp.Or(st.Protection, out.Protection)
	if st.MirrorHealth != "" {
		out.Mirror = &Mirror{Health: st.MirrorHealth, Copies: st.MirrorCopies, Degraded: st.MirrorCopies < len(st.MirrorHealth)}
	}
	out.ObservedRevision = st.ObservedRevision
	updated := st.UpdatedAt
	out.UpdatedAt = &updated
	return out
}

// snakeCase prints a record stored in etcd (camelCase keys, the store's
// format) with the snake_case keys of every other tidectl output, so one
// script reads every object the same way.
func snakeCase(v any) (any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode %T: %w", v, err)
	}
	var generic any
	if err := json.Unmarshal(b, &generic); err != nil {
		return nil, fmt.Errorf("decode %T: %w", v, err)
	}
	return snakeKeys(generic), nil
}

func snakeKeys(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, val := range x {
			out[snakeName(k)] = snakeKeys(val)
		}
		return out
	case []any:
		for i := range x {
			x[i] = snakeKeys(x[i])
		}
		return x
	}
	return v
}

// snakeName turns "wearThresholdPercent" into "wear_threshold_percent"
// and "observedRevision" into "observed_revision".
func snakeName(s string) string {
	var b strings.Builder
	for i, r := range s {
		if unicode.IsUpper(r) {
			if i > 0 {
				b.WriteByte('_')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}
