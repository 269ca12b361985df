package daemoncli

import (
	"fmt"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/tidecache/tidecache/pkg/cli"
	"github.com/tidecache/tidecache/pkg/etcdserver"
)

func newEtcdCmd(g *cli.Globals) *cobra.Command {
	cfg := etcdserver.DefaultConfig()
	cmd := &cobra.Command{
		Use:   "etcd",
		Short: "Run only the single-member etcd tidecached can embed",
		Long: `Run the same single-member etcd that 'tidecached run --embedded-etcd' embeds,
as a process of its own. Useful to keep the cluster store up while a
node's daemon restarts, and for small setups without an etcd package. A
production cluster should run a real three-member etcd.

With --cert-file and --key-file it serves clients over TLS (give an
https:// --client-url); with --client-ca-file as well it requires every
client to present a certificate signed by that CA (mutual TLS), and refuses
clients without one. tidectl and tidecached connect with --etcd-cert,
--etcd-key and --etcd-ca.`,
		Example: `  tidecached etcd
  tidecached etcd --client-url https://10.0.0.1:2389 --cert-file /etc/tidecache/etcd.crt \
      --key-file /etc/tidecache/etcd.key --client-ca-file /etc/tidecache/ca.crt`,
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
	f.StringVar(&cfg.PeerURL, "peer-url", cfg.PeerURL, "peer URL (a single member never dials it)")
	f.StringVar(&cfg.CertFile, "cert-file", "", "server certificate (PEM): serve clients over TLS")
	f.StringVar(&cfg.KeyFile, "key-file", "", "server key (PEM)")
	f.StringVar(&cfg.CAFile, "client-ca-file", "", "CA (PEM) client certificates must be signed by: require them (mutual TLS)")
	cmd.MarkFlagsRequiredTogether("cert-file", "key-file")
	return cmd
}
