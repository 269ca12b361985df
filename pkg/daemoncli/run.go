// SPDX-License-Identifier: Apache-2.0

package daemoncli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tidecache/tidecache/pkg/cli"
	"github.com/tidecache/tidecache/pkg/daemon"
	"github.com/tidecache/tidecache/pkg/etcdauth"
	"github.com/tidecache/tidecache/pkg/etcdserver"
	"github.com/tidecache/tidecache/pkg/store"
)

func newRunCmd(g *cli.Globals) *cobra.Command {
	cfg := daemon.Default()
	var endpoints string
	var exports []string
	// The credential of etcd's authentication named on the command line;
	// without one the daemon picks root's on the node (etcdauth.Choose).
	var etcdUser, etcdPasswordFile string
	// The embedded member's settings daemon.Config does not carry: server
	// TLS (CertFile, KeyFile, CAFile) and membership of a multi-member
	// cluster (Name, PeerURL, InitialCluster..., Peer*File).
	var member etcdserver.Config
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the node daemon: reconcile etcd specs into device-mapper, serve metrics",
		Long: `Run tidecached on this node. It registers the node in etcd with a lease and
its inventory (pools, free space, SSD health), watches the volume specs that
name this node and reconciles them into device-mapper stacks, writes each
volume's observed status back, applies policies (watermarks, scheduled
flush, SSD wear/error -> writethrough, node drain), and serves Prometheus
metrics and /healthz on --listen.

One server needs nothing else: --embedded-etcd runs a single-member etcd
inside the daemon with its data in --etcd-data-dir. It serves TLS with
--embedded-etcd-cert/--embedded-etcd-key (and an https --etcd-client-url),
and requires client certificates signed by --embedded-etcd-client-ca
(mutual TLS); the daemon's own client then needs --etcd-cert/--etcd-key/
--etcd-ca too.

Three nodes can instead each run one member of a three-member embedded
etcd, which keeps a quorum when one of them dies: give every one of them
--embedded-etcd with the same --embedded-etcd-initial-cluster
(name=peerURL for all three), an --etcd-client-url on its own address,
and, once, --embedded-etcd-initial-cluster-state new. Each member's name
is --embedded-etcd-name (default: --node) and it listens for the others
on its entry's peer URL. The daemon waits until two members talk to each
other (a quorum) before it goes on, and its client then uses every
member's client URL, learnt from the cluster membership (no flag lists
them). To replace a dead member, etcdctl member remove/add it, then start
the new node with --embedded-etcd-initial-cluster-state existing on an
empty --etcd-data-dir. Once a member has data, the initial-cluster flags
are ignored. Peer traffic is plaintext unless --embedded-etcd-peer-cert,
--embedded-etcd-peer-key and --embedded-etcd-peer-ca (all three) set up
mutual TLS between members; keep plaintext peers on a trusted network (a
warning is logged otherwise). See docs/runbook.md, "Run etcd with three
members".

A single member serving clients on loopback without client certificates
(the default --embedded-etcd) turns etcd's authentication on: any local
user could otherwise delete a spec, and the daemon would then delete the
volume. It keeps a root user, whose password only root can read, and a
viewer that may only read tidecache's records, whose password every user
can read, in --etcd-auth-dir; the daemon uses root's. A member an older
tidecache made without authentication is switched over at start with its
records. See docs/security.md.

Other nodes, and production clusters, use an external etcd:
--etcd-endpoints with --etcd-cert/--etcd-key/--etcd-ca for mutual TLS, or
--etcd-user/--etcd-password-file for an etcd with password
authentication. Endpoints on loopback without either use root's password
from --etcd-auth-dir if it is there (a 'tidecached etcd' member on this
node). A plaintext (http://) endpoint that is not on loopback is logged as
a warning at start.

If etcd becomes unreachable, the kernel tables stay as they are and I/O is
unaffected; the daemon reports the outage (tidecache_etcd_up 0) and catches
up when etcd returns. Meant to run under systemd (Type=notify, watchdog).`,
		Example: `  tidecached run --embedded-etcd
  tidecached run --embedded-etcd --etcd-client-url https://10.0.0.1:2389 \
      --embedded-etcd-cert /etc/tidecache/etcd.crt --embedded-etcd-key /etc/tidecache/etcd.key \
      --embedded-etcd-client-ca /etc/tidecache/ca.crt \
      --etcd-cert /etc/tidecache/db1.crt --etcd-key /etc/tidecache/db1.key --etcd-ca /etc/tidecache/ca.crt
  tidecached run --node db1 --embedded-etcd --insecure-etcd --etcd-client-url http://10.0.0.1:2389 \
      --embedded-etcd-initial-cluster db1=http://10.0.0.1:2390,db2=http://10.0.0.2:2390,db3=http://10.0.0.3:2390
  tidecached run --node db1 --etcd-endpoints https://10.0.0.1:2379,https://10.0.0.2:2379 \
      --etcd-cert /etc/tidecache/db1.crt --etcd-key /etc/tidecache/db1.key --etcd-ca /etc/tidecache/ca.crt`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			level := slog.LevelInfo
			if g.Verbose {
				level = slog.LevelDebug
			}
			cfg.Logger = slog.New(slog.NewTextHandler(g.Stderr, &slog.HandlerOptions{Level: level}))
			if endpoints != "" {
				cfg.Store.Endpoints = strings.Split(endpoints, ",")
			}
			for _, x := range exports {
				e, err := daemon.ParseExport(x)
				if err != nil {
					return fmt.Errorf("--export %w", err)
				}
				cfg.Exports = append(cfg.Exports, e)
			}
			if g.Lock != "" {
				cfg.Engine.LockPath = g.Lock
			}
			cfg.Reconcile.Node = cfg.Node
			tlsFlags := changed(cmd, "embedded-etcd-cert", "embedded-etcd-key", "embedded-etcd-client-ca")
			clusterFlags := changed(cmd, "embedded-etcd-name", "embedded-etcd-peer-url", "embedded-etcd-initial-cluster",
				"embedded-etcd-initial-cluster-state", "embedded-etcd-initial-cluster-token",
				"embedded-etcd-peer-cert", "embedded-etcd-peer-key", "embedded-etcd-peer-ca",
				"embedded-etcd-heartbeat-interval", "embedded-etcd-election-timeout")
			switch {
			case len(tlsFlags) > 0 && !cfg.EmbeddedEtcd:
				return errors.New("--embedded-etcd-cert, --embedded-etcd-key and --embedded-etcd-client-ca configure the embedded etcd: give --embedded-etcd, or drop them")
			case len(clusterFlags) > 0 && !cfg.EmbeddedEtcd:
				return fmt.Errorf("%s configure the embedded etcd: give --embedded-etcd, or drop them", strings.Join(clusterFlags, ", "))
			case member.InitialCluster != "" && endpoints != "":
				return errors.New("--etcd-endpoints with --embedded-etcd-initial-cluster: the daemon's client uses the client URLs the members advertise; drop --etcd-endpoints")
			case cfg.EmbeddedEtcd && len(tlsFlags)+len(clusterFlags) > 0:
				stop, err := startEmbedded(cmd.Context(), &cfg, member)
				if err != nil {
					return err
				}
				defer stop()
			case !cfg.EmbeddedEtcd:
				warnPlaintext(cfg.Logger, cfg.Store)
			}
			if !cfg.EmbeddedEtcd && cfg.Store.Username == "" {
				// An external etcd (or the member started above, when it
				// has authentication on but could not hand over root's).
				req := etcdauth.Request{User: etcdUser, PasswordFile: etcdPasswordFile, Dir: cfg.EtcdAuthDir,
					Endpoints: cfg.Store.Endpoints, ClientCert: cfg.Store.CertFile != ""}
				cred, err := etcdauth.Choose(req)
				if err != nil {
					return err
				}
				cfg.Store.Username, cfg.Store.Password = cred.User, cred.Password
				// A local member started beside the daemon (tidecached
				// etcd) may not have made its passwords yet: choose
				// again when etcd asks for a user.
				cfg.Store.Credential = func() (etcdauth.Credential, error) { return etcdauth.Choose(req) }
			} else if cfg.EmbeddedEtcd && (etcdUser != "" || etcdPasswordFile != "") {
				return errors.New("--etcd-user and --etcd-password-file are for an external etcd: with --embedded-etcd the daemon uses root's password from --etcd-auth-dir")
			}
			return daemon.Run(cmd.Context(), cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Node, "node", cfg.Node, "this node's name in the cluster")
	f.StringVar(&cfg.Address, "address", "", "address published in the node record (informational)")
	f.StringVar(&cfg.Listen, "listen", cfg.Listen, "HTTP address for /metrics and /healthz; the default serves loopback only: give an address of the network your Prometheus server scrapes from (e.g. 10.0.0.11:9540) to serve it there")
	f.BoolVar(&cfg.EmbeddedEtcd, "embedded-etcd", false, "run etcd inside the daemon: a single member (one server, nothing else to install), or one member of --embedded-etcd-initial-cluster")
	f.BoolVar(&cfg.InsecureEtcd, "insecure-etcd", false, "let the embedded etcd serve a non-loopback --etcd-client-url without TLS client certificates, or its peers without peer TLS (refused otherwise): anyone who reaches it can change every volume")
	f.StringVar(&cfg.StateDir, "state-dir", cfg.StateDir, "directory for what must outlive a restart without etcd: the fences this node's NVMe/TCP target applies")
	f.StringVar(&cfg.EtcdDataDir, "etcd-data-dir", cfg.EtcdDataDir, "data directory of the embedded etcd (on a local disk that is not a tidecache volume)")
	f.StringVar(&cfg.EtcdClientURL, "etcd-client-url", cfg.EtcdClientURL, "client URL the embedded etcd serves (https:// with --embedded-etcd-cert)")
	f.StringVar(&member.CertFile, "embedded-etcd-cert", "", "server certificate (PEM) of the embedded etcd: serve clients over TLS")
	f.StringVar(&member.KeyFile, "embedded-etcd-key", "", "server key (PEM) of the embedded etcd")
	f.StringVar(&member.CAFile, "embedded-etcd-client-ca", "", "CA (PEM) the embedded etcd requires client certificates to be signed by (mutual TLS)")
	f.StringVar(&member.InitialCluster, "embedded-etcd-initial-cluster", "", "every member of a multi-member embedded etcd as name=peerURL,... (the same on every member, this one included); empty: a single member")
	f.StringVar(&member.Name, "embedded-etcd-name", "", "this member's name in --embedded-etcd-initial-cluster (default: --node)")
	f.StringVar(&member.PeerURL, "embedded-etcd-peer-url", "", "URL the other members connect to (default: this member's entry in --embedded-etcd-initial-cluster; single member: "+etcdserver.DefaultPeerURL+")")
	f.StringVar(&member.InitialClusterState, "embedded-etcd-initial-cluster-state", "", "new: form the cluster with the other members listed (default); existing: join a running cluster after etcdctl member add")
	f.StringVar(&member.InitialClusterToken, "embedded-etcd-initial-cluster-token", "", "the same on every member, another for each cluster on one network (default "+etcdserver.DefaultClusterToken+")")
	f.StringVar(&member.PeerCertFile, "embedded-etcd-peer-cert", "", "certificate (PEM) this member presents to its peers, for server and client use: mutual TLS between members (https peer URLs)")
	f.StringVar(&member.PeerKeyFile, "embedded-etcd-peer-key", "", "key (PEM) of --embedded-etcd-peer-cert")
	f.StringVar(&member.PeerCAFile, "embedded-etcd-peer-ca", "", "CA (PEM) that signed every member's peer certificate; peers without one are refused")
	f.DurationVar(&member.HeartbeatInterval, "embedded-etcd-heartbeat-interval", 0, "how often the etcd leader tells the members it lives (default etcd's 100ms); the same on every member")
	f.DurationVar(&member.ElectionTimeout, "embedded-etcd-election-timeout", 0, "how long a member waits without a heartbeat before it calls an election (default etcd's 1s; at least 5 heartbeats): raise both on slow or loaded links")
	f.StringVar(&endpoints, "etcd-endpoints", "", "external etcd endpoints, comma-separated")
	f.StringVar(&cfg.Store.CertFile, "etcd-cert", "", "client certificate for etcd mutual TLS")
	f.StringVar(&cfg.Store.KeyFile, "etcd-key", "", "client key for etcd mutual TLS")
	f.StringVar(&cfg.Store.CAFile, "etcd-ca", "", "CA certificate that signed the etcd server's certificate")
	f.StringVar(&cfg.Store.Prefix, "etcd-prefix", cfg.Store.Prefix, "key prefix of tidecache's records")
	f.StringVar(&etcdUser, "etcd-user", "", "user of etcd's password authentication (an external etcd; default: root's password from --etcd-auth-dir for loopback endpoints)")
	f.StringVar(&etcdPasswordFile, "etcd-password-file", "", "file holding --etcd-user's password (first line)")
	f.StringVar(&cfg.EtcdAuthDir, "etcd-auth-dir", cfg.EtcdAuthDir, "where the embedded etcd keeps its root (0600) and viewer (0644) passwords; etcd's authentication is on for a single member serving loopback without client certificates")
	f.DurationVar(&cfg.LeaseTTL, "lease-ttl", cfg.LeaseTTL, "node lease TTL: how long a dead node stays listed")
	f.DurationVar(&cfg.Reconcile.ResyncInterval, "resync-interval", cfg.Reconcile.ResyncInterval, "how often every volume is checked against the kernel's tables")
	f.StringVar(&cfg.Reconcile.DriftPolicy, "drift-policy", cfg.Reconcile.DriftPolicy, "what to do when a table was changed behind tidecache's back: repair or report")
	f.BoolVar(&cfg.FlushOnShutdown, "flush-on-shutdown", false, "write every dirty block back before exiting")
	f.DurationVar(&cfg.LegRetry, "leg-retry", cfg.LegRetry, "how long after a write mirror leg failed it is first given back to dm-raid (then twice as long after each failed try, up to 10m)")
	f.StringVar(&cfg.ReplicaAddress, "replica-address", "", "IPv4[:port] where this node's NVMe/TCP target serves replicas of peers' write caches (--protect peer; port 4420 by default); without it the node keeps none")
	f.BoolVar(&cfg.InsecureNVMe, "insecure-nvme", false, "admit NVMe/TCP hosts by their declared NQN: required for a non-loopback --replica-address on a kernel without NVMe in-band authentication (Debian's 6.1); on one with it (6.12), lets this node serve hosts that cannot authenticate. Only the source-address allow-list (nftables) then keeps anyone who can use an allowed node's address from connecting as it (docs/security.md)")
	f.StringArrayVar(&exports, "export", nil, "NAME=DEVICE: export a shared device (a SAN LUN, an md RAID10) over NVMe/TCP on --replica-address to every other registered node but fenced ones, one subsystem per node, namespace UUID derived from NAME (wwid uuid.<UUID> on every node); repeatable")
	f.StringVar(&cfg.FaultDomain, "fault-domain", "", "fault domain of this node (a rack, a power feed): a volume's replica goes to another domain when one has room")
	cmd.MarkFlagsRequiredTogether("embedded-etcd-cert", "embedded-etcd-key")
	return cmd
}

