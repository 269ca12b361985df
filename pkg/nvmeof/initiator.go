// SPDX-License-Identifier: Apache-2.0

package nvmeof

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Initiator attaches exports with the kernel's NVMe host driver
// (nvme-tcp).
type Initiator struct {
	// Fabrics is the kernel's connect device, /dev/nvme-fabrics.
	Fabrics string
	// SysRoot is where sysfs is mounted, "/sys" on a real system.
	SysRoot string
	// DevRoot is where the block device nodes are, "/dev".
	DevRoot string
	// Poll is how often Attach looks for the namespace to appear.
	Poll time.Duration
}

// NewInitiator returns an Initiator on the system's devices.
func NewInitiator() Initiator {
	return Initiator{Fabrics: "/dev/nvme-fabrics", SysRoot: "/sys", DevRoot: "/dev", Poll: 100 * time.Millisecond}
}

// Timeouts bound how long I/O to a peer that stopped answering waits. The
// kernel's defaults retry for 600 s, during which a mirror's writes stall:
// a peer leg must fail in seconds so dm-raid goes on with the local leg.
type Timeouts struct {
	// KeepAlive is how long a silent peer goes unnoticed.
	KeepAlive time.Duration
	// ReconnectDelay is the pause between reconnect attempts.
	ReconnectDelay time.Duration
	// FastIOFail fails the I/O queued on a reconnecting controller after
	// this long, while reconnects go on.
	FastIOFail time.Duration
	// CtrlLoss gives up on the controller (and removes its namespace)
	// after this long without a connection; negative: never (the I/O
	// waits until someone deletes the controller).
	CtrlLoss time.Duration
}

// PeerLegTimeouts notice a silent peer through the 2 s keep-alive and then
// fail the I/O queued for it after 1 s more, so a mirror's writes go on
// with the local leg within seconds (TestReplicaPeerVolume measures it). The
// kernel keeps reconnecting every second for 10 attempts (ctrl_loss_tmo
// counts attempts of reconnect_delay, and each attempt at a dead address
// waits for its TCP connect to time out, so that is about 40 s): a peer
// back by then is reconnected by the kernel itself, with the namespace
// identity the export keeps (Export.UUID); later, Attach connects anew.
var PeerLegTimeouts = Timeouts{KeepAlive: 2 * time.Second, ReconnectDelay: time.Second, FastIOFail: time.Second, CtrlLoss: 10 * time.Second}

// Remote names an export to attach.
type Remote struct {
	NQN     string // the export's subsystem NQN
	HostNQN string // this host's NQN, the one the export allows
	Addr    string
	Port    int
	// Secret is the DH-HMAC-CHAP secret the export requires of this host
	// (pkg/nvmeauth); empty: the export requires none.
	Secret string
	// HostID is the host identifier to connect with; empty: HostID of
	// HostNQN (Attach takes the one live controllers of HostNQN use).
	HostID string
}

// Attach connects to the export, unless a controller of this subsystem
// is already connected, and returns the path of its namespace's block
// device once it appears. ctx bounds the wait.
func (in Initiator) Attach(ctx context.Context, r Remote, t Timeouts) (string, error) {
	if !validNQN(r.NQN) || !validNQN(r.HostNQN) {
		return "", fmt.Errorf("attach %q: subsystem and host NQNs must look like nqn.yyyy-mm.domain:name", r.NQN)
	}
	// A controller the kernel still has is kept: live, or reconnecting on
	// its own (then this waits for it). Without one, a namespace disk that
	// is still open (a mirror leg) has no path, so connect: it comes back
	// under its name.
	ctrls, err := in.controllers(r.NQN)
	if err != nil {
		return "", err
	}
	if len(ctrls) == 0 {
		if err := in.connect(r, t); err != nil {
			return "", err
		}
	}

	for {
		live, err := in.live(r.NQN)
		if err != nil {
			return "", err
		}
		if live {
			dev, ok, err := in.Device(r.NQN)
			if err != nil {
				return "", err
			}
			if ok {
				return dev, in.keepReconnecting(r.NQN, t)
			}
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("attach %s at %s:%d: no live controller with its namespace yet (controllers %v): %w", r.NQN, r.Addr, r.Port, ctrls, ctx.Err())
		case <-time.After(in.Poll):
		}
	}
}

