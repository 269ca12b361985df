// SPDX-License-Identifier: Apache-2.0

//go:build linux

package engine

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/tidecache/tidecache/pkg/pool"
)

// TestReplicaMode: what the replica holds decides the mode a volume is
// taken over in, not the mode its old node last reported. A replica with
// dm-writecache's superblock (dirty blocks possibly) starts in writeback
// even when the status said writethrough (the node switched to writeback
// and died before its status write); one without starts in the reported
// mode, except a reported writeback, which is refused.
func TestReplicaMode(t *testing.T) {
	const dataStart = 1 << 20
	replica := func(t *testing.T, magic, blockSize uint32) string {
		path := filepath.Join(t.TempDir(), "replica")
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := f.Truncate(4 << 20); err != nil {
			t.Fatal(err)
		}
		sb := make([]byte, 12)
		binary.LittleEndian.PutUint32(sb[0:], magic)
		binary.LittleEndian.PutUint32(sb[4:], 1) // version
		binary.LittleEndian.PutUint32(sb[8:], blockSize)
		if _, err := f.WriteAt(sb, dataStart); err != nil {
			t.Fatal(err)
		}
		return path
	}
	for _, tc := range []struct {
		name      string
		magic, bs uint32
		reported  pool.Mode
		want      pool.Mode
		wantBS    uint32
		wantErr   error
	}{
		{"write cache, reported writeback", wcMagic, 4096, pool.ModeWriteback, pool.ModeWriteback, 4096, nil},
		{"write cache, stale status says writethrough", wcMagic, 4096, pool.ModeWritethrough, pool.ModeWriteback, 4096, nil},
		{"write cache, stale status says passthrough", wcMagic, 512, pool.ModePassthrough, pool.ModeWriteback, 512, nil},
		{"never cached, writethrough", 0, 0, pool.ModeWritethrough, pool.ModeWritethrough, 0, nil},
		{"never cached, reported writeback", 0, 0, pool.ModeWriteback, "", 0, ErrNoCacheMetadata},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mode, bs, err := replicaMode(replica(t, tc.magic, tc.bs), dataStart, tc.reported)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("error %v, want %v", err, tc.wantErr)
			}
			if mode != tc.want || bs != tc.wantBS {
				t.Errorf("mode %q, block size %d; want %q, %d", mode, bs, tc.want, tc.wantBS)
			}
		})
	}
}
