// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
)

// The guest kernel gets tidecache's own device-mapper targets (kernel/<name>:
// dm-fuaflush, dm-readfirst, dm-errhold), built on the host against the
// guest kernel's headers (/lib/modules/<kver>/build, package
// linux-headers-<kver>) and loaded by the agent with insmod (see
// wire.ParamInsmod). The modules land in the cache directory, which the
// guest sees through its 9p root.

// tidecache's own kernel modules, each built from the repository
// directory kernel/<name>.
const (
	FUAFlush  = "dm-fuaflush"  // completes FUA writes after a flush (pkg/engine durable)
	ReadFirst = "dm-readfirst" // holds background writes while reads wait
	ErrHold   = "dm-errhold"   // holds failed I/O until told to retry or fail it
)

// kmodFormat is part of the cache key: bump it when the way a module is
// built changes in a way the sources do not show.
const kmodFormat = "tidecache-kmod-1"

var kmodCache struct {
	sync.Mutex
	paths map[string]string // name + " " + kver -> .ko
}

// Module returns the path of <name>.ko (FUAFlush, ReadFirst, ErrHold)
// built for the guest kernel kver (ResolveKernel), building it when the
// cache holds no module built from the same sources against the same
// headers. It is built at most once per process; builds in other
// processes are safe (the module is renamed into place). The error names
// the package to install when the headers or the build tools are missing.
func Module(ctx context.Context, name, kver string) (string, error) {
	kmodCache.Lock()
	defer kmodCache.Unlock()
	key := name + " " + kver
	if p := kmodCache.paths[key]; p != "" {
		return p, nil
	}
	cache, err := CacheDir()
	if err != nil {
		return "", err
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	p, err := buildModule(ctx, cache, filepath.Join(root, "kernel", name), name, kver)
	if err != nil {
		return "", fmt.Errorf("vm: %s for %s: %w", name, kver, err)
	}
	if kmodCache.paths == nil {
		kmodCache.paths = map[string]string{}
	}
	kmodCache.paths[key] = p
	return p, nil
}

// kernelBuildDir returns /lib/modules/<kver>/build, or an error naming the
// package that provides it.
func kernelBuildDir(kver string) (string, error) {
	dir := filepath.Join("/lib/modules", kver, "build")
	if _, err := os.Stat(filepath.Join(dir, "Makefile")); err != nil {
		return "", fmt.Errorf("no kernel headers at %s: install package linux-headers-%s "+
			"(%s tracks it; `make deps`)", dir, kver, metaPackage("headers", kver))
	}
	if _, err := os.Stat(filepath.Join(dir, "Module.symvers")); err != nil {
		return "", fmt.Errorf("%s has no Module.symvers: reinstall package linux-headers-%s", dir, kver)
	}
	return dir, nil
}

// buildModule builds module name from srcDir into cacheDir as
// <name>-<kver>-<hash>.ko, the hash covering the sources and the headers
// it was built against.
func buildModule(ctx context.Context, cacheDir, srcDir, name, kver string) (string, error) {
	kdir, err := kernelBuildDir(kver)
	if err != nil {
		return "", err
	}
	makeBin, err := exec.LookPath("make")
	if err != nil {
		return "", errors.New("make not found (package make)")
	}
	srcs, err := moduleSources(srcDir)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n", kmodFormat, kver)
	// The headers: a reinstalled or upgraded package rewrites Module.symvers.
	symvers, err := filepath.EvalSymlinks(filepath.Join(kdir, "Module.symvers"))
	if err != nil {
		return "", err
	}
	st, err := os.Stat(symvers)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(h, "%s %d %d\n", symvers, st.Size(), st.ModTime().UnixNano())
	for _, src := range srcs {
		data, err := os.ReadFile(filepath.Join(srcDir, src))
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s %d\n", src, len(data))
		h.Write(data)
	}
	out := filepath.Join(cacheDir, fmt.Sprintf("%s-%s-%s.ko", name, kver, hex.EncodeToString(h.Sum(nil))[:16]))
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}

	// Kbuild writes its objects next to the sources: build in a private
	// copy, never in the repository.
	work, err := os.MkdirTemp("", "tc-kmod-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	for _, src := range srcs {
		data, err := os.ReadFile(filepath.Join(srcDir, src))
		if err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(work, src), data, 0o644); err != nil {
			return "", err
		}
	}
	cmd := exec.CommandContext(ctx, makeBin, "-C", kdir, "M="+work, "modules")
	cmd.Env = kbuildEnv()
	var outBuf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &outBuf, &outBuf
	if err := cmd.Run(); err != nil {
		// Debian's headers package depends on the compiler the kernel was
		// built with: a missing one shows in make's output.
		return "", fmt.Errorf("make -C %s M=%s modules: %w\n%s", kdir, work, err, strings.TrimSpace(outBuf.String()))
	}
	built := filepath.Join(work, name+".ko")
	data, err := os.ReadFile(built)
	if err != nil {
		return "", fmt.Errorf("build left no %s.ko: %w\n%s", name, err, outBuf.String())
	}
	tmp, err := os.CreateTemp(cacheDir, "."+name+"-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(data)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), out)
	}
	if err != nil {
		return "", err
	}
	return out, nil
}

// moduleSources lists the files of srcDir a module build reads: Kbuild,
// Makefile, C sources and headers, sorted.
func moduleSources(srcDir string) ([]string, error) {
	entries, err := os.ReadDir(srcDir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		n := e.Name()
		if e.Type().IsRegular() && (n == "Kbuild" || n == "Makefile" ||
			strings.HasSuffix(n, ".c") && !strings.HasSuffix(n, ".mod.c") || strings.HasSuffix(n, ".h")) {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	if len(names) == 0 {
		return nil, fmt.Errorf("no module sources in %s", srcDir)
	}
	return names, nil
}

// kbuildEnv is the environment for a kernel build started from Go: without
// the settings of a make that may have started this process (its jobserver
// descriptors are not passed on).
func kbuildEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEFILES", "MAKEOVERRIDES":
			continue
		}
		env = append(env, kv)
	}
	return append(env, "LC_ALL=C")
}
