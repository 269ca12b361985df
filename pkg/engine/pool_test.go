// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidecache/tidecache/pkg/pool"
	"github.com/tidecache/tidecache/pkg/superblock"
)

func TestPoolClaimNamedBy(t *testing.T) {
	known := poolClaim{dev: "/dev/vde", role: "SSD member", name: "old", uuid: "5e1c"}
	damagedKnown := poolClaim{dev: "/dev/vde", role: "SSD member", name: "old", uuid: "5e1c", damaged: errors.New("x")}
	unknown := poolClaim{dev: "/dev/vde1", damaged: errors.New("x")}
	tests := []struct {
		c     poolClaim
		value string
		want  bool
	}{
		{known, "", false},
		{known, "old", true},
		{known, "5e1c", true},
		{known, "other", false},
		{known, "/dev/vde", false}, // a known pool is named by name or UUID only
		{damagedKnown, "old", true},
		{unknown, "", false},
		{unknown, "/dev/vde", true},  // the device given
		{unknown, "/dev/vde1", true}, // the partition carrying it
		{unknown, "old", false},
	}
	for _, tt := range tests {
		if got := tt.c.namedBy(tt.value, "/dev/vde"); got != tt.want {
			t.Errorf("%+v.namedBy(%q) = %v, want %v", tt.c, tt.value, got, tt.want)
		}
	}
}

func TestPoolClaimRefusal(t *testing.T) {
	why := "--force does not overwrite another pool's device: its cache may hold that pool's only copy of recent writes, even while the pool is not assembled"
	tests := []struct {
		c    poolClaim
		want string
	}{
		{poolClaim{dev: "/dev/vde", role: "SSD member", name: "old", uuid: "5e1c"},
			`device is not safe to use: /dev/vde is the SSD member of tidecache pool "old" (uuid 5e1c); ` + why + `. To destroy pool "old" and reuse the device, add --destroy-pool old`},
		{poolClaim{dev: "/dev/vde1", role: "origin", name: "old", uuid: "5e1c"},
			`device is not safe to use: /dev/vde (through /dev/vde1) is the origin of tidecache pool "old" (uuid 5e1c); ` + why + `. To destroy pool "old" and reuse the device, add --destroy-pool old`},
		{poolClaim{dev: "/dev/vde", role: "RAID10 disk of the origin", name: "old"},
			`device is not safe to use: /dev/vde is the RAID10 disk of the origin of tidecache pool "old" (uuid unknown); ` + why + `. To destroy pool "old" and reuse the device, add --destroy-pool old`},
		{poolClaim{dev: "/dev/vde", role: "SSD member", name: "old", uuid: "5e1c", damaged: &superblock.CorruptError{Slot: "A", Reason: "bad crc"}},
			`device is not safe to use: /dev/vde holds a damaged tidecache superblock (corrupt superblock in slot A: bad crc); pool "old" (uuid 5e1c) lists it as its SSD member; ` + why + `. To destroy pool "old" and reuse the device, add --destroy-pool old`},
		{poolClaim{dev: "/dev/vde", damaged: &superblock.CorruptError{Slot: "A", Reason: "bad crc"}},
			`device is not safe to use: /dev/vde holds a damaged tidecache superblock of a pool that cannot be identified (corrupt superblock in slot A: bad crc); ` + why + `. To destroy it anyway, add --destroy-pool /dev/vde`},
	}
	for _, tt := range tests {
		err := tt.c.refusal("/dev/vde")
		if err.Error() != tt.want {
			t.Errorf("refusal:\n got %s\nwant %s", err, tt.want)
		}
		if !errors.Is(err, ErrOtherPool) || !errors.Is(err, ErrUnsafeDevice) {
			t.Errorf("%v: not ErrOtherPool and ErrUnsafeDevice", err)
		}
	}
}

func TestHexOnly(t *testing.T) {
	if a, b := hexOnly("3B2A4C1E:8f0d2b6a:5c7e9d10:2f4a6b8c"), hexOnly("3b2a4c1e-8f0d-2b6a-5c7e-9d102f4a6b8c"); a != b {
		t.Errorf("mdadm and blkid forms differ: %s, %s", a, b)
	}
}

func TestScanResultListing(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"ssd0", "ssd1", "hdd"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("ssd1", filepath.Join(dir, "by-id-ssd1")); err != nil {
		t.Fatal(err)
	}
	l := &pool.Layout{Name: "old", UUID: "5e1c",
		Members: []pool.Member{{UUID: "m0", Path: filepath.Join(dir, "ssd0")}, {UUID: "m1", Path: filepath.Join(dir, "by-id-ssd1")}},
		Origin:  pool.Origin{Path: filepath.Join(dir, "hdd")}}
	r := scanResult{Pools: map[string]*poolState{"5e1c": {Layout: l}}}
	for dev, role := range map[string]string{"ssd0": "SSD member", "ssd1": "SSD member", "hdd": "origin", "not-there": ""} {
		p, got, ok := r.listing(filepath.Join(dir, dev))
		if ok != (role != "") || got != role || ok && p.Layout.Name != "old" {
			t.Errorf("listing(%s) = %v, %q, %v; want role %q", dev, p, got, ok, role)
		}
	}
}

// TestCreatePoolNeedsDevices: a pool may lack SSDs (a node without any
// keeps its origin alone) or an origin (SSDs to adopt devices with), not
// both; the request is refused before any device is looked at (the VM
// test TestBadInputPoolCreate creates a pool without SSDs).
func TestCreatePoolNeedsDevices(t *testing.T) {
	e, _ := newFakeDMEngine(t, time.Second)
	_, err := e.CreatePool(context.Background(), CreatePoolRequest{Name: "empty"})
	if err == nil || !strings.Contains(err.Error(), "pool empty: give SSDs, an origin (an HDD array or the disks of a RAID10), or both") {
		t.Fatalf("CreatePool without devices = %v", err)
	}
}
