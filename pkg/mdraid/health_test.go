// SPDX-License-Identifier: Apache-2.0

package mdraid

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// writeTree writes files (path relative to root: content) into a fresh
// directory and returns it.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, c := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestReadHealth(t *testing.T) {
	const md = "class/block/md127/md/"
	base := map[string]string{
		md + "level": "raid10", md + "array_state": "clean", md + "raid_disks": "4",
		md + "degraded": "0", md + "sync_action": "idle", md + "sync_completed": "none",
		md + "dev-sda/state": "in_sync", md + "dev-sda/slot": "0",
		md + "dev-sdb/state": "in_sync", md + "dev-sdb/slot": "1",
		md + "dev-dm-3/state": "in_sync", md + "dev-dm-3/slot": "2",
		"class/block/dm-3/dm/name": "hdd2",
		md + "dev-sdd/state":       "in_sync", md + "dev-sdd/slot": "3",
	}
	with := func(over map[string]string) map[string]string {
		out := map[string]string{}
		for k, v := range base {
			out[k] = v
		}
		for k, v := range over {
			if v == "-" {
				delete(out, k)
			} else {
				out[k] = v
			}
		}
		return out
	}
	healthy := Health{Device: "/dev/md127", Level: "raid10", ArrayState: "clean", RaidDisks: 4, SyncAction: "idle"}
	tests := []struct {
		name  string
		files map[string]string
		want  Health
	}{
		{"healthy", base, healthy},
		{"member failed, still attached", with(map[string]string{md + "degraded": "1", md + "dev-sdb/state": "faulty", md + "dev-sdb/slot": "none"}),
			Health{Device: "/dev/md127", Level: "raid10", ArrayState: "clean", RaidDisks: 4, Degraded: 1, SyncAction: "idle",
				FailedDevices: []string{"/dev/sdb"}}},
		{"dm member failed, named by its dm name", with(map[string]string{md + "degraded": "1", md + "dev-dm-3/state": "faulty,write_error"}),
			Health{Device: "/dev/md127", Level: "raid10", ArrayState: "clean", RaidDisks: 4, Degraded: 1, SyncAction: "idle",
				FailedDevices: []string{"/dev/mapper/hdd2"}}},
		{"recovering onto a new member", with(map[string]string{
			md + "degraded": "1", md + "sync_action": "recover", md + "sync_completed": "49152 / 196608",
			md + "dev-sdb/state": "-", md + "dev-sdb/slot": "-", md + "dev-sde/state": "spare", md + "dev-sde/slot": "1"}),
			Health{Device: "/dev/md127", Level: "raid10", ArrayState: "clean", RaidDisks: 4, Degraded: 1, SyncAction: "recover",
				RebuildingDevices: []string{"/dev/sde"}, SyncDoneSectors: 49152, SyncTotalSectors: 196608}},
		{"hot spare, not in a slot", with(map[string]string{md + "dev-sde/state": "spare", md + "dev-sde/slot": "none"}), healthy},
		{"resync delayed", with(map[string]string{md + "sync_action": "resync", md + "sync_completed": "delayed"}),
			Health{Device: "/dev/md127", Level: "raid10", ArrayState: "clean", RaidDisks: 4, SyncAction: "resync"}},
		{"raid0: no redundancy files", map[string]string{
			md + "level": "raid0", md + "array_state": "clean", md + "raid_disks": "2",
			md + "dev-sda/state": "in_sync", md + "dev-sda/slot": "0"},
			Health{Device: "/dev/md127", Level: "raid0", ArrayState: "clean", RaidDisks: 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ReadHealth(writeTree(t, tt.files), "md127")
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestReadHealthErrors(t *testing.T) {
	root := writeTree(t, map[string]string{"class/block/sdz/size": "1024"})
	if _, err := ReadHealth(root, "sdz"); !errors.Is(err, ErrNotArray) {
		t.Errorf("a disk without md: %v, want ErrNotArray", err)
	}
	for name, files := range map[string]map[string]string{
		"bad degraded":       {"class/block/md0/md/degraded": "x"},
		"bad sync_completed": {"class/block/md0/md/sync_completed": "12 of 40"},
		"negative slots":     {"class/block/md0/md/raid_disks": "-1"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := ReadHealth(writeTree(t, files), "md0"); err == nil || errors.Is(err, ErrNotArray) {
				t.Errorf("err %v, want a parse error", err)
			}
		})
	}
}

func TestSyncProgress(t *testing.T) {
	for _, tc := range []struct {
		in      string
		ratio   float64
		running bool
	}{
		{"none", 0, false}, {"", 0, false}, {"delayed", 0, false},
		{"0 / 1000", 0, true}, {"250 / 1000", 0.25, true}, {"1000 / 1000", 1, true}, {"1200 / 1000", 1, true},
	} {
		done, total, err := parseSyncCompleted(tc.in)
		if err != nil {
			t.Fatalf("%q: %v", tc.in, err)
		}
		h := Health{SyncDoneSectors: done, SyncTotalSectors: total}
		if r, ok := h.SyncProgress(); r != tc.ratio || ok != tc.running {
			t.Errorf("%q: %v %v, want %v %v", tc.in, r, ok, tc.ratio, tc.running)
		}
	}
	for action, want := range map[string]bool{"recover": true, "resync": true, "reshape": true, "check": false, "repair": false, "idle": false, "": false} {
		if got := (Health{SyncAction: action}).Rebuilding(); got != want {
			t.Errorf("Rebuilding(%q) = %v", action, got)
		}
	}
}
