// SPDX-License-Identifier: Apache-2.0

package mdraid

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/tidecache/tidecache/pkg/blockdev"
)

// ErrNotArray is wrapped by ReadHealth's error when the device is not an md
// array (a hardware RAID LUN, a plain disk): it has no md directory in
// sysfs. Callers treat it as "no array health to report", not a failure.
var ErrNotArray = errors.New("not an md array")

// Health is the redundancy state of a running md array, read from sysfs
// alone (no mdadm), cheap enough for every metrics scrape and reconcile.
type Health struct {
	// Device is the kernel device, e.g. /dev/md127.
	Device string `json:"device"`
	// Level is md/level: "raid10", "raid1", "raid0", "linear"...
	Level string `json:"level"`
	// ArrayState is md/array_state ("clean", "active", "inactive"...).
	ArrayState string `json:"array_state"`
	// RaidDisks is the number of slots (md/raid_disks).
	RaidDisks int `json:"raid_disks"`
	// Degraded is the number of slots without an in-sync member
	// (md/degraded): a failed member counts until its replacement has
	// been rebuilt. 0 for levels without redundancy.
	Degraded int `json:"degraded"`
	// FailedDevices are members the kernel marked faulty that are still
	// attached to the array (mdadm --remove takes them out).
	FailedDevices []string `json:"failed_devices,omitempty"`
	// RebuildingDevices are members holding a slot that are not in sync
	// yet: the targets of a running or pending recovery.
	RebuildingDevices []string `json:"rebuilding_devices,omitempty"`
	// SyncAction is md/sync_action: "idle", "resync", "recover", "check",
	// "repair", "reshape", "frozen"; "" for levels without redundancy.
	SyncAction string `json:"sync_action,omitempty"`
	// SyncDoneSectors and SyncTotalSectors are md/sync_completed while a
	// sync runs ("done / total"); both 0 when none does.
	SyncDoneSectors  uint64 `json:"sync_done_sectors,omitempty"`
	SyncTotalSectors uint64 `json:"sync_total_sectors,omitempty"`
}

// SyncProgress is the share of the running sync done, 0..1; ok is false
// when no sync is running.
func (h Health) SyncProgress() (ratio float64, ok bool) {
	if h.SyncTotalSectors == 0 {
		return 0, false
	}
	return float64(h.SyncDoneSectors) / float64(h.SyncTotalSectors), true
}

// Rebuilding reports whether md is restoring redundancy: a recovery onto a
// new member, a resync of the copies, or a reshape. A check or repair
// (scrub) is not a rebuild.
func (h Health) Rebuilding() bool {
	switch h.SyncAction {
	case "recover", "resync", "reshape":
		return true
	}
	return false
}

// Health reads the state of the array at path (/dev/md/<name>, /dev/mdN)
// from sysfs. A device that is not an md array gives ErrNotArray.
func (m Manager) Health(path string) (Health, error) {
	kname, err := blockdev.Name(m.SysRoot, path)
	if err != nil {
		return Health{}, fmt.Errorf("md health %s: %w", path, err)
	}
	h, err := ReadHealth(m.SysRoot, kname)
	if err != nil {
		return Health{}, fmt.Errorf("md health %s: %w", path, err)
	}
	return h, nil
}

