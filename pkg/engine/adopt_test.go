// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"testing"

	"github.com/tidecache/tidecache/pkg/pool"
)

// TestAdoptBlockSizeReplaceable: a device whose content is to be replaced
// (a CSI claim's export) takes the pool's block size, or the one asked,
// without looking at it; any other device is probed (here: one that does
// not exist, so the probe fails), as a filesystem on it bounds the block.
func TestAdoptBlockSizeReplaceable(t *testing.T) {
	e := &Engine{}
	for _, tt := range []struct {
		name        string
		asked       uint32
		replaceable bool
		want        uint32
	}{
		{"replaceable, none asked", 0, true, pool.DefaultBlockSize},
		{"replaceable, asked", 1024, true, 1024},
	} {
		got, err := e.adoptBlockSize(t.Context(), "/nonexistent/lun0", tt.asked, tt.replaceable)
		if err != nil || got != tt.want {
			t.Errorf("%s: adoptBlockSize = %d, %v; want %d", tt.name, got, err, tt.want)
		}
	}
	if got, err := e.adoptBlockSize(t.Context(), "/nonexistent/lun0", 0, false); err == nil {
		t.Errorf("a device to keep: adoptBlockSize = %d without probing it", got)
	}
}
