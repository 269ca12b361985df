// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestVersionOrder(t *testing.T) {
	vs := []string{"6.1.0-56-amd64", "6.1.0-9-amd64", "5.10.0-30-amd64", "6.10.1-1-amd64", "6.1.0-56-cloud-amd64"}
	sort.Slice(vs, func(i, j int) bool { return versionLess(vs[i], vs[j]) })
	want := []string{"5.10.0-30-amd64", "6.1.0-9-amd64", "6.1.0-56-amd64", "6.1.0-56-cloud-amd64", "6.10.1-1-amd64"}
	if !slices.Equal(vs, want) {
		t.Fatalf("got %v, want %v", vs, want)
	}
}

func TestResolveKernel(t *testing.T) {
	t.Setenv(EnvKernel, "6.1.0-1-amd64")
	if k, err := resolveKernel(""); err != nil || k.version != "6.1.0-1-amd64" || k.image != "/boot/vmlinuz-6.1.0-1-amd64" || k.asGiven {
		t.Errorf("version from %s: %+v, %v", EnvKernel, k, err)
	}
	if v, err := KernelVersion(); err != nil || v != "6.1.0-1-amd64" {
		t.Errorf("KernelVersion: %q, %v", v, err)
	}
	// Config.Kernel wins over the environment.
	if k, err := resolveKernel("6.12.9+deb12-amd64"); err != nil || k.version != "6.12.9+deb12-amd64" || k.image != "/boot/vmlinuz-6.12.9+deb12-amd64" {
		t.Errorf("version from Config.Kernel: %+v, %v", k, err)
	}
	t.Setenv(EnvKernel, "/x/vmlinuz-6.2.0-test")
	if k, err := resolveKernel(""); err != nil || k.version != "6.2.0-test" || k.image != "/x/vmlinuz-6.2.0-test" || !k.asGiven {
		t.Errorf("path: %+v, %v", k, err)
	}
	for _, bad := range []string{"/x/bzImage", "/x/vmlinuz-"} {
		t.Setenv(EnvKernel, bad)
		if _, err := KernelVersion(); err == nil || !strings.Contains(err.Error(), EnvKernel) {
			t.Errorf("%s: got %v, want an error naming %s", bad, err, EnvKernel)
		}
	}
}

func TestNewestOfSeries(t *testing.T) {
	dir := t.TempDir()
	for _, v := range []string{
		"6.1.0-9-amd64", "6.1.0-56-amd64", "6.1.0-57-cloud-amd64", "6.1.0-58-rt-amd64",
		"6.12.100+deb12-amd64", "6.12.117+deb12-amd64", "6.12.118+deb12-cloud-amd64", "6.10.1-1-amd64",
	} {
		if err := os.WriteFile(filepath.Join(dir, "vmlinuz-"+v), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for series, want := range map[string]string{
		Kernel61: "6.1.0-56-amd64", Kernel612: "6.12.117+deb12-amd64", "6.10": "6.10.1-1-amd64",
	} {
		if got, err := newestOfSeries(dir, series); err != nil || got != want {
			t.Errorf("series %s: got %q, %v; want %s", series, got, err, want)
		}
	}
	_, err := newestOfSeries(dir, "6.6")
	if err == nil || !strings.Contains(err.Error(), "linux-image-6.6-amd64") {
		t.Errorf("missing series: got %v, want an error naming linux-image-6.6-amd64", err)
	}
	for kver, want := range map[string]string{
		"6.1.0-56-amd64": "linux-headers-amd64", "6.12.117+deb12-amd64": "linux-headers-6.12-amd64", "6.12": "linux-headers-6.12-amd64",
	} {
		if got := metaPackage("headers", kver); got != want {
			t.Errorf("metaPackage(headers, %s) = %s, want %s", kver, got, want)
		}
	}
}

func TestGuestVisible(t *testing.T) {
	for p, mount := range map[string]string{
		"/run": "/run", "/run/a": "/run", ScratchDir + "/x": "/run", "/proc": "/proc",
		"/sys/x": "/sys", "/dev/shm/x": "/dev", "/run/../dev/x": "/dev",
	} {
		err := GuestVisible(p)
		if err == nil {
			t.Errorf("%s reported visible", p)
			continue
		}
		if want := "the guest mounts its own " + mount + " over the host's"; !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %q lacks %q", p, err, want)
		}
	}
	// The guest's /tmp is the host's: a checkout under /tmp works.
	for _, p := range []string{"/tmp", "/tmp/tc-clone/.cache/vm", "/work/main/.cache/vm", "/runx", "/var/tmp/x", "/var/run/x", "/root"} {
		if err := GuestVisible(p); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
}

func TestRepoRootAndCacheDir(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "tests", "vm", "harness", "vm.go")); err != nil {
		t.Fatalf("RepoRoot %s: %v", root, err)
	}
	dir := filepath.Join(root, ".cache", "vm-test-"+strconv.Itoa(os.Getpid()))
	defer os.RemoveAll(dir)
	t.Setenv(EnvCache, dir)
	if got, err := CacheDir(); err != nil || got != dir {
		t.Errorf("CacheDir: %q, %v", got, err)
	}
	t.Setenv(EnvCache, "/run/tc-cache")
	if _, err := CacheDir(); err == nil {
		t.Error("cache under /run accepted")
	}
	if err := BuildBinaries(context.Background(), "/dev/shm/bin", "./cmd/..."); err == nil {
		t.Error("BuildBinaries into /dev/shm accepted")
	}
}

