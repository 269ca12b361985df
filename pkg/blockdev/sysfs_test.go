// SPDX-License-Identifier: Apache-2.0

package blockdev

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// fakeSys builds a sysfs tree laid out like the kernel's: devices under
// devices/virtual/block, symlinks in class/block and dev/block.
type fakeSys struct {
	t    *testing.T
	root string
}

func newFakeSys(t *testing.T) *fakeSys {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{"class/block", "dev/block", "devices/virtual/block"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return &fakeSys{t: t, root: root}
}

func (f *fakeSys) write(rel, content string) {
	f.t.Helper()
	p := filepath.Join(f.root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fakeSys) symlink(target, rel string) {
	f.t.Helper()
	p := filepath.Join(f.root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.Symlink(target, p); err != nil {
		f.t.Fatal(err)
	}
}

// disk adds a whole device; parts are partition name, number, "MAJ:MIN".
func (f *fakeSys) disk(name, num string, parts ...[3]string) {
	f.t.Helper()
	dir := "devices/virtual/block/" + name
	f.write(dir+"/dev", num+"\n")
	f.write(dir+"/queue/rotational", "0\n") // a subdirectory that is no partition
	f.symlink("../../"+dir, "class/block/"+name)
	f.symlink("../../"+dir, "dev/block/"+num)
	for _, p := range parts {
		pdir := dir + "/" + p[0]
		f.write(pdir+"/dev", p[2]+"\n")
		f.write(pdir+"/partition", p[1]+"\n")
		f.symlink("../../"+pdir, "class/block/"+p[0])
		f.symlink("../../"+pdir, "dev/block/"+p[2])
	}
}

// dm adds a dm device with its dm UUID.
func (f *fakeSys) dm(name, num, uuid string) {
	f.t.Helper()
	f.disk(name, num)
	f.write("devices/virtual/block/"+name+"/dm/uuid", uuid+"\n")
}

// holder stacks holder (e.g. "md127", "dm-3") on the device dev.
func (f *fakeSys) holder(dev, holder string) {
	f.t.Helper()
	f.symlink("../../"+holder, "class/block/"+dev+"/holders/"+holder)
}

func TestPartitions(t *testing.T) {
	sys := newFakeSys(t)
	sys.disk("vdx", "254:16",
		[3]string{"vdx10", "10", "259:3"},
		[3]string{"vdx2", "2", "254:18"},
		[3]string{"vdx1", "1", "254:17"})
	sys.disk("md127", "9:127", [3]string{"md127p1", "1", "259:0"})
	sys.disk("vdy", "254:32")

	tests := []struct {
		dev     string
		want    []string
		wantErr bool
	}{
		{dev: "vdx", want: []string{"vdx1", "vdx2", "vdx10"}},
		{dev: "md127", want: []string{"md127p1"}},
		{dev: "vdy", want: []string{}},
		{dev: "vdx1", want: []string{}},
		{dev: "vdz", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.dev, func(t *testing.T) {
			got, err := Partitions(sys.root, tt.dev)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("Partitions(%s) = %v, want error", tt.dev, got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("Partitions(%s) = %q, want %q", tt.dev, got, tt.want)
			}
		})
	}
}

func TestListBlockDevices(t *testing.T) {
	sys := newFakeSys(t)
	sys.disk("vdx", "254:16", [3]string{"vdx1", "1", "254:17"})
	sys.disk("md127", "9:127")
	sys.disk("dm-0", "253:0")
	sys.disk("cciss!c0d0", "104:0")
	got, err := ListBlockDevices(sys.root)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/dev/cciss/c0d0", "/dev/dm-0", "/dev/md127", "/dev/vdx", "/dev/vdx1"}
	if !slices.Equal(got, want) {
		t.Errorf("ListBlockDevices = %q, want %q", got, want)
	}
	if _, err := ListBlockDevices(filepath.Join(sys.root, "missing")); err == nil {
		t.Error("ListBlockDevices on a missing root: no error")
	}
}

func TestHolders(t *testing.T) {
	sys := newFakeSys(t)
	sys.disk("vdx", "254:16", [3]string{"vdx1", "1", "254:17"})
	sys.disk("dm-3", "253:3")
	sys.write("devices/virtual/block/dm-3/dm/name", "tc-db-origin\n")
	sys.holder("vdx1", "dm-3")
	sys.holder("vdx1", "md127")

	got, err := holders(sys.root, "vdx1")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"dm-3 (tc-db-origin)", "md127"}; !slices.Equal(got, want) {
		t.Errorf("holders = %q, want %q", got, want)
	}
	got, err = holders(sys.root, "vdx")
	if err != nil || len(got) != 0 {
		t.Errorf("holders of vdx = %q, %v; want none", got, err)
	}
}
