// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/blockdev"
	"github.com/tidecache/tidecache/pkg/dm"
	"github.com/tidecache/tidecache/pkg/nvmeof"
	"github.com/tidecache/tidecache/pkg/pool"
	"github.com/tidecache/tidecache/pkg/stack"
)

// A volume whose origin is shared (a LUN other nodes see too, exported by
// a node with `tidecached run --export`) is adopted whole by its owner and
// mirrors its write cache to a peer's replica. When the owner is lost, the
// cluster fences it and the peer takes the volume over (TakeOver): the
// replica holds every write the owner acknowledged, so the peer runs the
// volume on that copy and the shared origin. A fenced owner that comes
// back finds the volume gone from its export and releases its own, stale,
// copy (ReleaseVolume).

// OriginTimeouts are the NVMe/TCP timeouts of a shared origin. Unlike a
// peer leg, which must fail fast so the mirror goes on with its other leg,
// an origin has no other copy: I/O waits while the exporting node is
// briefly unreachable (no fast_io_fail), as a SAN path does, and fails
// once the controller is given up (10 minutes, the kernel's default) or at
// once when the export removes this node (a fence disables its namespace).
var OriginTimeouts = nvmeof.Timeouts{KeepAlive: 5 * time.Second, ReconnectDelay: 2 * time.Second, CtrlLoss: 10 * time.Minute}

// AttachOrigin connects this node to a shared origin's export on node
// exporter (unless connected) and returns its block device.
func (e *Engine) AttachOrigin(ctx context.Context, exporter string, r nvmeof.Remote) (string, error) {
	if _, err := os.Stat(e.initiator.Fabrics); err != nil {
		if _, err := e.runner.Run(ctx, "modprobe", "nvme-tcp"); err != nil {
			return "", fmt.Errorf("attach shared origin %s: %w", r.NQN, err)
		}
	}
	secret, err := e.hostSecret(ctx, exporter)
	if err != nil {
		return "", fmt.Errorf("attach shared origin %s: %w", r.NQN, err)
	}
	r.Secret = secret
	ctx, cancel := context.WithTimeout(ctx, attachTimeout)
	defer cancel()
	dev, err := e.initiator.Attach(ctx, r, OriginTimeouts)
	if err != nil {
		return "", fmt.Errorf("attach shared origin: %w", err)
	}
	return dev, nil
}

// FindOrigin returns the path of the block device whose identifier (the
// kernel's wwid) is wwid, refusing none or more than one.
func (e *Engine) FindOrigin(ctx context.Context, wwid string) (string, error) {
	return e.locate(ctx, pool.Adopted{WWN: wwid})
}

// TakeOverRequest asks this node to run a volume that fails over to it.
type TakeOverRequest struct {
	// Volume is the volume's name; this node keeps its replica.
	Volume string
	// From is the node it ran on, fenced by the cluster.
	From string
	// Origin is the shared origin's block device on this node.
	Origin string
	// Planned says the old node handed the volume over in a planned move
	// (it stopped the volume itself) rather than being fenced: the layout
	// records which (pool.FailedOver.Planned).
	Planned bool
	// Mode is the mode the volume ran in on its old node. In writeback
	// the replica holds the write cache, dirty blocks and dm-writecache's
	// committed metadata alike, and the volume starts on it as it is; in
	// any other mode nothing is dirty and the cache is not read.
	Mode pool.Mode
}

// ErrNoCacheMetadata is returned when a volume that ran in writeback is
// taken over from a replica whose data part holds no dm-writecache
// superblock: it is not the copy of a write cache, and starting on it
// would serve the origin without the writes the old owner acknowledged.
var ErrNoCacheMetadata = errors.New("no dm-writecache superblock on the replica")

