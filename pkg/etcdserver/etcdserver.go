// Package etcdserver runs a single-member etcd inside tidecached, so that one
// server needs nothing else (`tidecached --embedded-etcd`).
//
// It owns the embedded server's configuration and lifecycle only: the
// daemon and tidectl talk to it through pkg/store like to any other etcd,
// using the URLs Endpoints returns. A cluster of several nodes points every
// daemon at one etcd (this embedded one, reachable on a non-loopback client
// URL, or a real etcd cluster with mTLS); this package never forms a
// multi-member cluster.
//
// # TLS
//
// With CertFile and KeyFile the member serves clients over TLS (an https
// ClientURL). With CAFile as well it requires every client to present a
// certificate signed by that CA (mutual TLS): etcd then refuses the TLS
// handshake of a client without one. pkg/store always connects with a
// client certificate, so both work for tidecached and tidectl. The peer
// URL stays plaintext: a single member has no peers, and it listens on
// loopback by default.
//
// # Lifecycle
//
// Start returns once the member has elected itself leader and serves client
// requests, or fails; the caller owns the returned Server and must Close it,
// after closing every store.Store that uses it (a client whose server went
// away retries until its own timeouts). Err reports a server that failed
// while running.
//
// # What is chosen here, and why
//
//   - Logs go to the daemon's slog logger at level warn and above: etcd is
//     chatty at info (every snapshot, every compaction) and the daemon's log
//     is for operators.
//   - Auto-compaction keeps one hour of history (periodic, AutoCompaction).
//     tidecached rewrites volume status and node records continually;
//     without compaction the revision history, and the database, grow
//     without bound. Watchers that fall an hour behind get ErrCompacted
//     from pkg/store and re-list, which the reconciler does anyway.
//   - Data is fsynced (etcd's default). Desired state must survive a power
//     cut like the cache layout does.
package etcdserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap/zapcore"

	"github.com/tidecache/tidecache/pkg/store/etcdlog"
)

// Defaults for Config fields left empty.
const (
	DefaultDataDir = "/var/lib/tidecache/etcd"
	DefaultName    = "tidecache"
	// DefaultClientURL and DefaultPeerURL avoid etcd's own 2379 and
	// 2380, which a Kubernetes control plane's etcd on the same host
	// holds.
	DefaultClientURL = "http://127.0.0.1:2389"
	DefaultPeerURL   = "http://127.0.0.1:2390"

	// DefaultStartTimeout bounds Start when its context has no deadline.
	// A member replaying a large WAL after a crash can take a while; one
	// that has not come up after a minute will not.
	DefaultStartTimeout = time.Minute

	// AutoCompaction is how much revision history the member keeps.
	AutoCompaction = time.Hour
)

// Config configures the embedded member. Empty fields take the defaults
// above (DefaultConfig).
type Config struct {
	// DataDir holds the member's WAL and database. It is created (mode
	// 0700) if missing. Keep it on a local disk that is not a tidecache
	// volume: the daemon must read its desired state before any volume
	// exists.
	DataDir string
	// Name is the member name, recorded in the data directory.
	Name string
	// ClientURL is where clients connect: http://host:port, or
	// https://host:port with CertFile and KeyFile set. Port 0 picks a free
	// port (tests); Endpoints reports the port taken. A host other than
	// loopback exposes the store to the network; without client
	// certificates (CAFile) anyone who can reach the port can change every
	// volume, so Start logs a warning.
	ClientURL string
	// PeerURL is where other members would connect. A single member never
	// dials it, but etcd listens on it anyway, so it stays on loopback by
	// default.
	PeerURL string
	// CertFile and KeyFile are the server certificate and key (PEM) for
	// an https ClientURL: both or neither.
	CertFile, KeyFile string
	// CAFile, with CertFile and KeyFile, turns on mutual TLS: clients must
	// present a certificate signed by this CA (PEM), others are refused.
	CAFile string
	// Logger receives etcd's warnings and errors. Nil discards them.
	Logger *slog.Logger
}

// DefaultConfig returns the configuration of `tidecached --embedded-etcd`.
func DefaultConfig() Config {
	return Config{
		DataDir:   DefaultDataDir,
		Name:      DefaultName,
		ClientURL: DefaultClientURL,
		PeerURL:   DefaultPeerURL,
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.DataDir == "" {
		c.DataDir = d.DataDir
	}
	if c.Name == "" {
		c.Name = d.Name
	}
	if c.ClientURL == "" {
		c.ClientURL = d.ClientURL
	}
	if c.PeerURL == "" {
		c.PeerURL = d.PeerURL
	}
	return c
}

// Validate checks the configuration after defaults are applied and names
// the field at fault.
func (c Config) Validate() error {
	c = c.withDefaults()
	if (c.CertFile == "") != (c.KeyFile == "") {
		return errors.New("etcdserver: CertFile and KeyFile must be set together (TLS) or not at all")
	}
	if c.CAFile != "" && c.CertFile == "" {
		return errors.New("etcdserver: CAFile (client certificates) needs CertFile and KeyFile: mutual TLS is TLS first")
	}
	tls := c.CertFile != ""
	if _, err := parseURL("ClientURL", c.ClientURL, tls); err != nil {
		return err
	}
	if _, err := parseURL("PeerURL", c.PeerURL, false); err != nil {
		return err
	}
	if strings.ContainsAny(c.Name, "=,") {
		return fmt.Errorf("etcdserver: Name %q: must not contain '=' or ','", c.Name)
	}
	return nil
}

func parseURL(field, s string, tls bool) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("etcdserver: %s %q: %w", field, s, err)
	}
	want := "http"
	if tls {
		want = "https"
	}
	if u.Scheme != want {
		return nil, fmt.Errorf("etcdserver: %s %q: scheme must be %s", field, s, want)
	}
	host, _, err := net.SplitHostPort(u.Host)
	if err != nil {
		return nil, fmt.Errorf("etcdserver: %s %q: want %s://IP:port: %w", field, s, want, err)
	}
	if host != "localhost" && net.ParseIP(host) == nil {
		return nil, fmt.Errorf("etcdserver: %s %q: host must be an IP address or localhost (etcd binds to it)", field, s)
	}
	if u.Path != "" && u.Path != "/" {
		return nil, fmt.Errorf("etcdserver: %s %q: must not have a path", field, s)
	}
	return u, nil
}