// ReadHealth reads <sysRoot>/class/block/<kname>/md: level, array_state,
// raid_disks, degraded, sync_action, sync_completed and each member's
// dev-<name>/{state,slot}. sysRoot "" means "/sys". degraded, sync_action
// and sync_completed exist only for levels with redundancy; their absence
// is not an error.
func ReadHealth(sysRoot, kname string) (Health, error) {
	if sysRoot == "" {
		sysRoot = "/sys"
	}
	dir := filepath.Join(sysRoot, "class", "block", kname, "md")
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return Health{}, fmt.Errorf("%s: %w", kname, ErrNotArray)
	}
	read := func(rel string) (string, bool, error) {
		raw, err := os.ReadFile(filepath.Join(dir, rel))
		if errors.Is(err, fs.ErrNotExist) {
			return "", false, nil
		}
		if err != nil {
			return "", false, err
		}
		return strings.TrimSpace(string(raw)), true, nil
	}
	h := Health{Device: "/dev/" + kname}
	var err error
	if h.Level, _, err = read("level"); err != nil {
		return Health{}, err
	}
	if h.ArrayState, _, err = read("array_state"); err != nil {
		return Health{}, err
	}
	for _, f := range []struct {
		name string
		dst  *int
	}{{"raid_disks", &h.RaidDisks}, {"degraded", &h.Degraded}} {
		s, ok, err := read(f.name)
		if err != nil {
			return Health{}, err
		}
		if !ok || s == "" {
			continue
		}
		if *f.dst, err = strconv.Atoi(s); err != nil || *f.dst < 0 {
			return Health{}, fmt.Errorf("%s: md/%s: bad value %q", kname, f.name, s)
		}
	}
	if h.SyncAction, _, err = read("sync_action"); err != nil {
		return Health{}, err
	}
	completed, _, err := read("sync_completed")
	if err != nil {
		return Health{}, err
	}
	if h.SyncDoneSectors, h.SyncTotalSectors, err = parseSyncCompleted(completed); err != nil {
		return Health{}, fmt.Errorf("%s: md/sync_completed: %w", kname, err)
	}
	if err := readMembers(sysRoot, dir, &h); err != nil {
		return Health{}, fmt.Errorf("%s: %w", kname, err)
	}
	return h, nil
}

// parseSyncCompleted parses md/sync_completed: "none" (or empty) when no
// sync runs, else "<done> / <total>" in sectors. "delayed" (a sync waiting
// for another array on the same disks) counts as not running.
func parseSyncCompleted(s string) (done, total uint64, err error) {
	switch s {
	case "", "none", "delayed":
		return 0, 0, nil
	}
	a, b, ok := strings.Cut(s, "/")
	if !ok {
		return 0, 0, fmt.Errorf("bad value %q", s)
	}
	if done, err = strconv.ParseUint(strings.TrimSpace(a), 10, 64); err != nil {
		return 0, 0, fmt.Errorf("bad value %q", s)
	}
	if total, err = strconv.ParseUint(strings.TrimSpace(b), 10, 64); err != nil {
		return 0, 0, fmt.Errorf("bad value %q", s)
	}
	if done > total {
		done = total
	}
	return done, total, nil
}

// readMembers fills FailedDevices and RebuildingDevices from the md/dev-*
// directories: state is a comma-separated list of flags ("in_sync",
// "faulty", "spare", "write_mostly", "blocked"...), slot a number or
// "none".
func readMembers(sysRoot, dir string, h *Health) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		name, ok := strings.CutPrefix(e.Name(), "dev-")
		if !ok {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(dir, e.Name(), "state"))
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed while we read
		}
		if err != nil {
			return err
		}
		flags := strings.Split(strings.TrimSpace(string(raw)), ",")
		slot, _ := os.ReadFile(filepath.Join(dir, e.Name(), "slot"))
		hasSlot := strings.TrimSpace(string(slot)) != "none" && len(slot) > 0
		dev := memberPath(sysRoot, name)
		switch {
		case slices.Contains(flags, "faulty"):
			h.FailedDevices = append(h.FailedDevices, dev)
		case hasSlot && !slices.Contains(flags, "in_sync"):
			h.RebuildingDevices = append(h.RebuildingDevices, dev)
		}
	}
	return nil
}

// memberPath names a member by its kernel name: /dev/mapper/<name> for a
// device-mapper device, else /dev/<kname>.
func memberPath(sysRoot, kname string) string {
	if raw, err := os.ReadFile(filepath.Join(sysRoot, "class", "block", kname, "dm", "name")); err == nil {
		if n := strings.TrimSpace(string(raw)); n != "" {
			return "/dev/mapper/" + n
		}
	}
	return "/dev/" + strings.ReplaceAll(kname, "!", "/")
}