// TakeOver runs a volume on the replica this node keeps of its write
// cache and on its shared origin. The replica's export is removed and its
// device torn down first (nothing may write to it but this node now), the
// layout then records the volume in place of the replica in one
// generation, and the stack is activated without zeroing anything: the
// write tier starts on the write cache the old owner left, whose dirty
// blocks dm-writecache writes back to the origin. A volume already taken
// over is activated if it is not active, and returned.
func (e *Engine) TakeOver(ctx context.Context, req TakeOverRequest) (VolumeInfo, error) {
	if err := pool.ValidateName("volume", req.Volume); err != nil {
		return VolumeInfo{}, err
	}
	unlock, err := e.lock(ctx)
	if err != nil {
		return VolumeInfo{}, err
	}
	defer unlock()
	found, err := e.scan(ctx)
	if err != nil {
		return VolumeInfo{}, err
	}
	if p, v, err := findVolume(found, req.Volume); err == nil {
		if v.FailedOver == nil {
			return VolumeInfo{}, fmt.Errorf("volume %s: %w in pool %s, and it was not taken over from a replica", req.Volume, pool.ErrVolumeExists, p.Layout.Name)
		}
		if err := e.activateExisting(ctx, p, *v); err != nil {
			return VolumeInfo{}, err
		}
		return e.volumeInfo(ctx, p, *v), nil
	}
	var p *poolState
	var r *pool.Replica
	for _, ps := range found.sortedPools() {
		if rr, ok := ps.Layout.Replica(req.Volume); ok {
			p, r = ps, rr
			break
		}
	}
	if p == nil {
		return VolumeInfo{}, fmt.Errorf("volume %s: this node keeps no replica of it to take over: %w", req.Volume, pool.ErrVolumeNotFound)
	}
	if missing := p.missing(); len(missing) > 0 {
		return VolumeInfo{}, fmt.Errorf("pool %s: SSD members %v are missing", p.Layout.Name, missing)
	}
	member, ok := p.Members[r.Extent.Member]
	if !ok {
		return VolumeInfo{}, fmt.Errorf("volume %s: the replica's SSD %s is missing", req.Volume, r.Extent.Member)
	}
	origin, err := blockdev.LookupBlock(req.Origin)
	if err != nil {
		return VolumeInfo{}, fmt.Errorf("volume %s: shared origin: %w", req.Volume, err)
	}
	adopted, err := e.identify(ctx, origin.Path)
	if err != nil {
		return VolumeInfo{}, fmt.Errorf("volume %s: shared origin: %w", req.Volume, err)
	}
	// The replica is this node's alone from here: no export, no device.
	if err := e.target.Unexport(nvmeof.ReplicaNQN(r.UUID)); err != nil {
		return VolumeInfo{}, fmt.Errorf("volume %s: stop exporting the replica: %w", req.Volume, err)
	}
	if err := e.removeDevice(ctx, stack.ReplicaNamePrefix+req.Volume); err != nil {
		return VolumeInfo{}, fmt.Errorf("volume %s: remove the replica's device: %w", req.Volume, err)
	}
	dataStart := (r.Extent.Offset + pool.MirrorMetaSectors) * pool.SectorSize
	mode, blockSize, err := replicaMode(member, int64(dataStart), req.Mode)
	if err != nil {
		return VolumeInfo{}, fmt.Errorf("volume %s: replica on %s: %w", req.Volume, member, err)
	}
	if mode != req.Mode {
		e.log.Warn("the replica holds a write cache the volume's last status did not report: taking over in writeback, so its dirty blocks are written back",
			"volume", req.Volume, "status_mode", req.Mode, "block_size", blockSize)
		req.Mode = mode
	}
	poolOrigin, err := e.resolveOrigin(ctx, p.Layout)
	if err != nil {
		return VolumeInfo{}, err
	}
	next := p.Layout.Clone()
	v, err := next.TakeOverReplica(pool.TakeOverRequest{Volume: req.Volume, From: req.From, Adopt: &adopted, Mode: req.Mode, BlockSize: blockSize, Planned: req.Planned}, newUUID(), time.Now())
	if err != nil {
		return VolumeInfo{}, fmt.Errorf("pool %s: %w", p.Layout.Name, err)
	}
	if p.Adopted == nil {
		p.Adopted = map[string]string{}
	}
	p.Adopted[v.UUID] = origin.Path
	st, err := stack.Build(v, e.devices(p, poolOrigin), e.cfg.Tuning)
	if err != nil {
		return VolumeInfo{}, err
	}
	if err := e.requireTargets(ctx, st); err != nil {
		return VolumeInfo{}, err
	}
	// Recorded before it is activated, and nothing zeroed: a crash after
	// the record leaves a volume assembly (or the next take-over call)
	// starts on the same cache.
	if err := e.writeLayout(p, poolOrigin, next); err != nil {
		return VolumeInfo{}, err
	}
	if err := e.activate(ctx, st); err != nil {
		return VolumeInfo{}, fmt.Errorf("volume %s taken over and recorded but not active: %w", req.Volume, err)
	}
	if err := e.syncAdoptedRules(ctx, layoutsWith(found, p, next), "", origin.Path); err != nil {
		e.log.Warn("shared origin keeps its /dev/disk links", "volume", req.Volume, "device", origin.Path, "err", err)
	}
	e.log.Warn("volume taken over from its replica", "volume", req.Volume, "from", req.From, "pool", p.Layout.Name,
		"origin", adopted.String(), "mode", v.Mode, "top", st.Top().Path())
	return e.volumeInfo(ctx, p, v), nil
}

