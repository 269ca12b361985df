// SPDX-License-Identifier: Apache-2.0

package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/engine"
	"github.com/tidecache/tidecache/pkg/nvmeof"
	"github.com/tidecache/tidecache/pkg/policy"
	"github.com/tidecache/tidecache/pkg/pool"
	"github.com/tidecache/tidecache/pkg/store"
)

// Engine is the part of *engine.Engine the controller uses.
type Engine interface {
	Volumes(ctx context.Context) ([]engine.VolumeInfo, error)
	Volume(ctx context.Context, name string) (engine.VolumeInfo, error)
	CreateVolume(ctx context.Context, pool string, req pool.VolumeRequest) (engine.VolumeInfo, error)
	DeleteVolume(ctx context.Context, name string, force bool) error
	SetMode(ctx context.Context, name string, mode pool.Mode, progress engine.ProgressFunc) error
	Flush(ctx context.Context, name string, progress engine.ProgressFunc) (uint64, error)
	// Observe reads the node once: its pools and the volumes asked for,
	// with their kernel status and drift (nil, or the differences between
	// the layout and the live tables as joined *engine.DriftError, or
	// another error). A reconcile pass reads the engine through it.
	Observe(ctx context.Context, req engine.ObserveRequest) (engine.Observation, error)
	RepairVolume(ctx context.Context, name string) ([]string, error)
	// MovePeerLeg moves a peer mirror's leg 1, or leg 0 of a write cache
	// on peers, to another node's replica (re-protection; see
	// engine.Engine.MovePeerLeg).
	MovePeerLeg(ctx context.Context, name string, index int, leg pool.RemoteLeg) error
	// SetTuning sets the write tier's watermarks, write-back jobs and
	// autocommit time (nil: node defaults) and reports whether anything
	// changed.
	SetTuning(ctx context.Context, name string, t *pool.Tuning) (bool, error)
	// ResizeVolume grows a volume to size bytes, live (see
	// engine.Engine.ResizeVolume).
	ResizeVolume(ctx context.Context, name string, size uint64) (engine.VolumeInfo, error)
}

// Replicas keeps the slices this node holds for other nodes' peer mirrors
// (see package engine).
type Replicas interface {
	HostReplica(ctx context.Context, pool string, req pool.ReplicaRequest) (engine.ReplicaInfo, error)
	DropReplica(ctx context.Context, volume string) error
	// KeptReplicas names the volumes this node keeps a replica for.
	KeptReplicas(ctx context.Context) ([]string, error)
}

// SharedOrigins runs volumes on a device another node exports (see
// package engine): it attaches the export, adopts the device with a peer
// leg, and takes a volume over from the replica this node keeps.
type SharedOrigins interface {
	AttachOrigin(ctx context.Context, exporter string, r nvmeof.Remote) (string, error)
	FindOrigin(ctx context.Context, wwid string) (string, error)
	AdoptVolume(ctx context.Context, req engine.AdoptRequest) (engine.VolumeInfo, error)
	TakeOver(ctx context.Context, req engine.TakeOverRequest) (engine.VolumeInfo, error)
	// AddPeerLeg mirrors an unmirrored write cache (a volume that failed
	// over runs on one copy) onto a peer's replica.
	AddPeerLeg(ctx context.Context, name string, leg pool.RemoteLeg) error
	// StopForMove stops a volume for a planned move to the node keeping
	// its replica; ReleaseVolume drops this node's copy once it moved
	// (or failed over) without writing it back.
	StopForMove(ctx context.Context, name, to string) error
	ReleaseVolume(ctx context.Context, name string) error
}

