// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/atomicfile"
	"github.com/tidecache/tidecache/pkg/command"
	"github.com/tidecache/tidecache/pkg/nvmefw"
	"github.com/tidecache/tidecache/pkg/nvmeof"
	"github.com/tidecache/tidecache/pkg/store"
)

// The kernel's NVMe target admits a host by the host NQN the host
// declares, and host NQNs follow from node names: on a kernel without
// NVMe in-band authentication anyone who reaches --replica-address could
// connect as an allowed node. So the daemon of a node that serves NVMe/TCP
// keeps a source-address allow-list for its port (package nvmefw): the
// addresses of the nodes its subsystems allow, fenced nodes left out. The
// list follows the subsystems each target round. It is saved in
// --state-dir and applied at start, so that a daemon restarted while etcd
// cannot be reached neither opens the port to everyone nor cuts off the
// owners of the replicas it serves; on a first start without etcd (no
// saved list) the port stays open until etcd first answers.

// ErrNVMeUnauthenticated refuses a network --replica-address without
// --insecure-nvme on a kernel without NVMe in-band authentication.
var ErrNVMeUnauthenticated = errors.New("serving NVMe/TCP on a network address without in-band authentication " +
	"(this kernel has none: Debian's 6.12 has it, 6.1 does not): the kernel's target admits a host by the host NQN the host declares, " +
	"and host NQNs follow from node names, so only the source-address allow-list this daemon keeps (nftables) would keep another " +
	"machine on that network from reading or writing the replicas and exports; give --insecure-nvme to accept that (docs/security.md)")

// checkNVMeExposure refuses a network --replica-address that would admit
// hosts by their declared NQN alone: without in-band authentication in
// the kernel, unless --insecure-nvme accepts it.
func checkNVMeExposure(c Config, kernelAuth bool) error {
	if c.ReplicaAddress == "" {
		return nil
	}
	host, _, err := replicaAddress(c.ReplicaAddress)
	if err != nil {
		return fmt.Errorf("config replica-address: %w", err)
	}
	if !isLoopback(host) && !kernelAuth && !c.InsecureNVMe {
		return fmt.Errorf("config replica-address %s: %w", c.ReplicaAddress, ErrNVMeUnauthenticated)
	}
	return nil
}

// nvmeUnauthenticated reports whether this node may admit a host over the
// network by its declared NQN alone: it serves NVMe/TCP on a network
// address, and either its kernel has no in-band authentication or
// --insecure-nvme lets it serve hosts that cannot authenticate.
func (d *daemon) nvmeUnauthenticated() bool {
	host, _, err := replicaAddress(d.cfg.ReplicaAddress)
	if err != nil || isLoopback(host) {
		return false
	}
	return d.keys == nil || d.cfg.InsecureNVMe
}

// isLoopback reports whether host is a loopback address.
func isLoopback(host string) bool {
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}

// nvmeAllowFile is the file, in Config.StateDir, that holds the list.
const nvmeAllowFile = "nvme-allow.json"

// nvmeAllowState is the content of nvmeAllowFile: the addresses of each
// node the target admits.
type nvmeAllowState struct {
	Nodes map[string][]netip.Addr `json:"nodes"`
}

// allowedAddresses returns the addresses of every node a subsystem
// allows, fenced ones left out, by node. A node is known by the addresses
// its record publishes (api.Node.Addresses), or, for a record from a
// version that published none, by the host of its --replica-address. A
// node whose record is missing right now (its daemon restarting, its
// lease expired in an etcd hiccup) keeps the addresses it had in known:
// dropping them would cut its live connections, and an owner would then
// fail its peer leg for a replica that never stopped answering. Nodes
// with no address at all are returned apart, to be logged: their
// connections are dropped.
func allowedAddresses(subs []nvmeof.Subsystem, nodes []store.Item[api.Node], fenced map[string]bool, known map[string][]netip.Addr) (allowed map[string][]netip.Addr, unknown []string) {
	byName := map[string]api.Node{}
	for _, n := range nodes {
		byName[n.Value.Name] = n.Value
	}
	allowed = map[string][]netip.Addr{}
	for _, sub := range subs {
		for _, name := range nodesOf(sub) {
			if _, ok := allowed[name]; ok || fenced[name] {
				continue
			}
			addrs := known[name]
			if rec, ok := byName[name]; ok {
				addrs = nodeAddresses(rec)
			}
			if len(addrs) == 0 {
				unknown = append(unknown, name)
			}
			allowed[name] = addrs
		}
	}
	slices.Sort(unknown)
	return allowed, unknown
}