// keepReconnecting sets the ctrl_loss_tmo of the subsystem's live
// controllers as t asks: one a Detach that did not wait for it to go told
// to give up (and which reconnected since) would drop its leg at the next
// blip. A controller still reconnecting is left as it is: a Detach may be
// waiting for it to give up.
func (in Initiator) keepReconnecting(nqn string, t Timeouts) error {
	ctrls, err := in.controllers(nqn)
	if err != nil {
		return err
	}
	tmo := cmp.Or(t.ctrlLossTmo(), kernelCtrlLossTmo)
	for _, c := range ctrls {
		dir := filepath.Join(in.SysRoot, "class", "nvme", c)
		if state, _ := readAttr(filepath.Join(dir, "state")); state != "live" {
			continue
		}
		if err := writeAttr(filepath.Join(dir, "ctrl_loss_tmo"), tmo); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("attach %s: controller %s: set ctrl_loss_tmo %s: %w", nqn, c, tmo, err)
		}
	}
	return nil
}

// Live reports whether a controller of the subsystem is connected.
func (in Initiator) Live(nqn string) (bool, error) { return in.live(nqn) }

// live reports whether a controller of the subsystem is connected.
func (in Initiator) live(nqn string) (bool, error) {
	ctrls, err := in.controllers(nqn)
	if err != nil {
		return false, err
	}
	for _, c := range ctrls {
		if state, _ := readAttr(filepath.Join(in.SysRoot, "class", "nvme", c, "state")); state == "live" {
			return true, nil
		}
	}
	return false, nil
}

// ConnectOptions returns the option string written to /dev/nvme-fabrics.
func ConnectOptions(r Remote, t Timeouts) string {
	secs := func(d time.Duration) string { return strconv.Itoa(int((d + time.Second - 1) / time.Second)) }
	opts := []string{
		"transport=tcp",
		"traddr=" + r.Addr,
		"trsvcid=" + strconv.Itoa(r.Port),
		"nqn=" + r.NQN,
		"hostnqn=" + r.HostNQN,
		"hostid=" + cmp.Or(r.HostID, HostID(r.HostNQN)),
	}
	if r.Secret != "" {
		opts = append(opts, "dhchap_secret="+r.Secret)
	}
	if t.KeepAlive > 0 {
		opts = append(opts, "keep_alive_tmo="+secs(t.KeepAlive))
	}
	if t.ReconnectDelay > 0 {
		opts = append(opts, "reconnect_delay="+secs(t.ReconnectDelay))
	}
	if t.FastIOFail > 0 {
		opts = append(opts, "fast_io_fail_tmo="+secs(t.FastIOFail))
	}
	if tmo := t.ctrlLossTmo(); tmo != "" {
		opts = append(opts, "ctrl_loss_tmo="+tmo)
	}
	return strings.Join(opts, ",")
}

// kernelCtrlLossTmo is the kernel's default ctrl_loss_tmo, in seconds.
const kernelCtrlLossTmo = "600"

// ctrlLossTmo is the kernel's ctrl_loss_tmo for t, in seconds, -1 to
// reconnect for ever; "" leaves the kernel's default (600 s).
func (t Timeouts) ctrlLossTmo() string {
	switch {
	case t.CtrlLoss < 0:
		return "-1"
	case t.CtrlLoss > 0:
		return strconv.Itoa(int((t.CtrlLoss + time.Second - 1) / time.Second))
	}
	return ""
}

// connect writes the connect string; the kernel answers on the same open
// file with "instance=N,cntlid=M" once the controller is live.
func (in Initiator) connect(r Remote, t Timeouts) error {
	f, err := os.OpenFile(in.Fabrics, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("attach %s: open %s (modprobe nvme-tcp): %w", r.NQN, in.Fabrics, err)
	}
	defer f.Close()
	r.HostID = cmp.Or(r.HostID, in.hostIDInUse(r.HostNQN))
	opts := ConnectOptions(r, t)
	if _, err := f.WriteString(opts); err != nil {
		why := "is the export there, and does it allow host " + r.HostNQN + "?"
		if r.Secret != "" {
			why += " Does it hold this host's current secret, and has this kernel NVMe in-band authentication (CONFIG_NVME_HOST_AUTH)?"
		}
		return fmt.Errorf("attach %s: connect to %s:%d: %w (%s)", r.NQN, r.Addr, r.Port, err, why)
	}
	buf := make([]byte, 256)
	n, err := f.Read(buf)
	if err != nil {
		return fmt.Errorf("attach %s: read connect reply: %w", r.NQN, err)
	}
	if !strings.HasPrefix(string(buf[:n]), "instance=") {
		return fmt.Errorf("attach %s: unexpected connect reply %q", r.NQN, buf[:n])
	}
	return nil
}

