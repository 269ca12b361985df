// SPDX-License-Identifier: Apache-2.0

//go:build linux

package engine

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidecache/tidecache/pkg/dm"
	"github.com/tidecache/tidecache/pkg/dm/dmtest"
	"github.com/tidecache/tidecache/pkg/pool"
	"github.com/tidecache/tidecache/pkg/stack"
)

// TestHostRepairRecordsAbsentLegFirst starts a stopped volume whose write
// cache is mirrored on two SSDs while one of them is gone: the mirror runs
// on the other leg, and the leg left out misses every write from then on.
// The layout must say so before the mirror exists, as boot assembly does:
// recorded only after the start, a crash in between would leave a record
// that calls the absent leg whole, and a later start with the other SSD
// gone would serve that stale leg as current. The mirror's creation is
// failed here, as the crash would end it: the record must be on disk.
func TestHostRepairRecordsAbsentLegFirst(t *testing.T) {
	for _, tc := range []struct {
		name  string
		crash bool
	}{
		{"the start fails at the mirror", true},
		{"the start goes through", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			e, k := newFakeDMEngine(t, 10*time.Second)
			k.SetTarget(dm.RaidTarget, dm.Version{Major: 1, Minor: 15})
			dir := t.TempDir()
			origin, ssd0, ssd1 := filepath.Join(dir, "origin"), filepath.Join(dir, "ssd0"), filepath.Join(dir, "ssd1")
			sparseFiles(t, map[string]int64{origin: 256 << 20, ssd0: 128 << 20, ssd1: 128 << 20})
			m0, m1 := newUUID(), newUUID()
			l, err := pool.New("tank", newUUID(), pool.Origin{Path: origin, SizeSectors: 256 << 20 / pool.SectorSize}, []pool.Member{
				{UUID: m0, Path: ssd0, SizeSectors: 128 << 20 / pool.SectorSize},
				{UUID: m1, Path: ssd1, SizeSectors: 128 << 20 / pool.SectorSize},
			})
			if err != nil {
				t.Fatal(err)
			}
			v, err := l.AddVolume(pool.VolumeRequest{Name: "db", Size: 64 << 20, WriteCache: 32 << 20, Protect: pool.ProtectLocal}, newUUID(), time.Now())
			if err != nil {
				t.Fatal(err)
			}
			e.disks = fileDisks{paths: []string{origin, ssd0, ssd1}}
			ps := &poolState{Layout: l, Members: map[string]string{m0: ssd0, m1: ssd1}, Generations: map[string]uint64{}}
			if err := e.writeLayout(ps, origin, l); err != nil {
				t.Fatal(err)
			}
			// Leg 1's SSD is gone; the volume is not running.
			gone := ssd1
			if v.WriteMirror.Leg.Member == m0 {
				gone = ssd0
			}
			e.disks = fileDisks{paths: slices.DeleteFunc([]string{origin, ssd0, ssd1}, func(p string) bool { return p == gone })}
			wdata := stack.DeviceName("db", stack.RoleWriteData)
			k.SetStatusFunc(wdata, func(dmtest.StatusQuery) (string, error) { return "raid1 2 AD 65536/65536 idle 0 0 -", nil })
			if tc.crash {
				k.Fail(dmtest.Failure{Op: dmtest.OpLoad, Device: wdata, Errno: 5})
			}
			_, err = e.RepairVolume(ctx, "db")
			switch {
			case tc.crash && err == nil:
				t.Fatal("RepairVolume went through a failed load of the mirror")
			case !tc.crash && err != nil:
				t.Fatalf("RepairVolume: %v", err)
			}
			if raid, ok := k.Device(wdata); !tc.crash && (!ok || !strings.HasSuffix(raid.Live.String(), "- -")) {
				t.Fatalf("mirror %+v, want it running without leg 1", raid)
			}
			found, err := e.scan(ctx)
			if err != nil {
				t.Fatal(err)
			}
			rv, ok := found.Pools[l.UUID].Layout.Volume("db")
			if !ok {
				t.Fatal("volume db not in the recorded layout")
			}
			if !slices.Equal(rv.WriteMirror.OutOfSync, []int{1}) {
				t.Fatalf("recorded out-of-sync legs %v, want [1]: the leg left out of the mirror must be recorded behind before the mirror runs", rv.WriteMirror.OutOfSync)
			}
		})
	}
}

