// SPDX-License-Identifier: Apache-2.0

package superblock

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidecache/tidecache/pkg/pool"
)

const devSize = 4 << 20 // the reserved head of a device

func mustWrite(t *testing.T, d *memDev, sb Superblock) {
	t.Helper()
	if err := Write(d, noSync, sb); err != nil {
		t.Fatalf("Write(generation %d): %v", sb.Layout.Generation, err)
	}
}

func mustRead(t *testing.T, d *memDev) ReadResult {
	t.Helper()
	res, err := ReadDetailed(d)
	if err != nil {
		t.Fatalf("ReadDetailed: %v", err)
	}
	return res
}

// place writes an image straight into a slot, bypassing Write.
func place(d *memDev, slot string, img []byte) { copy(d.b[SlotOffset(slot):], img) }

func TestWriteAlternatesSlots(t *testing.T) {
	d := newDev(devSize)
	base := ssdSB(testLayout(t))
	for _, step := range []struct {
		gen  uint64
		slot string
	}{{1, "A"}, {2, "B"}, {3, "A"}, {4, "B"}, {9, "A"}} {
		mustWrite(t, d, withGen(base, step.gen))
		res := mustRead(t, d)
		if res.Slot != step.slot || res.Layout.Generation != step.gen || len(res.Warnings) != 0 {
			t.Errorf("after writing generation %d: read slot %s generation %d warnings %v; want slot %s",
				step.gen, res.Slot, res.Layout.Generation, res.Warnings, step.slot)
		}
		if !reflect.DeepEqual(res.Superblock, withGen(base, step.gen)) {
			t.Errorf("generation %d reads back different", step.gen)
		}
	}
	// The older generation is still intact in the other slot.
	if sb, err := Decode(d.b[SlotSize:]); err != nil || sb.Layout.Generation != 4 {
		t.Errorf("slot B = generation %d, %v; want 4", sb.Layout.Generation, err)
	}
}

func TestReadPicksHighestGeneration(t *testing.T) {
	base := ssdSB(testLayout(t))
	tests := []struct {
		a, b     uint64 // 0 = empty slot
		wantSlot string
		wantGen  uint64
	}{
		{5, 4, "A", 5},
		{4, 5, "B", 5},
		{0, 3, "B", 3},
		{3, 0, "A", 3},
		{7, 7, "A", 7},
	}
	for _, tt := range tests {
		d := newDev(devSize)
		if tt.a > 0 {
			place(d, "A", mustEncode(t, withGen(base, tt.a)))
		}
		if tt.b > 0 {
			place(d, "B", mustEncode(t, withGen(base, tt.b)))
		}
		res := mustRead(t, d)
		if res.Slot != tt.wantSlot || res.Layout.Generation != tt.wantGen {
			t.Errorf("A=%d B=%d: read slot %s generation %d, want %s %d", tt.a, tt.b, res.Slot, res.Layout.Generation, tt.wantSlot, tt.wantGen)
		}
		sb, err := Read(d)
		if err != nil || !reflect.DeepEqual(sb, res.Superblock) {
			t.Errorf("Read differs from ReadDetailed: %v", err)
		}
	}
}

