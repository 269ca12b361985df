// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"syscall"
	"time"

	"github.com/digitalocean/go-qemu/qmp"
)

// The guest's disks are files on the host, and the host's own disk can
// fail: a CI machine's file system fills up, or its virtual disk returns
// EIO for a moment. By default qemu passes such an error to the guest as a
// failed write, and a test then reports a failure of the product (dm-log-
// writes stops logging, fio's writer dies) that the product never had. So
// every drive is started with werror=stop and rerror=stop: on a host error
// qemu pauses the guest, keeps the failed request and sends a
// BLOCK_IO_ERROR event on its QMP socket. hostWatch reads those events,
// logs each one, and resumes the guest after a short wait, when qemu
// submits the request again; the guest only sees a slow disk, as behind a
// SAN path that retries. An error that lasts past Config.HostIOErrorWait
// ends the VM, and every call on it then fails with a hostIOError that
// names the image, the host's reason and how long it was retried, instead
// of hanging with the guest paused.

// defaultHostIOErrorWait is Config.HostIOErrorWait's default.
const defaultHostIOErrorWait = 60 * time.Second

// hostIORetryQuiet is how long a guest must run without a new host error
// after a resume for the next error to start a new retry window.
const hostIORetryQuiet = 10 * time.Second

// HostIOError is one failed request of a guest disk on the host, as qemu
// reported it.
type HostIOError struct {
	Time      time.Time
	Disk      string // guest name, vda...
	Path      string // host image
	Operation string // read or write
	Reason    string // the host's error, e.g. "Input/output error"
	NoSpace   bool   // the host file system was full (ENOSPC)
}

func (e HostIOError) String() string {
	s := fmt.Sprintf("%s of %s (%s) failed on the host: %s", e.Operation, e.Disk, e.Path, e.Reason)
	if e.NoSpace {
		s += " (the host file system is full)"
	}
	return s
}

// hostIOError ends a VM whose host disk kept failing.
type hostIOError struct {
	last    HostIOError
	retried time.Duration
	resumes int
}

func (e *hostIOError) Error() string {
	return fmt.Sprintf("the test machine's disk failed, not the guest: %s; the guest was paused and resumed %d times over %s and the error did not clear, so the harness stopped qemu",
		e.last, e.resumes, e.retried.Round(time.Millisecond))
}

// ErrHostIO marks an error of a VM call that failed because the host's disk
// under a guest disk kept failing (see Config.HostIOErrorWait).
var ErrHostIO = errors.New("host I/O error")

func (e *hostIOError) Is(target error) bool { return target == ErrHostIO }

// hostWatch follows one qemu's block errors; see the comment at the top.
type hostWatch struct {
	log   *slog.Logger
	disks []Disk // in guest order
	wait  time.Duration
	// stop ends the VM when an error does not clear; it receives the
	// error that calls on the VM report from then on.
	stop func(error)

	mu     sync.Mutex
	errs   []HostIOError
	fatal  *hostIOError
	first  time.Time // first error of the current retry window
	resume time.Time // last resume
	n      int       // resumes in the current window
	timer  *time.Timer
}

// connectQMP connects to qemu's QMP socket (giving up when ctx ends) and
// follows its block errors until done is closed (qemu has exited).
func (w *hostWatch) connectQMP(ctx context.Context, socket string, done <-chan struct{}) error {
	var mon *qmp.SocketMonitor
	for {
		var err error
		mon, err = qmp.NewSocketMonitor("unix", socket, time.Second)
		if err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("connect to qemu's QMP socket: %w", ctx.Err())
		case <-done:
			return errors.New("qemu exited at start")
		case <-time.After(20 * time.Millisecond):
		}
	}
	if err := mon.Connect(); err != nil {
		mon.Disconnect()
		return fmt.Errorf("QMP handshake: %w", err)
	}
	events, err := mon.Events(ctx)
	if err != nil {
		mon.Disconnect()
		return fmt.Errorf("QMP events: %w", err)
	}
	cont := func() error {
		_, err := mon.Run([]byte(`{"execute":"cont"}`))
		return err
	}
	go func() {
		// The monitor closes events when qemu exits; its reader blocks
		// until each event is taken, so this loop drains them all.
		for e := range events {
			if e.Event == "BLOCK_IO_ERROR" {
				w.failed(parseBlockIOError(e, w.disks), cont)
			}
		}
	}()
	go func() {
		<-done
		mon.Disconnect()
	}()
	return nil
}

