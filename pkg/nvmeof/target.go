// SPDX-License-Identifier: Apache-2.0

package nvmeof

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// DefaultConfigFS is where the kernel's NVMe target (module nvmet) keeps
// its configuration.
const DefaultConfigFS = "/sys/kernel/config/nvmet"

// Export is one block device offered to one host.
type Export struct {
	// NQN names the subsystem: one per export, so that removing one never
	// touches another (e.g. "nqn.2014-08.io.tidecache:replica:<uuid>").
	NQN string
	// Device is the block device the namespace serves.
	Device string
	// HostNQN is the only host allowed to connect: the owner of the
	// mirror. The subsystem never allows any host.
	HostNQN string
	// HostKey is the DH-HMAC-CHAP secret the host must prove it holds
	// (pkg/nvmeauth); empty: none, the host is admitted by its NQN alone.
	// It is the host entry's, so it applies to every subsystem that
	// allows the host.
	HostKey string
	// Addr and Port are the TCP address the target listens on (IPv4).
	Addr string
	Port int
	// UUID identifies the namespace (and, from it, the subsystem's
	// serial number) across exports: a peer that reboots and exports the
	// same replica again must present the same identity, or the owner's
	// kernel, reconnecting on its own, finds "identifiers changed" and
	// drops the namespace under the mirror. The replica's UUID.
	UUID string
}

// Target configures the kernel's NVMe target through configfs.
type Target struct {
	// Root is the nvmet configfs directory, DefaultConfigFS on a real
	// system.
	Root string
	// rmdir removes a configfs group, with the attributes configfs keeps
	// in it: os.Remove on configfs; tests on a plain directory tree set
	// os.RemoveAll.
	rmdir func(string) error
}

// NewTarget returns a Target on the system's configfs.
func NewTarget() Target { return Target{Root: DefaultConfigFS} }

// NewDirTarget returns a Target on a plain directory tree laid out as
// nvmet's configfs (hosts, subsystems, ports), for host tests of the
// packages that export: it removes a group with the attributes in it,
// which configfs does by itself.
func NewDirTarget(root string) Target { return Target{Root: root, rmdir: os.RemoveAll} }

// Export makes the device available to its host: the host entry, the
// subsystem (any host refused) with namespace 1 enabled on the device, and
// the TCP port, linked together. Parts already in place are kept, so
// calling it again finishes an interrupted export or changes nothing. A
// subsystem of that NQN serving another device is refused: that is
// another export, and the one serving it may be someone's mirror leg.
func (t Target) Export(e Export) error {
	if err := e.validate(); err != nil {
		return err
	}
	if _, err := os.Stat(t.Root); err != nil {
		return fmt.Errorf("export %s: nvmet configfs not found (modprobe nvmet-tcp; is configfs mounted?): %w", e.NQN, err)
	}
	host := filepath.Join(t.Root, "hosts", e.HostNQN)
	subsys := filepath.Join(t.Root, "subsystems", e.NQN)
	ns := filepath.Join(subsys, "namespaces", "1")
	port := filepath.Join(t.Root, "ports", strconv.Itoa(e.Port))

	if cur, err := readAttr(filepath.Join(ns, "device_path")); err == nil && cur != "" && cur != e.Device {
		return fmt.Errorf("export %s: the subsystem already serves %s, not %s; unexport it first", e.NQN, cur, e.Device)
	}
	steps := []struct {
		what string
		do   func() error
	}{
		{"host entry", func() error { return mkdir(host) }},
		{"host key", func() error { return setHostKey(host, e.HostKey) }},
		// configfs makes a group's default directories with it; mkdir of
		// one that exists is harmless, and lets this run on a plain
		// directory tree in tests.
		{"subsystem", func() error {
			return mkdirs(subsys, filepath.Join(subsys, "allowed_hosts"), filepath.Join(subsys, "namespaces"))
		}},
		{"refuse unknown hosts", func() error { return writeAttr(filepath.Join(subsys, "attr_allow_any_host"), "0") }},
		{"serial number", func() error { return setOnce(filepath.Join(subsys, "attr_serial"), serial(e.UUID)) }},
		{"allow the owner", func() error { return symlink(host, filepath.Join(subsys, "allowed_hosts", e.HostNQN)) }},
		{"namespace", func() error { return mkdir(ns) }},
		{"namespace device", func() error { return t.setDevice(ns, e.Device, e.UUID) }},
		{"port", func() error { return mkdirs(port, filepath.Join(port, "subsystems")) }},
		{"port address", func() error { return setPort(port, e) }},
		{"link subsystem to port", func() error { return symlink(subsys, filepath.Join(port, "subsystems", e.NQN)) }},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			return fmt.Errorf("export %s: %s: %w", e.NQN, s.what, err)
		}
	}
	return nil
}

