// SPDX-License-Identifier: Apache-2.0

package csi

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/pool"
	"github.com/tidecache/tidecache/pkg/store"
)

// ControllerExpandVolume raises the size in the volume's spec; the node
// that holds the volume grows it live (its data never moves on the HDDs:
// a volume followed by another gets a further extent) and reports the
// new size in its status, which this call waits for. A filesystem volume
// then needs NodeExpandVolume; a raw block one is done.
func (c *controller) ControllerExpandVolume(ctx context.Context, req *csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
	id := req.GetVolumeId()
	switch {
	case id == "":
		return nil, errorf(errInvalid, "volume ID missing")
	case req.GetCapacityRange() == nil || req.GetCapacityRange().GetRequiredBytes() <= 0:
		return nil, errorf(errInvalid, "volume %s: capacity range missing: say how large it is to grow", id)
	}
	size, err := volumeSize(req.GetCapacityRange(), 0)
	if err != nil {
		return nil, err
	}
	if pool.ValidateName("volume", id) != nil {
		return nil, errorf(errNotFound, "volume %q: no such volume", id)
	}
	var (
		rev  int64
		have uint64
	)
	for try := 0; ; try++ {
		have, rev, err = c.raiseSize(ctx, id, size)
		if !errors.Is(err, store.ErrConflict) || try == conflictRetries {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	if err := c.waitGrown(ctx, id, have, rev); err != nil {
		return nil, err
	}
	return &csi.ControllerExpandVolumeResponse{
		CapacityBytes:         int64(have),
		NodeExpansionRequired: req.GetVolumeCapability().GetBlock() == nil,
	}, nil
}

// raiseSize writes size into the volume's spec unless it already asks for
// as much, and returns the size the spec asks for and its revision.
func (c *controller) raiseSize(ctx context.Context, id string, size uint64) (uint64, int64, error) {
	spec, meta, err := c.st.GetVolumeSpec(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return 0, 0, errorf(errNotFound, "volume %s: no such volume", id)
	case err != nil:
		return 0, 0, err
	case spec.SharedOrigin != nil:
		return 0, 0, errorf(errInvalid, "volume %s caches the shared device %s of node %s whole: grow that device instead", id, spec.SharedOrigin.Export, spec.SharedOrigin.Node)
	case spec.SizeBytes >= size:
		return spec.SizeBytes, meta.ModRevision, nil
	}
	if err := c.checkRoom(ctx, spec, size-spec.SizeBytes); err != nil {
		return 0, 0, err
	}
	spec.SizeBytes = size
	m, err := c.st.UpdateVolumeSpec(ctx, spec, meta.ModRevision)
	if err != nil {
		return 0, 0, err
	}
	c.d.log.Info("volume spec grown", "volume", id, "node", spec.Node, "size", size)
	return size, m.ModRevision, nil
}

// checkRoom refuses a growth the volume's pool cannot hold, as its node
// last reported the pool's free space: the node would refuse it too, but
// only after the spec asks for it.
func (c *controller) checkRoom(ctx context.Context, spec api.VolumeSpec, more uint64) error {
	live, _, _, err := c.st.ListNodes(ctx)
	if err != nil {
		return err
	}
	for _, n := range values(live) {
		if n.Name != spec.Node {
			continue
		}
		for _, p := range n.Pools {
			if p.Name == spec.Pool && p.OriginFreeBytes < more {
				return errorf(errOutOfRange, "volume %s: growing it by %s needs that much free in pool %s on node %s, which has %s",
					spec.Name, pool.FormatBytes(more), p.Name, n.Name, pool.FormatBytes(p.OriginFreeBytes))
			}
		}
	}
	return nil
}

// waitGrown re-reads the volume's status until its node reports it at
// size for spec revision rev (or later), or reports an error for it.
func (c *controller) waitGrown(ctx context.Context, id string, size uint64, rev int64) error {
	ctx, cancel := context.WithTimeout(ctx, c.d.cfg.PlacementTimeout)
	defer cancel()
	var last api.VolumeStatus
	for {
		st, _, err := c.st.GetVolumeStatus(ctx, id)
		switch {
		case err == nil && st.SizeBytes >= size:
			return nil
		case err == nil && st.ObservedRevision >= rev && st.State == api.StateError:
			return errorf(errOutOfRange, "volume %s: node %s could not grow it to %s: %s", id, st.Node, pool.FormatBytes(size), st.Error)
		case err == nil:
			last = st
		case !errors.Is(err, store.ErrNotFound) && ctx.Err() == nil:
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("volume %s: its spec asks for %s, but node %s has not grown it in time (status: %d bytes, state %q, revision %d of %d; is its tidecached running?): %w",
				id, pool.FormatBytes(size), last.Node, last.SizeBytes, last.State, last.ObservedRevision, rev, ctx.Err())
		case <-time.After(pollInterval):
		}
	}
}

// NodeExpandVolume grows the filesystem on a volume ControllerExpandVolume
// grew, online: resize2fs for ext4, xfs_growfs for XFS, on the mount at
// volume_path. A raw block volume has nothing to grow. It reports the
// device's size.
func (n *node) NodeExpandVolume(ctx context.Context, req *csi.NodeExpandVolumeRequest) (*csi.NodeExpandVolumeResponse, error) {
	id, path := req.GetVolumeId(), req.GetVolumePath()
	switch {
	case id == "":
		return nil, errorf(errInvalid, "volume ID missing")
	case path == "":
		return nil, errorf(errInvalid, "volume %s: volume path missing", id)
	}
	dev, rdev, err := n.device(id)
	if err != nil {
		return nil, err
	}
	size, err := deviceSize(dev)
	if err != nil {
		return nil, fmt.Errorf("volume %s: %w", id, err)
	}
	if want := req.GetCapacityRange().GetRequiredBytes(); want > 0 && size < uint64(want) {
		return nil, errorf(errPrecondition, "volume %s: %s is %s, below the %s asked: the controller has not grown it yet", id, dev, pool.FormatBytes(size), pool.FormatBytes(uint64(want)))
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, errorf(errNotFound, "volume %s: path %s does not exist", id, path)
		}
		return nil, fmt.Errorf("volume %s: stat %s: %w", id, path, err)
	}
	switch {
	case st.Mode&unix.S_IFMT == unix.S_IFBLK && st.Rdev == rdev:
		return &csi.NodeExpandVolumeResponse{CapacityBytes: int64(size)}, nil // raw block: nothing to grow
	case st.Mode&unix.S_IFMT == unix.S_IFBLK:
		return nil, errorf(errNotFound, "volume %s: %s is another device", id, path)
	case st.Dev != rdev:
		return nil, errorf(errNotFound, "volume %s: %s is not on the volume's filesystem", id, path)
	}
	m, mounted, err := mountAt(path)
	if err == nil && !mounted && req.GetStagingTargetPath() != "" {
		path = req.GetStagingTargetPath()
		m, mounted, err = mountAt(path)
	}
	switch {
	case err != nil:
		return nil, fmt.Errorf("volume %s: %w", id, err)
	case !mounted:
		return nil, errorf(errNotFound, "volume %s: neither its volume path nor its staging path is a mount point", id)
	}
	switch m.FSType {
	case fsExt4:
		_, err = n.d.cfg.Runner.Run(ctx, "resize2fs", dev)
	case fsXFS:
		_, err = n.d.cfg.Runner.Run(ctx, "xfs_growfs", path)
	default:
		return nil, errorf(errPrecondition, "volume %s: %s holds %s, which the driver does not grow (ext4 or xfs)", id, path, m.FSType)
	}
	if err != nil {
		return nil, fmt.Errorf("volume %s: grow the %s filesystem at %s: %w", id, m.FSType, path, err)
	}
	n.d.log.Info("filesystem grown", "volume", id, "fstype", m.FSType, "path", path, "bytes", size)
	return &csi.NodeExpandVolumeResponse{CapacityBytes: int64(size)}, nil
}
