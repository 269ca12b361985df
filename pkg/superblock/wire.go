// SPDX-License-Identifier: Apache-2.0

package superblock

import "github.com/tidecache/tidecache/pkg/pool"

// The payload of format versions 1 and 2: JSON with explicit, snake_case
// field names. These types are the on-disk format; pool's types are the
// in-memory model. They are kept apart so renaming a Go field can never
// change what is on disk, and a change to the format is a visible edit
// here plus a FormatVersion bump (see docs/superblock.md).

type wirePayload struct {
	DeviceUUID string   `json:"device_uuid"`
	Pool       wirePool `json:"pool"`
}

type wirePool struct {
	Name       string       `json:"name"`
	UUID       string       `json:"uuid"`
	Generation uint64       `json:"generation"`
	Origin     wireOrigin   `json:"origin"`
	Members    []wireMember `json:"members"`
	Volumes    []wireVolume `json:"volumes"`
	// Replicas (slices kept for other nodes' peer mirrors) were added in
	// format 1 as an optional field. Older binaries refuse a payload that
	// has them (unknown field) rather than hand the slices to new volumes.
	Replicas []wireReplica `json:"replicas,omitempty"`
}

type wireReplica struct {
	Volume  string     `json:"volume"`
	Owner   string     `json:"owner"`
	HostNQN string     `json:"host_nqn"`
	UUID    string     `json:"uuid"`
	Extent  wireExtent `json:"extent"`
}

type wireOrigin struct {
	Path        string `json:"path"`
	MDUUID      string `json:"md_uuid"`
	SizeSectors uint64 `json:"size_sectors"`
}

type wireMember struct {
	UUID        string `json:"uuid"`
	Path        string `json:"path"`
	SizeSectors uint64 `json:"size_sectors"`
}

type wireExtent struct {
	Member string `json:"member"` // "" = the origin
	Offset uint64 `json:"offset"`
	Length uint64 `json:"length"`
}

type wireVolume struct {
	Name   string     `json:"name"`
	UUID   string     `json:"uuid"`
	Mode   string     `json:"mode"`
	Origin wireExtent `json:"origin"`
	// OriginTail (the further origin extents of a volume that grew past a
	// neighbour) is format 2. Version 1 readers refuse a version 2 slot
	// as newer: they would map the volume on its first extent alone, cut
	// off its end and hand the rest of its data to a new volume.
	OriginTail []wireExtent `json:"origin_tail,omitempty"`
	WriteCache *wireExtent  `json:"write_cache"`
	ReadCache  *wireExtent  `json:"read_cache"`
	ReadMeta   *wireExtent  `json:"read_meta"`
	BlockSize  uint32       `json:"block_size"`
	// ReadBlockSize (the dm-cache block size in bytes) was added in format
	// 1 as an optional field, written only when the volume chose one:
	// older payloads decode to 0, the node default they ran with, and a
	// volume that never chose one keeps a payload older binaries read.
	ReadBlockSize uint32 `json:"read_block_size,omitempty"`
	CreatedUnix   int64  `json:"created_unix"`
	// Tuning was added in format 1 as an optional field: older payloads
	// decode with no tuning (node defaults), which is what they ran with.
	Tuning *wireTuning `json:"tuning,omitempty"`
	// FUAWindow was added in format 1 as an optional field: older payloads
	// decode to false, and every writeback stack built from them gets the
	// fuaflush target, which changes no data on the disks.
	FUAWindow bool `json:"fua_window,omitempty"`
	// WriteMirror (protection local) was added in format 1 as an optional
	// field. A payload that has one is refused by older binaries, whose
	// decoder rejects unknown fields: they would build the write tier on
	// one leg and let the other go stale behind dm-raid's back.
	WriteMirror *wireMirror `json:"write_mirror,omitempty"`
	// Adopted (tidectl volume adopt) was added in format 1 as an optional
	// field. Older binaries refuse a payload that has one (unknown field)
	// rather than read the volume's origin extent as one of the pool's
	// origin, which they would then hand to a new volume.
	Adopted *wireAdopted `json:"adopted,omitempty"`
	// DataLoss (tidectl pool force-start) was added in format 1 as an
	// optional field. Older binaries refuse a payload that has one
	// (unknown field) rather than show the volume without the record of
	// the writes it lost.
	DataLoss *wireDataLoss `json:"data_loss,omitempty"`
	// FailedOver (a volume taken over from another node's replica) was
	// added in format 1 as an optional field. Older binaries refuse a
	// payload that has one (unknown field) rather than treat the volume's
	// write cache, a former replica, as one they made.
	FailedOver *wireFailedOver `json:"failed_over,omitempty"`
}

