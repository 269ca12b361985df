// SPDX-License-Identifier: Apache-2.0

// Package daemon wires tidecached together: the single-node engine, the
// cluster store (an embedded etcd or an external cluster), node
// registration with inventory, leader election and placement, the
// reconcile controller, Prometheus metrics, the health endpoint and the
// systemd notify/watchdog protocol. Each part lives in its own package;
// this one configures them (Config, with Default and Validate), assembles
// the node's pools at start, starts the embedded etcd and opens the store,
// registers the node under a lease and keeps its inventory (pools, SSD
// health) fresh, campaigns for leadership and places unplaced volumes
// while it leads, runs the controller, serves /metrics and /healthz, pings
// systemd's watchdog while device-mapper answers, and on shutdown stops
// them in reverse order (optionally flushing every write cache first).
//
// The data path never depends on the daemon: if the daemon or etcd stops,
// the kernel's device-mapper tables stay as they are and I/O continues.
package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"

	sddaemon "github.com/coreos/go-systemd/v22/daemon"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/dm"
	"github.com/tidecache/tidecache/pkg/engine"
	"github.com/tidecache/tidecache/pkg/etcdauth"
	"github.com/tidecache/tidecache/pkg/etcdserver"
	"github.com/tidecache/tidecache/pkg/metrics"
	"github.com/tidecache/tidecache/pkg/reconcile"
	"github.com/tidecache/tidecache/pkg/store"
	"github.com/tidecache/tidecache/pkg/version"
)

// Config configures tidecached.
type Config struct {
	// Node is this node's name in the cluster (default: the hostname).
	Node string
	// Address is published in the node record for peers and operators.
	Address string
	// Listen is the HTTP address serving /metrics and /healthz.
	Listen string
	// EmbeddedEtcd runs a single-member etcd inside the daemon (a member
	// of a three-member cluster is started by pkg/daemoncli instead,
	// which then points Store at it), with its data in EtcdDataDir,
	// serving EtcdClientURL and listening for peers on EtcdPeerURL
	// (empty: etcdserver's loopback default); Store.Endpoints is then
	// taken from it.
	EmbeddedEtcd  bool
	EtcdDataDir   string
	EtcdClientURL string
	EtcdPeerURL   string
	// EtcdAuthDir is where the embedded member keeps the passwords of
	// etcd's authentication, which it turns on when it serves clients on
	// loopback without client certificates (pkg/etcdauth; the daemon's
	// client then uses root's). Empty: authentication is left as the data
	// has it, and any local user can change records (tests).
	EtcdAuthDir string
	// Store configures the etcd client (endpoints, TLS, prefix).
	Store store.Config
	// LeaseTTL bounds how long a dead node stays listed.
	LeaseTTL time.Duration
	// InventoryInterval is how often the node record is refreshed.
	InventoryInterval time.Duration
	// PlacementInterval is how often the leader places volumes whose
	// spec names no node.
	PlacementInterval time.Duration
	// Reconcile configures the controller (Node is filled in).
	Reconcile reconcile.Config
	// Engine configures the single-node engine.
	Engine engine.Config
	// ReplicaAddress is where this node's NVMe/TCP target serves the
	// replicas it keeps for peers' mirrors, "IPv4:port" (port 4420 if
	// left out). Empty: the node keeps no replicas, and the leader never
	// places one on it.
	ReplicaAddress string
	// InsecureNVMe accepts admitting hosts by the host NQN they declare,
	// protected only by the source-address allow-list (nvmeallow.go):
	// on a kernel without NVMe in-band authentication it is required for
	// a network ReplicaAddress (checkNVMeExposure); on one with it, it
	// lets the node serve hosts that cannot authenticate (nvmeauth.go).
	InsecureNVMe bool
	// Exports are shared devices (an origin several nodes see, such as a
	// SAN LUN) this node's NVMe/TCP target serves to every other node on
	// ReplicaAddress, except to fenced nodes (see exports.go).
	Exports []Export
	// FaultDomain is published in the node record: the leader puts a
	// volume's replica in another fault domain than the volume when it
	// can.
	FaultDomain string
	// LegRetry is how long after a write mirror leg failed the daemon first
	// gives it back to dm-raid (engine.GiveBackLeg); the wait doubles after
	// each attempt that does not bring the mirror back in sync, up to
	// maxLegRetry.
	LegRetry time.Duration
	// FlushOnShutdown writes every dirty block back before exiting. Not
	// needed for safety (boot assembly restores the cache) but shortens
	// a later drain, e.g. before moving disks.
	FlushOnShutdown bool
	// ShutdownTimeout bounds the whole ordered shutdown.
	ShutdownTimeout time.Duration
	// InsecureEtcd lets the embedded etcd serve a non-loopback client or
	// peer URL without TLS client authentication (etcdserver.Config's
	// Insecure); refused otherwise.
	InsecureEtcd bool
	// StateDir keeps what must survive a restart without etcd: the
	// fences the target applies (fencestate.go). The unit's
	// StateDirectory.
	StateDir string
	// Instance is published in the node record (api.Node.Instance): the
	// kernel's boot id by default. The store refuses a registration of
	// Node while a daemon of another instance holds the name, and this
	// daemon reconciles nothing until it is registered.
	Instance string
	// Logger receives structured logs.
	Logger *slog.Logger
}

