// SPDX-License-Identifier: Apache-2.0

// Command tidecache-csi is tidecache's Kubernetes CSI driver (package
// csi): the controller service in a Deployment, the node service in a
// DaemonSet, or both in one process. See docs/csi.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/command"
	"github.com/tidecache/tidecache/pkg/csi"
	"github.com/tidecache/tidecache/pkg/etcdauth"
	"github.com/tidecache/tidecache/pkg/store"
	"github.com/tidecache/tidecache/pkg/version"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "tidecache-csi:", err)
		}
		os.Exit(2)
	}
}

// Modes of --mode.
const (
	modeController = "controller"
	modeNode       = "node"
	modeBoth       = "both"
)

// shutdownGrace is how long calls under way may run after SIGTERM.
const shutdownGrace = 20 * time.Second

// run parses the flags, opens the store when the controller runs, and
// serves until ctx ends; the store closes after the server stopped.
func run(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("tidecache-csi", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		endpoint  = fs.String("endpoint", "unix:///csi/csi.sock", "CSI endpoint: the unix socket the sidecars and the kubelet call")
		nodeID    = fs.String("node-id", "", "this node's tidecache node name (tidecached --node; the Kubernetes node name): node service")
		mode      = fs.String("mode", modeBoth, "services to serve besides Identity: controller, node or both")
		name      = fs.String("driver-name", csi.DefaultName, "CSI driver name (the StorageClass provisioner)")
		endpoints = fs.String("etcd-endpoints", "", "etcd endpoints, comma-separated (controller service)")
		cert      = fs.String("etcd-cert", "", "client certificate for etcd mutual TLS")
		key       = fs.String("etcd-key", "", "client key for etcd mutual TLS")
		ca        = fs.String("etcd-ca", "", "CA certificate that signed the etcd server's certificate")
		prefix    = fs.String("etcd-prefix", store.DefaultPrefix, "key prefix of tidecache's records")
		etcdUser  = fs.String("etcd-user", "", "user of etcd's password authentication (default on loopback endpoints: root's password in --etcd-auth-dir if readable)")
		pwFile    = fs.String("etcd-password-file", "", "file holding --etcd-user's password")
		authDir   = fs.String("etcd-auth-dir", etcdauth.DefaultDir, "where the node's embedded etcd keeps its passwords (tidecached --etcd-auth-dir)")
		placement = fs.Duration("placement-timeout", csi.Default().PlacementTimeout, "how long CreateVolume waits for the leader to place a volume without a topology requirement")
		debug     = fs.Bool("debug", false, "log every call and command")
		showVer   = fs.Bool("version", false, "print the version and exit")
	)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *showVer {
		fmt.Fprintln(stderr, "tidecache-csi", version.Version)
		return nil
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	level := slog.LevelInfo
	if *debug {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	cfg := csi.Default()
	cfg.Name, cfg.NodeID, cfg.PlacementTimeout, cfg.Log = *name, *nodeID, *placement, log
	cfg.Runner = command.Runner{Logger: log}
	switch *mode {
	case modeController:
		cfg.Controller = true
	case modeNode:
		cfg.Node = true
	case modeBoth:
		cfg.Controller, cfg.Node = true, true
	default:
		return fmt.Errorf("--mode %q: want controller, node or both", *mode)
	}
	etcdSet := *endpoints != "" || *cert != "" || *key != "" || *ca != "" || *etcdUser != "" || *pwFile != ""
	switch {
	case cfg.Controller && *endpoints == "":
		return errors.New("--etcd-endpoints: the controller service needs etcd")
	case !cfg.Controller && etcdSet:
		return errors.New("--etcd-*: the node service does not use etcd; give them to the controller")
	case cfg.Node && *nodeID == "":
		return errors.New("--node-id: the node service needs this node's tidecache node name")
	}
	if cfg.Node {
		if err := api.ValidateNodeName(*nodeID); err != nil {
			return fmt.Errorf("--node-id: %w", err)
		}
	}
	path, err := csi.ParseEndpoint(*endpoint)
	if err != nil {
		return fmt.Errorf("--endpoint: %w", err)
	}
	if cfg.Controller {
		scfg := store.DefaultConfig()
		scfg.Endpoints = strings.Split(*endpoints, ",")
		scfg.CertFile, scfg.KeyFile, scfg.CAFile, scfg.Prefix, scfg.Logger = *cert, *key, *ca, *prefix, log
		// The controller creates and deletes specs: root's credential
		// when it runs on the node of an embedded etcd (a test or a
		// single-node setup), a TLS client certificate otherwise.
		cred, err := etcdauth.Choose(etcdauth.Request{User: *etcdUser, PasswordFile: *pwFile, Dir: *authDir,
			Endpoints: scfg.Endpoints, ClientCert: *cert != ""})
		if err != nil {
			return err
		}
		scfg.Username, scfg.Password = cred.User, cred.Password
		st, err := store.Open(ctx, scfg)
		if err != nil {
			return err
		}
		defer st.Close()
		cfg.Store = st
	}
	d, err := csi.New(cfg)
	if err != nil {
		return err
	}
	err = d.Serve(ctx, path, shutdownGrace)
	log.Info("stopped")
	return err
}