// Store is the part of *store.Store the controller uses.
type Store interface {
	ListVolumeSpecs(ctx context.Context) ([]store.Item[api.VolumeSpec], int64, []store.InvalidRecord, error)
	GetVolumeSpec(ctx context.Context, name string) (api.VolumeSpec, store.Meta, error)
	// FailOverVolumeSpec hands a volume over in a planned move, only
	// while no record says its replica is outdated; UpdateVolumeSpec
	// calls off a move that cannot be made.
	FailOverVolumeSpec(ctx context.Context, spec api.VolumeSpec, expectModRevision int64) (store.Meta, error)
	UpdateVolumeSpec(ctx context.Context, spec api.VolumeSpec, expectModRevision int64) (store.Meta, error)
	PutVolumeStatus(ctx context.Context, st api.VolumeStatus) error
	GetVolumeStatus(ctx context.Context, name string) (api.VolumeStatus, store.Meta, error)
	ListPolicies(ctx context.Context) ([]store.Item[api.Policy], int64, []store.InvalidRecord, error)
	GetNodeSpec(ctx context.Context, node string) (api.NodeSpec, store.Meta, error)
	// GetNode reads a node's record: a peer's, for the replica it keeps.
	GetNode(ctx context.Context, name string) (api.Node, store.Meta, error)
	// ListNodes lists the live nodes: whether one could keep a replica.
	ListNodes(ctx context.Context) ([]store.Item[api.Node], int64, []store.InvalidRecord, error)
	Watch(ctx context.Context, fromRevision int64) <-chan store.WatchResult
	Healthy(ctx context.Context) error
}

// SSDSource reports the health of this node's SSDs (from the node's
// published inventory). It is optional: without one, the SSD wear and
// media-error rules only see what dm-writecache itself reports.
type SSDSource interface {
	SSDs(ctx context.Context) ([]api.SSDInventory, error)
}

// Drift policies.
const (
	// DriftRepair reloads the layout's tables over drifted ones.
	DriftRepair = "repair"
	// DriftReport only reports drift in the volume status and logs.
	DriftReport = "report"
)

// Config configures a Controller. Zero fields take the values of Default.
type Config struct {
	// Node is this node's name; only volume specs naming it are touched.
	Node string
	// ResyncInterval is how often every volume is reconciled against the
	// kernel's tables even without a change in the store (drift, flush
	// schedules, volumes failed terminally).
	ResyncInterval time.Duration
	// DriftPolicy is DriftRepair or DriftReport.
	DriftPolicy string
	// Logger receives structured logs; nil discards them.
	Logger *slog.Logger
	// Metrics records reconciles; nil records nothing.
	Metrics *Metrics
	// OnEtcdUp, if set, is called with the store's reachability whenever it
	// changes (and once at the first contact). It must not block. The
	// daemon points it at metrics.DaemonMetrics.SetEtcdUp (the
	// tidecache_etcd_up gauge) and its health endpoint.
	OnEtcdUp func(up bool)
	// SSDs is the optional source of SSD health.
	SSDs SSDSource
	// Replicas, if set, keeps the replicas volume specs place on this
	// node (spec.ReplicaNode); nil means the node keeps none (it has no
	// replica address), and such specs are reported, not served.
	Replicas Replicas
	// ReplicaKept, if set, is called after a replica was kept, so that it
	// is exported and published at once rather than at the next round.
	ReplicaKept func(ctx context.Context)
	// SharedOrigins, if set, runs volumes on shared origins (specs with
	// SharedOrigin); nil means this node cannot, and such specs are
	// reported, not served.
	SharedOrigins SharedOrigins

	// HealthInterval is how often the store's health is checked.
	HealthInterval time.Duration
	// StoreTimeout bounds every single store request.
	StoreTimeout time.Duration
	// MinBackoff and MaxBackoff bound the exponential retry delay of a
	// volume whose reconcile failed with a transient error, and of the
	// list-and-watch loop while the store is unreachable.
	MinBackoff, MaxBackoff time.Duration
	// MaxConcurrent bounds how many volumes are reconciled at once; each
	// volume still has its own worker and never more than one reconcile
	// in flight.
	MaxConcurrent int
	// ProgressInterval is how often the status of a volume being drained
	// or flushed is rewritten with the dirty-block count.
	ProgressInterval time.Duration
}

// Default returns the configuration tidecached uses, for node.
func Default(node string) Config {
	return Config{
		Node:             node,
		ResyncInterval:   30 * time.Second,
		DriftPolicy:      DriftRepair,
		HealthInterval:   5 * time.Second,
		StoreTimeout:     5 * time.Second,
		MinBackoff:       500 * time.Millisecond,
		MaxBackoff:       2 * time.Minute,
		MaxConcurrent:    8,
		ProgressInterval: time.Second,
	}
}

