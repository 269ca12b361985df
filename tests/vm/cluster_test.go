//go:build vm

package vm_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidecache/tidecache/tests/vm/harness"
)

// clusterView is what `tidectl -o json node list` prints.
type clusterView struct {
	Leader string `json:"leader"`
	Nodes  []struct {
		Name string `json:"name"`
	} `json:"nodes"`
}

func (v clusterView) names() []string {
	var out []string
	for _, n := range v.Nodes {
		out = append(out, n.Name)
	}
	sort.Strings(out)
	return out
}

// TestClusterMembership runs three nodes on one network with one etcd
// (on node a, as its own process): every daemon registers; a node whose VM
// is killed disappears within its lease TTL; the leader's VM killed, the
// leadership moves to a surviving node.
func TestClusterMembership(t *testing.T) {
	bin, err := binaries()
	if err != nil {
		t.Fatal(err)
	}
	dir := harness.TestDir(t)
	hub := hubAddr(t)

	names := []string{"a", "b", "c"}
	nodes := make([]*node, 3)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var bootErr error
	for i, name := range names {
		netw := &harness.Network{Addr: fmt.Sprintf("10.77.0.%d/24", i+1)}
		if i == 0 {
			netw.Listen = hub
		} else {
			netw.Connect = hub
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := harness.Boot(t.Context(), harness.Config{Name: name, Dir: dir, MemoryMiB: 768, Network: netw})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				bootErr = err
				return
			}
			t.Cleanup(func() { v.Kill() })
			nodes[i] = &node{VM: v, t: t, bin: bin, dir: dir}
		}()
	}
	wg.Wait()
	if bootErr != nil {
		t.Fatal(bootErr)
	}
	a, b, c := nodes[0], nodes[1], nodes[2]
	const endpoint = "http://10.77.0.1:2389"
	a.mustSh("tidecached etcd --client-url " + endpoint + " --data-dir /run/etcd >/run/etcd.log 2>&1 &")
	a.eventually(60*time.Second, "tidectl --etcd-endpoints "+endpoint+" node list", "NODE")

	// b campaigns first, so b leads; then c, then a.
	const ttl = 4 * time.Second
	for _, n := range []*node{b, c, a} {
		n.mustSh(fmt.Sprintf("tidecached run --node %s --listen 127.0.0.1:9540 --etcd-endpoints %s --lease-ttl %s >/run/daemon.log 2>&1 &", n.Name(), endpoint, ttl))
		time.Sleep(2 * time.Second)
	}
	view := func(n *node) clusterView {
		t.Helper()
		var v clusterView
		out := n.mustSh("tidectl -o json --etcd-endpoints " + endpoint + " node list")
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatalf("node list: %v\n%s", err, out)
		}
		return v
	}
	waitFor := func(n *node, what string, timeout time.Duration, ok func(clusterView) bool) (clusterView, time.Duration) {
		t.Helper()
		start := time.Now()
		for {
			v := view(n)
			if ok(v) {
				return v, time.Since(start)
			}
			if time.Since(start) > timeout {
				t.Fatalf("%s: not after %s; cluster is %+v", what, timeout, v)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	v, _ := waitFor(a, "all three registered", 90*time.Second, func(v clusterView) bool {
		return slices.Equal(v.names(), []string{"a", "b", "c"}) && v.Leader != ""
	})
	t.Logf("registered: %v, leader %s", v.names(), v.Leader)
	if v.Leader != "b" {
		t.Fatalf("leader is %s, want b (first to campaign)", v.Leader)
	}

	// Kill c: its record goes once its lease expires.
	if err := c.Kill(); err != nil {
		t.Fatal(err)
	}
	_, took := waitFor(a, "c expired", 3*ttl+10*time.Second, func(v clusterView) bool {
		return slices.Equal(v.names(), []string{"a", "b"})
	})
	t.Logf("c gone from the node list %s after its VM was killed (lease TTL %s)", took.Round(100*time.Millisecond), ttl)

	// Kill the leader: a takes over.
	if err := b.Kill(); err != nil {
		t.Fatal(err)
	}
	v, took = waitFor(a, "leadership moved", 3*ttl+10*time.Second, func(v clusterView) bool {
		return v.Leader == "a" && slices.Equal(v.names(), []string{"a"})
	})
	t.Logf("leader moved to %s %s after the leader's VM was killed", v.Leader, took.Round(100*time.Millisecond))
	if out := a.mustSh("curl -sf http://127.0.0.1:9540/metrics | grep '^tidecache_leader '"); !strings.Contains(out, "tidecache_leader 1") {
		t.Fatalf("a's metrics do not show it leading: %s", out)
	}
}
