// SPDX-License-Identifier: Apache-2.0

package csi

import (
	"path/filepath"

	"github.com/tidecache/tidecache/pkg/blockdev"
)

// mountAt returns the topmost mount on path, if any. The path is
// resolved through symlinks first, as the kernel records it.
func mountAt(path string) (blockdev.Mount, bool, error) {
	if real, err := filepath.EvalSymlinks(path); err == nil {
		path = real
	}
	path = filepath.Clean(path)
	mounts, err := blockdev.Mounts("")
	if err != nil {
		return blockdev.Mount{}, false, err
	}
	var top blockdev.Mount
	found := false
	for _, m := range mounts { // later lines are mounted on top of earlier ones
		if m.MountPoint == path {
			top, found = m, true
		}
	}
	return top, found, nil
}
