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

// TestDKMSBuild builds tidecache-dkms, the DKMS package of dm-fuaflush,
// dm-readfirst and dm-errhold, the way a server installs it: `make
// dkms-src` lays out the source as the .deb and `make kmod-install` ship
// it, and dkms builds it with kernel/dkms.conf against each kernel's
// headers on the host (`make deps` installs those of the two kernels the
// VM tests boot, bookworm's 6.1 and 6.12), in a private DKMS tree (nothing
// under /var/lib/dkms or /lib/modules is touched, the signing key is made
// in the test's directory). It checks that DKMS builds and signs every
// module, and that dkms.conf's version is each module's own.
func TestDKMSBuild(t *testing.T) {
	for _, tool := range []string{"dkms", "make"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed: run `make deps` (packages dkms and linux-headers-amd64)", tool)
		}
	}
	for _, kver := range headersVersions(t) {
		t.Run(kver, func(t *testing.T) { testDKMSBuild(t, kver) })
	}
}

func testDKMSBuild(t *testing.T, kver string) {
	conf, err := os.ReadFile("dkms.conf")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^PACKAGE_VERSION="([^"]+)"`).FindSubmatch(conf)
	if m == nil {
		t.Fatal("dkms.conf has no PACKAGE_VERSION")
	}
	version := string(m[1])

	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "tree"), 0o755); err != nil {
		t.Fatal(err)
	}
	layout := exec.CommandContext(t.Context(), "make", "--no-print-directory", "-C", "..", "dkms-src",
		"DKMS_SRC="+filepath.Join(dir, "src", "tidecache-dkms-"+version), "DKMS_VER="+version)
	if out, err := layout.CombinedOutput(); err != nil {
		t.Fatalf("make dkms-src: %v\n%s", err, out)
	}
	cmd := exec.CommandContext(t.Context(), "dkms", "build", "-m", "tidecache-dkms", "-v", version, "-k", kver,
		"--dkmstree", filepath.Join(dir, "tree"), "--sourcetree", filepath.Join(dir, "src"))
	cmd.Env = append(os.Environ(), "LC_ALL=C",
		"mok_signing_key="+filepath.Join(dir, "mok.key"), "mok_certificate="+filepath.Join(dir, "mok.pub"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("dkms build: %v\n%s", err, out)
	}
	for _, mod := range []string{"dm-fuaflush", "dm-readfirst", "dm-errhold"} {
		// DKMS compresses a module as the kernel's own are
		// (CONFIG_MODULE_COMPRESS_XZ in Debian's 6.12, none in 6.1).
		pattern := filepath.Join(dir, "tree", "tidecache-dkms", version, kver, "x86_64", "module", mod+".ko*")
		found, _ := filepath.Glob(pattern)
		if len(found) != 1 {
			t.Errorf("dkms built no single %s: %s matches %v\n%s", mod, pattern, found, out)
			continue
		}
		ko := found[0]
		info := func(field string) string {
			b, err := exec.Command("modinfo", "-F", field, ko).Output()
			if err != nil {
				t.Fatalf("modinfo -F %s %s: %v", field, ko, err)
			}
			return strings.TrimSpace(string(b))
		}
		if got := info("version"); got != version {
			t.Errorf("%s: module version %q, dkms.conf says %q", mod, got, version)
		}
		if got := info("vermagic"); !strings.HasPrefix(got, kver+" ") {
			t.Errorf("%s: vermagic %q, want kernel %s", mod, got, kver)
		}
		if got := info("license"); got != "GPL" {
			t.Errorf("%s: license %q, want GPL (device-mapper exports are GPL-only)", mod, got)
		}
		if info("signer") == "" {
			t.Errorf("%s not signed: Secure Boot would refuse it\n%s", mod, out)
		}
	}
}

// headersVersions returns the kernel versions with a build tree.
func headersVersions(t *testing.T) []string {
	t.Helper()
	dirs, _ := filepath.Glob("/lib/modules/*/build/Makefile")
	if len(dirs) == 0 {
		t.Fatal("no kernel headers under /lib/modules/*/build: run `make deps` (package linux-headers-amd64)")
	}
	var versions []string
	for _, d := range dirs {
		versions = append(versions, filepath.Base(filepath.Dir(filepath.Dir(d))))
	}
	sort.Strings(versions)
	return versions
}
