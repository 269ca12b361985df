// SPDX-License-Identifier: Apache-2.0

//go:build vm

package harness

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidecache/tidecache/internal/testnet"
)

// requireHost fails (never skips) a VM test on a host that cannot run it.
func requireHost(t *testing.T) {
	t.Helper()
	if err := Available(); err != nil {
		t.Fatal(err)
	}
	twoAtATime(t)
}

// vmSlots lets two of the package's VM tests run at once: each boots one
// small VM and spends much of its time waiting on it (a boot, a console
// line, a timeout), so two share the machine's two cores: the package took
// 80 s in a clean-clone `.ci/run`, 103 s with one test at a time.
var vmSlots = make(chan struct{}, 2)

// twoAtATime runs t in parallel with the package's other VM tests, at
// most two at a time; the package's host tests run first.
func twoAtATime(t *testing.T) {
	t.Helper()
	t.Parallel()
	select {
	case vmSlots <- struct{}{}:
	case <-t.Context().Done():
		t.Fatal(t.Context().Err())
	}
	t.Cleanup(func() { <-vmSlots })
}

func TestHarnessBoot(t *testing.T) {
	requireHost(t)
	dir := TestDir(t)
	v := MustBoot(t, Config{Name: "boot", Dir: dir, Disks: []Disk{
		{Path: filepath.Join(dir, "a.img"), Size: 64 << 20},
		{Path: filepath.Join(dir, "slow.img"), Size: 16 << 20, IOPSLimit: 50},
	}})
	t.Logf("boot took %v", v.BootDuration().Round(time.Millisecond))

	kver, err := KernelVersion()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(v.MustRun(t, "uname -r")); got != kver {
		t.Errorf("guest kernel %q, host kernel %q", got, kver)
	}
	// dm-mod is loaded at boot; a target's module, like any on-demand one
	// in kernel/modules.txt, is loaded by the kernel at first use (it runs
	// the host's modprobe), as on a server.
	if mods := v.MustRun(t, "cat /proc/modules"); !strings.Contains(mods, "dm_mod ") {
		t.Errorf("dm_mod not loaded:\n%s", mods)
	}
	v.MustRun(t, "dmsetup create tc-delay --table '0 2048 delay /dev/vda 0 0' && grep -q '^dm_delay ' /proc/modules && dmsetup remove tc-delay")
	if out := v.MustRun(t, "dmsetup version"); !strings.Contains(out, "Driver version") {
		t.Errorf("dmsetup version: %q", out)
	}
	if out := v.MustRun(t, "blockdev --getsize64 /dev/vda"); strings.TrimSpace(out) != fmt.Sprint(64<<20) {
		t.Errorf("/dev/vda size %q", out)
	}
	// qemu throttles the second disk to 50 IOPS: 100 direct writes take ~2 s.
	out := v.MustRun(t, "s=$(date +%s%N); dd if=/dev/zero of=/dev/vdb bs=4k count=100 oflag=direct status=none; echo $(( ($(date +%s%N) - s) / 1000000 ))")
	if ms, err := strconv.Atoi(strings.TrimSpace(out)); err != nil || ms < 1200 {
		t.Errorf("100 writes to a 50-IOPS disk took %q ms, want >= 1200", out)
	} else {
		t.Logf("100 writes to a 50-IOPS disk: %d ms", ms)
	}
	if out := v.MustRun(t, `test "$DM_DISABLE_UDEV" = 1 && hostname`); strings.TrimSpace(out) != "boot" {
		t.Errorf("hostname %q", out)
	}
	v.MustRun(t, "modprobe nvmet && test -d /sys/kernel/config/nvmet && test -e /dev/fd/0")
	// Guest programs get a scratch tmpfs as TMPDIR; /tmp stays the host's, so
	// a file the host makes there after boot (a checkout under /tmp) is seen.
	v.MustRun(t, `test "$TMPDIR" = `+ScratchDir+` && mount | grep -q ' `+ScratchDir+` type tmpfs' && ! mount | grep -q ' /tmp type '`)
	hostTmp := t.TempDir()
	if err := GuestVisible(hostTmp); err != nil {
		t.Logf("not checking the host's temporary directory: %v", err)
	} else {
		if err := os.WriteFile(filepath.Join(hostTmp, "from-host"), []byte("host\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if out := v.MustRun(t, "cat "+filepath.Join(hostTmp, "from-host")); out != "host\n" {
			t.Errorf("guest reads %q from the host's %s, want \"host\\n\"", out, hostTmp)
		}
	}
	// dmsetup makes /dev/mapper nodes itself (no udev in the guest).
	v.MustRun(t, "dmsetup create tc-probe --table '0 2048 linear /dev/vda 0' && test -b /dev/mapper/tc-probe && dmsetup remove tc-probe")

	// Binaries built after boot into a new directory are visible to the guest.
	if err := BuildBinaries(t.Context(), filepath.Join(dir, "bin"), "./tests/vm/harness/vmrun"); err != nil {
		t.Fatal(err)
	}
	if out := v.MustRun(t, filepath.Join(dir, "bin", "vmrun")+" -h 2>&1 || true"); !strings.Contains(out, "-disk") {
		t.Errorf("vmrun -h in the guest: %q", out)
	}
	// The guest writes to its overlay, not to the host.
	v.MustRun(t, "echo guest > "+filepath.Join(dir, "from-guest"))
	if _, err := os.Stat(filepath.Join(dir, "from-guest")); err == nil {
		t.Error("a guest write reached the host root")
	}

	res, err := v.Run(t.Context(), "echo out; echo err >&2; exit 7")
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 7 || res.Stdout != "out\n" || res.Stderr != "err\n" {
		t.Errorf("got %+v, want exit 7, stdout out, stderr err", res)
	}
	res, err = v.Run(t.Context(), "kill -9 $$")
	if err != nil || res.ExitCode != 128+9 {
		t.Errorf("killed shell: got %+v, %v; want exit code 137", res, err)
	}
	res, err = v.Exec(t.Context(), Cmd{Argv: []string{"sh", "-c", `printf '%s' "$X" && pwd`}, Env: []string{"X=y"}, Dir: "/etc"})
	if err != nil || res.Stdout != "y/etc\n" {
		t.Errorf("Exec with env and dir: got %+v, %v", res, err)
	}
	// Binary output survives the trip.
	res, err = v.Run(t.Context(), `printf '\000\377\n'`)
	if err != nil || res.Stdout != "\x00\xff\n" {
		t.Errorf("binary output: got %q, %v", res.Stdout, err)
	}

	// Concurrent requests: the echo answers while the sleep still runs.
	var wg sync.WaitGroup
	order := make(chan string, 2)
	for _, cmd := range []string{"sleep 3; echo slow", "echo fast"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := v.Run(t.Context(), cmd)
			if err != nil || res.ExitCode != 0 {
				t.Errorf("%q: %+v, %v", cmd, res, err)
			}
			order <- strings.TrimSpace(res.Stdout)
		}()
		if cmd != "echo fast" {
			time.Sleep(300 * time.Millisecond) // let the sleep start first
		}
	}
	wg.Wait()
	close(order)
	if first := <-order; first != "fast" {
		t.Errorf("first answer %q, want fast", first)
	}

	// A context deadline kills the command in the guest.
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	start := time.Now()
	if _, err := v.Run(ctx, "sleep 60"); err == nil {
		t.Error("sleep 60 with a 2 s deadline: no error")
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("timeout took %v", d)
	}
	if out := v.MustRun(t, "pgrep -x sleep || true"); strings.TrimSpace(out) != "" {
		t.Errorf("sleep still running after timeout: %s", out)
	}

	if err := v.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Run(t.Context(), "true"); err == nil {
		t.Error("Run after Shutdown: no error")
	}
}

