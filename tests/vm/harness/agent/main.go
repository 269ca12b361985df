// SPDX-License-Identifier: Apache-2.0

// Command agent is the guest half of the tidecache VM harness (tests/vm/harness).
//
// The initramfs /init mounts the host's root read-only over virtio-9p with a
// tmpfs overlay, chroots into it and execs this binary (built on the host by
// the harness) as PID 1. As PID 1 it only starts a second copy of itself
// ("agent serve") and reaps every orphaned process; when the server exits the
// guest powers off, so the host sees qemu exit instead of a hung VM.
//
// The server loads the runtime modules listed in kernel/modules.txt with the
// host's modprobe (the guest kernel runs that modprobe for the on-demand
// ones at first use: /proc/sys/kernel/modprobe is /sbin/modprobe) and the out-of-tree modules of tc.insmod (dm-fuaflush)
// with insmod, puts the ack channel (/dev/ttyS1) in raw mode, configures
// eth0 from the kernel command line (tc.addr=CIDR), then answers requests of
// the wire protocol (tests/vm/harness/internal/wire) on the virtio-serial port named
// tc.ctl. Requests run concurrently, each command in its own process group;
// commands inherit DM_DISABLE_UDEV=1, so dmsetup makes /dev/mapper nodes
// itself (the guest has no udev), and TMPDIR=/run/scratch (wire.ScratchDir).
//
// In a systemd boot (harness.SystemdBoot, wire.ParamRoot on the command
// line) systemd is PID 1 and runs "agent serve" as a unit; commands then
// run with udev (no DM_DISABLE_UDEV), and a power-off request asks systemd
// for a clean shutdown.
package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/tidecache/tidecache/kernel"
	"github.com/tidecache/tidecache/tests/vm/harness/internal/wire"
)

func main() {
	log.SetFlags(0)
	log.SetPrefix("tc-agent: ")
	setEnv(underSystemd())
	switch {
	case len(os.Args) > 1 && os.Args[1] == "serve":
		os.Exit(serve())
	case os.Getpid() == 1:
		runInit()
	default:
		// Started by hand in a guest: serve without the PID 1 wrapper.
		os.Exit(serve())
	}
}

// underSystemd reports a systemd boot (harness.SystemdBoot): the kernel
// command line names a root disk, and systemd, not the agent, is PID 1.
func underSystemd() bool {
	cmdline, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		return false
	}
	_, ok := wire.ParseCmdline(string(cmdline))[wire.ParamRoot]
	return ok
}

// setEnv gives the agent, and so every command it runs, a predictable
// environment. Without udev (the bare agent boot) dmsetup must make the
// /dev/mapper nodes itself; under systemd udev makes them.
func setEnv(systemd bool) {
	os.Clearenv()
	env := map[string]string{
		"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME": "/root",
		"TERM": "dumb",
		// The initramfs /init mounts it; /tmp is the host's, seen through
		// the overlay.
		"TMPDIR": wire.ScratchDir,
	}
	if !systemd {
		env["DM_DISABLE_UDEV"] = "1"
	}
	for k, v := range env {
		os.Setenv(k, v)
	}
}

// runInit is PID 1: start the server, reap every child, power off when the
// server is gone.
func runInit() {
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	proc, err := os.StartProcess(exe, []string{exe, "serve"}, &os.ProcAttr{
		Dir:   "/",
		Env:   os.Environ(),
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
	})
	if err != nil {
		log.Printf("start server: %v", err)
		powerOff()
	}
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, 0, nil)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case err != nil:
			log.Printf("wait: %v", err)
			powerOff()
		case pid == proc.Pid:
			log.Printf("server exited (%s); powering off", describe(ws))
			powerOff()
		}
	}
}

func describe(ws syscall.WaitStatus) string {
	if ws.Signaled() {
		return "signal " + ws.Signal().String()
	}
	return "exit status " + strconv.Itoa(ws.ExitStatus())
}

func powerOff() {
	syscall.Sync()
	if err := syscall.Reboot(syscall.LINUX_REBOOT_CMD_POWER_OFF); err != nil {
		log.Printf("power off: %v", err)
	}
	os.Exit(1)
}

