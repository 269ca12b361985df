// SPDX-License-Identifier: Apache-2.0

// Package nvmefw keeps the source-address allow-list of a node's NVMe/TCP
// target in nftables.
//
// The kernel's NVMe target admits a host by the host NQN the host itself
// declares when it connects, and host NQNs are derived from node names,
// which node records publish: on a kernel without NVMe in-band
// authentication (Debian's 6.1), anyone who reaches the port can connect
// as the owner of a replica, or as a node a shared origin is exported to,
// and read or write it. Until in-band authentication is used, the target
// node drops every connection to its NVMe/TCP port from an address that
// is not one of the nodes its subsystems allow. The list is one nftables
// table, replaced whole in one transaction at each change, so there is no
// moment without it once it is applied.
package nvmefw

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// Table is the nftables table the allow-list lives in (family inet).
const Table = "tidecache_nvme"

// Runner runs a command with stdin; pkg/command's Runner is one.
type Runner interface {
	RunInput(ctx context.Context, stdin []byte, name string, args ...string) ([]byte, error)
}

// Rules is what the allow-list admits.
type Rules struct {
	// Listen is the target's address, Port its port: connections to
	// other addresses or ports are not this list's business.
	Listen netip.Addr
	Port   int
	// Allowed are the source addresses admitted; loopback always is.
	Allowed []netip.Addr
}

// Script returns the nft script that replaces the table with r: the
// "table" line creates it if missing, so that the "delete" always has
// something to delete, and nft applies the whole script in one
// transaction.
func (r Rules) Script() (string, error) {
	if !r.Listen.IsValid() || r.Port <= 0 || r.Port > 65535 {
		return "", fmt.Errorf("nvme allow-list: listen address %v port %d: want an address and a port", r.Listen, r.Port)
	}
	var v4, v6 []string
	for _, a := range slices.SortedFunc(slices.Values(r.Allowed), netip.Addr.Compare) {
		a = a.Unmap()
		switch {
		case a.Is4():
			v4 = append(v4, a.String())
		case a.Is6():
			v6 = append(v6, a.String())
		}
	}
	v4, v6 = slices.Compact(v4), slices.Compact(v6)
	var b strings.Builder
	fmt.Fprintf(&b, "table inet %s\ndelete table inet %[1]s\ntable inet %[1]s {\n", Table)
	fmt.Fprintf(&b, "\tset peers4 { type ipv4_addr; %s}\n", elements(v4))
	fmt.Fprintf(&b, "\tset peers6 { type ipv6_addr; %s}\n", elements(v6))
	b.WriteString("\tchain input {\n\t\ttype filter hook input priority -10; policy accept;\n\t\tiif lo accept\n")
	// One rule per family the target listens on: an unspecified
	// address listens on both.
	listen := r.Listen.Unmap()
	if listen.IsUnspecified() || listen.Is4() {
		fmt.Fprintf(&b, "\t\t%stcp dport %d ip saddr != @peers4 drop\n", daddr("ip", listen), r.Port)
	}
	if listen.IsUnspecified() || listen.Is6() {
		fmt.Fprintf(&b, "\t\t%stcp dport %d ip6 saddr != @peers6 drop\n", daddr("ip6", listen), r.Port)
	}
	b.WriteString("\t}\n}\n")
	return b.String(), nil
}

// daddr matches the target's own address, nothing when it listens on all.
func daddr(family string, listen netip.Addr) string {
	if listen.IsUnspecified() {
		return ""
	}
	return family + " daddr " + listen.String() + " "
}

func elements(addrs []string) string {
	if len(addrs) == 0 {
		return ""
	}
	return "elements = { " + strings.Join(addrs, ", ") + " }; "
}

// Apply replaces the allow-list with r.
func Apply(ctx context.Context, run Runner, r Rules) error {
	script, err := r.Script()
	if err != nil {
		return err
	}
	if _, err := run.RunInput(ctx, []byte(script), "nft", "-f", "-"); err != nil {
		return fmt.Errorf("nvme allow-list: apply: %w", err)
	}
	return nil
}

// Remove deletes the allow-list; a missing table is not an error.
func Remove(ctx context.Context, run Runner) error {
	script := fmt.Sprintf("table inet %s\ndelete table inet %[1]s\n", Table)
	if _, err := run.RunInput(ctx, []byte(script), "nft", "-f", "-"); err != nil {
		return fmt.Errorf("nvme allow-list: remove: %w", err)
	}
	return nil
}
