// SPDX-License-Identifier: Apache-2.0

package store_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidecache/tidecache/internal/testnet"
	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/store"
)

// With etcd down, Open still works (the daemon must start and keep its
// volumes) and every request fails fast with ErrUnavailable.
func TestUnreachable(t *testing.T) {
	dead := "http://" + testnet.LoopbackAddr(t) // nothing listens there now

	cfg := store.DefaultConfig()
	cfg.Endpoints = []string{dead}
	cfg.RequestTimeout = 300 * time.Millisecond
	ctx := testCtx(t)
	s := openWith(t, cfg)

	start := time.Now()
	checks := map[string]error{
		"Healthy": s.Healthy(ctx),
	}
	_, _, checks["GetVolumeSpec"] = s.GetVolumeSpec(ctx, "db")
	_, checks["CreateVolumeSpec"] = s.CreateVolumeSpec(ctx, dbSpec())
	_, _, _, checks["ListNodes"] = s.ListNodes(ctx)
	_, checks["Register"] = s.Register(ctx, node("node1"), 2*time.Second)
	for name, err := range checks {
		if !errors.Is(err, store.ErrUnavailable) {
			t.Errorf("%s: %v, want ErrUnavailable", name, err)
		}
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("%d failing requests took %v, want each bounded by RequestTimeout", len(checks), took)
	}

	// The caller's own cancellation is not an outage.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.Healthy(cctx); !errors.Is(err, context.Canceled) || errors.Is(err, store.ErrUnavailable) {
		t.Errorf("cancelled health check: %v, want context.Canceled only", err)
	}
}

// The network to etcd is cut and restored: requests fail while it is cut,
// a watch started before resumes where it was without losing the changes
// made meanwhile, a registration whose lease ran out during the cut reports
// Lost, and the store needs no reopening.
func TestOutageAndRecovery(t *testing.T) {
	ctx := testCtx(t)
	cfg := testConfig(t)
	direct := openWith(t, cfg) // another node, still connected
	p := newProxy(t, strings.TrimPrefix(endpoints[0], "http://"))
	cfg.Endpoints = []string{"http://" + p.addr}
	cfg.RequestTimeout = 500 * time.Millisecond
	cfg.DialTimeout = time.Second
	cfg.KeepAlive = time.Second
	s := openWith(t, cfg)

	const ttl = 2 * time.Second
	reg, err := s.Register(ctx, node("node1"), ttl)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.PutPolicy(ctx, api.Policy{Name: "default"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	ch := s.Watch(ctx, m.ModRevision+1)

	p.cut()
	if err := s.Healthy(ctx); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("health with the network cut: %v, want ErrUnavailable", err)
	}
	// Changes made while this node cannot see them.
	m, err = direct.PutPolicy(ctx, api.Policy{Name: "default", WearThresholdPercent: 80}, m.ModRevision)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := direct.PutPolicy(ctx, api.Policy{Name: "default", WearThresholdPercent: 70}, m.ModRevision); err != nil {
		t.Fatal(err)
	}
	// Longer than the TTL: the lease is gone, and the node knows it.
	waitClosed(t, reg.Lost(), ttl+2*time.Second, "Lost during the cut")

	t0 := time.Now()
	p.restore()
	for s.Healthy(ctx) != nil {
		if time.Since(t0) > 10*time.Second {
			t.Fatal("store did not recover within 10s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("healthy %v after the network came back", time.Since(t0).Round(time.Millisecond))
	evs := collect(t, ch, 3)
	for i, want := range []int{80, 70} {
		if p, ok := evs[i].Value.(api.Policy); !ok || p.WearThresholdPercent != want {
			t.Errorf("event %d = %+v, want the policy at %d%%", i, evs[i], want)
		}
	}
	if e := evs[2]; e.Type != store.Delete || e.Kind != store.KindNode || e.Name != "node1" {
		t.Errorf("event 2 = %+v, want the expired node record's deletion", e)
	}

	// The daemon re-registers.
	reg, err = s.Register(ctx, node("node1"), ttl)
	if err != nil {
		t.Fatal(err)
	}
	reg.Close(ctx)
}

// proxy forwards TCP connections to etcd until cut, like a network that
// can fail.
type proxy struct {
	t      *testing.T
	target string
	addr   string

	mu    sync.Mutex
	l     net.Listener
	conns []net.Conn
}

// newProxy listens on a port outside the ephemeral range, so no outgoing
// connection takes it while the proxy is cut (restore binds it again).
func newProxy(t *testing.T, target string) *proxy {
	p := &proxy{t: t, target: target, addr: testnet.LoopbackAddr(t)}
	p.restore()
	t.Cleanup(p.cut)
	return p
}

// restore listens again on the proxy's address.
func (p *proxy) restore() {
	l, err := net.Listen("tcp", p.addr)
	if err != nil {
		p.t.Fatal(err)
	}
	p.mu.Lock()
	p.l, p.addr = l, l.Addr().String()
	p.mu.Unlock()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { io.Copy(up, c); up.Close() }()
			go func() { io.Copy(c, up); c.Close() }()
		}
	}()
}

// cut closes the listener and every connection through it.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.l != nil {
		p.l.Close()
		p.l = nil
	}
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}
