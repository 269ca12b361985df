// SPDX-License-Identifier: Apache-2.0

package nvmeof

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const (
	subNQN   = "nqn.2014-08.io.tidecache:replica:0b5e2f4c"
	hostNQN  = "nqn.2014-08.io.tidecache:node:a"
	testUUID = "0b5e2f4c-1111-4222-8333-944455556666"
)

// newConfigFS returns a directory laid out as nvmet's configfs root.
func newConfigFS(t *testing.T) Target {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{"hosts", "subsystems", "ports"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return Target{Root: root, rmdir: os.RemoveAll}
}

func attr(t *testing.T, p string) string {
	t.Helper()
	v, err := readAttr(p)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestExport(t *testing.T) {
	tg := newConfigFS(t)
	e := Export{NQN: subNQN, Device: "/dev/mapper/tc-pool-replica", HostNQN: hostNQN, Addr: "10.77.0.2", Port: 4420, UUID: testUUID}
	for range 2 { // the second run finds everything in place
		if err := tg.Export(e); err != nil {
			t.Fatal(err)
		}
	}
	subsys := filepath.Join(tg.Root, "subsystems", subNQN)
	for p, want := range map[string]string{
		filepath.Join(subsys, "attr_allow_any_host"):            "0",
		filepath.Join(subsys, "namespaces", "1", "device_path"): e.Device,
		filepath.Join(subsys, "namespaces", "1", "enable"):      "1",
		filepath.Join(subsys, "namespaces", "1", "device_uuid"): testUUID,
		filepath.Join(subsys, "attr_serial"):                    "0b5e2f4c111142228333",
		filepath.Join(tg.Root, "ports", "4420", "addr_traddr"):  "10.77.0.2",
		filepath.Join(tg.Root, "ports", "4420", "addr_trsvcid"): "4420",
		filepath.Join(tg.Root, "ports", "4420", "addr_trtype"):  "tcp",
	} {
		if got := attr(t, p); got != want {
			t.Errorf("%s = %q, want %q", p, got, want)
		}
	}
	for link, target := range map[string]string{
		filepath.Join(subsys, "allowed_hosts", hostNQN):               filepath.Join(tg.Root, "hosts", hostNQN),
		filepath.Join(tg.Root, "ports", "4420", "subsystems", subNQN): subsys,
	} {
		if got, err := os.Readlink(link); err != nil || got != target {
			t.Errorf("link %s -> %q (%v), want %s", link, got, err, target)
		}
	}

	other := e
	other.Device = "/dev/sdz"
	if err := tg.Export(other); err == nil || !strings.Contains(err.Error(), "already serves /dev/mapper/tc-pool-replica") {
		t.Errorf("export of another device under the same NQN: %v, want a refusal", err)
	}
	moved := e
	moved.NQN, moved.Addr = subNQN+"-2", "10.77.0.9"
	if err := tg.Export(moved); err == nil || !strings.Contains(err.Error(), "addr_traddr") {
		t.Errorf("export on a port that listens elsewhere: %v, want a refusal", err)
	}

	if err := tg.Unexport(subNQN); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{subsys, filepath.Join(tg.Root, "ports", "4420", "subsystems", subNQN)} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s left after unexport (%v)", p, err)
		}
	}
	if err := tg.Unexport(subNQN); err != nil {
		t.Errorf("second unexport: %v", err)
	}
}

