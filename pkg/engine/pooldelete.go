// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// PoolDeleteReport says what DeletePool did, for the operator.
type PoolDeleteReport struct {
	Pool string `json:"pool"`
	// Wiped are the devices whose tidecache superblock was removed.
	Wiped []string `json:"wiped"`
	// MissingMembers are SSDs the layout names that are not present: their
	// superblock stays until `pool create --destroy-pool` takes them.
	MissingMembers []string `json:"missing_members,omitempty"`
	// StoppedArray is the md RAID10 tidecache had built for the pool and
	// has now stopped; ArrayDisks are its disks, whose md superblocks were
	// erased.
	StoppedArray string   `json:"stopped_array,omitempty"`
	ArrayDisks   []string `json:"array_disks,omitempty"`
}

// DeletePool removes a pool that holds no volume: it wipes the tidecache
// superblock of every present SSD, then of the origin (the reverse of
// creation, which writes the origin last), then stops the md RAID10 that
// pool create built, if any, and erases its disks' md superblocks. An
// origin the operator brought (--origin) is left as it is but for
// tidecache's superblock. A pool with volumes is refused: their data
// lives on its devices. A crash half way leaves a pool with missing
// members or an origin alone, which assembly refuses and which
// DeletePool, run again, finishes.
func (e *Engine) DeletePool(ctx context.Context, name string) (PoolDeleteReport, error) {
	rep := PoolDeleteReport{Pool: name}
	unlock, err := e.lock(ctx)
	if err != nil {
		return rep, err
	}
	defer unlock()
	found, err := e.scan(ctx)
	if err != nil {
		return rep, err
	}
	p, ok := found.byName(name)
	if !ok {
		return rep, fmt.Errorf("pool %s: %w", name, ErrPoolNotFound)
	}
	l := p.Layout
	if len(l.Volumes) > 0 {
		var names []string
		for _, v := range l.Volumes {
			names = append(names, v.Name)
		}
		return rep, fmt.Errorf("pool %s still has %d volume(s): %s; delete them first (tidectl volume delete)", name, len(names), strings.Join(names, ", "))
	}
	if len(l.Replicas) > 0 {
		// A replica is another node's mirror leg: wiping the pool would
		// take that copy of its dirty blocks away without it knowing.
		var names []string
		for _, r := range l.Replicas {
			names = append(names, fmt.Sprintf("%s (owned by node %s)", r.Volume, r.Owner))
		}
		return rep, fmt.Errorf("pool %s keeps %d replica(s) of other nodes' write caches: %s; delete or move those volumes' specs first, and the node drops them", name, len(names), strings.Join(names, ", "))
	}
	if len(found.Corrupt) > 0 {
		// A damaged superblock may be this pool's newest record, naming
		// volumes the layout read here lacks.
		var paths []string
		for _, c := range found.Corrupt {
			paths = append(paths, c.Path)
		}
		return rep, fmt.Errorf("pool %s: damaged tidecache superblocks on %s may belong to it and name volumes: not deleting it (see the runbook, damaged superblock)", name, strings.Join(paths, ", "))
	}
	origin, err := e.resolveOrigin(ctx, l)
	originGone := err != nil && isNoSuperblock(err)
	if err != nil && !originGone {
		return rep, fmt.Errorf("delete pool %s: %w", name, err)
	}

	// Nothing may hold the devices: a dm table or a mount on a pool
	// device with no volumes is not tidecache's.
	members := slices.Sorted(maps.Values(p.Members))
	devices := members
	if !originGone && origin != "" {
		devices = append(slices.Clone(members), origin)
	}
	for _, dev := range devices {
		if err := e.checker.CheckUnused(ctx, dev); err != nil {
			return rep, fmt.Errorf("delete pool %s: %w: %w", name, ErrUnsafeDevice, err)
		}
	}
	for _, uuid := range p.missing() {
		m, _ := l.Member(uuid) // missing() lists members of l
		rep.MissingMembers = append(rep.MissingMembers, m.Path)
	}
	for _, dev := range devices {
		if err := e.wipeSuperblock(dev); err != nil {
			return rep, fmt.Errorf("delete pool %s: %w", name, err)
		}
		rep.Wiped = append(rep.Wiped, dev)
		e.log.Info("pool superblock wiped", "pool", name, "device", dev)
	}
	e.updateExpected(l.UUID, nil)
	if l.Origin.MDUUID != "" && mdName(l.Origin.Path) == "tc-"+name && !originGone {
		// pool create built this array for the pool: take it apart, so its
		// disks are plain disks again and no longer count as this pool's.
		arr, err := e.md.Detail(ctx, origin)
		if err != nil {
			return rep, fmt.Errorf("pool %s deleted, but its RAID10 %s: %w", name, origin, err)
		}
		if err := e.md.Stop(ctx, origin); err != nil {
			return rep, fmt.Errorf("pool %s deleted, but its RAID10 did not stop: %w", name, err)
		}
		rep.StoppedArray = origin
		disks := append(slices.Clone(arr.Devices), arr.Spares...)
		if err := e.md.ZeroSuperblocks(ctx, disks); err != nil {
			return rep, fmt.Errorf("pool %s deleted and its RAID10 stopped, but: %w", name, err)
		}
		rep.ArrayDisks = disks
	}
	e.log.Info("pool deleted", "pool", name, "uuid", l.UUID)
	return rep, nil
}
