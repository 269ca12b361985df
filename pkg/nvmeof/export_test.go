// SPDX-License-Identifier: Apache-2.0

package nvmeof

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestExportNames: an export's subsystem names hold the export and the
// node while they fit in an NQN, and a digest of the node when not; the
// namespace UUID depends on the export's name alone.
func TestExportNames(t *testing.T) {
	long := strings.Repeat("n", 253)
	for _, c := range []struct {
		export, node, want string
	}{
		{"san", "b", "nqn.2026-11.io.tidecache:export:san:b"},
		{"san-2", "db1.example.com", "nqn.2026-11.io.tidecache:export:san-2:db1.example.com"},
		{"san", long, "nqn.2026-11.io.tidecache:export:san:h-"},
	} {
		got := ExportNQN(c.export, c.node)
		if !strings.HasPrefix(got, c.want) || !validNQN(got) || !strings.HasPrefix(got, ExportNQNPrefix(c.export)) {
			t.Errorf("ExportNQN(%q, %q) = %q, want a valid NQN starting %q", c.export, c.node, got, c.want)
		}
	}
	if !IsExportNQN(ExportNQN("san", "b")) || !IsExportNQN(ExportNQN("san", long)) || IsExportNQN(ReplicaNQN(testUUID)) {
		t.Error("IsExportNQN tells export subsystems from others wrongly")
	}
	if ExportNQN("san", long) == ExportNQN("san", long[1:]) {
		t.Error("two long node names share a subsystem")
	}
	if strings.HasPrefix(ExportNQN("san-2", "b"), ExportNQNPrefix("san")) {
		t.Error("export san-2's subsystems carry export san's prefix")
	}

	u := ExportUUID("san")
	if !validUUID(u) || u != ExportUUID("san") || u == ExportUUID("san-2") {
		t.Errorf("ExportUUID(san) = %q (again %q, san-2 %q): want a stable UUID of the name", u, ExportUUID("san"), ExportUUID("san-2"))
	}
	if u[14] != '5' || !strings.ContainsRune("89ab", rune(u[19])) {
		t.Errorf("ExportUUID(san) = %s: want version 5, RFC variant", u)
	}

	for nqn, want := range map[string]string{HostNQN("b"): "b", HostNQN("db1.example.com"): "db1.example.com", "nqn.2014-08.org.nvmexpress:uuid:1": "", HostNQN(""): ""} {
		if got, ok := NodeOfHostNQN(nqn); got != want || ok != (want != "") {
			t.Errorf("NodeOfHostNQN(%q) = %q, %v; want %q", nqn, got, ok, want)
		}
	}
}

// TestExportPerHost exports one device to three hosts, one subsystem
// each with the same namespace UUID and serial, lists them, and removes
// one host's subsystem leaving the other two whole.
func TestExportPerHost(t *testing.T) {
	tg := newConfigFS(t)
	uuid := ExportUUID("san")
	hosts := []string{"a", "b", "c"}
	for _, h := range hosts {
		e := Export{NQN: ExportNQN("san", h), Device: "/dev/md/san", HostNQN: HostNQN(h), Addr: "10.77.0.3", Port: 4420, UUID: uuid}
		if err := tg.Export(e); err != nil {
			t.Fatal(err)
		}
	}
	// Another export on the same port is not one of san's.
	if err := tg.Export(Export{NQN: ExportNQN("san-2", "a"), Device: "/dev/md/other", HostNQN: HostNQN("a"), Addr: "10.77.0.3", Port: 4420, UUID: ExportUUID("san-2")}); err != nil {
		t.Fatal(err)
	}
	for _, h := range hosts {
		subsys := filepath.Join(tg.Root, "subsystems", ExportNQN("san", h))
		for p, want := range map[string]string{
			filepath.Join(subsys, "attr_allow_any_host"):            "0",
			filepath.Join(subsys, "namespaces", "1", "device_uuid"): uuid,
			filepath.Join(subsys, "namespaces", "1", "device_path"): "/dev/md/san",
			filepath.Join(subsys, "attr_serial"):                    serial(uuid),
		} {
			if got := attr(t, p); got != want {
				t.Errorf("%s = %q, want %q", p, got, want)
			}
		}
		if allowed, _ := os.ReadDir(filepath.Join(subsys, "allowed_hosts")); len(allowed) != 1 || allowed[0].Name() != HostNQN(h) {
			t.Errorf("subsystem for %s allows %v, want %s alone", h, allowed, HostNQN(h))
		}
	}

	list := func() []Subsystem {
		t.Helper()
		subs, err := tg.Subsystems(ExportNQNPrefix("san"))
		if err != nil {
			t.Fatal(err)
		}
		return subs
	}
	want := []Subsystem{
		{NQN: ExportNQN("san", "a"), Hosts: []string{HostNQN("a")}},
		{NQN: ExportNQN("san", "b"), Hosts: []string{HostNQN("b")}},
		{NQN: ExportNQN("san", "c"), Hosts: []string{HostNQN("c")}},
	}
	if got := list(); !slices.EqualFunc(got, want, subsystemEqual) {
		t.Fatalf("Subsystems = %+v, want %+v", got, want)
	}

	if err := tg.Unexport(ExportNQN("san", "b")); err != nil {
		t.Fatal(err)
	}
	if got := list(); !slices.EqualFunc(got, []Subsystem{want[0], want[2]}, subsystemEqual) {
		t.Errorf("after unexporting b: %+v, want a and c", got)
	}
	for _, h := range []string{"a", "c"} {
		p := filepath.Join(tg.Root, "subsystems", ExportNQN("san", h), "namespaces", "1", "enable")
		if got := attr(t, p); got != "1" {
			t.Errorf("%s = %q after unexporting b, want 1", p, got)
		}
		if _, err := os.Readlink(filepath.Join(tg.Root, "ports", "4420", "subsystems", ExportNQN("san", h))); err != nil {
			t.Errorf("port link of %s: %v", h, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(tg.Root, "ports", "4420", "subsystems", ExportNQN("san", "b"))); !os.IsNotExist(err) {
		t.Errorf("b's port link left (%v)", err)
	}
	if _, err := os.Stat(filepath.Join(tg.Root, "hosts", HostNQN("b"))); err != nil {
		t.Errorf("host entry of b removed, others may use it: %v", err)
	}

	if subs, err := (Target{Root: filepath.Join(t.TempDir(), "none")}).Subsystems(ExportNQNPrefix("san")); err != nil || len(subs) != 0 {
		t.Errorf("Subsystems without configfs = %v, %v; want none", subs, err)
	}
}

func subsystemEqual(a, b Subsystem) bool { return a.NQN == b.NQN && slices.Equal(a.Hosts, b.Hosts) }

// TestHostID: one ID per host NQN, the same every time, a valid version
// 5 UUID, and not the export namespace's.
func TestHostID(t *testing.T) {
	a, b := HostID(HostNQN("a")), HostID(HostNQN("b"))
	if a != HostID(HostNQN("a")) || a == b {
		t.Errorf("HostID: a=%s (again %s), b=%s: want stable and distinct", a, HostID(HostNQN("a")), b)
	}
	if !validUUID(a) || a[14] != '5' {
		t.Errorf("HostID %s is not a version 5 UUID", a)
	}
	if a == ExportUUID(HostNQN("a")) {
		t.Error("HostID shares the export namespace")
	}
}
