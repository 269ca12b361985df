package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/tidecache/tidecache/pkg/engine"
)

func TestParseSize(t *testing.T) {
	cases := []struct {
		in        string
		allowZero bool
		want      uint64
		err       string
	}{
		{"10G", false, 10 << 30, ""},
		{"512M", false, 512 << 20, ""},
		{"512MiB", false, 512 << 20, ""},
		{"1T", false, 1 << 40, ""},
		{"0", true, 0, ""},
		{"0", false, 0, "greater than zero"},
		{"ten", false, 0, "use a size like"},
		{"-5G", false, 0, ""},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parseSize("size", tc.in, tc.allowZero)
			if tc.in == "-5G" {
				if err == nil {
					t.Fatalf("negative size accepted: %d", got)
				}
				return
			}
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "--size") {
					t.Fatalf("err = %v, want one naming --size and saying %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("parseSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
			}
		})
	}
}

// TestCommandValidation checks input errors that need no device: they are
// reported before the engine (and device-mapper) is touched, so they work
// on a host without device-mapper.
func TestCommandValidation(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"volume", "create", "Bad_Name", "--size", "1G"}, `invalid volume name "Bad_Name"`},
		{[]string{"volume", "create", strings.Repeat("a", 49), "--size", "1G"}, "48"},
		{[]string{"volume", "create", "db", "--size", "1G"}, "mode writeback needs --write-cache"},
		{[]string{"volume", "create", "db", "--size", "lots", "--write-cache", "1G"}, "invalid --size"},
		{[]string{"volume", "create", "db", "--size", "1G", "--write-cache", "1G", "--mode", "sideways"}, "sideways"},
		{[]string{"volume", "create", "db"}, `required flag(s) "size" not set`},
		{[]string{"volume", "set-mode", "db", "fast"}, "fast"},
		{[]string{"pool", "create", "p", "--ssd", "/dev/x", "--raid10", "/dev/a,/dev/b,/dev/c"}, "even number of disks, at least 4"},
		{[]string{"pool", "create", "p", "--ssd", "/dev/x", "--origin", "/dev/y", "--raid10", "/dev/a,/dev/b,/dev/c,/dev/d"}, "none of the others can be"},
		{[]string{"-o", "yaml", "volume", "list"}, `invalid --output "yaml"`},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			cmd := NewTidectl(&out, &errb)
			cmd.SetArgs(tc.args)
			code := Execute(t.Context(), cmd, &errb)
			if code == 0 {
				t.Fatalf("exit 0, want failure; stdout %q", out.String())
			}
			if !strings.Contains(errb.String(), tc.want) {
				t.Fatalf("stderr %q does not contain %q", errb.String(), tc.want)
			}
		})
	}
}

func TestProgressPrinter(t *testing.T) {
	var b bytes.Buffer
	p := &progressPrinter{w: &b}
	p.print(engine.Progress{Volume: "db", Phase: "drain", DirtyBlocks: 1000, StartBlocks: 1000, BlockSize: 4096})
	p.print(engine.Progress{Volume: "db", Phase: "drain", DirtyBlocks: 500, StartBlocks: 1000, BlockSize: 4096, BlocksPerSecond: 250, ETA: 2 * time.Second})
	p.print(engine.Progress{Volume: "db", Phase: "drain", DirtyBlocks: 0, StartBlocks: 1000, BlockSize: 4096, BlocksPerSecond: 250})
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	// The middle report came within a second of the first: throttled. The
	// final one (0 dirty) always prints.
	if len(lines) != 2 {
		t.Fatalf("got %d lines, want 2:\n%s", len(lines), b.String())
	}
	if !strings.Contains(lines[0], "1000 dirty blocks (3.906MiB) left, 0% written back") || !strings.Contains(lines[0], "ETA unknown") {
		t.Errorf("first line: %s", lines[0])
	}
	if !strings.Contains(lines[1], "0 dirty blocks") || !strings.Contains(lines[1], "100% written back") || !strings.Contains(lines[1], "done") {
		t.Errorf("last line: %s", lines[1])
	}
}
