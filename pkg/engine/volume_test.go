// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tidecache/tidecache/pkg/pool"
	"github.com/tidecache/tidecache/pkg/stack"
)

func TestWithReadBlockSize(t *testing.T) {
	cases := []struct {
		name   string
		req    pool.VolumeRequest
		tuning stack.Tuning
		want   uint32
	}{
		{"no read cache stays unset", pool.VolumeRequest{WriteCache: 1 << 30}, stack.DefaultTuning(), 0},
		{"read cache gets the node default", pool.VolumeRequest{ReadCache: 1 << 30}, stack.DefaultTuning(), 256 << 10},
		{"read cache gets the node's tuning", pool.VolumeRequest{ReadCache: 1 << 30}, stack.Tuning{ReadBlockSectors: 128}, 64 << 10},
		{"the volume's choice stays", pool.VolumeRequest{ReadCache: 1 << 30, ReadBlockSize: 1 << 20}, stack.Tuning{ReadBlockSectors: 512}, 1 << 20},
		// Left for AddVolume to refuse, not silently dropped.
		{"a choice without read cache stays", pool.VolumeRequest{ReadBlockSize: 1 << 20}, stack.DefaultTuning(), 1 << 20},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := withReadBlockSize(tc.req, tc.tuning).ReadBlockSize; got != tc.want {
				t.Errorf("ReadBlockSize = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestConfigValidateReadBlockSectors(t *testing.T) {
	cases := []struct {
		sectors uint64
		want    string // "" = valid
	}{
		{0, ""},
		{64, ""},
		{128, ""},
		{2048, ""},
		{32, "Tuning.ReadBlockSectors 32"},
		{192, "Tuning.ReadBlockSectors 192: want a power of two from 64 to 2048 sectors"},
		{4096, "Tuning.ReadBlockSectors 4096"},
		{1<<55 + 128, "Tuning.ReadBlockSectors"}, // would wrap to 64 KiB in bytes
	}
	for _, tc := range cases {
		cfg := DefaultConfig()
		cfg.Tuning.ReadBlockSectors = tc.sectors
		err := cfg.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("ReadBlockSectors %d: Validate = %v, want nil", tc.sectors, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("ReadBlockSectors %d: Validate = %v, want error containing %q", tc.sectors, err, tc.want)
		}
	}
}

// TestAddVolumeDefaultProtection: a request that names no protection is
// mirrored when the pool has two SSDs with room, and gets one copy when it
// has one SSD or no room for two legs; a named protection is kept.
func TestAddVolumeDefaultProtection(t *testing.T) {
	const gib = 1 << 30
	layout := func(members ...uint64) *pool.Layout {
		var ms []pool.Member
		for i, size := range members {
			ms = append(ms, pool.Member{UUID: fmt.Sprintf("m%d", i), Path: fmt.Sprintf("/dev/nvme%dn1", i), SizeSectors: size / pool.SectorSize})
		}
		l, err := pool.New("p", "pool-uuid", pool.Origin{Path: "/dev/md/tc", SizeSectors: 100 * gib / pool.SectorSize}, ms)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	cases := []struct {
		name string
		l    *pool.Layout
		req  pool.VolumeRequest
		want pool.Protection
	}{
		{"two SSDs with room", layout(gib, gib), pool.VolumeRequest{Name: "v", Size: gib, WriteCache: 256 << 20}, pool.ProtectLocal},
		{"one SSD", layout(gib), pool.VolumeRequest{Name: "v", Size: gib, WriteCache: 256 << 20}, pool.ProtectNone},
		{"no room for two legs", layout(gib, 128<<20), pool.VolumeRequest{Name: "v", Size: gib, WriteCache: 256 << 20}, pool.ProtectNone},
		{"room for legs, not with the read cache", layout(gib, gib), pool.VolumeRequest{Name: "v", Size: gib, WriteCache: 600 << 20, ReadCache: 900 << 20}, pool.ProtectNone},
		{"no write cache", layout(gib, gib), pool.VolumeRequest{Name: "v", Size: gib, ReadCache: 256 << 20}, pool.ProtectNone},
		{"none asked for", layout(gib, gib), pool.VolumeRequest{Name: "v", Size: gib, WriteCache: 256 << 20, Protect: pool.ProtectNone}, pool.ProtectNone},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			next, v, err := addVolume(c.l, c.req)
			if err != nil {
				t.Fatal(err)
			}
			if v.Protection() != c.want {
				t.Errorf("protection %s, want %s", v.Protection(), c.want)
			}
			if len(c.l.Volumes) != 0 || len(next.Volumes) != 1 {
				t.Errorf("layout changed in place or volume not added: %d and %d volumes", len(c.l.Volumes), len(next.Volumes))
			}
		})
	}
}
