// SPDX-License-Identifier: Apache-2.0

// Package etcdserver runs etcd inside tidecached: either a single member,
// so that one server needs nothing else (`tidecached run --embedded-etcd`),
// or one member of a multi-member cluster, typically three tidecached
// nodes running one member each, so that the store keeps a quorum when one
// of those nodes dies.
//
// It owns the embedded server's configuration and lifecycle only: the
// daemon and tidectl talk to it through pkg/store like to any other etcd,
// using the URLs Endpoints returns. Nodes that run no member point their
// daemon at the members' client URLs, or at an external etcd cluster.
//
// # Single member
//
// The default (InitialCluster empty). The member forms a cluster of its
// own; its peer URL stays on loopback, since no peer ever dials it.
//
// # Several members
//
// With InitialCluster ("a=http://10.0.0.1:2390,b=...,c=...", the same on
// every member) the member is Name, one of those listed, listening for
// its peers on its own entry's URL (PeerURL, which may be left empty). To
// form a cluster, start every listed member with InitialClusterState
// ClusterNew and the same InitialClusterToken. To replace a dead member,
// remove it and add the new one with etcdctl member remove/add, then
// start the new one on an empty data directory with ClusterExisting.
// Once a member's data directory holds data, the initial-cluster settings
// are ignored: the membership is what the data says, so a restart needs no
// change of settings.
//
// Start waits until the member serves clients, and a member of a cluster
// serves only once a quorum of members (two of three) talk to each other:
// the first member of a forming cluster, and every member restarted while
// the others are down, blocks in Start until enough of the others have
// started. The wait is bounded by Start's context, or DefaultStartTimeout;
// under systemd a member that gave up is restarted and waits again.
//
// Endpoints returns this member's client URL first, then the client URLs
// the other members advertise in the cluster membership, so the daemon
// learns them from etcd itself and no flag lists them twice. A member that
// has not yet started since it was added advertises none, and is missing
// from the list until it has; Start waits up to ClientURLWait for every
// member's, which costs that much when a member is down.
//
// # TLS
//
// With CertFile and KeyFile the member serves clients over TLS (an https
// ClientURL). With CAFile as well it requires every client to present a
// certificate signed by that CA (mutual TLS): etcd then refuses the TLS
// handshake of a client without one. pkg/store always connects with a
// client certificate, so both work for tidecached and tidectl.
//
// Between members, PeerCertFile, PeerKeyFile and PeerCAFile turn on mutual
// TLS (https peer URLs): each member presents its certificate and accepts
// only peers whose certificate that CA signed. Without them peer traffic,
// every write replicated, is plaintext and unauthenticated, and must stay
// on a trusted network; Start logs a warning for a plaintext peer URL that
// is not on loopback.
//
// # Authentication
//
// Loopback keeps other hosts out but lets every local user in, and any of
// them who can delete a volume spec makes the root daemon flush and delete
// the volume. So a single member serving clients on loopback without
// client certificates, given an AuthDir (tidecached does), turns etcd's
// own authentication on when it starts: a user root (every record) and a
// user viewer (read under AuthPrefix only), their passwords in files in
// AuthDir, root's readable by root alone, the viewer's by everyone
// (pkg/etcdauth says how clients pick one). Start does this level-based
// on every start: on a new member, on one an older tidecache made without
// authentication (its records are kept), and after a crash halfway;
// Credential returns root's for the daemon's own client. A cluster, or a
// member on a network address, authenticates its clients with TLS client
// certificates instead (Insecure: not at all), and keeps authentication
// as it finds it. Passwords go over loopback in clear, which only root
// can read.
//
// # Lifecycle
//
// Start returns once the member serves client requests, or fails; the
// caller owns the returned Server and must Close it, after closing every
// store.Store that uses it (a client whose server went away retries until
// its own timeouts). Err reports a server that failed while running.
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
//   - etcd's raft timings (100 ms heartbeat, 1 s election timeout) are
//     kept: members of one tidecache cluster sit on one LAN.
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

	"github.com/tidecache/tidecache/pkg/etcdauth"
	"github.com/tidecache/tidecache/pkg/store"
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

	// ClientURLWait bounds how long Start, once a member of a cluster
	// serves, waits for the other members' client URLs (Endpoints). A
	// member that is down never announces them; one that started with
	// this one does within a few milliseconds.
	ClientURLWait = 2 * time.Second

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
	// volume, so Start refuses it unless Insecure is set.
	ClientURL string
	// PeerURL is where the other members connect, listened on and
	// advertised. A single member is never dialled, but etcd listens
	// anyway, so it stays on loopback by default. A member of a cluster
	// takes its entry in InitialCluster when PeerURL is empty; if set, it
	// must equal that entry.
	PeerURL string
	// InitialCluster lists every member of a multi-member cluster as
	// name=peerURL, comma-separated, and must include Name. Empty: a
	// single member. Read only when the data directory is empty.
	InitialCluster string
	// InitialClusterState is ClusterNew (default) to form the cluster
	// with the others listed, ClusterExisting to join a running one that
	// already lists this member. Only with InitialCluster.
	InitialClusterState string
	// InitialClusterToken must be the same on every member of one
	// cluster and differ between clusters; DefaultClusterToken if empty.
	// Only with InitialCluster.
	InitialClusterToken string
	// PeerCertFile, PeerKeyFile and PeerCAFile (PEM), all three or none,
	// turn on mutual TLS between members: https peer URLs, and only peers
	// with a certificate signed by PeerCAFile are accepted. Only with
	// InitialCluster.
	PeerCertFile, PeerKeyFile, PeerCAFile string
	// CertFile and KeyFile are the server certificate and key (PEM) for
	// an https ClientURL: both or neither.
	CertFile, KeyFile string
	// CAFile, with CertFile and KeyFile, turns on mutual TLS: clients must
	// present a certificate signed by this CA (PEM), others are refused.
	CAFile string
	// HeartbeatInterval and ElectionTimeout are the member's raft timing
	// (etcd's --heartbeat-interval and --election-timeout); zero keeps
	// etcd's 100 ms and 1 s. Members whose round trip is long or whose
	// CPU is starved (virtual machines under load) miss heartbeats and
	// hold needless elections, each a few seconds without a leader: raise
	// both there, the election timeout at least five heartbeats and the
	// same on every member. Only with InitialCluster.
	HeartbeatInterval, ElectionTimeout time.Duration
	// Insecure lets the member serve the network without authentication:
	// clients on a non-loopback ClientURL without TLS client certificates
	// (CertFile, KeyFile, CAFile), or peers on a non-loopback PeerURL
	// without peer TLS. Start refuses those unless it is set, and then
	// logs a warning for each (tidecached --insecure-etcd).
	Insecure bool
	// AuthDir is where the password files of etcd's authentication live
	// (etcdauth.DefaultDir for tidecached). Set, a single member serving
	// clients on loopback without client certificates turns
	// authentication on and keeps its users (see "Authentication" above).
	// Empty, Start leaves authentication as the data has it: tests, and
	// members whose clients are authenticated otherwise.
	AuthDir string
	// AuthPrefix is the key prefix the viewer may read: tidecache's
	// records (store.DefaultPrefix if empty).
	AuthPrefix string
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
	if c.clusterMode() {
		if c.Name == "" {
			c.Name = d.Name
		}
		if c.PeerURL == "" {
			// A bad InitialCluster is reported by Validate.
			if members, err := ParseInitialCluster(c.InitialCluster, c.peerTLS()); err == nil {
				if u := memberURL(members, c.Name); u != nil {
					c.PeerURL = u.String()
				}
			}
		}
		if c.InitialClusterState == "" {
			c.InitialClusterState = ClusterNew
		}
		if c.InitialClusterToken == "" {
			c.InitialClusterToken = DefaultClusterToken
		}
	}
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
	if c.AuthPrefix == "" {
		c.AuthPrefix = store.DefaultPrefix
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
	if strings.ContainsAny(c.Name, "=,") {
		return fmt.Errorf("etcdserver: Name %q: must not contain '=' or ','", c.Name)
	}
	if err := c.validateCluster(); err != nil {
		return err
	}
	if _, err := parseURL("PeerURL", c.PeerURL, c.peerTLS()); err != nil {
		return err
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
	etcd *embed.Etcd
	// own are this member's client URLs with the ports actually bound.
	own []string
	// cred is root's credential when authentication is on (Credential).
	cred      etcdauth.Credential
	closeOnce sync.Once
}

// Credential returns the credential the daemon's own client presents:
// root's, when the member has etcd's authentication on and its password
// file is readable; none otherwise.
func (s *Server) Credential() etcdauth.Credential { return s.cred }

// Start starts the member and waits until it serves clients, for at most
// ctx's deadline or DefaultStartTimeout. A member of a cluster serves only
// once a quorum has formed, so Start returns only when enough of the
// other members run (see the package doc). On failure nothing is left
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
	curl, _ := parseURL("ClientURL", cfg.ClientURL, cfg.CertFile != "")
	purl, _ := parseURL("PeerURL", cfg.PeerURL, cfg.peerTLS())
	if exposed := exposures(cfg, curl, purl); len(exposed) > 0 && !cfg.Insecure {
		return nil, fmt.Errorf("etcdserver: %s; anyone who reaches it could change every volume's desired state, fence nodes or fail volumes over: "+
			"set up TLS (docs/runbook.md, \"Serve the embedded etcd over mutual TLS\"), or accept it on a network you trust with --insecure-etcd",
			strings.Join(exposed, "; "))
	}
	warnExposed(log, cfg, curl, purl)
	if cfg.manageAuth() {
		// Before the data directory, whose 0700 would otherwise be
		// given to a parent they share (/var/lib/tidecache) and lock
		// other users out of the viewer's password.
		if err := etcdauth.MakeDir(cfg.AuthDir); err != nil {
			return nil, fmt.Errorf("etcdserver: %w", err)
		}
	}
	// embed creates the directory 0700 itself but only warns about a
	// looser existing one; refuse nothing, create it right if missing.
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("etcdserver: data dir: %w", err)
	}

	ec, err := embedConfig(cfg, log, curl, purl)
	if err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultStartTimeout)
		defer cancel()
	}
	if cfg.clusterMode() {
		log.Info("embedded etcd member starting; it serves once a quorum of the cluster runs",
			"member", cfg.Name, "initial_cluster", ec.InitialCluster, "state", ec.ClusterState)
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
		if cfg.clusterMode() {
			return nil, fmt.Errorf("etcdserver: member %q not ready, no quorum yet (are enough of %s running and reachable on their peer URLs?): %w",
				cfg.Name, ec.InitialCluster, ctx.Err())
		}
		return nil, fmt.Errorf("etcdserver: member %q not ready: %w", cfg.Name, ctx.Err())
	}

	if cfg.clusterMode() {
		awaitClientURLs(ctx, e, ClientURLWait)
	}
	s := &Server{etcd: e}
	switch {
	case cfg.manageAuth():
		if s.cred, err = ensureAuth(ctx, e.Server, cfg.AuthDir, cfg.AuthPrefix, log); err != nil {
			e.Close()
			return nil, fmt.Errorf("etcdserver: member %q: %w", cfg.Name, err)
		}
	case cfg.AuthDir != "" && e.Server.AuthStore().IsAuthEnabled():
		// Authentication a loopback life of this member turned on stays
		// on; the daemon keeps using root's password if it is there.
		file := etcdauth.PasswordFile(cfg.AuthDir, etcdauth.RootUser)
		if pw, err := etcdauth.ReadPassword(file); err == nil {
			s.cred = etcdauth.Credential{User: etcdauth.RootUser, Password: pw, File: file}
		} else {
			log.Warn("embedded etcd has authentication on and root's password is unreadable: clients need --etcd-user and --etcd-password-file", "err", err)
		}
	}
	for _, l := range e.Clients {
		u := url.URL{Scheme: curl.Scheme, Host: l.Addr().String()}
		s.own = append(s.own, u.String())
	}
	if n := len(e.Server.Cluster().Members()); cfg.clusterMode() && n == 1 && strings.Contains(cfg.InitialCluster, ",") {
		// The data directory was made by a single member (or a cluster of
		// one); etcd ignores InitialCluster when it finds data.
		log.Warn("embedded etcd data directory holds a single-member cluster: the initial cluster setting is ignored once data exists",
			"data_dir", cfg.DataDir, "initial_cluster", cfg.InitialCluster)
	}
	log.Info("embedded etcd ready", "endpoints", s.Endpoints(), "data_dir", cfg.DataDir)
	return s, nil
}