// DefaultListen is where /metrics and /healthz are served unless told
// otherwise: loopback only, as a scrape reads the kernel and the disks'
// metadata; a Prometheus server elsewhere needs --listen with an address
// of the network it scrapes from.
const DefaultListen = "127.0.0.1:9540"

// Default returns the configuration of a node using the etcd at
// store.DefaultConfig's endpoints; set EmbeddedEtcd for a standalone node
// that runs its own.
func Default() Config {
	host, _ := os.Hostname()
	return Config{
		Node:              host,
		Instance:          bootID(),
		Listen:            DefaultListen,
		EmbeddedEtcd:      false,
		EtcdDataDir:       "/var/lib/tidecache/etcd",
		StateDir:          "/var/lib/tidecache",
		EtcdClientURL:     etcdserver.DefaultClientURL,
		EtcdAuthDir:       etcdauth.DefaultDir,
		Store:             store.DefaultConfig(),
		LeaseTTL:          10 * time.Second,
		InventoryInterval: 30 * time.Second,
		PlacementInterval: 5 * time.Second,
		Reconcile:         reconcile.Default(host),
		Engine:            engine.DefaultConfig(),
		LegRetry:          30 * time.Second,
		ShutdownTimeout:   2 * time.Minute,
	}
}

// Validate checks the configuration and names the bad field.
func (c Config) Validate() error {
	if err := api.ValidateNodeName(c.Node); err != nil {
		return fmt.Errorf("config node: %w", err)
	}
	if c.Listen == "" {
		return errors.New("config listen: empty")
	}
	if c.StateDir == "" {
		return errors.New("config state-dir: empty")
	}
	if c.EmbeddedEtcd && c.EtcdDataDir == "" {
		return errors.New("config etcd-data-dir: empty with --embedded-etcd")
	}
	if !c.EmbeddedEtcd && len(c.Store.Endpoints) == 0 {
		return errors.New("config etcd-endpoints: none given; use --etcd-endpoints or --embedded-etcd")
	}
	if c.LeaseTTL < 2*time.Second {
		return fmt.Errorf("config lease-ttl: %s is below etcd's minimum of 2s", c.LeaseTTL)
	}
	if c.InventoryInterval <= 0 || c.PlacementInterval <= 0 {
		return errors.New("config: inventory and placement intervals must be positive")
	}
	if c.ReplicaAddress != "" {
		if _, _, err := replicaAddress(c.ReplicaAddress); err != nil {
			return fmt.Errorf("config replica-address: %w", err)
		}
	}
	if err := validateExports(c.Exports, c.ReplicaAddress); err != nil {
		return err
	}
	if c.LegRetry < time.Second {
		return fmt.Errorf("config leg-retry: %s, want at least 1s", c.LegRetry)
	}
	return c.Engine.Validate()
}

// Engine is what the daemon needs of the node's engine. *engine.Engine
// implements it; the daemon's host tests pass the in-memory one of
// package reconcile/reconciletest.
type Engine interface {
	reconcile.Engine
	Pools(ctx context.Context) ([]engine.PoolInfo, error)
	// RecordMirrors records in the layout which legs of each running
	// write mirror lack writes and returns the mirrors with a failed leg;
	// GiveBackLeg reloads such a mirror (see package engine).
	RecordMirrors(ctx context.Context) ([]string, error)
	GiveBackLeg(ctx context.Context, name string) (bool, error)
	// The replicas this node keeps for peers' mirrors: HostReplica and
	// DropReplica for the controller, ServeReplicas (build and export
	// every one) for the daemon's own loop.
	reconcile.Replicas
	ServeReplicas(ctx context.Context, addr string, port int) ([]engine.ReplicaInfo, error)
}