// startEmbedded starts the embedded member with the settings daemon.Config
// cannot carry (server TLS, cluster membership) and points the daemon's
// store at it, in place of the daemon's own embedded start (daemon.Config
// has only the data directory and the client and peer URLs). The caller
// runs the daemon, which closes its store before returning, and then
// calls stop: the same order as the daemon's own shutdown.
//
// A member of a cluster returns only once a quorum has formed: until then
// the daemon does not start, and gives up after etcdserver's start timeout
// (systemd starts it again).
func startEmbedded(ctx context.Context, cfg *daemon.Config, member etcdserver.Config) (stop func(), err error) {
	if member.CertFile != "" && cfg.Store.CertFile == "" {
		return nil, errors.New("--embedded-etcd-cert: the daemon's own client of the embedded etcd needs --etcd-cert, --etcd-key and --etcd-ca (store TLS is always mutual)")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	member.DataDir, member.ClientURL, member.Logger = cfg.EtcdDataDir, cfg.EtcdClientURL, cfg.Logger
	member.Insecure = cfg.InsecureEtcd
	member.AuthDir, member.AuthPrefix = cfg.EtcdAuthDir, cfg.Store.Prefix
	if member.Name == "" {
		member.Name = cfg.Node
	}
	if member.PeerURL == "" && member.InitialCluster == "" {
		member.PeerURL = cfg.EtcdPeerURL
	}
	srv, err := etcdserver.Start(ctx, member)
	if err != nil {
		return nil, fmt.Errorf("embedded etcd: %w", err)
	}
	cfg.EmbeddedEtcd = false
	cfg.Store.Endpoints = srv.Endpoints()
	if c := srv.Credential(); !c.None() {
		cfg.Store.Username, cfg.Store.Password = c.User, c.Password
	}
	cfg.Logger.Info("embedded etcd started", "member", member.Name, "endpoints", cfg.Store.Endpoints,
		"data_dir", cfg.EtcdDataDir, "client_cert_auth", member.CAFile != "", "cluster", member.InitialCluster != "")
	return srv.Close, nil
}

// changed returns, as --flag, those of the named flags given on the
// command line.
func changed(cmd *cobra.Command, names ...string) []string {
	var out []string
	for _, n := range names {
		if cmd.Flags().Changed(n) {
			out = append(out, "--"+n)
		}
	}
	return out
}

// warnPlaintext logs a warning for each external etcd endpoint reached
// without TLS on an address other than loopback: whoever can read or
// inject that traffic can change every volume's desired state.
func warnPlaintext(log *slog.Logger, sc store.Config) {
	for _, ep := range plaintextEndpoints(sc) {
		log.Warn("etcd endpoint without TLS: desired state crosses the network in clear and unauthenticated; use https:// with --etcd-cert, --etcd-key and --etcd-ca",
			"endpoint", ep)
	}
}

// plaintextEndpoints returns the endpoints of sc that are plaintext
// (http://, or host:port without TLS files) and not on loopback.
func plaintextEndpoints(sc store.Config) []string {
	tlsOn := sc.CertFile != "" || sc.KeyFile != "" || sc.CAFile != ""
	var out []string
	for _, ep := range sc.Endpoints {
		host := ep
		if strings.Contains(ep, "://") {
			u, err := url.Parse(ep)
			if err != nil || u.Scheme != "http" {
				continue // https, unix sockets; a bad URL fails validation
			}
			host = u.Host
		} else if tlsOn {
			continue
		}
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		if ip := net.ParseIP(host); host == "localhost" || (ip != nil && ip.IsLoopback()) {
			continue
		}
		out = append(out, ep)
	}
	return out
}
