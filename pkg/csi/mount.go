// SPDX-License-Identifier: Apache-2.0

package csi

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/tidecache/tidecache/pkg/blockdev"
)

// mountInfoPath is the kernel's mount table of this process's namespace.
const mountInfoPath = "/proc/self/mountinfo"

// mount is one line of /proc/self/mountinfo.
type mount struct {
	// Dev is the st_dev of the mounted filesystem (major:minor).
	Dev        uint64
	MountPoint string
	// ReadOnly is the per-mount "ro" option (a read-only bind mount of a
	// writable filesystem is read-only here).
	ReadOnly bool
	FSType   string
	Source   string
}

// mountAt returns the topmost mount on path, if any. The path is
// resolved through symlinks first, as the kernel records it.
func mountAt(path string) (mount, bool, error) {
	if real, err := filepath.EvalSymlinks(path); err == nil {
		path = real
	}
	path = filepath.Clean(path)
	data, err := os.ReadFile(mountInfoPath)
	if err != nil {
		return mount{}, false, fmt.Errorf("read mount table: %w", err)
	}
	mounts, err := parseMountInfo(data)
	if err != nil {
		return mount{}, false, err
	}
	var top mount
	found := false
	for _, m := range mounts { // later lines are mounted on top of earlier ones
		if m.MountPoint == path {
			top, found = m, true
		}
	}
	return top, found, nil
}

// parseMountInfo reads the format of proc(5):
//
//	36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
//	(1)(2)(3)   (4)   (5)      (6)      (7)   (8) (9)   (10)         (11)
//
// (7) is zero or more optional fields ended by the "-" of (8).
func parseMountInfo(data []byte) ([]mount, error) {
	var out []mount
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		f := strings.Fields(line)
		sep := -1
		for i := 6; i < len(f); i++ {
			if f[i] == "-" {
				sep = i
				break
			}
		}
		if len(f) < 10 || sep < 0 || sep+2 >= len(f) {
			return nil, fmt.Errorf("mount table line %q: want at least 10 fields with a \"-\" separator", line)
		}
		major, minor, ok := strings.Cut(f[2], ":")
		maj, err1 := strconv.ParseUint(major, 10, 32)
		mnr, err2 := strconv.ParseUint(minor, 10, 32)
		if !ok || err1 != nil || err2 != nil {
			return nil, fmt.Errorf("mount table line %q: device %q is not major:minor", line, f[2])
		}
		ro := false
		for _, o := range strings.Split(f[5], ",") {
			ro = ro || o == "ro"
		}
		out = append(out, mount{
			Dev:        unix.Mkdev(uint32(maj), uint32(mnr)),
			MountPoint: blockdev.UnescapeOctal(f[4]),
			ReadOnly:   ro,
			FSType:     f[sep+1],
			Source:     blockdev.UnescapeOctal(f[sep+2]),
		})
	}
	return out, sc.Err()
}
