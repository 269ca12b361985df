// SPDX-License-Identifier: Apache-2.0

package daemon

// Host tests of the daemon's wiring: everything but device-mapper runs for
// real (an embedded etcd in a temporary directory, the store, the
// controller, metrics, HTTP), on the in-memory engine of
// reconcile/reconciletest.

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidecache/tidecache/internal/testnet"
	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/etcdserver"
	"github.com/tidecache/tidecache/pkg/reconcile/reconciletest"
	"github.com/tidecache/tidecache/pkg/store"
)

// TestDefault: the defaults validate once the node has a name, serve
// HTTP on loopback only, and name the local etcd.
func TestDefault(t *testing.T) {
	cfg := Default()
	cfg.Node = "n1"
	if err := cfg.Validate(); err != nil {
		t.Errorf("Default: %v", err)
	}
	// /metrics and /healthz on loopback only unless told otherwise
	// (issue 22, finding 9: it listened on every interface).
	if host, port, err := net.SplitHostPort(cfg.Listen); err != nil || !net.ParseIP(host).IsLoopback() || port != "9540" {
		t.Errorf("default listen %q: want a loopback address, port 9540", cfg.Listen)
	}
	if cfg.LeaseTTL != 10*time.Second || cfg.EmbeddedEtcd || len(cfg.Store.Endpoints) == 0 {
		t.Errorf("defaults: listen %q, lease TTL %s, embedded etcd %v, endpoints %q", cfg.Listen, cfg.LeaseTTL, cfg.EmbeddedEtcd, cfg.Store.Endpoints)
	}
	cfg.EmbeddedEtcd = true
	if err := cfg.Validate(); err != nil {
		t.Errorf("Default with --embedded-etcd: %v", err)
	}
}

// TestValidate: each bad field is refused, and the error names it.
func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"node", func(c *Config) { c.Node = "a/b" }, "config node"},
		{"empty node", func(c *Config) { c.Node = "" }, "config node"},
		{"listen", func(c *Config) { c.Listen = "" }, "config listen"},
		{"data dir", func(c *Config) { c.EtcdDataDir = "" }, "etcd-data-dir"},
		{"no etcd", func(c *Config) { c.EmbeddedEtcd = false; c.Store.Endpoints = nil }, "etcd-endpoints"},
		{"lease", func(c *Config) { c.LeaseTTL = time.Second }, "lease-ttl"},
		{"inventory", func(c *Config) { c.InventoryInterval = 0 }, "intervals"},
		{"placement", func(c *Config) { c.PlacementInterval = -time.Second }, "intervals"},
		{"engine", func(c *Config) { c.Engine.LockPath = "" }, "LockPath"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Default()
			cfg.Node, cfg.EmbeddedEtcd = "n1", true
			tc.mod(&cfg)
			err := cfg.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate = %v, want an error naming %q", err, tc.want)
			}
		})
	}
}

// running is a daemon served on the fake engine with an embedded etcd.
type running struct {
	t    *testing.T
	cfg  Config
	eng  *reconciletest.Engine
	addr string
	stop func() error
}

func testConfig(t *testing.T, dataDir string) Config {
	cfg := Default()
	cfg.Node = "n1"
	cfg.Address = "10.0.0.1"
	cfg.Listen = "127.0.0.1:0"
	cfg.EmbeddedEtcd = true
	cfg.EtcdDataDir = dataDir
	cfg.EtcdClientURL, cfg.EtcdPeerURL = freeURL(t), "http://127.0.0.1:0"
	cfg.LeaseTTL = 2 * time.Second
	cfg.InventoryInterval = 100 * time.Millisecond
	cfg.PlacementInterval = 100 * time.Millisecond
	cfg.Reconcile.ResyncInterval = time.Second
	cfg.ShutdownTimeout = 20 * time.Second
	cfg.Engine.LockPath = filepath.Join(t.TempDir(), "engine.lock")
	cfg.StateDir = t.TempDir()
	// Without etcd's authentication, so that the tests' own clients need
	// no password; TestAuthDaemon has it on.
	cfg.EtcdAuthDir = ""
	return cfg
}