// withDefaults fills zero fields from Default.
func (c Config) withDefaults() Config {
	d := Default(c.Node)
	set := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	set(&c.ResyncInterval, d.ResyncInterval)
	set(&c.HealthInterval, d.HealthInterval)
	set(&c.StoreTimeout, d.StoreTimeout)
	set(&c.MinBackoff, d.MinBackoff)
	set(&c.MaxBackoff, d.MaxBackoff)
	set(&c.ProgressInterval, d.ProgressInterval)
	if c.DriftPolicy == "" {
		c.DriftPolicy = d.DriftPolicy
	}
	if c.MaxConcurrent == 0 {
		c.MaxConcurrent = d.MaxConcurrent
	}
	return c
}

// Validate checks the configuration (after defaults) and names the bad
// field.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Node == "":
		return errors.New("reconcile config: Node is empty")
	case c.DriftPolicy != DriftRepair && c.DriftPolicy != DriftReport:
		return fmt.Errorf("reconcile config: DriftPolicy %q: want %q or %q", c.DriftPolicy, DriftRepair, DriftReport)
	case c.ResyncInterval < 0, c.HealthInterval < 0, c.StoreTimeout < 0, c.MinBackoff < 0, c.ProgressInterval < 0:
		return errors.New("reconcile config: durations must not be negative")
	case c.MaxBackoff < c.MinBackoff:
		return fmt.Errorf("reconcile config: MaxBackoff %s is below MinBackoff %s", c.MaxBackoff, c.MinBackoff)
	case c.MaxConcurrent < 0:
		return fmt.Errorf("reconcile config: MaxConcurrent %d is negative", c.MaxConcurrent)
	}
	return nil
}

// Controller keeps this node's volumes as their specs in the store say.
// Create it with New and start it with Run.
type Controller struct {
	cfg    Config
	log    *slog.Logger
	engine Engine
	store  Store
	sem    chan struct{}
	relist chan struct{} // asks the list-and-watch loop to start over

	mu sync.Mutex
	// runCtx is Run's context, the one workers run under.
	runCtx  context.Context
	wg      sync.WaitGroup
	workers map[string]*worker
	// listed is true once a list succeeded, so known is meaningful.
	listed bool
	// known maps every volume spec in the store to the node it names.
	known map[string]string
	// owned maps the volumes whose spec was last seen naming this node to
	// that spec's revision. A volume leaves it only once it is gone from
	// the node or its spec names another node. A spec that disappears
	// while its name is here was deleted by a user: the volume is deleted
	// (once clean). A local volume never seen here is only reported.
	owned map[string]int64
	// replicas holds the volumes whose spec was last seen placing their
	// replica on this node.
	replicas map[string]bool
	// released holds the volumes this node handed over in a planned move
	// and whose copy here it has dropped since: the spec keeps movedFrom
	// until the volume moves again, and later passes on it (each change
	// the new owner makes, a re-protection) skip the release and its
	// engine lock. A volume leaves it when its spec names this node again
	// or is deleted; a restart looks once more.
	released map[string]bool
	vols     map[string]*volState
	// unmanaged are local volumes reported as having no spec for this
	// node, with the reason, so each is logged once.
	unmanaged map[string]string
	etcdUp    *bool
}

// volState is what the controller remembers about one volume between
// reconciles; it is all derived, and losing it on restart is safe (see
// the package documentation).
type volState struct {
	latch     *policy.Latch
	lastFlush time.Time
	// mediaBase is the media-error count per SSD already acknowledged.
	mediaBase map[string]uint64
	// mirrorSince is when the write mirror was first seen short of a
	// leg, in the current run of such observations.
	mirrorSince time.Time
}

// New returns a controller. It does nothing until Run.
func New(cfg Config, eng Engine, st Store) (*Controller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("node", cfg.Node)
	return &Controller{
		cfg:       cfg,
		log:       log,
		engine:    eng,
		store:     st,
		sem:       make(chan struct{}, cfg.MaxConcurrent),
		relist:    make(chan struct{}, 1),
		workers:   map[string]*worker{},
		known:     map[string]string{},
		owned:     map[string]int64{},
		replicas:  map[string]bool{},
		released:  map[string]bool{},
		vols:      map[string]*volState{},
		unmanaged: map[string]string{},
	}, nil
}

