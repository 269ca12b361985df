// SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

func TestEmbeddedModules(t *testing.T) {
	initramfs, runtime := Modules()
	for _, want := range []string{"virtio_pci", "virtio_blk", "virtio_console", "9pnet_virtio", "9p", "overlay"} {
		if !slices.Contains(initramfs, want) {
			t.Errorf("initramfs section lacks %s: %v", want, initramfs)
		}
	}
	if !slices.Equal(runtime, []string{"dm-mod"}) {
		t.Errorf("runtime section = %v, want dm-mod alone (the rest loads on demand)", runtime)
	}
	var onDemand []string
	for _, m := range ModuleList() {
		if m.Section == OnDemand {
			onDemand = append(onDemand, m.Name)
		}
	}
	for _, want := range []string{"dm-writecache", "dm-cache", "dm-cache-smq", "dm-raid", "dm-delay", "dm-flakey", "raid1", "raid10", "nvme-tcp", "nvmet-tcp"} {
		if !slices.Contains(onDemand, want) {
			t.Errorf("on-demand section lacks %s: %v", want, onDemand)
		}
	}
	for _, m := range ModuleList() {
		if strings.HasSuffix(m.Name, "?") {
			t.Errorf("name keeps optional marker: %q", m.Name)
		}
	}
}

func TestParseModules(t *testing.T) {
	mods, err := ParseModules(`
# a comment
# initramfs
virtio_blk
  9p  
# runtime
dm-mod
xfs?
# on demand
dm-raid
`)
	if err != nil {
		t.Fatal(err)
	}
	want := []Module{
		{Name: "virtio_blk", Section: Initramfs},
		{Name: "9p", Section: Initramfs},
		{Name: "dm-mod", Section: Runtime},
		{Name: "xfs", Section: Runtime, Optional: true},
		{Name: "dm-raid", Section: OnDemand},
	}
	if !slices.Equal(mods, want) {
		t.Fatalf("got %+v, want %+v", mods, want)
	}
}

func TestParseModulesErrors(t *testing.T) {
	for name, text := range map[string]string{
		"before section": "dm-mod\n# runtime\n",
		"bad name":       "# runtime\ndm mod\n",
		"empty optional": "# runtime\n?\n",
		"duplicate":      "# initramfs\ndm-mod\n# runtime\ndm_mod\n",
	} {
		if _, err := ParseModules(text); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestParseFragment(t *testing.T) {
	opts, err := ParseFragment("# c\nCONFIG_A=m\n\nCONFIG_B=y\n")
	if err != nil {
		t.Fatal(err)
	}
	if want := []Option{{"CONFIG_A", "m"}, {"CONFIG_B", "y"}}; !slices.Equal(opts, want) {
		t.Fatalf("got %v, want %v", opts, want)
	}
	for _, bad := range []string{"A=m\n", "CONFIG_A\n", "CONFIG_A=\n", "CONFIG_A=m\nCONFIG_A=y\n"} {
		if _, err := ParseFragment(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	if len(Fragment()) == 0 {
		t.Fatal("embedded fragment is empty")
	}
}

func TestCheckConfig(t *testing.T) {
	have := ParseConfig("CONFIG_A=m\nCONFIG_B=y\n# CONFIG_C is not set\nCONFIG_S=\"x\"\n")
	if have["CONFIG_C"] != "n" || have["CONFIG_S"] != "x" {
		t.Fatalf("ParseConfig: %v", have)
	}
	if err := CheckConfig([]Option{{"CONFIG_A", "m"}, {"CONFIG_B", "m"}, {"CONFIG_B", "y"}}, have); err != nil {
		t.Fatalf("unexpected mismatch: %v", err)
	}
	err := CheckConfig([]Option{{"CONFIG_A", "y"}, {"CONFIG_C", "m"}, {"CONFIG_D", "y"}}, have)
	if !errors.Is(err, ErrConfigMismatch) {
		t.Fatalf("want ErrConfigMismatch, got %v", err)
	}
	for _, name := range []string{"CONFIG_A", "CONFIG_C", "CONFIG_D"} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("error does not name %s: %v", name, err)
		}
	}
}

// TestHostConfig checks config.fragment against the host's installed kernel
// configurations. It skips when there is none (the VM suite then fails on its
// own, naming the missing package).
func TestHostConfig(t *testing.T) {
	paths, _ := filepath.Glob("/boot/config-*")
	if len(paths) == 0 {
		t.Skip("no /boot/config-* on this host (package linux-image-amd64)")
	}
	sort.Strings(paths)
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := CheckConfig(Fragment(), ParseConfig(string(data))); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
}

// TestHostModules checks that every required module of modules.txt exists
// for each kernel installed on the host (modinfo -k), skipping when there
// is none or no modinfo (package kmod).
func TestHostModules(t *testing.T) {
	modinfo, err := exec.LookPath("modinfo")
	if err != nil {
		t.Skip("no modinfo (package kmod)")
	}
	dirs, _ := filepath.Glob("/lib/modules/*/modules.dep")
	if len(dirs) == 0 {
		t.Skip("no /lib/modules/*/modules.dep (package linux-image-amd64)")
	}
	for _, dep := range dirs {
		kver := filepath.Base(filepath.Dir(dep))
		for _, m := range ModuleList() {
			out, err := exec.Command(modinfo, "-k", kver, "-n", m.Name).CombinedOutput()
			switch {
			case err == nil:
			case m.Optional:
				t.Logf("%s: optional module %s absent", kver, m.Name)
			default:
				t.Errorf("%s: module %s: %v: %s", kver, m.Name, err, strings.TrimSpace(string(out)))
			}
		}
	}
}
