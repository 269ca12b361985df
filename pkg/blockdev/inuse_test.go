// SPDX-License-Identifier: Apache-2.0

package blockdev

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestMounts(t *testing.T) {
	raw, err := os.ReadFile("testdata/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	got, err := Mounts(fakeProcRoot(t, string(raw), ""))
	if err != nil {
		t.Fatal(err)
	}
	want := []Mount{
		{Dev: unix.Mkdev(0, 21), MountPoint: "/proc", FSType: "proc", Source: "proc"},
		{Dev: unix.Mkdev(0, 22), MountPoint: "/sys", FSType: "sysfs", Source: "sysfs"},
		{Dev: unix.Mkdev(254, 0), MountPoint: "/", FSType: "ext4", Source: "/dev/vda"},
		{Dev: unix.Mkdev(254, 17), MountPoint: "/srv/my dir", FSType: "xfs", Source: "/dev/vdx1"},
		{Dev: unix.Mkdev(0, 52), MountPoint: "/btr", FSType: "btrfs", Source: "/dev/vdx2"},
		{Dev: unix.Mkdev(0, 53), MountPoint: "/mnt/nfs", FSType: "nfs4", Source: "server:/export"},
		{Dev: unix.Mkdev(253, 4), MountPoint: "/var/lib/kubelet/pods/x/mount", ReadOnly: true, FSType: "xfs", Source: "/dev/mapper/tc-pvc-1"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d entries, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("entry %d = %+v, want %+v", i, got[i], want[i])
		}
	}

	for _, bad := range []string{
		"27 1 254:0 / / rw,relatime ext4 /dev/vda rw\n",   // no separator
		"27 1 254-0 / / rw,relatime - ext4 /dev/vda rw\n", // bad device number
		"27 1 254:0 / / rw - ext4\n",                      // no source
	} {
		if _, err := Mounts(fakeProcRoot(t, bad, "")); err == nil {
			t.Errorf("Mounts of %q: no error", bad)
		}
	}
}

func TestSwaps(t *testing.T) {
	raw := "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n" +
		"/dev/vdx2                               partition\t1048572\t\t0\t\t-2\n" +
		"/var/swap\\040file                       file\t\t65532\t\t0\t\t-3\n"
	got, err := swaps(fakeProcRoot(t, "", raw))
	if err != nil || len(got) != 2 || got[0] != "/dev/vdx2" || got[1] != "/var/swap file" {
		t.Errorf("swaps = %q, %v", got, err)
	}
	// A kernel without swap support has no /proc/swaps: no swaps.
	if got, err := swaps(fakeProcRoot(t, "", "")); err != nil || len(got) != 0 {
		t.Errorf("swaps without /proc/swaps = %q, %v", got, err)
	}
}

func TestUnescapeOctal(t *testing.T) {
	tests := map[string]string{
		`/mnt/a\040b`:   "/mnt/a b",
		`/mnt/tab\011x`: "/mnt/tab\tx",
		`/mnt/bs\134`:   `/mnt/bs\`,
		`/mnt/trail\04`: `/mnt/trail\04`,
		`/plain`:        "/plain",
	}
	for in, want := range tests {
		if got := UnescapeOctal(in); got != want {
			t.Errorf("UnescapeOctal(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestCheck runs the checks against a fake sysfs and procfs: disk vdx
// (254:16) with partitions vdx1 (254:17) and vdx2 (254:18). The device
// node is a regular file so that the exclusive open succeeds.
func TestCheck(t *testing.T) {
	const baseMounts = "22 27 0:21 / /proc rw,relatime - proc proc rw\n" +
		"27 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"
	tests := []struct {
		name      string
		mountinfo string
		swaps     string
		setup     func(*fakeSys)
		procs     []fakeProc
		want      string // "" for unused
	}{
		{name: "unused", mountinfo: baseMounts},
		{
			name:      "whole disk mounted",
			mountinfo: baseMounts + "40 27 254:16 / /mnt/data rw - ext4 /dev/vdx rw\n",
			want:      "mounted at /mnt/data",
		},
		{
			name:      "partition mounted, escaped mount point",
			mountinfo: baseMounts + "40 27 254:17 / /srv/my\\040dir rw shared:7 master:3 - xfs /dev/vdx1 rw\n",
			want:      "partition vdx1 mounted at /srv/my dir",
		},
		{
			name:      "btrfs with anonymous device number, found by source",
			mountinfo: baseMounts + "41 27 0:52 /@data /btr rw - btrfs /dev/vdx2 rw\n",
			want:      "partition vdx2 mounted at /btr",
		},
		{
			name:      "anonymous device number of another source",
			mountinfo: baseMounts + "41 27 0:52 / /btr rw - btrfs /dev/vdw2 rw\n",
		},
		{
			name:      "swap on a partition",
			mountinfo: baseMounts,
			swaps:     "Filename\tType\tSize\tUsed\tPriority\n/dev/vdx2 partition\t1048572\t0\t-2\n",
			want:      "partition vdx2 used as swap",
		},
		{
			name:      "held by md",
			mountinfo: baseMounts,
			setup:     func(s *fakeSys) { s.holder("vdx", "md127") },
			want:      "held by md127",
		},
		{
			name:      "partition held by dm",
			mountinfo: baseMounts,
			setup: func(s *fakeSys) {
				s.disk("dm-3", "253:3")
				s.write("devices/virtual/block/dm-3/dm/name", "tc-db-origin\n")
				s.holder("vdx1", "dm-3")
			},
			want: "partition vdx1 held by dm-3 (tc-db-origin)",
		},
		{
			name:      "open by a process",
			mountinfo: baseMounts,
			procs:     []fakeProc{{pid: 812, comm: "mysqld", fds: []string{"log", "NODE", "sock"}}},
			want:      "open by process 812 (mysqld)",
		},
		{
			name:      "open by several processes, sorted by pid",
			mountinfo: baseMounts,
			procs: []fakeProc{
				{pid: 9001, comm: "qemu-system-x86", fds: []string{"NODE"}},
				{pid: 77, comm: "sleep", fds: []string{"NODE", "NODE"}},
				{pid: 300, comm: "bash", fds: []string{"log"}},
			},
			want: "open by processes 77 (sleep), 9001 (qemu-system-x86)",
		},
		{
			name:      "comm unreadable",
			mountinfo: baseMounts,
			procs:     []fakeProc{{pid: 5, fds: []string{"NODE"}}},
			want:      "open by process 5 (?)",
		},
		{
			name:      "other files open",
			mountinfo: baseMounts,
			procs:     []fakeProc{{pid: 812, comm: "mysqld", fds: []string{"log", "sock"}}},
		},
		{
			name:      "dangling fd link, process without fd directory",
			mountinfo: baseMounts,
			procs:     []fakeProc{{pid: 812, comm: "x", fds: []string{"/nonexistent/vdx"}}, {pid: 813, comm: "zombie", fds: nil}},
		},
		{
			name:      "the checking process itself is left out",
			mountinfo: baseMounts,
			procs:     []fakeProc{{pid: os.Getpid(), comm: "tidectl", fds: []string{"NODE"}}},
		},
		{
			name:      "exported by the kernel's NVMe target",
			mountinfo: baseMounts,
			setup: func(s *fakeSys) {
				s.write("kernel/config/nvmet/subsystems/nqn.2026-11.io.tidecache:export:san:n2/namespaces/1/device_path", "/dev/vdx\n")
			},
			want: "exported over NVMe by the kernel's target (nvmet subsystem nqn.2026-11.io.tidecache:export:san:n2, namespace 1): other nodes may be writing it",
		},
		{
			name:      "a partition exported by nvmet",
			mountinfo: baseMounts,
			setup: func(s *fakeSys) {
				s.write("kernel/config/nvmet/subsystems/nqn.x/namespaces/7/device_path", "/dev/vdx2\n")
			},
			want: "partition vdx2 exported over NVMe by the kernel's target (nvmet subsystem nqn.x, namespace 7): other nodes may be writing it",
		},
		{
			name:      "nvmet exporting another device",
			mountinfo: baseMounts,
			setup: func(s *fakeSys) {
				s.write("kernel/config/nvmet/subsystems/nqn.x/namespaces/1/device_path", "/dev/vdw\n")
				s.write("kernel/config/nvmet/subsystems/nqn.y/namespaces/1/device_path", "")
			},
		},
		{
			name:      "mounted wins over a process",
			mountinfo: baseMounts + "40 27 254:16 / /mnt/data rw - ext4 /dev/vdx rw\n",
			procs:     []fakeProc{{pid: 812, comm: "mysqld", fds: []string{"NODE"}}},
			want:      "mounted at /mnt/data",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sys := newFakeSys(t)
			sys.disk("vdx", "254:16", [3]string{"vdx1", "1", "254:17"}, [3]string{"vdx2", "2", "254:18"})
			if tt.setup != nil {
				tt.setup(sys)
			}
			proc := fakeProcRoot(t, tt.mountinfo, tt.swaps)
			node := fakeDevNode(t)
			for _, p := range tt.procs {
				p.write(t, proc, node)
			}

			c := Checker{SysRoot: sys.root, ProcRoot: proc}
			err := c.check(context.Background(), "/dev/disk/by-id/virtio-hdd0", node, "vdx", devNum{254, 16})
			if tt.want == "" {
				if err != nil {
					t.Fatalf("check = %v, want nil", err)
				}
				return
			}
			var iu *InUseError
			if !errors.As(err, &iu) {
				t.Fatalf("check = %v, want *InUseError", err)
			}
			if iu.Reason != tt.want || iu.Path != "/dev/disk/by-id/virtio-hdd0" {
				t.Errorf("got %+v, want reason %q", iu, tt.want)
			}
			if !errors.Is(err, ErrInUse) {
				t.Error("errors.Is(err, ErrInUse) = false")
			}
			if want := "device /dev/disk/by-id/virtio-hdd0 is in use: " + tt.want; err.Error() != want {
				t.Errorf("Error() = %q, want %q", err, want)
			}
		})
	}
}

func TestCheckCancelled(t *testing.T) {
	sys := newFakeSys(t)
	sys.disk("vdx", "254:16")
	proc := fakeProcRoot(t, "", "")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := Checker{SysRoot: sys.root, ProcRoot: proc}.check(ctx, "/dev/vdx", "/dev/vdx", "vdx", devNum{254, 16})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("check with a cancelled context = %v", err)
	}
}

func TestCheckUnused(t *testing.T) {
	t.Run("missing device", func(t *testing.T) {
		err := Checker{}.CheckUnused(context.Background(), "/dev/vdz-tc-missing")
		if err == nil || err.Error() != "device /dev/vdz-tc-missing does not exist" || !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("CheckUnused = %v", err)
		}
	})
	t.Run("regular file", func(t *testing.T) {
		img := filepath.Join(t.TempDir(), "disk.img")
		if err := os.WriteFile(img, make([]byte, 4096), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := (Checker{}).CheckUnused(context.Background(), img); err != nil {
			t.Errorf("CheckUnused(image) = %v", err)
		}
	})
	t.Run("not a block device", func(t *testing.T) {
		if err := (Checker{}).CheckUnused(context.Background(), "/dev/null"); !errors.Is(err, ErrNotBlockDevice) {
			t.Errorf("CheckUnused(/dev/null) = %v", err)
		}
	})
	t.Run("the real root device is mounted", func(t *testing.T) {
		path, _ := rootDevice(t)
		err := Checker{}.CheckUnused(context.Background(), path)
		var iu *InUseError
		if !errors.As(err, &iu) {
			t.Fatalf("CheckUnused(%s) = %v, want *InUseError", path, err)
		}
		if !strings.HasPrefix(iu.Reason, "mounted at ") {
			t.Errorf("reason = %q", iu.Reason)
		}
	})
}

// fakeProc is a process in a fake procfs: its comm ("" for none) and the
// targets of its fds, where "NODE" is the device node under check and a
// relative name a regular file made for it.
type fakeProc struct {
	pid  int
	comm string
	fds  []string
}

func (p fakeProc) write(t *testing.T, procRoot, node string) {
	t.Helper()
	dir := filepath.Join(procRoot, strconv.Itoa(p.pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if p.comm != "" {
		if err := os.WriteFile(filepath.Join(dir, "comm"), []byte(p.comm+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if p.fds == nil {
		return
	}
	if err := os.MkdirAll(filepath.Join(dir, "fd"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i, target := range p.fds {
		switch {
		case target == "NODE":
			target = node
		case !filepath.IsAbs(target):
			f := filepath.Join(dir, target)
			if err := os.WriteFile(f, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			target = f
		}
		if err := os.Symlink(target, filepath.Join(dir, "fd", strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
}

func TestHeldOnlyBy(t *testing.T) {
	own := func(uuid string) bool { return strings.HasPrefix(uuid, "TC-") }
	tests := []struct {
		name  string
		setup func(*fakeSys)
		want  bool
	}{
		{name: "no holders", want: false},
		{name: "one own dm holder", setup: func(s *fakeSys) { s.dm("dm-1", "253:1", "TC-wdata-1"); s.holder("vdx", "dm-1") }, want: true},
		{name: "two own dm holders", setup: func(s *fakeSys) {
			s.dm("dm-1", "253:1", "TC-wdata-1")
			s.dm("dm-2", "253:2", "TC-rdata-1")
			s.holder("vdx", "dm-1")
			s.holder("vdx", "dm-2")
		}, want: true},
		{name: "own and foreign dm holder", setup: func(s *fakeSys) {
			s.dm("dm-1", "253:1", "TC-wdata-1")
			s.dm("dm-2", "253:2", "LVM-abc")
			s.holder("vdx", "dm-1")
			s.holder("vdx", "dm-2")
		}, want: false},
		{name: "md holder", setup: func(s *fakeSys) { s.disk("md127", "9:127"); s.holder("vdx", "md127") }, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sys := newFakeSys(t)
			sys.disk("vdx", "254:16")
			if tt.setup != nil {
				tt.setup(sys)
			}
			got, err := heldOnlyBy(sys.root, "vdx", own)
			if err != nil || got != tt.want {
				t.Errorf("heldOnlyBy = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func TestOpenForWriteRefusesNonBlockDevices(t *testing.T) {
	img := filepath.Join(t.TempDir(), "ssd.img")
	if err := os.WriteFile(img, make([]byte, 4096), 0o644); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		img:         img + " is a regular file, not a block device",
		"/dev/null": "/dev/null is a character device, not a block device",
	} {
		f, err := Checker{}.OpenForWrite(context.Background(), path, nil)
		if err == nil {
			f.Close()
		}
		if err == nil || err.Error() != want || !errors.Is(err, ErrNotBlockDevice) {
			t.Errorf("OpenForWrite(%s) = %v, want %q", path, err, want)
		}
	}
	if _, err := (Checker{}).OpenForWrite(context.Background(), "/dev/tc-no-such-disk", nil); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("OpenForWrite(missing) = %v", err)
	}
}

func TestDescribeProcs(t *testing.T) {
	var ps []proc
	for i := 1; i <= 7; i++ {
		ps = append(ps, proc{pid: i, comm: "p"})
	}
	if got, want := describeProcs(ps), "processes 1 (p), 2 (p), 3 (p), 4 (p), 5 (p), and 2 more"; got != want {
		t.Errorf("describeProcs = %q, want %q", got, want)
	}
}

// TestCheckNvmetAllowed: the caller's own nvmet subsystems on the device
// (NvmetAllowed) are not a use of it; another subsystem still is.
func TestCheckNvmetAllowed(t *testing.T) {
	sys := newFakeSys(t)
	sys.disk("vdx", "254:16")
	sys.write("kernel/config/nvmet/subsystems/nqn.own:n2/namespaces/1/device_path", "/dev/vdx\n")
	proc, node := fakeProcRoot(t, "", ""), fakeDevNode(t)
	c := Checker{SysRoot: sys.root, ProcRoot: proc, NvmetAllowed: func(nqn string) bool { return strings.HasPrefix(nqn, "nqn.own:") }}
	if err := c.check(context.Background(), "/dev/vdx", node, "vdx", devNum{254, 16}); err != nil {
		t.Fatalf("own export: %v, want nil", err)
	}
	sys.write("kernel/config/nvmet/subsystems/nqn.other/namespaces/1/device_path", "/dev/vdx\n")
	if err := c.check(context.Background(), "/dev/vdx", node, "vdx", devNum{254, 16}); !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), "nqn.other") {
		t.Fatalf("another subsystem's export: %v, want in use by nqn.other", err)
	}
}

// fakeProcRoot returns a procfs root whose self/mountinfo holds mountinfo
// and whose swaps file, unless swaps is empty, holds swaps.
func fakeProcRoot(t *testing.T, mountinfo, swaps string) string {
	t.Helper()
	proc := t.TempDir()
	if err := os.MkdirAll(filepath.Join(proc, "self"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(proc, "self", "mountinfo"), []byte(mountinfo), 0o644); err != nil {
		t.Fatal(err)
	}
	if swaps != "" {
		if err := os.WriteFile(filepath.Join(proc, "swaps"), []byte(swaps), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return proc
}

// fakeDevNode returns a file standing for the /dev node of vdx.
func fakeDevNode(t *testing.T) string {
	t.Helper()
	node := filepath.Join(t.TempDir(), "vdx")
	if err := os.WriteFile(node, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return node
}