func TestTornWriteKeepsPreviousGeneration(t *testing.T) {
	base := ssdSB(testLayout(t))
	img := mustEncode(t, withGen(base, 3))
	n := HeaderSize + len(payloadOf(img))
	tests := []struct {
		name        string
		tear        func(p []byte) (from, n int)
		wantWarning bool
	}{
		{"nothing reached the disk", func(p []byte) (int, int) { return 0, 0 }, false},
		{"only the magic", func(p []byte) (int, int) { return 0, 8 }, false},
		{"new header, old payload", func(p []byte) (int, int) { return 0, HeaderSize }, true},
		{"header and half the payload", func(p []byte) (int, int) { return 0, n / 2 }, true},
		{"first block only", func(p []byte) (int, int) { return 0, 512 }, true},
		{"all but the last 64 bytes", func(p []byte) (int, int) { return 0, n - 64 }, true},
		{"payload without header", func(p []byte) (int, int) { return HeaderSize, len(p) - HeaderSize }, true},
		{"second sector only", func(p []byte) (int, int) { return 512, 512 }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newDev(devSize)
			// Every generation has a different payload of about the same
			// length, so any mix of old and new bytes in a slot shows.
			g1 := withGen(base, 1)
			slices.Reverse(g1.Layout.Volumes)
			mustWrite(t, d, g1) // slot A
			g2 := withGen(base, 2)
			g2.Layout.Volumes = g2.Layout.Volumes[:2]
			mustWrite(t, d, g2) // slot B

			d.tear = tt.tear
			if err := Write(d, noSync, withGen(base, 3)); err == nil {
				t.Fatal("torn Write returned nil")
			}
			d.tear = nil

			res := mustRead(t, d)
			if res.Slot != "B" || res.Layout.Generation != 2 || !reflect.DeepEqual(res.Superblock, g2) {
				t.Fatalf("after a torn write: slot %s generation %d, want slot B generation 2", res.Slot, res.Layout.Generation)
			}
			var ce *CorruptError
			if got := len(res.Warnings) == 1 && errors.As(res.Warnings[0], &ce) && ce.Slot == "A"; got != tt.wantWarning {
				t.Errorf("warnings = %v, want a *CorruptError for slot A: %v", res.Warnings, tt.wantWarning)
			}

			// Retrying the write repairs slot A.
			mustWrite(t, d, withGen(base, 3))
			res = mustRead(t, d)
			if res.Slot != "A" || res.Layout.Generation != 3 || len(res.Warnings) != 0 {
				t.Errorf("after the retry: slot %s generation %d warnings %v", res.Slot, res.Layout.Generation, res.Warnings)
			}
		})
	}
}

func TestNoSuperblock(t *testing.T) {
	junk := newDev(devSize)
	for i := range junk.b {
		junk.b[i] = byte(i*7 + 3)
	}
	for name, d := range map[string]*memDev{
		"zeroed":      newDev(devSize),
		"junk":        junk,
		"tiny device": newDev(1000),
		"empty":       newDev(0),
	} {
		if _, err := Read(d); !errors.Is(err, ErrNoSuperblock) {
			t.Errorf("%s: Read = %v, want ErrNoSuperblock", name, err)
		}
	}
}

func TestShortDeviceWithSlotA(t *testing.T) {
	img := mustEncode(t, ssdSB(testLayout(t)))
	d := newDev(len(img))
	place(d, "A", img)
	if res := mustRead(t, d); res.Slot != "A" {
		t.Errorf("slot = %s", res.Slot)
	}
}

func TestReadIOError(t *testing.T) {
	d := newDev(devSize)
	d.readErr = errors.New("EIO")
	_, err := Read(d)
	if err == nil || errors.Is(err, ErrNoSuperblock) || !strings.Contains(err.Error(), "read superblock slot A: EIO") {
		t.Errorf("Read = %v, want the I/O error", err)
	}
}

