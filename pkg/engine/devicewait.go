// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/tidecache/tidecache/pkg/atomicfile"
	"github.com/tidecache/tidecache/pkg/pool"
)

// Boot assembly runs early, while the kernel and udev are still finding
// disks: a controller's driver loads, an NVMe namespace or an HDD behind a
// slow expander shows up seconds later. Assembling before a pool's disks
// are all there would refuse the pool, or start a mirrored write cache on
// one leg and an origin RAID degraded (each with a resync to follow), for
// a disk that was only late. Waiting for udev to finish with every device
// (systemd-udev-settle.service) is what systemd deprecates; tidecache
// knows which disks it needs and waits for those alone:
//
//   - the SSDs each pool's superblocks name, for every pool found;
//   - the pools this node had when its layouts were last written, recorded
//     in Config.ExpectedPoolsFile, for a pool none of whose disks is there
//     yet (the file is on the root file system, which is mounted by then);
//   - the disks of each pool's md origin, until the array runs or all of
//     them are there to start it;
//   - the devices of adopted volumes.
//
// The wait is bounded (tidecached assemble --wait-devices): a disk that is
// gone for good is then reported by assembly as before.

// ExpectedPoolsFileName is the file in /etc/tidecache that lists the
// pools boot assembly waits for.
const ExpectedPoolsFileName = "pools.json"

// expectedPool is a pool this node had when one of its layouts was last
// written here.
type expectedPool struct {
	Name string `json:"name"`
	UUID string `json:"uuid"`
	// SSDs are the members' UUIDs, and where each was last seen.
	SSDs []expectedSSD `json:"ssds"`
	// OriginMD is the md UUID of the pool's origin array, if it has one.
	OriginMD string `json:"origin_md_uuid,omitempty"`
}

type expectedSSD struct {
	UUID string `json:"uuid"`
	Path string `json:"last_seen_at"`
}

// expectedPools is the file's content.
type expectedPools struct {
	Comment string         `json:"comment"`
	Pools   []expectedPool `json:"pools"`
}

const expectedPoolsComment = "Written by tidecache at every pool change: the pools boot assembly " +
	"(tidecached assemble) waits for. A pool deleted elsewhere or whose disks are gone for good " +
	"can be removed from this list by hand."

func expectedFromLayout(l *pool.Layout) expectedPool {
	ep := expectedPool{Name: l.Name, UUID: l.UUID, OriginMD: l.Origin.MDUUID}
	for _, m := range l.Members {
		ep.SSDs = append(ep.SSDs, expectedSSD{UUID: m.UUID, Path: m.Path})
	}
	return ep
}

// ExpectedPoolsPath is the file that lists this node's pools for boot
// assembly ("" when none is kept).
func (e *Engine) ExpectedPoolsPath() string { return e.cfg.ExpectedPoolsFile }

// readExpected reads the expected pools; a missing file is an empty list.
func (e *Engine) readExpected() ([]expectedPool, error) {
	if e.cfg.ExpectedPoolsFile == "" {
		return nil, nil
	}
	b, err := os.ReadFile(e.cfg.ExpectedPoolsFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("expected pools: %w", err)
	}
	var f expectedPools
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("expected pools: %s: %w", e.cfg.ExpectedPoolsFile, err)
	}
	return f.Pools, nil
}

// updateExpected records l as expected, or forgets the pool uuid when l
// is nil. A failure is logged, not returned: the pool's change is made
// and recorded on its disks; only a boot that finds none of its disks in
// time would then not wait for them.
func (e *Engine) updateExpected(uuid string, l *pool.Layout) {
	if e.cfg.ExpectedPoolsFile == "" {
		return
	}
	if err := e.writeExpected(uuid, l); err != nil {
		e.log.Warn("list of pools for boot assembly not updated", "pool_uuid", uuid, "err", err)
	}
}

func (e *Engine) writeExpected(uuid string, l *pool.Layout) error {
	pools, err := e.readExpected()
	if err != nil {
		return err
	}
	pools = slices.DeleteFunc(pools, func(p expectedPool) bool { return p.UUID == uuid })
	if l != nil {
		pools = append(pools, expectedFromLayout(l))
	}
	slices.SortFunc(pools, func(a, b expectedPool) int { return strings.Compare(a.Name, b.Name) })
	b, err := json.MarshalIndent(expectedPools{Comment: expectedPoolsComment, Pools: pools}, "", "  ")
	if err != nil {
		return err
	}
	path := e.cfg.ExpectedPoolsFile
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.Write(path, append(b, '\n'), 0o644)
}

