// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tidecache/tidecache/tests/vm/harness/internal/wire"
)

// BootTimeout bounds Boot: from starting qemu to the agent's first answer.
const BootTimeout = 120 * time.Second

// ShutdownTimeout is how long Shutdown waits for a clean power-off when its
// context has no earlier deadline.
const ShutdownTimeout = 60 * time.Second

// AckDevice is the guest path of the ack channel (see VM.Acks).
const AckDevice = wire.AckDevice

// ScratchDir is the guest's scratch directory, a tmpfs and TMPDIR for every
// guest command: files a test makes in the guest that the host need not see
// go there. (The guest's /tmp is the host's /tmp under the guest's
// overlay.)
const ScratchDir = wire.ScratchDir

// keepBoots is how many boot directories per VM name Boot keeps in a state
// directory.
const keepBoots = 10

// Disk is a raw disk image given to the guest as /dev/vda, /dev/vdb, ... in
// Config order (virtio-blk, host page cache bypassed with cache=none).
type Disk struct {
	Path string // host path of the raw image
	// Size in bytes of the sparse image created when Path does not exist;
	// an existing image is used as it is.
	Size int64
	// IOPSLimit and BpsLimit throttle the disk on the host side (qemu's
	// throttling.iops-total / bps-total, reads and writes together); 0 is
	// no limit. Use IOPSLimit to make an emulated HDD behave like a spindle.
	IOPSLimit, BpsLimit int64
	// Queues and QueueSize shape the disk's request queue as the guest
	// sees it: Queues virtio request queues (num-queues) of QueueSize
	// entries each (queue-size: a power of two from 4 to 1024). The guest
	// driver keeps at most QueueSize requests in flight per queue (its tag
	// count), as a SATA drive accepts at most 32 commands (NCQ), and with
	// one queue the guest kernel puts an I/O scheduler in front of the
	// disk. 0 leaves qemu's default: one queue per vCPU of 256 entries,
	// and no scheduler in the guest. A VM whose disks all leave both at 0
	// gets exactly the qemu arguments it had before these fields existed.
	Queues, QueueSize int
	// HostFaults is a qemu blkdebug rules file: errors the host's side of
	// this disk returns, for the harness's own tests of host I/O errors
	// (see Config.HostIOErrorWait). Guest-visible disk faults belong in the
	// guest (dm-flakey, dm-error), not here.
	HostFaults string
	// NVMe attaches the image as an NVMe controller (qemu's nvme device)
	// instead of virtio-blk, for a test that names its SSDs the way a
	// server does (README.md's /dev/nvme0n1...): the guest names the NVMe
	// disks /dev/nvme0n1, /dev/nvme1n1... in Config order, and the
	// virtio disks keep vda, vdb... in theirs, skipping the NVMe ones.
	NVMe bool
	// HostPageCache opens the image through the host's page cache (qemu
	// cache=writeback) instead of O_DIRECT (cache=none, the default). It is
	// for a disk that only records what a test does, such as dm-log-writes'
	// log, whose timing and alignment are not under test: a CI machine once
	// failed every retry of one write of such a log with EINVAL, which only
	// O_DIRECT's alignment rules return for a write inside the image. A
	// guest flush still reaches the host's disk (fdatasync), and a killed
	// qemu loses nothing it acknowledged, as the host keeps its page cache.
	HostPageCache bool
}

// Network joins the guest's eth0 to other VMs through TCP on the host's
// loopback. One VM sets Listen; each of the others sets Connect to the same
// address, and all of them share one Ethernet segment (the Listen side's
// link forwards every frame to every member, as a hub). The VMs may boot in
// any order, and a VM that is killed and booted again rejoins: the harness
// carries the link (see network.go), qemu only talks to it. Frames sent
// while the peer is away are lost, as on an unplugged cable.
type Network struct {
	Addr    string // guest CIDR address of eth0, e.g. 10.0.0.1/24
	Listen  string // host address to listen on, e.g. 127.0.0.1:40001
	Connect string // host address of the Listen side
	MAC     string // default: derived from Config.Name and Addr
}

