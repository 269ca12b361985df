// SPDX-License-Identifier: Apache-2.0

package csi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/uuid"
	"golang.org/x/sys/unix"

	"github.com/tidecache/tidecache/pkg/command"
	"github.com/tidecache/tidecache/pkg/pool"
	"github.com/tidecache/tidecache/pkg/stack"
)

// node stages and publishes the volumes tidecached built on this node.
type node struct {
	csi.UnimplementedNodeServer
	d *Driver
}

// devicePollInterval is how often NodeStageVolume looks for the device.
const devicePollInterval = 250 * time.Millisecond

func (n *node) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{
		NodeId:             n.d.cfg.NodeID,
		AccessibleTopology: &csi.Topology{Segments: map[string]string{TopologyKey: n.d.cfg.NodeID}},
	}, nil
}

func (n *node) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	rpc := func(t csi.NodeServiceCapability_RPC_Type) *csi.NodeServiceCapability {
		return &csi.NodeServiceCapability{Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: t}}}
	}
	return &csi.NodeGetCapabilitiesResponse{Capabilities: []*csi.NodeServiceCapability{
		rpc(csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME),
		rpc(csi.NodeServiceCapability_RPC_GET_VOLUME_STATS),
		rpc(csi.NodeServiceCapability_RPC_GET_VOLUME_HEALTH),
		rpc(csi.NodeServiceCapability_RPC_EXPAND_VOLUME),
	}}, nil
}

// devicePath is the volume's device: /dev/mapper/tc-<volume>.
func (n *node) devicePath(volume string) string {
	return filepath.Join(n.d.cfg.DeviceDir, stack.DeviceName(volume, stack.RoleTop))
}

// device returns the st_rdev of a volume's device; errNotFound when the
// ID cannot be a volume or the device is not on this node.
func (n *node) device(volume string) (string, uint64, error) {
	if pool.ValidateName("volume", volume) != nil {
		return "", 0, errorf(errNotFound, "volume %q: no such volume", volume)
	}
	path := n.devicePath(volume)
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return path, 0, errorf(errNotFound, "volume %s: no device %s on node %s", volume, path, n.d.cfg.NodeID)
		}
		return path, 0, fmt.Errorf("volume %s: stat %s: %w", volume, path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK {
		return path, 0, fmt.Errorf("volume %s: %s is not a block device", volume, path)
	}
	return path, st.Rdev, nil
}

// waitDevice waits until the volume's device exists and has its table
// (a size above zero): tidecached builds it from the spec, which may
// take a moment after CreateVolume returned.
func (n *node) waitDevice(ctx context.Context, volume string) (string, uint64, error) {
	if err := pool.ValidateName("volume", volume); err != nil {
		return "", 0, errorf(errNotFound, "volume %q: no such volume", volume)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, n.d.cfg.DeviceTimeout)
		defer cancel()
	}
	for {
		path, rdev, err := n.device(volume)
		if err == nil {
			var size uint64
			if size, err = deviceSize(path); err == nil && size > 0 {
				return path, rdev, nil
			}
			if err == nil {
				err = fmt.Errorf("%s has no table yet", path)
			}
		}
		select {
		case <-ctx.Done():
			return "", 0, fmt.Errorf("volume %s: device %s not ready on node %s (is tidecached running, and is the volume placed here?): last: %v: %w",
				volume, n.devicePath(volume), n.d.cfg.NodeID, err, ctx.Err())
		case <-time.After(devicePollInterval):
		}
	}
}

// deviceSize returns a block device's size in bytes.
func deviceSize(path string) (uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	end, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return 0, fmt.Errorf("size of %s: %w", path, err)
	}
	return uint64(end), nil
}

