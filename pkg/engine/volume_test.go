package engine

import (
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
