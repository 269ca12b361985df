// SPDX-License-Identifier: Apache-2.0

package nvmeof

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const (
	secretA = "DHHC-1:00:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA:"
	secretB = "DHHC-1:00:BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB:"
)

// TestExportHostKey sets the host entry's key where the kernel has one,
// changes it on rotation, and refuses a key the kernel cannot check.
func TestExportHostKey(t *testing.T) {
	tg := newConfigFS(t)
	host := filepath.Join(tg.Root, "hosts", hostNQN)
	e := Export{NQN: subNQN, Device: "/dev/vdb", HostNQN: hostNQN, HostKey: secretA, Addr: "10.0.0.1", Port: 4420, UUID: testUUID}

	// A kernel without in-band authentication has no dhchap_key.
	if err := tg.Export(e); !errors.Is(err, ErrNoInBandAuth) {
		t.Fatalf("export with a key on a kernel without dhchap_key: %v, want ErrNoInBandAuth", err)
	}
	// configfs makes the attribute with the host entry.
	if err := os.WriteFile(filepath.Join(host, "dhchap_key"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{secretA, secretB} {
		e.HostKey = key
		if err := tg.Export(e); err != nil {
			t.Fatal(err)
		}
		if got := attr(t, filepath.Join(host, "dhchap_key")); got != key {
			t.Errorf("dhchap_key = %q, want %q", got, key)
		}
		if fi, err := os.Stat(filepath.Join(host, "dhchap_key")); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("dhchap_key mode %v (%v), want 0600", fi.Mode().Perm(), err)
		}
	}
	// No key given (a host that cannot authenticate): the entry is left.
	e.HostKey = ""
	if err := tg.Export(e); err != nil {
		t.Fatal(err)
	}
	if got := attr(t, filepath.Join(host, "dhchap_key")); got != secretB {
		t.Errorf("dhchap_key after an export without key = %q, want %q kept", got, secretB)
	}
}

func TestConnectOptionsSecret(t *testing.T) {
	got := ConnectOptions(Remote{NQN: subNQN, HostNQN: hostNQN, Addr: "h", Port: 1, Secret: secretA}, Timeouts{})
	if !strings.HasSuffix(got, ",hostnqn="+hostNQN+",hostid="+HostID(hostNQN)+",dhchap_secret="+secretA) {
		t.Errorf("ConnectOptions with a secret = %s", got)
	}
	if got := ConnectOptions(Remote{NQN: subNQN, HostNQN: hostNQN, Addr: "h", Port: 1}, Timeouts{}); strings.Contains(got, "dhchap") {
		t.Errorf("ConnectOptions without a secret = %s", got)
	}
}

// TestRekey gives the new secret only to this host's TCP controllers of
// that exporter which were connected with a secret.
func TestRekey(t *testing.T) {
	sys := t.TempDir()
	mk := func(name, host, transport, address, secret string) {
		d := filepath.Join(sys, "class", "nvme", name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for f, v := range map[string]string{"hostnqn": host, "transport": transport, "address": address, "dhchap_secret": secret} {
			if err := os.WriteFile(filepath.Join(d, f), []byte(v+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	mk("nvme0", hostNQN, "tcp", "traddr=10.0.0.1,trsvcid=4420,src_addr=10.0.0.2", secretA) // rekeyed
	mk("nvme1", hostNQN, "tcp", "traddr=10.0.0.11,trsvcid=4420", secretA)                  // another exporter
	mk("nvme2", hostNQN, "tcp", "traddr=10.0.0.1,trsvcid=4420", "none")                    // no secret
	mk("nvme3", hostNQN+"x", "tcp", "traddr=10.0.0.1,trsvcid=4420", secretA)               // another host NQN
	mk("nvme4", hostNQN, "pcie", "0000:00:04.0", "none")                                   // a local SSD
	mk("nvme5", hostNQN, "tcp", "traddr=10.0.0.1,trsvcid=4420", secretB)                   // already new
	in := Initiator{SysRoot: sys}
	changed, err := in.Rekey("10.0.0.1", hostNQN, secretB)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(changed, []string{"nvme0"}) {
		t.Errorf("Rekey changed %v, want [nvme0]", changed)
	}
	for name, want := range map[string]string{"nvme0": secretB, "nvme1": secretA, "nvme2": "none", "nvme3": secretA} {
		if got := attr(t, filepath.Join(sys, "class", "nvme", name, "dhchap_secret")); got != want {
			t.Errorf("%s dhchap_secret = %q, want %q", name, got, want)
		}
	}
}

// TestHostIDInUse: a connect under a host NQN takes the ID its live
// controllers use (an older daemon's, the machine's default), else none.
func TestHostIDInUse(t *testing.T) {
	sys := t.TempDir()
	d := filepath.Join(sys, "class", "nvme", "nvme0")
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	const old = "17391029-f049-49eb-a4a3-30c0534e84c4"
	for f, v := range map[string]string{"hostnqn": hostNQN, "hostid": old} {
		if err := os.WriteFile(filepath.Join(d, f), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	in := Initiator{SysRoot: sys}
	if got := in.hostIDInUse(hostNQN); got != old {
		t.Errorf("hostIDInUse = %q, want the live controller's %s", got, old)
	}
	if got := in.hostIDInUse(hostNQN + "x"); got != "" {
		t.Errorf("hostIDInUse of an NQN without controllers = %q, want none", got)
	}
	if got := ConnectOptions(Remote{NQN: subNQN, HostNQN: hostNQN, HostID: old, Addr: "h", Port: 1}, Timeouts{}); !strings.Contains(got, ",hostid="+old) {
		t.Errorf("ConnectOptions with a host ID = %s", got)
	}
}
