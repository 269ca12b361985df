// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/tidecache/tidecache/pkg/nvmeof"
	"github.com/tidecache/tidecache/pkg/pool"
	"github.com/tidecache/tidecache/pkg/stack"
)

// A peer mirror (pool.ProtectPeer) has its leg 1 on another node: the peer
// keeps a replica slice (pool.Replica), builds a linear device on it and
// exports it over NVMe/TCP to the owner alone; the owner attaches the
// export and uses it as leg 1 of its dm-raid mirror. Each half is built
// from its own node's superblocks. Boot assembly needs no network: the
// owner's mirror starts on its local leg (leg 1 recorded out of sync) and
// the daemon attaches the export and gives the leg back (GiveBackLeg),
// after which dm-raid resyncs what its bitmap says leg 1 missed.

// attachTimeout bounds the wait for a peer's export to show up as a block
// device once connected.
const attachTimeout = 15 * time.Second

// remoteDevices returns the block devices of the layout's peer legs that
// are attached, by leg UUID. It only looks at sysfs: nothing connects.
func (e *Engine) remoteDevices(l *pool.Layout) map[string]string {
	out := map[string]string{}
	for _, v := range l.Volumes {
		for _, r := range v.PeerLegs() {
			dev, ok, err := e.initiator.Device(r.NQN)
			if err != nil {
				e.log.Debug("peer leg lookup failed", "volume", v.Name, "leg", r.Index, "nqn", r.NQN, "err", err)
				continue
			}
			if ok {
				out[r.UUID] = dev
			}
		}
	}
	return out
}

// hostSecret is the secret to present to exporter's target, "" without
// an NVMeAuth.
func (e *Engine) hostSecret(ctx context.Context, exporter string) (string, error) {
	if e.cfg.NVMeAuth == nil {
		return "", nil
	}
	return e.cfg.NVMeAuth.HostSecret(ctx, exporter)
}

// exportKey is the secret this node's target requires of host, "" without
// an NVMeAuth.
func (e *Engine) exportKey(ctx context.Context, host string) (string, error) {
	if e.cfg.NVMeAuth == nil {
		return "", nil
	}
	return e.cfg.NVMeAuth.ExportKey(ctx, host)
}

// attachRemote connects to a peer leg's export (unless connected) and
// returns its block device once it is there and large enough.
func (e *Engine) attachRemote(ctx context.Context, r pool.RemoteLeg, writeCache uint64, t nvmeof.Timeouts) (string, error) {
	// The NVMe/TCP host driver; already loaded is fine, and a kernel
	// without it fails the attach below with the reason.
	if _, err := os.Stat(e.initiator.Fabrics); err != nil {
		if _, err := e.runner.Run(ctx, "modprobe", "nvme-tcp"); err != nil {
			return "", fmt.Errorf("attach peer leg on node %s: %w", r.Node, err)
		}
	}
	secret, err := e.hostSecret(ctx, r.Node)
	if err != nil {
		return "", fmt.Errorf("attach peer leg on node %s: %w", r.Node, err)
	}
	ctx, cancel := context.WithTimeout(ctx, attachTimeout)
	defer cancel()
	dev, err := e.initiator.Attach(ctx, nvmeof.Remote{NQN: r.NQN, HostNQN: r.HostNQN, Addr: r.Addr, Port: r.Port, Secret: secret}, t)
	if err != nil {
		return "", fmt.Errorf("attach peer leg on node %s: %w", r.Node, err)
	}
	size, err := e.sectors(dev)
	if err != nil {
		return "", fmt.Errorf("attach peer leg on node %s: %w", r.Node, err)
	}
	if want := pool.RemoteLegSectors(writeCache); size < want {
		return "", fmt.Errorf("attach peer leg on node %s: %s is %d sectors, the leg needs %d", r.Node, dev, size, want)
	}
	return dev, nil
}

