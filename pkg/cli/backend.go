// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"context"
	"fmt"
	"os"

	"github.com/tidecache/tidecache/pkg/engine"
	"github.com/tidecache/tidecache/pkg/mdraid"
	"github.com/tidecache/tidecache/pkg/pool"
)

// backend is what a volume command that works in both modes acts on,
// chosen once per command by Globals.backend: this node's engine, or the
// cluster's store. Both return the same Volume record. Commands that act
// on one node's devices only (flush, check, repair, tune, pool) use
// Globals.local, which refuses --etcd-endpoints before dialling anything.
type backend interface {
	// CreateVolume carves a volume (locally) or writes its spec (cluster).
	// poolName and node may be empty: the only pool, the leader's choice.
	CreateVolume(ctx context.Context, req pool.VolumeRequest, poolName, node string) (Volume, error)
	Volumes(ctx context.Context) ([]Volume, error)
	Volume(ctx context.Context, name string) (Volume, error)
	DeleteVolume(ctx context.Context, name string, force bool) error
	// SetMode switches the mode live, reporting drain progress.
	SetMode(ctx context.Context, name string, mode pool.Mode) (Volume, error)
	// Resize grows the volume to size bytes, live (locally), or writes
	// the size into its spec (cluster).
	Resize(ctx context.Context, name string, size uint64) (Volume, error)
	Close() error
}

// backend opens the backend the flags select. The caller closes it.
func (g *Globals) backend(ctx context.Context) (backend, error) {
	if g.cluster() {
		st, err := g.store(ctx)
		if err != nil {
			return nil, err
		}
		return &clusterBackend{g: g, st: st}, nil
	}
	return g.openLocal()
}

// local opens this node's engine for a command that works on this node's
// devices only; with --etcd-endpoints it refuses, saying what to run
// instead. The caller closes it.
func (g *Globals) local(what, instead string) (*localBackend, error) {
	if err := g.nodeOnly(what, instead); err != nil {
		return nil, err
	}
	return g.openLocal()
}

// nodeOnly refuses an explicit --etcd-endpoints for a command that works
// on this node's devices only, saying what to run instead. Endpoints from
// the environment or tidectl.yaml are for the commands that use them:
// this one runs here all the same.
func (g *Globals) nodeOnly(what, instead string) error {
	if g.clusterExplicit() {
		return usageErrorf("%s works on this node's devices and does not take --etcd-endpoints: %s", what, instead)
	}
	return nil
}

func (g *Globals) openLocal() (*localBackend, error) {
	open := g.openNode
	if open == nil {
		open = func() (nodeEngine, error) { return g.Engine() }
	}
	e, err := open()
	if err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	return &localBackend{g: g, e: e, node: host}, nil
}

// nodeEngine is the part of *engine.Engine the local backend uses; host
// tests give it a fake.
type nodeEngine interface {
	CreateVolume(ctx context.Context, poolName string, req pool.VolumeRequest) (engine.VolumeInfo, error)
	Volumes(ctx context.Context) ([]engine.VolumeInfo, error)
	Volume(ctx context.Context, name string) (engine.VolumeInfo, error)
	Pools(ctx context.Context) ([]engine.PoolInfo, error)
	DeleteVolume(ctx context.Context, name string, force bool) error
	SetMode(ctx context.Context, name string, mode pool.Mode, progress engine.ProgressFunc) error
	Flush(ctx context.Context, name string, progress engine.ProgressFunc) (uint64, error)
	CheckVolume(ctx context.Context, name string) error
	RepairVolume(ctx context.Context, name string) ([]string, error)
	SetTuning(ctx context.Context, name string, t *pool.Tuning) (bool, error)
	AdoptVolume(ctx context.Context, req engine.AdoptRequest) (engine.VolumeInfo, error)
	DetachVolume(ctx context.Context, name string, progress engine.ProgressFunc) error
	UncacheVolume(ctx context.Context, name string, progress engine.ProgressFunc) error
	ResizeVolume(ctx context.Context, name string, size uint64) (engine.VolumeInfo, error)
	Close() error
}

// localBackend drives this node's engine directly.
type localBackend struct {
	g *Globals
	e nodeEngine
	// node names this host in the volumes it returns.
	node string
}

func (b *localBackend) Close() error { return b.e.Close() }