type wireFailedOver struct {
	From string `json:"from"`
	Unix int64  `json:"unix"`
	// Planned (a take-over in a planned move) was added in format 3;
	// Encode writes format 3 only for a layout that has one.
	Planned bool `json:"planned,omitempty"`
}

type wireDataLoss struct {
	Unix   int64  `json:"unix"`
	Member string `json:"member"`
}

func dataLossToWire(d *pool.DataLoss) *wireDataLoss {
	if d == nil {
		return nil
	}
	return &wireDataLoss{Unix: d.Unix, Member: d.Member}
}

func dataLossFromWire(w *wireDataLoss) *pool.DataLoss {
	if w == nil {
		return nil
	}
	return &pool.DataLoss{Unix: w.Unix, Member: w.Member}
}

func failedOverToWire(f *pool.FailedOver) *wireFailedOver {
	if f == nil {
		return nil
	}
	return &wireFailedOver{From: f.From, Unix: f.Unix, Planned: f.Planned}
}

func failedOverFromWire(w *wireFailedOver) *pool.FailedOver {
	if w == nil {
		return nil
	}
	return &pool.FailedOver{From: w.From, Unix: w.Unix, Planned: w.Planned}
}

type wireAdopted struct {
	Path        string `json:"path"`
	MDUUID      string `json:"md_uuid,omitempty"`
	WWN         string `json:"wwn,omitempty"`
	Serial      string `json:"serial,omitempty"`
	PartUUID    string `json:"partuuid,omitempty"`
	SizeSectors uint64 `json:"size_sectors"`
}

func adoptedToWire(a *pool.Adopted) *wireAdopted {
	if a == nil {
		return nil
	}
	return &wireAdopted{Path: a.Path, MDUUID: a.MDUUID, WWN: a.WWN, Serial: a.Serial, PartUUID: a.PartUUID, SizeSectors: a.SizeSectors}
}

func adoptedFromWire(w *wireAdopted) *pool.Adopted {
	if w == nil {
		return nil
	}
	return &pool.Adopted{Path: w.Path, MDUUID: w.MDUUID, WWN: w.WWN, Serial: w.Serial, PartUUID: w.PartUUID, SizeSectors: w.SizeSectors}
}

type wireMirror struct {
	Meta    wireExtent `json:"meta"`
	Leg     wireExtent `json:"leg"`
	LegMeta wireExtent `json:"leg_meta"`
	// OutOfSync lists the legs that missed writes; absent when none did.
	OutOfSync []int `json:"out_of_sync,omitempty"`
	// Remote is leg 1 on a peer node (protection peer); Leg and LegMeta
	// are then zero. Optional, like the mirror itself.
	Remote *wireRemote `json:"remote,omitempty"`
	// Remote0 is leg 0 on a peer node too (format 4): the volume of a
	// node without SSDs, whose write cache (member "@peers") is on two
	// peers' replicas; Meta is then zero as well.
	Remote0 *wireRemote `json:"remote0,omitempty"`
}

type wireRemote struct {
	Node    string `json:"node"`
	NQN     string `json:"nqn"`
	HostNQN string `json:"host_nqn"`
	Addr    string `json:"addr"`
	Port    int    `json:"port"`
	UUID    string `json:"uuid"`
}

func remoteToWire(r *pool.RemoteLeg) *wireRemote {
	if r == nil {
		return nil
	}
	return &wireRemote{Node: r.Node, NQN: r.NQN, HostNQN: r.HostNQN, Addr: r.Addr, Port: r.Port, UUID: r.UUID}
}