// Config describes a VM. The zero value of every field but Name has a
// usable default.
type Config struct {
	Name      string // names files and the guest's hostname; default "vm"
	Disks     []Disk
	MemoryMiB int // default 2048
	CPUs      int // default 2
	Network   *Network
	// Dir holds the VM's state: one <Name>-<n> directory per boot with the
	// console log, the ack file and qemu's output. Default <cache>/run/<Name>.
	Dir         string
	Logger      *slog.Logger // default: discard
	ExtraAppend string       // appended to the kernel command line
	// Kernel chooses the guest kernel: Kernel612 boots bookworm's 6.12,
	// "" the kernel EnvKernel names, else DefaultKernel (Debian's 6.1). A
	// full version or a path to a vmlinuz-<version> works too (see
	// Kernel61). The initramfs, the modules the guest loads and
	// tidecache's own modules follow the choice; VM.KernelVersion reports it.
	Kernel string
	// NoFUAFlushModule boots without tidecache's dm-fuaflush target
	// (kernel/dm-fuaflush). By default Boot builds it against the guest
	// kernel's headers (see Module) and the agent loads it, so every VM
	// has the "fuaflush" target.
	NoFUAFlushModule bool
	// NoReadFirstModule boots without tidecache's dm-readfirst target
	// (kernel/dm-readfirst), which write-back volumes stack under their
	// write tier. By default it is built and loaded as dm-fuaflush is, so
	// every VM has the "readfirst" target.
	NoReadFirstModule bool
	// NoErrHoldModule boots without tidecache's dm-errhold target
	// (kernel/dm-errhold), which tidecache puts under the peer leg of a
	// volume that can fail over. By default it is built and loaded as
	// dm-fuaflush is, so every VM has the "errhold" target.
	NoErrHoldModule bool
	// Systemd boots the guest like a server, with Debian's systemd as PID
	// 1 and udev, on a root that survives reboots; nil boots the bare
	// agent.
	Systemd *SystemdBoot
	// HostIOErrorWait is how long an I/O error of the host's own disk
	// under a guest disk may last: qemu pauses the guest on such an error
	// and the harness resumes it to retry (hostio.go); an error that lasts
	// longer ends the VM, and calls on it fail with ErrHostIO. Default 60 s.
	HostIOErrorWait time.Duration
	// CommandTimeout bounds a guest command (Run, Exec) whose context has
	// no deadline: after it the command is killed in the guest and the
	// call fails with context.DeadlineExceeded, so a guest that stops
	// answering fails its test instead of holding the package until go
	// test's timeout. A command meant to run longer gets a context with
	// its own deadline. Default DefaultCommandTimeout.
	CommandTimeout time.Duration
}

// DefaultCommandTimeout is Config.CommandTimeout's default: longer than
// any single command of the scenarios (csi-sanity bounds itself with
// `timeout 900`, the guest's dm.test with -test.timeout 10m, an apt-get
// install with its DKMS build under emulation takes minutes; the bench
// gives its long fio runs their own deadlines).
const DefaultCommandTimeout = 20 * time.Minute

// SystemdBoot makes a VM boot like a server. The initramfs mounts the
// host's root under an overlay whose upper layer is an ext4 file system on
// RootImage, a disk of its own after Config.Disks, so what the guest
// installs and writes (a package, /etc/fstab) survives reboots and power
// cuts. It then hands over to the host's systemd, which runs udev, mounts
// /etc/fstab and starts the enabled units.
//
// The agent runs as a unit (wire.AgentUnit) that systemd starts early, so
// Boot returns while the boot goes on: wait for it in the guest with
// `systemctl is-system-running --wait`. Commands run without
// DM_DISABLE_UDEV: dmsetup and tidecache work with udev, as on a server.
// Shutdown asks systemd to power off; `systemctl reboot` ends qemu
// (-no-reboot), and Boot with the same Config starts the next boot on the
// same root.
type SystemdBoot struct {
	// RootImage is the root disk's host path. When missing it is made:
	// a sparse file of RootSize bytes (default 4 GiB) with ext4 on it.
	RootImage string
	RootSize  int64
	// Mask lists units masked for every boot (systemd.mask=): the host's
	// enabled services that the test does not want, such as
	// mariadb.service.
	Mask []string
}

// defaultRootSize is the size of a SystemdBoot root image made by Boot.
const defaultRootSize = 4 << 30

// rootDisk returns the root disk of a systemd boot, made when missing.
func (b *SystemdBoot) rootDisk(ctx context.Context) (Disk, error) {
	d := Disk{Path: b.RootImage, Size: b.RootSize}
	if d.Size == 0 {
		d.Size = defaultRootSize
	}
	if _, err := os.Stat("/lib/systemd/systemd"); err != nil {
		return d, fmt.Errorf("%w: /lib/systemd/systemd (package systemd); install it with `make deps`", ErrUnavailable)
	}
	if _, err := os.Stat(d.Path); err == nil {
		return d, nil
	}
	if err := prepareDisk(d); err != nil {
		return d, err
	}
	out, err := exec.CommandContext(ctx, "mkfs.ext4", "-q", "-F", "-L", "tc-root", d.Path).CombinedOutput()
	if err != nil {
		os.Remove(d.Path)
		return d, fmt.Errorf("make the root file system on %s: %w: %s", d.Path, err, bytes.TrimSpace(out))
	}
	return d, nil
}

