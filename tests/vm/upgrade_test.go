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

// TestUpgradeRebuildsModule installs the .deb on a server VM, makes a
// writeback volume with a verifying writer on it and enables the daemon,
// then installs the next package: the same tree built with a later version
// and a changed dm-fuaflush source (a fix to the module). It checks that
//   - the module installed for the running kernel is the new source's
//     DKMS build, under the new package's version, and the previous
//     version's build is gone;
//   - the running daemon was restarted on the new binary (try-restart);
//   - the volume never stopped: the writer, which reads back and checks
//     every batch it writes, ran through the upgrade without an error,
//     and the running device kept its table.
//
// It is left out of `make test-vm` for CI's time budget (about 18 minutes,
// two DKMS builds under emulation); `make test-vm-all` runs it.
func TestUpgradeRebuildsModule(t *testing.T) {
	dir := harness.TestDir(t)
	deb := buildDeb(t, dir)
	version := debField(t, deb, "Version")
	const marker = "upgrade1"
	next := buildNextDeb(t, dir, version+"+"+marker, "MODULE_INFO(tidecache_test, \""+marker+"\");")
	spec := nodeSpec{HDDs: 4, HDDSize: 256 << 20, SSDs: []int64{256 << 20}}
	cfg := harness.Config{
		Name: "server", Dir: dir, Disks: spec.disks(dir), MemoryMiB: 1536,
		// The package's DKMS build provides the modules, not the harness.
		NoFUAFlushModule: true, NoReadFirstModule: true, NoErrHoldModule: true,
		Systemd: &harness.SystemdBoot{RootImage: filepath.Join(dir, "root.img"), Mask: bootMask},
	}
	s := bootServer(t, cfg)
	s.spec = spec
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
	if st := s.mustSh("dkms status -m tidecache-dkms"); !strings.Contains(st, "tidecache-dkms/"+version+",") || !strings.Contains(st, "installed") {
		t.Fatalf("dkms status after the first install:\n%s\nwant version %s installed", st, version)
	}
	for _, m := range []string{"dm-readfirst", "dm-errhold"} {
		if p := strings.TrimSpace(s.mustSh("modinfo -n " + m)); !strings.Contains(p, "/updates/dkms/") {
			t.Fatalf("after the first install: %s at %s, want the package's DKMS build", m, p)
		}
	}

	s.createPool("fast")
	s.mustTidectl("volume create db --size 128M --write-cache 32M")
	s.mustSh("systemctl enable --now tidecached.service")
	daemonPID := s.prop("tidecached.service", "MainPID")
	table := s.mustSh("dmsetup table tc-db")
	w := s.startLiveWriter("upgrade", "64M", 64)

	out := s.mustSh("DEBIAN_FRONTEND=noninteractive apt-get install -y " + next + " 2>&1")
	w.requireRunning("during the upgrade")
	path, test := info()
	if !strings.Contains(path, "/updates/dkms/") || test != marker {
		t.Fatalf("after the upgrade: dm-fuaflush at %s with tidecache_test %q, want the new source's DKMS build (%q)\n%s",
			path, test, marker, tailLines(out, 30))
	}
	st := s.mustSh("dkms status -m tidecache-dkms")
	if !strings.Contains(st, "tidecache-dkms/"+version+"+"+marker+",") || strings.Contains(st, "tidecache-dkms/"+version+",") {
		t.Fatalf("dkms status after the upgrade:\n%s\nwant only version %s+%s", st, version, marker)
	}
	if pid := s.prop("tidecached.service", "MainPID"); pid == daemonPID || pid == "0" || s.prop("tidecached.service", "ActiveState") != "active" {
		t.Fatalf("tidecached after the upgrade: pid %s (was %s), %s; want restarted and active\n%s",
			pid, daemonPID, s.prop("tidecached.service", "ActiveState"), tailLines(out, 30))
	}
	if got := s.mustSh("dmsetup table tc-db"); got != table {
		t.Errorf("tc-db's table changed across the upgrade:\n%s\nwas\n%s", got, table)
	}
	w.stop()
	// The new build loads and provides the target to the next table;
	// dm-errhold, in no volume here, is loaded by hand (at boot,
	// tidecache-assemble.service loads it).
	s.mustSh("modprobe dm-errhold")
	got := s.mustSh("dmsetup targets")
	for _, target := range []string{"fuaflush", "readfirst", "errhold"} {
		if !strings.Contains(got, target) {
			t.Fatalf("dmsetup targets lacks %s after the upgrade:\n%s", target, got)
		}
	}
	t.Logf("upgrade %s -> %s+%s: dm-fuaflush rebuilt (%s), the daemon restarted, the writer verified throughout", version, version, marker, path)
}

// debField reads one control field of a package.
func debField(t *testing.T, deb, name string) string {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), "dpkg-deb", "--field", deb, name).Output()
	if err != nil {
		t.Fatalf("dpkg-deb --field %s %s: %v", deb, name, err)
	}
	return strings.TrimSpace(string(out))
}

// buildNextDeb builds the package again as version, from a copy of the
// dm-fuaflush source with line appended: the next release of the package,
// made the way every release is (make deb).
func buildNextDeb(t *testing.T, dir, version, line string) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(dir, "fuaflush-next")
	if err := os.CopyFS(src, os.DirFS(filepath.Join(root, "kernel", "dm-fuaflush"))); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(src, "dm-fuaflush.c"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(line + "\n"); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "next")
	make := exec.CommandContext(t.Context(), "make", "--no-print-directory", "-C", root, "deb",
		"BIN="+filepath.Join(dir, "bin"), "SHARE="+filepath.Join(dir, "share-next"),
		"DEBROOT="+filepath.Join(dir, "debroot-next"), "DEB_OUT="+out, "DEB_VERSION="+version, "FUAFLUSH_SRC="+src)
	if b, err := make.CombinedOutput(); err != nil {
		t.Fatalf("make deb (next): %v\n%s", err, b)
	}
	debs, _ := filepath.Glob(filepath.Join(out, "tidecache_*.deb"))
	if len(debs) != 1 {
		t.Fatalf("make deb (next) made %v, want one package", debs)
	}
	return debs[0]
}
