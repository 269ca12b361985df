// SPDX-License-Identifier: Apache-2.0

package store_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/etcdserver"
	"github.com/tidecache/tidecache/pkg/store"
)

func TestConfigValidate(t *testing.T) {
	pki := newPKI(t)
	tests := []struct {
		name   string
		modify func(*store.Config)
		want   string // "" = valid
	}{
		{"default", func(*store.Config) {}, ""},
		{"host:port endpoint", func(c *store.Config) { c.Endpoints = []string{"10.0.0.1:2379"} }, ""},
		{"mutual TLS", func(c *store.Config) {
			c.Endpoints = []string{"https://10.0.0.1:2379"}
			c.CertFile, c.KeyFile, c.CAFile = pki.clientCert, pki.clientKey, pki.caCert
		}, ""},
		{"no endpoints", func(c *store.Config) { c.Endpoints = nil }, "Endpoints"},
		{"endpoint without port", func(c *store.Config) { c.Endpoints = []string{"etcd1"} }, `Endpoints: "etcd1"`},
		{"endpoint scheme", func(c *store.Config) { c.Endpoints = []string{"ftp://etcd1:2379"} }, "scheme"},
		{"https without TLS files", func(c *store.Config) { c.Endpoints = []string{"https://etcd1:2379"} }, "needs CertFile, KeyFile and CAFile"},
		{"http with TLS files", func(c *store.Config) {
			c.CertFile, c.KeyFile, c.CAFile = pki.clientCert, pki.clientKey, pki.caCert
		}, "use https://"},
		{"prefix without trailing slash", func(c *store.Config) { c.Prefix = "/tidecache" }, "Prefix"},
		{"relative prefix", func(c *store.Config) { c.Prefix = "tidecache/" }, "Prefix"},
		{"zero dial timeout", func(c *store.Config) { c.DialTimeout = 0 }, "DialTimeout"},
		{"zero keep-alive", func(c *store.Config) { c.KeepAlive = 0 }, "KeepAlive"},
		{"negative request timeout", func(c *store.Config) { c.RequestTimeout = -time.Second }, "RequestTimeout"},
		{"cert only", func(c *store.Config) {
			c.Endpoints = []string{"https://etcd1:2379"}
			c.CertFile = pki.clientCert
		}, "KeyFile and CAFile not set"},
		{"cert and key without CA", func(c *store.Config) {
			c.Endpoints = []string{"https://etcd1:2379"}
			c.CertFile, c.KeyFile = pki.clientCert, pki.clientKey
		}, "CAFile not set"},
		{"CA only", func(c *store.Config) {
			c.Endpoints = []string{"https://etcd1:2379"}
			c.CAFile = pki.caCert
		}, "CertFile and KeyFile not set"},
		{"CA file is not PEM", func(c *store.Config) {
			c.Endpoints = []string{"https://etcd1:2379"}
			c.CertFile, c.KeyFile, c.CAFile = pki.clientCert, pki.clientKey, pki.clientKey
		}, "CAFile"},
		{"key does not match cert", func(c *store.Config) {
			c.Endpoints = []string{"https://etcd1:2379"}
			c.CertFile, c.KeyFile, c.CAFile = pki.clientCert, pki.serverKey, pki.caCert
		}, "CertFile/KeyFile"},
		{"missing cert file", func(c *store.Config) {
			c.Endpoints = []string{"https://etcd1:2379"}
			c.CertFile, c.KeyFile, c.CAFile = "/nonexistent.pem", pki.clientKey, pki.caCert
		}, "CertFile/KeyFile"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := store.DefaultConfig()
			tt.modify(&cfg)
			err := cfg.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("want valid, got %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("got %v, want an error naming %q", err, tt.want)
			}
			if err != nil {
				if _, oerr := store.Open(context.Background(), cfg); oerr == nil {
					t.Fatal("Open accepted a config Validate refused")
				}
			}
		})
	}
}

