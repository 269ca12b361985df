// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// The driver runs in every Kubernetes node's DaemonSet pod: it talks to
// etcd as a client and must not carry the etcd server (tidecached's
// embedded etcd) in its binary.
func TestNoEtcdServer(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if errors.Is(err, exec.ErrNotFound) {
		t.Skip("go tool not found in PATH")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, gobin, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	var client bool
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "go.etcd.io/etcd/server") {
			t.Errorf("tidecache-csi depends on %s: it links the etcd server", dep)
		}
		client = client || strings.HasPrefix(dep, "go.etcd.io/etcd/client/v3")
	}
	if !client {
		t.Error("go list shows no etcd client: the check looks at the wrong package")
	}
}

func TestFlagsRefused(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--mode", "controller"}, "--etcd-endpoints"},
		{[]string{"--mode", "node"}, "--node-id"},
		{[]string{"--mode", "node", "--node-id", "n1", "--etcd-endpoints", "http://127.0.0.1:2389"}, "does not use etcd"},
		{[]string{"--mode", "node", "--node-id", "N_1"}, "invalid node name"},
		{[]string{"--mode", "all"}, `--mode "all"`},
		{[]string{"--mode", "node", "--node-id", "n1", "--endpoint", "tcp://0.0.0.0:1"}, "only unix sockets"},
		{[]string{"--mode", "node", "--node-id", "n1", "extra"}, "unexpected arguments"},
	} {
		var stderr strings.Builder
		err := run(t.Context(), tt.args, &stderr)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("run %q: %v, want an error mentioning %q", tt.args, err, tt.want)
		}
	}
}

// TestServeAndShutdown: the node service answers on its socket, and
// cancelling the context (SIGTERM) stops the server and run returns.
func TestServeAndShutdown(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "csi.sock")
	if err := os.WriteFile(sock, nil, 0o600); err != nil { // a stale socket file from a previous run
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr strings.Builder
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--mode", "node", "--node-id", "n1", "--endpoint", "unix://" + sock}, &stderr)
	}()
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.WaitForReady(true)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
	defer ccancel()
	info, err := csi.NewNodeClient(conn).NodeGetInfo(cctx, &csi.NodeGetInfoRequest{})
	if err != nil || info.GetNodeId() != "n1" {
		t.Fatalf("NodeGetInfo: %v, %v", info, err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run after shutdown: %v\n%s", err, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return 10 s after its context ended")
	}
	if !strings.Contains(stderr.String(), "stopped") {
		t.Errorf("log lacks the stop:\n%s", stderr.String())
	}
}

// The man page is written by hand: each flag the binary takes must be
// described there (as .BI \-name or .B \-name), so adding a flag without
// documenting it fails here.
func TestManPageNamesEveryFlag(t *testing.T) {
	page, err := os.ReadFile("../../deploy/man/tidecache-csi.8")
	if err != nil {
		t.Fatal(err)
	}
	var usage bytes.Buffer
	if err := run(t.Context(), []string{"-h"}, &usage); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v, want flag.ErrHelp", err)
	}
	flags := regexp.MustCompile(`(?m)^  -([a-z-]+)`).FindAllStringSubmatch(usage.String(), -1)
	if len(flags) < 10 {
		t.Fatalf("found %d flags in the usage, want the driver's dozen:\n%s", len(flags), usage.String())
	}
	for _, f := range flags {
		entry := regexp.MustCompile(`(?m)^\.BI? \\-` + strings.ReplaceAll(regexp.QuoteMeta(f[1]), "-", `\\-`) + `( |$)`)
		if !entry.Match(page) {
			t.Errorf("deploy/man/tidecache-csi.8 does not describe -%s", f[1])
		}
	}
}
