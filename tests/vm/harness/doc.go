// SPDX-License-Identifier: Apache-2.0

// Package harness boots real-kernel test VMs: qemu (TCG) running one of the
// host's Debian kernels from a generated busybox initramfs, whose /init
// mounts the host's root read-only over virtio-9p under a tmpfs overlay,
// chroots in and runs the guest agent (tests/vm/harness/agent). Tests then
// run the host's own binaries in the guest (dmsetup, mdadm, fio, our
// builds) against virtio disks backed by raw image files.
//
// It owns everything between a test and the guest kernel: the initramfs
// (cached in CacheDir, rebuilt when the kernel, kernel/modules.txt or the
// init script change), tidecache's own kernel modules (built on the host
// against the guest kernel's headers, cached by a hash of their sources,
// and loaded by the agent: dm-fuaflush, dm-readfirst and dm-errhold in
// every VM unless Config.NoFUAFlushModule, Config.NoReadFirstModule or
// Config.NoErrHoldModule is set), the qemu command line, the control
// channel to the agent (JSON lines over virtio-serial, see internal/wire),
// the ack channel used by power-cut tests, a watch on the guest console for
// a stuck kernel, and the VM's lifetime.
//
// The guest kernel is bookworm's 6.1 (DefaultKernel) unless Config.Kernel
// or EnvKernel names another: Kernel612 is bookworm's 6.12, the series
// Debian 13 runs, which has what Debian's 6.1 lacks, such as NVMe in-band
// authentication (an nvmet host's dhchap_key). The initramfs, the modules
// the guest loads from the host's /lib/modules/<version> and tidecache's
// own modules follow the choice, each cached per kernel version; `make
// deps` installs both kernels with their headers. A test that needs 6.12
// sets Config.Kernel; any scenario runs on 6.12 with
// TIDECACHE_VM_KERNEL=6.12 go test -tags vm ./tests/vm/ -run TestX.
//
// Config.Systemd boots the guest like a server instead: the same initramfs
// puts the overlay's upper layer on a persistent ext4 disk and switch_roots
// into Debian's systemd (with udev), which starts the agent as a unit (see
// SystemdBoot).
//
// The product's real-kernel scenarios that use it live in tests/vm; this
// package holds only the harness and its self-tests. A minimal test (files
// with VM tests carry the build tag vm):
//
//	func TestSomething(t *testing.T) {
//		dir := harness.TestDir(t)
//		v := harness.MustBoot(t, harness.Config{Disks: []harness.Disk{{Path: dir + "/ssd.img", Size: 1 << 30}}})
//		v.MustRun(t, "dmsetup create tc-x --table '0 2097152 linear /dev/vda 0'")
//	}
//
// The guest sees the host's whole root except /run, /dev, /proc and /sys,
// which it mounts afresh (GuestVisible; CacheDir and BuildBinaries refuse
// them), so a checkout anywhere else works, /tmp included: the guest's /tmp
// is the host's under its overlay. Files the guest must read (binaries,
// scripts) go in TestDir or CacheDir; guest-only scratch files go in
// ScratchDir, a tmpfs that is TMPDIR for every guest command. The root is
// mounted with 9p cache=loose: a file created on the host after Boot is
// visible in the guest, but one the guest has already read may stay stale
// when the host rewrites it, so write a new file instead. The guest's writes go to its
// tmpfs overlay and never reach the host; data leaves the guest through
// disks, command output and the ack channel.
//
// Boot takes about 3.5-7 s on an idle 2-core host (PVH entry into the
// uncompressed kernel, an uncompressed initramfs, dm-mod; other modules
// load when first used); VMs booting at once, or other load, stretch it.
//
// Nothing a test runs in the guest waits for ever. A command whose context
// has no deadline gets Config.CommandTimeout (DefaultCommandTimeout, 20
// minutes); one meant to run longer passes a context with its own
// deadline. And while a VM runs, the harness reads its console log every 2
// s for the guest kernel's own signs that it is stuck or dead: a soft or
// hard lockup, an RCU stall, a panic, an oops ("BUG: unable to handle").
// On one it logs the sign and kills qemu, and every pending and later call
// on the VM fails at once with ErrGuestStuck and the console lines around
// the sign (console.go). A hung task ("blocked for more than 120
// seconds") is only logged: tests may block I/O on purpose.
//
// Errors callers should expect: ErrUnavailable from Available (and Boot)
// when a host package is missing; Boot errors carry the console tail; Run
// and Exec return an error only when the command could not be run to its
// end (transport failure, qemu gone, ctx done, Config.CommandTimeout
// passed), never for a non-zero exit; ErrGuestStuck among them when the
// guest kernel was stuck, ErrHostIO when the test machine's own disk kept
// failing under a guest disk (a passing failure is retried, unseen by the
// guest: see Config.HostIOErrorWait).
//
// Environment: TIDECACHE_VM_CACHE (cache directory), TIDECACHE_VM_KERNEL
// (the guest kernel of VMs whose Config.Kernel is empty: a series such as
// 6.12, a version, or a vmlinuz path).
package harness