// EtcdUp reports whether the last contact with the store succeeded, for a
// health endpoint. It is false before the first contact.
func (c *Controller) EtcdUp() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.etcdUp != nil && *c.etcdUp
}

// setEtcdUp records the store's reachability, reports changes and says
// whether it changed.
func (c *Controller) setEtcdUp(up bool, err error) bool {
	c.mu.Lock()
	changed := c.etcdUp == nil || *c.etcdUp != up
	wasDown := c.etcdUp != nil && !*c.etcdUp
	c.etcdUp = &up
	c.mu.Unlock()
	if !changed {
		return false
	}
	switch {
	case up && wasDown:
		c.log.Info("cluster store reachable again: resuming reconciliation")
	case !up:
		c.log.Error("cluster store unreachable: volumes keep running as they are, no change is applied until it returns", "err", err)
	}
	if c.cfg.OnEtcdUp != nil {
		c.cfg.OnEtcdUp(up)
	}
	return true
}

// Run reconciles until ctx is done, then waits for the volume workers to
// stop (a mode change under way is interrupted the way the engine makes
// safe) and returns nil. It may be called once.
func (c *Controller) Run(ctx context.Context) error {
	c.mu.Lock()
	if c.runCtx != nil {
		c.mu.Unlock()
		return errors.New("reconcile: Run called twice")
	}
	c.runCtx = ctx
	c.mu.Unlock()
	c.log.Info("reconciler starting", "resync", c.cfg.ResyncInterval, "drift_policy", c.cfg.DriftPolicy)

	var loops sync.WaitGroup
	loops.Go(func() { c.healthLoop(ctx) })
	loops.Go(func() { c.resyncLoop(ctx) })
	c.listWatchLoop(ctx)
	loops.Wait()

	c.mu.Lock()
	c.workers = map[string]*worker{} // enqueue after this starts nothing
	c.mu.Unlock()
	c.wg.Wait()
	c.log.Info("reconciler stopped")
	return nil
}

// listWatchLoop lists, watches from the listed revision, and lists again
// whenever the watch ends (compaction, error) or the store comes back.
func (c *Controller) listWatchLoop(ctx context.Context) {
	failures := 0
	for ctx.Err() == nil {
		select {
		case <-c.relist: // this list serves any pending request
		default:
		}
		rev, err := c.list(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			c.setEtcdUp(false, err)
			failures++
			c.sleep(ctx, c.backoff(failures), c.relist)
			continue
		}
		failures = 0
		err = c.watch(ctx, rev+1)
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, store.ErrCompacted):
			c.log.Warn("watch fell behind the store's compaction: listing again", "revision", rev, "err", err)
		case errors.Is(err, errRelist):
			c.log.Info("listing again after the store came back")
		default:
			c.log.Warn("watch ended: listing again", "revision", rev, "err", err)
			failures++
			c.sleep(ctx, c.backoff(failures), c.relist)
		}
	}
}

var errRelist = errors.New("relist requested")

// sleep waits d, or until ctx is done or wake delivers (the health check
// saw the store come back: no point waiting out the backoff).
func (c *Controller) sleep(ctx context.Context, d time.Duration, wake <-chan struct{}) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	case <-wake:
	}
}

// backoff is the delay after n consecutive failures.
func (c *Controller) backoff(n int) time.Duration {
	d := c.cfg.MinBackoff
	for i := 1; i < n && d < c.cfg.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, c.cfg.MaxBackoff)
}

// storeCtx bounds one store request.
func (c *Controller) storeCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.cfg.StoreTimeout)
}

