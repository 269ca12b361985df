// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"cmp"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/pool"
	"github.com/tidecache/tidecache/pkg/store"
)

func newPolicyCmd(g *Globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Cluster policies: watermarks, scheduled flush, SSD wear/error rules (needs --etcd-endpoints)",
		Long: `Policies apply to volumes at run time. The policy named "default" applies to
every volume; a volume spec may name another one, whose settings override the
default's. Daemons pick changes up immediately.`,
	}
	cmd.AddCommand(newPolicySetCmd(g), newPolicyListCmd(g))
	return cmd
}

func newPolicySetCmd(g *Globals) *cobra.Command {
	var p api.Policy
	var high, low, wear int
	var jobs, autocommit uint64
	var flush, mirrorGrace, reprotect, failover time.Duration
	cmd := &cobra.Command{
		Use:   "set NAME [flags]",
		Short: "Create or change a policy (flags not given keep their current value)",
		Long: `Create or change a policy. Flags not given keep their current value.

--autocommit-ms sets dm-writecache's autocommit time for the policy's
volumes (1 to 60000 ms; 0 removes it, back to the kernel's 1000 ms). A
shorter time commits the write cache's metadata more often: a write with FUA
and no flush (O_DSYNC on ext4/XFS, journal commit blocks), acknowledged
before it is durable, becomes durable sooner; the cost is more metadata
writes to the SSD. fsync and other flushes commit at once regardless.`,
		Example: `  tidectl --etcd-endpoints http://127.0.0.1:2389 policy set default --high-watermark 40 --low-watermark 30 --flush-interval 1h --wear-threshold 90
  tidectl --etcd-endpoints http://127.0.0.1:2389 policy set oltp --autocommit-ms 100
  tidectl --etcd-endpoints http://127.0.0.1:2389 policy set default --clear-watermarks`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: g.completePolicies,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := g.needCluster("policy set"); err != nil {
				return err
			}
			// The flags alone, before etcd is dialled.
			probe := api.Policy{Name: args[0], Mode: p.Mode, OnSSDError: p.OnSSDError, FlushInterval: api.Duration(flush), WearThresholdPercent: wear, Protect: p.Protect}
			if err := probe.Validate(); err != nil {
				return usageError{policyFlagError(err)}
			}
			ctx := cmd.Context()
			st, err := g.store(ctx)
			if err != nil {
				return err
			}
			defer st.Close()
			cur, meta, err := st.GetPolicy(ctx, args[0])
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				return err
			}
			if errors.Is(err, store.ErrNotFound) {
				cur = api.Policy{Name: args[0]}
			}
			f := cmd.Flags()
			if f.Changed("mode") {
				cur.Mode = p.Mode
			}
			if f.Changed("high-watermark") {
				cur.HighWatermark = &high
			}
			if f.Changed("low-watermark") {
				cur.LowWatermark = &low
			}
			if clear, _ := f.GetBool("clear-watermarks"); clear {
				cur.HighWatermark, cur.LowWatermark, cur.WritebackJobs = nil, nil, nil
			}
			if f.Changed("writeback-jobs") {
				cur.WritebackJobs = &jobs
			}
			if f.Changed("autocommit-ms") {
				cur.AutocommitTimeMs = optionalMs(autocommit)
			}
			if f.Changed("flush-interval") {
				cur.FlushInterval = api.Duration(flush)
			}
			if f.Changed("wear-threshold") {
				cur.WearThresholdPercent = wear
			}
			if f.Changed("on-ssd-error") {
				cur.OnSSDError = p.OnSSDError
			}
			if f.Changed("protect") {
				cur.Protect = p.Protect
			}
			if f.Changed("on-mirror-degraded") {
				cur.OnMirrorDegraded = p.OnMirrorDegraded
			}
			if f.Changed("mirror-degraded-grace") {
				cur.MirrorDegradedGrace = api.Duration(mirrorGrace)
			}
			if f.Changed("reprotect-after") {
				cur.ReprotectAfter = api.Duration(reprotect)
			}
			if f.Changed("failover-after") {
				cur.FailoverAfter = api.Duration(failover)
			}
			if err := cur.Validate(); err != nil {
				return usageError{policyFlagError(err)}
			}
			m, err := st.PutPolicy(ctx, cur, meta.ModRevision)
			if err != nil {
				return err
			}
			if g.JSON() {
				return printPolicy(g, cur)
			}
			fmt.Fprintf(g.Stdout, "policy %s written (revision %d)\n", cur.Name, m.ModRevision)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&p.Mode, "mode", "", "mode of volumes whose spec sets none")
	f.IntVar(&high, "high-watermark", pool.DefaultHighWatermark, "write-back starts when the write cache is this percent full")
	f.IntVar(&low, "low-watermark", pool.DefaultLowWatermark, "write-back stops at this percent")
	f.Bool("clear-watermarks", false, "drop watermarks and write-back jobs (node defaults)")
	f.Uint64Var(&jobs, "writeback-jobs", 0, "blocks written back at once, at most")
	f.Uint64Var(&autocommit, "autocommit-ms", 0, "milliseconds between dm-writecache's own metadata commits (1-60000; 0: kernel default, 1000)")
	f.DurationVar(&flush, "flush-interval", 0, "write every dirty block back on this schedule (0: off)")
	f.IntVar(&wear, "wear-threshold", 0, "SSD wear percent at which volumes go writethrough with an alert (0: off)")
	f.StringVar(&p.OnSSDError, "on-ssd-error", "", "on an SSD I/O error: writethrough (default) or none")
	f.StringVar(&p.OnMirrorDegraded, "on-mirror-degraded", "", "when a mirrored write cache lost a leg (an SSD, a peer) for --mirror-degraded-grace: writethrough (default: drain it and stay out of writeback until the mirror can be built whole) or keep (writeback on one copy, with the alert)")
	f.DurationVar(&mirrorGrace, "mirror-degraded-grace", 0, "how long a mirrored write cache may run on one leg before --on-mirror-degraded applies (0: 10m)")
	f.DurationVar(&reprotect, "reprotect-after", 0, "how long the node keeping a peer-protected volume's replica may be gone before the leader places it on another node and the write cache is rebuilt there (0: 5m)")
	f.DurationVar(&failover, "failover-after", 0, "how long the node of a volume on a shared origin may be gone before the leader fences it and fails the volume over to the node keeping its replica (0: 30s)")
	f.StringVar(&p.Protect, "protect", "", "protection of new volumes whose spec names none: local (write cache mirrored on two SSDs), peer (mirrored on another node's SSD) or none; empty: peer where another node can keep the replica, else local where the pool has two SSDs, else none")
	_ = cmd.RegisterFlagCompletionFunc("mode", completeModes)
	_ = cmd.RegisterFlagCompletionFunc("on-mirror-degraded", cobra.FixedCompletions([]string{api.OnMirrorDegradedWritethrough, api.OnMirrorDegradedKeep}, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("on-ssd-error", cobra.FixedCompletions([]string{api.OnSSDErrorWritethrough, api.OnSSDErrorNone}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// policyFlags names, for each field of a stored policy, the flag of
// `policy set` that sets it, so errors speak of flags.
var policyFlags = map[string]string{
	"highWatermark":        "--high-watermark",
	"lowWatermark":         "--low-watermark",
	"writebackJobs":        "--writeback-jobs",
	"autocommitTimeMs":     "--autocommit-ms",
	"flushInterval":        "--flush-interval",
	"wearThresholdPercent": "--wear-threshold",
	"onSSDError":           "--on-ssd-error",
	"onMirrorDegraded":     "--on-mirror-degraded",
	"mirrorDegradedGrace":  "--mirror-degraded-grace",
	"reprotectAfter":       "--reprotect-after",
	"failoverAfter":        "--failover-after",
	"protect":              "--protect",
}

// policyFlagError rewrites the field names of api.Policy.Validate's
// messages ("wearThresholdPercent 150: ...") as flag names.
func policyFlagError(err error) error {
	lines := strings.Split(err.Error(), "\n")
	for i, l := range lines {
		for field, flag := range policyFlags {
			// Whole words only: "protect" is also in "reprotectAfter".
			l = regexp.MustCompile(`\b`+field+`\b`).ReplaceAllLiteralString(l, flag)
		}
		if strings.HasPrefix(l, "invalid mode") {
			l = "--mode: " + l
		}
		lines[i] = l
	}
	return errors.New(strings.Join(lines, "\n"))
}

// printPolicy prints a policy record with tidectl's snake_case keys.
func printPolicy(g *Globals, v any) error {
	out, err := snakeCase(v)
	if err != nil {
		return err
	}
	return g.Print(out)
}

// optionalMs maps a --autocommit-ms value to the policy field: 0 removes
// it (kernel default), anything else is kept for Policy.Validate to check.
func optionalMs(ms uint64) *uint64 {
	if ms == 0 {
		return nil
	}
	return &ms
}

func newPolicyListCmd(g *Globals) *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List policies",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := g.needCluster("policy list"); err != nil {
				return err
			}
			st, err := g.store(cmd.Context())
			if err != nil {
				return err
			}
			defer st.Close()
			items, _, _, err := st.ListPolicies(cmd.Context())
			if err != nil {
				return err
			}
			out := []api.Policy{}
			for _, it := range items {
				out = append(out, it.Value)
			}
			if g.JSON() {
				return printPolicy(g, out)
			}
			opt := func(p *int) string {
				if p == nil {
					return "-"
				}
				return fmt.Sprintf("%d%%", *p)
			}
			t := newTable(g.Stdout, "NAME", "MODE", "HIGH", "LOW", "WB JOBS", "AUTOCOMMIT", "FLUSH EVERY", "WEAR LIMIT", "ON SSD ERROR", "PROTECT")
			for _, p := range out {
				jobs, autocommit := "-", "-"
				if p.WritebackJobs != nil {
					jobs = fmt.Sprint(*p.WritebackJobs)
				}
				if p.AutocommitTimeMs != nil {
					autocommit = fmt.Sprintf("%dms", *p.AutocommitTimeMs)
				}
				t.row(p.Name, p.Mode, opt(p.HighWatermark), opt(p.LowWatermark), jobs, autocommit,
					time.Duration(p.FlushInterval).String(), fmt.Sprintf("%d%%", p.WearThresholdPercent), p.OnSSDError, cmp.Or(p.Protect, "-"))
			}
			return t.flush()
		},
	}
}