// activateExisting brings up a volume of the layout whose devices are not
// all there (a take-over interrupted after its record).
func (e *Engine) activateExisting(ctx context.Context, p *poolState, v pool.Volume) error {
	origin, err := e.resolveOrigin(ctx, p.Layout)
	if err != nil {
		return err
	}
	st, err := stack.Build(v, e.devices(p, origin), e.cfg.Tuning)
	if err != nil {
		return fmt.Errorf("volume %s: %w", v.Name, err)
	}
	return e.activate(ctx, st)
}

// ReleaseVolume drops a volume of this node that the cluster failed over
// to another node while this one was fenced. Its write cache is not
// written back: every write this node acknowledged is in the copy the
// other node took over, and these blocks, written to the shared origin
// now, would overwrite newer data. Its devices are removed (refused while
// the volume is open: unmount it first), its peer leg detached and its
// slices freed.
func (e *Engine) ReleaseVolume(ctx context.Context, name string) error {
	unlock, p, v, err := e.lockVolume(ctx, name)
	if err != nil {
		return err
	}
	defer unlock()
	if v.Adopted == nil {
		return fmt.Errorf("volume %s does not cache a shared origin: only such a volume fails over, and is released", name)
	}
	top := stack.DeviceName(name, stack.RoleTop)
	switch info, err := e.dm.Info(ctx, top); {
	case errors.Is(err, dm.ErrNotFound):
	case err != nil:
		return fmt.Errorf("volume %s: %w", name, err)
	case info.OpenCount > 0:
		return fmt.Errorf("volume %s: %w: %s is open %d time(s), though the volume runs on another node now and its I/O here fails; unmount it first",
			name, ErrInUse, dm.DevicePath(top), info.OpenCount)
	}
	if err := e.removeStack(ctx, *v); err != nil {
		return err
	}
	e.detachPeerLegs(ctx, *v, "released volume's peer leg stays attached")
	origin, err := e.resolveOrigin(ctx, p.Layout)
	if err != nil {
		return err
	}
	next := p.Layout.Clone()
	if err := next.Release(name); err != nil {
		return err
	}
	if err := e.writeLayout(p, origin, next); err != nil {
		return err
	}
	e.log.Warn("volume released: it runs on another node since this one was fenced; its write cache here was dropped, not written back",
		"volume", name, "pool", p.Layout.Name, "origin", v.Adopted.String())
	return nil
}

// wcMagic is dm-writecache's superblock magic (MEMORY_SUPERBLOCK_MAGIC).
const wcMagic = 0x23489321

// replicaMode decides the mode a volume taken over from its replica
// starts in from what the replica holds, not from the mode its old node
// last reported (reported), which may be stale: a node that switched to
// writeback and died before its status reached etcd leaves dirty blocks
// under a status that says writethrough. A replica whose data part (at
// dataStart on dev) holds a dm-writecache superblock is started in
// writeback on that cache, whatever was reported: dm-writecache writes its
// dirty blocks back, and a cache drained before a switch to writethrough
// holds none (written-back entries are cleared in its metadata), so
// starting on it costs nothing. Without a superblock nothing was ever
// cached: the reported mode stands, except that a reported writeback is
// refused (ErrNoCacheMetadata): that replica is not a copy of a write
// cache.
func replicaMode(dev string, dataStart int64, reported pool.Mode) (pool.Mode, uint32, error) {
	bs, err := writecacheBlockSize(dev, dataStart)
	switch {
	case err == nil:
		return pool.ModeWriteback, bs, nil
	case errors.Is(err, ErrNoCacheMetadata) && reported != pool.ModeWriteback:
		return reported, 0, nil
	default:
		return "", 0, err
	}
}

