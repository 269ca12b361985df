// SPDX-License-Identifier: Apache-2.0

package pool

import (
	"errors"
	"strings"
	"testing"
)

// ssdOnlyLayout returns a pool of two 1 GiB SSDs and no origin.
func ssdOnlyLayout(t *testing.T) *Layout {
	t.Helper()
	l, err := New("fast", "pool-uuid", Origin{}, []Member{
		{UUID: "m1", Path: "/dev/nvme0n1", SizeSectors: 1 * gib},
		{UUID: "m2", Path: "/dev/nvme1n1", SizeSectors: 1 * gib},
	})
	if err != nil {
		t.Fatalf("New without an origin: %v", err)
	}
	return l
}

// mdArray is a 4 GiB md array (plus 7 sectors, not a whole 4 KiB) with a
// filesystem on it, as a user would adopt it.
var mdArray = Adopted{Path: "/dev/md0", MDUUID: "3f2a9c41:8b7d6e50:1a2b3c4d:5e6f7a8b", SizeSectors: 4*gib + 7}

func TestAdoptOnSSDOnlyPool(t *testing.T) {
	l := ssdOnlyLayout(t)
	if l.HasOrigin() {
		t.Fatal("a pool made without an origin says it has one")
	}
	v := mustAdd(t, l, VolumeRequest{Name: "db", WriteCache: 256 << 20, Adopt: &mdArray})
	if v.Origin != (Extent{Offset: 0, Length: 4 * gib}) {
		t.Errorf("adopted volume's origin = %v, want the whole device rounded down to 4 KiB: [0+%d)", v.Origin, 4*gib)
	}
	if v.Adopted == nil || *v.Adopted != mdArray || v.Mode != ModeWriteback {
		t.Errorf("adopted volume: device %+v, mode %s; want %+v in writeback", v.Adopted, v.Mode, mdArray)
	}
	for _, re := range v.Extents() {
		if re.Member == "" {
			t.Errorf("Extents lists %s on the pool's origin; an adopted device is not the pool's", re)
		}
	}
	if origin, _ := l.Free(); origin != 0 {
		t.Errorf("free origin space of a pool without an origin = %d", origin)
	}
	// The layout keeps the device apart from the original request.
	v.Adopted.Path = "changed"
	if got, _ := l.Volume("db"); got.Adopted.Path != "/dev/md0" {
		t.Error("the returned volume shares its adopted device with the layout")
	}
	if c := l.Clone(); c.Volumes[0].Adopted == l.Volumes[0].Adopted {
		t.Error("Clone shares the adopted device")
	}
}

func TestAdoptRefusals(t *testing.T) {
	noID := Adopted{Path: "/dev/sdb", SizeSectors: gib}
	other := Adopted{Path: "/dev/md1", MDUUID: "11111111:22222222:33333333:44444444", SizeSectors: 8 * mib}
	tests := []struct {
		name   string
		layout func(*testing.T) *Layout
		req    VolumeRequest
		want   string
	}{
		{"carve from a pool without origin", ssdOnlyLayout, VolumeRequest{Name: "db", Size: 1 << 30},
			"has no origin (SSDs only): it caches existing devices (tidectl volume adopt)"},
		{"a size with a device", ssdOnlyLayout, VolumeRequest{Name: "db", Size: 1 << 30, Adopt: &mdArray}, "cached whole: give no size"},
		{"no stable identifier", ssdOnlyLayout, VolumeRequest{Name: "db", Adopt: &noID}, "no stable identifier"},
		{"too small", ssdOnlyLayout, VolumeRequest{Name: "db", Adopt: &other}, "below the minimum"},
		{"the pool's own origin", func(t *testing.T) *Layout {
			l, err := New("fast", "p", Origin{Path: "/dev/md/tc-data", MDUUID: mdArray.MDUUID, SizeSectors: 10 * gib},
				[]Member{{UUID: "m1", Path: "/dev/nvme0n1", SizeSectors: gib}})
			if err != nil {
				t.Fatal(err)
			}
			return l
		}, VolumeRequest{Name: "db", Adopt: &mdArray}, "is the pool's origin"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := tt.layout(t)
			gen := l.Generation
			_, err := l.AddVolume(tt.req, "uuid-db", now)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("AddVolume = %v, want an error containing %q", err, tt.want)
			}
			if l.Generation != gen || len(l.Volumes) != 0 {
				t.Errorf("a refused request changed the layout: generation %d, %d volumes", l.Generation, len(l.Volumes))
			}
		})
	}

	l := ssdOnlyLayout(t)
	mustAdd(t, l, VolumeRequest{Name: "db", WriteCache: 64 << 20, Adopt: &mdArray})
	renamed := mdArray
	renamed.Path = "/dev/md127"
	_, err := l.AddVolume(VolumeRequest{Name: "db2", WriteCache: 64 << 20, Adopt: &renamed}, "uuid-db2", now)
	if !errors.Is(err, ErrInvalidRequest) || !strings.Contains(err.Error(), `already adopted by volume "db"`) {
		t.Errorf("adopting a device twice, under another name = %v, want it refused naming db", err)
	}
}