func TestBothSlotsCorrupt(t *testing.T) {
	base := ssdSB(testLayout(t))
	d := newDev(devSize)
	mustWrite(t, d, withGen(base, 1))
	mustWrite(t, d, withGen(base, 2))
	d.b[HeaderSize+5] ^= 1
	d.b[SlotSize+offGeneration] ^= 1
	_, err := Read(d)
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.Slot != "A" {
		t.Fatalf("Read = %v, want *CorruptError for slot A", err)
	}
	for _, want := range []string{"slot A: payload CRC32C mismatch", "slot B: header CRC32C mismatch"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	// Write refuses too: the caller has to decide (wipe, restore).
	if err := Write(d, noSync, withGen(base, 3)); !errors.As(err, &ce) {
		t.Errorf("Write over corrupt slots = %v, want *CorruptError", err)
	}
}

func TestOneSlotCorruptOtherEmpty(t *testing.T) {
	d := newDev(devSize)
	place(d, "B", mustEncode(t, ssdSB(testLayout(t))))
	d.b[SlotSize+HeaderSize] ^= 1
	var ce *CorruptError
	if _, err := Read(d); !errors.As(err, &ce) || ce.Slot != "B" {
		t.Errorf("Read = %v, want *CorruptError for slot B", err)
	}
}

func TestNewerVersionRefused(t *testing.T) {
	base := ssdSB(testLayout(t))
	d := newDev(devSize)
	mustWrite(t, d, withGen(base, 5)) // A
	v7 := rawImage(func(h []byte) {
		binary.LittleEndian.PutUint32(h[offVersion:], 7)
		binary.LittleEndian.PutUint64(h[offGeneration:], 6)
	}, []byte(`{"a future":"payload"}`))
	place(d, "B", v7)

	_, err := Read(d)
	var ve *VersionError
	if !errors.As(err, &ve) || ve.Version != 7 || ve.Slot != "B" {
		t.Fatalf("Read = %v, want *VersionError 7 in slot B", err)
	}
	if want := fmt.Sprintf("superblock format version 7 is newer than this tidecache (%d) (slot B)", FormatVersion); err.Error() != want {
		t.Errorf("error = %q, want %q", err, want)
	}
	if err := Write(d, noSync, withGen(base, 6)); !errors.As(err, &ve) {
		t.Errorf("Write = %v, want *VersionError", err)
	}
	if !bytes.Equal(d.b[SlotSize:SlotSize+len(v7)], v7) {
		t.Error("Write touched the newer slot")
	}
}

func TestSlotsDisagree(t *testing.T) {
	l := testLayout(t)
	other := l.Clone()
	other.UUID = "another-pool"
	tests := []struct {
		name string
		a, b Superblock
		want string
	}{
		{"other pool", ssdSB(l), Superblock{Role: RoleSSD, DeviceUUID: "member-1", Layout: *other}, `A holds pool "fast" (5d6a0c8e-pool)`},
		{"other device", ssdSB(l), Superblock{Role: RoleSSD, DeviceUUID: "member-2", Layout: *l}, "device member-2"},
		{"same generation, other contents", ssdSB(l), func() Superblock {
			sb := ssdSB(l)
			sb.Layout.Volumes[0].Mode = pool.ModeWritethrough
			return sb
		}(), "both slots hold generation 4 with different contents"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newDev(devSize)
			place(d, "A", mustEncode(t, tt.a))
			place(d, "B", mustEncode(t, tt.b))
			_, err := Read(d)
			var ce *CorruptError
			if !errors.As(err, &ce) || ce.Slot != "A+B" || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Read = %v, want *CorruptError A+B mentioning %q", err, tt.want)
			}
		})
	}
}

func TestWriteRefuses(t *testing.T) {
	l := testLayout(t)
	base := ssdSB(l)
	other := l.Clone()
	other.UUID = "another-pool"
	changed := withGen(base, 4)
	changed.Layout.Volumes[0].Mode = pool.ModeWritethrough

	tests := []struct {
		name    string
		sb      Superblock
		wantErr error
		want    string
	}{
		{"another pool", Superblock{Role: RoleSSD, DeviceUUID: "member-1", Layout: *other}, ErrDeviceMismatch, `holds pool "fast" (5d6a0c8e-pool) as ssd device member-1`},
		{"another device", Superblock{Role: RoleSSD, DeviceUUID: "member-2", Layout: *l}, ErrDeviceMismatch, "as ssd device member-2"},
		{"another role", Superblock{Role: RoleOrigin, DeviceUUID: l.UUID, Layout: *l}, ErrDeviceMismatch, "as origin device"},
		{"older generation", withGen(base, 3), ErrStaleGeneration, "asked to write generation 3, slot A holds 4"},
		{"same generation, other contents", changed, ErrStaleGeneration, "generation 4 is already in slot A with different contents"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newDev(devSize)
			mustWrite(t, d, base)
			before := bytes.Clone(d.b)
			err := Write(d, noSync, tt.sb)
			if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Write = %v, want %v mentioning %q", err, tt.wantErr, tt.want)
			}
			if !bytes.Equal(d.b, before) {
				t.Error("a refused Write changed the device")
			}
		})
	}
}

func TestWriteSameGenerationIsNoop(t *testing.T) {
	d := newDev(devSize)
	sb := ssdSB(testLayout(t))
	mustWrite(t, d, sb)
	writes := d.writes
	mustWrite(t, d, sb)
	if d.writes != writes {
		t.Errorf("rewriting the same generation wrote %d times", d.writes-writes)
	}
}

