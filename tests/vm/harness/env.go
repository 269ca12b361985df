// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Environment variables read by the harness.
const (
	// EnvCache overrides the cache directory (default <repo>/.cache/vm). It
	// must be visible to the guest: not under /run, /dev, /proc or /sys.
	EnvCache = "TIDECACHE_VM_CACHE"
	// EnvKernel selects the guest kernel of every VM whose Config.Kernel
	// is empty, in the same forms: a series such as 6.12 (Kernel612), a
	// version such as 6.1.0-56-amd64, or a path to a vmlinuz-<version>.
	// It runs any scenario on another kernel:
	// TIDECACHE_VM_KERNEL=6.12 go test -tags vm ./tests/vm/ -run TestX.
	EnvKernel = "TIDECACHE_VM_KERNEL"
)

// Guest kernels by series. Config.Kernel (or EnvKernel) names the kernel a
// VM boots: a series boots the newest installed Debian kernel of that
// series in the plain amd64 flavour (/boot/vmlinuz-<series>.*-amd64, not
// -cloud- or -rt-); a full version boots /boot/vmlinuz-<version>; a path
// boots that vmlinuz-<version> file as it is (compressed, so more slowly).
// Whichever it is, the guest loads its modules from the host's
// /lib/modules/<version>, the initramfs is built from them, and tidecache's
// own modules are built against /lib/modules/<version>/build (see Module).
// `make deps` installs both series below.
const (
	// Kernel61 is Debian bookworm's own kernel (packages
	// linux-image-amd64 and linux-headers-amd64): DefaultKernel.
	Kernel61 = "6.1"
	// Kernel612 is bookworm's 6.12 (linux-image-6.12-amd64 and
	// linux-headers-6.12-amd64), the series Debian 13 runs. Unlike
	// Debian's 6.1 it is built with NVMe in-band authentication
	// (CONFIG_NVME_AUTH, CONFIG_NVME_TARGET_AUTH: an nvmet host has a
	// dhchap_key) and NVMe/TCP TLS.
	Kernel612 = "6.12"
	// DefaultKernel is the series a VM boots when neither Config.Kernel
	// nor EnvKernel names a kernel.
	DefaultKernel = Kernel61
)

// ErrUnavailable is wrapped by Available's error: a host tool the VM
// harness needs is missing.
var ErrUnavailable = errors.New("vm: host lacks what the VM harness needs")

// Host tools the harness uses.
const (
	qemuBinary    = "qemu-system-x86_64"
	busyboxBinary = "/bin/busybox"
)

// Available reports whether the host can boot test VMs with the default
// kernel. Its error names every missing piece with the Debian package that
// provides it; VM tests fail on it (they do not skip).
func Available() error { return KernelAvailable("") }

// KernelAvailable is Available for VMs whose Config.Kernel is kernel.
func KernelAvailable(kernel string) error {
	var missing []string
	if _, err := exec.LookPath(qemuBinary); err != nil {
		missing = append(missing, qemuBinary+" (package qemu-system-x86)")
	}
	if k, err := resolveKernel(kernel); err != nil {
		missing = append(missing, err.Error())
	} else {
		kver := k.version
		if _, err := os.Stat(filepath.Join("/lib/modules", kver, "modules.dep")); err != nil {
			missing = append(missing, "/lib/modules/"+kver+"/modules.dep (package linux-image-"+kver+
				", tracked by "+metaPackage("image", kver)+")")
		}
		// Every VM gets tidecache's modules, built against the guest kernel.
		if _, err := os.Stat(filepath.Join("/lib/modules", kver, "build", "Makefile")); err != nil {
			missing = append(missing, "/lib/modules/"+kver+"/build (package linux-headers-"+kver+
				", tracked by "+metaPackage("headers", kver)+")")
		}
	}
	if _, err := exec.LookPath("make"); err != nil {
		missing = append(missing, "make (package make)")
	}
	if err := checkStatic(busyboxBinary); err != nil {
		missing = append(missing, err.Error())
	}
	if _, err := modprobePath(); err != nil {
		missing = append(missing, "modprobe (package kmod)")
	}
	if _, err := exec.LookPath("dmsetup"); err != nil {
		missing = append(missing, "dmsetup (package dmsetup)")
	}
	if _, err := goTool(); err != nil {
		missing = append(missing, "go (the Go toolchain, to build the guest agent)")
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s; install them with `make deps`", ErrUnavailable, strings.Join(missing, ", "))
	}
	return nil
}

func checkStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%s: %v (package busybox-static)", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked (package busybox-static)", path)
		}
	}
	return nil
}