// DeviceWait is what WaitForDevices waited for and did not get.
type DeviceWait struct {
	// Missing names each device still missing, with its pool.
	Missing []string
	// Absent names the expected pools none of whose SSDs showed up:
	// Assemble does not see them at all, so it cannot report them.
	Absent []string
}

// WaitForDevices waits until the disks of every pool this node has (found
// or expected) are there, or timeout passes, and returns what it still
// lacks then (nothing: a zero DeviceWait). progress, if not nil, is told
// what it waits for every few seconds. It changes nothing; Assemble
// decides what to do with a pool that lacks a disk.
func (e *Engine) WaitForDevices(ctx context.Context, timeout time.Duration, progress func(waited time.Duration, missing []string)) (DeviceWait, error) {
	expected, err := e.readExpected()
	if err != nil {
		// A damaged list must not stop the boot: the disks found are
		// still waited for.
		e.log.Warn("list of pools for boot assembly unreadable; waiting for the disks found only", "err", err)
	}
	start := time.Now()
	var lastReport time.Time
	for {
		w, err := e.missingDevices(ctx, expected)
		if err != nil {
			return DeviceWait{}, err
		}
		waited := time.Since(start)
		if len(w.Missing) == 0 || waited >= timeout {
			if len(w.Missing) > 0 {
				e.log.Warn("devices still missing after the wait", "waited", waited.Round(time.Second), "missing", strings.Join(w.Missing, "; "))
			} else if waited > time.Second {
				e.log.Info("every pool device is there", "waited", waited.Round(time.Second))
			}
			return w, nil
		}
		if progress != nil && time.Since(lastReport) >= 5*time.Second {
			progress(waited, w.Missing)
			lastReport = time.Now()
		}
		select {
		case <-ctx.Done():
			return w, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// missingDevices lists, one entry per device, what the pools found on the
// node's disks or expected lack.
func (e *Engine) missingDevices(ctx context.Context, expected []expectedPool) (DeviceWait, error) {
	var w DeviceWait
	found, err := e.scan(ctx)
	if err != nil {
		return w, err
	}
	var missing []string
	for _, ep := range expected {
		if _, ok := found.Pools[ep.UUID]; ok {
			continue
		}
		var where []string
		for _, m := range ep.SSDs {
			where = append(where, m.Path)
		}
		w.Absent = append(w.Absent, ep.Name)
		missing = append(missing, fmt.Sprintf("pool %s: none of its SSDs (last seen at %s)", ep.Name, strings.Join(where, ", ")))
		if ep.OriginMD != "" {
			missing = append(missing, e.missingOrigin(ctx, ep.Name, ep.OriginMD)...)
		}
	}
	for _, p := range found.sortedPools() {
		l := p.Layout
		for _, uuid := range p.missing() {
			m, _ := l.Member(uuid) // missing() lists members of l
			missing = append(missing, fmt.Sprintf("pool %s: SSD %s (last seen at %s)", l.Name, uuid, m.Path))
		}
		if l.Origin.MDUUID != "" {
			missing = append(missing, e.missingOrigin(ctx, l.Name, l.Origin.MDUUID)...)
		}
		for _, v := range l.Volumes {
			if err, ok := p.AdoptedErr[v.UUID]; ok {
				missing = append(missing, fmt.Sprintf("pool %s: the device volume %s adopted (%v)", l.Name, v.Name, err))
			}
		}
	}
	w.Missing = missing
	return w, nil
}

// missingOrigin says what an md origin lacks, if anything.
func (e *Engine) missingOrigin(ctx context.Context, poolName, mdUUID string) []string {
	pr, err := e.md.Presence(ctx, mdUUID)
	switch {
	case err != nil:
		return []string{fmt.Sprintf("pool %s: origin md array %s (%v)", poolName, mdUUID, err)}
	case pr.Complete():
		return nil
	case pr.Want == 0:
		return []string{fmt.Sprintf("pool %s: origin md array %s: none of its disks", poolName, mdUUID)}
	default:
		return []string{fmt.Sprintf("pool %s: origin md array %s: %d of its %d disks", poolName, mdUUID, pr.Present, pr.Want)}
	}
}