// attachPeerLegs attaches the peer legs of a volume's running mirror (in
// writeback), so that the stack built next has them. Nothing to do for
// other volumes. Each leg goes through attachRemote, also one whose
// device is there: it waits for a controller that is reconnecting to be
// live again, and sets its ctrl_loss_tmo back to the volume's (a Detach
// may have told it to give up). A leg that does not answer is left out
// and the others are still attached; the error names every leg that
// failed, by its index (0 or 1) in failed.
func (e *Engine) attachPeerLegs(ctx context.Context, p *poolState, v pool.Volume) (failed []int, err error) {
	if v.Mode != pool.ModeWriteback {
		return nil, nil
	}
	var errs []error
	for _, r := range v.PeerLegs() {
		dev, err := e.attachRemote(ctx, r.RemoteLeg, v.WriteCache.Length, peerLegTimeouts(v))
		if err != nil {
			failed, errs = append(failed, r.Index), append(errs, err)
			continue
		}
		p.Remote[r.UUID] = dev
	}
	return failed, errors.Join(errs...)
}

// peerLegsMissing reports whether a peer leg of the volume has no device
// on this node.
func peerLegsMissing(p *poolState, v pool.Volume) bool {
	for _, r := range v.PeerLegs() {
		if _, ok := p.Remote[r.UUID]; !ok {
			return true
		}
	}
	return false
}

// detachPeerLegs detaches every peer leg of a volume that no longer runs
// here, logging (not returning) what could not be: a controller left
// connected holds nothing the volume needs.
func (e *Engine) detachPeerLegs(ctx context.Context, v pool.Volume, why string) {
	for _, r := range v.PeerLegs() {
		if err := e.detachPeerLeg(ctx, r.NQN); err != nil {
			e.log.Warn(why, "volume", v.Name, "leg", r.Index, "nqn", r.NQN, "err", err)
		}
	}
}

// sectors returns the size of a block device from sysfs.
func (e *Engine) sectors(dev string) (uint64, error) {
	b, err := os.ReadFile(filepath.Join(e.cfg.SysRoot, "class", "block", filepath.Base(dev), "size"))
	if err != nil {
		return 0, fmt.Errorf("size of %s: %w", dev, err)
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("size of %s: %w", dev, err)
	}
	return n, nil
}

// isReplicaExport reports whether a block device is an attached replica
// export: a peer leg, whose contents are another node's mirror leg and
// which may hang for seconds when the peer dies, so scans never read it.
func (e *Engine) isReplicaExport(name string) bool {
	b, err := os.ReadFile(filepath.Join(e.cfg.SysRoot, "class", "block", name, "device", "subsysnqn"))
	return err == nil && nvmeof.IsReplicaNQN(strings.TrimSpace(string(b)))
}

// ReplicaInfo is a replica this node keeps for another node's mirror.
type ReplicaInfo struct {
	Pool string `json:"pool"`
	pool.Replica
	// NQN is the subsystem the replica is exported as.
	NQN string `json:"nqn"`
	// Device is the replica's dm device, "" if it is not built.
	Device string `json:"device,omitempty"`
	// Exported says the export is in place (ServeReplicas).
	Exported bool `json:"exported"`
	// Fenced says the owner is fenced: the replica is kept, its device
	// built, and it is exported to nobody (ServeReplicasFenced).
	Fenced bool `json:"fenced,omitempty"`
	// Error is why it is not, if it is not.
	Error string `json:"error,omitempty"`
}