func remoteFromWire(w *wireRemote) *pool.RemoteLeg {
	if w == nil {
		return nil
	}
	return &pool.RemoteLeg{Node: w.Node, NQN: w.NQN, HostNQN: w.HostNQN, Addr: w.Addr, Port: w.Port, UUID: w.UUID}
}

func mirrorToWire(m *pool.Mirror) *wireMirror {
	if m == nil {
		return nil
	}
	return &wireMirror{Meta: extentToWire(m.Meta), Leg: extentToWire(m.Leg), LegMeta: extentToWire(m.LegMeta), OutOfSync: m.OutOfSync,
		Remote: remoteToWire(m.Remote), Remote0: remoteToWire(m.Remote0)}
}

func mirrorFromWire(w *wireMirror) *pool.Mirror {
	if w == nil {
		return nil
	}
	return &pool.Mirror{Meta: extentFromWire(w.Meta), Leg: extentFromWire(w.Leg), LegMeta: extentFromWire(w.LegMeta), OutOfSync: w.OutOfSync,
		Remote: remoteFromWire(w.Remote), Remote0: remoteFromWire(w.Remote0)}
}

type wireTuning struct {
	HighWatermark *int    `json:"high_watermark,omitempty"`
	LowWatermark  *int    `json:"low_watermark,omitempty"`
	WritebackJobs *uint64 `json:"writeback_jobs,omitempty"`
	// AutocommitTimeMs was added later, optional like the rest: a tuning
	// without it decodes with the node's autocommit time.
	AutocommitTimeMs *uint64 `json:"autocommit_time_ms,omitempty"`
	// ReadFirstMaxHoldMs was added with the readfirst layer, optional
	// too: a tuning without it decodes with the node's hold bound. Only a
	// volume tuned with it writes it, and an older tidecache refuses such
	// a payload (unknown field) rather than guess.
	ReadFirstMaxHoldMs *uint64 `json:"readfirst_max_hold_ms,omitempty"`
}

func tuningToWire(t *pool.Tuning) *wireTuning {
	if t.Empty() {
		return nil
	}
	return &wireTuning{HighWatermark: t.HighWatermark, LowWatermark: t.LowWatermark, WritebackJobs: t.WritebackJobs,
		AutocommitTimeMs: t.AutocommitTimeMs, ReadFirstMaxHoldMs: t.ReadFirstMaxHoldMs}
}

func tuningFromWire(w *wireTuning) *pool.Tuning {
	if w == nil {
		return nil
	}
	t := &pool.Tuning{HighWatermark: w.HighWatermark, LowWatermark: w.LowWatermark, WritebackJobs: w.WritebackJobs,
		AutocommitTimeMs: w.AutocommitTimeMs, ReadFirstMaxHoldMs: w.ReadFirstMaxHoldMs}
	if t.Empty() {
		return nil
	}
	return t
}

func toWire(sb *Superblock) *wirePayload {
	l := &sb.Layout
	w := &wirePayload{
		DeviceUUID: sb.DeviceUUID,
		Pool: wirePool{
			Name:       l.Name,
			UUID:       l.UUID,
			Generation: l.Generation,
			Origin:     wireOrigin{Path: l.Origin.Path, MDUUID: l.Origin.MDUUID, SizeSectors: l.Origin.SizeSectors},
			Members:    make([]wireMember, 0, len(l.Members)),
			Volumes:    make([]wireVolume, 0, len(l.Volumes)),
		},
	}
	for _, m := range l.Members {
		w.Pool.Members = append(w.Pool.Members, wireMember{UUID: m.UUID, Path: m.Path, SizeSectors: m.SizeSectors})
	}
	for _, v := range l.Volumes {
		w.Pool.Volumes = append(w.Pool.Volumes, wireVolume{
			Name:          v.Name,
			UUID:          v.UUID,
			Mode:          string(v.Mode),
			Origin:        extentToWire(v.Origin),
			OriginTail:    extentsToWire(v.OriginTail),
			WriteCache:    extentPtrToWire(v.WriteCache),
			ReadCache:     extentPtrToWire(v.ReadCache),
			ReadMeta:      extentPtrToWire(v.ReadMeta),
			BlockSize:     v.BlockSize,
			ReadBlockSize: v.ReadBlockSize,
			CreatedUnix:   v.CreatedUnix,
			Tuning:        tuningToWire(v.Tuning),
			FUAWindow:     v.FUAWindow,
			WriteMirror:   mirrorToWire(v.WriteMirror),
			Adopted:       adoptedToWire(v.Adopted),
			DataLoss:      dataLossToWire(v.DataLoss),
			FailedOver:    failedOverToWire(v.FailedOver),
		})
	}
	for _, r := range l.Replicas {
		w.Pool.Replicas = append(w.Pool.Replicas, wireReplica{Volume: r.Volume, Owner: r.Owner, HostNQN: r.HostNQN, UUID: r.UUID, Extent: extentToWire(r.Extent)})
	}
	return w
}

