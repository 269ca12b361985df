// SPDX-License-Identifier: Apache-2.0

package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/tidecache/tidecache/pkg/cli"
	"github.com/tidecache/tidecache/pkg/daemoncli"
)

// TestDebianPackage builds the package with `make deb` into a temporary
// directory and checks what an install relies on: the control fields and
// dependencies, the conffile, every file the units and the DKMS source
// need, a man page for every command of both trees, the shell completion
// scripts, and maintainer scripts that parse.
func TestDebianPackage(t *testing.T) {
	for _, tool := range []string{"dpkg-deb", "make", "gzip"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	tmp := t.TempDir()
	make := exec.Command("make", "--no-print-directory", "-C", "../..", "deb",
		"BIN="+filepath.Join(tmp, "bin"), "SHARE="+filepath.Join(tmp, "share"),
		"DEBROOT="+filepath.Join(tmp, "root"), "DEB_OUT="+tmp, "DEB_VERSION=1.2.3+test")
	if out, err := make.CombinedOutput(); err != nil {
		t.Fatalf("make deb: %v\n%s", err, out)
	}
	debs, _ := filepath.Glob(filepath.Join(tmp, "tidecache_1.2.3+test_*.deb"))
	if len(debs) != 1 {
		t.Fatalf("want one .deb in %s, got %v", tmp, debs)
	}
	deb := debs[0]

	field := func(name string) string {
		out, err := exec.Command("dpkg-deb", "--field", deb, name).Output()
		if err != nil {
			t.Fatalf("dpkg-deb --field %s: %v", name, err)
		}
		return strings.TrimSpace(string(out))
	}
	if got := field("Package"); got != "tidecache" {
		t.Errorf("Package %q", got)
	}
	if got := field("Version"); got != "1.2.3+test" {
		t.Errorf("Version %q", got)
	}
	for _, dep := range []string{"dmsetup", "mdadm", "util-linux", "dkms", "nvme-cli | smartmontools"} {
		if !strings.Contains(field("Depends"), dep) {
			t.Errorf("Depends %q lacks %s", field("Depends"), dep)
		}
	}

	out, err := exec.Command("dpkg-deb", "--contents", deb).Output()
	if err != nil {
		t.Fatalf("dpkg-deb --contents: %v", err)
	}
	files := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) >= 6 {
			files[strings.TrimPrefix(f[5], ".")] = true
		}
	}
	const dkmsSrc = "/usr/src/tidecache-dkms-1.2.3+test/"
	want := []string{
		"/usr/sbin/tidectl", "/usr/sbin/tidecached",
		"/usr/lib/systemd/system/tidecached.service", "/usr/lib/systemd/system/tidecache-assemble.service",
		"/usr/lib/udev/rules.d/12-tidecache.rules", "/etc/default/tidecache",
		// One DKMS package of all three modules, its version the package's.
		dkmsSrc + "dkms.conf", dkmsSrc + "Kbuild",
		dkmsSrc + "dm-fuaflush/dm-fuaflush.c", dkmsSrc + "dm-fuaflush/Kbuild",
		dkmsSrc + "dm-readfirst/dm-readfirst.c", dkmsSrc + "dm-readfirst/Kbuild",
		dkmsSrc + "dm-errhold/dm-errhold.c", dkmsSrc + "dm-errhold/Kbuild",
		"/usr/share/bash-completion/completions/tidectl", "/usr/share/zsh/vendor-completions/_tidectl",
		"/usr/share/fish/vendor_completions.d/tidectl.fish",
		"/usr/share/tidecache/prometheus/tidecache-alerts.yml", "/usr/share/tidecache/grafana/tidecache.json",
		"/usr/share/doc/tidecache/copyright", "/usr/share/doc/tidecache/changelog.gz",
		// The hand-written pages: the system, and the CSI driver.
		"/usr/share/man/man7/tidecache.7.gz", "/usr/share/man/man8/tidecache-csi.8.gz",
	}
	// Every file:// documentation link of the units must be shipped.
	units, _ := filepath.Glob("../../deploy/systemd/*.service")
	docLink := regexp.MustCompile(`file://(\S+)`)
	for _, u := range units {
		text, err := os.ReadFile(u)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range docLink.FindAllStringSubmatch(string(text), -1) {
			want = append(want, m[1])
		}
	}
	// A man page for every command of both trees.
	for _, root := range []*cobra.Command{cli.NewTidectl(nil, nil), daemoncli.NewTidecached(nil, nil)} {
		walk(root, func(c *cobra.Command) {
			if !c.Hidden && c.Name() != "help" {
				want = append(want, "/usr/share/man/man8/"+strings.ReplaceAll(c.CommandPath(), " ", "-")+".8.gz")
			}
		})
	}
	for _, f := range want {
		if !files[f] {
			t.Errorf("package lacks %s", f)
		}
	}
	for f := range files {
		if strings.HasPrefix(f, "/usr/src/") && !strings.HasPrefix(f, dkmsSrc) && f != "/usr/src/" {
			t.Errorf("package ships %s, outside the DKMS package's source %s", f, dkmsSrc)
		}
	}

	// The shipped dkms.conf names the package's version, so DKMS builds
	// each package's source anew, and builds all three modules.
	conf, err := exec.Command("sh", "-c", "dpkg-deb --fsys-tarfile "+deb+" | tar -xO ."+dkmsSrc+"dkms.conf").Output()
	for _, line := range []string{
		`PACKAGE_NAME="tidecache-dkms"`, `PACKAGE_VERSION="1.2.3+test"`,
		`BUILT_MODULE_NAME[0]="dm-fuaflush"`, `BUILT_MODULE_LOCATION[0]="dm-fuaflush/"`,
		`BUILT_MODULE_NAME[1]="dm-readfirst"`, `BUILT_MODULE_LOCATION[1]="dm-readfirst/"`,
		`BUILT_MODULE_NAME[2]="dm-errhold"`, `BUILT_MODULE_LOCATION[2]="dm-errhold/"`,
	} {
		if err != nil || !strings.Contains(string(conf), "\n"+line+"\n") {
			t.Errorf("dkms.conf in the package (%v) lacks %s:\n%s", err, line, conf)
		}
	}

	ctl := filepath.Join(tmp, "control")
	if err := exec.Command("dpkg-deb", "--control", deb, ctl).Run(); err != nil {
		t.Fatalf("dpkg-deb --control: %v", err)
	}
	conffiles, err := os.ReadFile(filepath.Join(ctl, "conffiles"))
	if err != nil || strings.TrimSpace(string(conffiles)) != "/etc/default/tidecache" {
		t.Errorf("conffiles %q, %v", conffiles, err)
	}
	for _, script := range []string{"postinst", "prerm"} {
		path := filepath.Join(ctl, script)
		text, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%s: %v", script, err)
		}
		if strings.Contains(string(text), "@") {
			t.Errorf("%s keeps a placeholder:\n%s", script, text)
		}
		if !strings.Contains(string(text), "\nVERSION=1.2.3+test\n") {
			t.Errorf("%s does not name the package's version as the module's DKMS version:\n%s", script, text)
		}
		if out, err := exec.Command("sh", "-n", path).CombinedOutput(); err != nil {
			t.Errorf("sh -n %s: %v\n%s", script, err, out)
		}
		// An upgrade restarts a running daemon on the new binary, and
		// never starts a stopped one.
		if script == "postinst" && !regexp.MustCompile(`(?s)if \[ -n "\$2" \].*systemctl try-restart tidecached\.service`).Match(text) {
			t.Errorf("postinst does not try-restart tidecached on upgrade:\n%s", text)
		}
		// postinst builds tidecache-dkms; once built, it removes the
		// previous builds, tidecache-fuaflush's (the package of the
		// releases with dm-fuaflush alone) among them, before anything
		// is installed; a failed build reports and leaves them.
		if script == "postinst" && !regexp.MustCompile(`(?s)dkms add -m tidecache-dkms -v "\$VERSION".*`+
			`if dkms build -m tidecache-dkms -v "\$VERSION"; then.*remove_old tidecache-dkms.*remove_old tidecache-fuaflush.*`+
			`else\s+echo "tidecache: dkms could not build [^"]*" >&2\s+fi.*dkms autoinstall \|\|`).Match(text) {
			t.Errorf("postinst does not build tidecache-dkms, then remove tidecache-fuaflush, then autoinstall:\n%s", text)
		}
		if script == "prerm" && !strings.Contains(string(text), `dkms remove -m tidecache-dkms -v "$VERSION" --all`) {
			t.Errorf("prerm does not remove tidecache-dkms:\n%s", text)
		}
	}
}

// TestDaemonDefaults pins how the daemon's arguments reach it: the unit
// has a default, and /etc/default/tidecache (a conffile) overrides it.
func TestDaemonDefaults(t *testing.T) {
	unit, err := os.ReadFile("../../deploy/systemd/tidecached.service")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		"Environment=TIDECACHED_RUN_ARGS=--embedded-etcd",
		"EnvironmentFile=-/etc/default/tidecache",
		"ExecStart=/usr/sbin/tidecached run $TIDECACHED_RUN_ARGS",
	} {
		if !strings.Contains(string(unit), line+"\n") {
			t.Errorf("tidecached.service lacks %q", line)
		}
	}
	defaults, err := os.ReadFile("../../deploy/default/tidecache")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^TIDECACHED_RUN_ARGS="--embedded-etcd"$`).Match(defaults) {
		t.Errorf("deploy/default/tidecache does not set TIDECACHED_RUN_ARGS:\n%s", defaults)
	}
}

func walk(c *cobra.Command, f func(*cobra.Command)) {
	f(c)
	for _, sub := range c.Commands() {
		walk(sub, f)
	}
}
