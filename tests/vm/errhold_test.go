// SPDX-License-Identifier: Apache-2.0

//go:build vm

package vm_test

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tidecache/tidecache/tests/vm/harness"
)

// The devices TestErrHold builds on /dev/vdb: eh-leg maps the disk (linear,
// or the error target when the test makes it fail) and eh, the errhold
// target, sits on it; /dev/vda is the other leg of the mirror in the md
// part.
const (
	ehSectors = 65536 // 32 MiB
	ehLinear  = "0 65536 linear /dev/vdb 0"
	ehError   = "0 65536 error"
)

// ehStatus is the INFO status of an errhold target.
type ehStatus struct {
	mode                                   string
	heldNow, held, retried, failed, errors int64
}

func errholdStatus(t *testing.T, v *harness.VM, dev string) ehStatus {
	t.Helper()
	line := strings.TrimSpace(v.MustRun(t, "dmsetup status "+dev))
	var s ehStatus
	var start, length int64
	var target string
	if _, err := fmt.Sscanf(line, "%d %d %s %s %d %d %d %d %d", &start, &length, &target, &s.mode,
		&s.heldNow, &s.held, &s.retried, &s.failed, &s.errors); err != nil || target != "errhold" {
		t.Fatalf("%s: status %q: want 0 <len> errhold <hold|pass> <held_now> <held> <retried> <failed> <errors> (%v)", dev, line, err)
	}
	return s
}

// setLeg loads table into eh-leg: the disk below errhold works or fails.
func setLeg(t *testing.T, v *harness.VM, table string) {
	t.Helper()
	v.MustRun(t, fmt.Sprintf(`dmsetup suspend eh-leg && dmsetup load eh-leg --table %q && dmsetup resume eh-leg`, table))
}

