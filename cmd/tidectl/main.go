// SPDX-License-Identifier: Apache-2.0

// Command tidectl: see `tidectl --help`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/tidecache/tidecache/pkg/cli"
)

func main() { os.Exit(run()) }

// run wires signals to a context and runs the command tree; Ctrl-C cancels
// a long drain or flush cleanly (the device is always resumed).
func run() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return cli.Main(ctx, cli.NewTidectl)
}