// parseBlockIOError reads a BLOCK_IO_ERROR event of a drive named by
// qemuArgs ("disk<i>").
func parseBlockIOError(e qmp.Event, disks []Disk) HostIOError {
	str := func(k string) string { s, _ := e.Data[k].(string); return s }
	h := HostIOError{
		Time:      time.Unix(e.Timestamp.Seconds, e.Timestamp.Microseconds*1000),
		Disk:      str("device"),
		Operation: str("operation"),
		Reason:    str("reason"),
	}
	h.NoSpace, _ = e.Data["nospace"].(bool)
	var i int
	if _, err := fmt.Sscanf(h.Disk, "disk%d", &i); err == nil && i >= 0 && i < len(disks) {
		h.Disk, h.Path = guestDiskNames(disks)[i], disks[i].Path
	}
	if h.Reason == "" && h.NoSpace {
		h.Reason = syscall.ENOSPC.Error()
	}
	return h
}

// guestDiskNames are the kernel's names of disks, in Config order: the
// virtio disks vda, vdb... counted among themselves, the NVMe disks
// nvme0n1, nvme1n1... among theirs.
func guestDiskNames(disks []Disk) []string {
	names := make([]string, len(disks))
	virtio, nvme := 0, 0
	for i, d := range disks {
		if d.NVMe {
			names[i] = fmt.Sprintf("nvme%dn1", nvme)
			nvme++
			continue
		}
		names[i] = GuestDiskName(virtio)
		virtio++
	}
	return names
}

// GuestDiskName is the kernel's name for the guest's i-th virtio disk
// (0-based, in Config order, the root disk of a systemd boot last): vda
// ... vdz, vdaa ... (NVMe disks have names of their own: Disk.NVMe).
func GuestDiskName(i int) string {
	name := ""
	for i++; i > 0; i = (i - 1) / 26 {
		name = string(rune('a'+(i-1)%26)) + name
	}
	return "vd" + name
}

// failed records a host error and schedules the resume that retries it,
// or ends the VM when the error has outlasted w.wait.
func (w *hostWatch) failed(h HostIOError, cont func() error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.errs = append(w.errs, h)
	if w.fatal != nil {
		return
	}
	now := time.Now()
	if w.first.IsZero() || (!w.resume.IsZero() && now.Sub(w.resume) > hostIORetryQuiet) {
		w.first, w.n = now, 0
	}
	if w.timer != nil {
		// A burst: every request in flight fails; one resume retries all.
		return
	}
	if elapsed := now.Sub(w.first); elapsed >= w.wait {
		w.fatal = &hostIOError{last: h, retried: elapsed, resumes: w.n}
		w.log.Error("host I/O error did not clear: stopping the VM", "error", w.fatal)
		go w.stop(w.fatal)
		return
	}
	delay := min(250*time.Millisecond<<min(w.n, 5), 8*time.Second, w.wait-now.Sub(w.first))
	w.log.Warn("host I/O error: guest paused, resuming to retry", "disk", h.Disk, "image", h.Path,
		"op", h.Operation, "reason", h.Reason, "nospace", h.NoSpace, "retry_in", delay)
	w.timer = time.AfterFunc(delay, func() {
		w.mu.Lock()
		w.timer, w.resume = nil, time.Now()
		w.n++
		w.mu.Unlock()
		if err := cont(); err != nil {
			w.log.Warn("resume after a host I/O error", "err", err)
		}
	})
}

// errors returns every host error seen so far.
func (w *hostWatch) errors() []HostIOError {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]HostIOError(nil), w.errs...)
}
