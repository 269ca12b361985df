// SPDX-License-Identifier: Apache-2.0

// Package command runs external programs for tidecache.
//
// It owns the one exec helper of the project (STYLE.md, rule 3): every
// package that has to run a tool such as mdadm, blkid or nvme does so through
// a Runner, so that all of them get the same behaviour:
//
//   - the command is bound to a context (exec.CommandContext) and is killed
//     when the context is cancelled or its deadline passes;
//   - it runs with LC_ALL=C, so the output parsers see untranslated text;
//   - it never inherits the daemon's standard input (a tool that asks a
//     question reads end-of-file instead of hanging);
//   - a non-zero exit becomes an *ExitError carrying the command line, the
//     exit code and the trimmed standard error, which is what an operator
//     needs to see;
//   - a missing binary is reported as such, naming the package to install
//     (errors.Is(err, ErrNotFound)).
//
// Runner holds no state besides its configuration; its zero value is ready
// to use and it is safe for concurrent use.
package command

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// ErrNotFound is wrapped by the error returned when the program to run is
// not installed (not found in PATH).
var ErrNotFound = errors.New("not found in PATH")

// waitDelay bounds how long Run waits for the output pipes to close after
// the process was killed (a grandchild may hold them open).
const waitDelay = 5 * time.Second

// ExitError reports a command that ran and exited with a non-zero status.
type ExitError struct {
	// Cmd is the command line as run, e.g. "mdadm --stop /dev/md/origin".
	Cmd string
	// Code is the exit status, or -1 if the process was killed by a signal.
	Code int
	// Stderr is the command's standard error with surrounding white space
	// removed.
	Stderr string
}

// Error returns e.g. "mdadm --create ...: exit status 1: mdadm: cannot open
// /dev/vdb: Device or resource busy".
func (e *ExitError) Error() string {
	status := "exit status " + strconv.Itoa(e.Code)
	if e.Code < 0 {
		status = "terminated by a signal"
	}
	if e.Stderr == "" {
		return e.Cmd + ": " + status
	}
	return e.Cmd + ": " + status + ": " + e.Stderr
}

// Runner runs external commands. The zero value is usable.
type Runner struct {
	// Logger, if set, receives a debug record for every command run and
	// for its result. Errors are returned, not logged.
	Logger *slog.Logger
	// Env holds extra "KEY=value" entries added to the environment the
	// command inherits from this process, e.g. "DM_DISABLE_UDEV=1".
	// LC_ALL is always forced to C and cannot be overridden here.
	Env []string
}

// Run runs name with args and returns its standard output.
//
// On a non-zero exit the error is an *ExitError and the output printed so
// far is returned as well (some tools report results through their exit
// code). A cancelled or expired ctx yields an error wrapping ctx.Err().
// A program missing from PATH yields an error wrapping ErrNotFound.
func (r Runner) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	return r.run(ctx, nil, name, args)
}

// RunInput is Run with stdin fed to the command's standard input.
func (r Runner) RunInput(ctx context.Context, stdin []byte, name string, args ...string) ([]byte, error) {
	if stdin == nil {
		stdin = []byte{}
	}
	return r.run(ctx, stdin, name, args)
}

func (r Runner) run(ctx context.Context, stdin []byte, name string, args []string) ([]byte, error) {
	line := FormatCommand(name, args...)
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", line, err)
	}
	path, err := exec.LookPath(name)
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%s %w: %s", name, ErrNotFound, installHint(name))
		}
		return nil, fmt.Errorf("%s: %w", line, err)
	}

	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = environ(r.Env)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	cmd.WaitDelay = waitDelay

	r.debug(ctx, "running command", slog.String("cmd", line))
	start := time.Now()
	err = cmd.Run()
	code := 0
	if cmd.ProcessState != nil {
		code = cmd.ProcessState.ExitCode()
	}
	r.debug(ctx, "command finished", slog.String("cmd", line),
		slog.Int("exit_code", code), slog.Duration("duration", time.Since(start)))

	if err == nil {
		return stdout.Bytes(), nil
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return stdout.Bytes(), fmt.Errorf("%s: %w", line, ctxErr)
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return stdout.Bytes(), &ExitError{
			Cmd:    line,
			Code:   ee.ExitCode(),
			Stderr: strings.TrimSpace(stderr.String()),
		}
	}
	return stdout.Bytes(), fmt.Errorf("%s: %w", line, err)
}

func (r Runner) debug(ctx context.Context, msg string, attrs ...slog.Attr) {
	if r.Logger == nil {
		return
	}
	r.Logger.LogAttrs(ctx, slog.LevelDebug, msg, attrs...)
}

// environ returns this process's environment plus extra, with LC_ALL=C
// last so that it wins (os/exec keeps the last value of a duplicated key).
func environ(extra []string) []string {
	env := os.Environ()
	env = append(env, extra...)
	return append(env, "LC_ALL=C")
}

// FormatCommand renders a command line for messages and logs: arguments
// that are empty or hold white space or quotes are quoted.
func FormatCommand(name string, args ...string) string {
	var b strings.Builder
	b.WriteString(quoteArg(name))
	for _, a := range args {
		b.WriteByte(' ')
		b.WriteString(quoteArg(a))
	}
	return b.String()
}

func quoteArg(s string) string {
	if s == "" || strings.ContainsAny(s, " \t\n\"'\\") {
		return strconv.Quote(s)
	}
	return s
}

// installHint tells which Debian package ships the program name.
func installHint(name string) string {
	if pkg := packageFor(filepath.Base(name)); pkg != "" {
		return "install the " + pkg + " package"
	}
	return "install the package that provides " + filepath.Base(name)
}

func packageFor(name string) string {
	switch name {
	case "mdadm":
		return "mdadm"
	case "blkid", "wipefs", "lsblk", "losetup", "blockdev", "findmnt":
		return "util-linux"
	case "dmsetup":
		return "dmsetup"
	case "nvme":
		return "nvme-cli"
	case "smartctl":
		return "smartmontools"
	case "mkfs.ext4", "e2fsck", "resize2fs", "tune2fs":
		return "e2fsprogs"
	case "mkfs.xfs", "xfs_growfs", "xfs_repair":
		return "xfsprogs"
	default:
		return ""
	}
}