// Server is a running embedded etcd member.
type Server struct {
	etcd      *embed.Etcd
	endpoints []string
	closeOnce sync.Once
}

// Start starts the member and waits until it serves clients, for at most
// ctx's deadline or DefaultStartTimeout. On failure nothing is left
// running. The caller Closes the Server.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	tlsOn := cfg.CertFile != ""
	curl, _ := parseURL("ClientURL", cfg.ClientURL, tlsOn)
	purl, _ := parseURL("PeerURL", cfg.PeerURL, false)
	if ip := net.ParseIP(curl.Hostname()); curl.Hostname() != "localhost" && (ip == nil || !ip.IsLoopback()) {
		switch {
		case !tlsOn:
			log.Warn("embedded etcd serves clients without TLS on a non-loopback address: anyone who reaches it can change desired state",
				"url", cfg.ClientURL)
		case cfg.CAFile == "":
			log.Warn("embedded etcd serves TLS without requiring client certificates on a non-loopback address: anyone who reaches it can change desired state",
				"url", cfg.ClientURL)
		}
	}
	// embed creates the directory 0700 itself but only warns about a
	// looser existing one; refuse nothing, create it right if missing.
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("etcdserver: data dir: %w", err)
	}

	ec := embed.NewConfig()
	ec.Name = cfg.Name
	ec.Dir = cfg.DataDir
	ec.ListenClientUrls = []url.URL{*curl}
	ec.AdvertiseClientUrls = []url.URL{*curl}
	ec.ListenPeerUrls = []url.URL{*purl}
	ec.AdvertisePeerUrls = []url.URL{*purl}
	ec.InitialCluster = cfg.Name + "=" + purl.String()
	ec.InitialClusterToken = "tidecache-" + cfg.Name
	ec.AutoCompactionMode = embed.CompactorModePeriodic
	ec.AutoCompactionRetention = AutoCompaction.String()
	ec.LogLevel = "warn"
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(etcdlog.New(log, zapcore.WarnLevel))
	if tlsOn {
		ec.ClientTLSInfo.CertFile = cfg.CertFile
		ec.ClientTLSInfo.KeyFile = cfg.KeyFile
		// etcd requires and verifies client certificates when a trusted
		// CA is set; ClientCertAuth says so explicitly.
		ec.ClientTLSInfo.TrustedCAFile = cfg.CAFile
		ec.ClientTLSInfo.ClientCertAuth = cfg.CAFile != ""
	}

	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultStartTimeout)
		defer cancel()
	}
	e, err := embed.StartEtcd(ec)
	if err != nil {
		return nil, fmt.Errorf("etcdserver: start member %q in %s: %w", cfg.Name, cfg.DataDir, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("etcdserver: member %q failed while starting: %w", cfg.Name, err)
	case <-ctx.Done():
		e.Server.Stop()
		e.Close()
		return nil, fmt.Errorf("etcdserver: member %q not ready: %w", cfg.Name, ctx.Err())
	}

	s := &Server{etcd: e}
	for _, l := range e.Clients {
		u := url.URL{Scheme: curl.Scheme, Host: l.Addr().String()}
		s.endpoints = append(s.endpoints, u.String())
	}
	log.Info("embedded etcd ready", "endpoints", s.endpoints, "data_dir", cfg.DataDir)
	return s, nil
}

// Endpoints returns the client URLs the member listens on, with the ports
// actually bound, for store.Config.Endpoints.
func (s *Server) Endpoints() []string { return append([]string(nil), s.endpoints...) }

// Err delivers an error when the member fails while running (a listener
// died, the data directory became unwritable). The channel is closed after
// Close.
func (s *Server) Err() <-chan error { return s.etcd.Err() }

// Close stops the member: listeners close, in-flight requests get a grace
// period, then the raft node stops and the data is synced. A client
// stream still open (a watch of another node, or of a store.Store not yet
// closed) holds the grace period to its end, about 7 s with etcd's default
// timings: close the local Store first. Safe to call more than once.
func (s *Server) Close() { s.closeOnce.Do(s.etcd.Close) }
