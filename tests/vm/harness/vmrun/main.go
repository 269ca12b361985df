// SPDX-License-Identifier: Apache-2.0

// Command vmrun boots a test VM (tests/vm/harness), runs shell commands in it and
// prints their output: a quick way to try something against the real
// kernel, or to see why a VM does not boot.
//
//	go run ./tests/vm/harness/vmrun [-disk path:size]... [-mem MiB] [-kernel 6.12] 'uname -r' 'dmsetup targets'
//
// -kernel chooses the guest kernel as harness.Config.Kernel does (6.12, a
// version, or a vmlinuz path); by default the harness's default, 6.1.
//
// With -systemd ROOT.img the guest boots Debian's systemd with udev
// (harness.SystemdBoot); the commands start once the agent's unit runs, so
// begin with 'systemctl is-system-running --wait'.
//
// It exits with the first non-zero exit code of a command.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"github.com/tidecache/tidecache/tests/vm/harness"
)

type diskFlags []harness.Disk

func (d *diskFlags) String() string { return fmt.Sprint(*d) }

func (d *diskFlags) Set(s string) error {
	path, size, _ := strings.Cut(s, ":")
	disk := harness.Disk{Path: path}
	if size != "" {
		n, err := parseSize(size)
		if err != nil {
			return err
		}
		disk.Size = n
	}
	*d = append(*d, disk)
	return nil
}

func parseSize(s string) (int64, error) {
	mult := int64(1)
	switch {
	case strings.HasSuffix(s, "G"):
		mult, s = 1<<30, strings.TrimSuffix(s, "G")
	case strings.HasSuffix(s, "M"):
		mult, s = 1<<20, strings.TrimSuffix(s, "M")
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: want bytes or a number with M or G", s)
	}
	return n * mult, nil
}

func main() {
	var (
		disks   diskFlags
		mem     = flag.Int("mem", 2048, "guest memory in MiB")
		cpus    = flag.Int("cpus", 2, "guest CPUs")
		name    = flag.String("name", "vmrun", "VM name")
		appendF = flag.String("append", "", "extra kernel command line")
		verbose = flag.Bool("v", false, "log harness steps")
		root    = flag.String("systemd", "", "boot systemd as PID 1, with the root's overlay upper layer on this disk image (made when missing)")
		mask    = flag.String("mask", "", "with -systemd: comma-separated units to mask")
		kernel  = flag.String("kernel", "", "guest kernel: a series ("+harness.Kernel612+"), a version or a vmlinuz path (default "+harness.EnvKernel+", else "+harness.DefaultKernel+")")
	)
	flag.Var(&disks, "disk", "disk image path[:size with M or G], repeatable (created sparse when missing)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	cfg := harness.Config{Name: *name, Disks: disks, MemoryMiB: *mem, CPUs: *cpus, ExtraAppend: *appendF, Kernel: *kernel}
	if *root != "" {
		cfg.Systemd = &harness.SystemdBoot{RootImage: *root}
		if *mask != "" {
			cfg.Systemd.Mask = strings.Split(*mask, ",")
		}
	}
	os.Exit(run(ctx, cfg, *verbose, flag.Args()))
}

func run(ctx context.Context, cfg harness.Config, verbose bool, cmds []string) int {
	level := slog.LevelWarn
	if verbose {
		level = slog.LevelDebug
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	v, err := harness.Boot(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "vmrun: booted %s in %v (state in %s)\n", v.KernelVersion(), v.BootDuration().Round(time.Millisecond), v.BootDir())
	defer v.Shutdown(context.Background())
	for _, c := range cmds {
		start := time.Now()
		res, err := v.Run(ctx, c)
		os.Stdout.WriteString(res.Stdout)
		os.Stderr.WriteString(res.Stderr)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "vmrun: %q: exit %d in %v\n", c, res.ExitCode, time.Since(start).Round(time.Millisecond))
		if res.ExitCode != 0 {
			return res.ExitCode
		}
	}
	return 0
}
