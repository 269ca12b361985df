// SPDX-License-Identifier: Apache-2.0

package etcdserver_test

import (
	"context"
	"crypto/tls"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/etcdserver"
	"github.com/tidecache/tidecache/pkg/etcdserver/etcdtest"
	"github.com/tidecache/tidecache/pkg/store"
)

// get fetches the member's /health over TLS trusting ca, presenting the
// given client certificate if any.
func get(t *testing.T, endpoint string, ca *etcdtest.CA, certFile, keyFile string) error {
	t.Helper()
	cfg := &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}
	if certFile != "" {
		c, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{c}
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
	defer client.CloseIdleConnections()
	resp, err := client.Get(endpoint + "/health")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /health: %s", resp.Status)
	}
	return nil
}

func startTLS(t *testing.T, cfg etcdserver.Config) *etcdserver.Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg.DataDir = filepath.Join(t.TempDir(), "etcd")
	cfg.ClientURL = "https://127.0.0.1:0"
	cfg.PeerURL = "http://127.0.0.1:0"
	srv, err := etcdserver.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	eps := srv.Endpoints()
	if len(eps) != 1 || !strings.HasPrefix(eps[0], "https://127.0.0.1:") {
		t.Fatalf("endpoints = %v, want one https URL", eps)
	}
	return srv
}

// With a client CA the member serves mutual TLS: a store with a client
// certificate of that CA works; a client without a certificate, or with
// one from another CA, is refused.
func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := etcdtest.NewCA(t, dir, "ca")
	other := etcdtest.NewCA(t, dir, "other-ca")
	serverCert, serverKey := ca.Issue(t, dir, "server")
	clientCert, clientKey := ca.Issue(t, dir, "client")
	strangerCert, strangerKey := other.Issue(t, dir, "stranger")

	srv := startTLS(t, etcdserver.Config{CertFile: serverCert, KeyFile: serverKey, CAFile: ca.File})
	ep := srv.Endpoints()[0]

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	scfg := store.DefaultConfig()
	scfg.Endpoints = srv.Endpoints()
	scfg.CertFile, scfg.KeyFile, scfg.CAFile = clientCert, clientKey, ca.File
	s, err := store.Open(ctx, scfg)
	if err != nil {
		t.Fatalf("store with a client certificate: %v", err)
	}
	defer s.Close()
	if err := s.Healthy(ctx); err != nil {
		t.Fatalf("store with a client certificate: %v", err)
	}
	if _, err := s.PutPolicy(ctx, api.Policy{Name: "default", WearThresholdPercent: 90}, 0); err != nil {
		t.Fatal(err)
	}

	if err := get(t, ep, ca, clientCert, clientKey); err != nil {
		t.Errorf("client with a certificate of the CA: %v", err)
	}
	if err := get(t, ep, ca, "", ""); err == nil {
		t.Error("client without a certificate was served")
	} else {
		t.Logf("without a certificate: %v", err)
	}
	if err := get(t, ep, ca, strangerCert, strangerKey); err == nil {
		t.Error("client with a certificate of another CA was served")
	}
}

// Without a client CA the member serves TLS to any client.
func TestServerTLSOnly(t *testing.T) {
	dir := t.TempDir()
	ca := etcdtest.NewCA(t, dir, "ca")
	serverCert, serverKey := ca.Issue(t, dir, "server")
	srv := startTLS(t, etcdserver.Config{CertFile: serverCert, KeyFile: serverKey})
	if err := get(t, srv.Endpoints()[0], ca, "", ""); err != nil {
		t.Errorf("client without a certificate: %v", err)
	}
}
