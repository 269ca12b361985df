// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"errors"
	"maps"
	"net/netip"
	"slices"
	"testing"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/nvmeof"
	"github.com/tidecache/tidecache/pkg/store"
)

// TestAllowedAddresses: the NVMe/TCP allow-list admits the addresses of
// every node a subsystem allows, never a fenced node's, and a node that
// publishes no address is reported, not guessed.
func TestAllowedAddresses(t *testing.T) {
	subs := []nvmeof.Subsystem{
		{NQN: nvmeof.ExportNQN("san", "a"), Hosts: []string{nvmeof.HostNQN("a")}},
		{NQN: nvmeof.ExportNQN("san", "b"), Hosts: []string{nvmeof.HostNQN("b")}},
		{NQN: nvmeof.ExportNQN("san", "c"), Hosts: []string{nvmeof.HostNQN("c")}},
		{NQN: nvmeof.ReplicaNQN("r1"), Hosts: []string{nvmeof.HostNQN("a")}},
		{NQN: nvmeof.ExportNQN("san", "old"), Hosts: []string{nvmeof.HostNQN("old")}},
		{NQN: nvmeof.ExportNQN("san", "gone"), Hosts: []string{nvmeof.HostNQN("gone")}},
	}
	nodes := []store.Item[api.Node]{
		{Value: api.Node{Name: "a", Addresses: []string{"10.0.0.2", "fd00::2"}}},
		{Value: api.Node{Name: "b", Addresses: []string{"10.0.0.3"}}},
		{Value: api.Node{Name: "c", Addresses: []string{"10.0.0.4"}}},
		// A record from a version that published no addresses: the host
		// of its replica address.
		{Value: api.Node{Name: "old", ReplicaAddress: "10.0.0.5:4420"}},
		{Value: api.Node{Name: "x", Addresses: []string{"10.0.0.9"}}}, // allowed nowhere
	}
	allowed, unknown := allowedAddresses(subs, nodes, map[string]bool{"c": true}, nil)
	want := []netip.Addr{netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.0.3"), netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("fd00::2")}
	if got := flatten(allowed); !slices.Equal(got, want) {
		t.Errorf("allowed %v, want %v (c fenced, x allowed nowhere)", got, want)
	}
	if !slices.Equal(unknown, []string{"gone"}) {
		t.Errorf("nodes without an address %v, want [gone]", unknown)
	}

	// a's record missing for a moment (its daemon restarting): a keeps
	// the addresses it had, or its live connections would be cut; c,
	// fenced, stays out whatever was known of it.
	known := allowed
	known["c"] = []netip.Addr{netip.MustParseAddr("10.0.0.4")}
	allowed, _ = allowedAddresses(subs, nodes[1:], map[string]bool{"c": true}, known)
	if got := flatten(allowed); !slices.Equal(got, want) {
		t.Errorf("with a's record missing: allowed %v, want %v", got, want)
	}
}

// TestConfigRefusesUnauthenticatedNVMe: a network --replica-address needs
// --insecure-nvme (no in-band authentication yet); loopback does not.
func TestConfigRefusesUnauthenticatedNVMe(t *testing.T) {
	for _, c := range []struct {
		addr       string
		insecure   bool
		kernelAuth bool
		refused    bool
	}{
		{"10.0.0.3", false, false, true},
		{"10.0.0.3:4421", false, false, true},
		{"10.0.0.3", true, false, false},
		{"127.0.0.1", false, false, false},
		// A kernel with in-band authentication needs no opt-in.
		{"10.0.0.3", false, true, false},
	} {
		cfg := Default()
		cfg.Node, cfg.EmbeddedEtcd = "n1", true
		cfg.ReplicaAddress, cfg.InsecureNVMe = c.addr, c.insecure
		if err := cfg.Validate(); err != nil {
			t.Fatalf("replica address %s: Validate = %v", c.addr, err)
		}
		err := checkNVMeExposure(cfg, c.kernelAuth)
		if got := errors.Is(err, ErrNVMeUnauthenticated); got != c.refused {
			t.Errorf("replica address %s, --insecure-nvme %v, kernel auth %v: %v, want refused %v", c.addr, c.insecure, c.kernelAuth, err, c.refused)
		}
		if c.refused {
			continue // such a daemon never starts
		}
		d := &daemon{cfg: cfg}
		if c.kernelAuth {
			d.keys = &nvmeKeys{}
		}
		if want := c.addr != "127.0.0.1" && (!c.kernelAuth || c.insecure); d.nvmeUnauthenticated() != want {
			t.Errorf("replica address %s, --insecure-nvme %v, kernel auth %v: unauthenticated %v, want %v", c.addr, c.insecure, c.kernelAuth, !want, want)
		}
	}
}

// TestNVMeAllowListSaved: the list applied is saved and read back, and a
// directory without one says so.
func TestNVMeAllowListSaved(t *testing.T) {
	dir := t.TempDir()
	if _, ok, err := loadNVMeAllowList(dir); ok || err != nil {
		t.Fatalf("empty state dir: ok %v, %v", ok, err)
	}
	want := map[string][]netip.Addr{"a": {netip.MustParseAddr("10.0.0.2")}, "b": {netip.MustParseAddr("10.0.0.3")}}
	if err := saveNVMeAllowList(dir, want); err != nil {
		t.Fatal(err)
	}
	got, ok, err := loadNVMeAllowList(dir)
	if err != nil || !ok || !maps.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("read back %v, %v, %v; want %v", got, ok, err, want)
	}
	// An empty list is a list (no node allowed), not "none saved".
	if err := saveNVMeAllowList(dir, nil); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := loadNVMeAllowList(dir); err != nil || !ok || len(got) != 0 {
		t.Fatalf("empty list read back as %v, %v, %v", got, ok, err)
	}
}