func (n *node) NodeStageVolume(ctx context.Context, req *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	id, staging := req.GetVolumeId(), req.GetStagingTargetPath()
	switch {
	case id == "":
		return nil, errorf(errInvalid, "volume ID missing")
	case staging == "":
		return nil, errorf(errInvalid, "staging target path missing")
	}
	if err := checkCapability(req.GetVolumeCapability()); err != nil {
		return nil, err
	}
	dev, rdev, err := n.waitDevice(ctx, id)
	if err != nil {
		return nil, err
	}
	mnt := req.GetVolumeCapability().GetMount()
	if mnt == nil {
		// Block access: NodePublishVolume binds the device itself;
		// there is nothing to prepare.
		return &csi.NodeStageVolumeResponse{}, nil
	}
	readOnly := req.GetVolumeCapability().GetAccessMode().GetMode() == csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY
	if m, ok, err := mountAt(staging); err != nil {
		return nil, err
	} else if ok {
		if m.Dev != rdev {
			return nil, errorf(errExists, "staging path %s already holds %s, not volume %s", staging, m.Source, id)
		}
		return &csi.NodeStageVolumeResponse{}, nil // staged already
	}
	if err := os.MkdirAll(staging, 0o750); err != nil {
		return nil, fmt.Errorf("staging path: %w", err)
	}
	asked := mnt.GetFsType()
	if asked == "" {
		asked = req.GetVolumeContext()[ParamFSType]
	}
	fs, err := n.prepare(ctx, id, dev, asked, readOnly, req.GetVolumeContext()[contextInstance])
	if err != nil {
		return nil, err
	}
	opts := mnt.GetMountFlags()
	if readOnly {
		opts = append(opts, "ro")
	}
	args := []string{"-t", fs}
	if len(opts) > 0 {
		args = append(args, "-o", strings.Join(opts, ","))
	}
	if _, err := n.d.cfg.Runner.Run(ctx, "mount", append(args, dev, staging)...); err != nil {
		return nil, fmt.Errorf("volume %s: mount: %w", id, err)
	}
	n.d.log.Info("volume staged", "volume", id, "path", staging, "fstype", fs)
	return &csi.NodeStageVolumeResponse{}, nil
}

// prepare returns the filesystem to mount from dev, making it first when
// the volume has none of its own.
//
// A filesystem the driver makes carries a UUID derived from the volume ID
// and its instance (fsUUID). On a volume the driver provisioned (instance
// set), any other signature is what an earlier volume left on the same
// origin extent: the engine does not zero a new volume's extent, so an old
// tenant's filesystem would otherwise be mounted into the new claim. Its
// signatures are wiped and a filesystem made. On any other volume (a
// statically provisioned PV of an existing tidecache volume) nothing is
// ever wiped: an ext4 or XFS there is mounted, anything else refused.
func (n *node) prepare(ctx context.Context, id, dev, asked string, readOnly bool, instance string) (string, error) {
	found, err := n.probe(ctx, dev)
	if err != nil {
		return "", err
	}
	want := fsUUID(id, instance)
	fs := found.fs
	switch {
	case fs == "", found.uuid == want:
		// Empty, or the filesystem this driver made on this volume.
	case instance != "" && readOnly:
		return "", errorf(errPrecondition, "volume %s: %s holds %s left by an earlier volume, and a read-only volume is not wiped", id, dev, fs)
	case instance != "":
		n.d.log.Warn("volume holds a signature an earlier volume left on its extent: wiping it", "volume", id, "found", found.fs, "uuid", found.uuid)
		if _, err := n.d.cfg.Runner.Run(ctx, "wipefs", "-a", dev); err != nil {
			return "", fmt.Errorf("volume %s: wipe stale signatures: %w", id, err)
		}
		fs = ""
	case fs != fsExt4 && fs != fsXFS:
		return "", errorf(errPrecondition, "volume %s: %s holds %s, not a filesystem the driver mounts (ext4 or xfs): refusing to format over it", id, dev, fs)
	}
	switch {
	case fs == "" && readOnly:
		return "", errorf(errPrecondition, "volume %s: %s holds no filesystem of its own, and a read-only volume is not formatted", id, dev)
	case fs == "":
		fs = asked
		if fs == "" {
			fs = defaultFSType
		}
		if err := n.mkfs(ctx, fs, dev, want); err != nil {
			return "", err
		}
		n.d.log.Info("filesystem made", "volume", id, "fstype", fs, "device", dev, "uuid", want)
	case asked != "" && fs != asked:
		return "", errorf(errPrecondition, "volume %s: %s holds %s, but %s was asked for: refusing to format over it", id, dev, fs, asked)
	}
	return fs, nil
}

// signature is what blkid's low-level probe finds on a device.
type signature struct {
	// fs is a filesystem type, "partition table <type>", another
	// signature's type, or "" when the device is empty.
	fs   string
	uuid string
}

