// SPDX-License-Identifier: Apache-2.0

package store

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/tidecache/tidecache/pkg/etcdauth"
)

// DefaultPrefix is the key prefix everything tidecache stores lives under.
// The "v1" is the layout of keys below it, not the record version (records
// carry their own apiVersion): a future layout would live beside it.
const DefaultPrefix = "/tidecache/v1/"

// Config says how to reach etcd. It is the store part of the daemon's and
// tidectl's configuration; their flags fill it in.
type Config struct {
	// Endpoints are etcd client URLs (http://host:port, https://host:port)
	// or host:port. Each should name a member of the same cluster.
	Endpoints []string
	// Prefix is the key prefix, starting and ending with '/'. Two
	// tidecache clusters may share one etcd under different prefixes.
	Prefix string
	// DialTimeout bounds the wait for a first connection where etcd needs
	// one (lease keep-alive start, authentication). Open itself does not
	// wait for etcd: a daemon must start while etcd is down.
	DialTimeout time.Duration
	// KeepAlive is how long a connection may idle before the client
	// probes it, and how long the probe may wait for etcd's answer: a dead
	// member or a cut network is noticed within about twice this (and
	// another endpoint tried), not when the kernel's TCP timeout fires. It
	// is apart from DialTimeout because tidectl waits longer for a first
	// connection (authenticating on a busy node is slow) without wanting
	// to notice a lost one later.
	KeepAlive time.Duration
	// RequestTimeout bounds every single request (get, transaction, lease
	// grant) unless the caller's context ends first. Watches and Campaign
	// are not requests: they last as long as their context.
	RequestTimeout time.Duration
	// CertFile, KeyFile and CAFile configure mutual TLS: the client
	// certificate and key presented to etcd, and the CA that signed etcd's
	// server certificate. All three or none. The certificate and key are
	// re-read at every new connection, so renewed files take effect
	// without a restart.
	CertFile, KeyFile, CAFile string
	// Username and Password authenticate to etcd's own authentication
	// (RBAC), both or neither: what the user may do is what its etcd role
	// grants (see pkg/etcdauth for the users the embedded member makes).
	// With them Open authenticates at once, within DialTimeout, so unlike
	// a client without them it fails while etcd cannot be reached.
	Username, Password string
	// Credential, if set, is asked for a user and password when etcd
	// refuses a request for want of a user while Username is empty; the
	// store then authenticates with what it returns (a zero Credential:
	// not yet). It is how a client that found no password file when it
	// started (its local etcd member had not made them yet) takes one
	// once etcd asks: etcdauth.Choose, called again. Any other refusal
	// leaves the credential as it is.
	Credential func() (etcdauth.Credential, error)
	// Logger receives the etcd client's warnings (connection trouble).
	// Nil discards them.
	Logger *slog.Logger
}

// DefaultConfig returns a configuration for a local etcd on
// 127.0.0.1:2389 without TLS, as `tidecached --embedded-etcd` serves it.
func DefaultConfig() Config {
	return Config{
		Endpoints:      []string{"http://127.0.0.1:2389"},
		Prefix:         DefaultPrefix,
		DialTimeout:    5 * time.Second,
		KeepAlive:      5 * time.Second,
		RequestTimeout: 5 * time.Second,
	}
}

// Validate checks the configuration and names the field at fault. It does
// not contact etcd; it does check that the TLS files are readable.
func (c Config) Validate() error {
	if len(c.Endpoints) == 0 {
		return errors.New("store config: Endpoints: at least one etcd endpoint is needed")
	}
	tlsOn := c.CertFile != "" || c.KeyFile != "" || c.CAFile != ""
	for _, ep := range c.Endpoints {
		if err := checkEndpoint(ep, tlsOn); err != nil {
			return fmt.Errorf("store config: Endpoints: %w", err)
		}
	}
	if !strings.HasPrefix(c.Prefix, "/") || !strings.HasSuffix(c.Prefix, "/") || strings.Contains(c.Prefix, "//") {
		return fmt.Errorf("store config: Prefix %q: must start and end with '/' and contain no \"//\"", c.Prefix)
	}
	if c.DialTimeout <= 0 {
		return fmt.Errorf("store config: DialTimeout %v: must be positive", c.DialTimeout)
	}
	if c.KeepAlive <= 0 {
		return fmt.Errorf("store config: KeepAlive %v: must be positive", c.KeepAlive)
	}
	if c.RequestTimeout <= 0 {
		return fmt.Errorf("store config: RequestTimeout %v: must be positive", c.RequestTimeout)
	}
	if (c.Username == "") != (c.Password == "") {
		return errors.New("store config: Username and Password: both or neither")
	}
	if tlsOn {
		var missing []string
		for _, f := range []struct{ name, val string }{{"CertFile", c.CertFile}, {"KeyFile", c.KeyFile}, {"CAFile", c.CAFile}} {
			if f.val == "" {
				missing = append(missing, f.name)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("store config: %s not set: mutual TLS needs CertFile, KeyFile and CAFile together, or none of them", strings.Join(missing, " and "))
		}
		if _, err := c.tlsConfig(); err != nil {
			return err
		}
	}
	return nil
}

func checkEndpoint(ep string, tlsOn bool) error {
	hostport := ep
	if strings.Contains(ep, "://") {
		u, err := url.Parse(ep)
		if err != nil {
			return fmt.Errorf("%q: %w", ep, err)
		}
		switch u.Scheme {
		case "http":
			if tlsOn {
				return fmt.Errorf("%q: http endpoint with TLS files set; use https://", ep)
			}
		case "https":
			if !tlsOn {
				return fmt.Errorf("%q: https endpoint needs CertFile, KeyFile and CAFile", ep)
			}
		case "unix", "unixs":
			return nil
		default:
			return fmt.Errorf("%q: scheme must be http or https", ep)
		}
		hostport = u.Host
	}
	if _, _, err := net.SplitHostPort(hostport); err != nil {
		return fmt.Errorf("%q: want host:port: %w", ep, err)
	}
	return nil
}

// tlsConfig returns the client TLS configuration, nil without TLS. The CA
// is read once; the key pair is checked now and re-read per handshake.
func (c Config) tlsConfig() (*tls.Config, error) {
	if c.CertFile == "" {
		return nil, nil
	}
	ca, err := os.ReadFile(c.CAFile)
	if err != nil {
		return nil, fmt.Errorf("store config: CAFile: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("store config: CAFile %s: no PEM certificate in it", c.CAFile)
	}
	if _, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile); err != nil {
		return nil, fmt.Errorf("store config: CertFile/KeyFile: %w", err)
	}
	certFile, keyFile := c.CertFile, c.KeyFile
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		RootCAs:    roots,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			cert, err := tls.LoadX509KeyPair(certFile, keyFile)
			if err != nil {
				return nil, fmt.Errorf("client certificate: %w", err)
			}
			return &cert, nil
		},
	}, nil
}
