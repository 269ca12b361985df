// SPDX-License-Identifier: Apache-2.0

package blockdev

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Partitions returns the kernel names of the partitions of the block device
// devName ("vdb" → ["vdb1", "vdb2"]), ordered by partition number, read from
// <sysRoot>/class/block/<devName>. A device without partitions (or itself a
// partition) gives an empty slice. sysRoot "" means "/sys".
func Partitions(sysRoot, devName string) ([]string, error) {
	dir := filepath.Join(sysRootOrDefault(sysRoot), "class", "block", devName)
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("partitions of %s: no such block device in sysfs", devName)
		}
		return nil, fmt.Errorf("partitions of %s: %w", devName, err)
	}
	type part struct {
		name string
		num  int
	}
	var parts []part
	for _, e := range entries {
		// A partition is a subdirectory holding a "partition" attribute
		// (its number). Other subdirectories are holders, queue, mq...
		raw, err := os.ReadFile(filepath.Join(dir, e.Name(), "partition"))
		if err != nil {
			continue
		}
		num, err := strconv.Atoi(strings.TrimSpace(string(raw)))
		if err != nil {
			return nil, fmt.Errorf("partitions of %s: %s/partition: %w", devName, e.Name(), err)
		}
		parts = append(parts, part{e.Name(), num})
	}
	slices.SortFunc(parts, func(a, b part) int {
		if a.num != b.num {
			return a.num - b.num
		}
		return strings.Compare(a.name, b.name)
	})
	names := make([]string, 0, len(parts))
	for _, p := range parts {
		names = append(names, p.name)
	}
	return names, nil
}

// ListBlockDevices returns the /dev path of every block device sysfs lists
// under <sysRoot>/class/block: whole disks, partitions, md and dm devices,
// loop devices, sorted. It is the candidate list for the superblock scan at
// boot; callers must tolerate devices that cannot be opened or read (an
// unbound loop device reads as empty). sysRoot "" means "/sys".
func ListBlockDevices(sysRoot string) ([]string, error) {
	dir := filepath.Join(sysRootOrDefault(sysRoot), "class", "block")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list block devices: %w", err)
	}
	paths := make([]string, 0, len(entries))
	for _, e := range entries {
		paths = append(paths, devPath(e.Name()))
	}
	slices.Sort(paths)
	return paths, nil
}

// holders returns the kernel names of the devices stacked on devName (md
// arrays, dm targets) from <sysRoot>/class/block/<devName>/holders, each
// followed by its dm name when it has one: "dm-3 (tc-db-origin)".
func holders(sysRoot, devName string) ([]string, error) {
	root := sysRootOrDefault(sysRoot)
	entries, err := os.ReadDir(filepath.Join(root, "class", "block", devName, "holders"))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("holders of %s: %w", devName, err)
	}
	var out []string
	for _, e := range entries {
		name := e.Name()
		if dm, err := os.ReadFile(filepath.Join(root, "class", "block", name, "dm", "name")); err == nil {
			if s := strings.TrimSpace(string(dm)); s != "" {
				name += " (" + s + ")"
			}
		}
		out = append(out, name)
	}
	slices.Sort(out)
	return out, nil
}

// devNumberFromSysfs reads <sysRoot>/class/block/<name>/dev ("8:17").
func devNumberFromSysfs(sysRoot, name string) (devNum, error) {
	raw, err := os.ReadFile(filepath.Join(sysRootOrDefault(sysRoot), "class", "block", name, "dev"))
	if err != nil {
		return devNum{}, fmt.Errorf("device number of %s: %w", name, err)
	}
	n, err := parseDevNum(strings.TrimSpace(string(raw)))
	if err != nil {
		return devNum{}, fmt.Errorf("device number of %s: %w", name, err)
	}
	return n, nil
}

// devNum is a major:minor pair.
type devNum struct{ major, minor uint32 }

func (d devNum) String() string { return fmt.Sprintf("%d:%d", d.major, d.minor) }

func parseDevNum(s string) (devNum, error) {
	maj, min, ok := strings.Cut(s, ":")
	if !ok {
		return devNum{}, fmt.Errorf("bad device number %q", s)
	}
	a, err := strconv.ParseUint(maj, 10, 32)
	if err != nil {
		return devNum{}, fmt.Errorf("bad device number %q", s)
	}
	b, err := strconv.ParseUint(min, 10, 32)
	if err != nil {
		return devNum{}, fmt.Errorf("bad device number %q", s)
	}
	return devNum{uint32(a), uint32(b)}, nil
}
