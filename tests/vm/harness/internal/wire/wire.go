// SPDX-License-Identifier: Apache-2.0

// Package wire owns the protocol between the VM harness (tests/vm/harness, on
// the host) and its guest agent (tests/vm/harness/agent): newline-delimited JSON over a
// virtio-serial port, and the kernel command-line parameters the harness
// passes to the guest.
//
// Every request carries an ID chosen by the host; the agent answers each
// request with exactly one Response carrying the same ID, in any order:
// requests run concurrently. Stdout and Stderr are byte strings (base64 in
// JSON), so binary output survives the trip.
package wire

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// PortName is the virtio-serial port name of the control channel
// (/sys/class/virtio-ports/*/name in the guest).
const PortName = "tc.ctl"

// AckDevice is the guest's ack channel: the second serial port, which qemu
// writes to a host file. The agent puts it in raw mode.
const AckDevice = "/dev/ttyS1"

// ScratchDir is the guest's scratch space: a tmpfs that the initramfs
// /init mounts and the agent names in TMPDIR for every command. It lives
// under /run, which the guest mounts afresh anyway, so that the guest's /tmp
// stays the host's (through the overlay) and a checkout under /tmp is
// visible to the guest.
const ScratchDir = "/run/scratch"

// Kernel command-line parameters read by the initramfs /init and the agent.
const (
	ParamAgent = "tc.agent" // absolute host path of the agent binary
	ParamName  = "tc.name"  // guest hostname
	ParamAddr  = "tc.addr"  // CIDR address for eth0, e.g. 10.0.0.1/24
	// ParamInsmod lists out-of-tree modules (absolute host paths of .ko
	// files, comma-separated) that the agent loads with insmod, in order,
	// after the runtime modules of kernel/modules.txt.
	ParamInsmod = "tc.insmod"
	// ParamRoot names the disk (e.g. vdf) holding the persistent upper
	// layer of the guest's root. Its presence means a systemd boot: the
	// initramfs hands over to Debian's systemd, which runs udev and starts
	// the agent as a unit (harness.SystemdBoot).
	ParamRoot = "tc.root"
)

// AgentUnit is the unit the initramfs writes for a systemd boot: systemd
// starts the agent with it early in boot.
const AgentUnit = "tc-agent.service"

// Op is the kind of a request.
type Op string

const (
	OpRun      Op = "run"      // run Argv, or Shell with sh -c (the default op)
	OpPing     Op = "ping"     // liveness; the response's Error reports a failed agent start
	OpCancel   Op = "cancel"   // cancel the running request Target
	OpPoweroff Op = "poweroff" // sync and power the guest off; may never be answered
)

// MaxLine bounds one encoded message; output past MaxOutput per stream is
// cut by the agent, so responses stay well below it.
const (
	MaxLine   = 256 << 20
	MaxOutput = 64 << 20
)

// Request is one host-to-guest message.
type Request struct {
	ID        uint64   `json:"id"`
	Op        Op       `json:"op,omitempty"`
	Argv      []string `json:"argv,omitempty"`
	Shell     string   `json:"shell,omitempty"`
	Env       []string `json:"env,omitempty"`        // KEY=VALUE added to the agent's environment
	Dir       string   `json:"dir,omitempty"`        // working directory, default /
	TimeoutMS int64    `json:"timeout_ms,omitempty"` // 0: no limit but cancel
	Target    uint64   `json:"target,omitempty"`     // OpCancel: the ID to cancel
}

// Validate reports a request the agent must refuse.
func (r *Request) Validate() error {
	if r.ID == 0 {
		return errors.New("request without id")
	}
	switch r.Op {
	case "", OpRun:
		if (len(r.Argv) == 0) == (r.Shell == "") {
			return fmt.Errorf("request %d: want exactly one of argv and shell", r.ID)
		}
	case OpPing, OpPoweroff:
	case OpCancel:
		if r.Target == 0 {
			return fmt.Errorf("request %d: cancel without target", r.ID)
		}
	default:
		return fmt.Errorf("request %d: unknown op %q", r.ID, r.Op)
	}
	if r.TimeoutMS < 0 {
		return fmt.Errorf("request %d: negative timeout_ms", r.ID)
	}
	return nil
}

// Response is the guest's answer to one request. Error is set when the
// command could not be run or did not finish (start failure, timeout,
// cancel); a command that ran and failed only has a non-zero ExitCode
// (128+signal for a command killed by a signal).
type Response struct {
	ID       uint64 `json:"id"`
	ExitCode int    `json:"exit_code"`
	Stdout   []byte `json:"stdout,omitempty"`
	Stderr   []byte `json:"stderr,omitempty"`
	Error    string `json:"error,omitempty"`
}

// Encode writes v as one JSON line with a single Write call. Callers sharing
// a writer serialize their calls to Encode.
func Encode(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// ErrBadMessage is wrapped by Decode's error for a line that is not a valid
// message; the Decoder can go on reading after it. Any other error comes
// from the underlying reader.
var ErrBadMessage = errors.New("wire: bad message")

// Decoder reads JSON lines.
type Decoder struct{ r *bufio.Reader }

// NewDecoder returns a Decoder reading from r.
func NewDecoder(r io.Reader) *Decoder { return &Decoder{r: bufio.NewReaderSize(r, 64<<10)} }

// Decode reads the next non-empty line into v. A line longer than MaxLine
// or that is not valid JSON is an error; the decoder stays usable after a
// bad line (the line is consumed).
func (d *Decoder) Decode(v any) error {
	for {
		line, err := d.readLine()
		if err != nil {
			return err
		}
		if len(strings.TrimSpace(string(line))) == 0 {
			continue
		}
		if err := json.Unmarshal(line, v); err != nil {
			return fmt.Errorf("%w %.80q: %v", ErrBadMessage, line, err)
		}
		return nil
	}
}

func (d *Decoder) readLine() ([]byte, error) {
	var buf []byte
	for {
		chunk, err := d.r.ReadSlice('\n')
		if len(buf)+len(chunk) > MaxLine {
			// Drop the rest of the overlong line, then report it.
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = d.r.ReadSlice('\n')
			}
			return nil, fmt.Errorf("%w: longer than %d bytes", ErrBadMessage, MaxLine)
		}
		buf = append(buf, chunk...)
		switch {
		case err == nil:
			return buf, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(buf) > 0:
			return nil, io.ErrUnexpectedEOF
		default:
			return nil, err
		}
	}
}

// ParseCmdline splits a kernel command line (/proc/cmdline) into its
// key=value parameters; a bare word maps to "". Later values win.
func ParseCmdline(cmdline string) map[string]string {
	params := map[string]string{}
	for _, f := range strings.Fields(cmdline) {
		k, v, _ := strings.Cut(f, "=")
		params[k] = v
	}
	return params
}
