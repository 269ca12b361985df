// SPDX-License-Identifier: Apache-2.0

package daemoncli

import (
	"context"
	"crypto/tls"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/etcdserver/etcdtest"
	"github.com/tidecache/tidecache/pkg/store"
)

// syncBuffer is a strings.Builder safe for the command's goroutine and the
// test reading it.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var servingRE = regexp.MustCompile(`etcd serving \[([^\]]*)\]`)

// etcdProc is a `tidecached etcd` running in the test process.
type etcdProc struct {
	errOut syncBuffer
	done   chan error
}

// startEtcd runs `tidecached etcd args...` until the test ends, without
// waiting for it to serve.
func startEtcd(t *testing.T, args ...string) *etcdProc {
	t.Helper()
	p := &etcdProc{done: make(chan error, 1)}
	var out syncBuffer
	root := NewTidecached(&out, &p.errOut)
	root.SetArgs(append([]string{"etcd"}, args...))
	ctx, cancel := context.WithCancel(context.Background())
	go func() { p.done <- root.ExecuteContext(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-p.done:
			if err != nil {
				t.Errorf("tidecached etcd: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("tidecached etcd did not stop")
		}
	})
	return p
}

// endpoints waits until the member reports serving and returns the
// endpoints it reports.
func (p *etcdProc) endpoints(t *testing.T) []string {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if m := servingRE.FindStringSubmatch(p.errOut.String()); m != nil {
			return strings.Fields(m[1])
		} else if time.Now().After(deadline) {
			t.Fatalf("tidecached etcd did not start:\n%s", p.errOut.String())
		}
		select {
		case err := <-p.done:
			p.done <- err // for the cleanup
			t.Fatalf("tidecached etcd exited: %v\n%s", err, p.errOut.String())
		default:
		}
	}
}

// `tidecached etcd` with --cert-file, --key-file and --client-ca-file
// serves mutual TLS: a store with a client certificate connects, a client
// without one is refused.
func TestEtcdCommandMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := etcdtest.NewCA(t, dir, "ca")
	serverCert, serverKey := ca.Issue(t, dir, "server")
	clientCert, clientKey := ca.Issue(t, dir, "client")

	eps := startEtcd(t, "--data-dir", filepath.Join(dir, "etcd"),
		"--client-url", "https://127.0.0.1:0", "--peer-url", "http://127.0.0.1:0",
		"--cert-file", serverCert, "--key-file", serverKey, "--client-ca-file", ca.File).endpoints(t)
	if len(eps) != 1 || !strings.HasPrefix(eps[0], "https://127.0.0.1:") {
		t.Fatalf("serving %v, want one https endpoint", eps)
	}
	endpoint := eps[0]

	sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer scancel()
	sc := store.DefaultConfig()
	sc.Endpoints = []string{endpoint}
	sc.CertFile, sc.KeyFile, sc.CAFile = clientCert, clientKey, ca.File
	s, err := store.Open(sctx, sc)
	if err != nil {
		t.Fatalf("store with a client certificate: %v", err)
	}
	defer s.Close()
	if err := s.Healthy(sctx); err != nil {
		t.Fatalf("store with a client certificate: %v", err)
	}

	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12},
	}}
	defer client.CloseIdleConnections()
	if resp, err := client.Get(endpoint + "/health"); err == nil {
		resp.Body.Close()
		t.Errorf("a client without a certificate was served: %s", resp.Status)
	}
}

// Three `tidecached etcd` with --initial-cluster form one cluster: each
// reports every member's client URL, its own first, and what is written
// through one member is read through another.
func TestEtcdCommandCluster(t *testing.T) {
	dir := t.TempDir()
	peers := etcdtest.LoopbackURLs(t, "http", 3)
	clients := etcdtest.LoopbackURLs(t, "http", 3)
	names := []string{"e1", "e2", "e3"}
	var ic []string
	for i, n := range names {
		ic = append(ic, n+"="+peers[i])
	}
	var procs []*etcdProc
	for i, n := range names {
		procs = append(procs, startEtcd(t, "--name", n, "--data-dir", filepath.Join(dir, n),
			"--client-url", clients[i], "--initial-cluster", strings.Join(ic, ","),
			"--initial-cluster-state", "new", "--initial-cluster-token", "test"))
	}
	var eps [][]string
	for i, p := range procs {
		e := p.endpoints(t)
		if len(e) == 0 || e[0] != clients[i] || !sameSet(e, clients) {
			t.Errorf("%s serves %v, want all of %v, its own %s first", names[i], e, clients, clients[i])
		}
		eps = append(eps, e)
	}
	t.Logf("endpoints: %v", eps)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	open := func(endpoint string) *store.Store {
		sc := store.DefaultConfig()
		sc.Endpoints = []string{endpoint}
		s, err := store.Open(ctx, sc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	if _, err := open(clients[0]).PutPolicy(ctx, api.Policy{Name: "default", WearThresholdPercent: 75}, 0); err != nil {
		t.Fatalf("write through e1: %v", err)
	}
	if p, _, err := open(clients[2]).GetPolicy(ctx, "default"); err != nil || p.WearThresholdPercent != 75 {
		t.Fatalf("read through e3: %+v, %v", p, err)
	}
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// A cluster setting the command cannot honour is refused before anything
// starts.
func TestEtcdCommandClusterFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"own name missing", []string{"--name", "e4", "--initial-cluster", "e1=http://10.0.0.1:2390,e2=http://10.0.0.2:2390,e3=http://10.0.0.3:2390"}, `Name "e4" is not in InitialCluster`},
		{"state without cluster", []string{"--initial-cluster-state", "existing"}, "set InitialCluster too"},
		{"peer TLS without cluster", []string{"--peer-cert-file", "c", "--peer-key-file", "k", "--peer-ca-file", "ca"}, "a single member has no peers"},
		{"bad state", []string{"--name", "e1", "--initial-cluster", "e1=http://10.0.0.1:2390", "--initial-cluster-state", "join"}, "InitialClusterState"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := run(t, append([]string{"etcd", "--data-dir", t.TempDir()}, tt.args...)...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}
}
