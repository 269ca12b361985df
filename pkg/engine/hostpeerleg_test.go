// SPDX-License-Identifier: Apache-2.0

//go:build linux

package engine

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/tidecache/tidecache/pkg/dm"
	"github.com/tidecache/tidecache/pkg/dm/dmtest"
	"github.com/tidecache/tidecache/pkg/stack"
)

// TestHostPeerLegHeld checks what the engine does with a peer leg whose
// errhold slices hold I/O: it reports the count, refuses any reload or
// removal in the volume (a suspend would wait for that I/O for ever),
// resubmits it on RetryPeerLeg, and FailPeerLeg lets both slices pass
// errors before the controller is deleted.
func TestHostPeerLegHeld(t *testing.T) {
	ctx := context.Background()
	e, k := newFakeDMEngine(t, 0)
	k.SetTarget(dm.ErrHoldTarget, dm.Version{Major: 1})
	k.SetTarget(dm.RaidTarget, dm.Version{Major: 1, Minor: 15})
	meta1, leg1 := stack.DeviceName(hostVolume, stack.RoleWriteMeta1), stack.DeviceName(hostVolume, stack.RoleWriteLeg1)
	wdata, wtier := stack.DeviceName(hostVolume, stack.RoleWriteData), stack.DeviceName(hostVolume, stack.RoleWriteTier)
	k.AddDevice(meta1, stack.DeviceUUID("u1", stack.RoleWriteMeta1), dm.Table{dm.ErrHoldParams{Device: "259:3"}.Target(0, 2048)})
	k.AddDevice(leg1, stack.DeviceUUID("u1", stack.RoleWriteLeg1), dm.Table{dm.ErrHoldParams{Device: "259:3", Offset: 2048}.Target(0, 2048)})
	raid := dm.Table{dm.Raid1Params{Legs: []dm.RaidLeg{{Meta: "253:1", Data: "253:2"}, {Meta: "253:3", Data: "253:4"}}}.Target(0, 2048)}
	k.AddDevice(wdata, stack.DeviceUUID("u1", stack.RoleWriteData), raid)
	k.AddDevice(wtier, stack.DeviceUUID("u1", stack.RoleWriteTier), dm.Table{dm.LinearParams{Device: "253:5"}.Target(0, 2048)})
	k.SetStatus(meta1, "hold 0 0 0 0 0")
	k.SetStatus(leg1, "hold 2 2 0 0 2")

	if held, err := e.PeerLegHeld(ctx, hostVolume); err != nil || held != 2 {
		t.Fatalf("PeerLegHeld = %d, %v; want 2", held, err)
	}
	if err := e.reload(ctx, wdata, raid, nil); !errors.Is(err, ErrPeerLegHeld) {
		t.Errorf("reload of %s while its peer leg holds I/O: %v, want ErrPeerLegHeld", wdata, err)
	}
	if err := e.removeDevice(ctx, wtier); !errors.Is(err, ErrPeerLegHeld) {
		t.Errorf("removal of %s while its peer leg holds I/O: %v, want ErrPeerLegHeld", wtier, err)
	}
	for _, dev := range []string{wdata, wtier} {
		if n := len(k.CallsOf(dev, dmtest.OpSuspend)) + len(k.CallsOf(dev, dmtest.OpRemove)); n != 0 {
			t.Errorf("%s suspended or removed %d time(s) while I/O was held below it", dev, n)
		}
	}

	leg := PeerLeg{Volume: hostVolume, Node: "b", NQN: "nqn.2026-11.io.tidecache:replica:r"}
	if err := e.RetryPeerLeg(ctx, leg); err != nil {
		t.Fatal(err)
	}
	if err := e.FailPeerLeg(ctx, leg); err != nil {
		t.Fatal(err)
	}
	for _, dev := range []string{meta1, leg1} {
		var msgs []string
		for _, c := range k.CallsOf(dev, dmtest.OpMessage) {
			msgs = append(msgs, c.Message)
		}
		if want := []string{dm.ErrHoldRetry, dm.ErrHoldFail}; !slices.Equal(msgs, want) {
			t.Errorf("messages to %s: %q, want %q", dev, msgs, want)
		}
	}

	// Nothing held: reload and removal go ahead.
	k.SetStatus(leg1, "pass 0 2 0 2 2")
	if err := e.reload(ctx, wdata, raid, nil); err != nil {
		t.Errorf("reload with nothing held: %v", err)
	}
}

// TestHostRefuseWhileHeldEveryRole: held I/O in a volume's peer leg
// stops a reload or removal of any of the volume's devices, the top
// included, and of no other volume's.
func TestHostRefuseWhileHeldEveryRole(t *testing.T) {
	ctx := context.Background()
	e, k := newFakeDMEngine(t, 0)
	k.SetTarget(dm.ErrHoldTarget, dm.Version{Major: 1})
	leg1 := stack.DeviceName(hostVolume, stack.RoleWriteLeg1)
	k.AddDevice(leg1, stack.DeviceUUID("u1", stack.RoleWriteLeg1), dm.Table{dm.ErrHoldParams{Device: "259:3"}.Target(0, 2048)})
	k.SetStatus(leg1, "hold 1 1 0 0 1")
	for _, r := range stack.Roles {
		if err := e.refuseWhileHeld(ctx, stack.DeviceName(hostVolume, r)); !errors.Is(err, ErrPeerLegHeld) {
			t.Errorf("role %s: %v, want ErrPeerLegHeld", r, err)
		}
	}
	if err := e.refuseWhileHeld(ctx, stack.DeviceName("other", stack.RoleWriteData)); err != nil {
		t.Errorf("another volume: %v, want nil", err)
	}
}
