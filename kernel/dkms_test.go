// SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// TestDKMSBuild builds dm-fuaflush the way a server installs it, with
// dkms and the module's own dkms.conf, against the kernel headers the VM
// tests use, in a private DKMS tree (nothing under /var/lib/dkms or
// /lib/modules is touched, the signing key is made in the test's
// directory). It checks that DKMS finds, builds and signs the module, and
// that dkms.conf's version is the module's own.
func TestDKMSBuild(t *testing.T) {
	if _, err := exec.LookPath("dkms"); err != nil {
		t.Fatal("dkms is not installed: run `make deps` (packages dkms and linux-headers-amd64)")
	}
	kver := headersVersion(t)
	src := filepath.Join("dm-fuaflush")
	conf, err := os.ReadFile(filepath.Join(src, "dkms.conf"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^PACKAGE_VERSION="([^"]+)"`).FindSubmatch(conf)
	if m == nil {
		t.Fatal("dkms.conf has no PACKAGE_VERSION")
	}
	version := string(m[1])

	dir := t.TempDir()
	pkg := filepath.Join(dir, "src", "tidecache-fuaflush-"+version)
	for _, d := range []string{pkg, filepath.Join(dir, "tree")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The files `make kmod-install` copies to /usr/src.
	for _, f := range []string{"dm-fuaflush.c", "Kbuild", "dkms.conf"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(pkg, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.CommandContext(t.Context(), "dkms", "build", "-m", "tidecache-fuaflush", "-v", version, "-k", kver,
		"--dkmstree", filepath.Join(dir, "tree"), "--sourcetree", filepath.Join(dir, "src"))
	cmd.Env = append(os.Environ(), "LC_ALL=C",
		"mok_signing_key="+filepath.Join(dir, "mok.key"), "mok_certificate="+filepath.Join(dir, "mok.pub"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("dkms build: %v\n%s", err, out)
	}
	ko := filepath.Join(dir, "tree", "tidecache-fuaflush", version, kver, "x86_64", "module", "dm-fuaflush.ko")
	if _, err := os.Stat(ko); err != nil {
		t.Fatalf("dkms built no module at %s: %v\n%s", ko, err, out)
	}
	info := func(field string) string {
		b, err := exec.Command("modinfo", "-F", field, ko).Output()
		if err != nil {
			t.Fatalf("modinfo -F %s: %v", field, err)
		}
		return strings.TrimSpace(string(b))
	}
	if got := info("version"); got != version {
		t.Errorf("module version %q, dkms.conf says %q", got, version)
	}
	if got := info("vermagic"); !strings.HasPrefix(got, kver+" ") {
		t.Errorf("vermagic %q, want kernel %s", got, kver)
	}
	if got := info("license"); got != "GPL" {
		t.Errorf("license %q, want GPL (device-mapper exports are GPL-only)", got)
	}
	if info("signer") == "" {
		t.Errorf("module not signed: Secure Boot would refuse it\n%s", out)
	}
}

// headersVersion returns the newest kernel version with a build tree.
func headersVersion(t *testing.T) string {
	t.Helper()
	dirs, _ := filepath.Glob("/lib/modules/*/build/Makefile")
	if len(dirs) == 0 {
		t.Fatal("no kernel headers under /lib/modules/*/build: run `make deps` (package linux-headers-amd64)")
	}
	sort.Strings(dirs)
	return filepath.Base(filepath.Dir(filepath.Dir(dirs[len(dirs)-1])))
}