func TestHarnessBootFailure(t *testing.T) {
	requireHost(t)
	dir := TestDir(t)
	// A later tc.agent= wins in /init: it powers off, naming the problem.
	_, err := Boot(t.Context(), Config{Name: "fail", Dir: dir, ExtraAppend: "tc.agent=/nonexistent"})
	if err == nil {
		t.Fatal("Boot succeeded")
	}
	for _, want := range []string{"qemu exited before the guest agent answered", "agent /nonexistent not found", "console tail"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

func TestHarnessPowerCut(t *testing.T) {
	requireHost(t)
	dir := TestDir(t)
	cfg := Config{Name: "powercut", Dir: dir, Disks: []Disk{{Path: filepath.Join(dir, "ssd.img"), Size: 32 << 20}}}
	v := MustBoot(t, cfg)

	// 1 MiB of random data at offset 4 MiB, written around the guest's page
	// cache and flushed, then acknowledged.
	pattern := ScratchDir + "/pattern"
	v.MustRun(t, "head -c 1048576 /dev/urandom > "+pattern)
	sum := strings.Fields(v.MustRun(t, "sha256sum "+pattern))[0]
	v.MustRun(t, "dd if="+pattern+" of=/dev/vda bs=64k seek=64 oflag=direct conv=fsync status=none")
	v.MustRun(t, "echo ack-1 "+sum+" > "+v.AckDevice())
	if err := v.Kill(); err != nil {
		t.Fatal(err)
	}
	acks, err := v.Acks()
	if err != nil {
		t.Fatal(err)
	}
	if want := "ack-1 " + sum + "\n"; string(acks) != want {
		t.Fatalf("acks %q, want %q", acks, want)
	}

	// The host sees the pattern in the image right after the power cut.
	img, err := os.ReadFile(cfg.Disks[0].Path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprintf("%x", sha256.Sum256(img[4<<20:5<<20])); got != sum {
		t.Errorf("host view of the image after the cut: sha256 %s, want %s", got, sum)
	}

	v2 := MustBoot(t, cfg)
	got := strings.Fields(v2.MustRun(t, "dd if=/dev/vda bs=64k skip=64 count=16 iflag=direct status=none | sha256sum"))[0]
	if got != sum {
		t.Errorf("after reboot: sha256 %s, want %s", got, sum)
	}
	if !bytes.Equal(acks, mustAcks(t, v)) {
		t.Error("the first boot's ack file changed after the second boot")
	}
}

func mustAcks(t *testing.T, v *VM) []byte {
	t.Helper()
	b, err := v.Acks()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestHarnessNetwork(t *testing.T) {
	requireHost(t)
	dir := TestDir(t)
	addr := testnet.LoopbackAddr(t)
	cfgs := []Config{
		{Name: "net-a", Dir: dir, MemoryMiB: 512, Network: &Network{Addr: "10.99.0.1/24", Listen: addr}},
		{Name: "net-b", Dir: dir, MemoryMiB: 512, Network: &Network{Addr: "10.99.0.2/24", Connect: addr}},
		{Name: "net-c", Dir: dir, MemoryMiB: 512, Network: &Network{Addr: "10.99.0.3/24", Connect: addr}},
	}
	vms := make([]*VM, len(cfgs))
	errs := make([]error, len(cfgs))
	var wg sync.WaitGroup
	// Connect sides first: they must wait for the Listen side.
	for _, i := range []int{1, 2, 0} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			vms[i], errs[i] = Boot(t.Context(), cfgs[i])
		}()
		time.Sleep(500 * time.Millisecond)
	}
	wg.Wait()
	for i, v := range vms {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		t.Cleanup(func() { v.Kill() })
		t.Logf("%s booted in %v (three at once)", v.Name(), v.BootDuration().Round(time.Millisecond))
	}
	a, b, c := vms[0], vms[1], vms[2]
	a.MustRun(t, "busybox ping -c 2 -W 5 10.99.0.2")
	b.MustRun(t, "busybox ping -c 2 -W 5 10.99.0.1")
	// Two Connect sides reach each other through the Listen side's hub.
	c.MustRun(t, "busybox ping -c 2 -W 5 10.99.0.2")

	// Power-cut the Listen side and boot it again: the others rejoin.
	if err := a.Kill(); err != nil {
		t.Fatal(err)
	}
	a = MustBoot(t, cfgs[0])
	b.MustRun(t, "busybox ping -c 2 -W 10 10.99.0.1")
	// And the same for a Connect side.
	if err := c.Kill(); err != nil {
		t.Fatal(err)
	}
	c = MustBoot(t, cfgs[2])
	a.MustRun(t, "busybox ping -c 2 -W 10 10.99.0.3")
}

// TestHarnessHostIOError gives the guest disks whose host side fails
// (qemu's blkdebug): a failure that clears is retried while the guest is
// paused, so the guest's writes succeed and read back; one that does not
// clear stops the VM with ErrHostIO naming the image and the host's reason.
// TestHarnessGuestStuck has the guest print a hung task and then a soft
// lockup on its console, as the kernel would (through /dev/kmsg): the hung
// task is only logged, and the lockup makes the pending command, and every
// later one, fail at once with ErrGuestStuck, and ends qemu.
func TestHarnessGuestStuck(t *testing.T) {
	requireHost(t)
	v := MustBoot(t, Config{Name: "stuck", Dir: TestDir(t)})
	v.MustRun(t, "echo '<3>INFO: task harness-test:1 blocked for more than 120 seconds.' > /dev/kmsg")
	time.Sleep(2 * consolePoll)
	if out := v.MustRun(t, "echo alive"); strings.TrimSpace(out) != "alive" {
		t.Fatalf("after a hung task: %q", out)
	}

	pending := make(chan error, 1)
	go func() {
		_, err := v.Run(t.Context(), "sleep 120")
		pending <- err
	}()
	start := time.Now()
	v.MustRun(t, "echo '<0>watchdog: BUG: soft lockup - CPU#0 stuck for 23s! [harness-test:1]' > /dev/kmsg")
	var err error
	select {
	case err = <-pending:
	case <-time.After(30 * time.Second):
		t.Fatal("the pending command still waits 30 s after a soft lockup")
	}
	t.Logf("after %v: %v", time.Since(start).Round(time.Millisecond), err)
	if !errors.Is(err, ErrGuestStuck) || !strings.Contains(err.Error(), "stuck for 23s! [harness-test:1]") {
		t.Fatalf("pending command: %v; want ErrGuestStuck with the console line", err)
	}
	if _, err := v.Run(t.Context(), "true"); !errors.Is(err, ErrGuestStuck) {
		t.Errorf("a later command: %v; want ErrGuestStuck", err)
	}
	select {
	case <-v.Done():
	case <-time.After(10 * time.Second):
		t.Error("qemu still running after the guest was found stuck")
	}
}

func TestHarnessHostIOError(t *testing.T) {
	requireHost(t)
	dir := TestDir(t)
	rules := func(name, errno string, once bool) string {
		p := filepath.Join(dir, name)
		conf := fmt.Sprintf("[inject-error]\nevent = \"pwritev\"\nerrno = %q\nonce = %q\n", errno, map[bool]string{true: "on", false: "off"}[once])
		if err := os.WriteFile(p, []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write := func(v *VM, disk string) (Result, error) {
		return v.Run(t.Context(), "head -c 1048576 /dev/urandom > "+ScratchDir+"/p && "+
			"dd if="+ScratchDir+"/p of="+disk+" bs=64k oflag=direct conv=fsync status=none && "+
			"cmp "+ScratchDir+"/p "+disk+" -n 1048576")
	}

	// Disks that shape their queue are attached with -drive if=none and a
	// -device each (qemu.go): the events must name them the same way.
	for _, shaped := range []bool{false, true} {
		name, queues, size := "cleared: retried", 0, 0
		if shaped {
			name, queues, size = "cleared, one queue of 32: retried", 1, 32
		}
		t.Run(name, func(t *testing.T) {
			hostIOCleared(t, dir, rules, write, queues, size)
		})
	}

	t.Run("lasting: VM stopped", func(t *testing.T) {
		img := filepath.Join(dir, "dead.img")
		v := MustBoot(t, Config{Name: "hostio-dead", Dir: dir, HostIOErrorWait: 3 * time.Second, Disks: []Disk{
			{Path: img, Size: 16 << 20, HostFaults: rules("dead.conf", "5", false)},
		}})
		start := time.Now()
		_, err := write(v, "/dev/vda")
		if !errors.Is(err, ErrHostIO) {
			t.Fatalf("write to a disk whose host side keeps failing: %v, want ErrHostIO", err)
		}
		for _, want := range []string{"write of vda (" + img + ") failed on the host: Input/output error", "not the guest"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error lacks %q: %v", want, err)
			}
		}
		if d := time.Since(start); d < 3*time.Second || d > 30*time.Second {
			t.Errorf("stopped after %v, want about HostIOErrorWait (3 s)", d)
		}
		select {
		case <-v.Done():
		case <-time.After(10 * time.Second):
			t.Error("qemu still running after the VM was stopped")
		}
		t.Logf("%v", err)
	})
}

// hostIOCleared writes through two disks whose host side fails once each
// (EIO, then ENOSPC): the harness retries, the guest sees no error, and
// each error names its guest disk and image.
func hostIOCleared(t *testing.T, dir string, rules func(name, errno string, once bool) string,
	write func(v *VM, disk string) (Result, error), queues, queueSize int) {
	suffix := ""
	if queueSize > 0 {
		suffix = "-q"
	}
	v := MustBoot(t, Config{Name: "hostio" + suffix, Dir: dir, Disks: []Disk{
		{Path: filepath.Join(dir, "eio"+suffix+".img"), Size: 16 << 20, HostFaults: rules("eio"+suffix+".conf", "5", true), Queues: queues, QueueSize: queueSize},
		{Path: filepath.Join(dir, "full"+suffix+".img"), Size: 16 << 20, HostFaults: rules("full"+suffix+".conf", "28", true), Queues: queues, QueueSize: queueSize},
	}})
	for _, disk := range []string{"/dev/vda", "/dev/vdb"} {
		res, err := write(v, disk)
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("write %s: %v, exit %d: %s", disk, err, res.ExitCode, res.Stderr)
		}
	}
	got := v.HostIOErrors()
	want := []struct {
		disk, reason string
		nospace      bool
	}{{"vda", "Input/output error", false}, {"vdb", "No space left on device", true}}
	if len(got) != len(want) {
		t.Fatalf("host I/O errors %v, want one on each disk", got)
	}
	for i, w := range want {
		g := got[i]
		if g.Disk != w.disk || g.Operation != "write" || g.Reason != w.reason || g.NoSpace != w.nospace || g.Path != v.Config().Disks[i].Path {
			t.Errorf("host I/O error %d: %+v, want a write of %s, %q, nospace %v", i, g, w.disk, w.reason, w.nospace)
		}
	}
	if out := v.MustRun(t, "dmesg"); strings.Contains(out, "I/O error") {
		t.Errorf("the guest saw an I/O error:\n%s", out)
	}
}
