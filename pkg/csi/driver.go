// SPDX-License-Identifier: Apache-2.0

package csi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tidecache/tidecache/pkg/command"
	"github.com/tidecache/tidecache/pkg/store"
	"github.com/tidecache/tidecache/pkg/version"
)

// DefaultName is the driver's name: the StorageClass's provisioner and
// the CSIDriver object's name.
const DefaultName = "csi.tidecache.io"

// TopologyKey is the topology segment that names a tidecache node: a
// volume is accessible from its node only.
const TopologyKey = "topology.tidecache.io/node"

// Config is what the driver serves and how. The zero values of the
// optional fields are replaced by Default's.
type Config struct {
	// Name is the CSI driver name (DefaultName).
	Name string
	// Controller and Node select the services served besides Identity.
	Controller, Node bool
	// NodeID is this node's tidecache node name (api.ValidateNodeName),
	// reported by NodeGetInfo and used as its topology. Node service only.
	NodeID string
	// Store is the cluster store the controller service works on; the
	// caller opens and closes it. Controller service only.
	Store *store.Store
	// PlacementTimeout bounds how long CreateVolume waits for the leader
	// to place a volume created without a topology requirement, when the
	// call's own deadline is later (or absent). The spec stays: a retried
	// call waits again.
	PlacementTimeout time.Duration
	// DefaultVolumeBytes is the size of a volume whose request gives no
	// capacity.
	DefaultVolumeBytes uint64
	// DeviceTimeout bounds the wait for a volume's device in
	// NodeStageVolume when the call has no earlier deadline.
	DeviceTimeout time.Duration
	// DeviceDir is where the volumes' devices appear (/dev/mapper).
	DeviceDir string
	// Runner runs blkid, mkfs, mount and umount.
	Runner command.Runner
	// Tidectl is the tidectl the node service runs to read a volume's
	// health for NodeGetVolumeHealth (`tidectl -o json volume show`).
	Tidectl string
	// Log receives one record per call: debug for successes, info for
	// requests refused as the caller's mistake, warn for other failures.
	// Nil discards.
	Log *slog.Logger
}

// Default returns the defaults of the optional fields.
func Default() Config {
	return Config{
		Name:               DefaultName,
		PlacementTimeout:   time.Minute,
		DefaultVolumeBytes: 1 << 30,
		DeviceTimeout:      2 * time.Minute,
		DeviceDir:          "/dev/mapper",
		Tidectl:            "tidectl",
	}
}

// Validate names the first field at fault.
func (c Config) Validate() error {
	switch {
	case c.Name == "":
		return errors.New("csi config: Name: empty")
	case !c.Controller && !c.Node:
		return errors.New("csi config: neither Controller nor Node: nothing to serve")
	case c.Controller && c.Store == nil:
		return errors.New("csi config: Store: the controller service needs the cluster store (etcd endpoints)")
	case c.Node && c.NodeID == "":
		return errors.New("csi config: NodeID: the node service needs this node's tidecache node name")
	case c.PlacementTimeout <= 0, c.DeviceTimeout <= 0:
		return errors.New("csi config: PlacementTimeout and DeviceTimeout must be positive")
	case c.DefaultVolumeBytes == 0:
		return errors.New("csi config: DefaultVolumeBytes: zero")
	case c.DeviceDir == "":
		return errors.New("csi config: DeviceDir: empty")
	}
	return nil
}

// Driver serves the CSI services Config selects.
type Driver struct {
	cfg Config
	log *slog.Logger
}

// New checks cfg, filling in defaults for its zero optional fields.
func New(cfg Config) (*Driver, error) {
	def := Default()
	if cfg.Name == "" {
		cfg.Name = def.Name
	}
	if cfg.PlacementTimeout == 0 {
		cfg.PlacementTimeout = def.PlacementTimeout
	}
	if cfg.DefaultVolumeBytes == 0 {
		cfg.DefaultVolumeBytes = def.DefaultVolumeBytes
	}
	if cfg.DeviceTimeout == 0 {
		cfg.DeviceTimeout = def.DeviceTimeout
	}
	if cfg.DeviceDir == "" {
		cfg.DeviceDir = def.DeviceDir
	}
	if cfg.Tidectl == "" {
		cfg.Tidectl = def.Tidectl
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Driver{cfg: cfg, log: log}, nil
}

// Register registers the services on srv.
func (d *Driver) Register(srv *grpc.Server) {
	csi.RegisterIdentityServer(srv, &identity{d: d})
	if d.cfg.Controller {
		csi.RegisterControllerServer(srv, &controller{d: d, st: d.cfg.Store})
	}
	if d.cfg.Node {
		csi.RegisterNodeServer(srv, &node{d: d})
	}
}

// ParseEndpoint returns the socket path of a CSI endpoint written as
// unix:///path or unix:/path (the sidecars' form) or as a plain path.
func ParseEndpoint(ep string) (string, error) {
	path := ep
	switch {
	case strings.HasPrefix(ep, "unix://"):
		path = strings.TrimPrefix(ep, "unix://")
	case strings.HasPrefix(ep, "unix:"):
		path = strings.TrimPrefix(ep, "unix:")
	case strings.Contains(ep, "://"):
		return "", fmt.Errorf("endpoint %q: only unix sockets are served", ep)
	}
	if !strings.HasPrefix(path, "/") {
		return "", fmt.Errorf("endpoint %q: want an absolute socket path (unix:///csi/csi.sock)", ep)
	}
	return path, nil
}

// Serve serves the services on the unix socket at path until ctx ends,
// then stops gracefully: calls under way finish (within grace), new ones
// are refused. A stale socket file from an earlier run is replaced.
func (d *Driver) Serve(ctx context.Context, path string, grace time.Duration) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("csi: remove stale socket: %w", err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("csi: listen: %w", err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(d.intercept))
	d.Register(srv)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	d.log.Info("serving CSI", "endpoint", path, "name", d.cfg.Name, "version", version.Version,
		"controller", d.cfg.Controller, "node", d.cfg.Node, "node_id", d.cfg.NodeID)
	select {
	case err := <-served:
		return fmt.Errorf("csi: serve: %w", err)
	case <-ctx.Done():
	}
	stopped := make(chan struct{})
	go func() { srv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(grace):
		d.log.Warn("calls still running after the grace period, stopping them", "grace", grace)
		srv.Stop()
	}
	<-served
	return nil
}

// intercept gives every call its status code (codeOf) and logs it.
func (d *Driver) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := handler(ctx, req)
	err = statusOf(err)
	method := info.FullMethod[strings.LastIndex(info.FullMethod, "/")+1:]
	if err == nil {
		d.log.Debug("call", "method", method, "duration", time.Since(start))
		return resp, nil
	}
	st := status.Convert(err)
	level := slog.LevelWarn
	switch st.Code() {
	case codes.InvalidArgument, codes.NotFound, codes.AlreadyExists, codes.OutOfRange:
		level = slog.LevelInfo // the caller's request, not the driver's trouble
	}
	d.log.Log(ctx, level, "call failed", "method", method, "code", st.Code().String(), "err", st.Message(), "duration", time.Since(start))
	return resp, err
}
