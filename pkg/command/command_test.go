// SPDX-License-Identifier: Apache-2.0

package command

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeScript puts an executable shell script called name into a fresh
// directory and returns that directory.
func writeScript(t *testing.T, name, body string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestRun(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		env      []string
		stdin    []byte
		wantOut  string
		wantCode int // -2: no error expected
		wantErr  string
	}{
		{
			name:     "stdout",
			args:     []string{"-c", "echo hello; echo ignored >&2"},
			wantOut:  "hello\n",
			wantCode: -2,
		},
		{
			name:     "LC_ALL is C",
			args:     []string{"-c", `echo "$LC_ALL"`},
			wantOut:  "C\n",
			wantCode: -2,
		},
		{
			name:     "extra env cannot override LC_ALL",
			args:     []string{"-c", `echo "$LC_ALL $TC_EXTRA"`},
			env:      []string{"LC_ALL=de_DE.UTF-8", "TC_EXTRA=yes"},
			wantOut:  "C yes\n",
			wantCode: -2,
		},
		{
			name:     "stdin",
			args:     []string{"-c", "cat"},
			stdin:    []byte("table line\n"),
			wantOut:  "table line\n",
			wantCode: -2,
		},
		{
			name:     "no stdin reads EOF",
			args:     []string{"-c", "cat; echo done"},
			wantOut:  "done\n",
			wantCode: -2,
		},
		{
			name:     "exit code and stderr",
			args:     []string{"-c", "echo partial; echo '  mdadm: cannot open /dev/vdb: Device or resource busy  ' >&2; exit 1"},
			wantOut:  "partial\n",
			wantCode: 1,
			wantErr:  `sh -c "echo partial; echo '  mdadm: cannot open /dev/vdb: Device or resource busy  ' >&2; exit 1": exit status 1: mdadm: cannot open /dev/vdb: Device or resource busy`,
		},
		{
			name:     "exit code without stderr",
			args:     []string{"-c", "exit 2"},
			wantCode: 2,
			wantErr:  `sh -c "exit 2": exit status 2`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Runner{Env: tt.env}
			var out []byte
			var err error
			if tt.stdin != nil {
				out, err = r.RunInput(context.Background(), tt.stdin, "sh", tt.args...)
			} else {
				out, err = r.Run(context.Background(), "sh", tt.args...)
			}
			if string(out) != tt.wantOut {
				t.Errorf("stdout = %q, want %q", out, tt.wantOut)
			}
			if tt.wantCode == -2 {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			var ee *ExitError
			if !errors.As(err, &ee) {
				t.Fatalf("error %v (%T) is not an *ExitError", err, err)
			}
			if ee.Code != tt.wantCode {
				t.Errorf("Code = %d, want %d", ee.Code, tt.wantCode)
			}
			if err.Error() != tt.wantErr {
				t.Errorf("Error() =\n%s\nwant\n%s", err, tt.wantErr)
			}
		})
	}
}

func TestRunWrappedExitError(t *testing.T) {
	_, err := Runner{}.Run(context.Background(), "sh", "-c", "exit 3")
	wrapped := errors.Join(errors.New("stop array"), err)
	var ee *ExitError
	if !errors.As(wrapped, &ee) || ee.Code != 3 {
		t.Fatalf("errors.As through a wrap failed: %v", wrapped)
	}
}

func TestRunNotFound(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	tests := []struct {
		name string
		want string
	}{
		{"mdadm", "mdadm not found in PATH: install the mdadm package"},
		{"blkid", "blkid not found in PATH: install the util-linux package"},
		{"tc-no-such-tool", "tc-no-such-tool not found in PATH: install the package that provides tc-no-such-tool"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Runner{}.Run(context.Background(), tt.name, "--version")
			if err == nil || err.Error() != tt.want {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
			if !errors.Is(err, ErrNotFound) {
				t.Errorf("errors.Is(err, ErrNotFound) = false")
			}
		})
	}
}

func TestRunAbsolutePathNotFound(t *testing.T) {
	_, err := Runner{}.Run(context.Background(), filepath.Join(t.TempDir(), "mdadm"))
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("err = %v, want ErrNotFound", err)
	}
}

func TestRunContext(t *testing.T) {
	dir := writeScript(t, "slow", "exec sleep 30\n")
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))

	t.Run("deadline kills the command", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := Runner{}.Run(ctx, "slow")
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want DeadlineExceeded", err)
		}
		if !strings.HasPrefix(err.Error(), "slow: ") {
			t.Errorf("error %q does not name the command", err)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("Run returned after %v", d)
		}
	})
	t.Run("cancelled before start", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := Runner{}.Run(ctx, "slow")
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want Canceled", err)
		}
	})
}

func TestRunLogsAtDebug(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if _, err := (Runner{Logger: logger}).Run(context.Background(), "sh", "-c", "exit 0"); err != nil {
		t.Fatal(err)
	}
	got := buf.String()
	for _, want := range []string{`level=DEBUG msg="running command" cmd="sh -c \"exit 0\""`, "exit_code=0"} {
		if !strings.Contains(got, want) {
			t.Errorf("log %q lacks %q", got, want)
		}
	}
}

func TestExitErrorSignal(t *testing.T) {
	_, err := Runner{}.Run(context.Background(), "sh", "-c", "kill -9 $$")
	var ee *ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("err = %v, want *ExitError", err)
	}
	if ee.Code != -1 || !strings.Contains(err.Error(), "terminated by a signal") {
		t.Errorf("got code %d, %q", ee.Code, err)
	}
}

func TestFormatCommand(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"mdadm", []string{"--stop", "/dev/md/origin"}, "mdadm --stop /dev/md/origin"},
		{"dmsetup", []string{"message", "tc-a", "0", ""}, `dmsetup message tc-a 0 ""`},
		{"blkid", []string{"/dev/disk/by-id/my disk"}, `blkid "/dev/disk/by-id/my disk"`},
	}
	for _, tt := range tests {
		if got := FormatCommand(tt.name, tt.args...); got != tt.want {
			t.Errorf("FormatCommand(%q, %q) = %s, want %s", tt.name, tt.args, got, tt.want)
		}
	}
}