func (b *localBackend) CreateVolume(ctx context.Context, req pool.VolumeRequest, poolName, node string) (Volume, error) {
	if node != "" {
		return Volume{}, usageErrorf("--node needs --etcd-endpoints (cluster mode): locally the volume is created on this node")
	}
	info, err := b.e.CreateVolume(ctx, poolName, req)
	if err != nil {
		return Volume{}, unknownPool(ctx, b.e, poolName, err)
	}
	return localVolume(info, b.node), nil
}

func (b *localBackend) Volumes(ctx context.Context) ([]Volume, error) {
	infos, err := b.e.Volumes(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Volume, 0, len(infos))
	for _, v := range infos {
		out = append(out, localVolume(v, b.node))
	}
	return out, nil
}

func (b *localBackend) Volume(ctx context.Context, name string) (Volume, error) {
	info, err := b.info(ctx, name)
	if err != nil {
		return Volume{}, err
	}
	v := localVolume(info, b.node)
	if info.AdoptedDevice == "" {
		v.OriginArray, v.OriginArrayError = b.originArray(ctx, info.Pool)
	}
	return v, nil
}

// info is the engine's record of the volume name; a name that is not on
// this node gets the closest that are.
func (b *localBackend) info(ctx context.Context, name string) (engine.VolumeInfo, error) {
	info, err := b.e.Volume(ctx, name)
	return info, unknownVolume(ctx, b.e, name, err)
}

// originArray reads the md origin array of the named pool: its health,
// or why it could not be read; neither when the origin is not md.
func (b *localBackend) originArray(ctx context.Context, poolName string) (*mdraid.Health, string) {
	pools, err := b.e.Pools(ctx)
	if err != nil {
		return nil, err.Error()
	}
	for _, p := range pools {
		if p.Name == poolName {
			o := newPoolView(p).Origin // pool show's reading of the array
			return o.Array, o.ArrayError
		}
	}
	return nil, ""
}

func (b *localBackend) DeleteVolume(ctx context.Context, name string, force bool) error {
	return unknownVolume(ctx, b.e, name, b.e.DeleteVolume(ctx, name, force))
}

func (b *localBackend) SetMode(ctx context.Context, name string, mode pool.Mode) (Volume, error) {
	pp := newProgressPrinter(b.g.Stderr)
	err := b.e.SetMode(ctx, name, mode, pp.print)
	pp.end()
	if err != nil {
		return Volume{}, unknownVolume(ctx, b.e, name, err)
	}
	return b.Volume(ctx, name)
}

func (b *localBackend) Resize(ctx context.Context, name string, size uint64) (Volume, error) {
	info, err := b.e.ResizeVolume(ctx, name, size)
	if err != nil {
		return Volume{}, unknownVolume(ctx, b.e, name, err)
	}
	return localVolume(info, b.node), nil
}

// Flush writes every dirty block back and returns how many are left.
func (b *localBackend) Flush(ctx context.Context, name string) (uint64, error) {
	pp := newProgressPrinter(b.g.Stderr)
	left, err := b.e.Flush(ctx, name, pp.print)
	pp.end()
	return left, unknownVolume(ctx, b.e, name, err)
}

// Check returns the volume's drift from its layout (joined
// *engine.DriftError), nil when it matches.
func (b *localBackend) Check(ctx context.Context, name string) error {
	return unknownVolume(ctx, b.e, name, b.e.CheckVolume(ctx, name))
}

func (b *localBackend) Repair(ctx context.Context, name string) ([]string, error) {
	changed, err := b.e.RepairVolume(ctx, name)
	return changed, unknownVolume(ctx, b.e, name, err)
}

// Tune applies change to the volume's current write-tier tuning; change
// returns the new tuning (nil: node defaults).
func (b *localBackend) Tune(ctx context.Context, name string, change func(*pool.Tuning) (*pool.Tuning, error)) (bool, error) {
	info, err := b.info(ctx, name)
	if err != nil {
		return false, err
	}
	t, err := change(info.Tuning)
	if err != nil {
		return false, err
	}
	return b.e.SetTuning(ctx, name, t)
}

// volumeNotFound names a volume the backend does not know.
func volumeNotFound(name string) error {
	return fmt.Errorf("volume %s: %w", name, pool.ErrVolumeNotFound)
}