func TestUseCachedPrunes(t *testing.T) {
	dir := t.TempDir()
	old := time.Now().Add(-3 * time.Hour)
	for _, name := range []string{"agent-old", "agent-cur", "agent-recent", "initramfs-old"} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if name != "agent-recent" {
			os.Chtimes(p, old, old)
		}
	}
	useCached(filepath.Join(dir, "agent-cur"), "agent-")
	for name, want := range map[string]bool{"agent-old": false, "agent-cur": true, "agent-recent": true, "initramfs-old": true} {
		_, err := os.Stat(filepath.Join(dir, name))
		if (err == nil) != want {
			t.Errorf("%s: exists=%v, want %v", name, err == nil, want)
		}
	}
	if st, _ := os.Stat(filepath.Join(dir, "agent-cur")); time.Since(st.ModTime()) > time.Minute {
		t.Error("used file not touched")
	}
}

// fakeBzImage builds the part of a bzImage that bzImagePayload reads.
func fakeBzImage(payload []byte) []byte {
	const setupSects = 2
	b := make([]byte, (setupSects+1)*512)
	b[0x1f1] = setupSects
	copy(b[0x202:], "HdrS")
	binary.LittleEndian.PutUint16(b[0x206:], 0x20f)
	binary.LittleEndian.PutUint32(b[0x248:], 100)
	binary.LittleEndian.PutUint32(b[0x24c:], uint32(len(payload)))
	b = append(b, make([]byte, 100)...)
	b = append(b, payload...)
	return append(b, "trailing"...)
}

func TestBzImagePayload(t *testing.T) {
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write([]byte("vmlinux contents"))
	zw.Close()
	payload, err := bzImagePayload(fakeBzImage(z.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := decompress(context.Background(), payload, &out); err != nil {
		t.Fatal(err)
	}
	if out.String() != "vmlinux contents" {
		t.Fatalf("got %q", out.String())
	}
	if _, err := bzImagePayload([]byte("not a kernel")); err == nil {
		t.Error("garbage accepted")
	}
	bad := fakeBzImage(z.Bytes())
	binary.LittleEndian.PutUint32(bad[0x24c:], 1<<30)
	if _, err := bzImagePayload(bad); err == nil {
		t.Error("payload past the end accepted")
	}
	if err := decompress(context.Background(), []byte("????"), &out); err == nil {
		t.Error("unknown compression accepted")
	}
}

// TestDecompressSizeTrailer checks the xz and zstd payloads as the kernel's
// build makes them (Debian's 6.1 and 6.12): the compressed stream, then the
// uncompressed size in 4 bytes.
func TestDecompressSizeTrailer(t *testing.T) {
	const contents = "vmlinux contents"
	for _, tool := range [][]string{{"xz", "--check=crc32", "-c"}, {"zstd", "-q", "-c"}} {
		if _, err := exec.LookPath(tool[0]); err != nil {
			t.Logf("no %s: %v", tool[0], err)
			continue
		}
		cmd := exec.Command(tool[0], tool[1:]...)
		cmd.Stdin = strings.NewReader(contents)
		z, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: %v", tool[0], err)
		}
		z = binary.LittleEndian.AppendUint32(z, uint32(len(contents)))
		var out bytes.Buffer
		if err := decompress(context.Background(), z, &out); err != nil || out.String() != contents {
			t.Errorf("%s: got %q, %v; want %q", tool[0], out.String(), err, contents)
		}
	}
}

// TestHostKernelPVH checks, for each kernel series the harness knows that
// the host has, that it yields a bootable PVH vmlinux (Boot's fast path:
// 6.1 is xz-compressed, 6.12 zstd), and leaves it in the cache for the VM
// tests.
func TestHostKernelPVH(t *testing.T) {
	for _, series := range []string{Kernel61, Kernel612} {
		t.Run(series, func(t *testing.T) {
			k, err := resolveKernel(series)
			if err != nil {
				t.Skip(err)
			}
			if _, err := os.Stat(k.image); err != nil {
				t.Skip(err)
			}
			cache, err := CacheDir()
			if err != nil {
				t.Fatal(err)
			}
			path, err := kernelForBoot(context.Background(), cache, k)
			if err != nil {
				t.Fatalf("no PVH vmlinux, Boot falls back to %s: %v", path, err)
			}
			if err := checkPVH(path); err != nil {
				t.Fatal(err)
			}
		})
	}
}