// A real mutual-TLS connection to an embedded etcd that requires client
// certificates: the right certificate works, a certificate from another CA
// does not.
func TestMutualTLS(t *testing.T) {
	pki := newPKI(t)
	srv, err := etcdserver.Start(testCtx(t), etcdserver.Config{
		DataDir:   filepath.Join(t.TempDir(), "etcd"),
		ClientURL: "https://127.0.0.1:0",
		PeerURL:   "http://127.0.0.1:0",
		CertFile:  pki.serverCert, KeyFile: pki.serverKey, CAFile: pki.caCert,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if ep := srv.Endpoints()[0]; !strings.HasPrefix(ep, "https://127.0.0.1:") {
		t.Fatalf("endpoint %s", ep)
	}

	cfg := store.DefaultConfig()
	cfg.Endpoints = srv.Endpoints()
	cfg.RequestTimeout = 2 * time.Second
	cfg.CertFile, cfg.KeyFile, cfg.CAFile = pki.clientCert, pki.clientKey, pki.caCert
	s := openWith(t, cfg)
	if err := s.Healthy(testCtx(t)); err != nil {
		t.Fatalf("with the right client certificate: %v", err)
	}
	if _, err := s.PutPolicy(testCtx(t), api.Policy{Name: "default"}, 0); err != nil {
		t.Fatal(err)
	}

	cfg.CertFile, cfg.KeyFile = pki.rogueCert, pki.rogueKey
	cfg.RequestTimeout = 500 * time.Millisecond
	rogue := openWith(t, cfg)
	if err := rogue.Healthy(testCtx(t)); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("with a certificate from another CA: %v, want ErrUnavailable", err)
	}
}

type pki struct {
	caCert, serverCert, serverKey, clientCert, clientKey, rogueCert, rogueKey string
}

// newPKI writes a CA, a server certificate for 127.0.0.1, a client
// certificate it signed, and a client certificate from another CA.
func newPKI(t *testing.T) pki {
	t.Helper()
	dir := t.TempDir()
	write := func(name string, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	serial := int64(0)
	issue := func(tmpl *x509.Certificate, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey, []byte, []byte) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		serial++
		tmpl.SerialNumber = big.NewInt(serial)
		tmpl.NotBefore = time.Now().Add(-time.Hour)
		tmpl.NotAfter = time.Now().Add(time.Hour)
		if parent == nil {
			parent, parentKey = tmpl, key
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
		if err != nil {
			t.Fatal(err)
		}
		cert, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		keyDER, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		return cert, key, der, keyDER
	}
	caTmpl := func(cn string) *x509.Certificate {
		return &x509.Certificate{
			Subject: pkix.Name{CommonName: cn}, IsCA: true, BasicConstraintsValid: true,
			KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		}
	}
	leaf := func(cn string, usage x509.ExtKeyUsage) *x509.Certificate {
		return &x509.Certificate{
			Subject: pkix.Name{CommonName: cn}, KeyUsage: x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		}
	}
	var p pki
	ca, caKey, der, _ := issue(caTmpl("tidecache test CA"), nil, nil)
	p.caCert = write("ca.pem", "CERTIFICATE", der)
	_, _, der, keyDER := issue(leaf("etcd", x509.ExtKeyUsageServerAuth), ca, caKey)
	p.serverCert, p.serverKey = write("server.pem", "CERTIFICATE", der), write("server-key.pem", "EC PRIVATE KEY", keyDER)
	_, _, der, keyDER = issue(leaf("node1", x509.ExtKeyUsageClientAuth), ca, caKey)
	p.clientCert, p.clientKey = write("client.pem", "CERTIFICATE", der), write("client-key.pem", "EC PRIVATE KEY", keyDER)
	rca, rcaKey, _, _ := issue(caTmpl("rogue CA"), nil, nil)
	_, _, der, keyDER = issue(leaf("rogue", x509.ExtKeyUsageClientAuth), rca, rcaKey)
	p.rogueCert, p.rogueKey = write("rogue.pem", "CERTIFICATE", der), write("rogue-key.pem", "EC PRIVATE KEY", keyDER)
	return p
}
