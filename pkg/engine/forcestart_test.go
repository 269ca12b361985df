// SPDX-License-Identifier: Apache-2.0

//go:build linux

package engine

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/tidecache/tidecache/pkg/pool"
	"github.com/tidecache/tidecache/pkg/stack"
)

// TestHostForceStart loses the only SSD of a pool whose volume ran in
// writeback: assembly refuses the pool, force-start refuses it too until
// the loss is accepted, then the volume comes up on the origin in
// passthrough with the loss recorded, and the layout (on the origin now)
// assembles again on its own.
func TestHostForceStart(t *testing.T) {
	ctx := context.Background()
	hp := newHostPool(t)
	if _, err := hp.e.ForceStartPool(ctx, "tank", nil); err == nil || !strings.Contains(err.Error(), "has every SSD") {
		t.Fatalf("force-start of a complete pool: %v", err)
	}
	// The SSD dies with the node: the devices are gone, the SSD too.
	if err := hp.e.removeStack(ctx, hp.vol); err != nil {
		t.Fatal(err)
	}
	hp.e.disks = fileDisks{paths: []string{hp.origin}}
	if _, err := hp.e.Assemble(ctx); !errors.Is(err, ErrAssembleIncomplete) {
		t.Fatalf("assemble without the SSD: %v, want the pool refused", err)
	}

	_, genBefore := hp.recorded(t)
	_, err := hp.e.ForceStartPool(ctx, "tank", nil)
	if !errors.Is(err, pool.ErrDirtyCacheLost) || !strings.Contains(err.Error(), "--accept-data-loss db") {
		t.Fatalf("force-start without accepting the loss: %v", err)
	}
	if _, g := hp.recorded(t); g != genBefore {
		t.Fatalf("a refused force-start wrote generation %d (was %d)", g, genBefore)
	}

	rep, err := hp.e.ForceStartPool(ctx, "tank", []string{"db"})
	if err != nil {
		t.Fatalf("force-start accepting the loss: %v", err)
	}
	if len(rep.GivenUp) != 1 || len(rep.Volumes) != 1 || !rep.Volumes[0].DataLoss || rep.Volumes[0].Mode != pool.ModePassthrough {
		t.Errorf("report %+v", rep)
	}
	if len(rep.Assembly.Volumes) != 1 || rep.Assembly.Volumes[0].Error != "" || rep.Assembly.Error != "" {
		t.Errorf("assembly after force-start: %+v", rep.Assembly)
	}
	if _, ok := hp.k.Device(stack.DeviceName("db", stack.RoleTop)); !ok {
		t.Error("volume db not running after force-start")
	}
	info, err := hp.e.Volume(ctx, "db")
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode != pool.ModePassthrough || info.WriteCacheBytes != 0 || !strings.Contains(info.DataLoss, "force-started") {
		t.Errorf("volume after force-start: mode %s, write cache %d, data loss %q", info.Mode, info.WriteCacheBytes, info.DataLoss)
	}
	// A plain assembly now starts the pool from its origin alone.
	if _, err := hp.e.Assemble(ctx); err != nil {
		t.Errorf("assemble after force-start: %v", err)
	}
}
