// SPDX-License-Identifier: Apache-2.0

package daemoncli

import (
	"fmt"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/tidecache/tidecache/pkg/cli"
	"github.com/tidecache/tidecache/pkg/etcdauth"
	"github.com/tidecache/tidecache/pkg/etcdserver"
	"github.com/tidecache/tidecache/pkg/store"
)

func newEtcdCmd(g *cli.Globals) *cobra.Command {
	cfg := etcdserver.DefaultConfig()
	cfg.AuthDir = etcdauth.DefaultDir
	cmd := &cobra.Command{
		Use:   "etcd",
		Short: "Run only the etcd member tidecached can embed",
		Long: `Run the same etcd member that 'tidecached run --embedded-etcd' embeds, as a
process of its own. Useful to keep the cluster store up while a node's
daemon restarts, and for small setups without an etcd package.

Alone it is a single member. With --initial-cluster (name=peerURL for
every member, the same on each) it is the member --name of a multi-member
cluster, listening for the others on its entry's peer URL: start three,
each with --initial-cluster-state new, to form a cluster that keeps a
quorum when one member dies. It serves only once a quorum runs, so the
first one waits for a second (at most a minute, then it exits). To
replace a dead member, etcdctl member remove/add it and start the new one
with --initial-cluster-state existing on an empty --data-dir. Once a
member has data, the initial-cluster flags are ignored. Peer traffic is
plaintext unless --peer-cert-file, --peer-key-file and --peer-ca-file set
up mutual TLS between members (https peer URLs). See docs/runbook.md,
"Run etcd with three members".

With --cert-file and --key-file it serves clients over TLS (give an
https:// --client-url); with --client-ca-file as well it requires every
client to present a certificate signed by that CA (mutual TLS), and refuses
clients without one. tidectl and tidecached connect with --etcd-cert,
--etcd-key and --etcd-ca.

A single member serving clients on loopback without client certificates
turns etcd's authentication on, like the embedded one: root's password
(0600) and a read-only viewer's (0644) are in --auth-dir, where tidectl
and tidecached on this node find them. See docs/security.md.`,
		Example: `  tidecached etcd
  tidecached etcd --client-url https://10.0.0.1:2389 --cert-file /etc/tidecache/etcd.crt \
      --key-file /etc/tidecache/etcd.key --client-ca-file /etc/tidecache/ca.crt
  tidecached etcd --name e1 --insecure-etcd --client-url http://10.0.0.1:2389 \
      --initial-cluster e1=http://10.0.0.1:2390,e2=http://10.0.0.2:2390,e3=http://10.0.0.3:2390`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			level := slog.LevelWarn
			if g.Verbose {
				level = slog.LevelDebug
			}
			cfg.Logger = slog.New(slog.NewTextHandler(g.Stderr, &slog.HandlerOptions{Level: level}))
			srv, err := etcdserver.Start(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			defer srv.Close()
			fmt.Fprintf(g.Stderr, "etcd serving %v (data in %s)\n", srv.Endpoints(), cfg.DataDir)
			select {
			case <-cmd.Context().Done():
				return nil
			case err := <-srv.Err():
				return fmt.Errorf("etcd: %w", err)
			}
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "data directory")
	f.StringVar(&cfg.Name, "name", cfg.Name, "member name")
	f.StringVar(&cfg.ClientURL, "client-url", cfg.ClientURL, "client URL to serve")
	f.StringVar(&cfg.PeerURL, "peer-url", "", "URL the other members connect to (default: this member's entry in --initial-cluster; single member: "+etcdserver.DefaultPeerURL+", never dialled)")
	f.StringVar(&cfg.InitialCluster, "initial-cluster", "", "every member of a multi-member cluster as name=peerURL,... (the same on every member, this one included); empty: a single member")
	f.StringVar(&cfg.InitialClusterState, "initial-cluster-state", "", "new: form the cluster with the other members listed (default); existing: join a running cluster after etcdctl member add")
	f.StringVar(&cfg.InitialClusterToken, "initial-cluster-token", "", "the same on every member, another for each cluster on one network (default "+etcdserver.DefaultClusterToken+")")
	f.StringVar(&cfg.PeerCertFile, "peer-cert-file", "", "certificate (PEM) presented to the other members, for server and client use: mutual TLS between members")
	f.StringVar(&cfg.PeerKeyFile, "peer-key-file", "", "key (PEM) of --peer-cert-file")
	f.StringVar(&cfg.PeerCAFile, "peer-ca-file", "", "CA (PEM) that signed every member's peer certificate; peers without one are refused")
	f.DurationVar(&cfg.HeartbeatInterval, "heartbeat-interval", 0, "how often the leader tells the members it lives (default etcd's 100ms); the same on every member")
	f.DurationVar(&cfg.ElectionTimeout, "election-timeout", 0, "how long a member waits without a heartbeat before it calls an election (default etcd's 1s; at least 5 heartbeats): raise both on slow or loaded links")
	f.StringVar(&cfg.CertFile, "cert-file", "", "server certificate (PEM): serve clients over TLS")
	f.StringVar(&cfg.KeyFile, "key-file", "", "server key (PEM)")
	f.StringVar(&cfg.CAFile, "client-ca-file", "", "CA (PEM) client certificates must be signed by: require them (mutual TLS)")
	f.StringVar(&cfg.AuthDir, "auth-dir", cfg.AuthDir, "where root's (0600) and the viewer's (0644) passwords of etcd's authentication are kept; it is on for a single member serving loopback without client certificates")
	f.StringVar(&cfg.AuthPrefix, "auth-prefix", store.DefaultPrefix, "key prefix the viewer may read (tidecache's --etcd-prefix)")
	f.BoolVar(&cfg.Insecure, "insecure-etcd", false, "serve a non-loopback --client-url without client certificates (--client-ca-file), or peers without peer TLS (refused otherwise): anyone who reaches it can change every volume")
	cmd.MarkFlagsRequiredTogether("cert-file", "key-file")
	return cmd
}