// HostReplica keeps a replica slice for another node's mirror in the named
// pool ("" for the only one) and builds its device: the slice's head is
// zeroed (dm-raid then takes it for a new leg and copies the whole write
// cache onto it) before the layout naming it is recorded. A replica of
// that volume for that owner that is already kept is returned as it is.
// Exporting is ServeReplicas'.
func (e *Engine) HostReplica(ctx context.Context, poolName string, req pool.ReplicaRequest) (ReplicaInfo, error) {
	unlock, err := e.lock(ctx)
	if err != nil {
		return ReplicaInfo{}, err
	}
	defer unlock()
	found, err := e.scan(ctx)
	if err != nil {
		return ReplicaInfo{}, err
	}
	for _, p := range found.Pools {
		if r, ok := p.Layout.Replica(req.Volume); ok && p.Layout.Name != poolName && poolName != "" {
			return ReplicaInfo{}, fmt.Errorf("replica of volume %s: %w in pool %s", r.Volume, pool.ErrVolumeExists, p.Layout.Name)
		}
	}
	p, err := pickPool(found, poolName)
	if err != nil {
		return ReplicaInfo{}, err
	}
	if missing := p.missing(); len(missing) > 0 {
		return ReplicaInfo{}, fmt.Errorf("pool %s: SSD members %v are missing; repair the pool before keeping replicas", p.Layout.Name, missing)
	}
	origin, err := e.resolveOrigin(ctx, p.Layout)
	if err != nil {
		return ReplicaInfo{}, err
	}
	next := p.Layout.Clone()
	r, err := next.AddReplica(req, newUUID())
	if err != nil {
		return ReplicaInfo{}, fmt.Errorf("pool %s: %w", p.Layout.Name, err)
	}
	if next.Generation != p.Layout.Generation {
		path, ok := p.Members[r.Extent.Member]
		if !ok {
			return ReplicaInfo{}, fmt.Errorf("replica of volume %s: SSD member %s missing", r.Volume, r.Extent.Member)
		}
		if err := e.zeroHead(path, r.Extent); err != nil {
			return ReplicaInfo{}, fmt.Errorf("replica of volume %s: %w", r.Volume, err)
		}
		if err := e.writeLayout(p, origin, next); err != nil {
			return ReplicaInfo{}, err
		}
		e.log.Info("replica kept for a peer mirror", "volume", r.Volume, "owner", r.Owner, "pool", p.Layout.Name, "extent", r.Extent.String())
	}
	d, err := stack.Replica(r, p.devices(origin))
	if err != nil {
		return ReplicaInfo{}, err
	}
	if _, err := e.ensure(ctx, d); err != nil {
		return ReplicaInfo{}, fmt.Errorf("replica of volume %s: %w", r.Volume, err)
	}
	return ReplicaInfo{Pool: p.Layout.Name, Replica: r, NQN: nvmeof.ReplicaNQN(r.UUID), Device: d.Path()}, nil
}

// ServeReplicas builds every replica's device and exports it to its owner
// on addr:port, idempotently: the daemon calls it at start and then
// periodically, so a peer that rebooted serves its replicas again without
// etcd. It reports every replica, with the error of any it could not
// serve; err is for a failed scan. It is ServeReplicasFenced with no node
// fenced.
func (e *Engine) ServeReplicas(ctx context.Context, addr string, port int) ([]ReplicaInfo, error) {
	return e.ServeReplicasFenced(ctx, addr, port, nil)
}

// ServeReplicasFenced is ServeReplicas in a cluster that has fenced the
// nodes in fenced: a replica whose owner is fenced keeps its slice and its
// device, which are what a failover of the owner's volume builds on, but
// is exported to nobody, and an export of it in place is removed
// (nvmeof.Target.Unexport, after which none of the owner's writes is in
// flight). It is reported Fenced and not Exported, or with the error that
// kept the export from being removed.
func (e *Engine) ServeReplicasFenced(ctx context.Context, addr string, port int, fenced map[string]bool) ([]ReplicaInfo, error) {
	var out []ReplicaInfo
	err := e.eachReplica(ctx, func(p *poolState, r pool.Replica) {
		info := ReplicaInfo{Pool: p.Layout.Name, Replica: r, NQN: nvmeof.ReplicaNQN(r.UUID)}
		serve := e.serveReplica
		if fenced[r.Owner] {
			serve = e.withholdReplica
		}
		if err := serve(ctx, p, r, addr, port, &info); err != nil {
			info.Error = err.Error()
			e.log.Warn("replica not served", "volume", r.Volume, "owner", r.Owner, "fenced", fenced[r.Owner], "err", err)
		}
		out = append(out, info)
	})
	return out, err
}