func (cfg Config) withDefaults() (Config, error) {
	if cfg.Name == "" {
		cfg.Name = "vm"
	}
	if !validName(cfg.Name) {
		return cfg, fmt.Errorf("vm: Config.Name %q: want up to 48 of [A-Za-z0-9._-], not starting with . or -", cfg.Name)
	}
	if cfg.MemoryMiB == 0 {
		cfg.MemoryMiB = 2048
	}
	if cfg.CPUs == 0 {
		cfg.CPUs = 2
	}
	if cfg.HostIOErrorWait == 0 {
		cfg.HostIOErrorWait = defaultHostIOErrorWait
	}
	if cfg.CommandTimeout == 0 {
		cfg.CommandTimeout = DefaultCommandTimeout
	}
	if cfg.MemoryMiB < 256 || cfg.CPUs < 1 {
		return cfg, fmt.Errorf("vm %s: want MemoryMiB >= 256 and CPUs >= 1, got %d and %d", cfg.Name, cfg.MemoryMiB, cfg.CPUs)
	}
	if cfg.HostIOErrorWait < 0 {
		return cfg, fmt.Errorf("vm %s: negative HostIOErrorWait %v", cfg.Name, cfg.HostIOErrorWait)
	}
	if cfg.CommandTimeout < 0 {
		return cfg, fmt.Errorf("vm %s: negative CommandTimeout %v", cfg.Name, cfg.CommandTimeout)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Network != nil {
		n, err := cfg.Network.validate(cfg.Name)
		if err != nil {
			return cfg, fmt.Errorf("vm %s: %w", cfg.Name, err)
		}
		cfg.Network = &n
	}
	disks := make([]Disk, len(cfg.Disks))
	for i, d := range cfg.Disks {
		if d.Path == "" {
			return cfg, fmt.Errorf("vm %s: Disks[%d]: no Path", cfg.Name, i)
		}
		abs, err := filepath.Abs(d.Path)
		if err != nil {
			return cfg, err
		}
		d.Path = abs
		if d.HostFaults != "" {
			if d.HostFaults, err = filepath.Abs(d.HostFaults); err != nil {
				return cfg, err
			}
			// blkdebug:<rules>:<image> splits on colons.
			if strings.Contains(d.HostFaults, ":") || strings.Contains(d.Path, ":") {
				return cfg, fmt.Errorf("vm %s: Disks[%d]: a disk with HostFaults cannot have a colon in its paths", cfg.Name, i)
			}
		}
		if d.Size < 0 || d.IOPSLimit < 0 || d.BpsLimit < 0 {
			return cfg, fmt.Errorf("vm %s: Disks[%d]: negative size or limit", cfg.Name, i)
		}
		if err := d.validQueues(); err != nil {
			return cfg, fmt.Errorf("vm %s: Disks[%d]: %w", cfg.Name, i, err)
		}
		disks[i] = d
	}
	cfg.Disks = disks
	if b := cfg.Systemd; b != nil {
		if b.RootImage == "" {
			return cfg, fmt.Errorf("vm %s: Systemd: no RootImage", cfg.Name)
		}
		abs, err := filepath.Abs(b.RootImage)
		if err != nil {
			return cfg, err
		}
		boot := *b
		boot.RootImage = abs
		for _, u := range boot.Mask {
			if u == "" || strings.ContainsAny(u, " \t\n\"") {
				return cfg, fmt.Errorf("vm %s: Systemd.Mask: bad unit name %q", cfg.Name, u)
			}
		}
		cfg.Systemd = &boot
	}
	return cfg, nil
}

// maxQueueSize is qemu's bound on a virtqueue's size (VIRTQUEUE_MAX_SIZE).
const maxQueueSize = 1024

// validQueues checks Queues and QueueSize against what qemu accepts.
func (d Disk) validQueues() error {
	if d.Queues < 0 || d.Queues > maxQueueSize {
		return fmt.Errorf("Queues %d: want 0 (qemu's default) or 1 to %d", d.Queues, maxQueueSize)
	}
	if q := d.QueueSize; q != 0 && (q < 4 || q > maxQueueSize || q&(q-1) != 0) {
		return fmt.Errorf("QueueSize %d: want 0 (qemu's default) or a power of two from 4 to %d", q, maxQueueSize)
	}
	return nil
}

// shapedQueue reports whether the disk sets its own queue shape.
func (d Disk) shapedQueue() bool { return d.Queues != 0 || d.QueueSize != 0 }

// explicitDevice reports whether the disk needs its own -device.
func (d Disk) explicitDevice() bool { return d.shapedQueue() || d.NVMe }

// prepareDisk creates a missing image as a sparse file of d.Size bytes.
func prepareDisk(d Disk) error {
	if _, err := os.Stat(d.Path); err == nil {
		return nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if d.Size <= 0 {
		return fmt.Errorf("disk %s does not exist and has no Size", d.Path)
	}
	f, err := os.OpenFile(d.Path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if err := f.Truncate(d.Size); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Result is the outcome of a command that ran in the guest.
type Result struct {
	ExitCode       int // 128+N for a command killed by signal N
	Stdout, Stderr string
}

// Cmd is a command for VM.Exec: Argv, or Shell for sh -c.
type Cmd struct {
	Argv  []string
	Shell string
	Env   []string // KEY=VALUE added to the agent's environment
	Dir   string   // working directory in the guest, default /
}

// VM is a running qemu guest. Its methods are safe for concurrent use.
type VM struct {
	cfg     Config
	kver    string // the guest kernel's version
	log     *slog.Logger
	bootDir string
	console string // console log path
	acks    string // ack file path
	sockDir string // holds the control socket; removed when qemu exits
	link    *link  // network link, nil without Config.Network
	booted  time.Duration

	cmd     *exec.Cmd
	qemuOut *cappedBuffer
	done    chan struct{} // closed when qemu has exited
	exitErr error         // qemu's exit, valid after done

	conn    net.Conn
	wmu     sync.Mutex // serializes writes on conn
	nextID  atomic.Uint64
	mu      sync.Mutex
	pending map[uint64]chan wire.Response
	broken  chan struct{} // closed when the control channel is gone
	connErr error         // why, valid after broken

	host      *hostWatch // the host's disk errors, see hostio.go
	hostFault error      // set before the harness stops a VM whose host disk failed

	watched chan struct{} // closed when the console watcher (console.go) has returned
}

// Boot starts a VM and returns once its agent answers. ctx bounds the life
// of the VM, like exec.CommandContext: when it is done, qemu is killed. The
// boot itself is also bounded by BootTimeout. On failure qemu is gone and
// the error carries the tail of the console log.
//
// Booting again with the same Config (same disk images) after Kill is a
// power cycle: the images hold what qemu had completed.
func Boot(ctx context.Context, cfg Config) (*VM, error) {
	start := time.Now()
	if err := KernelAvailable(cfg.Kernel); err != nil {
		return nil, err
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	bootCtx, cancel := context.WithTimeout(ctx, BootTimeout)
	defer cancel()

	cache, err := CacheDir()
	if err != nil {
		return nil, err
	}
	gk, err := resolveKernel(cfg.Kernel)
	if err != nil {
		return nil, fmt.Errorf("vm %s: %w", cfg.Name, err)
	}
	kver := gk.version
	agent, err := buildAgent(bootCtx, cache)
	if err != nil {
		return nil, err
	}
	initrd, err := buildInitramfs(bootCtx, cache, kver)
	if err != nil {
		return nil, err
	}
	kernelPath, err := kernelForBoot(bootCtx, cache, gk)
	if err != nil {
		cfg.Logger.Warn("booting the compressed kernel (slower)", "vm", cfg.Name, "reason", err)
	} else if filepath.Dir(kernelPath) == cache {
		useCached(kernelPath, "vmlinux-")
	}
	var modules []string
	for _, m := range []struct {
		name string
		skip bool
	}{
		{FUAFlush, cfg.NoFUAFlushModule},
		{ReadFirst, cfg.NoReadFirstModule},
		{ErrHold, cfg.NoErrHoldModule},
	} {
		if m.skip {
			continue
		}
		ko, err := Module(bootCtx, m.name, kver)
		if err != nil {
			return nil, err
		}
		useCached(ko, m.name+"-")
		modules = append(modules, ko)
	}
	useCached(agent, "agent-")
	useCached(initrd, "initramfs-")
	appendLine, err := kernelAppend(cfg, agent, modules...)
	if err != nil {
		return nil, fmt.Errorf("vm %s: %w", cfg.Name, err)
	}
	disks := cfg.Disks
	for _, d := range disks {
		if err := prepareDisk(d); err != nil {
			return nil, fmt.Errorf("vm %s: %w", cfg.Name, err)
		}
	}
	if cfg.Systemd != nil {
		root, err := cfg.Systemd.rootDisk(bootCtx)
		if err != nil {
			return nil, fmt.Errorf("vm %s: %w", cfg.Name, err)
		}
		disks = append(disks[:len(disks):len(disks)], root)
	}
	dir := cfg.Dir
	if dir == "" {
		dir = filepath.Join(cache, "run", cfg.Name)
	}
	bootDir, err := newBootDir(dir, cfg.Name)
	if err != nil {
		return nil, fmt.Errorf("vm %s: %w", cfg.Name, err)
	}
	sockDir, err := socketDir()
	if err != nil {
		return nil, fmt.Errorf("vm %s: %w", cfg.Name, err)
	}
	v := &VM{
		cfg:     cfg,
		kver:    kver,
		log:     cfg.Logger.With("vm", cfg.Name),
		bootDir: bootDir,
		console: filepath.Join(bootDir, "console.log"),
		acks:    filepath.Join(bootDir, "acks.log"),
		sockDir: sockDir,
		pending: map[uint64]chan wire.Response{},
		broken:  make(chan struct{}),
	}
	l := launch{
		name:       cfg.Name,
		kernel:     kernelPath,
		initrd:     initrd,
		appendLine: appendLine,
		cpus:       cfg.CPUs,
		memoryMiB:  cfg.MemoryMiB,
		consoleLog: v.console,
		ackLog:     v.acks,
		ctlSocket:  filepath.Join(sockDir, "ctl.sock"),
		qmpSocket:  filepath.Join(sockDir, "qmp.sock"),
		disks:      disks,
	}
	if cfg.Network != nil {
		link, addr, err := startLink(cfg.Network, v.log)
		if err != nil {
			os.RemoveAll(sockDir)
			return nil, fmt.Errorf("vm %s: %w", cfg.Name, err)
		}
		v.link, l.netConnect, l.mac = link, addr, cfg.Network.MAC
	}
	prepared := time.Now()
	if err := v.start(bootCtx, l); err != nil {
		return nil, v.bootFailure(err)
	}
	v.watchConsole(ctx, consolePoll)
	go v.readLoop()
	if err := v.ping(bootCtx); err != nil {
		return nil, v.bootFailure(err)
	}
	v.booted = time.Since(start)
	v.log.Info("vm booted", "kernel", kver, "boot_seconds", v.booted.Seconds(),
		"prepare_seconds", prepared.Sub(start).Seconds(), "dir", bootDir)
	go func() {
		select {
		case <-ctx.Done():
			v.log.Info("vm context done: killing qemu")
			v.Kill()
		case <-v.done:
		}
	}()
	return v, nil
}

// newBootDir makes <dir>/<name>-<n> with n one more than the highest so far,
// and removes all but the newest keepBoots of them.
func newBootDir(dir, name string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	var seqs []int
	for _, e := range entries {
		if rest, ok := strings.CutPrefix(e.Name(), name+"-"); ok && e.IsDir() {
			if n, err := strconv.Atoi(rest); err == nil {
				seqs = append(seqs, n)
			}
		}
	}
	sort.Ints(seqs)
	next := 1
	if len(seqs) > 0 {
		next = seqs[len(seqs)-1] + 1
	}
	for i := 0; i+keepBoots-1 < len(seqs); i++ {
		os.RemoveAll(filepath.Join(dir, fmt.Sprintf("%s-%d", name, seqs[i])))
	}
	for ; ; next++ {
		p := filepath.Join(dir, fmt.Sprintf("%s-%d", name, next))
		err := os.Mkdir(p, 0o755)
		if err == nil {
			return p, nil
		}
		if !errors.Is(err, os.ErrExist) {
			return "", err
		}
	}
}

// socketDir makes a private directory for the control socket. Sockets are
// host-only, so the system temporary directory is fine, and its short path
// keeps within the 108-byte limit of unix socket paths.
func socketDir() (string, error) {
	for _, base := range []string{os.TempDir(), "/tmp"} {
		if len(base) > 60 {
			continue
		}
		// Left behind by processes that were killed.
		if old, _ := filepath.Glob(filepath.Join(base, "tcvm-*")); len(old) > 0 {
			for _, d := range old {
				if st, err := os.Stat(d); err == nil && time.Since(st.ModTime()) > 24*time.Hour {
					os.RemoveAll(d)
				}
			}
		}
		d, err := os.MkdirTemp(base, "tcvm-")
		if err == nil {
			return d, nil
		}
	}
	return "", errors.New("cannot make a directory for the control socket (TMPDIR too long or not writable)")
}

// start runs qemu and connects to its control socket.
func (v *VM) start(ctx context.Context, l launch) error {
	os.Remove(l.ctlSocket)
	v.qemuOut = &cappedBuffer{max: 64 << 10}
	v.done = make(chan struct{})
	args := l.qemuArgs()
	cmd := exec.Command(qemuBinary, args...)
	cmd.Stdout, cmd.Stderr = v.qemuOut, v.qemuOut
	// qemu dies with the process that started it, even on a crash.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	v.log.Debug("starting qemu", "args", strings.Join(args, " "))
	if err := cmd.Start(); err != nil {
		close(v.done)
		return fmt.Errorf("start qemu: %w", err)
	}
	v.cmd = cmd
	done := v.done
	go func() {
		v.exitErr = cmd.Wait()
		os.WriteFile(filepath.Join(v.bootDir, "qemu.out"), []byte(v.qemuOut.String()), 0o644)
		close(done)
	}()
	for {
		conn, err := net.Dial("unix", l.ctlSocket)
		if err == nil {
			v.conn = conn
			break
		}
		select {
		case <-done:
			return fmt.Errorf("qemu exited at start: %v", v.exitErr)
		case <-ctx.Done():
			v.Kill()
			return fmt.Errorf("connect to the control socket: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	v.host = &hostWatch{log: v.log, disks: l.disks, wait: v.cfg.HostIOErrorWait, stop: func(err error) {
		v.mu.Lock()
		v.hostFault = err
		v.mu.Unlock()
		cmd.Process.Kill()
	}}
	if err := v.host.connectQMP(ctx, l.qmpSocket, done); err != nil {
		v.Kill()
		return err
	}
	return nil
}

// ping waits for the agent's first answer, or qemu's exit.
func (v *VM) ping(ctx context.Context) error {
	resp, err := v.call(ctx, wire.Request{Op: wire.OpPing})
	if err != nil {
		return fmt.Errorf("waiting for the guest agent: %w", err)
	}
	if len(resp.Stderr) > 0 {
		v.log.Warn("guest agent start-up", "warnings", strings.TrimSpace(string(resp.Stderr)))
	}
	if resp.Error != "" {
		return fmt.Errorf("guest agent start-up failed: %s", resp.Error)
	}
	return nil
}

// bootFailure kills qemu and returns err with the console and qemu output.
func (v *VM) bootFailure(err error) error {
	// A lost control channel usually means qemu is exiting: say so.
	select {
	case <-v.done:
	case <-time.After(2 * time.Second):
	}
	select {
	case <-v.done:
		state := "exit status 0 (guest powered off or rebooted)"
		if v.exitErr != nil {
			state = v.exitErr.Error()
		}
		err = fmt.Errorf("qemu exited before the guest agent answered: %s (%w)", state, err)
	default:
	}
	v.Kill()
	switch console := v.ConsoleLog(); {
	case strings.TrimSpace(console) == "":
		err = fmt.Errorf("%w: %w", ErrSilentBoot, err)
	case errors.Is(err, ErrGuestStuck) && diedBeforeInit(console):
		err = fmt.Errorf("%w: %w", ErrDiedBeforeInit, err)
	}
	msg := fmt.Sprintf("vm %s: boot: %v (state in %s)", v.cfg.Name, err, v.bootDir)
	if out := strings.TrimSpace(v.qemuOut.String()); out != "" {
		msg += "\n--- qemu output ---\n" + out
	}
	msg += "\n--- console tail ---\n" + tail(v.ConsoleLog(), 40)
	return &bootError{msg: msg, err: err}
}

// ErrSilentBoot marks a boot whose guest printed nothing at all on its
// console before the boot timed out: qemu or the host never got the
// kernel going, so nothing of the guest, and nothing on its disks, ran.
var ErrSilentBoot = errors.New("the guest printed nothing on its console")

// ErrDiedBeforeInit marks a boot whose guest kernel died (a fatal sign on
// its console) before /init printed its first line: only the kernel ran,
// which reads the disks but writes nothing to them. Seen under TCG with
// Debian's 6.12 kernel: an int3 left in code the kernel had patched (a
// static key) trapped during its own start-up (docs/testing.md).
var ErrDiedBeforeInit = errors.New("the guest kernel died before it ran /init")

// diedBeforeInit reports whether console, the log of a guest that died,
// lacks /init's first line.
func diedBeforeInit(console string) bool { return !strings.Contains(console, initStarted) }

// bootError is a boot failure: the full report, and the error it wraps.
type bootError struct {
	msg string
	err error
}

func (e *bootError) Error() string { return e.msg }
func (e *bootError) Unwrap() error { return e.err }

func tail(s string, lines int) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return ""
	}
	i := len(s)
	for n := 0; n < lines && i > 0; n++ {
		i = strings.LastIndexByte(s[:i], '\n')
		if i < 0 {
			return s
		}
	}
	return s[i+1:]
}

func (v *VM) readLoop() {
	dec := wire.NewDecoder(v.conn)
	for {
		var resp wire.Response
		err := dec.Decode(&resp)
		if errors.Is(err, wire.ErrBadMessage) {
			v.log.Warn("bad message from the guest agent", "err", err)
			continue
		}
		if err != nil {
			// qemu's exit closed the channel. A guest that panicked
			// ended qemu at once (panic=-1, -no-reboot): let the console
			// watcher's last read say so first.
			if v.watched != nil {
				select {
				case <-v.watched:
				case <-time.After(5 * time.Second):
				}
			}
			v.closeChannel(err)
			return
		}
		v.mu.Lock()
		ch := v.pending[resp.ID]
		delete(v.pending, resp.ID)
		v.mu.Unlock()
		if ch != nil {
			ch <- resp
		}
	}
}

// watchConsole follows the console log for signs that the guest kernel is
// stuck (see console.go) until ctx ends or qemu exits.
func (v *VM) watchConsole(ctx context.Context, poll time.Duration) {
	w := &consoleWatch{path: v.console, log: v.log, poll: poll, traceWait: min(poll, consoleTraceWait), stop: v.stopStuck}
	v.watched = make(chan struct{})
	go func() {
		defer close(v.watched)
		w.run(ctx, v.done)
	}()
}

// stopStuck ends a VM whose guest kernel is stuck: every pending and later
// call fails at once with err, and qemu is killed.
func (v *VM) stopStuck(err error) {
	v.closeChannel(err)
	if v.cmd != nil {
		v.cmd.Process.Kill()
	}
}

func (v *VM) closeChannel(err error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.connErr == nil {
		if v.hostFault != nil {
			err = v.hostFault
		} else if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
			err = errors.New("control channel closed (qemu exited)")
		}
		v.connErr = err
		close(v.broken)
	}
}

// call sends req and waits for its response. When ctx ends first, a running
// command is canceled in the guest.
func (v *VM) call(ctx context.Context, req wire.Request) (wire.Response, error) {
	req.ID = v.nextID.Add(1)
	if dl, ok := ctx.Deadline(); ok && req.Op == "" {
		req.TimeoutMS = max(time.Until(dl).Milliseconds(), 1)
	}
	ch := make(chan wire.Response, 1)
	v.mu.Lock()
	if v.connErr != nil {
		err := v.connErr
		v.mu.Unlock()
		return wire.Response{}, err
	}
	v.pending[req.ID] = ch
	v.mu.Unlock()
	defer func() {
		v.mu.Lock()
		delete(v.pending, req.ID)
		v.mu.Unlock()
	}()
	if err := v.send(req); err != nil {
		return wire.Response{}, err
	}
	select {
	case resp := <-ch:
		return resp, nil
	case <-v.broken:
		return wire.Response{}, v.connErr
	case <-ctx.Done():
		if req.Op == "" {
			v.send(wire.Request{ID: v.nextID.Add(1), Op: wire.OpCancel, Target: req.ID})
		}
		return wire.Response{}, context.Cause(ctx)
	}
}

func (v *VM) send(req wire.Request) error {
	v.wmu.Lock()
	defer v.wmu.Unlock()
	if err := wire.Encode(v.conn, req); err != nil {
		return fmt.Errorf("send to the guest agent: %w", err)
	}
	return nil
}

// Run runs `sh -c shell` in the guest. The error is for transport problems
// and for ctx ending, or Config.CommandTimeout passing when ctx has no
// deadline (the command is then killed in the guest), and for a stuck
// guest kernel (ErrGuestStuck); a command that ran and failed has a
// non-zero Result.ExitCode and a nil error.
func (v *VM) Run(ctx context.Context, shell string) (Result, error) {
	return v.Exec(ctx, Cmd{Shell: shell})
}

// Exec runs c in the guest; see Run for the meaning of the error.
func (v *VM) Exec(ctx context.Context, c Cmd) (Result, error) {
	what := c.Shell
	if what == "" {
		what = strings.Join(c.Argv, " ")
	}
	if _, ok := ctx.Deadline(); !ok && v.cfg.CommandTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, v.cfg.CommandTimeout,
			fmt.Errorf("%w: no answer within Config.CommandTimeout (%v), the deadline of a guest command whose context has none",
				context.DeadlineExceeded, v.cfg.CommandTimeout))
		defer cancel()
	}
	resp, err := v.call(ctx, wire.Request{Argv: c.Argv, Shell: c.Shell, Env: c.Env, Dir: c.Dir})
	if err != nil {
		return Result{ExitCode: -1}, fmt.Errorf("vm %s: %q: %w", v.cfg.Name, what, err)
	}
	res := Result{ExitCode: resp.ExitCode, Stdout: string(resp.Stdout), Stderr: string(resp.Stderr)}
	if resp.Error != "" {
		if ctx.Err() != nil {
			return res, fmt.Errorf("vm %s: %q: %s: %w", v.cfg.Name, what, resp.Error, context.Cause(ctx))
		}
		return res, fmt.Errorf("vm %s: %q: %s", v.cfg.Name, what, resp.Error)
	}
	return res, nil
}

// Acks returns what the guest has written to its ack channel (AckDevice,
// the second serial port, in raw mode) during this boot; each boot has its
// own file, which stays readable after Kill and after the next Boot.
//
// A power-cut test has the guest write a line after each durable step
// (`... conv=fsync && echo op-17 > /dev/ttyS1`) and, after Kill, checks
// every acknowledged operation. Every line in the file was written by the
// guest; and a line is in the file once the guest's close of the device
// has returned (the serial driver drains its buffer on close), so an echo
// that finished is never lost. A process that keeps the device open
// gets no such guarantee before tcdrain or close.
func (v *VM) Acks() ([]byte, error) {
	b, err := os.ReadFile(v.acks)
	if err != nil {
		return nil, fmt.Errorf("vm %s: acks: %w", v.cfg.Name, err)
	}
	return b, nil
}

// AckDevice returns the guest path of the ack channel.
func (v *VM) AckDevice() string { return AckDevice }

// Kill cuts the power: SIGKILL to qemu, then wait for it to exit. Disk
// images keep every write qemu had completed. Kill is idempotent.
func (v *VM) Kill() error {
	if v.cmd != nil && v.cmd.Process != nil {
		select {
		case <-v.done:
		default:
			if err := v.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
				return fmt.Errorf("vm %s: kill qemu: %w", v.cfg.Name, err)
			}
		}
	}
	if v.done != nil {
		<-v.done
	}
	v.release()
	return nil
}