// setDevice points the namespace at the device, gives it its UUID and
// enables it; an enabled namespace keeps both (the kernel refuses to change
// them).
func (t Target) setDevice(ns, device, uuid string) error {
	if on, _ := readAttr(filepath.Join(ns, "enable")); on == "1" {
		return nil
	}
	if err := writeAttr(filepath.Join(ns, "device_path"), device); err != nil {
		return err
	}
	if err := writeAttr(filepath.Join(ns, "device_uuid"), uuid); err != nil {
		return err
	}
	return writeAttr(filepath.Join(ns, "enable"), "1")
}

// serial derives the subsystem's serial number (at most 20 characters)
// from the export's UUID, so it too is the same after a re-export.
func serial(uuid string) string {
	s := strings.ReplaceAll(uuid, "-", "")
	return s[:min(len(s), 20)]
}

// ErrNoInBandAuth is returned when a host key is given to a kernel whose
// NVMe target has no in-band authentication (Debian's 6.1, built without
// CONFIG_NVME_TARGET_AUTH).
var ErrNoInBandAuth = errors.New("the kernel's NVMe target has no in-band authentication (no dhchap_key in its host entries; CONFIG_NVME_TARGET_AUTH)")

// setHostKey sets the host entry's DH-HMAC-CHAP key, unless it already
// holds it; an empty key leaves the entry as it is. Connections already
// made stay: the key decides the next ones.
func setHostKey(host, key string) error {
	if key == "" {
		return nil
	}
	p := filepath.Join(host, "dhchap_key")
	if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
		return ErrNoInBandAuth
	}
	// configfs makes the attribute readable by every local user (0644):
	// the secret is root's alone, as it is in the keyring.
	if err := os.Chmod(p, 0o600); err != nil {
		return fmt.Errorf("make %s readable by root only: %w", p, err)
	}
	return setOnce(p, key)
}

// setOnce writes an attribute unless it already holds the value: the
// kernel refuses to change some of them once a host has connected.
func setOnce(p, v string) error {
	if cur, err := readAttr(p); err == nil && cur == v {
		return nil
	}
	return writeAttr(p, v)
}

// setPort sets the port's TCP address unless it is already set; a port
// that listens elsewhere is refused, since other subsystems may use it.
func setPort(port string, e Export) error {
	want := map[string]string{"addr_trtype": "tcp", "addr_adrfam": "ipv4", "addr_traddr": e.Addr, "addr_trsvcid": strconv.Itoa(e.Port)}
	if cur, _ := readAttr(filepath.Join(port, "addr_traddr")); cur != "" {
		for k, v := range want {
			if got, _ := readAttr(filepath.Join(port, k)); got != v {
				return fmt.Errorf("nvmet port %s has %s %q, not %q", filepath.Base(port), k, got, v)
			}
		}
		return nil
	}
	// The type and family first, the address last: the kernel checks the
	// address against the family.
	for _, k := range []string{"addr_trtype", "addr_adrfam", "addr_trsvcid", "addr_traddr"} {
		if err := writeAttr(filepath.Join(port, k), want[k]); err != nil {
			return err
		}
	}
	return nil
}

// Unexport removes an export, undoing Export in reverse: the link to the
// port (the host is cut off at once), the namespace, the allowed host,
// the subsystem. The port and host entries stay while other subsystems
// use them. Removing what is not there is not an error.
//
// When Unexport returns, no write of the host's is still on its way to
// the device, which is what makes it a fence (a node cut off must not
// write to a shared origin after the cluster has moved its volumes):
//   - Removing the port link first refuses new connections to the
//     subsystem on that port and deletes the host's controllers on it
//     (nvmet_port_subsys_drop_link); the deletion is asynchronous, and
//     commands already submitted to the device are still in flight.
//   - Disabling the namespace then waits for them: nvmet_ns_disable
//     takes the namespace out of the subsystem, so no new command finds
//     it, kills the namespace's reference, which every command holds from
//     its lookup until its completion, and waits until the last one has
//     completed on the device before the write to "enable" returns.
//
// Only then are the namespace, the allowed host and the subsystem
// removed. Removing the namespace's directory would disable it as well,
// but writing "enable" first makes the wait, and its failure, explicit.
// A caller that acknowledges a fence does so after Unexport returned nil.
func (t Target) Unexport(nqn string) error {
	subsys := filepath.Join(t.Root, "subsystems", nqn)
	ports, _ := filepath.Glob(filepath.Join(t.Root, "ports", "*", "subsystems", nqn))
	hosts, _ := filepath.Glob(filepath.Join(subsys, "allowed_hosts", "*"))
	rmdir := t.rmdir
	if rmdir == nil {
		rmdir = os.Remove
	}
	remove := func(paths ...string) error {
		for _, p := range paths {
			if err := rmdir(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("unexport %s: remove %s: %w", nqn, p, err)
			}
		}
		return nil
	}
	// The port links first, with the namespace still enabled: a host
	// still connected loses its connection (its writes wait for a
	// reconnect) instead of getting "invalid namespace" errors, which
	// its mirror would take as a failed leg and go on without.
	if err := remove(ports...); err != nil {
		return err
	}
	if on, _ := readAttr(filepath.Join(subsys, "namespaces", "1", "enable")); on == "1" {
		if err := writeAttr(filepath.Join(subsys, "namespaces", "1", "enable"), "0"); err != nil {
			return fmt.Errorf("unexport %s: disable namespace: %w", nqn, err)
		}
	}
	return remove(append(append([]string{filepath.Join(subsys, "namespaces", "1")}, hosts...), subsys)...)
}

