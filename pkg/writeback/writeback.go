// SPDX-License-Identifier: Apache-2.0

// Package writeback decides how hard a volume's write tier may push its
// write-back onto the origin (the HDD array), from what sysfs says about
// that array.
//
// dm-writecache writes dirty blocks back with up to writeback_jobs blocks
// in flight. The kernel's default is min(256 MiB, RAM/16) worth: tens of
// thousands of 4 KiB writes queued on an array that completes about a
// hundred per second and per disk. Every read that misses the cache, and
// every write that finds the cache full, then waits behind that queue:
// minutes, measured (docs/testing.md, TestPressure). Nothing lower in the
// stack can give write-back a lower priority than those reads (md, dm and
// the HDDs see plain writes), so the bound on what write-back keeps in
// flight is the lever: a few I/Os per disk keep every spindle busy, which
// is all the array's throughput, while a read waits for at most those few
// ahead of it.
//
// The count follows from the array, not from a constant tuned on one
// machine: an md array's members and level are in sysfs (md/raid_disks,
// md/level, md/layout); a hardware RAID LUN or a single disk hides its
// spindles, so it gets the value for a small array and the operator is
// told how to set the real one.
package writeback

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/tidecache/tidecache/pkg/blockdev"
)

// IOsPerDisk is how many write-back I/Os each disk of the array is given
// at once. A rotating disk reorders its queue (NCQ) and gains little past
// a handful of commands, while every command queued ahead of a read adds
// one service time (about 5-10 ms) to it: 8 keeps the spindles busy and a
// read's wait behind write-back under 0.1 s.
const IOsPerDisk = 8

// SolidStateIOsPerDisk is the same for an array whose members are not
// rotational: flash serves deep queues in parallel.
const SolidStateIOsPerDisk = 64

// unknownDisks is the array size assumed for an origin whose disks cannot
// be counted (a hardware RAID LUN, one disk): a 4-disk RAID10, the
// smallest array tidecache is meant for. Too low costs some write-back
// speed; too high starves reads, which is the failure this package exists
// to prevent.
const unknownDisks = 4

// minJobs is the floor of the limit: dm-writecache merges contiguous
// blocks into one I/O, and a very small limit would serialise a
// sequential write-back.
const minJobs = 8

// Origin is what sysfs tells about the device a write tier writes back to.
type Origin struct {
	// Device is the kernel name (md127, sdb, dm-3).
	Device string `json:"device"`
	// Level is the md RAID level ("raid10", "raid1", "raid5"...), "" for
	// a device that is not an md array.
	Level string `json:"level,omitempty"`
	// Disks is the number of member slots of an md array (md/raid_disks);
	// 0 when the device is not one.
	Disks int `json:"disks,omitempty"`
	// IOsPerBlock is what one written-back block costs the disks: the
	// copies of a mirror, the read-modify-write of parity; 1 for striping.
	IOsPerBlock int `json:"ios_per_block"`
	// Rotational is the device's queue/rotational flag (md and dm set it
	// when any device below rotates).
	Rotational bool `json:"rotational"`
}

// Limit is the write-back bound chosen for a write tier, and why.
type Limit struct {
	// Jobs is dm-writecache's writeback_jobs: blocks in write-back at once.
	Jobs uint64 `json:"jobs"`
	// Source says who chose it: "volume" (volume tune or a policy),
	// "node" (the daemon's configuration) or "origin" (derived here).
	Source string `json:"source"`
	// Reason explains the number for `volume show`.
	Reason string `json:"reason"`
	// HighWatermark and LowWatermark are the percent of the write cache
	// in use at which write-back starts and stops, and WatermarkSource
	// who set them (SourceVolume or SourceNode: tidecache's defaults are
	// the node's).
	HighWatermark   int    `json:"high_watermark"`
	LowWatermark    int    `json:"low_watermark"`
	WatermarkSource string `json:"watermark_source,omitempty"`
}

// Watermarks says when write-back runs, for `volume show`: "from 50 % of
// the write cache in use down to 10 % (node defaults)".
func (l Limit) Watermarks() string {
	if l.WatermarkSource == "" {
		return ""
	}
	who := "node defaults"
	if l.WatermarkSource == SourceVolume {
		who = "set for this volume: volume tune or a policy"
	}
	return fmt.Sprintf("from %d %% of the write cache in use down to %d %% (%s)", l.HighWatermark, l.LowWatermark, who)
}

