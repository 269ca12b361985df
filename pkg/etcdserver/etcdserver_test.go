// SPDX-License-Identifier: Apache-2.0

package etcdserver_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/etcdserver"
	"github.com/tidecache/tidecache/pkg/store"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  etcdserver.Config
		want string
	}{
		{"defaults", etcdserver.Config{}, ""},
		{"port 0", etcdserver.Config{ClientURL: "http://127.0.0.1:0", PeerURL: "http://127.0.0.1:0"}, ""},
		{"all interfaces", etcdserver.Config{ClientURL: "http://0.0.0.0:2379"}, ""},
		{"TLS", etcdserver.Config{ClientURL: "https://10.0.0.1:2379", CertFile: "c", KeyFile: "k", CAFile: "ca"}, ""},
		{"host name", etcdserver.Config{ClientURL: "http://etcd.example.com:2379"}, "ClientURL"},
		{"no port", etcdserver.Config{ClientURL: "http://127.0.0.1"}, "ClientURL"},
		{"https without TLS", etcdserver.Config{ClientURL: "https://127.0.0.1:2379"}, "scheme must be http"},
		{"TLS without https", etcdserver.Config{CertFile: "c", KeyFile: "k", CAFile: "ca"}, "scheme must be https"},
		{"TLS without client certificates", etcdserver.Config{ClientURL: "https://127.0.0.1:2379", CertFile: "c", KeyFile: "k"}, ""},
		{"cert without key", etcdserver.Config{ClientURL: "https://127.0.0.1:2379", CertFile: "c"}, "CertFile and KeyFile must be set together"},
		{"CA without cert", etcdserver.Config{CAFile: "ca"}, "CAFile"},
		{"peer URL", etcdserver.Config{PeerURL: "unix:///x"}, "PeerURL"},
		{"name", etcdserver.Config{Name: "a=b"}, "Name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("want valid, got %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("got %v, want an error naming %q", err, tt.want)
			}
		})
	}
}

func start(t *testing.T, dir string) *etcdserver.Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := etcdserver.Start(ctx, etcdserver.Config{
		DataDir: dir, Name: "node1", ClientURL: "http://127.0.0.1:0", PeerURL: "http://127.0.0.1:0",
	})
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

func open(t *testing.T, srv *etcdserver.Server) *store.Store {
	t.Helper()
	cfg := store.DefaultConfig()
	cfg.Endpoints = srv.Endpoints()
	s, err := store.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The embedded member serves a store, and what was written survives a
// restart on the same data directory.
func TestStartRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := filepath.Join(t.TempDir(), "etcd")

	t0 := time.Now()
	srv := start(t, dir)
	t.Logf("first start: %v", time.Since(t0).Round(time.Millisecond))
	eps := srv.Endpoints()
	if len(eps) != 1 || !strings.HasPrefix(eps[0], "http://127.0.0.1:") || strings.HasSuffix(eps[0], ":0") {
		t.Fatalf("endpoints = %v, want the bound port", eps)
	}
	s := open(t, srv)
	if err := s.Healthy(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutPolicy(ctx, api.Policy{Name: "default", WearThresholdPercent: 90}, 0); err != nil {
		t.Fatal(err)
	}
	s.Close()
	srv.Close()
	srv.Close() // idempotent
	if _, ok := <-srv.Err(); ok {
		t.Error("Err channel still open after Close")
	}

	t0 = time.Now()
	srv = start(t, dir)
	defer srv.Close()
	t.Logf("restart: %v", time.Since(t0).Round(time.Millisecond))
	s = open(t, srv)
	defer s.Close()
	p, _, err := s.GetPolicy(ctx, "default")
	if err != nil || p.WearThresholdPercent != 90 {
		t.Fatalf("after restart: %+v, %v", p, err)
	}
}

// A start that cannot finish in time fails and leaves nothing running.
func TestStartTimeout(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := etcdserver.Start(ctx, etcdserver.Config{
		DataDir: filepath.Join(t.TempDir(), "etcd"), ClientURL: "http://127.0.0.1:0", PeerURL: "http://127.0.0.1:0",
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("start with a cancelled context: %v", err)
	}
}

func TestStartRejectsBadConfig(t *testing.T) {
	if _, err := etcdserver.Start(context.Background(), etcdserver.Config{ClientURL: "http://nowhere"}); err == nil {
		t.Fatal("started with a bad ClientURL")
	}
}

// TestStartRefusesUnauthenticatedNetwork: a member that would let the
// network change desired state without authentication (clients without
// TLS client certificates, or peers without TLS, on an address other than
// loopback) does not start unless told to accept it (Insecure,
// --insecure-etcd); loopback needs no opt-in (issue 22, finding 8).
func TestStartRefusesUnauthenticatedNetwork(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		cfg  etcdserver.Config
		want string
	}{
		{"clients in clear on the network", etcdserver.Config{ClientURL: "http://192.0.2.10:2389"},
			"client URL http://192.0.2.10:2389 on a non-loopback address without TLS"},
		{"TLS without client certificates", etcdserver.Config{ClientURL: "https://192.0.2.10:2389", CertFile: "/nonexistent/s.crt", KeyFile: "/nonexistent/s.key"},
			"without client certificates"},
		{"peers in clear on the network", etcdserver.Config{Name: "e1", InitialCluster: "e1=http://192.0.2.10:2390,e2=http://192.0.2.11:2390,e3=http://192.0.2.12:2390"},
			"peer URL http://192.0.2.10:2390 on a non-loopback address without peer TLS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.DataDir = filepath.Join(t.TempDir(), "etcd")
			srv, err := etcdserver.Start(ctx, tc.cfg)
			if err == nil {
				srv.Close()
				t.Fatal("started")
			}
			for _, want := range []string{tc.want, "--insecure-etcd"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q lacks %q", err, want)
				}
			}
		})
	}
	// Loopback is not the network; the opt-in starts a member that
	// listens on every address.
	for _, cfg := range []etcdserver.Config{
		{ClientURL: "http://127.0.0.1:0"},
		{ClientURL: "http://0.0.0.0:0", Insecure: true},
	} {
		cfg.DataDir = filepath.Join(t.TempDir(), "etcd")
		srv, err := etcdserver.Start(ctx, cfg)
		if err != nil {
			t.Fatalf("%s (insecure %v): %v", cfg.ClientURL, cfg.Insecure, err)
		}
		srv.Close()
	}
}