// flatten returns every address of byNode, sorted, once.
func flatten(byNode map[string][]netip.Addr) []netip.Addr {
	var out []netip.Addr
	for _, addrs := range byNode {
		out = append(out, addrs...)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

// nodeAddresses returns the addresses a node connects from.
func nodeAddresses(n api.Node) []netip.Addr {
	var out []netip.Addr
	for _, s := range n.Addresses {
		if a, err := netip.ParseAddr(s); err == nil {
			out = append(out, a.Unmap())
		}
	}
	if len(out) == 0 && n.ReplicaAddress != "" {
		if host, _, err := net.SplitHostPort(n.ReplicaAddress); err == nil {
			if a, err := netip.ParseAddr(host); err == nil {
				out = append(out, a.Unmap())
			}
		}
	}
	return out
}

// localAddresses returns this node's addresses other nodes see it connect
// from: every interface address but loopback and link-local ones.
func localAddresses() []string {
	ifaddrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []string
	for _, ia := range ifaddrs {
		p, err := netip.ParsePrefix(ia.String())
		if err != nil {
			continue
		}
		a := p.Addr().Unmap()
		if a.IsLoopback() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() {
			continue
		}
		out = append(out, a.String())
	}
	slices.Sort(out)
	return out
}

// keepNVMeAllowList applies the allow-list for the subsystems this node's
// target serves now and the node records last read; before any was read
// the list in force stays. It runs after each target round and each time
// the controller keeps a new replica, so its owner is admitted at once.
func (d *daemon) keepNVMeAllowList(ctx context.Context) {
	s := &d.tgt
	s.mu.Lock()
	nodes := s.nodes
	s.mu.Unlock()
	if d.cfg.ReplicaAddress == "" || nodes == nil {
		return
	}
	subs, err := d.tgt.nvmet().Subsystems("")
	if err != nil {
		d.log.Warn("nvme allow-list: cannot list the target's subsystems; the list in force stays", "err", err)
		return
	}
	s.mu.Lock()
	known := s.known
	s.mu.Unlock()
	allowed, unknown := allowedAddresses(subs, nodes, d.tgt.fencedSet(), known)
	if len(unknown) > 0 {
		d.warnExport("nvme-allow", fmt.Sprintf("nodes %v are allowed on this node's NVMe/TCP target but publish no address: their connections are dropped until they do", unknown))
	}
	d.applyNVMeAllowList(ctx, allowed)
}

// applyNVMeAllowList puts the addresses of allowed in force if they are
// not already, and saves them.
func (d *daemon) applyNVMeAllowList(ctx context.Context, allowed map[string][]netip.Addr) {
	s := &d.tgt
	flat := flatten(allowed)
	s.mu.Lock()
	same := s.allowApplied && slices.Equal(s.allowed, flat)
	s.known = allowed
	s.mu.Unlock()
	if same {
		return
	}
	host, port, err := replicaAddress(d.cfg.ReplicaAddress)
	if err != nil {
		return // Validate refused it already
	}
	listen, err := netip.ParseAddr(host)
	if err != nil {
		return
	}
	if err := nvmefw.Apply(ctx, command.Runner{Logger: d.log}, nvmefw.Rules{Listen: listen, Port: port, Allowed: flat}); err != nil {
		d.log.Error("nvme allow-list not applied: the NVMe/TCP port admits the addresses of the last list applied, or everyone if none was", "err", err)
		return
	}
	d.log.Info("nvme allow-list applied: only these addresses reach this node's NVMe/TCP target", "port", port, "allowed", flat)
	s.mu.Lock()
	s.allowed, s.allowApplied = flat, true
	s.mu.Unlock()
	d.dmet.SetNVMeAllowed(len(flat))
	if err := saveNVMeAllowList(d.cfg.StateDir, allowed); err != nil {
		d.log.Error("nvme allow-list not saved: a restart without etcd would leave the port open", "err", err)
	}
}

// restoreNVMeAllowList applies the list the last run saved, before the
// target's first round.
func (d *daemon) restoreNVMeAllowList(ctx context.Context) {
	if d.cfg.ReplicaAddress == "" {
		return
	}
	allowed, ok, err := loadNVMeAllowList(d.cfg.StateDir)
	switch {
	case err != nil:
		d.log.Error("saved nvme allow-list unreadable: the NVMe/TCP port stays open until etcd answers", "err", err)
	case !ok:
		d.log.Info("no saved nvme allow-list: the NVMe/TCP port stays open until etcd answers")
	default:
		d.applyNVMeAllowList(ctx, allowed)
	}
}

func loadNVMeAllowList(dir string) (map[string][]netip.Addr, bool, error) {
	b, err := os.ReadFile(filepath.Join(dir, nvmeAllowFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("read saved nvme allow-list: %w", err)
	}
	var st nvmeAllowState
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, false, fmt.Errorf("read saved nvme allow-list %s: %w", filepath.Join(dir, nvmeAllowFile), err)
	}
	if st.Nodes == nil {
		st.Nodes = map[string][]netip.Addr{}
	}
	return st.Nodes, true, nil
}

func saveNVMeAllowList(dir string, allowed map[string][]netip.Addr) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("save nvme allow-list: %w", err)
	}
	b, err := json.Marshal(nvmeAllowState{Nodes: allowed})
	if err != nil {
		return fmt.Errorf("save nvme allow-list: %w", err)
	}
	if err := atomicfile.Write(filepath.Join(dir, nvmeAllowFile), b, 0o600); err != nil {
		return fmt.Errorf("save nvme allow-list in %s: %w", dir, err)
	}
	return nil
}
