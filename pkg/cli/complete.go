// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"context"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tidecache/tidecache/pkg/pool"
	"github.com/tidecache/tidecache/pkg/store"
)

// Dynamic shell completion (`tidectl completion bash|zsh|fish`): names are
// read from the same backend the command would use, the cluster's etcd
// with --etcd-endpoints on the line, else this node's devices. A lookup
// that fails (not root, etcd down) completes nothing rather than printing
// an error into the shell; it is bounded so a dead etcd never hangs a
// Tab press.
const completionTimeout = 3 * time.Second

func completionContext(cmd *cobra.Command) (context.Context, context.CancelFunc) {
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	return context.WithTimeout(ctx, completionTimeout)
}

// matching keeps the names that start with what was typed.
func matching(names []string, toComplete string) []string {
	var out []string
	for _, n := range names {
		if strings.HasPrefix(n, toComplete) {
			out = append(out, n)
		}
	}
	return out
}

// completeModes completes a cache mode.
func completeModes(_ *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	modes := []string{string(pool.ModeWriteback), string(pool.ModeWritethrough), string(pool.ModePassthrough)}
	return matching(modes, toComplete), cobra.ShellCompDirectiveNoFileComp
}

// completeVolumes completes the first argument with volume names.
func (g *Globals) completeVolumes(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return g.volumeNames(cmd, toComplete)
}

// completeVolumeThenMode completes `set-mode NAME MODE`.
func (g *Globals) completeVolumeThenMode(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	switch len(args) {
	case 0:
		return g.volumeNames(cmd, toComplete)
	case 1:
		return completeModes(cmd, args, toComplete)
	}
	return nil, cobra.ShellCompDirectiveNoFileComp
}

func (g *Globals) volumeNames(cmd *cobra.Command, toComplete string) ([]string, cobra.ShellCompDirective) {
	ctx, cancel := completionContext(cmd)
	defer cancel()
	b, err := g.backend(ctx)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	defer b.Close()
	vols, err := b.Volumes(ctx)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var names []string
	for _, v := range vols {
		names = append(names, v.Name)
	}
	return matching(names, toComplete), cobra.ShellCompDirectiveNoFileComp
}

// completePools completes pool names: the pools every live node reports
// in cluster mode, this node's otherwise. It serves both `pool show NAME`
// and --pool.
func (g *Globals) completePools(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if cmd.Name() == "show" && len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	if g.cluster() {
		return g.clusterNames(cmd, toComplete, clusterPoolNames)
	}
	ctx, cancel := completionContext(cmd)
	defer cancel()
	e, err := g.Engine()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	defer e.Close()
	names, err := localPoolNames(ctx, e)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return matching(names, toComplete), cobra.ShellCompDirectiveNoFileComp
}

// completeNodeArg completes the first argument with live node names.
func (g *Globals) completeNodeArg(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return g.completeNodes(cmd, args, toComplete)
}

// completeNodes completes live node names (cluster mode only), for --node.
func (g *Globals) completeNodes(cmd *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	return g.clusterNames(cmd, toComplete, liveNodeNames)
}

// completePolicies completes policy names (cluster mode only).
func (g *Globals) completePolicies(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return g.clusterNames(cmd, toComplete, policyNames)
}

// clusterNames completes names that list reads from the cluster store;
// outside cluster mode, or when etcd does not answer, nothing.
func (g *Globals) clusterNames(cmd *cobra.Command, toComplete string, list func(context.Context, *store.Store) ([]string, error)) ([]string, cobra.ShellCompDirective) {
	if !g.cluster() {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ctx, cancel := completionContext(cmd)
	defer cancel()
	st, err := g.store(ctx)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	defer st.Close()
	names, err := list(ctx, st)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return matching(names, toComplete), cobra.ShellCompDirectiveNoFileComp
}
