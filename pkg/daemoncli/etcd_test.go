package daemoncli

import (
	"context"
	"crypto/tls"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

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

var servingRE = regexp.MustCompile(`etcd serving \[(https://127\.0\.0\.1:[0-9]+)\]`)

// `tidecached etcd` with --cert-file, --key-file and --client-ca-file
// serves mutual TLS: a store with a client certificate connects, a client
// without one is refused.
func TestEtcdCommandMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := etcdtest.NewCA(t, dir, "ca")
	serverCert, serverKey := ca.Issue(t, dir, "server")
	clientCert, clientKey := ca.Issue(t, dir, "client")

	var out, errOut syncBuffer
	root := NewTidecached(&out, &errOut)
	root.SetArgs([]string{"etcd", "--data-dir", filepath.Join(dir, "etcd"),
		"--client-url", "https://127.0.0.1:0", "--peer-url", "http://127.0.0.1:0",
		"--cert-file", serverCert, "--key-file", serverKey, "--client-ca-file", ca.File})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	defer func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("tidecached etcd: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("tidecached etcd did not stop")
		}
	}()

	var endpoint string
	for deadline := time.Now().Add(30 * time.Second); endpoint == ""; time.Sleep(50 * time.Millisecond) {
		if m := servingRE.FindStringSubmatch(errOut.String()); m != nil {
			endpoint = m[1]
		} else if time.Now().After(deadline) {
			t.Fatalf("tidecached etcd did not start:\n%s", errOut.String())
		}
		select {
		case err := <-done:
			t.Fatalf("tidecached etcd exited: %v\n%s", err, errOut.String())
		default:
		}
	}

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
