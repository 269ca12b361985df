// SPDX-License-Identifier: Apache-2.0

package etcdserver_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/etcdserver"
	"github.com/tidecache/tidecache/pkg/etcdserver/etcdtest"
	"github.com/tidecache/tidecache/pkg/store"
)

func TestClusterConfigValidate(t *testing.T) {
	const ic = "a=http://10.0.0.1:2390,b=http://10.0.0.2:2390,c=http://10.0.0.3:2390"
	member := func(c etcdserver.Config) etcdserver.Config {
		if c.Name == "" {
			c.Name = "a"
		}
		if c.ClientURL == "" {
			c.ClientURL = "http://10.0.0.1:2389"
		}
		return c
	}
	tests := []struct {
		name string
		cfg  etcdserver.Config
		want string
	}{
		{"member of a new cluster", member(etcdserver.Config{InitialCluster: ic}), ""},
		{"peer URL given", member(etcdserver.Config{InitialCluster: ic, PeerURL: "http://10.0.0.1:2390"}), ""},
		{"joining", member(etcdserver.Config{InitialCluster: ic, InitialClusterState: "existing", InitialClusterToken: "t"}), ""},
		{"spaces", member(etcdserver.Config{InitialCluster: " a=http://10.0.0.1:2390, b=http://10.0.0.2:2390"}), ""},
		{"peer TLS", member(etcdserver.Config{InitialCluster: strings.ReplaceAll(ic, "http:", "https:"),
			PeerCertFile: "c", PeerKeyFile: "k", PeerCAFile: "ca"}), ""},
		{"client on loopback", member(etcdserver.Config{InitialCluster: ic, ClientURL: "http://127.0.0.1:2389"}), ""},
		{"raft timing", member(etcdserver.Config{InitialCluster: ic, HeartbeatInterval: 300 * time.Millisecond, ElectionTimeout: 3 * time.Second}), ""},
		{"election timeout alone", member(etcdserver.Config{InitialCluster: ic, ElectionTimeout: 5 * time.Second}), ""},

		{"own name missing", member(etcdserver.Config{InitialCluster: ic, Name: "d"}), `Name "d" is not in InitialCluster (a, b, c)`},
		{"default name missing", etcdserver.Config{InitialCluster: ic, ClientURL: "http://10.0.0.1:2389"}, `Name "tidecache" is not in InitialCluster`},
		{"duplicate name", member(etcdserver.Config{InitialCluster: ic + ",a=http://10.0.0.4:2390"}), `names member "a" twice`},
		{"duplicate peer URL", member(etcdserver.Config{InitialCluster: ic + ",d=http://10.0.0.3:2390"}), `members "c" and "d" the same peer address`},
		{"entry without name", member(etcdserver.Config{InitialCluster: ic + ",http://10.0.0.4:2390"}), "want name=peerURL"},
		{"empty entry", member(etcdserver.Config{InitialCluster: ic + ","}), "want name=peerURL"},
		{"peer host name", member(etcdserver.Config{InitialCluster: ic + ",d=http://node4:2390"}), "InitialCluster member d"},
		{"peer port 0", member(etcdserver.Config{InitialCluster: "a=http://10.0.0.1:0,b=http://10.0.0.2:2390"}), "port 0"},
		{"peer on all interfaces", member(etcdserver.Config{InitialCluster: "a=http://0.0.0.0:2390,b=http://10.0.0.2:2390"}), "no address the other members can dial"},
		{"peer URL differs", member(etcdserver.Config{InitialCluster: ic, PeerURL: "http://10.0.0.9:2390"}), "differs from"},
		{"bad state", member(etcdserver.Config{InitialCluster: ic, InitialClusterState: "join"}), `InitialClusterState "join"`},
		{"client port 0", member(etcdserver.Config{InitialCluster: ic, ClientURL: "http://10.0.0.1:0"}), "ClientURL"},
		{"client on all interfaces", member(etcdserver.Config{InitialCluster: ic, ClientURL: "http://0.0.0.0:2389"}), "ClientURL"},
		{"peer TLS incomplete", member(etcdserver.Config{InitialCluster: ic, PeerCertFile: "c", PeerKeyFile: "k"}), "must be set together"},
		{"peer TLS with http peers", member(etcdserver.Config{InitialCluster: ic, PeerCertFile: "c", PeerKeyFile: "k", PeerCAFile: "ca"}), "scheme must be https"},
		{"election under five heartbeats", member(etcdserver.Config{InitialCluster: ic, HeartbeatInterval: 500 * time.Millisecond, ElectionTimeout: 2 * time.Second}),
			"at least five times HeartbeatInterval 500ms"},
		{"heartbeat raised alone", member(etcdserver.Config{InitialCluster: ic, HeartbeatInterval: 300 * time.Millisecond}), "ElectionTimeout 1s must be at least five times"},
		{"election timeout too long", member(etcdserver.Config{InitialCluster: ic, ElectionTimeout: time.Minute}), "above etcd's limit"},
		{"fractional milliseconds", member(etcdserver.Config{InitialCluster: ic, HeartbeatInterval: 1500 * time.Microsecond}), "whole milliseconds"},
		{"https peers without peer TLS", member(etcdserver.Config{InitialCluster: strings.ReplaceAll(ic, "http:", "https:")}), "scheme must be http"},

		// Settings of a cluster member given to a single member.
		{"state without cluster", etcdserver.Config{InitialClusterState: "existing"}, "set InitialCluster too"},
		{"token without cluster", etcdserver.Config{InitialClusterToken: "t"}, "set InitialCluster too"},
		{"peer TLS without cluster", etcdserver.Config{PeerCertFile: "c", PeerKeyFile: "k", PeerCAFile: "ca"}, "a single member has no peers"},
		{"raft timing without cluster", etcdserver.Config{ElectionTimeout: 5 * time.Second}, "no elections to tune"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("want valid, got %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// cluster is a multi-member cluster on loopback in one test process.
type cluster struct {
	t     *testing.T
	cfgs  map[string]etcdserver.Config
	peers map[string]string // member name -> peer URL
	mu    sync.Mutex        // guards srvs
	srvs  map[string]*etcdserver.Server
}

// newCluster configures members named names on free loopback ports,
// changed by each if set, without starting them.
func newCluster(t *testing.T, scheme string, each func(name string, cfg *etcdserver.Config), names ...string) *cluster {
	t.Helper()
	peers := etcdtest.LoopbackURLs(t, scheme, len(names))
	clients := etcdtest.LoopbackURLs(t, "http", len(names))
	var ic []string
	for i, n := range names {
		ic = append(ic, n+"="+peers[i])
	}
	c := &cluster{t: t, cfgs: map[string]etcdserver.Config{}, peers: map[string]string{}, srvs: map[string]*etcdserver.Server{}}
	for i, n := range names {
		c.peers[n] = peers[i]
		cfg := etcdserver.Config{
			DataDir: filepath.Join(t.TempDir(), n), Name: n, ClientURL: clients[i],
			InitialCluster: strings.Join(ic, ","),
		}
		if each != nil {
			each(n, &cfg)
		}
		c.cfgs[n] = cfg
	}
	t.Cleanup(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, s := range c.srvs {
			s.Close()
		}
	})
	return c
}

// start starts the named members together, each within timeout, and
// returns each one's error.
func (c *cluster) start(timeout time.Duration, names ...string) map[string]error {
	c.t.Helper()
	var mu sync.Mutex // guards errs
	var wg sync.WaitGroup
	errs := map[string]error{}
	for _, n := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			srv, err := etcdserver.Start(ctx, c.cfgs[n])
			mu.Lock()
			errs[n] = err
			mu.Unlock()
			if err == nil {
				c.mu.Lock()
				c.srvs[n] = srv
				c.mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errs
}

// mustStart is start failing the test on any error.
func (c *cluster) mustStart(names ...string) {
	c.t.Helper()
	t0 := time.Now()
	for n, err := range c.start(20*time.Second, names...) {
		if err != nil {
			c.t.Fatalf("start %s: %v", n, err)
		}
	}
	c.t.Logf("started %v in %v", names, time.Since(t0).Round(time.Millisecond))
}

// stop closes the named member.
func (c *cluster) stop(name string) {
	c.srvs[name].Close()
	delete(c.srvs, name)
}

// leader returns the name of the running member that leads.
func (c *cluster) leader() string {
	c.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		for n, s := range c.srvs {
			if s.IsLeader() {
				return n
			}
		}
	}
	c.t.Fatal("no leader")
	return ""
}

// open opens a store that talks to the named member only, so a read or a
// write through it goes through that member.
func (c *cluster) open(name string, cfg func(*store.Config)) *store.Store {
	c.t.Helper()
	sc := store.DefaultConfig()
	sc.Endpoints = c.srvs[name].Endpoints()[:1]
	if cfg != nil {
		cfg(&sc)
	}
	s, err := store.Open(context.Background(), sc)
	if err != nil {
		c.t.Fatal(err)
	}
	return s
}

// put creates a policy named policy through the named member, retrying
// while the cluster elects a leader.
func (c *cluster) put(ctx context.Context, name, policy string, wear int) {
	c.t.Helper()
	s := c.open(name, nil)
	defer s.Close()
	t0 := time.Now()
	for {
		_, err := s.PutPolicy(ctx, api.Policy{Name: policy, WearThresholdPercent: wear}, 0)
		if err == nil || errors.Is(err, store.ErrConflict) { // a try that timed out may have committed
			break
		}
		if ctx.Err() != nil {
			c.t.Fatalf("write through %s: %v", name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.t.Logf("wrote %s through %s in %v", policy, name, time.Since(t0).Round(time.Millisecond))
}

// get reads a policy's wear threshold through the named member.
func (c *cluster) get(ctx context.Context, name, policy string) int {
	c.t.Helper()
	s := c.open(name, nil)
	defer s.Close()
	p, _, err := s.GetPolicy(ctx, policy)
	if err != nil {
		c.t.Fatalf("read %s through %s: %v", policy, name, err)
	}
	return p.WearThresholdPercent
}

// Three members form a cluster; what is written through one is read
// through another; with the leader stopped, the two left keep a quorum and
// take writes; the stopped member, restarted, catches up; a dead member
// replaced by a new one (member remove, member add, start with state
// existing on an empty data directory) gets everything too.
func TestCluster(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := newCluster(t, "http", nil, "a", "b", "c")
	c.mustStart("a", "b", "c")

	c.put(ctx, "a", "p80", 80)
	if got := c.get(ctx, "b", "p80"); got != 80 {
		t.Fatalf("read through b: %d, want 80", got)
	}
	// Each member lists its own client URL first, then the others', as
	// soon as the others' attributes reach it.
	for n, s := range c.srvs {
		want := []string{c.cfgs[n].ClientURL}
		for _, o := range []string{"a", "b", "c"} {
			if o != n {
				want = append(want, c.cfgs[o].ClientURL)
			}
		}
		got := s.Endpoints()
		for deadline := time.Now().Add(5 * time.Second); !slices.Equal(got[:1], want[:1]) ||
			!slices.Equal(sorted(got), sorted(want)); got = s.Endpoints() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: endpoints %v, want %v with its own first", n, got, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	lead := c.leader()
	var survivors []string
	for _, n := range []string{"a", "b", "c"} {
		if n != lead {
			survivors = append(survivors, n)
		}
	}
	t0 := time.Now()
	c.stop(lead)
	t.Logf("stopped leader %s in %v", lead, time.Since(t0).Round(time.Millisecond))
	c.put(ctx, survivors[0], "p81", 81)
	if got := c.get(ctx, survivors[1], "p81"); got != 81 {
		t.Fatalf("read through %s: %d, want 81", survivors[1], got)
	}

	// Restarted on its data, the member rejoins whatever the state flag
	// says; "existing" is what the runbook gives.
	cfg := c.cfgs[lead]
	cfg.InitialClusterState = etcdserver.ClusterExisting
	c.cfgs[lead] = cfg
	c.mustStart(lead)
	if got := c.get(ctx, lead, "p81"); got != 81 {
		t.Fatalf("read through restarted %s: %d, want 81", lead, got)
	}

	// Replace survivors[1] by d on a new address and an empty directory.
	dead := survivors[1]
	c.stop(dead)
	d := etcdtest.LoopbackURLs(t, "http", 2)
	// etcd refuses to remove a member it still counts as connected: retry
	// until it has noticed the stop, as an operator would.
	t0 = time.Now()
	for err := c.srvs[survivors[0]].ReplaceMember(ctx, dead, d[0]); err != nil; err = c.srvs[survivors[0]].ReplaceMember(ctx, dead, d[0]) {
		if ctx.Err() != nil {
			t.Fatalf("replace %s: %v", dead, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("replaced %s in %v", dead, time.Since(t0).Round(time.Millisecond))
	var ic []string
	for _, n := range []string{"a", "b", "c"} {
		if n != dead {
			ic = append(ic, n+"="+c.peers[n])
		}
	}
	c.cfgs["d"] = etcdserver.Config{
		DataDir: filepath.Join(t.TempDir(), "d"), Name: "d", ClientURL: d[1],
		InitialCluster:      strings.Join(append(ic, "d="+d[0]), ","),
		InitialClusterState: etcdserver.ClusterExisting,
	}
	c.mustStart("d")
	if got := c.get(ctx, "d", "p81"); got != 81 {
		t.Fatalf("read through new member d: %d, want 81", got)
	}
	c.put(ctx, "d", "p82", 82)
	if got := c.get(ctx, lead, "p82"); got != 82 {
		t.Fatalf("read through %s: %d, want 82", lead, got)
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// A member alone cannot form the cluster: Start gives up at its deadline,
// says why, and leaves nothing running (the ports are free again).
func TestClusterNoQuorum(t *testing.T) {
	t.Parallel()
	c := newCluster(t, "http", nil, "a", "b", "c")
	t0 := time.Now()
	err := c.start(500*time.Millisecond, "a")["a"]
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "no quorum") {
		t.Fatalf("start alone: %v, want a deadline error naming the missing quorum", err)
	}
	t.Logf("gave up after %v: %v", time.Since(t0).Round(time.Millisecond), err)
	c.mustStart("a", "b")
}

// With peer certificates members talk mutual TLS: two members with
// certificates of the cluster's CA form a quorum; a third whose
// certificate another CA signed is refused by both and never serves.
func TestClusterPeerTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := etcdtest.NewCA(t, dir, "ca")
	other := etcdtest.NewCA(t, dir, "other-ca")
	c := newCluster(t, "https", func(n string, cfg *etcdserver.Config) {
		signer := ca
		if n == "c" {
			signer = other
		}
		cfg.PeerCertFile, cfg.PeerKeyFile = signer.Issue(t, dir, "peer-"+n)
		cfg.PeerCAFile = ca.File
	}, "a", "b", "c")

	errc := make(chan error, 1)
	go func() { errc <- c.start(3*time.Second, "c")["c"] }()
	c.mustStart("a", "b")
	if err := <-errc; err == nil {
		t.Fatal("member c, with a certificate of another CA, joined")
	} else {
		t.Logf("c: %v", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c.put(ctx, "a", "p70", 70)
	if got := c.get(ctx, "b", "p70"); got != 70 {
		t.Fatalf("read through b: %d, want 70", got)
	}
}
