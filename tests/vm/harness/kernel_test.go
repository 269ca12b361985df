// SPDX-License-Identifier: Apache-2.0

//go:build vm

package harness

import (
	"strings"
	"testing"
)

// TestHarnessKernel612 boots bookworm's 6.12 (Config.Kernel = Kernel612):
// the guest runs the newest installed 6.12, the kernel's own targets load
// from its /lib/modules (xz-compressed there, unlike 6.1's), tidecache's
// modules were built against its headers and loaded, and an nvmet host
// entry has dhchap_key, through which NVMe in-band authentication
// (DH-HMAC-CHAP) is configured.
func TestHarnessKernel612(t *testing.T) { testKernel(t, Kernel612, true) }

// TestHarnessKernel61 is TestHarnessKernel612 on the default kernel,
// Debian's 6.1, built without CONFIG_NVME_TARGET_AUTH: its nvmet host
// entry has no dhchap_key. A test of NVMe authentication boots Kernel612;
// on 6.1 it could only skip, for that reason.
func TestHarnessKernel61(t *testing.T) { testKernel(t, Kernel61, false) }

// testKernel boots kernel and checks what TestHarnessKernel612 lists;
// auth is whether the kernel has NVMe in-band authentication.
func testKernel(t *testing.T, kernel string, auth bool) {
	if err := KernelAvailable(kernel); err != nil {
		t.Fatal(err)
	}
	twoAtATime(t)
	kver, err := ResolveKernel(kernel)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(kver, kernel+".") {
		t.Fatalf("%s resolves to %s", kernel, kver)
	}
	v := MustBoot(t, Config{Name: "kernel", Dir: TestDir(t), Kernel: kernel, MemoryMiB: 1024, CPUs: 1})
	t.Logf("%s booted in %v", kver, v.BootDuration())
	if v.KernelVersion() != kver {
		t.Errorf("VM.KernelVersion %s, want %s", v.KernelVersion(), kver)
	}
	if got := strings.TrimSpace(v.MustRun(t, "uname -r")); got != kver {
		t.Fatalf("guest runs %s, want %s", got, kver)
	}

	// The kernel loads its targets' modules at first use; load them here
	// so that dmsetup lists them.
	out := v.MustRun(t, "modprobe -a dm-writecache dm-cache dm-raid && dmsetup targets")
	targets := map[string]bool{}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			targets[f[0]] = true
		}
	}
	for _, want := range []string{"writecache", "cache", "raid", "fuaflush", "readfirst", "errhold"} {
		if !targets[want] {
			t.Errorf("no %s target on %s:\n%s", want, kver, out)
		}
	}

	const host = "/sys/kernel/config/nvmet/hosts/tc-probe"
	out = v.MustRun(t, "modprobe nvmet && modprobe nvmet-tcp && mkdir "+host+" && ls "+host+" && rmdir "+host)
	attrs := strings.Fields(out)
	has := false
	for _, a := range attrs {
		has = has || a == "dhchap_key"
	}
	switch {
	case auth && !has:
		t.Errorf("%s: nvmet host has no dhchap_key (attributes %q): no NVMe in-band authentication", kver, attrs)
	case !auth && has:
		t.Errorf("%s: nvmet host has dhchap_key: the kernel has NVMe in-band authentication after all", kver)
	default:
		t.Logf("%s: nvmet host attributes %q", kver, attrs)
	}
}