func TestValidateAdopted(t *testing.T) {
	l := ssdOnlyLayout(t)
	mustAdd(t, l, VolumeRequest{Name: "db", WriteCache: 64 << 20, Adopt: &mdArray})
	tests := []struct {
		name   string
		change func(v *Volume)
		want   string
	}{
		{"origin not the whole device", func(v *Volume) { v.Origin.Length -= mib }, "mapped whole"},
		{"origin on a member", func(v *Volume) { v.Origin.Member = "m1" }, "mapped whole"},
		{"further origin extents", func(v *Volume) { v.OriginTail = []Extent{{Offset: ReservedSectors, Length: mib}} }, "no further origin extents"},
		{"identifier lost", func(v *Volume) { v.Adopted.MDUUID = "" }, "no stable identifier"},
		{"device of size 0", func(v *Volume) { v.Adopted.SizeSectors = 0 }, "size 0"},
		{"not adopted in a pool without origin", func(v *Volume) { v.Adopted = nil }, "must adopt a device"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := l.Clone()
			tt.change(&c.Volumes[0])
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate = %v, want an error containing %q", err, tt.want)
			}
		})
	}
	if err := l.Validate(); err != nil {
		t.Errorf("the unchanged layout: %v", err)
	}
}

func TestAdoptedSame(t *testing.T) {
	tests := []struct {
		name string
		a, b Adopted
		same bool
	}{
		{"same md array, other name", Adopted{Path: "/dev/md0", MDUUID: "u1"}, Adopted{Path: "/dev/md127", MDUUID: "u1"}, true},
		{"other md array, same name", Adopted{Path: "/dev/md0", MDUUID: "u1"}, Adopted{Path: "/dev/md0", MDUUID: "u2"}, false},
		{"partitions of one disk", Adopted{PartUUID: "p1", WWN: "w"}, Adopted{PartUUID: "p2", WWN: "w"}, false},
		{"same LUN", Adopted{WWN: "naa.5000c500a1b2c3d4"}, Adopted{WWN: "naa.5000c500a1b2c3d4", Serial: "Z1"}, true},
		{"serials only", Adopted{Serial: "S1"}, Adopted{Serial: "S1"}, true},
		{"nothing to compare", Adopted{Path: "/dev/sdb"}, Adopted{Path: "/dev/sdb"}, false},
	}
	for _, tt := range tests {
		if got := tt.a.Same(&tt.b); got != tt.same {
			t.Errorf("%s: Same = %v, want %v", tt.name, got, tt.same)
		}
		if got := tt.b.Same(&tt.a); got != tt.same {
			t.Errorf("%s: Same (reversed) = %v, want %v", tt.name, got, tt.same)
		}
	}
}

func TestAdoptedSectors(t *testing.T) {
	for _, tt := range []struct{ in, want uint64 }{{0, 0}, {7, 0}, {8, 8}, {4*gib + 7, 4 * gib}, {4*gib + 15, 4*gib + 8}} {
		if got := AdoptedSectors(tt.in); got != tt.want {
			t.Errorf("AdoptedSectors(%d) = %d, want %d", tt.in, got, tt.want)
		}
	}
}