func (n *node) probe(ctx context.Context, dev string) (signature, error) {
	out, err := n.d.cfg.Runner.Run(ctx, "blkid", "-p", "-o", "export", dev)
	var ee *command.ExitError
	if errors.As(err, &ee) && ee.Code == 2 {
		return signature{}, nil // blkid: nothing found
	}
	if err != nil {
		return signature{}, fmt.Errorf("probe %s: %w", dev, err)
	}
	vals := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
			vals[k] = v
		}
	}
	switch {
	case vals["TYPE"] != "":
		return signature{fs: vals["TYPE"], uuid: vals["UUID"]}, nil
	case vals["PTTYPE"] != "":
		return signature{fs: "partition table " + vals["PTTYPE"]}, nil
	}
	return signature{fs: "an unknown signature"}, nil
}

// fsNamespace is the UUID namespace of the filesystem UUIDs the driver
// gives the filesystems it makes.
var fsNamespace = uuid.MustParse("5b0c7a52-2d0e-4c55-9d1f-3f6a1c9e7b40")

// fsUUID returns the UUID of the filesystem the driver makes on a volume:
// an RFC 4122 version 5 UUID of the volume ID and its instance. The
// volume's own dm UUID would not do: a failover rebuilds the volume under
// a new one.
func fsUUID(volume, instance string) string {
	return uuid.NewSHA1(fsNamespace, []byte(volume+"\x00"+instance)).String()
}

// mkfs makes fs on dev with the filesystem UUID id.
func (n *node) mkfs(ctx context.Context, fs, dev, id string) error {
	var err error
	switch fs {
	case fsExt4:
		// -F: dev is not a whole disk; mke2fs would ask about nothing else.
		_, err = n.d.cfg.Runner.Run(ctx, "mkfs.ext4", "-q", "-F", "-U", id, dev)
	case fsXFS:
		_, err = n.d.cfg.Runner.Run(ctx, "mkfs.xfs", "-q", "-m", "uuid="+id, dev)
	default:
		return errorf(errInvalid, "fs_type %q: want ext4 or xfs", fs)
	}
	if err != nil {
		return fmt.Errorf("make %s on %s: %w", fs, dev, err)
	}
	return nil
}

func (n *node) NodeUnstageVolume(ctx context.Context, req *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	id, staging := req.GetVolumeId(), req.GetStagingTargetPath()
	switch {
	case id == "":
		return nil, errorf(errInvalid, "volume ID missing")
	case staging == "":
		return nil, errorf(errInvalid, "staging target path missing")
	}
	if err := n.unmountAll(ctx, staging); err != nil {
		return nil, fmt.Errorf("volume %s: %w", id, err)
	}
	n.d.log.Info("volume unstaged", "volume", id, "path", staging)
	return &csi.NodeUnstageVolumeResponse{}, nil
}

// unmountAll unmounts whatever is mounted on path, top first.
func (n *node) unmountAll(ctx context.Context, path string) error {
	for range 8 {
		_, ok, err := mountAt(path)
		if err != nil || !ok {
			return err
		}
		if _, err := n.d.cfg.Runner.Run(ctx, "umount", path); err != nil {
			return fmt.Errorf("unmount %s: %w", path, err)
		}
	}
	return fmt.Errorf("unmount %s: still mounted after 8 unmounts", path)
}

