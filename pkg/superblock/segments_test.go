// SPDX-License-Identifier: Apache-2.0

package superblock

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// grownLayout is testLayout after "db", followed by "logs", grew by 5 GiB:
// its second extent lies after "archive".
func grownLayout(t *testing.T) Superblock {
	t.Helper()
	l := testLayout(t)
	if err := l.GrowVolume("db", 25*gib); err != nil {
		t.Fatal(err)
	}
	db, _ := l.Volume("db")
	if len(db.OriginTail) != 1 {
		t.Fatalf("db after growing: extents %v, want two", db.OriginExtents())
	}
	return ssdSB(l)
}

func headerVersion(img []byte) uint32 { return binary.LittleEndian.Uint32(img[offVersion:]) }

// TestFormatFollowsLayout checks Encode writes format 2 only for a layout
// with a volume of several origin extents, and that both round-trip.
func TestFormatFollowsLayout(t *testing.T) {
	for _, tc := range []struct {
		name string
		sb   Superblock
		want uint32
	}{
		{"one extent per volume", ssdSB(testLayout(t)), 1},
		{"a volume grown past its neighbour", grownLayout(t), 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img := mustEncode(t, tc.sb)
			if got := headerVersion(img); got != tc.want {
				t.Errorf("format version %d, want %d", got, tc.want)
			}
			if has := bytes.Contains(payloadOf(img), []byte(`"origin_tail"`)); has != (tc.want == 2) {
				t.Errorf("payload has origin_tail: %t, want %t", has, tc.want == 2)
			}
			got, err := Decode(img)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.sb) {
				t.Errorf("round trip differs:\n got %+v\nwant %+v", got.Layout.Volumes, tc.sb.Layout.Volumes)
			}
		})
	}
}

// TestFormat1RefusesOriginTail checks a slot that says version 1 but holds
// a volume of several extents is corrupt: a version 1 writer never made
// it, and a version 1 reader would map the volume on its first extent.
func TestFormat1RefusesOriginTail(t *testing.T) {
	img := mustEncode(t, grownLayout(t))
	gen := binary.LittleEndian.Uint64(img[offGeneration:])
	_, err := Decode(rawImage(func(h []byte) { binary.LittleEndian.PutUint32(h[offVersion:], 1); setGen(gen)(h) }, payloadOf(img)))
	var ce *CorruptError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "needs format version 2") {
		t.Fatalf("Decode = %v, want a *CorruptError saying the payload needs format 2", err)
	}
}

// TestUpgradeToFormat2 is the upgrade of an existing pool: a device holds
// a format 1 superblock written by the older release (the testdata
// payload); this release reads it, grows a volume past its neighbour and
// writes generation+1 in format 2 into the other slot, leaving the format 1
// copy untouched. A torn format 2 write falls back to it.
func TestUpgradeToFormat2(t *testing.T) {
	old, err := Decode(rawImage(setGen(5), oldPayload(t)))
	if err != nil {
		t.Fatal(err)
	}
	d := newDev(devSize)
	copy(d.b, rawImage(setGen(5), oldPayload(t)))
	if res := mustRead(t, d); res.Slot != "A" || headerVersion(d.b) != 1 {
		t.Fatalf("before: slot %s, format %d", res.Slot, headerVersion(d.b))
	}

	next := old.Layout.Clone()
	first := next.Volumes[0]
	if err := next.GrowVolume(first.Name, (first.SizeSectors()+next.Origin.SizeSectors/4)*512); err != nil {
		t.Fatal(err)
	}
	grown, _ := next.Volume(first.Name)
	if len(grown.OriginTail) == 0 {
		t.Fatalf("volume %s grew in place (%v): the test needs one followed by another", first.Name, grown.OriginExtents())
	}
	mustWrite(t, d, Superblock{Role: old.Role, DeviceUUID: old.DeviceUUID, Layout: *next})
	res := mustRead(t, d)
	if res.Slot != "B" || headerVersion(d.b[SlotSize:]) != 2 || res.Layout.Generation != 6 {
		t.Fatalf("after growing: slot %s, format %d, generation %d; want B, 2, 6", res.Slot, headerVersion(d.b[SlotSize:]), res.Layout.Generation)
	}
	if v, _ := res.Layout.Volume(first.Name); !reflect.DeepEqual(v.OriginExtents(), grown.OriginExtents()) {
		t.Errorf("read back extents %v, want %v", v.OriginExtents(), grown.OriginExtents())
	}
	if !bytes.Equal(payloadOf(d.b), oldPayload(t)) || headerVersion(d.b) != 1 {
		t.Error("the format 1 copy in slot A changed")
	}

	d.b[SlotSize+HeaderSize+10] ^= 0xff // a torn format 2 write
	res = mustRead(t, d)
	if res.Slot != "A" || res.Layout.Generation != 5 || len(res.Warnings) != 1 {
		t.Errorf("torn format 2 slot: read slot %s generation %d warnings %v; want the format 1 copy, generation 5, one warning", res.Slot, res.Layout.Generation, res.Warnings)
	}
}