func TestWriteSyncAndVerify(t *testing.T) {
	sb := ssdSB(testLayout(t))
	if err := Write(newDev(devSize), nil, sb); err == nil {
		t.Error("Write with a nil sync succeeded")
	}
	calls := 0
	d := newDev(devSize)
	if err := Write(d, func() error { calls++; return nil }, sb); err != nil || calls != 1 {
		t.Errorf("Write: %v, sync called %d times", err, calls)
	}
	err := Write(newDev(devSize), func() error { return errors.New("EIO on flush") }, sb)
	if err == nil || !strings.Contains(err.Error(), "sync superblock slot A: EIO on flush") {
		t.Errorf("Write with a failing sync = %v", err)
	}
	// A device that silently drops writes is caught by the read-back.
	lossy := newDev(devSize)
	lossy.tear = func(p []byte) (int, int) { return 0, 0 }
	wrap := &silentDev{lossy}
	if err := Write(wrap, noSync, sb); err == nil || !strings.Contains(err.Error(), "reads back different") {
		t.Errorf("Write to a lossy device = %v", err)
	}
	if err := Write(newDev(devSize), noSync, Superblock{Layout: *testLayout(t)}); err == nil {
		t.Error("Write of an unencodable superblock succeeded")
	}
}

// silentDev swallows the error of a torn write, like a cache that lies.
type silentDev struct{ *memDev }

func (s *silentDev) WriteAt(p []byte, off int64) (int, error) {
	_, _ = s.memDev.WriteAt(p, off) // dropping the error is the point of this device
	return len(p), nil
}

func TestWriteClearsSlotTail(t *testing.T) {
	d := newDev(devSize)
	big := ssdSB(testLayout(t))
	for i := range 40 { // grow the payload past one 4 KiB block
		name := fmt.Sprintf("extra-%02d", i)
		if _, err := big.Layout.AddVolume(pool.VolumeRequest{Name: name, Size: 16 << 20}, "uuid-"+name, time.Unix(0, 0)); err != nil {
			t.Fatal(err)
		}
	}
	mustWrite(t, d, big) // A
	mustWrite(t, d, withGen(big, big.Layout.Generation+1))
	small := ssdSB(testLayout(t))
	small.Layout.Generation = big.Layout.Generation + 2
	small.Layout.Volumes = nil
	mustWrite(t, d, small) // A again, much shorter
	img := mustEncode(t, small)
	if len(mustEncode(t, big)) <= len(img) {
		t.Fatal("test setup: big image is not longer")
	}
	if !bytes.Equal(d.b[:len(img)], img) || !allZero(d.b[len(img):SlotSize]) {
		t.Error("slot A keeps bytes of the older, longer image")
	}
}

func TestWipe(t *testing.T) {
	d := newDev(devSize)
	mustWrite(t, d, ssdSB(testLayout(t)))
	mustWrite(t, d, withGen(ssdSB(testLayout(t)), 5))
	calls := 0
	if err := Wipe(d, func() error { calls++; return nil }); err != nil || calls != 1 {
		t.Fatalf("Wipe: %v, sync called %d times", err, calls)
	}
	if _, err := Read(d); !errors.Is(err, ErrNoSuperblock) {
		t.Errorf("Read after Wipe = %v, want ErrNoSuperblock", err)
	}
	if !allZero(d.b[:2*SlotSize]) {
		t.Error("Wipe left bytes in the slots")
	}
	if err := Wipe(d, nil); err == nil {
		t.Error("Wipe with a nil sync succeeded")
	}
	// After a wipe the device can join another pool.
	other := testLayout(t)
	other.UUID = "another-pool"
	mustWrite(t, d, Superblock{Role: RoleSSD, DeviceUUID: "member-1", Layout: *other})
}

func TestOriginSuperblock(t *testing.T) {
	l := testLayout(t)
	d := newDev(devSize)
	sb := Superblock{Role: RoleOrigin, DeviceUUID: l.UUID, Layout: *l}
	mustWrite(t, d, sb)
	if res := mustRead(t, d); !reflect.DeepEqual(res.Superblock, sb) {
		t.Errorf("origin superblock reads back different")
	}
}
