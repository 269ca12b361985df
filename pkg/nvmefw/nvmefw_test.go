// SPDX-License-Identifier: Apache-2.0

package nvmefw

import (
	"context"
	"errors"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
)

func TestScript(t *testing.T) {
	addrs := func(ss ...string) []netip.Addr {
		var out []netip.Addr
		for _, s := range ss {
			out = append(out, netip.MustParseAddr(s))
		}
		return out
	}
	for _, c := range []struct {
		name string
		r    Rules
		want []string // lines the script must have
		not  []string // and must not
	}{
		{"one IPv4 address, peers sorted and deduplicated",
			Rules{Listen: netip.MustParseAddr("10.0.0.1"), Port: 4420, Allowed: addrs("10.0.0.3", "10.0.0.2", "10.0.0.3")},
			[]string{"set peers4 { type ipv4_addr; elements = { 10.0.0.2, 10.0.0.3 }; }", "iif lo accept",
				"ip daddr 10.0.0.1 tcp dport 4420 ip saddr != @peers4 drop"},
			[]string{"ip6 saddr"}},
		{"no peer: everyone but loopback dropped",
			Rules{Listen: netip.MustParseAddr("10.0.0.1"), Port: 4420},
			[]string{"set peers4 { type ipv4_addr; }", "ip daddr 10.0.0.1 tcp dport 4420 ip saddr != @peers4 drop"}, nil},
		{"all addresses: both families, no daddr",
			Rules{Listen: netip.IPv4Unspecified(), Port: 4421, Allowed: addrs("10.0.0.2", "fd00::2")},
			[]string{"tcp dport 4421 ip saddr != @peers4 drop", "tcp dport 4421 ip6 saddr != @peers6 drop",
				"set peers6 { type ipv6_addr; elements = { fd00::2 }; }"},
			[]string{"daddr"}},
	} {
		s, err := c.r.Script()
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !strings.HasPrefix(s, "table inet tidecache_nvme\ndelete table inet tidecache_nvme\n") {
			t.Errorf("%s: the script does not replace the table in one transaction:\n%s", c.name, s)
		}
		for _, w := range c.want {
			if !strings.Contains(s, w) {
				t.Errorf("%s: script lacks %q:\n%s", c.name, w, s)
			}
		}
		for _, w := range c.not {
			if strings.Contains(s, w) {
				t.Errorf("%s: script has %q:\n%s", c.name, w, s)
			}
		}
		// nft itself parses it, where installed (make deps installs it).
		if nft, err := exec.LookPath("nft"); err == nil {
			cmd := exec.Command(nft, "--check", "-f", "-")
			cmd.Stdin = strings.NewReader(s)
			if out, err := cmd.CombinedOutput(); err != nil && !strings.Contains(string(out), "Operation not permitted") {
				t.Errorf("%s: nft --check: %v\n%s\n%s", c.name, err, out, s)
			}
		}
	}
	if _, err := (Rules{Port: 4420}).Script(); err == nil {
		t.Error("Script without a listen address: no error")
	}
}

// fakeRunner records the scripts it is given.
type fakeRunner struct {
	scripts []string
	err     error
}

func (f *fakeRunner) RunInput(_ context.Context, stdin []byte, name string, args ...string) ([]byte, error) {
	f.scripts = append(f.scripts, name+" "+strings.Join(args, " ")+"\n"+string(stdin))
	return nil, f.err
}

func TestApplyRemove(t *testing.T) {
	ctx := context.Background()
	f := &fakeRunner{}
	if err := Apply(ctx, f, Rules{Listen: netip.MustParseAddr("10.0.0.1"), Port: 4420}); err != nil {
		t.Fatal(err)
	}
	if err := Remove(ctx, f); err != nil {
		t.Fatal(err)
	}
	if len(f.scripts) != 2 || !strings.HasPrefix(f.scripts[0], "nft -f -\n") || f.scripts[1] != "nft -f -\ntable inet tidecache_nvme\ndelete table inet tidecache_nvme\n" {
		t.Fatalf("scripts run: %q", f.scripts)
	}
	f.err = errors.New("exit 1")
	if err := Apply(ctx, f, Rules{Listen: netip.MustParseAddr("10.0.0.1"), Port: 4420}); err == nil || !strings.Contains(err.Error(), "nvme allow-list: apply") {
		t.Fatalf("Apply with nft failing: %v", err)
	}
}
