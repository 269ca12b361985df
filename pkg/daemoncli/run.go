package daemoncli

import (
	"log/slog"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tidecache/tidecache/pkg/cli"
	"github.com/tidecache/tidecache/pkg/daemon"
)

func newRunCmd(g *cli.Globals) *cobra.Command {
	cfg := daemon.Default()
	var endpoints string
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
inside the daemon with its data in --etcd-data-dir. A cluster uses an
external etcd: --etcd-endpoints with --etcd-cert/--etcd-key/--etcd-ca for
mutual TLS.

If etcd becomes unreachable, the kernel tables stay as they are and I/O is
unaffected; the daemon reports the outage (tidecache_etcd_up 0) and catches
up when etcd returns. Meant to run under systemd (Type=notify, watchdog).`,
		Example: `  tidecached run --embedded-etcd
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
			if g.Lock != "" {
				cfg.Engine.LockPath = g.Lock
			}
			cfg.Reconcile.Node = cfg.Node
			return daemon.Run(cmd.Context(), cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Node, "node", cfg.Node, "this node's name in the cluster")
	f.StringVar(&cfg.Address, "address", "", "address published in the node record (informational)")
	f.StringVar(&cfg.Listen, "listen", cfg.Listen, "HTTP address for /metrics and /healthz")
	f.BoolVar(&cfg.EmbeddedEtcd, "embedded-etcd", false, "run a single-member etcd inside the daemon (one server, nothing else to install)")
	f.StringVar(&cfg.EtcdDataDir, "etcd-data-dir", cfg.EtcdDataDir, "data directory of the embedded etcd (on a local disk that is not a tidecache volume)")
	f.StringVar(&cfg.EtcdClientURL, "etcd-client-url", cfg.EtcdClientURL, "client URL the embedded etcd serves")
	f.StringVar(&endpoints, "etcd-endpoints", "", "external etcd endpoints, comma-separated")
	f.StringVar(&cfg.Store.CertFile, "etcd-cert", "", "client certificate for etcd mutual TLS")
	f.StringVar(&cfg.Store.KeyFile, "etcd-key", "", "client key for etcd mutual TLS")
	f.StringVar(&cfg.Store.CAFile, "etcd-ca", "", "CA certificate that signed the etcd server's certificate")
	f.StringVar(&cfg.Store.Prefix, "etcd-prefix", cfg.Store.Prefix, "key prefix of tidecache's records")
	f.DurationVar(&cfg.LeaseTTL, "lease-ttl", cfg.LeaseTTL, "node lease TTL: how long a dead node stays listed")
	f.DurationVar(&cfg.Reconcile.ResyncInterval, "resync-interval", cfg.Reconcile.ResyncInterval, "how often every volume is checked against the kernel's tables")
	f.StringVar(&cfg.Reconcile.DriftPolicy, "drift-policy", cfg.Reconcile.DriftPolicy, "what to do when a table was changed behind tidecache's back: repair or report")
	f.BoolVar(&cfg.FlushOnShutdown, "flush-on-shutdown", false, "write every dirty block back before exiting")
	return cmd
}
