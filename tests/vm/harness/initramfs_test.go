// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"bytes"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
)

type cpioEntry struct {
	name         string
	mode         uint32
	rmaj, rmin   uint32
	data         []byte
	headerOffset int
}

// readCPIO parses a newc archive, checking alignment as the kernel does.
func readCPIO(t *testing.T, b []byte) []cpioEntry {
	t.Helper()
	var out []cpioEntry
	off := 0
	field := func(i int) uint32 {
		v, err := strconv.ParseUint(string(b[off+6+8*i:off+14+8*i]), 16, 32)
		if err != nil {
			t.Fatalf("header at %d field %d: %v", off, i, err)
		}
		return uint32(v)
	}
	align := func(n int) int { return (n + 3) &^ 3 }
	for {
		if off%4 != 0 || string(b[off:off+6]) != "070701" {
			t.Fatalf("bad header at %d: %q", off, b[off:min(off+6, len(b))])
		}
		e := cpioEntry{mode: field(1), rmaj: field(9), rmin: field(10), headerOffset: off}
		size, namesize := int(field(6)), int(field(11))
		e.name = string(b[off+110 : off+110+namesize-1])
		if b[off+110+namesize-1] != 0 {
			t.Fatalf("%s: name not NUL-terminated", e.name)
		}
		dataOff := align(off + 110 + namesize)
		e.data = b[dataOff : dataOff+size]
		off = align(dataOff + size)
		if e.name == "TRAILER!!!" {
			if off != len(b) {
				t.Fatalf("%d bytes after the trailer", len(b)-off)
			}
			return out
		}
		out = append(out, e)
	}
}

func TestCPIOWriter(t *testing.T) {
	var buf bytes.Buffer
	w := newCPIOWriter(&buf)
	w.charDev("dev/console", 0o600, 5, 1)
	w.file("init", 0o755, []byte("#!/bin/sh\n"))
	w.file("lib/modules/k/kernel/a.ko", 0o644, []byte("abcde"))
	w.symlink("bin/sh", "busybox")
	w.file("lib/modules/k/modules.dep", 0o644, nil)
	if err := w.close(); err != nil {
		t.Fatal(err)
	}
	entries := readCPIO(t, buf.Bytes())
	var names []string
	byName := map[string]cpioEntry{}
	for _, e := range entries {
		names = append(names, e.name)
		byName[e.name] = e
	}
	want := []string{"dev", "dev/console", "init", "lib", "lib/modules", "lib/modules/k", "lib/modules/k/kernel",
		"lib/modules/k/kernel/a.ko", "bin", "bin/sh", "lib/modules/k/modules.dep"}
	if !slices.Equal(names, want) {
		t.Fatalf("entries %v, want %v", names, want)
	}
	if e := byName["dev/console"]; e.mode != cpioChr|0o600 || e.rmaj != 5 || e.rmin != 1 {
		t.Errorf("console: %+v", e)
	}
	if e := byName["lib/modules/k/kernel/a.ko"]; string(e.data) != "abcde" || e.mode != cpioFile|0o644 {
		t.Errorf("a.ko: %+v", e)
	}
	if e := byName["bin/sh"]; string(e.data) != "busybox" || e.mode != cpioLink|0o777 {
		t.Errorf("symlink: %+v", e)
	}
	if e := byName["lib"]; e.mode != cpioDir|0o755 {
		t.Errorf("dir mode %o", e.mode)
	}

	// The host's cpio, when there, reads it too.
	if _, err := exec.LookPath("cpio"); err == nil {
		cmd := exec.Command("cpio", "-t", "--quiet")
		cmd.Stdin = bytes.NewReader(buf.Bytes())
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("cpio -t: %v", err)
		}
		if got := strings.Fields(string(out)); !slices.Equal(got, want) {
			t.Errorf("cpio -t lists %v", got)
		}
	}
}

func TestParseShowDepends(t *testing.T) {
	out := `insmod /lib/modules/k/kernel/drivers/virtio/virtio_ring.ko 
insmod /lib/modules/k/kernel/net/9p/9pnet.ko 
builtin virtio_pci_legacy_dev
insmod /lib/modules/k/kernel/fs/x.ko opt=1 b=2
`
	got, err := parseShowDepends(out)
	if err != nil {
		t.Fatal(err)
	}
	want := []insmod{
		{path: "/lib/modules/k/kernel/drivers/virtio/virtio_ring.ko"},
		{path: "/lib/modules/k/kernel/net/9p/9pnet.ko"},
		{path: "/lib/modules/k/kernel/fs/x.ko", args: "opt=1 b=2"},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	if _, err := parseShowDepends("modprobe: FATAL: Module nope not found.\n"); err == nil {
		t.Error("error output accepted")
	}
}

func TestFilterModulesDep(t *testing.T) {
	dep := "kernel/a.ko:\nkernel/b.ko: kernel/a.ko\nkernel/c.ko: kernel/a.ko\n"
	got := filterModulesDep(dep, "/lib/modules/k", []insmod{{path: "/lib/modules/k/kernel/a.ko"}, {path: "/lib/modules/k/kernel/b.ko"}})
	if want := "kernel/a.ko:\nkernel/b.ko: kernel/a.ko\n"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestInitScriptSyntax(t *testing.T) {
	for _, sh := range []string{"/bin/sh", "/bin/busybox"} {
		if _, err := os.Stat(sh); err != nil {
			continue
		}
		args := []string{"-n", "-c", initScript}
		if strings.HasSuffix(sh, "busybox") {
			args = append([]string{"sh"}, args...)
		}
		if out, err := exec.Command(sh, args...).CombinedOutput(); err != nil {
			t.Errorf("%s -n: %v: %s", sh, err, out)
		}
	}
	for _, want := range []string{"trans=virtio,version=9p2000.L,cache=loose,msize=512000 hostroot /host", "exec chroot /newroot", "tc.agent="} {
		if !strings.Contains(initScript, want) {
			t.Errorf("init script lacks %q", want)
		}
	}
}

// TestInitScriptMounts checks the init script against GuestVisible: every
// filesystem /init mounts inside the guest's root hides a directory
// GuestVisible refuses, the guest's /tmp is left to the host, and the
// scratch tmpfs the agent names in TMPDIR is mounted.
func TestInitScriptMounts(t *testing.T) {
	var targets []string
	for _, line := range strings.Split(initScript, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "mount" {
			continue
		}
		if target, ok := strings.CutPrefix(f[len(f)-1], "/newroot/"); ok {
			targets = append(targets, "/"+target)
		}
	}
	if len(targets) == 0 {
		t.Fatal("no mounts under /newroot found in the init script")
	}
	for _, target := range targets {
		if GuestVisible(target) == nil {
			t.Errorf("/init mounts a filesystem on %s, but GuestVisible reports it visible", target)
		}
		if target == "/tmp" || strings.HasPrefix(target, "/tmp/") {
			t.Errorf("/init mounts a filesystem on %s: a host checkout under /tmp would be hidden", target)
		}
	}
	if !slices.Contains(targets, ScratchDir) {
		t.Errorf("/init does not mount the scratch tmpfs on %s (mounts: %v)", ScratchDir, targets)
	}
	for _, hidden := range hiddenFromGuest {
		if !slices.Contains(targets, hidden) {
			t.Errorf("GuestVisible refuses %s, but /init mounts nothing there (mounts: %v)", hidden, targets)
		}
	}
}
