// SPDX-License-Identifier: Apache-2.0

//go:build linux

package engine

import (
	"context"
	"errors"
	"reflect"
	"sync/atomic"
	"testing"

	"github.com/tidecache/tidecache/pkg/dm"
	"github.com/tidecache/tidecache/pkg/stack"
)

// countingDisks counts the scans: every scan lists the block devices once.
type countingDisks struct {
	disks
	lists atomic.Int64
}

func (c *countingDisks) list() ([]string, error) {
	c.lists.Add(1)
	return c.disks.list()
}

// TestObserveScansOnce: one Observe reads the superblocks once and returns
// what Pools, Volume and CheckVolume (three scans) return.
func TestObserveScansOnce(t *testing.T) {
	ctx := context.Background()
	hp := newHostPool(t)
	cd := &countingDisks{disks: hp.e.disks}
	hp.e.disks = cd

	obs, err := hp.e.Observe(ctx, ObserveRequest{Drift: true})
	if err != nil {
		t.Fatal(err)
	}
	if n := cd.lists.Load(); n != 1 {
		t.Fatalf("Observe scanned %d times, want 1", n)
	}

	pools, err := hp.e.Pools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	vol, err := hp.e.Volume(ctx, "db")
	if err != nil {
		t.Fatal(err)
	}
	if err := hp.e.CheckVolume(ctx, "db"); err != nil {
		t.Fatalf("CheckVolume: %v", err)
	}
	if n := cd.lists.Load(); n != 4 {
		t.Fatalf("Pools, Volume and CheckVolume scanned %d times in all, want 3", n-1)
	}
	if !reflect.DeepEqual(obs.Pools, pools) {
		t.Errorf("Observe pools %+v, Pools %+v", obs.Pools, pools)
	}
	got, ok := obs.Volume("db")
	if !ok {
		t.Fatalf("volume db not observed: %+v", obs.Volumes)
	}
	if !reflect.DeepEqual(got.Info, vol) || got.Drift != nil {
		t.Errorf("Observe db = %+v (drift %v), Volume = %+v", got.Info, got.Drift, vol)
	}
	if p, ok := obs.Pool("tank"); !ok || !reflect.DeepEqual(p.Volumes, []string{"db"}) {
		t.Errorf("Observe pool tank = %+v, %v", p, ok)
	}
}

// TestObserveDriftAndFilter: drift is reported as CheckVolume reports it,
// only when asked, and only for the volumes named.
func TestObserveDriftAndFilter(t *testing.T) {
	ctx := context.Background()
	hp := newHostPool(t)
	top := stack.DeviceName("db", stack.RoleTop)
	if err := hp.e.DM().Suspend(ctx, top, dm.SuspendOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := hp.e.DM().Load(ctx, top, dm.Table{dm.LinearParams{Device: hp.origin}.Target(0, 64<<20/512)}); err != nil {
		t.Fatal(err)
	}
	if err := hp.e.DM().Resume(ctx, top); err != nil {
		t.Fatal(err)
	}
	want := hp.e.CheckVolume(ctx, "db")
	var de *DriftError
	if !errors.As(want, &de) {
		t.Fatalf("CheckVolume after a foreign load: %v, want drift", want)
	}

	obs, err := hp.e.Observe(ctx, ObserveRequest{Volumes: []string{"db"}, Drift: true})
	if err != nil {
		t.Fatal(err)
	}
	v, ok := obs.Volume("db")
	if !ok || v.Drift == nil || v.Drift.Error() != want.Error() {
		t.Fatalf("Observe drift %v, CheckVolume %v", v.Drift, want)
	}

	obs, err = hp.e.Observe(ctx, ObserveRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := obs.Volume("db"); v.Drift != nil {
		t.Errorf("drift %v reported without being asked for", v.Drift)
	}

	obs, err = hp.e.Observe(ctx, ObserveRequest{Volumes: []string{"other"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(obs.Volumes) != 0 || len(obs.Pools) != 1 {
		t.Errorf("Observe of another volume: volumes %+v, pools %d; want no volume, every pool", obs.Volumes, len(obs.Pools))
	}
}