// hostIDInUse returns the host ID the kernel's controllers under hostNQN
// were connected with, "" if there are none. The kernel refuses a connect
// under a known host NQN with another ID; controllers connected by an
// older tidecached, without an ID of their own, carry the machine's
// default, and a new connect under the same NQN must use it too.
func (in Initiator) hostIDInUse(hostNQN string) string {
	dirs, _ := filepath.Glob(filepath.Join(in.SysRoot, "class", "nvme", "nvme*"))
	for _, d := range dirs {
		if got, _ := readAttr(filepath.Join(d, "hostnqn")); got != hostNQN {
			continue
		}
		if id, err := readAttr(filepath.Join(d, "hostid")); err == nil && validUUID(id) {
			return id
		}
	}
	return ""
}

// Detach disconnects every controller of the subsystem and waits until
// they are gone; its namespace's block device goes away with the last
// one. Detaching what is not attached is not an error. ctx bounds the
// wait.
//
// A controller is deleted only while live (or dead): Linux before 6.4
// can hang for good deleting one that is reconnecting. A reconnect
// attempt that has started its I/O queues when the deletion begins sees
// it, gives up and leaves them quiesced, and the deletion then waits for
// ever for the I/O queued in them, and so does the mirror whose leg
// that is (upstream "nvme: fix possible hang when removing a controller
// during error recovery"; seen on 6.1 with a flapping peer link). So a
// controller is first told to give up on reconnecting (ctrl_loss_tmo
// 0): one that is reconnecting is removed by the kernel itself once its
// attempt fails, or becomes live and is deleted then; one that is live
// and loses its connection after the look at its state is removed by
// the kernel without another attempt. No attempt runs while it is
// deleted. One still there when ctx ends goes by itself, or comes back
// live, and an Attach that finds it so sets its ctrl_loss_tmo back.
func (in Initiator) Detach(ctx context.Context, nqn string) error {
	told, deleted := map[string]bool{}, map[string]bool{}
	for {
		ctrls, err := in.controllersOf(nqn)
		if err != nil {
			return err
		}
		var waiting []string
		for _, c := range ctrls {
			if deleted[c] {
				continue
			}
			dir := filepath.Join(in.SysRoot, "class", "nvme", c)
			if !told[c] {
				if err := writeAttr(filepath.Join(dir, "ctrl_loss_tmo"), "0"); err != nil {
					if _, gone := readAttr(filepath.Join(dir, "state")); errors.Is(gone, fs.ErrNotExist) {
						continue
					}
					return fmt.Errorf("detach %s: tell controller %s to stop reconnecting: %w", nqn, c, err)
				}
				told[c] = true
			}
			state, err := readAttr(filepath.Join(dir, "state"))
			switch {
			case errors.Is(err, fs.ErrNotExist):
				continue
			case state == "live" || state == "dead":
				if err := writeAttr(filepath.Join(dir, "delete_controller"), "1"); err != nil && !errors.Is(err, fs.ErrNotExist) {
					return fmt.Errorf("detach %s: delete controller %s: %w", nqn, c, err)
				}
				deleted[c] = true
			default:
				// Reconnecting, being reset, created or removed:
				// the kernel ends it.
				waiting = append(waiting, c+" "+state)
			}
		}
		if len(waiting) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("detach %s: controllers %s not gone yet (a reconnecting one is removed once its attempt fails): %w",
				nqn, strings.Join(waiting, ", "), ctx.Err())
		case <-time.After(cmp.Or(in.Poll, 100*time.Millisecond)):
		}
	}
}