// release drops the control channel and the socket directory after qemu
// has exited.
func (v *VM) release() {
	if v.conn != nil {
		v.conn.Close()
	}
	v.closeChannel(errors.New("control channel closed (qemu exited)"))
	os.RemoveAll(v.sockDir)
	if v.link != nil {
		v.link.close()
	}
}

// Shutdown powers the guest off cleanly (sync, then power off) and waits
// for qemu to exit; when ctx ends first, or after ShutdownTimeout, qemu is
// killed and the error says so.
func (v *VM) Shutdown(ctx context.Context) error {
	select {
	case <-v.done:
		v.release()
		return nil
	default:
	}
	ctx, cancel := context.WithTimeout(ctx, ShutdownTimeout)
	defer cancel()
	// The agent may power off before its answer gets out: do not wait for it.
	v.send(wire.Request{ID: v.nextID.Add(1), Op: wire.OpPoweroff})
	select {
	case <-v.done:
		v.release()
		return nil
	case <-ctx.Done():
		v.Kill()
		return fmt.Errorf("vm %s: shutdown: killed qemu: %w", v.cfg.Name, ctx.Err())
	}
}

// HostIOErrors returns the I/O errors of the host's disk under the guest's
// disks so far (see Config.HostIOErrorWait); the guest saw none of them
// unless the VM was stopped with ErrHostIO.
func (v *VM) HostIOErrors() []HostIOError {
	if v.host == nil {
		return nil
	}
	return v.host.errors()
}