// start serves cfg on a fake engine with the pool "fast" until stop.
func start(t *testing.T, cfg Config) *running {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	r := &running{t: t, cfg: cfg, eng: reconciletest.NewEngine("fast")}
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- serve(ctx, cfg, testLogger(t), node{eng: r.eng, ping: func(context.Context) error { return nil },
			listening: func(a net.Addr) { addr <- a }})
	}()
	select {
	case a := <-addr:
		r.addr = a.String()
	case err := <-done:
		cancel()
		t.Fatalf("serve ended before listening: %v", err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("daemon not listening within 30s")
	}
	stopped := false
	r.stop = func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			return errors.New("daemon did not stop within 30s")
		}
	}
	t.Cleanup(func() { r.stop() })
	return r
}

func (r *running) get(path string) (int, string) {
	r.t.Helper()
	resp, err := http.Get("http://" + r.addr + path)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		r.t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// health returns the /healthz body.
func (r *running) health() map[string]any {
	r.t.Helper()
	code, body := r.get("/healthz")
	if code != http.StatusOK {
		r.t.Fatalf("/healthz: %d %s", code, body)
	}
	var h map[string]any
	if err := json.Unmarshal([]byte(body), &h); err != nil {
		r.t.Fatalf("/healthz body %q: %v", body, err)
	}
	return h
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// openStore opens a store client on endpoints.
func openStore(t *testing.T, endpoints []string) *store.Store {
	t.Helper()
	cfg := store.DefaultConfig()
	cfg.Endpoints = endpoints
	st, err := store.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// TestServe runs the daemon with an embedded etcd: /healthz reports etcd
// up and this node leading, the node registers with its pool, a spec
// naming the node is reconciled (status in etcd, volume on the engine),
// /metrics shows the daemon's gauges and the volume; shutdown returns nil,
// revokes the node's lease and leaves the records in the etcd data
// directory.
func TestServe(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "etcd")
	r := start(t, testConfig(t, dataDir))

	waitFor(t, "etcd up and leadership in /healthz", func() bool {
		h := r.health()
		return h["etcd_up"] == true && h["leader"] == true
	})
	if h := r.health(); h["node"] != "n1" || h["unmanaged_volumes"] == nil {
		t.Errorf("/healthz = %v", h)
	}

	st := openStore(t, []string{r.cfg.EtcdClientURL})
	ctx := context.Background()
	waitFor(t, "node registration", func() bool {
		n, _, err := st.GetNode(ctx, "n1")
		return err == nil && n.Address == "10.0.0.1" && len(n.Pools) == 1 && n.Pools[0].Name == "fast"
	})

	spec := api.VolumeSpec{Name: "db", Node: "n1", Pool: "fast", SizeBytes: 1 << 30, WriteCacheBytes: 64 << 20}
	meta, err := st.CreateVolumeSpec(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "volume db reconciled", func() bool {
		s, _, err := st.GetVolumeStatus(ctx, "db")
		return err == nil && s.ObservedRevision == meta.ModRevision && s.State == api.StateActive && s.Mode == "writeback"
	})
	if !r.eng.Exists("db") {
		t.Error("volume db not on the engine")
	}

	code, body := r.get("/metrics")
	for _, want := range []string{
		"tidecache_etcd_up 1",
		"tidecache_leader 1",
		`tidecache_volume_size_bytes{`,
		`volume="db"`,
		`tidecache_reconcile_total{result="success"}`,
		`tidecache_scrape_collector_success{collector="volume"} 1`,
	} {
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("/metrics (%d) lacks %q", code, want)
		}
	}

	if err := r.stop(); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if _, err := net.DialTimeout("tcp", r.addr, time.Second); err == nil {
		t.Error("HTTP still listening after shutdown")
	}

	// The embedded etcd is gone with the daemon; its data directory holds
	// the spec and status, and no node record (the lease was revoked).
	srv, err := etcdserver.Start(ctx, etcdserver.Config{DataDir: dataDir, Name: "n1",
		ClientURL: "http://127.0.0.1:0", PeerURL: "http://127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	st2 := openStore(t, srv.Endpoints())
	if _, _, err := st2.GetNode(ctx, "n1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("node record after shutdown: %v, want not found (lease revoked)", err)
	}
	if s, _, err := st2.GetVolumeStatus(ctx, "db"); err != nil || s.State != api.StateActive {
		t.Errorf("status after restart of etcd: %+v, %v", s, err)
	}
}

// TestServeRefusesBadEtcdDir: an embedded etcd that cannot start ends
// serve with an error naming it, before anything listens.
func TestServeRefusesBadEtcdDir(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, filepath.Join(file, "etcd"))
	called := false
	err := serve(context.Background(), cfg, testLogger(t), node{eng: reconciletest.NewEngine("fast"),
		listening: func(net.Addr) { called = true }})
	if err == nil || !strings.Contains(err.Error(), "embedded etcd") || called {
		t.Errorf("serve = %v (listening %v), want an embedded etcd error before listening", err, called)
	}
}

// freeURL returns an http URL on a loopback port free right now, for the
// embedded etcd's clients (the test then knows where to reach it).
func freeURL(t *testing.T) string {
	t.Helper()
	return "http://" + testnet.LoopbackAddr(t)
}

// testLogger logs to the test's log, warnings and above.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// TestServeNodeNameInUse runs a second daemon under the name of a running
// one, from another machine (another instance), on the same etcd: it is
// refused registration, says why on /healthz, and reconciles nothing (the
// first daemon's volume never reaches its engine, and it leads nothing);
// once the first daemon is gone, the name is free and it takes over.
func TestServeNodeNameInUse(t *testing.T) {
	ctx := context.Background()
	srv, err := etcdserver.Start(ctx, etcdserver.Config{DataDir: filepath.Join(t.TempDir(), "etcd"), Name: "etcd",
		ClientURL: freeURL(t), PeerURL: "http://127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	daemonOn := func(instance string) Config {
		cfg := testConfig(t, "")
		cfg.EmbeddedEtcd = false
		cfg.Store.Endpoints = srv.Endpoints()
		cfg.Instance = instance
		return cfg
	}
	st := openStore(t, srv.Endpoints())
	a := start(t, daemonOn("boot-a"))
	waitFor(t, "n1 registered by the first daemon", func() bool {
		n, _, err := st.GetNode(ctx, "n1")
		return err == nil && n.Instance == "boot-a"
	})
	b := start(t, daemonOn("boot-b"))

	meta, err := st.CreateVolumeSpec(ctx, api.VolumeSpec{Name: "db", Node: "n1", Pool: "fast", SizeBytes: 1 << 30, WriteCacheBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "volume db reconciled by the first daemon", func() bool {
		s, _, err := st.GetVolumeStatus(ctx, "db")
		return err == nil && s.ObservedRevision == meta.ModRevision && s.State == api.StateActive && a.eng.Exists("db")
	})
	waitFor(t, "the second daemon reporting the refusal", func() bool {
		msg, _ := b.health()["registration_error"].(string)
		return strings.Contains(msg, "another machine")
	})
	// Give the second daemon's controller every chance to act.
	time.Sleep(2 * time.Second)
	if b.eng.Exists("db") {
		t.Fatal("the second daemon with the same node name built volume db too")
	}
	if h := b.health(); h["registered"] != false || h["leader"] != false {
		t.Errorf("second daemon /healthz = %v, want registered false, leader false", h)
	}
	if n, _, err := st.GetNode(ctx, "n1"); err != nil || n.Instance != "boot-a" {
		t.Errorf("node record %+v, %v; want the first daemon's", n, err)
	}

	// The first one stops (its lease revoked): the name is free, and the
	// second registers and runs the volume (registration retries back off
	// up to 30 s).
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(45 * time.Second)
	for !b.eng.Exists("db") {
		if time.Now().After(deadline) {
			t.Fatalf("the second daemon did not take the free name over: /healthz %v", b.health())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n, _, err := st.GetNode(ctx, "n1"); err != nil || n.Instance != "boot-b" {
		t.Errorf("node record %+v, %v; want the second daemon's", n, err)
	}
}