// Rekey gives the host's controllers connected to addr with a
// DH-HMAC-CHAP secret the new secret: the kernel keeps the secret a
// controller was connected with for its own reconnects, so once the
// exporter requires a new one, a controller left with the old one would
// fail its next reconnect. Writing the controller's dhchap_secret also
// makes it authenticate again at once, with the new secret. It returns
// the controllers changed; a controller connected without a secret (the
// kernel accepts none later) is left as it is.
func (in Initiator) Rekey(addr, hostNQN, secret string) ([]string, error) {
	dirs, err := filepath.Glob(filepath.Join(in.SysRoot, "class", "nvme", "nvme*"))
	if err != nil {
		return nil, err
	}
	var changed []string
	for _, d := range dirs {
		if got, _ := readAttr(filepath.Join(d, "hostnqn")); got != hostNQN {
			continue
		}
		if tr, _ := readAttr(filepath.Join(d, "transport")); tr != "tcp" {
			continue
		}
		address, _ := readAttr(filepath.Join(d, "address"))
		if !slices.Contains(strings.Split(address, ","), "traddr="+addr) {
			continue
		}
		cur, err := readAttr(filepath.Join(d, "dhchap_secret"))
		if err != nil || cur == "" || cur == "none" || cur == secret {
			continue
		}
		if err := writeAttr(filepath.Join(d, "dhchap_secret"), secret); err != nil {
			return changed, fmt.Errorf("give controller %s its new secret: %w", filepath.Base(d), err)
		}
		changed = append(changed, filepath.Base(d))
	}
	return changed, nil
}

// controllers lists the controllers (nvme0, nvme1, ...) of the subsystem
// that are or may again be live: not being deleted or dead.
func (in Initiator) controllers(nqn string) ([]string, error) {
	all, err := in.controllersOf(nqn)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(all, func(c string) bool {
		state, _ := readAttr(filepath.Join(in.SysRoot, "class", "nvme", c, "state"))
		return state == "deleting" || state == "deleting (no IO)" || state == "dead"
	}), nil
}

// controllersOf lists every controller of the subsystem, whatever its
// state, sorted.
func (in Initiator) controllersOf(nqn string) ([]string, error) {
	dirs, err := filepath.Glob(filepath.Join(in.SysRoot, "class", "nvme", "nvme*"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, d := range dirs {
		if got, err := readAttr(filepath.Join(d, "subsysnqn")); err == nil && got == nqn {
			out = append(out, filepath.Base(d))
		}
	}
	slices.Sort(out)
	return out, nil
}

// Device returns the block device of the subsystem's namespace: with
// native NVMe multipath (Debian's default) the subsystem's own disk
// (nvme<subsys>n1, listed under /sys/class/nvme-subsystem), else the
// controller's (nvme<ctrl>n1). ok is false while there is none.
func (in Initiator) Device(nqn string) (dev string, ok bool, err error) {
	subsystems, err := filepath.Glob(filepath.Join(in.SysRoot, "class", "nvme-subsystem", "nvme-subsys*"))
	if err != nil {
		return "", false, err
	}
	for _, s := range subsystems {
		if got, err := readAttr(filepath.Join(s, "subsysnqn")); err != nil || got != nqn {
			continue
		}
		if disk, ok := firstDisk(s); ok {
			return filepath.Join(in.DevRoot, disk), true, nil
		}
	}
	ctrls, err := in.controllers(nqn)
	if err != nil {
		return "", false, err
	}
	for _, c := range ctrls {
		if disk, ok := firstDisk(filepath.Join(in.SysRoot, "class", "nvme", c)); ok {
			return filepath.Join(in.DevRoot, disk), true, nil
		}
	}
	return "", false, nil
}

// firstDisk returns the namespace disk listed in a controller or subsystem
// directory: an entry nvme<N>n<M> (not a hidden per-path nvme<N>c<C>n<M>).
func firstDisk(dir string) (string, bool) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", false
	}
	for _, e := range entries {
		name := e.Name()
		rest, ok := strings.CutPrefix(name, "nvme")
		if !ok {
			continue
		}
		n, m, ok := strings.Cut(rest, "n")
		if ok && isDigits(n) && isDigits(m) {
			return name, true
		}
	}
	return "", false
}

func isDigits(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}
