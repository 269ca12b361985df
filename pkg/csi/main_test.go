// SPDX-License-Identifier: Apache-2.0

package csi_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sync/atomic"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/tidecache/tidecache/pkg/api"
	tccsi "github.com/tidecache/tidecache/pkg/csi"
	"github.com/tidecache/tidecache/pkg/etcdserver/etcdtest"
	"github.com/tidecache/tidecache/pkg/store"
)

// One embedded etcd serves the package; each test works under its own
// prefix.
var endpoints []string

func TestMain(m *testing.M) {
	os.Exit(etcdtest.RunWithMember(m, func(eps []string) { endpoints = eps }))
}

var prefixSeq atomic.Int64

var unsafeKeyChars = regexp.MustCompile(`[^A-Za-z0-9_-]+`)

// openStore opens a store under a prefix of the test's own.
func openStore(t *testing.T) *store.Store {
	t.Helper()
	cfg := store.DefaultConfig()
	cfg.Endpoints = endpoints
	cfg.Prefix = fmt.Sprintf("/test/%s-%d/v1/", unsafeKeyChars.ReplaceAllString(t.Name(), "_"), prefixSeq.Add(1))
	st, err := store.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// clients are the three services as a CO sees them, over a real socket
// through the driver's interceptor.
type clients struct {
	id   csi.IdentityClient
	ctl  csi.ControllerClient
	node csi.NodeClient
}

// serve runs a driver with cfg (store, node ID and both services unless
// set) on a socket in a temporary directory until the test ends.
func serve(t *testing.T, cfg tccsi.Config) clients {
	t.Helper()
	if !cfg.Controller && !cfg.Node {
		cfg.Controller, cfg.Node = true, true
	}
	if cfg.NodeID == "" {
		cfg.NodeID = "n1"
	}
	d, err := tccsi.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "csi.sock")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Serve(ctx, sock, 5*time.Second) }()
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.WaitForReady(true))) // the socket appears once Serve listens
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return clients{csi.NewIdentityClient(conn), csi.NewControllerClient(conn), csi.NewNodeClient(conn)}
}

// register publishes node inventories as live daemons would, each under
// its lease, until the test ends.
func register(t *testing.T, st *store.Store, nodes ...api.Node) {
	t.Helper()
	for _, n := range nodes {
		reg, err := st.Register(testCtx(t), n, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { reg.Close(context.Background()) })
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// wantCode fails unless err carries code (codes.OK: no error).
func wantCode(t *testing.T, err error, code codes.Code) {
	t.Helper()
	if got := status.Code(err); got != code {
		t.Fatalf("code %s (%v), want %s", got, err, code)
	}
}

const (
	mi = uint64(1) << 20
	gi = uint64(1) << 30
)

// twoNodes: n1 has a big pool and room for caches, n2 a small one whose
// SSDs are nearly full.
func twoNodes() []api.Node {
	return []api.Node{
		{Name: "n1", Pools: []api.PoolInventory{{Name: "tank", OriginFreeBytes: 10 * gi, SSDFreeBytes: gi}}},
		{Name: "n2", Pools: []api.PoolInventory{{Name: "small", OriginFreeBytes: 2 * gi, SSDFreeBytes: 100 * mi}}},
	}
}

func mountCap() *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
	}
}

func onNode(names ...string) []*csi.Topology {
	var out []*csi.Topology
	for _, n := range names {
		out = append(out, &csi.Topology{Segments: map[string]string{tccsi.TopologyKey: n}})
	}
	return out
}