func (n *node) NodePublishVolume(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	id, target, staging := req.GetVolumeId(), req.GetTargetPath(), req.GetStagingTargetPath()
	switch {
	case id == "":
		return nil, errorf(errInvalid, "volume ID missing")
	case target == "":
		return nil, errorf(errInvalid, "target path missing")
	}
	if err := checkCapability(req.GetVolumeCapability()); err != nil {
		return nil, err
	}
	if staging == "" {
		return nil, errorf(errInvalid, "staging target path missing (the driver stages volumes first)")
	}
	dev, rdev, err := n.device(id)
	if err != nil {
		return nil, err
	}
	readOnly := req.GetReadonly() || req.GetVolumeCapability().GetAccessMode().GetMode() == csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY
	block := req.GetVolumeCapability().GetBlock() != nil
	src := staging
	if block {
		src = dev
		if err := os.MkdirAll(filepath.Dir(target), 0o750); err != nil {
			return nil, fmt.Errorf("target path: %w", err)
		}
		f, err := os.OpenFile(target, os.O_CREATE|os.O_RDONLY, 0o640)
		if err != nil {
			return nil, fmt.Errorf("target path: %w", err)
		}
		f.Close()
	} else {
		m, ok, err := mountAt(staging)
		if err != nil {
			return nil, err
		}
		if !ok || m.Dev != rdev {
			return nil, errorf(errPrecondition, "volume %s is not staged at %s", id, staging)
		}
		if err := os.MkdirAll(target, 0o750); err != nil {
			return nil, fmt.Errorf("target path: %w", err)
		}
	}
	if m, ok, err := mountAt(target); err != nil {
		return nil, err
	} else if ok {
		same := m.Dev == rdev
		if block {
			var st unix.Stat_t
			same = unix.Stat(target, &st) == nil && st.Rdev == rdev
		}
		if !same || m.ReadOnly != readOnly {
			return nil, errorf(errExists, "target path %s already holds a mount of %s (read-only %v), not volume %s (read-only %v)", target, m.Source, m.ReadOnly, id, readOnly)
		}
		return &csi.NodePublishVolumeResponse{}, nil // published already
	}
	if _, err := n.d.cfg.Runner.Run(ctx, "mount", "--bind", src, target); err != nil {
		return nil, fmt.Errorf("volume %s: bind mount: %w", id, err)
	}
	if readOnly {
		// A bind mount takes the read-only flag only by a remount.
		if _, err := n.d.cfg.Runner.Run(ctx, "mount", "-o", "remount,bind,ro", target); err != nil {
			_, uerr := n.d.cfg.Runner.Run(context.WithoutCancel(ctx), "umount", target)
			return nil, errors.Join(fmt.Errorf("volume %s: make the bind mount read-only: %w", id, err), uerr)
		}
	}
	n.d.log.Info("volume published", "volume", id, "path", target, "read_only", readOnly, "block", block)
	return &csi.NodePublishVolumeResponse{}, nil
}

func (n *node) NodeUnpublishVolume(ctx context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	id, target := req.GetVolumeId(), req.GetTargetPath()
	switch {
	case id == "":
		return nil, errorf(errInvalid, "volume ID missing")
	case target == "":
		return nil, errorf(errInvalid, "target path missing")
	}
	if err := n.unmountAll(ctx, target); err != nil {
		return nil, fmt.Errorf("volume %s: %w", id, err)
	}
	// The driver made the target (a directory, or a file for block
	// access); the specification asks it to remove it.
	if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("volume %s: remove target path: %w", id, err)
	}
	n.d.log.Info("volume unpublished", "volume", id, "path", target)
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// NodeGetVolumeStats reports a filesystem's bytes and inodes (statfs) or
// a block volume's size. The path must be on the volume: a directory of
// its mounted filesystem, or its device bound for block access.
func (n *node) NodeGetVolumeStats(ctx context.Context, req *csi.NodeGetVolumeStatsRequest) (*csi.NodeGetVolumeStatsResponse, error) {
	id, path := req.GetVolumeId(), req.GetVolumePath()
	switch {
	case id == "":
		return nil, errorf(errInvalid, "volume ID missing")
	case path == "":
		return nil, errorf(errInvalid, "volume path missing")
	}
	dev, rdev, err := n.device(id)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, errorf(errNotFound, "volume %s: path %s does not exist", id, path)
		}
		return nil, fmt.Errorf("volume %s: stat %s: %w", id, path, err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFBLK {
		if st.Rdev != rdev {
			return nil, errorf(errNotFound, "volume %s: %s is another device", id, path)
		}
		size, err := deviceSize(dev)
		if err != nil {
			return nil, err
		}
		return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{{Unit: csi.VolumeUsage_BYTES, Total: int64(size)}}}, nil
	}
	if st.Dev != rdev {
		return nil, errorf(errNotFound, "volume %s: %s is not on the volume's filesystem", id, path)
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(path, &fs); err != nil {
		return nil, fmt.Errorf("volume %s: statfs %s: %w", id, path, err)
	}
	bs := uint64(fs.Bsize)
	return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{
		{Unit: csi.VolumeUsage_BYTES, Total: int64(fs.Blocks * bs), Available: int64(fs.Bavail * bs), Used: int64((fs.Blocks - fs.Bfree) * bs)},
		{Unit: csi.VolumeUsage_INODES, Total: int64(fs.Files), Available: int64(fs.Ffree), Used: int64(fs.Files - fs.Ffree)},
	}}, nil
}
