// SPDX-License-Identifier: Apache-2.0

package csi

import (
	"github.com/container-storage-interface/spec/lib/go/csi"
)

// checkCapability accepts what a tidecache volume can give: a device on
// one node, as a filesystem (ext4 or XFS) or as a raw block device, for
// one node's writers or readers. Multi-node access modes are refused: the
// device exists only on its node.
func checkCapability(c *csi.VolumeCapability) error {
	if c == nil {
		return errorf(errInvalid, "volume capability missing")
	}
	switch mode := c.GetAccessMode().GetMode(); mode {
	case csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY:
	case csi.VolumeCapability_AccessMode_UNKNOWN:
		return errorf(errInvalid, "volume capability: access mode missing")
	default:
		return errorf(errInvalid, "access mode %s not supported: a tidecache volume is a device on one node (SINGLE_NODE_WRITER or SINGLE_NODE_READER_ONLY)", mode)
	}
	switch t := c.GetAccessType().(type) {
	case *csi.VolumeCapability_Block:
	case *csi.VolumeCapability_Mount:
		if fs := t.Mount.GetFsType(); fs != "" && fs != fsExt4 && fs != fsXFS {
			return errorf(errInvalid, "fs_type %q not supported: want ext4 or xfs", fs)
		}
		if t.Mount.GetVolumeMountGroup() != "" {
			return errorf(errInvalid, "volume_mount_group not supported (the driver does not advertise VOLUME_MOUNT_GROUP)")
		}
	default:
		return errorf(errInvalid, "volume capability: access type (mount or block) missing")
	}
	return nil
}

// checkCapabilities checks a list that must not be empty.
func checkCapabilities(cs []*csi.VolumeCapability) error {
	if len(cs) == 0 {
		return errorf(errInvalid, "volume capabilities missing")
	}
	for _, c := range cs {
		if err := checkCapability(c); err != nil {
			return err
		}
	}
	return nil
}
