// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// acker writes acknowledgement lines to the ack channel.
type acker struct {
	f   *os.File
	fd  int
	tty bool
	pre string // "<tag> <cycle> ", or "" for the legacy raw format
}

// openAcker opens the ack channel: the VM's serial port or, in host tests,
// a plain file.
func openAcker(path, tag string, cycle uint64) (*acker, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|unix.O_NOCTTY, 0o644)
	if err != nil {
		return nil, err
	}
	a := &acker{f: f, fd: int(f.Fd())}
	_, err = unix.IoctlGetTermios(a.fd, unix.TCGETS)
	a.tty = err == nil
	if tag != "" {
		a.pre = tag + " " + strconv.FormatUint(cycle, 10) + " "
	}
	return a, nil
}

// ack writes one line in a single write() (so that writers sharing the
// port never interleave inside a line) and returns only once it has left
// the guest: tcdrain on a tty, fsync on a file.
func (a *acker) ack(format string, args ...any) error {
	b := []byte(a.pre + fmt.Sprintf(format, args...) + "\n")
	for {
		n, err := unix.Write(a.fd, b)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("ack: %w", err)
		}
		if n != len(b) {
			return fmt.Errorf("ack: short write (%d of %d bytes)", n, len(b))
		}
		break
	}
	return a.drain()
}

func (a *acker) drain() error {
	if !a.tty {
		return a.f.Sync()
	}
	for {
		// TCSBRK with a non-zero argument is tcdrain(3): wait until the
		// UART has sent everything written so far.
		err := unix.IoctlSetInt(a.fd, unix.TCSBRK, 1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("ack: tcdrain: %w", err)
		}
		return nil
	}
}

func (a *acker) Close() error { return a.f.Close() }

// readAcks returns the fields after "<tag> <cycle>" of every complete line
// for that tag and cycle in an ack log. A line cut short by the power cut
// has no newline and was never acknowledged (its tcdrain had not returned).
func readAcks(path, tag string, cycle uint64) ([][]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		b = b[:i+1]
	} else {
		b = nil
	}
	var out [][]string
	c := strconv.FormatUint(cycle, 10)
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 3 || f[0] != tag || f[1] != c {
			continue
		}
		out = append(out, f[2:])
	}
	return out, sc.Err()
}

// atoiFields parses every field as a non-negative integer.
func atoiFields(f []string) ([]int64, error) {
	out := make([]int64, len(f))
	for i, s := range f {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("bad ack field %q", s)
		}
		out[i] = v
	}
	return out, nil
}