func modprobePath() (string, error) {
	if p, err := exec.LookPath("modprobe"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/sbin/modprobe", "/sbin/modprobe"} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", errors.New("modprobe not found")
}

func goTool() (string, error) {
	if p, err := exec.LookPath("go"); err == nil {
		return p, nil
	}
	p := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(p); err != nil {
		return "", errors.New("go not found")
	}
	return p, nil
}

// KernelVersion returns the version (uname -r) of the kernel a VM boots
// when its Config.Kernel is empty: EnvKernel's choice, else the newest
// installed DefaultKernel.
func KernelVersion() (string, error) { return ResolveKernel("") }

// ResolveKernel returns the version (uname -r) of the kernel a VM whose
// Config.Kernel is kernel boots, or an error naming the packages to
// install when there is none.
func ResolveKernel(kernel string) (string, error) {
	k, err := resolveKernel(kernel)
	return k.version, err
}

// guestKernel is a resolved Config.Kernel.
type guestKernel struct {
	version string // uname -r in the guest, the name under /lib/modules
	image   string // the vmlinuz (bzImage) to boot
	asGiven bool   // image is the caller's path: boot it as it is
}

// seriesRE matches a kernel series such as 6.1 or 6.12.
var seriesRE = regexp.MustCompile(`^[0-9]+\.[0-9]+$`)

// resolveKernel resolves a Config.Kernel value; "" is EnvKernel's value,
// else DefaultKernel.
func resolveKernel(kernel string) (guestKernel, error) {
	from := "Config.Kernel"
	if kernel == "" {
		kernel, from = os.Getenv(EnvKernel), EnvKernel
	}
	if kernel == "" {
		kernel, from = DefaultKernel, "the default kernel"
	}
	switch {
	case strings.Contains(kernel, "/"):
		base := filepath.Base(kernel)
		v, ok := strings.CutPrefix(base, "vmlinuz-")
		if !ok || v == "" {
			return guestKernel{}, fmt.Errorf("%s %s: want a series (%s), a version or a path to vmlinuz-<version>", from, kernel, Kernel612)
		}
		return guestKernel{version: v, image: kernel, asGiven: true}, nil
	case seriesRE.MatchString(kernel):
		v, err := newestOfSeries("/boot", kernel)
		if err != nil {
			return guestKernel{}, fmt.Errorf("%s %s: %w", from, kernel, err)
		}
		return guestKernel{version: v, image: "/boot/vmlinuz-" + v}, nil
	default:
		return guestKernel{version: kernel, image: "/boot/vmlinuz-" + kernel}, nil
	}
}

// newestOfSeries returns the version of the newest <bootDir>/vmlinuz-* of
// a series in Debian's plain amd64 flavour: 6.1.0-56-amd64 or
// 6.12.117+deb12-amd64, not 6.1.0-56-cloud-amd64.
func newestOfSeries(bootDir, series string) (string, error) {
	re := regexp.MustCompile(`^` + regexp.QuoteMeta(series) + `\.[0-9][^-]*(-[0-9]+)?-amd64$`)
	paths, _ := filepath.Glob(filepath.Join(bootDir, "vmlinuz-"+series+".*"))
	var versions []string
	for _, p := range paths {
		if v := strings.TrimPrefix(filepath.Base(p), "vmlinuz-"); re.MatchString(v) {
			versions = append(versions, v)
		}
	}
	if len(versions) == 0 {
		return "", fmt.Errorf("no %s/vmlinuz-%s.*-amd64 (package %s)", bootDir, series, metaPackage("image", series))
	}
	sort.Slice(versions, func(i, j int) bool { return versionLess(versions[i], versions[j]) })
	return versions[len(versions)-1], nil
}

// metaPackage names the Debian package that tracks the newest kernel image
// or headers (kind "image" or "headers") of kver's series: bookworm's own
// 6.1 is linux-<kind>-amd64, another series linux-<kind>-<series>-amd64.
func metaPackage(kind, kver string) string {
	series := seriesPrefixRE.FindString(kver)
	if series == "" || series == Kernel61 {
		return "linux-" + kind + "-amd64"
	}
	return "linux-" + kind + "-" + series + "-amd64"
}

// seriesPrefixRE matches the series at the start of a kernel version.
var seriesPrefixRE = regexp.MustCompile(`^[0-9]+\.[0-9]+`)

// versionLess compares version strings piecewise: runs of digits as
// numbers, anything else as text ("6.1.0-9" < "6.1.0-56").
func versionLess(a, b string) bool {
	pa, pb := versionParts(a), versionParts(b)
	for i := 0; i < len(pa) && i < len(pb); i++ {
		if pa[i] == pb[i] {
			continue
		}
		na, errA := strconv.Atoi(pa[i])
		nb, errB := strconv.Atoi(pb[i])
		if errA == nil && errB == nil {
			return na < nb
		}
		return pa[i] < pb[i]
	}
	return len(pa) < len(pb)
}

func versionParts(s string) []string {
	var parts []string
	start := 0
	for i := 1; i <= len(s); i++ {
		if i == len(s) || isDigit(s[i]) != isDigit(s[i-1]) {
			parts = append(parts, s[start:i])
			start = i
		}
	}
	return parts
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

const modulePath = "github.com/tidecache/tidecache"

// RepoRoot returns the directory holding tidecache's go.mod: searched
// upwards from the working directory, then from this source file.
func RepoRoot() (string, error) {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		starts = append(starts, filepath.Dir(file))
	}
	for _, dir := range starts {
		for {
			if isRepoRoot(dir) {
				return dir, nil
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	return "", fmt.Errorf("vm: no go.mod of %s above %v", modulePath, starts)
}

func isRepoRoot(dir string) bool {
	data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "module" {
			return f[1] == modulePath
		}
	}
	return false
}

// CacheDir returns the harness's cache directory (EnvCache, default
// <repo>/.cache/vm), creating it. It holds the initramfs, the agent binary,
// default VM state and TestDir directories.
func CacheDir() (string, error) {
	dir := os.Getenv(EnvCache)
	if dir == "" {
		root, err := RepoRoot()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(root, ".cache", "vm")
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	if err := GuestVisible(dir); err != nil {
		return "", fmt.Errorf("vm: cache dir (%s): %w", EnvCache, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("vm: cache dir: %w", err)
	}
	return dir, nil
}

// hiddenFromGuest are the host directories the guest cannot see through
// its root mount: its /init mounts its own /run (holding ScratchDir), /dev,
// /proc and /sys over them. Everything else, /tmp included, is the host's.
var hiddenFromGuest = []string{"/run", "/dev", "/proc", "/sys"}

// GuestVisible reports an error when the guest cannot see the host path
// (absolute or relative to the working directory) through its root mount,
// because it lies under one of the directories the guest mounts afresh:
// /run, /dev, /proc or /sys.
func GuestVisible(path string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	for _, hidden := range hiddenFromGuest {
		if abs == hidden || strings.HasPrefix(abs, hidden+"/") {
			return fmt.Errorf("%s is hidden from the guest: the guest mounts its own %s over the host's; "+
				"use a directory elsewhere (a checkout's .cache/vm, TestDir, or %s outside %s)",
				abs, hidden, EnvCache, strings.Join(hiddenFromGuest, ", "))
		}
	}
	return nil
}

// BuildBinaries builds Go packages of this module (patterns relative to the
// repository root, e.g. "./cmd/...") into outDir with `go build -o`, as
// static binaries (CGO_ENABLED=0). outDir must be visible to the guest (see
// GuestVisible): use a directory from TestDir or CacheDir.
func BuildBinaries(ctx context.Context, outDir string, pkgs ...string) error {
	if len(pkgs) == 0 {
		return errors.New("vm: BuildBinaries: no packages")
	}
	outDir, err := filepath.Abs(outDir)
	if err != nil {
		return err
	}
	if err := GuestVisible(outDir); err != nil {
		return fmt.Errorf("vm: BuildBinaries: %w", err)
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return fmt.Errorf("vm: BuildBinaries: %w", err)
	}
	return goBuild(ctx, outDir+string(filepath.Separator), pkgs...)
}

func goBuild(ctx context.Context, out string, pkgs ...string) error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	gobin, err := goTool()
	if err != nil {
		return fmt.Errorf("vm: %w", err)
	}
	args := append([]string{"build", "-trimpath", "-o", out}, pkgs...)
	cmd := exec.CommandContext(ctx, gobin, args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("vm: go %s: %w\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return nil
}

var agentCache struct {
	sync.Mutex
	path string
}

// buildAgent builds the guest agent into the cache directory under a name
// derived from its content, so VMs running in other processes keep the
// binary they booted with. Built once per process.
func buildAgent(ctx context.Context, cacheDir string) (string, error) {
	agentCache.Lock()
	defer agentCache.Unlock()
	if agentCache.path != "" {
		return agentCache.path, nil
	}
	tmpDir, err := os.MkdirTemp(cacheDir, ".agent-build-")
	if err != nil {
		return "", fmt.Errorf("vm: build agent: %w", err)
	}
	defer os.RemoveAll(tmpDir)
	tmp := filepath.Join(tmpDir, "agent")
	if err := goBuild(ctx, tmp, "./tests/vm/harness/agent"); err != nil {
		return "", fmt.Errorf("vm: build agent: %w", err)
	}
	sum, err := fileHash(tmp)
	if err != nil {
		return "", fmt.Errorf("vm: build agent: %w", err)
	}
	path := filepath.Join(cacheDir, "agent-"+sum[:16])
	if _, err := os.Stat(path); err != nil {
		if err := os.Rename(tmp, path); err != nil {
			return "", fmt.Errorf("vm: build agent: %w", err)
		}
	}
	agentCache.path = path
	return path, nil
}

func fileHash(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// pruneAge is how long a cached build may go unused before another build
// of the same kind removes it.
const pruneAge = 2 * time.Hour

// useCached marks a cached file as used now and removes the files of the
// same kind (name prefix) in its directory unused for pruneAge: older
// builds of the agent, initramfs or vmlinux. Every Boot marks what it uses,
// so a file a running test still boots from is never old.
func useCached(path, prefix string) {
	now := time.Now()
	os.Chtimes(path, now, now)
	dir := filepath.Dir(path)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), prefix) || e.Name() == filepath.Base(path) {
			continue
		}
		if info, err := e.Info(); err == nil && now.Sub(info.ModTime()) > pruneAge {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}