// node is what Run opens on the host and serve runs on.
type node struct {
	eng Engine
	// stats gives the metrics dm-stats latency histograms; nil: none.
	stats dm.Messenger
	// ping tells the watchdog that device-mapper still answers.
	ping func(context.Context) error
	// listening, if set, is called with the HTTP address once bound
	// (tests listen on port 0).
	listening func(net.Addr)
	// keys are the NVMe authentication secrets (nvmeauth.go), nil when the
	// kernel has no in-band authentication.
	keys *nvmeKeys
}

// Run runs the daemon until ctx is cancelled, then shuts down in order:
// stop accepting work, stop the controller, resign leadership, revoke the
// node's lease, close the store, stop the embedded etcd, close the engine.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("node", cfg.Node)
	cfg.Engine.Logger = log
	kernelAuth := kernelHasNVMeAuth(ctx)
	if err := checkNVMeExposure(cfg, kernelAuth); err != nil {
		return err
	}
	var keys *nvmeKeys
	if kernelAuth {
		k, err := newNVMeKeys(cfg.Node, cfg.StateDir, cfg.InsecureNVMe, log)
		if err != nil {
			return err
		}
		keys, cfg.Engine.NVMeAuth = k, k
	}
	eng, err := engine.New(cfg.Engine)
	if err != nil {
		return err
	}
	defer eng.Close()

	// Bring up whatever the boot unit did not (idempotent).
	if rep, err := eng.Assemble(ctx); err != nil {
		log.Warn("assembly incomplete at start", "err", err, "report", rep)
	}
	return serve(ctx, cfg, log, node{eng: eng, stats: eng.DM(), keys: keys, ping: func(ctx context.Context) error {
		_, err := eng.DM().Version(ctx)
		return err
	}})
}

// serve runs everything but the engine on n until ctx is cancelled: the
// embedded etcd, the store, metrics, the controller, registration,
// leadership, HTTP and the watchdog. cfg is valid.
func serve(ctx context.Context, cfg Config, log *slog.Logger, n node) error {
	eng := n.eng
	if cfg.EmbeddedEtcd {
		srv, err := etcdserver.Start(ctx, etcdserver.Config{
			DataDir: cfg.EtcdDataDir, Name: cfg.Node, ClientURL: cfg.EtcdClientURL, PeerURL: cfg.EtcdPeerURL,
			Insecure: cfg.InsecureEtcd, AuthDir: cfg.EtcdAuthDir, AuthPrefix: cfg.Store.Prefix, Logger: log,
		})
		if err != nil {
			return fmt.Errorf("embedded etcd: %w", err)
		}
		defer srv.Close()
		cfg.Store.Endpoints = srv.Endpoints()
		if c := srv.Credential(); !c.None() {
			cfg.Store.Username, cfg.Store.Password = c.User, c.Password
		}
		log.Info("embedded etcd started", "endpoints", cfg.Store.Endpoints, "data_dir", cfg.EtcdDataDir)
	}
	cfg.Store.Logger = log
	st, err := store.Open(ctx, cfg.Store)
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	defer st.Close()

	reg := prometheus.NewRegistry()
	dmet, err := metrics.NewDaemonMetrics(reg, version.Version)
	if err != nil {
		return err
	}
	ssds := &metrics.SmartSource{Devices: func(ctx context.Context) ([]string, error) { return ssdPaths(ctx, eng) }}
	if err := metrics.Register(reg, eng, metrics.Options{Stats: n.stats, SSDs: ssds, Logger: log}); err != nil {
		return err
	}
	rmet, err := reconcile.NewMetrics(reg)
	if err != nil {
		return err
	}

	if n.keys != nil {
		n.keys.st.Store(st)
	}
	d := &daemon{cfg: cfg, log: log, eng: eng, ping: n.ping, st: st, dmet: dmet, ssds: ssds, keys: n.keys,
		inventoryNow: make(chan struct{}, 1), registered: make(chan struct{})}
	rc := cfg.Reconcile
	rc.Node, rc.Logger, rc.Metrics = cfg.Node, log, rmet
	rc.OnEtcdUp = d.setEtcdUp
	rc.SSDs = inventorySSDs{d}
	if cfg.ReplicaAddress != "" {
		rc.Replicas, rc.ReplicaKept = eng, d.replicaKept
	}
	if so, ok := eng.(reconcile.SharedOrigins); ok {
		rc.SharedOrigins = so
	}
	ctrl, err := reconcile.New(rc, eng, st)
	if err != nil {
		return err
	}
	d.ctrl = ctrl
	d.restoreFences()
	dmet.SetNVMeUnauthenticated(d.nvmeUnauthenticated())
	d.restoreNVMeAllowList(ctx)

	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", d.health)
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	httpSrv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	if n.listening != nil {
		n.listening(ln.Addr())
	}

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	g, gctx := errgroup.WithContext(runCtx)
	g.Go(func() error {
		if err := httpSrv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("http: %w", err)
		}
		return nil
	})
	// Volumes are reconciled and leadership sought only once this daemon
	// holds its node record: a second daemon given the same name (a
	// cloned machine) waits, refused, instead of running the same volumes.
	g.Go(func() error {
		if !d.awaitRegistered(gctx) {
			return nil
		}
		return ctrl.Run(gctx)
	})
	g.Go(func() error { return d.membership(gctx) })
	g.Go(func() error {
		if d.awaitRegistered(gctx) {
			d.leadership(gctx)
		}
		return nil
	})
	g.Go(func() error { d.watchdog(gctx); return nil })
	g.Go(func() error { d.watchMirrors(gctx); return nil })
	if rel, ok := eng.(Releaser); ok {
		g.Go(func() error { d.complyWithFence(gctx, rel); return nil })
	}
	if guard, ok := eng.(PeerLegGuard); ok {
		g.Go(func() error { d.guardPeerLegs(gctx, guard); return nil })
	}
	if cfg.ReplicaAddress != "" {
		g.Go(func() error { d.serveTarget(gctx); return nil })
	}
	if d.keys != nil {
		g.Go(func() error { d.keys.watchSecrets(gctx); return nil })
	}

	if _, err := sddaemon.SdNotify(false, sddaemon.SdNotifyReady); err != nil {
		log.Warn("systemd notify failed", "err", err)
	}
	log.Info("tidecached running", "listen", ln.Addr().String(), "version", version.Version)

	<-gctx.Done()
	sddaemon.SdNotify(false, sddaemon.SdNotifyStopping)
	log.Info("shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
	defer cancel()
	httpSrv.Shutdown(shutdownCtx)
	stop()
	runErr := g.Wait()
	if cfg.FlushOnShutdown {
		d.flushAll(shutdownCtx)
	}
	if errors.Is(runErr, context.Canceled) {
		runErr = nil
	}
	return runErr
}