// Sources of a Limit.
const (
	SourceVolume = "volume"
	SourceNode   = "node"
	SourceOrigin = "origin"
)

// Probe reads what sysfs says about the block device at path (a device
// node such as /dev/md127 or /dev/mapper/x, or a symlink to one). sysRoot
// "" means /sys.
func Probe(sysRoot, path string) (Origin, error) {
	kname, err := blockdev.Name(sysRoot, path)
	if err != nil {
		return Origin{}, fmt.Errorf("write-back limit of %s: %w", path, err)
	}
	o, err := ProbeName(sysRoot, kname)
	if err != nil {
		return Origin{}, fmt.Errorf("write-back limit of %s: %w", path, err)
	}
	return o, nil
}

// ProbeName is Probe for a kernel name (md127, sdb) under
// <sysRoot>/class/block.
func ProbeName(sysRoot, kname string) (Origin, error) {
	if sysRoot == "" {
		sysRoot = "/sys"
	}
	dir := filepath.Join(sysRoot, "class", "block", kname)
	if _, err := os.Stat(dir); err != nil {
		return Origin{}, err
	}
	o := Origin{Device: kname, IOsPerBlock: 1, Rotational: true}
	if rot, err := readTrimmed(filepath.Join(dir, "queue", "rotational")); err == nil {
		o.Rotational = rot != "0"
	} else if !errors.Is(err, fs.ErrNotExist) {
		return Origin{}, err
	}
	level, err := readTrimmed(filepath.Join(dir, "md", "level"))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return o, nil // not an md array
	case err != nil:
		return Origin{}, err
	}
	o.Level = level
	disks, err := readTrimmed(filepath.Join(dir, "md", "raid_disks"))
	if err != nil {
		return Origin{}, err
	}
	if o.Disks, err = strconv.Atoi(disks); err != nil || o.Disks < 0 {
		return Origin{}, fmt.Errorf("%s: md/raid_disks %q is not a count", kname, disks)
	}
	layout, err := readTrimmed(filepath.Join(dir, "md", "layout"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return Origin{}, err
	}
	o.IOsPerBlock = iosPerBlock(o.Level, o.Disks, layout)
	return o, nil
}

// iosPerBlock is the disk I/Os one block written to an md array of the
// given level costs. md/layout of raid10 holds the near copies in its low
// byte and the far copies in the next one (md(4)); a layout that does not
// parse counts as the default, two near copies.
func iosPerBlock(level string, disks int, layout string) int {
	switch level {
	case "raid1":
		return max(disks, 1)
	case "raid10":
		copies := 2
		if l, err := strconv.ParseUint(layout, 0, 32); err == nil {
			if c := int(l&0xff) * int((l>>8)&0xff); c > 0 {
				copies = c
			}
		}
		return copies
	case "raid4", "raid5":
		return 4 // read old data and parity, write both
	case "raid6":
		return 6 // the same with two parity blocks
	default: // raid0, linear, anything new: each block goes to one disk
		return 1
	}
}

// Limit derives the write-back bound for a write tier over this origin.
func (o Origin) Limit() Limit {
	perDisk := IOsPerDisk
	kind := "rotating"
	if !o.Rotational {
		perDisk, kind = SolidStateIOsPerDisk, "solid-state"
	}
	disks, reason := o.Disks, ""
	if o.Level == "" || disks == 0 {
		disks = unknownDisks
		reason = fmt.Sprintf("%s is not an md array, so its disks cannot be counted (a hardware RAID LUN or one disk): "+
			"the value for %d %s disks with 2 copies; set the array's own with `tidectl volume tune --writeback-jobs` or a policy",
			o.Device, unknownDisks, kind)
		return Limit{Jobs: jobs(disks, perDisk, 2), Source: SourceOrigin, Reason: reason}
	}
	per := o.IOsPerBlock
	if per < 1 {
		per = 1
	}
	reason = fmt.Sprintf("%s is %s of %d %s disks, %d disk I/O(s) per block written back: %d in flight per disk",
		o.Device, o.Level, disks, kind, per, perDisk)
	return Limit{Jobs: jobs(disks, perDisk, per), Source: SourceOrigin, Reason: reason}
}

// jobs is disks × perDisk I/Os, divided by what each block costs.
func jobs(disks, perDisk, per int) uint64 {
	return uint64(max(disks*perDisk/per, minJobs))
}

func readTrimmed(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}