// fromWire converts a decoded payload. Empty lists become nil slices.
func fromWire(w *wirePayload, role Role) Superblock {
	p := &w.Pool
	sb := Superblock{
		Role:       role,
		DeviceUUID: w.DeviceUUID,
		Layout: pool.Layout{
			Name:       p.Name,
			UUID:       p.UUID,
			Generation: p.Generation,
			Origin:     pool.Origin{Path: p.Origin.Path, MDUUID: p.Origin.MDUUID, SizeSectors: p.Origin.SizeSectors},
		},
	}
	for _, m := range p.Members {
		sb.Layout.Members = append(sb.Layout.Members, pool.Member{UUID: m.UUID, Path: m.Path, SizeSectors: m.SizeSectors})
	}
	for _, v := range p.Volumes {
		sb.Layout.Volumes = append(sb.Layout.Volumes, pool.Volume{
			Name:          v.Name,
			UUID:          v.UUID,
			Mode:          pool.Mode(v.Mode),
			Origin:        extentFromWire(v.Origin),
			OriginTail:    extentsFromWire(v.OriginTail),
			WriteCache:    extentPtrFromWire(v.WriteCache),
			ReadCache:     extentPtrFromWire(v.ReadCache),
			ReadMeta:      extentPtrFromWire(v.ReadMeta),
			BlockSize:     v.BlockSize,
			ReadBlockSize: v.ReadBlockSize,
			CreatedUnix:   v.CreatedUnix,
			Tuning:        tuningFromWire(v.Tuning),
			FUAWindow:     v.FUAWindow,
			WriteMirror:   mirrorFromWire(v.WriteMirror),
			Adopted:       adoptedFromWire(v.Adopted),
			DataLoss:      dataLossFromWire(v.DataLoss),
			FailedOver:    failedOverFromWire(v.FailedOver),
		})
	}
	for _, r := range p.Replicas {
		sb.Layout.Replicas = append(sb.Layout.Replicas, pool.Replica{Volume: r.Volume, Owner: r.Owner, HostNQN: r.HostNQN, UUID: r.UUID, Extent: extentFromWire(r.Extent)})
	}
	return sb
}

func extentToWire(e pool.Extent) wireExtent {
	return wireExtent{Member: e.Member, Offset: e.Offset, Length: e.Length}
}

func extentsToWire(es []pool.Extent) []wireExtent {
	var out []wireExtent
	for _, e := range es {
		out = append(out, extentToWire(e))
	}
	return out
}

func extentsFromWire(ws []wireExtent) []pool.Extent {
	var out []pool.Extent
	for _, w := range ws {
		out = append(out, extentFromWire(w))
	}
	return out
}

func extentPtrToWire(e *pool.Extent) *wireExtent {
	if e == nil {
		return nil
	}
	w := extentToWire(*e)
	return &w
}

func extentFromWire(w wireExtent) pool.Extent {
	return pool.Extent{Member: w.Member, Offset: w.Offset, Length: w.Length}
}

func extentPtrFromWire(w *wireExtent) *pool.Extent {
	if w == nil {
		return nil
	}
	e := extentFromWire(*w)
	return &e
}