// TestHostAssembleDefersCacheOnPeers boots a node without SSDs: its
// volume in writeback has its write cache on two other nodes, which boot
// assembly does not reach. The volume is left to the daemon, with the
// reason, and nothing of it runs: above all not its origin extent alone,
// which lacks the writes the cache holds. A volume of that pool in
// passthrough has nothing on the peers and starts on the HDDs.
func TestHostAssembleDefersCacheOnPeers(t *testing.T) {
	ctx := context.Background()
	e, k := newFakeDMEngine(t, 10*time.Second)
	k.SetTarget(dm.RaidTarget, dm.Version{Major: 1, Minor: 15})
	origin := filepath.Join(t.TempDir(), "origin")
	sparseFiles(t, map[string]int64{origin: 256 << 20})
	l, err := pool.New("hdd", newUUID(), pool.Origin{Path: origin, SizeSectors: 256 << 20 / pool.SectorSize}, nil)
	if err != nil {
		t.Fatal(err)
	}
	leg := func(node, uuid string) *pool.RemoteLeg {
		return &pool.RemoteLeg{Node: node, NQN: "nqn.2026-11.io.tidecache:replica:" + uuid, HostNQN: "nqn.2026-11.io.tidecache:node:a",
			Addr: "10.0.0.2", Port: 4420, UUID: uuid}
	}
	for _, req := range []pool.VolumeRequest{
		{Name: "db", Size: 64 << 20, WriteCache: 32 << 20, Protect: pool.ProtectPeer, Peer: leg("b", newUUID()), Peer0: leg("c", newUUID())},
		{Name: "plain", Size: 64 << 20},
	} {
		if _, err := l.AddVolume(req, newUUID(), time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	e.disks = fileDisks{paths: []string{origin}}
	if err := e.writeLayout(&poolState{Layout: l, Members: map[string]string{}, Generations: map[string]uint64{}}, origin, l); err != nil {
		t.Fatal(err)
	}
	rep, err := e.Assemble(ctx)
	if err != nil {
		t.Fatalf("Assemble: %v", err)
	}
	if len(rep.Pools) != 1 || len(rep.Pools[0].Volumes) != 2 {
		t.Fatalf("report %+v, want one pool of two volumes", rep)
	}
	for _, vr := range rep.Pools[0].Volumes {
		switch vr.Name {
		case "db":
			if !strings.Contains(vr.Deferred, "write cache on nodes c and b") || !strings.Contains(vr.Deferred, "never on the HDDs alone") || vr.Error != "" || vr.Device != "" {
				t.Errorf("db: %+v, want it left to the daemon with the reason", vr)
			}
		case "plain":
			if vr.Deferred != "" || vr.Error != "" || vr.Device == "" {
				t.Errorf("plain: %+v, want it assembled", vr)
			}
		}
	}
	for _, name := range k.Devices() {
		if strings.HasPrefix(name, stack.NamePrefix+"db") {
			t.Errorf("device %s of db runs after assembly", name)
		}
	}
	// The daemon's first look at it: drift (its stack missing), which it
	// repairs by attaching the legs; not an error it would retry for ever.
	obs, err := e.Observe(ctx, ObserveRequest{Volumes: []string{"db"}, Drift: true})
	if err != nil {
		t.Fatal(err)
	}
	vo, ok := obs.Volume("db")
	var drift *DriftError
	if !ok || !errors.As(vo.Drift, &drift) || !strings.Contains(drift.Got, "not built") {
		t.Fatalf("drift of db after assembly: %v, want its stack reported missing", vo.Drift)
	}
}