// list reads every volume spec, policy and this node's spec, records which
// volumes are whose, and enqueues every volume that may need work: those
// of this node, those this node owned whose spec is gone (deleted while
// the watch was not looking) and those present in the kernel. It returns
// the revision to watch from.
func (c *Controller) list(ctx context.Context) (int64, error) {
	sctx, cancel := c.storeCtx(ctx)
	defer cancel()
	specs, rev, invalid, err := c.store.ListVolumeSpecs(sctx)
	if err != nil {
		return 0, fmt.Errorf("list volume specs: %w", err)
	}
	c.reportInvalid(invalid)
	_, prev, pinvalid, err := c.store.ListPolicies(sctx)
	if err != nil {
		return 0, fmt.Errorf("list policies: %w", err)
	}
	c.reportInvalid(pinvalid)
	if _, _, err := c.store.GetNodeSpec(sctx, c.cfg.Node); err != nil && !errors.Is(err, store.ErrNotFound) {
		return 0, fmt.Errorf("read node spec %s: %w", c.cfg.Node, err)
	}
	c.setEtcdUp(true, nil)
	// Replicas on this node's disks whose spec now places them on another
	// node (re-protected while this node was down) are looked at too, and
	// dropped: the leader moves a replica only while the owner runs, so
	// this one missed the owner's writes since and is nobody's copy. One
	// whose spec is gone is kept (see the runbook): the owner may not have
	// flushed before its spec was deleted.
	var kept []string
	if c.cfg.Replicas != nil {
		if kept, err = c.cfg.Replicas.KeptReplicas(ctx); err != nil {
			c.log.Warn("replicas kept on this node not listed; those the cluster no longer places here are dropped once listed", "err", err)
		}
	}

	known := make(map[string]string, len(specs))
	var names []string
	var replicas []string
	for _, it := range specs {
		known[it.Value.Name] = it.Value.Node
		switch {
		case it.Value.Node == c.cfg.Node:
			names = append(names, it.Value.Name)
		case it.Value.KeepsReplica(c.cfg.Node):
			replicas = append(replicas, it.Value.Name)
		}
	}
	c.mu.Lock()
	c.known, c.listed = known, true
	// Replicas placed here are looked at too (kept and exported, or
	// dropped when their spec goes), also after a restart.
	kept = slices.DeleteFunc(kept, func(name string) bool { _, ok := known[name]; return !ok })
	for _, name := range append(replicas, kept...) {
		c.replicas[name] = true
	}
	names = append(names, replicas...)
	names = append(names, kept...)
	for name := range c.replicas {
		if _, ok := known[name]; !ok {
			names = append(names, name) // deleted while the watch was not looking
		}
	}
	for name := range c.owned {
		if _, ok := known[name]; !ok || known[name] != c.cfg.Node {
			names = append(names, name)
		}
	}
	c.mu.Unlock()
	// Invalid volume records of this node's volumes show up through their
	// owned names or the kernel's list below; their reconcile reports them.
	for _, n := range names {
		c.enqueue(n)
	}
	c.enqueueLocal(ctx)
	c.log.Debug("listed", "revision", rev, "volumes", len(specs), "mine", len(names))
	// Watch from the older of the two revisions: events between them are
	// delivered again, which only causes extra, harmless reconciles.
	return min(rev, prev), nil
}

// reportInvalid logs and counts records the store could not decode.
func (c *Controller) reportInvalid(invalid []store.InvalidRecord) {
	for _, r := range invalid {
		c.log.Warn("malformed record in the cluster store skipped", "key", r.Key, "err", r.Err)
	}
	c.cfg.Metrics.invalidRecords(len(invalid))
}

// watch follows the store from rev until the watch fails, a re-list is
// requested or ctx is done.
func (c *Controller) watch(ctx context.Context, rev int64) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch := c.store.Watch(wctx, rev)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-c.relist:
			return errRelist
		case wr, ok := <-ch:
			if !ok {
				return errors.New("watch channel closed")
			}
			if wr.Err != nil {
				return wr.Err
			}
			for _, ev := range wr.Events {
				c.handle(ev)
			}
		}
	}
}

// handle turns one store event into volumes to reconcile. The event's
// value only says which volumes to look at; the reconcile reads the
// current state itself. An invalid volume spec is not taken for a
// deletion (the store suggests that reading for level-based callers):
// deleting a volume because its spec became unreadable would destroy data
// over a typo, so the reconcile leaves the volume as it is and reports.
func (c *Controller) handle(ev store.Event) {
	if ev.Invalid != nil {
		c.reportInvalid([]store.InvalidRecord{*ev.Invalid})
	}
	switch ev.Kind {
	case store.KindVolumeSpec:
		c.mu.Lock()
		_, mine := c.owned[ev.Name]
		mine = mine || c.replicas[ev.Name]
		if v, ok := ev.Value.(api.VolumeSpec); ok {
			c.known[ev.Name] = v.Node
			mine = mine || v.Node == c.cfg.Node || v.KeepsReplica(c.cfg.Node)
		} else if ev.Type == store.Delete {
			delete(c.known, ev.Name)
		}
		c.mu.Unlock()
		if mine {
			c.enqueue(ev.Name)
		}
	case store.KindPolicy:
		c.enqueueOwned()
	case store.KindNodeSpec:
		if ev.Name == c.cfg.Node {
			c.enqueueOwned()
		}
	}
}

