// SPDX-License-Identifier: Apache-2.0

package daemoncli

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tidecache/tidecache/pkg/cli"
	"github.com/tidecache/tidecache/pkg/engine"
)

func newAssembleCmd(g *cli.Globals) *cobra.Command {
	var waitDevices time.Duration
	cmd := &cobra.Command{
		Use:   "assemble",
		Short: "Rebuild every cached volume from the SSD superblocks (boot time)",
		Long: `Scan every block device for tidecache superblocks and bring up every
volume of every pool found, using the disks alone: no cluster store, no
network. Run by tidecache-assemble.service before local filesystems are
mounted.

Volumes already running with the right tables are left alone, so running
it again is harmless. A pool with a missing SSD or a damaged superblock is
not assembled: its cache may hold writes the HDDs do not have, and the
origin is never exposed without them. The exception is an SSD that holds
only legs of mirrored write caches (--protect local): the other legs have
every acknowledged write, so the pool comes up DEGRADED and the mirrors
run on one leg until the SSD is back (then run tidectl volume repair). The exit status is 3 when anything
was refused or failed (the report says what and why), 1 when the scan
itself failed.

At boot, disks show up while it runs: with --wait-devices (the boot unit
gives 90s) it first waits, at most that long, for the disks of this node's
pools: the SSDs their
superblocks name, the pools listed in /etc/tidecache/pools.json (kept up to
date at every pool change) even if none of their disks is there yet, the
disks of each md origin (until the array runs or all of them are there)
and the devices of adopted volumes. It says every 5 s what it waits for. A
disk still missing then is handled as above: only late, it would otherwise
refuse its pool or leave a mirror or an array degraded.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if waitDevices < 0 {
				return fmt.Errorf("--wait-devices %v: give 0 (no wait) or a positive duration", waitDevices)
			}
			e, err := g.Engine()
			if err != nil {
				return err
			}
			defer e.Close()
			var absent []string
			if waitDevices > 0 {
				w, err := e.WaitForDevices(cmd.Context(), waitDevices, func(waited time.Duration, missing []string) {
					fmt.Fprintf(g.Stderr, "waiting for devices (%v of %v): %s\n", waited.Round(time.Second), waitDevices, strings.Join(missing, "; "))
				})
				if err != nil {
					return fmt.Errorf("wait for pool devices: %w", err)
				}
				if len(w.Missing) > 0 {
					fmt.Fprintf(g.Stderr, "still missing after %v: %s\n", waitDevices, strings.Join(w.Missing, "; "))
				}
				absent = w.Absent
			}
			rep, err := e.Assemble(cmd.Context())
			if perr := printAssemble(g, rep); perr != nil {
				return perr
			}
			if errors.Is(err, engine.ErrAssembleIncomplete) {
				return cli.Found(fmt.Errorf("%w: see the report above", err))
			}
			if err == nil && len(absent) > 0 {
				// Pools the scan never saw are in no report: say so, and
				// fail the unit as for a pool refused.
				return cli.Found(fmt.Errorf("%w: no device of pool(s) %s appeared in %v; their volumes are not started (listed in %s)",
					engine.ErrAssembleIncomplete, strings.Join(absent, ", "), waitDevices, e.ExpectedPoolsPath()))
			}
			return err
		},
	}
	cmd.Flags().DurationVar(&waitDevices, "wait-devices", 0,
		"wait at most this long for the disks of this node's pools before assembling (tidecache-assemble.service: 90s)")
	return cmd
}

func printAssemble(g *cli.Globals, rep engine.AssembleReport) error {
	if g.JSON() {
		return g.Print(rep)
	}
	for _, c := range rep.Corrupt {
		// A joined error (both slots) spans lines: keep it indented.
		fmt.Fprintf(g.Stdout, "DAMAGED  %s: %s\n", c.Device, strings.ReplaceAll(c.Error, "\n", "\n         "))
	}
	if len(rep.Pools) == 0 {
		fmt.Fprintln(g.Stdout, "no tidecache pools found")
	}
	for _, p := range rep.Pools {
		if p.Error != "" {
			fmt.Fprintf(g.Stdout, "pool %s: REFUSED: %s\n", p.Name, strings.TrimPrefix(p.Error, "pool "+p.Name+": "))
			continue
		}
		fmt.Fprintf(g.Stdout, "pool %s:\n", p.Name)
		if p.Degraded != "" {
			fmt.Fprintf(g.Stdout, "  DEGRADED: %s\n", p.Degraded)
		}
		for _, v := range p.Volumes {
			if v.Error != "" {
				fmt.Fprintf(g.Stdout, "  %-20s FAILED  %s\n", v.Name, v.Error)
			} else if v.Deferred != "" {
				fmt.Fprintf(g.Stdout, "  %-20s LATER   %s\n", v.Name, v.Deferred)
			} else if v.Migrated {
				fmt.Fprintf(g.Stdout, "  %-20s %-12s %s (migrated to the fuaflush stack)\n", v.Name, v.Mode, v.Device)
			} else {
				fmt.Fprintf(g.Stdout, "  %-20s %-12s %s\n", v.Name, v.Mode, v.Device)
			}
		}
	}
	return nil
}
