// SPDX-License-Identifier: Apache-2.0

package blockdev

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestLookup(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "disk.img")
	if err := os.WriteFile(img, make([]byte, 4096), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "by-id-link")
	if err := os.Symlink("disk.img", link); err != nil {
		t.Fatal(err)
	}
	dangling := filepath.Join(dir, "dangling")
	if err := os.Symlink("gone", dangling); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name    string
		path    string
		want    Device
		wantErr string
		is      error
	}{
		{name: "regular file", path: img, want: Device{Path: img, Regular: true}},
		{name: "symlink resolved", path: link, want: Device{Path: img, Regular: true}},
		{name: "missing", path: "/dev/tc-no-such-disk", wantErr: "device /dev/tc-no-such-disk does not exist", is: fs.ErrNotExist},
		{name: "dangling symlink", path: dangling, wantErr: "device " + dangling + " does not exist", is: fs.ErrNotExist},
		{name: "directory", path: dir, wantErr: dir + " is a directory, not a block device", is: ErrNotBlockDevice},
		{name: "character device", path: "/dev/null", wantErr: "/dev/null is a character device, not a block device", is: ErrNotBlockDevice},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Lookup(tt.path)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("Lookup(%s) error = %v, want %q", tt.path, err, tt.wantErr)
				}
				if !errors.Is(err, tt.is) {
					t.Errorf("errors.Is(%v, %v) = false", err, tt.is)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("Lookup(%s) = %+v, want %+v", tt.path, got, tt.want)
			}
			if r, err := Resolve(tt.path); err != nil || r != tt.want.Path {
				t.Errorf("Resolve(%s) = %q, %v", tt.path, r, err)
			}
		})
	}
}

func TestLookupBlock(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "ssd.img")
	if err := os.WriteFile(img, make([]byte, 4096), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "virtio-ssd0")
	if err := os.Symlink("ssd.img", link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path, want string
	}{
		{img, img + " is a regular file, not a block device"},
		{link, link + " (-> " + img + ") is a regular file, not a block device"},
		{dir, dir + " is a directory, not a block device"},
		{"/dev/null", "/dev/null is a character device, not a block device"},
		{fifo, fifo + " is a named pipe, not a block device"},
	}
	for _, tt := range tests {
		_, err := LookupBlock(tt.path)
		if err == nil || err.Error() != tt.want || !errors.Is(err, ErrNotBlockDevice) {
			t.Errorf("LookupBlock(%s) = %v, want %q wrapping ErrNotBlockDevice", tt.path, err, tt.want)
		}
	}
	if _, err := LookupBlock("/dev/tc-no-such-disk"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("LookupBlock(missing) = %v", err)
	}
}

func TestSizeRegularFile(t *testing.T) {
	img := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(img, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 3<<20); err != nil {
		t.Fatal(err)
	}
	got, err := Size(img)
	if err != nil || got != 3<<20 {
		t.Errorf("Size = %d, %v; want %d", got, err, 3<<20)
	}
	if _, err := Size("/dev/tc-no-such-disk"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Size of a missing device: %v", err)
	}
	if _, err := Size("/dev/null"); !errors.Is(err, ErrNotBlockDevice) {
		t.Errorf("Size of /dev/null: %v", err)
	}
}

func TestDevNumberAndName(t *testing.T) {
	dir := t.TempDir()
	node := filepath.Join(dir, "md127")
	if err := unix.Mknod(node, unix.S_IFBLK|0o600, int(unix.Mkdev(9, 127))); err != nil {
		t.Skipf("cannot make a block device node here: %v", err)
	}
	major, minor, err := DevNumber(node)
	if err != nil || major != 9 || minor != 127 {
		t.Fatalf("DevNumber = %d:%d, %v; want 9:127", major, minor, err)
	}
	d, err := Lookup(node)
	if err != nil || d != (Device{Path: node, Major: 9, Minor: 127}) {
		t.Fatalf("Lookup = %+v, %v", d, err)
	}

	sys := newFakeSys(t)
	sys.disk("md127", "9:127")
	name, err := Name(sys.root, node)
	if err != nil || name != "md127" {
		t.Errorf("Name = %q, %v; want md127", name, err)
	}
	if _, _, err := DevNumber("/dev/null"); !errors.Is(err, ErrNotBlockDevice) {
		t.Errorf("DevNumber(/dev/null) = %v", err)
	}
}

// rootDevice returns the block device mounted at / on this machine, or
// skips the test.
func rootDevice(t *testing.T) (path string, num devNum) {
	t.Helper()
	mounts, err := Mounts("")
	if err != nil {
		t.Skip(err)
	}
	for _, m := range mounts {
		if m.MountPoint != "/" || !strings.HasPrefix(m.Source, "/dev/") {
			continue
		}
		if d, err := Lookup(m.Source); err == nil && !d.Regular && unix.Mkdev(d.Major, d.Minor) == m.Dev {
			return d.Path, devNum{d.Major, d.Minor}
		}
	}
	t.Skip("/ is not mounted from a block device here")
	return "", devNum{}
}

func TestRealRootDevice(t *testing.T) {
	path, num := rootDevice(t)
	major, minor, err := DevNumber(path)
	if err != nil || (devNum{major, minor}) != num {
		t.Errorf("DevNumber(%s) = %d:%d, %v; want %s", path, major, minor, err, num)
	}
	name, err := Name("", path)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join("/sys/class/block", name, "size"))
	if err != nil {
		t.Skip(err)
	}
	sectors, err := strconv.ParseUint(strings.TrimSpace(string(raw)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	size, err := Size(path)
	if errors.Is(err, fs.ErrPermission) {
		t.Skipf("this sandbox may not open block devices: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if size != sectors*512 {
		t.Errorf("Size(%s) = %d, sysfs says %d", path, size, sectors*512)
	}
}
