// SPDX-License-Identifier: Apache-2.0

package pool

import (
	"fmt"
	"time"
)

// A volume whose origin other nodes see too (a shared LUN) can fail over
// to the node that keeps its peer replica when its own node is lost: that
// node takes the replica's copy of the write cache, which holds every
// acknowledged write, and runs the volume on it and the shared origin.
// The replica becomes the volume's write cache in one layout change, so a
// crash leaves either the replica or the volume, never both or neither.

// FailedOver records that a volume was taken over from another node: it
// runs on what was its replica, with one copy of its write cache until it
// is protected again.
type FailedOver struct {
	From string // the node the volume ran on before
	Unix int64  // when this node took it over
	// Planned says the old node handed the volume over in a planned move
	// (tidectl volume move): it stopped the volume itself, nothing was
	// fenced, and nothing needs an operator's look, unlike a failover.
	Planned bool
}

// TakeOverRequest describes a volume taken over from its replica.
type TakeOverRequest struct {
	Volume, From string
	// Adopt is the shared origin, found on this node by its identifiers.
	Adopt *Adopted
	// Mode is the mode the volume ran in on its old node: writeback keeps
	// the write cache's content (the dirty blocks), another mode never
	// reads it.
	Mode Mode
	// BlockSize is the write cache's block size, as its dm-writecache
	// superblock records it (writeback), else 0 for the default.
	BlockSize uint32
	// Planned says the old node handed the volume over (FailedOver.Planned).
	Planned bool
}

// TakeOverReplica turns the replica kept for a volume into that volume:
// the replica's data part (after the leg's dm-raid metadata) becomes its
// write cache, holding the same bytes the old owner's write tier cached
// on, and the shared origin its adopted device. The replica's metadata
// slice is freed. The generation is bumped once.
func (l *Layout) TakeOverReplica(req TakeOverRequest, uuid string, now time.Time) (Volume, error) {
	r, ok := l.Replica(req.Volume)
	if !ok {
		return Volume{}, errorf(ErrVolumeNotFound, "pool %q keeps no replica of volume %q to take over", l.Name, req.Volume)
	}
	if _, ok := l.Volume(req.Volume); ok {
		return Volume{}, errorf(ErrVolumeExists, "volume %q already exists in pool %q", req.Volume, l.Name)
	}
	switch {
	case req.From == "":
		return Volume{}, errorf(ErrInvalidRequest, "take over volume %q: the node it ran on is required", req.Volume)
	case req.From != r.Owner:
		return Volume{}, errorf(ErrInvalidRequest, "take over volume %q from node %s: its replica here belongs to node %s", req.Volume, req.From, r.Owner)
	case req.Adopt == nil || !req.Adopt.HasIdentity():
		return Volume{}, errorf(ErrInvalidRequest, "take over volume %q: the shared origin needs identifiers to be found by at boot", req.Volume)
	case r.Extent.Length <= MirrorMetaSectors:
		return Volume{}, fmt.Errorf("take over volume %q: replica slice %s holds no data", req.Volume, r.Extent)
	}
	if _, err := ParseMode(string(req.Mode)); err != nil {
		return Volume{}, fmt.Errorf("take over volume %q: %w", req.Volume, err)
	}
	bs := req.BlockSize
	if bs == 0 {
		bs = DefaultBlockSize
	}
	if !ValidBlockSize(bs) {
		return Volume{}, errorf(ErrInvalidRequest, "take over volume %q: block size %d: want a power of two from 512 to 4096", req.Volume, bs)
	}
	if err := checkUUID(uuid); err != nil {
		return Volume{}, errorf(ErrInvalidRequest, "take over volume %q: %v", req.Volume, err)
	}
	wc := Extent{Member: r.Extent.Member, Offset: r.Extent.Offset + MirrorMetaSectors, Length: r.Extent.Length - MirrorMetaSectors}
	v := Volume{
		Name: req.Volume, UUID: uuid, Mode: req.Mode, BlockSize: bs, CreatedUnix: now.Unix(),
		Origin:     Extent{Length: AdoptedSectors(req.Adopt.SizeSectors)},
		Adopted:    req.Adopt,
		WriteCache: &wc,
		FailedOver: &FailedOver{From: req.From, Unix: now.Unix(), Planned: req.Planned},
	}
	next := l.Clone()
	if err := next.RemoveReplica(req.Volume); err != nil {
		return Volume{}, err
	}
	next.Volumes = append(next.Volumes, v)
	next.Generation = l.Generation + 1
	if err := next.Validate(); err != nil {
		return Volume{}, fmt.Errorf("pool %q would be invalid after taking over volume %q: %w", l.Name, req.Volume, err)
	}
	*l = *next
	return v, nil
}

// Release drops a volume that now runs on another node (it failed over
// while this node was cut off), freeing its slices, without writing back
// its write cache: the blocks there are superseded by the copy the other
// node took over, and writing them to the shared origin would overwrite
// newer data. The generation is bumped.
func (l *Layout) Release(volume string) error {
	v, ok := l.Volume(volume)
	if !ok {
		return errorf(ErrVolumeNotFound, "volume %q not in pool %q", volume, l.Name)
	}
	if v.Adopted == nil {
		return fmt.Errorf("volume %q does not cache a shared origin: only such a volume can fail over, and be released", volume)
	}
	return l.RemoveVolume(volume)
}

// AddPeerLeg protects a volume's unmirrored write cache with a peer leg:
// the volume's WriteCache becomes leg 0's data, a metadata slice for leg
// 0 is carved next to it on the same SSD, and leg is leg 1, recorded out
// of sync until dm-raid has copied leg 0 onto it. This is how a volume
// that failed over onto its replica, one copy, is protected again. The
// generation is bumped. Adding the leg a volume has already is no change.
func (l *Layout) AddPeerLeg(volume string, leg RemoteLeg) (changed bool, err error) {
	v, ok := l.Volume(volume)
	switch {
	case !ok:
		return false, errorf(ErrVolumeNotFound, "volume %q not in pool %q", volume, l.Name)
	case v.WriteMirror != nil && v.WriteMirror.Remote != nil && *v.WriteMirror.Remote == leg:
		return false, nil
	case v.WriteMirror != nil:
		return false, fmt.Errorf("volume %q: its write cache is mirrored already", volume)
	case v.WriteCache == nil:
		return false, errorf(ErrNoWriteCache, "volume %q has no write cache to protect", volume)
	}
	next := l.Clone()
	nv, _ := next.Volume(volume)
	what := "write cache of volume " + quote(volume)
	meta, err := newAllocator(next).onMember(MirrorMetaSectors, nv.WriteCache.Member, what+" (leg 0 metadata)")
	if err != nil {
		return false, err
	}
	if meta.Member != nv.WriteCache.Member {
		return false, errorf(ErrNoSpace, "%s: no room for leg 0's %s metadata slice next to its data on %s",
			what, formatSectors(MirrorMetaSectors), l.devicePath(nv.WriteCache.Member))
	}
	nv.WriteMirror = &Mirror{Meta: meta, Remote: &leg, OutOfSync: []int{1}}
	next.Generation++
	if err := next.Validate(); err != nil {
		return false, fmt.Errorf("pool %q would be invalid after protecting volume %q: %w", l.Name, volume, err)
	}
	*l = *next
	return true, nil
}
