// SPDX-License-Identifier: Apache-2.0

//go:build linux

package engine

import (
	"context"
	"slices"
	"testing"

	"github.com/tidecache/tidecache/pkg/dm"
	"github.com/tidecache/tidecache/pkg/dm/dmtest"
	"github.com/tidecache/tidecache/pkg/pool"
	"github.com/tidecache/tidecache/pkg/stack"
)

// TestHostRefreshMirror checks when repair gives a failed leg back to
// dm-raid: only when dm-raid reports a leg dead ("D") whose devices the
// stack has (its SSD is on the node), by loading the same table again;
// never for a healthy, resyncing or one-legged mirror.
func TestHostRefreshMirror(t *testing.T) {
	ctx := context.Background()
	v := pool.Volume{Name: hostVolume, UUID: "u1", Mode: pool.ModeWriteback, BlockSize: 4096,
		Origin:     pool.Extent{Offset: 8192, Length: 2048},
		WriteCache: &pool.Extent{Member: "a", Offset: 8192, Length: 2048},
		WriteMirror: &pool.Mirror{
			Meta:    pool.Extent{Member: "a", Offset: 10240, Length: 2048},
			Leg:     pool.Extent{Member: "b", Offset: 8192, Length: 2048},
			LegMeta: pool.Extent{Member: "b", Offset: 10240, Length: 2048},
		},
	}
	both := stack.Devices{Origin: "/dev/md/tc", Members: map[string]string{"a": "/dev/vde", "b": "/dev/vdf"}}
	oneLeg := stack.Devices{Origin: "/dev/md/tc", Members: map[string]string{"a": "/dev/vde"}}
	cases := []struct {
		name    string
		devs    stack.Devices
		status  string
		reload  bool
		running bool
		// ranOn builds the running table, when not from devs: a leg left
		// out then ("- -") whose device is here now.
		ranOn *stack.Devices
	}{
		{"leg 1 dead, SSD present: reloaded", both, "raid1 2 AD 2048/2048 idle 0 0 -", true, true, nil},
		{"leg 0 dead, SSD present: reloaded", both, "raid1 2 DA 2048/2048 idle 0 0 -", true, true, nil},
		{"both in sync: left alone", both, "raid1 2 AA 2048/2048 idle 0 0 -", false, true, nil},
		{"rebuilding: left alone", both, "raid1 2 Aa 1024/2048 recover 0 0 -", false, true, nil},
		{"leg's SSD gone: left alone", oneLeg, "raid1 2 AD 2048/2048 idle 0 0 -", false, true, nil},
		{"mirror not running", both, "", false, false, nil},
		{"leg 1 left out, its device here now: reloaded with it", both, "raid1 2 A- 2048/2048 idle 0 0 -", true, true, &oneLeg},
		{"leg 1 left out, still absent: left alone", oneLeg, "raid1 2 A- 2048/2048 idle 0 0 -", false, true, &oneLeg},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e, k := newFakeDMEngine(t, 0)
			k.SetTarget(dm.RaidTarget, dm.Version{Major: 1, Minor: 15})
			st, err := stack.Build(v, c.devs, stack.DefaultTuning())
			if err != nil {
				t.Fatal(err)
			}
			raid, _ := st.Find(stack.RoleWriteData)
			if c.running {
				running := raid
				if c.ranOn != nil {
					old, err := stack.Build(v, *c.ranOn, stack.DefaultTuning())
					if err != nil {
						t.Fatal(err)
					}
					running, _ = old.Find(stack.RoleWriteData)
				}
				k.AddDevice(raid.Name, raid.UUID, running.Table)
				k.SetStatus(raid.Name, c.status)
			}
			reloaded, err := e.refreshMirror(ctx, v, st)
			if err != nil || reloaded != c.reload {
				t.Fatalf("refreshMirror = %v, %v; want %v", reloaded, err, c.reload)
			}
			loads := len(k.CallsOf(raid.Name, dmtest.OpLoad))
			if want := map[bool]int{true: 1, false: 0}[c.reload]; loads != want {
				t.Errorf("%d table loads of %s, want %d", loads, raid.Name, want)
			}
			if c.reload {
				assertResumed(t, k, raid.Name, raid.Table)
			}
		})
	}
}

// TestHostMirrorStatus checks what volume show and the metrics get from a
// mirror's dm-raid status: copies, degraded, and a resync after creation
// counting both legs (every write goes to both).
func TestHostMirrorStatus(t *testing.T) {
	for _, c := range []struct {
		status   string
		copies   int
		degraded bool
	}{
		{"raid1 2 AA 2048/2048 idle 0 0 -", 2, false},
		{"raid1 2 aa 512/2048 resync 0 0 -", 2, false},
		{"raid1 2 AD 2048/2048 idle 0 0 -", 1, true},
		{"raid1 2 Aa 512/2048 recover 0 0 -", 1, true},
	} {
		e, k := newFakeDMEngine(t, 0)
		name := stack.DeviceName(hostVolume, stack.RoleWriteData)
		k.AddDevice(name, stack.DeviceUUID("u1", stack.RoleWriteData), dm.Table{dm.Raid1Params{Legs: []dm.RaidLeg{{Meta: "253:1", Data: "253:2"}, {Meta: "253:3", Data: "253:4"}}}.Target(0, 2048)})
		k.SetStatus(name, c.status)
		ms, ok, err := e.mirrorStatus(context.Background(), hostVolume)
		if err != nil || !ok || ms.Copies != c.copies || ms.Degraded != c.degraded {
			t.Errorf("status %q: mirror %+v, %v, %v; want %d copies, degraded %v", c.status, ms, ok, err, c.copies, c.degraded)
		}
	}
}

// TestOutOfSync: the legs recorded as lacking writes are the failed,
// absent and rebuilding ones; a resync after creation leaves none behind.
func TestOutOfSync(t *testing.T) {
	for _, c := range []struct {
		status string
		want   []int
	}{
		{"raid1 2 AA 2048/2048 idle 0 0 -", nil},
		{"raid1 2 aa 512/2048 resync 0 0 -", nil},
		{"raid1 2 AD 2048/2048 idle 0 0 -", []int{1}},
		{"raid1 2 DA 2048/2048 idle 0 0 -", []int{0}},
		{"raid1 2 A- 2048/2048 idle 0 0 -", []int{1}},
		{"raid1 2 Aa 512/2048 recover 0 0 -", []int{1}},
	} {
		rs, err := dm.ParseRaidStatus(c.status)
		if err != nil {
			t.Fatal(err)
		}
		if got := outOfSync(rs); !slices.Equal(got, c.want) {
			t.Errorf("outOfSync(%q) = %v, want %v", c.status, got, c.want)
		}
	}
}