func TestExportValidates(t *testing.T) {
	tg := newConfigFS(t)
	good := Export{NQN: subNQN, Device: "/dev/vdb", HostNQN: hostNQN, Addr: "10.0.0.1", Port: 4420, UUID: testUUID}
	for _, c := range []struct {
		edit func(*Export)
		want string
	}{
		{func(e *Export) { e.NQN = "replica-1" }, "subsystem NQN"},
		{func(e *Export) { e.NQN = "nqn.2014-08.io.tidecache:a/b" }, "subsystem NQN"},
		{func(e *Export) { e.HostNQN = "" }, "host NQN"},
		{func(e *Export) { e.Device = "vdb" }, "absolute path"},
		{func(e *Export) { e.Addr = "" }, "address"},
		{func(e *Export) { e.Port = 0 }, "port 0"},
		{func(e *Export) { e.UUID = "replica-1" }, "namespace UUID"},
	} {
		e := good
		c.edit(&e)
		if err := tg.Export(e); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Export(%+v) = %v, want an error naming %q", e, err, c.want)
		}
	}
	if err := (Target{Root: filepath.Join(t.TempDir(), "nope")}).Export(good); err == nil || !strings.Contains(err.Error(), "modprobe nvmet-tcp") {
		t.Errorf("export without configfs: %v, want the modprobe hint", err)
	}
}

func TestConnectOptions(t *testing.T) {
	got := ConnectOptions(Remote{NQN: subNQN, HostNQN: hostNQN, Addr: "10.77.0.2", Port: 4420}, PeerLegTimeouts)
	want := "transport=tcp,traddr=10.77.0.2,trsvcid=4420,nqn=" + subNQN + ",hostnqn=" + hostNQN + ",hostid=" + HostID(hostNQN) +
		",keep_alive_tmo=2,reconnect_delay=1,fast_io_fail_tmo=1,ctrl_loss_tmo=10"
	if got != want {
		t.Errorf("ConnectOptions =\n%s\nwant\n%s", got, want)
	}
	if got := ConnectOptions(Remote{NQN: subNQN, HostNQN: hostNQN, Addr: "h", Port: 1}, Timeouts{CtrlLoss: 1500 * time.Millisecond}); !strings.HasSuffix(got, ",ctrl_loss_tmo=2") {
		t.Errorf("a timeout is rounded up to whole seconds: %s", got)
	}
	// A leg whose I/O must wait for the daemon: no fast failure, and the
	// controller is never given up by the kernel.
	got = ConnectOptions(Remote{NQN: subNQN, HostNQN: hostNQN, Addr: "h", Port: 1}, Timeouts{KeepAlive: 2 * time.Second, ReconnectDelay: time.Second, CtrlLoss: -1})
	if !strings.HasSuffix(got, ",keep_alive_tmo=2,reconnect_delay=1,ctrl_loss_tmo=-1") || strings.Contains(got, "fast_io_fail") {
		t.Errorf("ConnectOptions of a waiting leg = %s", got)
	}
}