// daemon holds the parts the background loops share.
type daemon struct {
	cfg  Config
	log  *slog.Logger
	eng  Engine
	ping func(context.Context) error
	st   *store.Store
	ctrl *reconcile.Controller
	dmet *metrics.DaemonMetrics
	ssds *metrics.SmartSource
	// keys are the NVMe authentication secrets, nil without in-band
	// authentication in the kernel (nvmeauth.go).
	keys *nvmeKeys

	mu       sync.Mutex
	etcdUp   bool
	leader   bool
	lastSSDs []api.SSDInventory
	// replicas is what the last ServeReplicas reported, for the node
	// record; inventoryNow asks membership to publish the record now.
	replicas     []api.ReplicaInventory
	inventoryNow chan struct{}
	// tgt is what the NVMe/TCP target serves: exports, fences (exports.go).
	tgt targetState
	// fenceReleased is the revision of this node's fence it complied
	// with, for the node record (failover.go).
	fenceReleased int64
	// registered is closed once this daemon first holds its node record;
	// registerErr is why the last registration failed ("" once it holds).
	registered  chan struct{}
	registerErr string
}

func (d *daemon) setEtcdUp(up bool) {
	d.mu.Lock()
	d.etcdUp = up
	d.mu.Unlock()
	d.dmet.SetEtcdUp(up)
	if up {
		d.log.Info("etcd reachable")
	} else {
		d.log.Warn("etcd unreachable: kernel tables stay as they are, I/O is unaffected; retrying")
	}
}

func (d *daemon) setLeader(l bool) {
	d.mu.Lock()
	d.leader = l
	d.mu.Unlock()
	d.dmet.SetLeader(l)
}