// writecacheBlockSize reads the block size dm-writecache recorded in the
// superblock at off on dev (SSD mode: the cache device's first sector
// holds magic, version, block size, little-endian 32-bit words). The read
// bypasses the page cache: the cache was written through device-mapper,
// not through this device's buffers.
func writecacheBlockSize(dev string, off int64) (uint32, error) {
	f, err := os.OpenFile(dev, os.O_RDONLY|unix.O_DIRECT, 0)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	// O_DIRECT wants a buffer aligned to the logical block size: an
	// anonymous mapping is page-aligned.
	buf, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return 0, err
	}
	defer unix.Munmap(buf)
	if _, err := f.ReadAt(buf, off); err != nil {
		return 0, fmt.Errorf("read the write cache's superblock: %w", err)
	}
	magic := binary.LittleEndian.Uint32(buf[0:4])
	bs := binary.LittleEndian.Uint32(buf[8:12])
	if magic != wcMagic {
		return 0, fmt.Errorf("%w (magic %#x)", ErrNoCacheMetadata, magic)
	}
	if !pool.ValidBlockSize(bs) {
		return 0, fmt.Errorf("the write cache's superblock records block size %d, not one tidecache uses", bs)
	}
	return bs, nil
}

// FailoverLegTimeouts are the NVMe/TCP timeouts of the peer leg of a
// volume that can fail over (on a shared origin). Its I/O is never failed
// by the kernel: while the peer does not answer, writes wait, unfinished
// and unacknowledged, until the daemon has recorded in etcd that the
// replica is outdated (which the cluster refuses once it failed the volume
// over) and then fails the leg itself (FailPeerLeg). A leg that failed on
// its own, as a plain peer leg does after a few seconds, would let the
// mirror acknowledge writes on one leg while the leader may be failing the
// volume over to the other. The keep-alive notices a silent peer in 2 s.
var FailoverLegTimeouts = nvmeof.Timeouts{KeepAlive: 2 * time.Second, ReconnectDelay: time.Second, CtrlLoss: -1}

// peerLegTimeouts are the timeouts a volume's peer leg is attached with.
func peerLegTimeouts(v pool.Volume) nvmeof.Timeouts {
	if v.CanFailOver() {
		return FailoverLegTimeouts
	}
	return nvmeof.PeerLegTimeouts
}

// PeerLeg is the state of the peer leg of a running volume that can fail
// over.
type PeerLeg struct {
	Volume string
	// Node is the peer, NQN its export.
	Node, NQN string
	// Attached says a controller of the export is live: I/O flows. When
	// it is not, the volume's writes wait (FailoverLegTimeouts).
	Attached bool
	// InSync says the leg is attached, the mirror runs on both legs and
	// the layout records neither out of sync: the replica holds every
	// write.
	InSync bool
	// Failed says the leg is out of the mirror (dm-raid failed it, or it
	// is recorded out of sync): writes go on without it.
	Failed bool
	// Held counts the I/Os the peer failed that the leg's errhold slices
	// hold: writes that wait, unacknowledged, though the controller is
	// live (the replica's SSD or namespace fails them).
	Held uint64
	// Passing says a slice passes the peer's errors up (FailPeerLeg sent
	// it "fail"): it must hold them again (RearmPeerLeg) before the
	// replica is counted in sync.
	Passing bool
}

// PeerLegs reports the peer legs of this node's running volumes that can
// fail over.
func (e *Engine) PeerLegs(ctx context.Context) ([]PeerLeg, error) {
	found, err := e.scan(ctx)
	if err != nil {
		return nil, err
	}
	var out []PeerLeg
	for _, p := range found.sortedPools() {
		for _, v := range p.Layout.Volumes {
			if !v.CanFailOver() || v.Mode != pool.ModeWriteback {
				continue
			}
			info := e.volumeInfo(ctx, p, v)
			if info.State != api.StateActive && info.State != api.StateSuspended {
				continue
			}
			r := v.WriteMirror.Remote
			live, err := e.initiator.Live(r.NQN)
			if err != nil {
				return nil, err
			}
			leg := PeerLeg{Volume: v.Name, Node: r.Node, NQN: r.NQN, Attached: live}
			if m := info.Mirror; m != nil {
				// dm-raid says AA until a write fails on a leg whose
				// controller is gone: in sync means attached too.
				leg.InSync = live && m.HealthString() == "AA" && len(v.WriteMirror.OutOfSync) == 0
				leg.Failed = len(m.Health) > 1 && (m.Health[1] == dm.LegDead || m.Health[1] == dm.LegMissing)
			}
			leg.Failed = leg.Failed || slices.Contains(v.WriteMirror.OutOfSync, 1)
			if leg.Held, leg.Passing, err = e.peerSlices(ctx, v.Name); err != nil {
				return nil, err
			}
			out = append(out, leg)
		}
	}
	return out, nil
}