// withholdReplica keeps a fenced owner's replica built and unexported.
func (e *Engine) withholdReplica(ctx context.Context, p *poolState, r pool.Replica, _ string, _ int, info *ReplicaInfo) error {
	if err := e.target.Unexport(info.NQN); err != nil {
		return err
	}
	info.Fenced = true
	d, err := stack.Replica(r, p.devices(""))
	if err != nil {
		return err
	}
	if _, err := e.ensure(ctx, d); err != nil {
		return err
	}
	info.Device = d.Path()
	return nil
}

// eachReplica calls fn, under the engine's lock, for every replica the
// pools on this node's disks keep, pool by pool in name order.
func (e *Engine) eachReplica(ctx context.Context, fn func(p *poolState, r pool.Replica)) error {
	unlock, err := e.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	found, err := e.scan(ctx)
	if err != nil {
		return err
	}
	for _, p := range found.sortedPools() {
		for _, r := range p.Layout.Replicas {
			fn(p, r)
		}
	}
	return nil
}

func (e *Engine) serveReplica(ctx context.Context, p *poolState, r pool.Replica, addr string, port int, info *ReplicaInfo) error {
	d, err := stack.Replica(r, p.devices(""))
	if err != nil {
		return err
	}
	if _, err := e.ensure(ctx, d); err != nil {
		return err
	}
	info.Device = d.Path()
	if addr == "" {
		return fmt.Errorf("no replica address configured (tidecached --replica-address)")
	}
	if _, err := os.Stat(e.target.Root); err != nil {
		if _, err := e.runner.Run(ctx, "modprobe", "nvmet-tcp"); err != nil {
			return err
		}
	}
	owner, ok := nvmeof.NodeOfHostNQN(r.HostNQN)
	if !ok {
		return fmt.Errorf("replica's host NQN %q names no node", r.HostNQN)
	}
	key, err := e.exportKey(ctx, owner)
	if err != nil {
		return err
	}
	if err := e.target.Export(nvmeof.Export{NQN: info.NQN, Device: d.Path(), HostNQN: r.HostNQN, HostKey: key, Addr: addr, Port: port, UUID: r.UUID}); err != nil {
		return err
	}
	info.Exported = true
	return nil
}

// KeptReplicas names the volumes whose replica this node's pools keep, so
// that a daemon that restarts can drop the ones the cluster has since
// placed elsewhere (the volume re-protected on another node while this
// one was down).
func (e *Engine) KeptReplicas(ctx context.Context) ([]string, error) {
	var names []string
	err := e.eachReplica(ctx, func(_ *poolState, r pool.Replica) { names = append(names, r.Volume) })
	return names, err
}

// DropReplica stops exporting the replica kept for the named volume,
// removes its device and frees its slice. The owner's mirror loses its
// peer leg (it goes on degraded), so the caller drops a replica only once
// the cluster no longer places that volume's leg here.
func (e *Engine) DropReplica(ctx context.Context, volume string) error {
	unlock, err := e.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	found, err := e.scan(ctx)
	if err != nil {
		return err
	}
	for _, p := range found.sortedPools() {
		r, ok := p.Layout.Replica(volume)
		if !ok {
			continue
		}
		if err := e.target.Unexport(nvmeof.ReplicaNQN(r.UUID)); err != nil {
			return fmt.Errorf("drop replica of volume %s: %w", volume, err)
		}
		if err := e.removeDevice(ctx, stack.ReplicaNamePrefix+volume); err != nil {
			return fmt.Errorf("drop replica of volume %s: %w", volume, err)
		}
		origin, err := e.resolveOrigin(ctx, p.Layout)
		if err != nil {
			return err
		}
		next := p.Layout.Clone()
		if err := next.RemoveReplica(volume); err != nil {
			return err
		}
		if err := e.writeLayout(p, origin, next); err != nil {
			return err
		}
		e.log.Info("replica dropped", "volume", volume, "owner", r.Owner, "pool", p.Layout.Name)
		return nil
	}
	return nil
}