// Done is closed when qemu has exited (power-off, panic, Kill).
func (v *VM) Done() <-chan struct{} { return v.done }

// ConsoleLog returns the guest console (ttyS0) so far, without carriage
// returns. The file stays in the boot directory after the VM is gone.
func (v *VM) ConsoleLog() string {
	b, err := os.ReadFile(v.console)
	if err != nil {
		return fmt.Sprintf("(no console log: %v)", err)
	}
	return string(bytes.ReplaceAll(b, []byte("\r"), nil))
}

// BootDir returns the directory holding this boot's console log, ack file
// and qemu output.
func (v *VM) BootDir() string { return v.bootDir }

// BootDuration is how long Boot took, from the call to the agent's answer.
func (v *VM) BootDuration() time.Duration { return v.booted }

// Name returns Config.Name.
func (v *VM) Name() string { return v.cfg.Name }

// KernelVersion returns the version of the kernel the VM booted (its
// `uname -r`), as Config.Kernel chose it.
func (v *VM) KernelVersion() string { return v.kver }

// Config returns the VM's configuration with defaults filled in; pass it
// to Boot again to power-cycle the VM after Kill.
func (v *VM) Config() Config { return v.cfg }

// cappedBuffer keeps the first max bytes written to it.
type cappedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	max int
}

func (c *cappedBuffer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := c.max - c.buf.Len(); room > 0 {
		c.buf.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

func (c *cappedBuffer) String() string {
	if c == nil {
		return ""
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}