// TestDevice finds the namespace's disk through the subsystem (native
// multipath) or the controller, never a hidden per-path disk.
func TestDevice(t *testing.T) {
	sys := t.TempDir()
	mk := func(dir string, nqn string, entries ...string) {
		t.Helper()
		p := filepath.Join(sys, dir)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(p, "subsysnqn"), []byte(nqn+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if err := os.Mkdir(filepath.Join(p, e), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	mk("class/nvme/nvme0", "nqn.2014.08.org.nvmexpress:uuid:local-ssd", "nvme0n1")
	mk("class/nvme/nvme1", subNQN, "nvme1c1n1")
	mk("class/nvme-subsystem/nvme-subsys1", subNQN, "nvme1", "nvme1n1")
	mk("class/nvme/nvme2", subNQN+"-flat", "nvme2n1")
	in := Initiator{SysRoot: sys, DevRoot: "/dev"}
	for nqn, want := range map[string]string{subNQN: "/dev/nvme1n1", subNQN + "-flat": "/dev/nvme2n1", subNQN + "-none": ""} {
		dev, ok, err := in.Device(nqn)
		if err != nil || dev != want || ok != (want != "") {
			t.Errorf("Device(%s) = %q, %v, %v; want %q", nqn, dev, ok, err, want)
		}
	}
	if ctrls, _ := in.controllers(subNQN); len(ctrls) != 1 || ctrls[0] != "nvme1" {
		t.Errorf("controllers = %v, want [nvme1]", ctrls)
	}
	// A controller being deleted (its peer gone past ctrl_loss_tmo) does
	// not count: Attach connects anew.
	if err := os.WriteFile(filepath.Join(sys, "class/nvme/nvme1/state"), []byte("deleting\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if ctrls, _ := in.controllers(subNQN); len(ctrls) != 0 {
		t.Errorf("controllers = %v with nvme1 deleting, want none", ctrls)
	}
}

// TestUnexportCutsTheHostBeforeDisablingTheNamespace: Unexport removes the
// subsystem's port links while its namespace is still enabled, and only
// then disables it. The other order answers a host that is still
// connected with "invalid namespace" errors, which the host's mirror
// takes as a failed leg, going on without it, instead of a lost
// connection, under which its writes wait (issue 22, finding 1).
func TestUnexportCutsTheHostBeforeDisablingTheNamespace(t *testing.T) {
	tg := newConfigFS(t)
	e := Export{NQN: subNQN, Device: "/dev/mapper/tc-pool-replica", HostNQN: hostNQN, Addr: "10.0.0.1", Port: 4420, UUID: testUUID}
	if err := tg.Export(e); err != nil {
		t.Fatal(err)
	}
	enable := filepath.Join(tg.Root, "subsystems", subNQN, "namespaces", "1", "enable")
	var order []string
	rmdir := tg.rmdir
	tg.rmdir = func(p string) error {
		on, _ := os.ReadFile(enable)
		rel, _ := filepath.Rel(tg.Root, p)
		order = append(order, fmt.Sprintf("%s (namespace enable=%s)", rel, strings.TrimSpace(string(on))))
		return rmdir(p)
	}
	if err := tg.Unexport(subNQN); err != nil {
		t.Fatal(err)
	}
	want := []string{
		filepath.Join("ports", "4420", "subsystems", subNQN) + " (namespace enable=1)",
		filepath.Join("subsystems", subNQN, "namespaces", "1") + " (namespace enable=0)",
	}
	if len(order) < 2 || order[0] != want[0] || order[1] != want[1] {
		t.Fatalf("removal order %q, want it to start with %q", order, want)
	}
}

// TestDetachNeverDeletesAReconnectingController: Detach deletes a
// controller only while it is live (or dead). Linux 6.1 hangs for good
// deleting one in the middle of a reconnect attempt (the attempt leaves
// its I/O queues quiesced, the deletion waits for their I/O), which hung
// a mirror's writes and the daemon in CI with a flapping peer link. A
// reconnecting controller is told to give up (ctrl_loss_tmo 0) and waited
// for: the kernel removes it after its attempt fails, or it comes back
// live and is deleted then.
func TestDetachNeverDeletesAReconnectingController(t *testing.T) {
	const other = subNQN + "-other"
	tests := []struct {
		name  string
		state string
		// then is what the kernel does 150 ms into the wait: a new
		// state, or "" to remove the controller; "stay" does nothing.
		then       string
		wantDelete bool
		wantErr    string
	}{
		{name: "live", state: "live", then: "stay", wantDelete: true},
		{name: "dead", state: "dead", then: "stay", wantDelete: true},
		{name: "reconnects", state: "connecting", then: "live", wantDelete: true},
		{name: "gives up", state: "connecting", then: ""},
		{name: "reset, then gives up", state: "resetting", then: ""},
		{name: "being deleted", state: "deleting", then: ""},
		{name: "reconnecting for ever", state: "connecting", then: "stay", wantErr: "nvme1 connecting not gone yet"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sys := t.TempDir()
			ctrl := func(name, nqn, state string) string {
				dir := filepath.Join(sys, "class/nvme", name)
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				for f, v := range map[string]string{"subsysnqn": nqn, "state": state, "ctrl_loss_tmo": "off"} {
					if err := os.WriteFile(filepath.Join(dir, f), []byte(v+"\n"), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				return dir
			}
			dir := ctrl("nvme1", subNQN, tc.state)
			bystander := ctrl("nvme2", other, "connecting")
			deleted := func() bool {
				_, err := os.Stat(filepath.Join(dir, "delete_controller"))
				return err == nil
			}

			// The kernel's side: while the controller is not live,
			// nothing may delete it; then it changes state or goes.
			kernel := make(chan string, 1)
			go func() {
				time.Sleep(150 * time.Millisecond)
				switch {
				case tc.state != "live" && tc.state != "dead" && deleted():
					kernel <- "deleted while " + tc.state
					return
				case tc.then == "":
					if got, _ := readAttr(filepath.Join(dir, "ctrl_loss_tmo")); got != "0" {
						kernel <- "not told to give up: ctrl_loss_tmo " + got
						return
					}
					_ = os.RemoveAll(dir)
				case tc.then != "stay":
					_ = os.WriteFile(filepath.Join(dir, "state"), []byte(tc.then+"\n"), 0o644)
				}
				kernel <- ""
			}()

			ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
			defer cancel()
			err := Initiator{SysRoot: sys, Poll: 10 * time.Millisecond}.Detach(ctx, subNQN)
			if msg := <-kernel; msg != "" {
				t.Fatal(msg)
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Detach: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("Detach: %v, want an error saying %q", err, tc.wantErr)
			}
			if tc.then != "" && deleted() != tc.wantDelete {
				t.Errorf("delete_controller written: %v, want %v", deleted(), tc.wantDelete)
			}
			if _, err := os.Stat(filepath.Join(bystander, "delete_controller")); err == nil {
				t.Error("another subsystem's controller was deleted")
			}
			if got := attr(t, filepath.Join(bystander, "ctrl_loss_tmo")); got != "off" {
				t.Errorf("another subsystem's controller: ctrl_loss_tmo %s, want it untouched", got)
			}
		})
	}
}

// TestAttachKeepsAControllerAsAsked: a controller Attach keeps (live, or
// reconnecting on its own) reconnects as the timeouts say again, also
// after a Detach that timed out told it to give up (ctrl_loss_tmo 0):
// else the leg would drop out of its mirror at the next blip.
func TestAttachKeepsAControllerAsAsked(t *testing.T) {
	for _, tc := range []struct {
		name  string
		state string
		t     Timeouts
		want  string
	}{
		{"for ever", "live", Timeouts{CtrlLoss: -1}, "-1"},
		{"ten seconds", "live", PeerLegTimeouts, "10"},
		{"the kernel's default", "live", Timeouts{}, "600"},
		// A Detach may be waiting for it to give up: left alone, and
		// Attach waits for it (here, in vain).
		{"reconnecting", "connecting", Timeouts{CtrlLoss: -1}, "0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sys := t.TempDir()
			for dir, files := range map[string]map[string]string{
				"class/nvme/nvme1":                          {"subsysnqn": subNQN, "state": tc.state, "ctrl_loss_tmo": "0"},
				"class/nvme/nvme1/nvme1c1n1":                {},
				"class/nvme-subsystem/nvme-subsys1":         {"subsysnqn": subNQN},
				"class/nvme-subsystem/nvme-subsys1/nvme1n1": {},
			} {
				if err := os.MkdirAll(filepath.Join(sys, dir), 0o755); err != nil {
					t.Fatal(err)
				}
				for f, v := range files {
					if err := os.WriteFile(filepath.Join(sys, dir, f), []byte(v+"\n"), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			in := Initiator{Fabrics: filepath.Join(sys, "no-fabrics"), SysRoot: sys, DevRoot: "/dev", Poll: 10 * time.Millisecond}
			dev, err := in.Attach(ctx, Remote{NQN: subNQN, HostNQN: hostNQN, Addr: "10.0.0.2", Port: 4420}, tc.t)
			if live := tc.state == "live"; live && (err != nil || dev != "/dev/nvme1n1") || !live && err == nil {
				t.Fatalf("Attach = %q, %v; want the kept controller's /dev/nvme1n1 once it is live", dev, err)
			}
			if got := attr(t, filepath.Join(sys, "class/nvme/nvme1/ctrl_loss_tmo")); got != tc.want {
				t.Errorf("ctrl_loss_tmo of the kept controller = %s, want %s", got, tc.want)
			}
		})
	}
}
