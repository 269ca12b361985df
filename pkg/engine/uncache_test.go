// SPDX-License-Identifier: Apache-2.0

//go:build linux

package engine

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/tidecache/tidecache/pkg/pool"
	"github.com/tidecache/tidecache/pkg/stack"
)

// TestHostUncache uncaches a writeback volume on files and the fake
// kernel: drained with progress, the layout frees the write-cache slice
// and keeps the origin extent, the devices are the passthrough stack's,
// and a second run (as after a cut between the drain and the layout
// write) changes nothing.
func TestHostUncache(t *testing.T) {
	ctx := context.Background()
	hp := newHostPool(t)
	hp.drainsOnCleaner()
	before, gen := hp.recorded(t)
	if before.WriteCache == nil {
		t.Fatal("test volume has no write cache")
	}

	var drained []uint64
	if err := hp.e.UncacheVolume(ctx, "db", func(p Progress) { drained = append(drained, p.DirtyBlocks) }); err != nil {
		t.Fatal(err)
	}
	if len(drained) == 0 || drained[len(drained)-1] != 0 {
		t.Errorf("drain progress %v, want it to end at 0 dirty blocks", drained)
	}
	after, genAfter := hp.recorded(t)
	if after.WriteCache != nil || after.Mode != pool.ModePassthrough || after.Origin != before.Origin {
		t.Errorf("recorded after uncache: write cache %v, mode %s, origin %v (was %v)", after.WriteCache, after.Mode, after.Origin, before.Origin)
	}
	if genAfter != gen+2 { // passthrough, then the slices freed
		t.Errorf("generation %d -> %d, want two changes", gen, genAfter)
	}
	pt, err := stack.Build(after, hp.devs, hp.e.cfg.Tuning)
	if err != nil {
		t.Fatal(err)
	}
	assertResumed(t, hp.k, pt.Top().Name, pt.Top().Table)
	var want []string
	for _, d := range pt.Devices {
		want = append(want, d.Name)
	}
	slices.Sort(want)
	if got := hp.k.Devices(); !slices.Equal(got, want) {
		t.Errorf("devices after uncache %v, want the passthrough stack's %v", got, want)
	}

	if err := hp.e.UncacheVolume(ctx, "db", nil); err != nil {
		t.Fatalf("second uncache: %v", err)
	}
	if _, g := hp.recorded(t); g != genAfter {
		t.Errorf("second uncache wrote a new generation %d (was %d)", g, genAfter)
	}
	if err := hp.e.SetMode(ctx, "db", pool.ModeWriteback, nil); err == nil {
		t.Error("writeback after uncache: no error")
	}
	if err := hp.e.UncacheVolume(ctx, "nosuch", nil); !errors.Is(err, ErrVolumeNotFound) {
		t.Errorf("uncache of an unknown volume: %v", err)
	}
}