// serve prepares the guest and answers requests until the control port fails.
func serve() int {
	start := time.Now()
	cmdline, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		log.Printf("read /proc/cmdline: %v", err)
	}
	params := wire.ParseCmdline(string(cmdline))

	a := &agent{running: map[uint64]context.CancelCauseFunc{}}
	if name := params[wire.ParamName]; name != "" {
		if err := syscall.Sethostname([]byte(name)); err != nil {
			a.warn("sethostname %s: %v", name, err)
		}
	}
	a.loadModules()
	a.insmod(params[wire.ParamInsmod])
	if err := setRaw(wire.AckDevice); err != nil {
		a.fail("ack channel %s: %v", wire.AckDevice, err)
	}
	if err := setupNetwork(params[wire.ParamAddr]); err != nil {
		a.fail("network: %v", err)
	}
	port, err := openPort(wire.PortName, 20*time.Second)
	if err != nil {
		log.Printf("control port: %v", err)
		return 1
	}
	a.port = port
	log.Printf("ready in %v", time.Since(start).Round(time.Millisecond))
	for _, w := range a.warnings {
		log.Print("warning: ", w)
	}
	for _, f := range a.failures {
		log.Print("error: ", f)
	}
	return a.loop()
}

type agent struct {
	port     *os.File
	wmu      sync.Mutex // serializes responses on port
	mu       sync.Mutex
	running  map[uint64]context.CancelCauseFunc
	warnings []string // start-up problems the tests can live with
	failures []string // start-up problems that fail Boot (reported by ping)
}

func (a *agent) warn(format string, args ...any) {
	a.warnings = append(a.warnings, fmt.Sprintf(format, args...))
}

func (a *agent) fail(format string, args ...any) {
	a.failures = append(a.failures, fmt.Sprintf(format, args...))
}

// loadModules loads the runtime section of kernel/modules.txt with one
// modprobe (one process start and one pass over the module indexes over
// 9p: faster than a modprobe per module, in sequence or in parallel), then
// retries each module that is not loaded to report why. A missing optional
// module is a warning, any other failure fails Boot.
func (a *agent) loadModules() {
	start := time.Now()
	var mods []kernel.Module
	args := []string{"-a"}
	for _, m := range kernel.ModuleList() {
		if m.Section == kernel.Runtime {
			mods = append(mods, m)
			args = append(args, m.Name)
		}
	}
	exec.Command("modprobe", args...).Run()
	for _, m := range mods {
		if isLoaded(m.Name) {
			continue
		}
		out, err := exec.Command("modprobe", m.Name).CombinedOutput()
		if err == nil {
			continue
		}
		msg := strings.TrimSpace(string(out))
		if msg == "" {
			msg = err.Error()
		}
		if m.Optional {
			a.warn("optional module %s not loaded: %s", m.Name, msg)
		} else {
			a.fail("modprobe %s: %s", m.Name, msg)
		}
	}
	log.Printf("runtime modules loaded in %v", time.Since(start).Round(time.Millisecond))
}

// insmod loads the out-of-tree modules of the tc.insmod parameter (paths
// separated by commas) with the host's insmod, after loadModules: they
// depend on runtime modules such as dm-mod. A failure fails Boot.
func (a *agent) insmod(list string) {
	if list == "" {
		return
	}
	start := time.Now()
	for _, path := range strings.Split(list, ",") {
		out, err := exec.Command("insmod", path).CombinedOutput()
		if err != nil {
			msg := strings.TrimSpace(string(out))
			if msg == "" {
				msg = err.Error()
			}
			a.fail("insmod %s: %s", path, msg)
		}
	}
	log.Printf("out-of-tree modules loaded in %v", time.Since(start).Round(time.Millisecond))
}

// isLoaded reports whether a module is loaded or built in.
func isLoaded(name string) bool {
	_, err := os.Stat("/sys/module/" + kernel.CanonicalModuleName(name))
	return err == nil
}