// waitHeld waits until errhold holds n bios, and fails the test when the
// writer started with startWriter has finished meanwhile.
func waitHeld(t *testing.T, v *harness.VM, dev string, n int64, rc string) ehStatus {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		s := errholdStatus(t, v, dev)
		if s.heldNow >= n {
			if out := strings.TrimSpace(v.MustRun(t, "cat "+rc+" 2>/dev/null || true")); out != "" {
				t.Fatalf("the writer finished (exit %s) while its write was held: %+v", out, s)
			}
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s holds %d bios after 30 s, want %d: %+v", dev, s.heldNow, n, s)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// startWriter writes one 4 KiB block of the byte b at block blk of dev with
// O_DIRECT in the background; its exit status lands in rc.
func startWriter(t *testing.T, v *harness.VM, dev string, blk int, b byte, rc string) {
	t.Helper()
	v.MustRun(t, fmt.Sprintf(`rm -f %[4]s; (head -c 4096 /dev/zero | tr '\0' '\%03[3]o' | dd of=%[1]s bs=4096 seek=%[2]d oflag=direct conv=notrunc status=none; echo $? > %[4]s) >/dev/null 2>&1 &`,
		dev, blk, b, rc))
}

// waitWriter waits for startWriter's writer and returns its exit status.
func waitWriter(t *testing.T, v *harness.VM, rc string) string {
	t.Helper()
	return strings.TrimSpace(v.MustRun(t, fmt.Sprintf("for i in $(seq 150); do [ -s %[1]s ] && cat %[1]s && exit 0; sleep 0.2; done; echo none", rc)))
}

// TestErrHold checks kernel/dm-errhold, the target meant for the peer leg
// of a write mirror (issue 22, finding 1): a write the disk below fails is
// held, not completed, so the writer waits; "retry" resubmits it once the
// disk works again and the data reaches the disk; "fail" completes it with
// the error and passes errors from then on; "hold" holds again. Under md
// raid1 it is what keeps a mirrored write from being acknowledged on one
// leg while the other failed: md does not fail the leg, the write waits,
// until "fail", after which md fails the leg and completes the write on
// the other.
func TestErrHold(t *testing.T) {
	besideAnother(t, 10*time.Second)
	dir := harness.TestDir(t)
	v := harness.MustBoot(t, harness.Config{Name: "errhold", Dir: dir, MemoryMiB: 768, CPUs: vmCPUs(t), Disks: []harness.Disk{
		{Path: filepath.Join(dir, "local.img"), Size: ehSectors * 512},
		{Path: filepath.Join(dir, "peer.img"), Size: ehSectors * 512},
	}})
	// The harness loads kernel/dm-errhold in every VM (harness.ErrHold).
	if out := v.MustRun(t, "dmsetup targets"); !regexp.MustCompile(`(?m)^errhold\s+v1\.0\.0$`).MatchString(out) {
		t.Fatalf("errhold v1.0.0 not among the guest's targets:\n%s", out)
	}
	v.MustRun(t, fmt.Sprintf(`set -e
dmsetup create eh-leg --table %q
dmsetup create eh --table "0 65528 errhold /dev/mapper/eh-leg 8"`, ehLinear))
	if got := strings.TrimSpace(v.MustRun(t, "dmsetup table eh")); !regexp.MustCompile(`^0 65528 errhold \d+:\d+ 8$`).MatchString(got) {
		t.Fatalf("table %q, want 0 65528 errhold <leg> 8", got)
	}
	for _, bad := range []string{
		`dmsetup create eh-bad --table "0 8 errhold /dev/mapper/eh-leg"`,
		`dmsetup create eh-bad --table "0 8 errhold /dev/mapper/eh-leg x"`,
		`dmsetup create eh-bad --table "0 8 errhold /dev/mapper/eh-leg 0 1"`,
		"dmsetup message eh 0 release",
		"dmsetup message eh 0 fail now",
	} {
		if res, err := v.Run(t.Context(), bad+" 2>&1; r=$?; dmsetup remove eh-bad 2>/dev/null; exit $r"); err != nil || res.ExitCode == 0 {
			t.Errorf("%s: exit %d, %v; want a refusal", bad, res.ExitCode, err)
		}
	}
	if s := errholdStatus(t, v, "eh"); s != (ehStatus{mode: "hold"}) {
		t.Fatalf("fresh target: %+v, want hold and counters at zero", s)
	}
	// readBlock returns the first byte of block blk of the disk under eh,
	// in octal, read around both targets.
	readBlock := func(blk int) string {
		return strings.TrimSpace(v.MustRun(t, fmt.Sprintf("dd if=/dev/vdb bs=4096 skip=%d count=1 iflag=direct status=none | od -An -c -N1", blk+1)))
	}

	// retry: the disk fails a write, the writer waits; the disk is back,
	// retry, the write lands where it was aimed.
	setLeg(t, v, ehError)
	startWriter(t, v, "/dev/mapper/eh", 10, 'a', "/run/w1.rc")
	waitHeld(t, v, "eh", 1, "/run/w1.rc")
	time.Sleep(time.Second)
	if s := waitHeld(t, v, "eh", 1, "/run/w1.rc"); s.mode != "hold" || s.errors < 1 {
		t.Fatalf("holding: %+v", s)
	}
	setLeg(t, v, ehLinear)
	v.MustRun(t, "dmsetup message eh 0 retry")
	if rc := waitWriter(t, v, "/run/w1.rc"); rc != "0" {
		t.Fatalf("writer after retry: exit %q, want 0", rc)
	}
	if got := readBlock(10); got != "a" {
		t.Fatalf("block 10 of the disk after retry: %q, want the written 'a'", got)
	}
	if s := errholdStatus(t, v, "eh"); s.heldNow != 0 || s.held != 1 || s.retried != 1 || s.failed != 0 {
		t.Fatalf("after retry: %+v, want one held and retried", s)
	}

	// fail: the error goes up, and the next error passes at once.
	setLeg(t, v, ehError)
	startWriter(t, v, "/dev/mapper/eh", 11, 'b', "/run/w2.rc")
	waitHeld(t, v, "eh", 1, "/run/w2.rc")
	v.MustRun(t, "dmsetup message eh 0 fail")
	if rc := waitWriter(t, v, "/run/w2.rc"); rc == "0" || rc == "none" {
		t.Fatalf("writer after fail: exit %q, want an I/O error", rc)
	}
	startWriter(t, v, "/dev/mapper/eh", 12, 'c', "/run/w3.rc")
	if rc := waitWriter(t, v, "/run/w3.rc"); rc == "0" || rc == "none" {
		t.Fatalf("writer while passing errors: exit %q, want an I/O error at once", rc)
	}
	if s := errholdStatus(t, v, "eh"); s.mode != "pass" || s.heldNow != 0 || s.held != 2 || s.failed != 1 {
		t.Fatalf("after fail: %+v, want pass, two held in all, one failed", s)
	}
	setLeg(t, v, ehLinear)
	v.MustRun(t, "dmsetup message eh 0 hold")
	if s := errholdStatus(t, v, "eh"); s.mode != "hold" {
		t.Fatalf("after hold: %+v", s)
	}

	// Under md raid1, the way a write mirror's peer leg runs: the leg's
	// failure holds the mirrored write and md keeps both legs, until fail.
	v.MustRun(t, `set -e
mdadm --create /dev/md/ehm --run --level=1 --raid-devices=2 --metadata=1.2 --assume-clean --bitmap=none /dev/vda /dev/mapper/eh 2>&1
mdadm --wait /dev/md/ehm || true`)
	both := func() string {
		return strings.TrimSpace(v.MustRun(t, "cat /sys/block/$(basename $(readlink -f /dev/md/ehm))/md/degraded"))
	}
	setLeg(t, v, ehError)
	startWriter(t, v, "/dev/md/ehm", 20, 'd', "/run/w4.rc")
	waitHeld(t, v, "eh", 1, "/run/w4.rc")
	time.Sleep(2 * time.Second)
	waitHeld(t, v, "eh", 1, "/run/w4.rc")
	if d := both(); d != "0" {
		t.Fatalf("md degraded=%s while the peer leg's write is held: md failed the leg, the write would be acknowledged on one leg", d)
	}
	v.MustRun(t, "dmsetup message eh 0 fail")
	if rc := waitWriter(t, v, "/run/w4.rc"); rc != "0" {
		t.Fatalf("mirrored writer after fail: exit %q, want 0 (md completes it on the other leg)", rc)
	}
	if d := both(); d != "1" {
		t.Fatalf("md degraded=%s after fail, want 1: the leg failed", d)
	}
	if got := strings.TrimSpace(v.MustRun(t, "dd if=/dev/vda bs=4096 skip=$((20 + $(mdadm --examine /dev/vda | awk '/Data Offset/ {print $4}') / 8)) count=1 iflag=direct status=none | od -An -c -N1")); got != "d" {
		t.Fatalf("the local leg's copy of block 20: %q, want 'd'", got)
	}
	v.MustRun(t, "mdadm --stop /dev/md/ehm")
}
