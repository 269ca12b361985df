// SPDX-License-Identifier: Apache-2.0

//go:build vm

package vm_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidecache/tidecache/tests/vm/harness"
)

// TestUpgradeRebuildsModule installs the .deb on a server VM, then an
// upgrade whose dm-fuaflush source differs under the same DKMS version
// (a fix to the module in a newer package), and checks that the module
// installed for the running kernel is the new source's build. DKMS takes
// a version it has built as done: without the postinst's rebuild, the old
// module went on running after every upgrade. It is left out of `make
// test-vm` for CI's time budget (about 8 minutes, two DKMS builds under
// emulation); `make test-vm-all` runs it.
func TestUpgradeRebuildsModule(t *testing.T) {
	dir := harness.TestDir(t)
	deb := buildDeb(t, dir)
	const marker = "upgrade1"
	next := repackDeb(t, dir, deb, "+"+marker, "MODULE_INFO(tidecache_test, \""+marker+"\");")
	cfg := harness.Config{
		Name: "server", Dir: dir, MemoryMiB: 1536,
		// The package's DKMS build provides dm-fuaflush, not the harness.
		NoFUAFlushModule: true,
		Systemd:          &harness.SystemdBoot{RootImage: filepath.Join(dir, "root.img"), Mask: bootMask},
	}
	s := bootServer(t, cfg)
	s.mustSh("echo 'man-db man-db/auto-update boolean false' | debconf-set-selections")
	s.mustSh("DEBIAN_FRONTEND=noninteractive apt-get install -y " + deb + " 2>&1")
	info := func() (path, test string) {
		path = strings.TrimSpace(s.mustSh("modinfo -n dm-fuaflush"))
		test = strings.TrimSpace(s.mustSh("modinfo -F tidecache_test dm-fuaflush"))
		return path, test
	}
	if path, test := info(); !strings.Contains(path, "/updates/dkms/") || test != "" {
		t.Fatalf("after the first install: dm-fuaflush at %s with tidecache_test %q, want the DKMS build without it", path, test)
	}
	out := s.mustSh("DEBIAN_FRONTEND=noninteractive apt-get install -y " + next + " 2>&1")
	path, test := info()
	if !strings.Contains(path, "/updates/dkms/") || test != marker {
		t.Fatalf("after the upgrade: dm-fuaflush at %s with tidecache_test %q, want the new source's DKMS build (%q)\n%s",
			path, test, marker, tailLines(out, 30))
	}
	// The new build loads and provides the target.
	if got := s.mustSh("modprobe dm-fuaflush && dmsetup targets"); !strings.Contains(got, "fuaflush") {
		t.Fatalf("dm-fuaflush loaded, but dmsetup targets lists no fuaflush:\n%s", got)
	}
	t.Logf("upgrade rebuilt dm-fuaflush from the new source (%s)", path)
}

// repackDeb makes a newer package from deb: its version gets suffix, and
// line is appended to the DKMS source of dm-fuaflush it ships.
func repackDeb(t *testing.T, dir, deb, suffix, line string) string {
	t.Helper()
	root := filepath.Join(dir, "repack")
	run := func(name string, args ...string) {
		t.Helper()
		if out, err := exec.CommandContext(t.Context(), name, args...).CombinedOutput(); err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
	}
	run("dpkg-deb", "-R", deb, root)
	srcs, _ := filepath.Glob(filepath.Join(root, "usr/src/tidecache-fuaflush-*/dm-fuaflush.c"))
	if len(srcs) != 1 {
		t.Fatalf("the package ships %v, want one dm-fuaflush.c", srcs)
	}
	f, err := os.OpenFile(srcs[0], os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(line + "\n"); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	control := filepath.Join(root, "DEBIAN", "control")
	b, err := os.ReadFile(control)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Version: "); ok {
			l = "Version: " + v + suffix
		}
		lines = append(lines, l)
	}
	if err := os.WriteFile(control, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	out := strings.TrimSuffix(deb, ".deb") + suffix + ".deb"
	run("dpkg-deb", "--root-owner-group", "-Zxz", "--build", root, out)
	return out
}