// enqueueOwned enqueues every volume this node owns or keeps a replica of.
func (c *Controller) enqueueOwned() {
	c.mu.Lock()
	names := make([]string, 0, len(c.owned)+len(c.replicas))
	for n := range c.owned {
		names = append(names, n)
	}
	for n := range c.replicas {
		names = append(names, n)
	}
	c.mu.Unlock()
	for _, n := range names {
		c.enqueue(n)
	}
}

// healthLoop checks the store's health every HealthInterval. A watch on a
// store that went away does not fail, it waits, so this is how an outage
// is noticed, and how its end triggers a fresh list.
func (c *Controller) healthLoop(ctx context.Context) {
	t := time.NewTicker(c.cfg.HealthInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		hctx, cancel := c.storeCtx(ctx)
		err := c.store.Healthy(hctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if c.setEtcdUp(err == nil, err) {
			// Down: drop the watch (it would wait silently) and retry
			// listing with backoff; this also lets a stopping etcd close
			// its streams at once. Up again: whatever happened meanwhile,
			// start from a fresh list.
			select {
			case c.relist <- struct{}{}:
			default:
			}
		}
	}
}

// resyncLoop reconciles every volume every ResyncInterval.
func (c *Controller) resyncLoop(ctx context.Context) {
	t := time.NewTicker(c.cfg.ResyncInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c.Resync(ctx)
	}
}

// Resync enqueues every volume this node owns and every volume present in
// the kernel, and reports local volumes with no spec for this node. While
// the store is unreachable it does nothing: nothing can be decided, and
// the kernel tables are left as they are.
func (c *Controller) Resync(ctx context.Context) {
	if !c.EtcdUp() {
		c.log.Debug("resync skipped: cluster store unreachable")
		return
	}
	c.enqueueOwned()
	c.enqueueLocal(ctx)
}

// enqueueLocal enqueues the volumes the kernel and the superblocks know,
// and reports those with no spec for this node.
func (c *Controller) enqueueLocal(ctx context.Context) {
	vols, err := c.engine.Volumes(ctx)
	if err != nil {
		c.log.Error("list local volumes", "err", err)
		return
	}
	c.mu.Lock()
	listed := c.listed
	unmanaged := map[string]string{}
	var mine []string
	for _, v := range vols {
		node, spec := c.known[v.Name]
		_, owned := c.owned[v.Name]
		switch {
		case owned || (spec && node == c.cfg.Node):
			mine = append(mine, v.Name)
		case !listed:
		case !spec:
			unmanaged[v.Name] = "no volume spec in the cluster store"
		default:
			unmanaged[v.Name] = "its volume spec names node " + node
		}
	}
	var fresh []string
	for n, why := range unmanaged {
		if c.unmanaged[n] != why {
			fresh = append(fresh, n)
		}
	}
	old := c.unmanaged
	c.unmanaged = unmanaged
	c.mu.Unlock()

	for _, n := range fresh {
		c.log.Warn("volume on this node is not managed: left as it is, never deleted automatically; create its spec or delete it with tidectl on this node",
			"volume", n, "reason", unmanaged[n])
	}
	for n := range old {
		if _, still := unmanaged[n]; !still {
			c.log.Info("volume no longer unmanaged", "volume", n)
		}
	}
	c.cfg.Metrics.setUnmanaged(len(unmanaged))
	for _, n := range mine {
		c.enqueue(n)
	}
}

// Unmanaged returns the local volumes with no spec for this node, with
// the reason, as of the last resync.
func (c *Controller) Unmanaged() map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]string, len(c.unmanaged))
	for k, v := range c.unmanaged {
		out[k] = v
	}
	return out
}
