// SPDX-License-Identifier: Apache-2.0

//go:build vm

package vm_test

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tidecache/tidecache/tests/vm/harness"
)

var updateDMGolden = flag.Bool("update-dm-golden", false,
	"TestDMKernel: write the dmsetup lines captured in the VM to pkg/dm/testdata")

// dmGoldenFiles are the golden lines pkg/dm's guest tests capture on a
// kernel of the series (6.1, 6.12: see pkg/dm/testdata/README.md).
func dmGoldenFiles(series string) []string {
	var files []string
	for _, target := range []string{"linear", "writecache", "cache", "raid"} {
		files = append(files, target+"-"+series+".table", target+"-"+series+".status")
	}
	return files
}

// kernelSeries is the major.minor of a kernel release: 6.12 for
// 6.12.117+deb12-amd64.
func kernelSeries(release string) string {
	parts := strings.SplitN(strings.TrimSpace(release), ".", 3)
	if len(parts) < 2 {
		return strings.TrimSpace(release)
	}
	minor := parts[1]
	if i := strings.IndexFunc(minor, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		minor = minor[:i]
	}
	return parts[0] + "." + minor
}

// TestDMKernel runs pkg/dm's real-kernel tests (pkg/dm/kernel_test.go,
// build tag vmguest) as root in a VM with one scratch disk, and checks
// that the golden dmsetup lines in pkg/dm/testdata have the shape of what
// the kernel prints today. With -update-dm-golden it replaces them.
func TestDMKernel(t *testing.T) {
	besideAnother(t, 10*time.Second)
	if err := harness.Available(); err != nil {
		t.Fatal(err)
	}
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := harness.TestDir(t)
	bin := filepath.Join(dir, "dm.test")
	start := time.Now()
	build := exec.CommandContext(t.Context(), "go", "test", "-c", "-trimpath", "-tags", "vmguest", "-o", bin, "./pkg/dm")
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go test -c -tags vmguest ./pkg/dm: %v\n%s", err, out)
	}
	t.Logf("built %s in %v", bin, time.Since(start).Round(time.Millisecond))

	v := harness.MustBoot(t, harness.Config{Name: "dmkernel", Dir: dir, MemoryMiB: 1024, CPUs: vmCPUs(t),
		Disks: []harness.Disk{{Path: filepath.Join(dir, "disk.img"), Size: 256 << 20}}})
	const goldenDir = "/root/dm-golden"
	series := kernelSeries(v.MustRun(t, "uname -r"))
	start = time.Now()
	res, err := v.Exec(t.Context(), harness.Cmd{
		Argv: []string{bin, "-test.v", "-test.count=1", "-test.run", "^TestKernel", "-test.timeout", "10m"},
		Env:  []string{"TIDECACHE_TEST_DISK=/dev/vda", "TIDECACHE_GOLDEN_DIR=" + goldenDir, "TIDECACHE_GOLDEN_SERIES=" + series},
		// testdata and the sources are read from the host's tree.
		Dir: filepath.Join(root, "pkg", "dm"),
	})
	if err != nil {
		t.Fatalf("run dm.test in the guest: %v\nstdout:\n%s\nstderr:\n%s", err, res.Stdout, res.Stderr)
	}
	elapsed := time.Since(start).Round(time.Millisecond)
	results := guestResults(res.Stdout)
	for _, r := range results {
		t.Logf("guest %s", r)
	}
	if res.ExitCode != 0 {
		t.Fatalf("guest dm.test: exit %d after %v\nstdout:\n%s\nstderr:\n%s", res.ExitCode, elapsed, res.Stdout, res.Stderr)
	}
	if len(results) == 0 || !strings.Contains(res.Stdout, "--- PASS: TestKernelWritecache") {
		t.Fatalf("guest dm.test ran no kernel tests:\n%s", res.Stdout)
	}
	t.Logf("guest dm.test passed in %v", elapsed)

	for _, f := range dmGoldenFiles(series) {
		captured := v.MustRun(t, "cat "+goldenDir+"/"+f)
		path := filepath.Join(root, "pkg", "dm", "testdata", f)
		if *updateDMGolden {
			if err := os.WriteFile(path, []byte(captured), 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("wrote %s: %s", path, strings.TrimSpace(captured))
			continue
		}
		committed, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("no golden lines for kernel %s (%v): capture them with -update-dm-golden and add their values to pkg/dm/golden_test.go", series, err)
		}
		if got, want := lineShape(captured), lineShape(string(committed)); got != want {
			t.Errorf("%s: the kernel now prints\n  %q\nwhose shape differs from the golden file's\n  %q\nre-capture with -update-dm-golden and update pkg/dm/golden_test.go", f, captured, committed)
		}
	}
}

// guestResults returns the "--- PASS: TestX (1.2s)" lines of go test -v
// output, without the dashes.
func guestResults(out string) []string {
	var res []string
	for _, line := range strings.Split(out, "\n") {
		if l := strings.TrimSpace(line); strings.HasPrefix(l, "--- ") {
			res = append(res, strings.TrimPrefix(l, "--- "))
		}
	}
	return res
}

var (
	shapeDev   = regexp.MustCompile(`^\d+:\d+$`)
	shapeRatio = regexp.MustCompile(`^\d+/\d+$`)
	shapeNum   = regexp.MustCompile(`^-?\d+$`)
)

// lineShape replaces the numbers of dmsetup lines (counters, sizes,
// device numbers) by placeholders, keeping keywords and field counts: two
// lines of the same shape differ only in values the golden tests read.
func lineShape(s string) string {
	var b bytes.Buffer
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		for i, f := range strings.Fields(line) {
			if i > 0 {
				b.WriteByte(' ')
			}
			switch {
			case shapeDev.MatchString(f):
				b.WriteString("M:m")
			case shapeRatio.MatchString(f):
				b.WriteString("N/N")
			case shapeNum.MatchString(f):
				b.WriteString("N")
			default:
				b.WriteString(f)
			}
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// TestKernelSeries checks how golden files are named for a kernel.
func TestKernelSeries(t *testing.T) {
	for release, want := range map[string]string{
		"6.1.0-56-amd64":         "6.1",
		"6.12.117+deb12-amd64\n": "6.12",
		"6.12":                   "6.12",
		"7.0-rc1":                "7.0",
	} {
		if got := kernelSeries(release); got != want {
			t.Errorf("kernelSeries(%q) = %q, want %q", release, got, want)
		}
	}
}