func (e Export) validate() error {
	switch {
	case !validNQN(e.NQN):
		return fmt.Errorf("export: subsystem NQN %q: want nqn.yyyy-mm.reverse-domain:name, at most 223 bytes, no '/' or blanks", e.NQN)
	case !validNQN(e.HostNQN):
		return fmt.Errorf("export %s: host NQN %q: want nqn.yyyy-mm.reverse-domain:name", e.NQN, e.HostNQN)
	case !filepath.IsAbs(e.Device):
		return fmt.Errorf("export %s: device %q: want an absolute path", e.NQN, e.Device)
	case e.Addr == "" || strings.ContainsAny(e.Addr, " ,/"):
		return fmt.Errorf("export %s: address %q: want an IPv4 address", e.NQN, e.Addr)
	case e.Port <= 0 || e.Port > 65535:
		return fmt.Errorf("export %s: port %d: want 1 to 65535", e.NQN, e.Port)
	case !validUUID(e.UUID):
		return fmt.Errorf("export %s: namespace UUID %q: want 8-4-4-4-12 hexadecimal digits", e.NQN, e.UUID)
	}
	return nil
}

// validNQN checks the shape the kernel and the spec accept and that the
// name can be a configfs directory and a connect option.
func validNQN(s string) bool {
	return strings.HasPrefix(s, "nqn.") && len(s) <= 223 && !strings.ContainsAny(s, "/ ,=\t\n")
}

func validUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i, c := range s {
		switch {
		case i == 8 || i == 13 || i == 18 || i == 23:
			if c != '-' {
				return false
			}
		case !strings.ContainsRune("0123456789abcdefABCDEF", c):
			return false
		}
	}
	return true
}

func mkdir(p string) error {
	if err := os.Mkdir(p, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return nil
}

func mkdirs(paths ...string) error {
	for _, p := range paths {
		if err := mkdir(p); err != nil {
			return err
		}
	}
	return nil
}

func symlink(target, link string) error {
	if cur, err := os.Readlink(link); err == nil {
		if filepath.Clean(cur) == filepath.Clean(target) || filepath.Base(cur) == filepath.Base(target) {
			return nil
		}
		return fmt.Errorf("%s points at %s, not %s", link, cur, target)
	}
	return os.Symlink(target, link)
}

func readAttr(p string) (string, error) {
	b, err := os.ReadFile(p)
	return strings.TrimSpace(string(b)), err
}

func writeAttr(p, v string) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(v); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Subsystem is a subsystem in place on the target.
type Subsystem struct {
	NQN string
	// Hosts are the host NQNs it allows.
	Hosts []string
}

// Subsystems lists the subsystems whose NQN begins with prefix, with
// their allowed hosts, in NQN order. A target whose configfs is absent
// (nvmet not loaded) has none.
func (t Target) Subsystems(prefix string) ([]Subsystem, error) {
	entries, err := os.ReadDir(filepath.Join(t.Root, "subsystems"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list nvmet subsystems: %w", err)
	}
	var out []Subsystem
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), prefix) {
			continue
		}
		s := Subsystem{NQN: e.Name()}
		hosts, err := os.ReadDir(filepath.Join(t.Root, "subsystems", e.Name(), "allowed_hosts"))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("list allowed hosts of %s: %w", e.Name(), err)
		}
		for _, h := range hosts {
			s.Hosts = append(s.Hosts, h.Name())
		}
		out = append(out, s)
	}
	return out, nil
}
