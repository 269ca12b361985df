// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/store"
)

// newRotateNVMeSecretsCmd asks a node for new NVMe authentication
// secrets (see pkg/nvmeauth and docs/security.md).
func newRotateNVMeSecretsCmd(g *Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "rotate-nvme-secrets NODE",
		Short: "Replace the NVMe/TCP authentication secrets a node requires of the hosts it exports to",
		Long: `Replace the DH-HMAC-CHAP secrets NODE's NVMe/TCP target requires of each host it
exports to (replicas and shared origins). NODE makes new secrets in its next
round (within 5 s), requires them of new connections and publishes each one
sealed to its host; each host takes its own in its round and gives it to its
live connections, which authenticate again. Rotate after a node's keyring may
have leaked (a lost disk, a restored backup) or on a schedule.

A connection that drops and reconnects during the seconds between the two
rounds is refused once and comes back like any lost peer leg (it resyncs);
rotate when the links are quiet. With --wait, waits until every secret of
NODE belongs to the new rotation.`,
		Example:           "  tidectl --etcd-endpoints http://127.0.0.1:2389 node rotate-nvme-secrets san --wait",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: g.completeNodeArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := g.needCluster("node rotate-nvme-secrets"); err != nil {
				return err
			}
			name := args[0]
			if err := api.ValidateNodeName(name); err != nil {
				return usageError{err}
			}
			ctx := cmd.Context()
			st, err := g.store(ctx)
			if err != nil {
				return err
			}
			defer st.Close()
			n, _, err := st.GetNode(ctx, name)
			if errors.Is(err, store.ErrNotFound) {
				return suggestListed(usageErrorf("node %s: not registered (see `tidectl node list`): a node rotates its secrets itself, so it must be up", name), name,
					func() ([]string, error) { return liveNodeNames(ctx, st) })
			} else if err != nil {
				return err
			}
			if n.NVMeAuthKey == "" {
				return usageErrorf("node %s does not authenticate NVMe/TCP connections (its kernel has no in-band authentication): it has no secrets to rotate", name)
			}
			spec, err := updateNodeSpec(ctx, st, name, func(spec *api.NodeSpec, _ bool) error {
				spec.RotateNVMeSecrets = max(time.Now().UnixNano(), spec.RotateNVMeSecrets+1)
				return nil
			})
			if err != nil {
				return err
			}
			if g.cl.wait {
				if err := waitRotated(ctx, g, st, name, spec.RotateNVMeSecrets); err != nil {
					return err
				}
			}
			if g.JSON() {
				return g.Print(map[string]any{"node": name, "rotation": spec.RotateNVMeSecrets, "done": g.cl.wait})
			}
			if g.cl.wait {
				fmt.Fprintf(g.Stdout, "node %s: NVMe secrets rotated; every host it exports to has a new one\n", name)
			} else {
				fmt.Fprintf(g.Stdout, "node %s: rotation %d written; it makes new secrets within 5 s (--wait waits for them)\n", name, spec.RotateNVMeSecrets)
			}
			return nil
		},
	}
}

// waitRotated waits until node has published a secret, and every one it
// published belongs to the rotation generation.
func waitRotated(ctx context.Context, g *Globals, st *store.Store, node string, generation int64) error {
	if g.cl.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, g.cl.timeout)
		defer cancel()
	}
	for {
		recs, _, _, err := st.ListNVMeSecrets(ctx)
		if err != nil {
			return err
		}
		var done, behind int
		for _, r := range recs {
			switch {
			case r.Value.Exporter != node:
			case r.Value.Generation == generation:
				done++
			default:
				behind++
			}
		}
		if done > 0 && behind == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %s: %d of %d secrets rotated when the wait ended (is its daemon running? `tidectl node list`): %w", node, done, done+behind, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}
