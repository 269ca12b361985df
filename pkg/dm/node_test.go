// SPDX-License-Identifier: Apache-2.0

//go:build linux

package dm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestEnsureNode(t *testing.T) {
	if !canMknod(t) {
		t.Skip("cannot create device nodes here (needs CAP_MKNOD)")
	}
	dir := filepath.Join(t.TempDir(), "mapper") // created on demand
	want := unix.Mkdev(253, 7)
	path := filepath.Join(dir, "tc-v-top")

	if err := ensureNode(dir, "tc-v-top", unix.S_IFBLK, want); err != nil {
		t.Fatal(err)
	}
	checkNode(t, path, want)
	var before unix.Stat_t
	_ = unix.Stat(path, &before)

	// Right node: left alone (same inode).
	if err := ensureNode(dir, "tc-v-top", unix.S_IFBLK, want); err != nil {
		t.Fatal(err)
	}
	var after unix.Stat_t
	_ = unix.Stat(path, &after)
	if after.Ino != before.Ino {
		t.Error("a correct node was replaced")
	}

	// Wrong number: replaced.
	if err := ensureNode(dir, "tc-v-top", unix.S_IFBLK, unix.Mkdev(253, 300)); err != nil {
		t.Fatal(err)
	}
	checkNode(t, path, unix.Mkdev(253, 300))

	// A udev-style symlink to the right node is kept; one to a wrong node
	// or a dangling one is replaced by a node.
	target := filepath.Join(dir, "dm-7")
	if err := unix.Mknod(target, unix.S_IFBLK|0o600, int(want)); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "tc-link")
	if err := os.Symlink("dm-7", link); err != nil {
		t.Fatal(err)
	}
	if err := ensureNode(dir, "tc-link", unix.S_IFBLK, want); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Lstat(link); fi.Mode()&os.ModeSymlink == 0 {
		t.Error("correct udev symlink replaced")
	}
	if err := ensureNode(dir, "tc-link", unix.S_IFBLK, unix.Mkdev(253, 8)); err != nil {
		t.Fatal(err)
	}
	checkNode(t, link, unix.Mkdev(253, 8))
	if err := os.Symlink("nowhere", filepath.Join(dir, "tc-dangling")); err != nil {
		t.Fatal(err)
	}
	if err := ensureNode(dir, "tc-dangling", unix.S_IFBLK, want); err != nil {
		t.Fatal(err)
	}
	checkNode(t, filepath.Join(dir, "tc-dangling"), want)

	// A regular file in the way is replaced too; a char node of the same
	// number is not a block node.
	if err := os.WriteFile(filepath.Join(dir, "tc-file"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := ensureNode(dir, "tc-file", unix.S_IFCHR, unix.Mkdev(10, 236)); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(dir, "tc-file"), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR {
		t.Errorf("control node: %v mode %o", err, st.Mode)
	}

	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("temporary file %s left behind", e.Name())
		}
	}

	// removeNode removes nodes and links, leaves other files, ignores
	// missing ones.
	for _, name := range []string{"tc-v-top", "tc-link", "missing"} {
		if err := removeNode(dir, name); err != nil {
			t.Errorf("removeNode(%s): %v", name, err)
		}
		if _, err := os.Lstat(filepath.Join(dir, name)); !os.IsNotExist(err) {
			t.Errorf("%s still there", name)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "plain"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := removeNode(dir, "plain"); err != nil {
		t.Error(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "plain")); err != nil {
		t.Error("removeNode deleted a regular file")
	}
}

func TestParseMiscMinor(t *testing.T) {
	misc := "234 btrfs-control\n 236 device-mapper\n237 loop-control\n"
	if m, ok := parseMiscMinor(strings.NewReader(misc), "device-mapper"); !ok || m != 236 {
		t.Errorf("= %d, %v", m, ok)
	}
	if m, ok := parseMiscMinor(strings.NewReader("60 device-mapper\n"), "device-mapper"); !ok || m != 60 {
		t.Errorf("= %d, %v", m, ok)
	}
	if _, ok := parseMiscMinor(strings.NewReader("234 btrfs-control\nx device-mapper\n"), "device-mapper"); ok {
		t.Error("found a minor that is not there")
	}
	if m := controlMinor(filepath.Join(t.TempDir(), "nonexistent")); m != 236 {
		t.Errorf("default minor %d", m)
	}
}

// canMknod reports whether this test process may create device nodes.
func canMknod(t *testing.T) bool {
	t.Helper()
	p := filepath.Join(t.TempDir(), "probe")
	if err := unix.Mknod(p, unix.S_IFBLK|0o600, int(unix.Mkdev(7, 0))); err != nil {
		return false
	}
	return true
}

func checkNode(t *testing.T, path string, dev uint64) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatalf("node: %v", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK || uint64(st.Rdev) != dev {
		t.Fatalf("node %s: mode %o rdev %x, want block %x", path, st.Mode, st.Rdev, dev)
	}
}
