// SPDX-License-Identifier: Apache-2.0

package csi_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"

	"github.com/tidecache/tidecache/pkg/command"
	tccsi "github.com/tidecache/tidecache/pkg/csi"
)

// TestNodeMounts runs the node service's stage, publish, stats, unpublish
// and unstage with real mounts on the host, on a loop device standing where
// tidecached puts a volume's device (the VM test does it on the real
// stack). It needs root and loop devices.
func TestNodeMounts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	for _, tool := range []string{"losetup", "mount", "umount", "blkid", "wipefs", "mkfs.ext4"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	run := command.Runner{}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	img := filepath.Join(t.TempDir(), "vol.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 64<<20); err != nil {
		t.Fatal(err)
	}
	out, err := run.Run(ctx, "losetup", "--find", "--show", img)
	if err != nil {
		t.Skipf("no loop device: %v", err)
	}
	loop := strings.TrimSpace(string(out))
	t.Cleanup(func() { run.Run(context.Background(), "losetup", "-d", loop) })
	devDir := t.TempDir()
	if err := os.Symlink(loop, filepath.Join(devDir, "tc-pvc-host")); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	staging, target, roTarget, blockTarget := filepath.Join(dir, "staging"), filepath.Join(dir, "pod1", "mount"),
		filepath.Join(dir, "pod2", "mount"), filepath.Join(dir, "pod3", "dev")
	// Whatever a failure leaves mounted is unmounted, top first.
	t.Cleanup(func() {
		for _, p := range []string{blockTarget, roTarget, target, staging} {
			for unix.Unmount(p, 0) == nil {
			}
		}
	})
	c := serve(t, tccsi.Config{Node: true, NodeID: "n1", DeviceDir: devDir, Runner: run})
	volCtx := map[string]string{"csi.tidecache.io/instance": "42"}
	stage := func() error {
		_, err := c.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: "pvc-host", StagingTargetPath: staging,
			VolumeCapability: mountCap(), VolumeContext: volCtx})
		return err
	}
	publish := func(path string, ro bool, vc *csi.VolumeCapability) error {
		_, err := c.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: "pvc-host", StagingTargetPath: staging,
			TargetPath: path, VolumeCapability: vc, Readonly: ro, VolumeContext: volCtx})
		return err
	}
	unpublish := func(path string) error {
		_, err := c.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "pvc-host", TargetPath: path})
		return err
	}

	wantCode(t, publish(target, false, mountCap()), codes.FailedPrecondition) // not staged yet
	wantCode(t, stage(), codes.OK)
	wantCode(t, stage(), codes.OK) // idempotent
	wantCode(t, publish(target, false, mountCap()), codes.OK)
	wantCode(t, publish(target, false, mountCap()), codes.OK)
	wantCode(t, publish(target, true, mountCap()), codes.AlreadyExists) // same path, read-only now
	if err := os.WriteFile(filepath.Join(target, "data"), []byte("kept"), 0o600); err != nil {
		t.Fatalf("write through the published volume: %v", err)
	}
	wantCode(t, publish(roTarget, true, mountCap()), codes.OK)
	if got, err := os.ReadFile(filepath.Join(roTarget, "data")); err != nil || string(got) != "kept" {
		t.Fatalf("read-only publish shows %q, %v", got, err)
	}
	if err := os.WriteFile(filepath.Join(roTarget, "x"), nil, 0o600); err == nil {
		t.Fatal("a read-only publish took a write")
	}

	stats, err := c.node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: "pvc-host", VolumePath: target})
	wantCode(t, err, codes.OK)
	if u := stats.GetUsage(); len(u) != 2 || u[0].GetTotal() < 50<<20 || u[0].GetUsed() <= 0 || u[1].GetTotal() <= 0 {
		t.Fatalf("stats %v", u)
	}
	_, err = c.node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: "pvc-host", VolumePath: dir})
	wantCode(t, err, codes.NotFound) // a path not on the volume

	for _, p := range []string{target, target, roTarget} {
		wantCode(t, unpublish(p), codes.OK)
	}
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Fatalf("target path after unpublish: %v, want it removed", err)
	}
	for range 2 {
		_, err = c.node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: "pvc-host", StagingTargetPath: staging})
		wantCode(t, err, codes.OK)
	}
	if mounted(t, staging) {
		t.Fatal("staging path still mounted after unstage")
	}

	// Staged again, the filesystem is the same one: nothing was made anew.
	wantCode(t, stage(), codes.OK)
	wantCode(t, publish(target, false, mountCap()), codes.OK)
	if got, err := os.ReadFile(filepath.Join(target, "data")); err != nil || string(got) != "kept" {
		t.Fatalf("after restaging: %q, %v; want the file written before", got, err)
	}
	wantCode(t, unpublish(target), codes.OK)

	// Raw block access: the device itself bound onto a file.
	block := &csi.VolumeCapability{
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
	}
	wantCode(t, publish(blockTarget, false, block), codes.OK)
	wantCode(t, publish(blockTarget, false, block), codes.OK)
	var st unix.Stat_t
	if err := unix.Stat(blockTarget, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFBLK {
		t.Fatalf("block target: %v, mode %o", err, st.Mode)
	}
	stats, err = c.node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: "pvc-host", VolumePath: blockTarget})
	wantCode(t, err, codes.OK)
	if u := stats.GetUsage(); len(u) != 1 || u[0].GetTotal() != 64<<20 {
		t.Fatalf("block stats %v, want 64 MiB", u)
	}
	wantCode(t, unpublish(blockTarget), codes.OK)
	if _, err := os.Stat(blockTarget); !os.IsNotExist(err) {
		t.Fatalf("block target after unpublish: %v, want it removed", err)
	}
	_, err = c.node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: "pvc-host", StagingTargetPath: staging})
	wantCode(t, err, codes.OK)
}

func mounted(t *testing.T, path string) bool {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == path {
			return true
		}
	}
	return false
}