// setRaw puts a serial port in raw mode so that bytes reach the host file
// unchanged (no \n → \r\n, no echo).
func setRaw(path string) error {
	fd, err := syscall.Open(path, syscall.O_RDWR|syscall.O_NOCTTY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	var t syscall.Termios
	if err := ioctl(fd, syscall.TCGETS, unsafe.Pointer(&t)); err != nil {
		return fmt.Errorf("TCGETS: %w", err)
	}
	t.Iflag &^= syscall.IGNBRK | syscall.BRKINT | syscall.PARMRK | syscall.ISTRIP |
		syscall.INLCR | syscall.IGNCR | syscall.ICRNL | syscall.IXON
	t.Oflag &^= syscall.OPOST
	t.Lflag &^= syscall.ECHO | syscall.ECHONL | syscall.ICANON | syscall.ISIG | syscall.IEXTEN
	t.Cflag &^= syscall.CSIZE | syscall.PARENB
	t.Cflag |= syscall.CS8 | syscall.CLOCAL
	if err := ioctl(fd, syscall.TCSETS, unsafe.Pointer(&t)); err != nil {
		return fmt.Errorf("TCSETS: %w", err)
	}
	return nil
}

func ioctl(fd int, req uintptr, arg unsafe.Pointer) error {
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), req, uintptr(arg)); errno != 0 {
		return errno
	}
	return nil
}

