// SPDX-License-Identifier: Apache-2.0

package testbed

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/tidecache/tidecache/pkg/cli"
)

// CreatePool runs `tidectl pool create` with an md RAID10 over the emulated
// HDDs and the bed's pool SSD. --assume-clean skips the initial resync: the
// images are new and all zeros, and a resync would compete with every
// measurement for the throttled disks.
func (b *Bed) CreatePool(ctx context.Context, name string) error {
	_, err := b.Run(ctx, "tidectl", "pool", "create", name,
		"--ssd", b.SSD(), "--raid10", strings.Join(b.HDDs(), ","), "--assume-clean")
	return err
}

// VolumeSpec is a `tidectl volume create`. Sizes use tidectl's syntax
// ("256M"); empty ones are left to tidectl's defaults.
type VolumeSpec struct {
	Name       string
	Size       string
	WriteCache string
	ReadCache  string
	Mode       string // writeback (default), writethrough, passthrough
}

// CreateVolume creates a volume and returns its device.
func (b *Bed) CreateVolume(ctx context.Context, s VolumeSpec) (string, error) {
	args := []string{"tidectl", "volume", "create", s.Name, "--size", s.Size}
	if s.WriteCache != "" {
		args = append(args, "--write-cache", s.WriteCache)
	}
	if s.ReadCache != "" {
		args = append(args, "--read-cache", s.ReadCache)
	}
	if s.Mode != "" {
		args = append(args, "--mode", s.Mode)
	}
	if _, err := b.Run(ctx, args...); err != nil {
		return "", err
	}
	v, err := b.Volume(ctx, s.Name)
	if err != nil {
		return "", err
	}
	if v.State != "active" {
		return "", fmt.Errorf("volume %s: state %q after create: %s", s.Name, v.State, v.Error)
	}
	return v.Device, nil
}

// Volume is `tidectl -o json volume show`, read back with tidectl's own
// output type (one schema in local and cluster mode, docs/cli.md).
type Volume = cli.Volume

// Volume reads a volume's layout and kernel state through tidectl.
func (b *Bed) Volume(ctx context.Context, name string) (Volume, error) {
	out, err := b.Run(ctx, "tidectl", "-o", "json", "volume", "show", name)
	if err != nil {
		return Volume{}, err
	}
	var v Volume
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		return Volume{}, fmt.Errorf("volume show %s: %w\n%s", name, err, out)
	}
	return v, nil
}

// Flush runs `tidectl volume flush` (every dirty block written back to the
// HDDs) and returns the volume's state afterwards.
func (b *Bed) Flush(ctx context.Context, name string) (Volume, error) {
	if _, err := b.Run(ctx, "tidectl", "volume", "flush", name); err != nil {
		return Volume{}, err
	}
	return b.Volume(ctx, name)
}

// WarmReadCache reads job's region until the volume's read tier (dm-cache,
// smq) has promoted it: smq promotes a block only after it has been hit
// repeatedly, so the first passes run at HDD speed. It runs job (a read
// job, typically deep-queue random reads) for step at a time and stops
// once the cache holds every block of the region, or promotions stopped
// growing, or budget is spent. It returns the volume's state at the end.
func (b *Bed) WarmReadCache(ctx context.Context, volume string, job Job, step, budget time.Duration) (Volume, error) {
	job.Runtime, job.Ramp = step, 0
	start := time.Now()
	var last Volume
	for pass := 1; ; pass++ {
		if _, err := b.Fio(ctx, job); err != nil {
			return last, fmt.Errorf("warm read cache of %s: %w", volume, err)
		}
		v, err := b.Volume(ctx, volume)
		if err != nil {
			return last, err
		}
		if v.ReadCache == nil {
			return v, fmt.Errorf("warm read cache of %s: the volume has no read tier", volume)
		}
		rc := v.ReadCache
		blockBytes := int64(rc.BlockSize) * 512
		want := uint64((job.Size + blockBytes - 1) / blockBytes)
		b.cfg.Progress.Step("  warm-up pass %d: read cache holds %d/%d blocks, %d promotions", pass, rc.Used, want, rc.Promotions)
		stalled := pass > 1 && last.ReadCache != nil && rc.Promotions == last.ReadCache.Promotions
		last = v
		if rc.Used >= min(want, rc.Total) || stalled || time.Since(start)+step > budget {
			return v, nil
		}
	}
}

// DiskStats are the I/O counters of a guest block device
// (/sys/block/<dev>/stat): completed requests, not bios.
type DiskStats struct {
	Reads, Writes, Flushes uint64
}

// Sub returns the counts between an earlier snapshot and s.
func (s DiskStats) Sub(earlier DiskStats) DiskStats {
	return DiskStats{Reads: s.Reads - earlier.Reads, Writes: s.Writes - earlier.Writes, Flushes: s.Flushes - earlier.Flushes}
}

// DiskStats reads the counters of a whole-disk device such as /dev/vde.
func (b *Bed) DiskStats(ctx context.Context, dev string) (DiskStats, error) {
	out, err := b.Run(ctx, "cat", "/sys/block/"+filepath.Base(dev)+"/stat")
	if err != nil {
		return DiskStats{}, err
	}
	return parseDiskStats(out)
}

// parseDiskStats reads the stat file format (Documentation/block/stat.rst):
// 11 fields up to Linux 4.18, 15 with discards, 17 with flushes (5.5+).
func parseDiskStats(s string) (DiskStats, error) {
	f := strings.Fields(s)
	if len(f) < 11 {
		return DiskStats{}, fmt.Errorf("block stat %q: %d fields, want at least 11", s, len(f))
	}
	n := make([]uint64, len(f))
	for i, v := range f {
		x, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return DiskStats{}, fmt.Errorf("block stat %q: field %d: %w", s, i+1, err)
		}
		n[i] = x
	}
	st := DiskStats{Reads: n[0], Writes: n[4]}
	if len(n) >= 17 {
		st.Flushes = n[15]
	}
	return st, nil
}
