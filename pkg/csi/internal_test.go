// SPDX-License-Identifier: Apache-2.0

package csi

import (
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

func TestVolumeSize(t *testing.T) {
	const mi = 1 << 20
	for _, tt := range []struct {
		req, limit int64
		want       uint64
		bad        bool
	}{
		{0, 0, 1 << 30, false},             // the default
		{0, 100 * mi, 100 * mi, false},     // the default, within the limit
		{1, 0, 16 * mi, false},             // the smallest volume
		{32 * mi, 32 * mi, 32 * mi, false}, // exact
		{32*mi + 1, 0, 33 * mi, false},     // rounded up to 1 MiB
		{32*mi + 1, 32*mi + 2, 0, true},    // no multiple of 1 MiB in range
		{0, mi, 0, true},                   // below the smallest volume
		{-1, 0, 0, true},
	} {
		got, err := volumeSize(&csi.CapacityRange{RequiredBytes: tt.req, LimitBytes: tt.limit}, 1<<30)
		if (err != nil) != tt.bad || got != tt.want {
			t.Errorf("volumeSize(%d, %d) = %d, %v; want %d (error %v)", tt.req, tt.limit, got, err, tt.want, tt.bad)
		}
	}
}

// TestPrepare runs the node service's filesystem decisions with the real
// blkid, wipefs and mkfs.ext4 on an image file (the VM test runs them on
// the volumes' devices): make on empty, keep its own, wipe what an
// earlier volume left, never wipe a volume it did not provision.
func TestPrepare(t *testing.T) {
	for _, tool := range []string{"blkid", "wipefs", "mkfs.ext4"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	img := filepath.Join(t.TempDir(), "vol.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 32<<20); err != nil {
		t.Fatal(err)
	}
	n := &node{d: &Driver{cfg: Config{NodeID: "n1"}, log: slog.New(slog.DiscardHandler)}}
	ctx := t.Context()
	uuidOn := func() string {
		sig, err := n.probe(ctx, img)
		if err != nil {
			t.Fatal(err)
		}
		return sig.uuid
	}
	step := func(what, asked string, readOnly bool, instance, wantFS string, wantErr error) {
		t.Helper()
		fs, err := n.prepare(ctx, "pvc-1", img, asked, readOnly, instance)
		if wantErr != nil {
			if !errors.Is(err, wantErr) {
				t.Fatalf("%s: %v, want %v", what, err, wantErr)
			}
			return
		}
		if err != nil || fs != wantFS {
			t.Fatalf("%s: %q, %v; want %s", what, fs, err, wantFS)
		}
	}

	step("read-only and empty", "", true, "7", "", errPrecondition)
	step("empty", "", false, "7", fsExt4, nil)
	mine := uuidOn()
	if mine != fsUUID("pvc-1", "7") {
		t.Fatalf("filesystem UUID %s, want fsUUID = %s", mine, fsUUID("pvc-1", "7"))
	}
	step("its own, again", fsExt4, false, "7", fsExt4, nil)
	if got := uuidOn(); got != mine {
		t.Fatalf("its own filesystem was made again (UUID %s -> %s)", mine, got)
	}
	step("its own, another type asked", fsXFS, false, "7", "", errPrecondition)
	step("static volume, a filesystem not made here", "", false, "", fsExt4, nil)
	if got := uuidOn(); got != mine {
		t.Fatal("a static volume's filesystem was touched")
	}
	step("static volume, read-only", "", true, "", fsExt4, nil)
	step("a new volume on the old one's extent", fsExt4, false, "8", fsExt4, nil)
	if got := uuidOn(); got == mine || got != fsUUID("pvc-1", "8") {
		t.Fatalf("stale filesystem not replaced: UUID %s (old %s, want %s)", got, mine, fsUUID("pvc-1", "8"))
	}
	step("a new read-only volume on a stale extent", "", true, "9", "", errPrecondition)
}