// FailPeerLeg lets a volume that can fail over go on without its peer
// leg, which stopped answering: its controller is deleted, which fails
// the writes that waited for it, so that dm-raid drops the leg and
// completes them on the local one. The caller first records the replica
// outdated in etcd (see FailoverLegTimeouts): only then may a write
// complete without it. It takes no engine lock (a drain holding it may be
// one of the writers waiting); the layout records the leg out of sync at
// the daemon's next look at the mirrors (RecordMirrors), and until then a
// volume that can fail over is never started on one leg (RepairVolume).
func (e *Engine) FailPeerLeg(ctx context.Context, leg PeerLeg) error {
	// The slices pass errors up first: the I/O they hold fails now, and
	// the I/O the controller's deletion fails is not held in turn.
	if err := e.messagePeerSlices(ctx, leg.Volume, dm.ErrHoldFail); err != nil {
		return fmt.Errorf("volume %s: fail the peer leg: %w", leg.Volume, err)
	}
	if err := e.detachPeerLeg(ctx, leg.NQN); err != nil {
		return fmt.Errorf("volume %s: fail the peer leg: %w", leg.Volume, err)
	}
	e.log.Warn("peer leg failed on purpose: its replica is recorded outdated, and writes go on on the local leg", "volume", leg.Volume, "peer", leg.Node)
	return nil
}

// peerLegDetachWait bounds how long detaching a peer leg waits for its
// controllers to go. A reconnecting one is not deleted but told to give
// up, and goes once its attempt fails: a few seconds for a peer that is
// gone (nvmeof.Initiator.Detach says why). One left then is gone soon
// after, by the kernel's hand.
const peerLegDetachWait = 20 * time.Second

// detachPeerLeg disconnects the controllers of a peer leg's export.
func (e *Engine) detachPeerLeg(ctx context.Context, nqn string) error {
	ctx, cancel := context.WithTimeout(ctx, peerLegDetachWait)
	defer cancel()
	return e.initiator.Detach(ctx, nqn)
}

// peerSliceRoles are the devices of a peer leg, the errhold slices of a
// volume that can fail over.
var peerSliceRoles = []stack.Role{stack.RoleWriteMeta1, stack.RoleWriteLeg1}

// peerSlices reads the errhold slices of a volume's peer leg: the I/Os
// they hold, and whether one passes errors up. Slices that do not run
// errhold (a stack built before it) hold nothing.
func (e *Engine) peerSlices(ctx context.Context, volume string) (held uint64, passing bool, err error) {
	for _, r := range peerSliceRoles {
		st, ok, err := parsedStatus(ctx, e, stack.DeviceName(volume, r), dm.ErrHoldTarget, dm.ParseErrHoldStatus)
		if err != nil {
			return 0, false, fmt.Errorf("volume %s: peer leg: %w", volume, err)
		}
		if ok {
			held += st.HeldNow
			passing = passing || st.Passing
		}
	}
	return held, passing, nil
}

// PeerLegHeld returns the I/Os the peer leg of a volume holds (see
// PeerLeg.Held): a cheap look, two status ioctls, for the guard's polls
// between full scans.
func (e *Engine) PeerLegHeld(ctx context.Context, volume string) (uint64, error) {
	held, _, err := e.peerSlices(ctx, volume)
	return held, err
}

// RetryPeerLeg resubmits the I/Os the peer leg of a volume holds: if the
// peer answers again (its SSD or namespace is back) the writes complete
// on both legs; if not, they are held again. It is always safe, and takes
// no engine lock, for the same reason as FailPeerLeg.
func (e *Engine) RetryPeerLeg(ctx context.Context, leg PeerLeg) error {
	if err := e.messagePeerSlices(ctx, leg.Volume, dm.ErrHoldRetry); err != nil {
		return fmt.Errorf("volume %s: retry the peer leg: %w", leg.Volume, err)
	}
	return nil
}

// RearmPeerLeg makes the slices of a volume's peer leg hold the peer's
// errors again after FailPeerLeg let them through: the leg is back in
// sync, and its replica is about to count as holding every write again.
func (e *Engine) RearmPeerLeg(ctx context.Context, leg PeerLeg) error {
	if err := e.messagePeerSlices(ctx, leg.Volume, dm.ErrHoldHold); err != nil {
		return fmt.Errorf("volume %s: hold the peer leg's errors again: %w", leg.Volume, err)
	}
	e.log.Info("peer leg back in sync: its errors are held again until the replica is recorded outdated", "volume", leg.Volume, "peer", leg.Node)
	return nil
}