// health serves /healthz: 200 while the daemon runs (etcd being down is
// reported, not fatal: the data path does not need it).
func (d *daemon) health(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	body := map[string]any{
		"node": d.cfg.Node, "version": version.Version,
		"etcd_up": d.etcdUp, "leader": d.leader, "registered": d.registerErr == "" && d.isRegistered(),
		"unmanaged_volumes": d.ctrl.Unmanaged(),
	}
	if d.registerErr != "" {
		body["registration_error"] = d.registerErr
	}
	d.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(body)
}

// mirrorInterval is how often the daemon looks at the write mirrors: the
// time between a leg failing and the layout saying it lacks writes, which
// is what keeps a later assembly from building on that leg alone. Between
// changes a look is a few device-mapper status calls.
const mirrorInterval = time.Second

// maxLegRetry bounds the wait between two attempts to give a failed leg
// back: each attempt suspends the mirror for a moment.
const maxLegRetry = 10 * time.Minute

// watchMirrors keeps the layout's record of out-of-sync mirror legs in
// step with dm-raid (engine.RecordMirrors), and gives a failed leg back to
// dm-raid after cfg.LegRetry, then after twice as long each time it fails
// again: an SSD that had a transient fault (a reset, a cable, a peer that
// rebooted) resyncs from the bitmap without an operator. It needs no
// cluster store.
func (d *daemon) watchMirrors(ctx context.Context) {
	t := time.NewTicker(mirrorInterval)
	defer t.Stop()
	failing := false
	retries := map[string]*legRetry{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// Bounded: a long drain holds the engine's lock, and the next
		// look must not wait behind this one.
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		failed, err := d.eng.RecordMirrors(rctx)
		cancel()
		switch {
		case err != nil && !failing:
			d.log.Error("recording the write mirrors' legs failed; retrying every second", "err", err)
		case err == nil && failing:
			d.log.Info("write mirror legs recorded again")
		}
		failing = err != nil
		now := time.Now()
		for vol := range retries {
			if !slices.Contains(failed, vol) {
				delete(retries, vol) // back in sync, or gone
			}
		}
		for _, vol := range failed {
			r, ok := retries[vol]
			if !ok {
				retries[vol] = &legRetry{next: now.Add(d.cfg.LegRetry), wait: d.cfg.LegRetry}
				continue
			}
			if now.Before(r.next) {
				continue
			}
			rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			reloaded, err := d.eng.GiveBackLeg(rctx, vol)
			cancel()
			r.wait = min(2*r.wait, maxLegRetry)
			r.next = now.Add(r.wait)
			switch {
			case err != nil:
				d.log.Warn("giving a failed write mirror leg back failed", "volume", vol, "err", err, "next_try_in", r.wait)
			case reloaded:
				d.log.Info("failed write mirror leg given back to dm-raid; if its SSD answers it resyncs, else it fails again", "volume", vol, "next_try_in", r.wait)
			}
		}
	}
}

// legRetry is when the daemon next gives a mirror's failed leg back.
type legRetry struct {
	next time.Time
	wait time.Duration
}

// watchdog pings systemd's watchdog at half its interval while the engine
// still answers (a device-mapper version ioctl).
func (d *daemon) watchdog(ctx context.Context) {
	interval, err := sddaemon.SdWatchdogEnabled(false)
	if err != nil || interval == 0 {
		return
	}
	t := time.NewTicker(interval / 2)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			pctx, cancel := context.WithTimeout(ctx, interval/2)
			err := d.ping(pctx)
			cancel()
			if err != nil {
				d.log.Error("watchdog: device-mapper does not answer; not pinging systemd", "err", err)
				continue
			}
			sddaemon.SdNotify(false, sddaemon.SdNotifyWatchdog)
		}
	}
}

// flushAll writes back every writeback volume, best effort.
func (d *daemon) flushAll(ctx context.Context) {
	vols, err := d.eng.Volumes(ctx)
	if err != nil {
		d.log.Warn("flush on shutdown: list volumes", "err", err)
		return
	}
	for _, v := range vols {
		if v.WriteCache == nil {
			continue
		}
		if left, err := d.eng.Flush(ctx, v.Name, nil); err != nil {
			d.log.Warn("flush on shutdown", "volume", v.Name, "err", err)
		} else {
			d.log.Info("flushed on shutdown", "volume", v.Name, "dirty_blocks_left", left)
		}
	}
}

// ssdPaths lists the present SSD members of this node's pools.
func ssdPaths(ctx context.Context, eng Engine) ([]string, error) {
	pools, err := eng.Pools(ctx)
	if err != nil {
		return nil, err
	}
	return metrics.SSDPaths(pools), nil
}
