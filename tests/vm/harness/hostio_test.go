// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"slices"
	"testing"
	"time"

	"github.com/digitalocean/go-qemu/qmp"
)

func TestParseBlockIOError(t *testing.T) {
	disks := make([]Disk, 28)
	for i := range disks {
		disks[i].Path = "/img/" + GuestDiskName(i)
	}
	for _, tc := range []struct {
		name string
		data map[string]any
		want HostIOError
	}{
		{"EIO on the first disk",
			map[string]any{"device": "disk0", "operation": "write", "action": "stop", "nospace": false, "reason": "Input/output error"},
			HostIOError{Disk: "vda", Path: "/img/vda", Operation: "write", Reason: "Input/output error"}},
		{"ENOSPC on the 27th disk",
			map[string]any{"device": "disk26", "operation": "write", "nospace": true, "reason": "No space left on device"},
			HostIOError{Disk: "vdaa", Path: "/img/vdaa", Operation: "write", Reason: "No space left on device", NoSpace: true}},
		{"no reason given, full",
			map[string]any{"device": "disk1", "operation": "write", "nospace": true},
			HostIOError{Disk: "vdb", Path: "/img/vdb", Operation: "write", Reason: "no space left on device", NoSpace: true}},
		{"a drive the harness did not name",
			map[string]any{"device": "pflash0", "operation": "read", "reason": "Input/output error"},
			HostIOError{Disk: "pflash0", Operation: "read", Reason: "Input/output error"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := qmp.Event{Event: "BLOCK_IO_ERROR", Data: tc.data}
			e.Timestamp.Seconds = 1700000000
			got := parseBlockIOError(e, disks)
			got.Time = got.Time.UTC()
			if !got.Time.Equal(time.Unix(1700000000, 0)) {
				t.Errorf("time %v", got.Time)
			}
			got.Time = time.Time{}
			if got != tc.want {
				t.Errorf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestGuestDiskName(t *testing.T) {
	for i, want := range map[int]string{0: "vda", 1: "vdb", 25: "vdz", 26: "vdaa", 27: "vdab", 51: "vdaz", 52: "vdba"} {
		if got := GuestDiskName(i); got != want {
			t.Errorf("disk %d: %s, want %s", i, got, want)
		}
	}
}

func TestGuestDiskNames(t *testing.T) {
	disks := []Disk{{}, {NVMe: true}, {}, {NVMe: true}, {}}
	want := []string{"vda", "nvme0n1", "vdb", "nvme1n1", "vdc"}
	if got := guestDiskNames(disks); !slices.Equal(got, want) {
		t.Errorf("names %q, want %q", got, want)
	}
}
