// SPDX-License-Identifier: Apache-2.0

// Package atomicfile replaces small files whole: a reader, or the next
// boot after a power cut, finds the old content or the new, never a part.
package atomicfile

import (
	"os"
	"path/filepath"
)

// Write replaces path with data, mode perm: a temporary file in the same
// directory is written, synced and renamed over path, and the directory
// is synced so the rename survives a power cut. The directory must exist.
func Write(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), perm)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