// awaitClientURLs waits, for at most wait or until ctx ends, until every
// member in e's membership advertises its client URLs, so that Endpoints
// lists the members that started with this one and not only those whose
// announcement this member had applied when it became ready.
func awaitClientURLs(ctx context.Context, e *embed.Etcd, wait time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		all := true
		for _, m := range e.Server.Cluster().Members() {
			all = all && len(m.ClientURLs) > 0
		}
		if all {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// embedConfig translates cfg (valid, defaults applied) into etcd's.
func embedConfig(cfg Config, log *slog.Logger, curl, purl *url.URL) (*embed.Config, error) {
	ec := embed.NewConfig()
	ec.Name = cfg.Name
	ec.Dir = cfg.DataDir
	ec.ListenClientUrls = []url.URL{*curl}
	ec.AdvertiseClientUrls = []url.URL{*curl}
	ec.ListenPeerUrls = []url.URL{*purl}
	ec.AdvertisePeerUrls = []url.URL{*purl}
	ec.InitialCluster = cfg.Name + "=" + purl.String()
	ec.InitialClusterToken = "tidecache-" + cfg.Name
	if cfg.clusterMode() {
		members, err := ParseInitialCluster(cfg.InitialCluster, cfg.peerTLS())
		if err != nil {
			return nil, err
		}
		var ic []string
		for _, m := range members {
			ic = append(ic, m.Name+"="+m.PeerURL.String())
		}
		ec.InitialCluster = strings.Join(ic, ",")
		ec.InitialClusterToken = cfg.InitialClusterToken
		ec.ClusterState = cfg.InitialClusterState
		if len(members)%2 == 0 {
			log.Warn("embedded etcd cluster with an even number of members: it tolerates no more failures than one member fewer, use 3",
				"members", len(members))
		}
	}
	if cfg.HeartbeatInterval != 0 {
		ec.TickMs = uint(cfg.HeartbeatInterval.Milliseconds())
	}
	if cfg.ElectionTimeout != 0 {
		ec.ElectionMs = uint(cfg.ElectionTimeout.Milliseconds())
	}
	ec.AutoCompactionMode = embed.CompactorModePeriodic
	ec.AutoCompactionRetention = AutoCompaction.String()
	ec.LogLevel = "warn"
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(etcdlog.New(log, zapcore.WarnLevel))
	if cfg.CertFile != "" {
		ec.ClientTLSInfo.CertFile = cfg.CertFile
		ec.ClientTLSInfo.KeyFile = cfg.KeyFile
		// etcd requires and verifies client certificates when a trusted
		// CA is set; ClientCertAuth says so explicitly.
		ec.ClientTLSInfo.TrustedCAFile = cfg.CAFile
		ec.ClientTLSInfo.ClientCertAuth = cfg.CAFile != ""
	}
	if cfg.peerTLS() {
		ec.PeerTLSInfo.CertFile = cfg.PeerCertFile
		ec.PeerTLSInfo.KeyFile = cfg.PeerKeyFile
		ec.PeerTLSInfo.TrustedCAFile = cfg.PeerCAFile
		ec.PeerTLSInfo.ClientCertAuth = true
	}
	return ec, nil
}

// exposures says how the member would let the network change desired
// state unchecked: clients served without TLS or without client
// certificates, and plaintext peers, on an address other than loopback.
func exposures(cfg Config, curl, purl *url.URL) []string {
	var out []string
	if !isLoopback(curl) {
		switch {
		case cfg.CertFile == "":
			out = append(out, fmt.Sprintf("client URL %s on a non-loopback address without TLS", cfg.ClientURL))
		case cfg.CAFile == "":
			out = append(out, fmt.Sprintf("client URL %s on a non-loopback address without client certificates (no CA)", cfg.ClientURL))
		}
	}
	if !isLoopback(purl) && !cfg.peerTLS() {
		out = append(out, fmt.Sprintf("peer URL %s on a non-loopback address without peer TLS (anyone who reaches it can pose as a member)", cfg.PeerURL))
	}
	return out
}

// warnExposed logs a warning for each exposure Start was told to accept
// (Config.Insecure), and for a cluster member that other nodes cannot
// reach.
func warnExposed(log *slog.Logger, cfg Config, curl, purl *url.URL) {
	for _, e := range exposures(cfg, curl, purl) {
		log.Warn("embedded etcd accepts the network without authentication (--insecure-etcd): anyone who reaches it can change desired state", "exposure", e)
	}
	if cfg.clusterMode() && isLoopback(curl) && !isLoopback(purl) {
		log.Warn("embedded etcd cluster member serves clients on loopback only: daemons and tidectl on other nodes cannot use it; give a client URL on this host's address",
			"url", cfg.ClientURL)
	}
}

func isLoopback(u *url.URL) bool {
	ip := net.ParseIP(u.Hostname())
	return u.Hostname() == "localhost" || (ip != nil && ip.IsLoopback())
}

// Endpoints returns the client URLs for store.Config.Endpoints: this
// member's, with the ports actually bound, then those the other members
// of its cluster advertise, as the membership stands now. A member added
// but not yet started advertises none; Start waits up to ClientURLWait
// for them all.
func (s *Server) Endpoints() []string {
	eps := append([]string(nil), s.own...)
	self := s.etcd.Server.MemberID()
	for _, m := range s.etcd.Server.Cluster().Members() {
		if m.ID != self {
			eps = append(eps, m.ClientURLs...)
		}
	}
	return eps
}

// Err delivers an error when the member fails while running (a listener
// died, the data directory became unwritable). The channel is closed after
// Close.
func (s *Server) Err() <-chan error { return s.etcd.Err() }

// Close stops the member: listeners close, in-flight requests get a grace
// period, then the raft node stops and the data is synced; a leader hands
// leadership to another member first. A client stream still open (a
// watch of another node, or of a store.Store not yet closed) holds the
// grace period to its end, about 7 s with etcd's default timings: close
// the local Store first. Safe to call more than once.
func (s *Server) Close() { s.closeOnce.Do(s.etcd.Close) }