// messagePeerSlices sends msg to each errhold slice of a volume's peer
// leg; slices that do not run errhold, or do not exist, are skipped.
func (e *Engine) messagePeerSlices(ctx context.Context, volume, msg string) error {
	for _, r := range peerSliceRoles {
		name := stack.DeviceName(volume, r)
		switch _, ok, err := e.targetStatus(ctx, name, dm.ErrHoldTarget); {
		case err != nil:
			return err
		case !ok:
			continue
		}
		if _, err := e.dm.Message(ctx, name, 0, msg); err != nil {
			return fmt.Errorf("message %q to %s: %w", msg, name, err)
		}
	}
	return nil
}

// AddPeerLeg protects a volume's unmirrored write cache with a leg on a
// peer's replica (after a failover, the volume runs on one copy): the
// layout records the mirror first (leg 1 out of sync), then, in
// writeback, the legs' slices are created and the write tier's cache
// device (wdata) is reloaded from the plain slice into a dm-raid raid1 of
// that same slice and the peer's replica, both with fresh dm-raid
// metadata, so that dm-raid copies leg 0, the cache as it is, onto leg 1
// in the background. dm-writecache above is not reloaded: its cache
// device keeps its name and content, and wdata's reload holds its I/O for
// the swap. A crash before the reload leaves a layout assembly builds the
// same new mirror from. In another mode the mirror is built at the next
// switch to writeback.
func (e *Engine) AddPeerLeg(ctx context.Context, name string, leg pool.RemoteLeg) error {
	unlock, p, _, err := e.lockVolume(ctx, name)
	if err != nil {
		return err
	}
	defer unlock()
	next := p.Layout.Clone()
	changed, err := next.AddPeerLeg(name, leg)
	if err != nil {
		return fmt.Errorf("protect volume %s on node %s: %w", name, leg.Node, err)
	}
	if !changed {
		return nil
	}
	origin, err := e.resolveOrigin(ctx, p.Layout)
	if err != nil {
		return err
	}
	nv, _ := next.Volume(name)
	running := e.running(ctx, name)
	if running {
		dev, err := e.attachRemote(ctx, leg, nv.WriteCache.Length, peerLegTimeouts(*nv))
		if err != nil {
			return fmt.Errorf("protect volume %s: %w", name, err)
		}
		p.Remote[leg.UUID] = dev
		// Fresh dm-raid metadata on both legs: a new array, which
		// resyncs from its first leg.
		member, ok := p.Members[nv.WriteMirror.Meta.Member]
		if !ok {
			return fmt.Errorf("protect volume %s: SSD member %s missing", name, nv.WriteMirror.Meta.Member)
		}
		if err := e.zeroHead(member, nv.WriteMirror.Meta); err != nil {
			return fmt.Errorf("protect volume %s: %w", name, err)
		}
		if err := e.zeroHead(dev, pool.Extent{Length: pool.MirrorMetaSectors}); err != nil {
			return fmt.Errorf("protect volume %s: peer leg: %w", name, err)
		}
	}
	st, err := stack.Build(*nv, e.devices(p, origin), e.cfg.Tuning)
	if err != nil {
		return err
	}
	if err := e.requireTargets(ctx, st); err != nil {
		return err
	}
	if err := e.writeLayout(p, origin, next); err != nil {
		return fmt.Errorf("protect volume %s: record the mirror: %w", name, err)
	}
	if running {
		for _, d := range st.Devices {
			_, err := e.ensure(ctx, d)
			var drift *DriftError
			switch {
			case errors.As(err, &drift) && d.Role == stack.RoleWriteData:
				if err := e.reload(ctx, d.Name, d.Table, nil); err != nil {
					return fmt.Errorf("protect volume %s: %w", name, err)
				}
			case err != nil:
				return fmt.Errorf("protect volume %s: %w", name, err)
			}
		}
	}
	e.log.Warn("write cache protected again: leg 1 on a peer's replica, copied from leg 0 in the background",
		"volume", name, "peer", leg.Node, "running", running)
	return nil
}

// running reports whether a volume's write tier device exists.
func (e *Engine) running(ctx context.Context, name string) bool {
	_, err := e.dm.Info(ctx, stack.DeviceName(name, stack.RoleWriteTier))
	return err == nil
}

// Attached reports whether a controller of the export nqn is live: a
// cheap look (sysfs) at a peer leg between PeerLegs' full ones.
func (e *Engine) Attached(nqn string) (bool, error) { return e.initiator.Live(nqn) }