// setupNetwork brings lo up and, when addr is set, gives the first ethernet
// interface that address.
func setupNetwork(addr string) error {
	if out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		return fmt.Errorf("ip link set lo up: %v: %s", err, out)
	}
	if addr == "" {
		return nil
	}
	var dev string
	for deadline := time.Now().Add(10 * time.Second); dev == ""; {
		links, _ := filepath.Glob("/sys/class/net/*")
		for _, l := range links {
			if name := filepath.Base(l); name != "lo" {
				dev = name
				break
			}
		}
		if dev == "" {
			if time.Now().After(deadline) {
				return errors.New("no network interface appeared")
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	for _, args := range [][]string{
		{"addr", "add", addr, "dev", dev},
		{"link", "set", dev, "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

// openPort finds the virtio-serial port called name and opens it (blocking
// I/O, so reads and writes hold their own threads). Without udev the device
// node may be missing: it is made from the sysfs dev attribute.
func openPort(name string, timeout time.Duration) (*os.File, error) {
	deadline := time.Now().Add(timeout)
	for {
		path, err := findPort(name)
		if err == nil {
			fd, err := syscall.Open(path, syscall.O_RDWR|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
			if err != nil {
				return nil, fmt.Errorf("open %s: %w", path, err)
			}
			return os.NewFile(uintptr(fd), path), nil
		}
		if time.Now().After(deadline) {
			return nil, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func findPort(name string) (string, error) {
	names, _ := filepath.Glob("/sys/class/virtio-ports/*/name")
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil || strings.TrimSpace(string(b)) != name {
			continue
		}
		sysdir := filepath.Dir(n)
		path := "/dev/" + filepath.Base(sysdir)
		if _, err := os.Stat(path); err == nil {
			return path, nil
		}
		dev, err := os.ReadFile(filepath.Join(sysdir, "dev"))
		if err != nil {
			return "", err
		}
		var major, minor uint64
		if _, err := fmt.Sscanf(strings.TrimSpace(string(dev)), "%d:%d", &major, &minor); err != nil {
			return "", fmt.Errorf("%s/dev: %q: %w", sysdir, dev, err)
		}
		if err := syscall.Mknod(path, syscall.S_IFCHR|0o600, int(mkdev(major, minor))); err != nil && !errors.Is(err, syscall.EEXIST) {
			return "", fmt.Errorf("mknod %s: %w", path, err)
		}
		return path, nil
	}
	return "", fmt.Errorf("no virtio-serial port named %s (have %v)", name, names)
}

// mkdev encodes a device number as glibc's makedev does.
func mkdev(major, minor uint64) uint64 {
	return (major&0xfffff000)<<32 | (major&0xfff)<<8 | (minor&0xffffff00)<<12 | minor&0xff
}

// retryReader turns the end-of-file a virtio port reports while no host
// is connected into a short wait.
type retryReader struct{ f *os.File }

func (r retryReader) Read(p []byte) (int, error) {
	for {
		n, err := r.f.Read(p)
		if n > 0 {
			return n, nil
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (a *agent) loop() int {
	dec := wire.NewDecoder(retryReader{a.port})
	for {
		var req wire.Request
		if err := dec.Decode(&req); err != nil {
			if errors.Is(err, wire.ErrBadMessage) {
				log.Print(err)
				continue
			}
			log.Printf("control port: %v", err)
			return 1
		}
		go a.handle(req)
	}
}

func (a *agent) reply(resp wire.Response) {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	if err := wire.Encode(a.port, resp); err != nil {
		log.Printf("reply %d: %v", resp.ID, err)
	}
}

func (a *agent) handle(req wire.Request) {
	if err := req.Validate(); err != nil {
		a.reply(wire.Response{ID: req.ID, ExitCode: -1, Error: err.Error()})
		return
	}
	switch req.Op {
	case wire.OpPing:
		resp := wire.Response{ID: req.ID, Error: strings.Join(a.failures, "; ")}
		if len(a.warnings) > 0 {
			resp.Stderr = []byte(strings.Join(a.warnings, "\n") + "\n")
		}
		a.reply(resp)
	case wire.OpCancel:
		a.mu.Lock()
		cancel := a.running[req.Target]
		a.mu.Unlock()
		if cancel != nil {
			cancel(errors.New("canceled by the host"))
		}
		a.reply(wire.Response{ID: req.ID})
	case wire.OpPoweroff:
		a.reply(wire.Response{ID: req.ID})
		log.Print("power off requested")
		if underSystemd() {
			// A clean shutdown: units stop, file systems unmount.
			if err := exec.Command("systemctl", "--no-block", "poweroff").Run(); err == nil {
				return
			}
		}
		powerOff()
	default:
		a.reply(a.run(req))
	}
}

func (a *agent) run(req wire.Request) wire.Response {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	if req.TimeoutMS > 0 {
		d := time.Duration(req.TimeoutMS) * time.Millisecond
		var stop context.CancelFunc
		ctx, stop = context.WithTimeoutCause(ctx, d, fmt.Errorf("timed out after %v", d))
		defer stop()
	}
	a.mu.Lock()
	a.running[req.ID] = cancel
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		delete(a.running, req.ID)
		a.mu.Unlock()
	}()

	argv := req.Argv
	if len(argv) == 0 {
		argv = []string{"/bin/sh", "-c", req.Shell}
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), req.Env...)
	cmd.Dir = req.Dir
	if cmd.Dir == "" {
		cmd.Dir = "/"
	}
	stdout, stderr := &capped{max: wire.MaxOutput}, &capped{max: wire.MaxOutput}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	// Own process group, so a timeout or cancel kills the whole pipeline.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// A background process still holding stdout must not hang the request.
	cmd.WaitDelay = 2 * time.Second
	err := cmd.Run()

	resp := wire.Response{ID: req.ID, ExitCode: -1}
	if st := cmd.ProcessState; st != nil {
		if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			resp.ExitCode = 128 + int(ws.Signal())
		} else {
			resp.ExitCode = st.ExitCode()
		}
	}
	var exitErr *exec.ExitError
	switch {
	case ctx.Err() != nil:
		resp.Error = context.Cause(ctx).Error()
	case errors.Is(err, exec.ErrWaitDelay):
		stderr.WriteString("[tc-agent: output still held open by a background process after exit; closed]\n")
	case err != nil && !errors.As(err, &exitErr):
		resp.Error = err.Error()
	}
	resp.Stdout, resp.Stderr = stdout.bytes(), stderr.bytes()
	return resp
}

// capped keeps the first max bytes written to it and counts the rest.
type capped struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	max     int
	dropped int64
}

func (c *capped) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(p)
	if room := max(c.max-c.buf.Len(), 0); room < n {
		c.dropped += int64(n - room)
		p = p[:room]
	}
	c.buf.Write(p)
	return n, nil
}

func (c *capped) WriteString(s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.buf.WriteString(s)
}

func (c *capped) bytes() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dropped > 0 {
		fmt.Fprintf(&c.buf, "\n[tc-agent: %d more bytes dropped]\n", c.dropped)
	}
	return c.buf.Bytes()
}
