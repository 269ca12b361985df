// SPDX-License-Identifier: Apache-2.0

package pool

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

const (
	mib = 2048 // sectors
	gib = 1024 * mib
)

var now = time.Unix(1700000000, 0)

// testLayout returns an empty pool: a 10 GiB origin and two 1 GiB SSDs.
func testLayout(t *testing.T) *Layout {
	t.Helper()
	l, err := New("fast", "pool-uuid", Origin{Path: "/dev/md/tc-data", SizeSectors: 10 * gib}, []Member{
		{UUID: "m1", Path: "/dev/nvme0n1", SizeSectors: 1 * gib},
		{UUID: "m2", Path: "/dev/nvme1n1", SizeSectors: 1 * gib},
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return l
}

func mustAdd(t *testing.T, l *Layout, req VolumeRequest) Volume {
	t.Helper()
	v, err := l.AddVolume(req, "uuid-"+req.Name, now)
	if err != nil {
		t.Fatalf("AddVolume(%+v): %v", req, err)
	}
	return v
}

func TestNew(t *testing.T) {
	l := testLayout(t)
	if l.Generation != 1 || len(l.Volumes) != 0 {
		t.Errorf("new layout: generation %d, %d volumes", l.Generation, len(l.Volumes))
	}
	_, err := New("fast", "p", Origin{Path: "/dev/md0", SizeSectors: 10 * gib}, []Member{{UUID: "m1", Path: "/dev/nvme0n1", SizeSectors: 32 * mib}})
	if !errors.Is(err, ErrTooSmall) || !strings.Contains(err.Error(), "/dev/nvme0n1") {
		t.Errorf("New with a 32 MiB SSD = %v, want ErrTooSmall naming /dev/nvme0n1", err)
	}
	_, err = New("Fast", "p", Origin{Path: "/dev/md0", SizeSectors: 10 * gib}, nil)
	if !errors.Is(err, ErrInvalidName) {
		t.Errorf("New with name Fast = %v, want ErrInvalidName", err)
	}
}

func TestAddVolumeFirstFitAndReuse(t *testing.T) {
	l := testLayout(t)
	a := mustAdd(t, l, VolumeRequest{Name: "a", Size: 1 << 30})
	b := mustAdd(t, l, VolumeRequest{Name: "b", Size: 2 << 30})
	c := mustAdd(t, l, VolumeRequest{Name: "c", Size: 1 << 30})
	want := map[string]Extent{
		"a": {Offset: 4 * mib, Length: gib},
		"b": {Offset: 4*mib + gib, Length: 2 * gib},
		"c": {Offset: 4*mib + 3*gib, Length: gib},
	}
	for _, v := range []Volume{a, b, c} {
		if v.Origin != want[v.Name] {
			t.Errorf("volume %s origin = %v, want %v", v.Name, v.Origin, want[v.Name])
		}
	}
	if l.Generation != 4 {
		t.Errorf("generation = %d after three adds, want 4", l.Generation)
	}

	if err := l.RemoveVolume("b"); err != nil {
		t.Fatal(err)
	}
	if l.Generation != 5 {
		t.Errorf("generation = %d after remove, want 5", l.Generation)
	}
	// d fits in b's old hole, e (2 GiB) no longer does and goes after c.
	d := mustAdd(t, l, VolumeRequest{Name: "d", Size: 1 << 30})
	if d.Origin.Offset != b.Origin.Offset {
		t.Errorf("d offset = %d, want b's old offset %d", d.Origin.Offset, b.Origin.Offset)
	}
	e := mustAdd(t, l, VolumeRequest{Name: "e", Size: 2 << 30})
	if e.Origin.Offset != c.Origin.End() {
		t.Errorf("e offset = %d, want right after c at %d", e.Origin.Offset, c.Origin.End())
	}
	// the remaining 1 GiB hole where b's second half was is used next.
	f := mustAdd(t, l, VolumeRequest{Name: "f", Size: 512 << 20})
	if f.Origin.Offset != d.Origin.End() {
		t.Errorf("f offset = %d, want right after d at %d", f.Origin.Offset, d.Origin.End())
	}
	if err := l.Validate(); err != nil {
		t.Errorf("layout invalid after adds and removes: %v", err)
	}
}

func TestAddVolumeRoundsToAlignment(t *testing.T) {
	l := testLayout(t)
	v := mustAdd(t, l, VolumeRequest{Name: "odd", Size: 16<<20 + 1, WriteCache: 16<<20 + 4095, ReadCache: 20<<20 - 1})
	for _, re := range v.Extents() {
		if re.Offset%Alignment != 0 || re.Length%Alignment != 0 {
			t.Errorf("%s %v not aligned", re.Role, re.Extent)
		}
	}
	if v.Origin.Length != 17*mib || v.WriteCache.Length != 17*mib || v.ReadCache.Length != 20*mib || v.ReadMeta.Length != 8*mib {
		t.Errorf("lengths: origin %d write %d read %d meta %d sectors; want 17, 17, 20, 8 MiB",
			v.Origin.Length, v.WriteCache.Length, v.ReadCache.Length, v.ReadMeta.Length)
	}
	if v.BlockSize != DefaultBlockSize || v.Mode != ModeWriteback || v.CreatedUnix != now.Unix() {
		t.Errorf("defaults: block size %d, mode %s, created %d", v.BlockSize, v.Mode, v.CreatedUnix)
	}
}

func TestAddVolumeSpreadsOverMembers(t *testing.T) {
	l := testLayout(t)
	v1 := mustAdd(t, l, VolumeRequest{Name: "v1", Size: 1 << 30, WriteCache: 256 << 20, ReadCache: 256 << 20})
	// Equal members: the write slice takes the first, the read tier the
	// one with more free space left, i.e. the second.
	if *v1.WriteCache != (Extent{Member: "m1", Offset: 4 * mib, Length: 256 * mib}) {
		t.Errorf("v1 write cache = %v", *v1.WriteCache)
	}
	if *v1.ReadCache != (Extent{Member: "m2", Offset: 4 * mib, Length: 256 * mib}) {
		t.Errorf("v1 read cache = %v", *v1.ReadCache)
	}
	if *v1.ReadMeta != (Extent{Member: "m2", Offset: 260 * mib, Length: 8 * mib}) {
		t.Errorf("v1 read meta = %v, want next to the read cache on m2", *v1.ReadMeta)
	}
	// m1 has 764 MiB free, m2 756 MiB: v2 goes to m1, then v3 to m2.
	v2 := mustAdd(t, l, VolumeRequest{Name: "v2", Size: 1 << 30, WriteCache: 256 << 20})
	if v2.WriteCache.Member != "m1" || v2.WriteCache.Offset != 260*mib {
		t.Errorf("v2 write cache = %v, want m1 at 260 MiB", *v2.WriteCache)
	}
	v3 := mustAdd(t, l, VolumeRequest{Name: "v3", Size: 1 << 30, WriteCache: 100 << 20})
	if v3.WriteCache.Member != "m2" || v3.WriteCache.Offset != 268*mib {
		t.Errorf("v3 write cache = %v, want m2 at 268 MiB", *v3.WriteCache)
	}
	_, free := l.Free()
	if free["m1"] != 1020*mib-512*mib || free["m2"] != 1020*mib-364*mib {
		t.Errorf("free = %v sectors", free)
	}
}

func TestAddVolumeFallsBackToMemberWithRoom(t *testing.T) {
	l := testLayout(t)
	// Fragment m1 so it has the most free space but no 600 MiB hole.
	mustAdd(t, l, VolumeRequest{Name: "x", Size: 16 << 20, WriteCache: 400 << 20})
	mustAdd(t, l, VolumeRequest{Name: "y", Size: 16 << 20, WriteCache: 500 << 20}) // m2
	mustAdd(t, l, VolumeRequest{Name: "z", Size: 16 << 20, WriteCache: 16 << 20})  // m1 at 404 MiB
	if err := l.RemoveVolume("x"); err != nil {
		t.Fatal(err)
	}
	// m1: holes of 400 and 600 MiB -> 1000 free, m2: 520 free.
	v := mustAdd(t, l, VolumeRequest{Name: "big", Size: 16 << 20, WriteCache: 500 << 20})
	if v.WriteCache.Member != "m1" || v.WriteCache.Offset != 420*mib {
		t.Errorf("big write cache = %v, want m1 at 420 MiB (first hole large enough)", *v.WriteCache)
	}
}

func TestAddVolumeNoSpace(t *testing.T) {
	tests := []struct {
		name     string
		req      VolumeRequest
		wantText []string
	}{
		{"origin", VolumeRequest{Name: "huge", Size: 20 << 30},
			[]string{"/dev/md/tc-data", `volume "huge" needs 20 GiB`, "10220 MiB free"}},
		{"write cache", VolumeRequest{Name: "w", Size: 1 << 30, WriteCache: 2 << 30},
			[]string{"write cache", `volume "w"`, "needs 2 GiB", "1020 MiB on SSD /dev/nvme0n1", "2040 MiB free on 2 members"}},
		{"read cache", VolumeRequest{Name: "r", Size: 1 << 30, WriteCache: 512 << 20, ReadCache: 1 << 30},
			[]string{"read cache", "needs 1 GiB", "1020 MiB on SSD /dev/nvme1n1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := testLayout(t)
			mustAdd(t, l, VolumeRequest{Name: "keep", Size: 16 << 20})
			before := l.Clone()
			_, err := l.AddVolume(tt.req, "uuid-x", now)
			if !errors.Is(err, ErrNoSpace) {
				t.Fatalf("AddVolume = %v, want ErrNoSpace", err)
			}
			for _, s := range tt.wantText {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
			if !reflect.DeepEqual(l, before) {
				t.Errorf("layout changed on error:\n got %+v\nwant %+v", l, before)
			}
		})
	}
}

func TestAddVolumeNoMembers(t *testing.T) {
	l, err := New("slow", "p", Origin{SizeSectors: 10 * gib}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.AddVolume(VolumeRequest{Name: "v", Size: 1 << 30, ReadCache: 1 << 30}, "u", now)
	if !errors.Is(err, ErrInvalidRequest) || !strings.Contains(err.Error(), `pool "slow" has no SSDs`) {
		t.Errorf("AddVolume without members = %v", err)
	}
	v := mustAdd(t, l, VolumeRequest{Name: "plain", Size: 1 << 30})
	if v.Mode != ModePassthrough || v.WriteCache != nil || v.HasReadTier() {
		t.Errorf("plain volume = %+v", v)
	}
}

func TestAddVolumeRejects(t *testing.T) {
	tests := []struct {
		name    string
		req     VolumeRequest
		uuid    string
		wantErr error
		text    string
	}{
		{"exists", VolumeRequest{Name: "db", Size: 1 << 30}, "u2", ErrVolumeExists, `"db"`},
		{"bad name", VolumeRequest{Name: "DB", Size: 1 << 30}, "u2", ErrInvalidName, "only a-z"},
		{"empty uuid", VolumeRequest{Name: "v", Size: 1 << 30}, "", ErrInvalidRequest, "empty uuid"},
		{"duplicate uuid", VolumeRequest{Name: "v", Size: 1 << 30}, "uuid-db", ErrInvalidRequest, `already belongs to volume "db"`},
		{"bad uuid", VolumeRequest{Name: "v", Size: 1 << 30}, "uuid/1", ErrInvalidRequest, `uuid "uuid/1": only`},
		{"small volume", VolumeRequest{Name: "v", Size: 15 << 20}, "u2", ErrInvalidRequest, "size 15 MiB is below the minimum of 16 MiB"},
		{"small write cache", VolumeRequest{Name: "v", Size: 1 << 30, WriteCache: 1 << 20}, "u2", ErrInvalidRequest, "write cache 1 MiB"},
		{"small read cache", VolumeRequest{Name: "v", Size: 1 << 30, ReadCache: 1 << 20}, "u2", ErrInvalidRequest, "read cache 1 MiB"},
		{"bad block size", VolumeRequest{Name: "v", Size: 1 << 30, WriteCache: 1 << 30, BlockSize: 1000}, "u2", ErrInvalidRequest, "block size 1000"},
		{"block size too big", VolumeRequest{Name: "v", Size: 1 << 30, WriteCache: 1 << 30, BlockSize: 8192}, "u2", ErrInvalidRequest, "block size 8192"},
		{"bad mode", VolumeRequest{Name: "v", Size: 1 << 30, Mode: "fast"}, "u2", ErrInvalidMode, `"fast"`},
		{"writeback without cache", VolumeRequest{Name: "v", Size: 1 << 30, ReadCache: 1 << 30, Mode: ModeWriteback}, "u2", ErrNoWriteCache, `volume "v"`},
		{"read block size without read cache", VolumeRequest{Name: "v", Size: 1 << 30, WriteCache: 64 << 20, ReadBlockSize: 128 << 10}, "u2", ErrInvalidRequest,
			"read block size 128 KiB given without a read cache"},
		{"read block size not a power of two", VolumeRequest{Name: "v", Size: 1 << 30, ReadCache: 64 << 20, ReadBlockSize: 96 << 10}, "u2", ErrInvalidRequest,
			"read block size 96 KiB: want a power of two from 32 KiB to 1 MiB"},
		{"read block size too small", VolumeRequest{Name: "v", Size: 1 << 30, ReadCache: 64 << 20, ReadBlockSize: 16 << 10}, "u2", ErrInvalidRequest,
			"read block size 16 KiB"},
		{"read block size too big", VolumeRequest{Name: "v", Size: 1 << 30, ReadCache: 64 << 20, ReadBlockSize: 2 << 20}, "u2", ErrInvalidRequest,
			"read block size 2 MiB"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := testLayout(t)
			mustAdd(t, l, VolumeRequest{Name: "db", Size: 1 << 30})
			before := l.Clone()
			_, err := l.AddVolume(tt.req, tt.uuid, now)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("AddVolume = %v, want %v", err, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.text) {
				t.Errorf("error %q does not mention %q", err, tt.text)
			}
			if !reflect.DeepEqual(l, before) {
				t.Error("layout changed on error")
			}
		})
	}
}

func TestModes(t *testing.T) {
	l := testLayout(t)
	mustAdd(t, l, VolumeRequest{Name: "wb", Size: 1 << 30, WriteCache: 64 << 20})
	mustAdd(t, l, VolumeRequest{Name: "rd", Size: 1 << 30, ReadCache: 64 << 20})
	mustAdd(t, l, VolumeRequest{Name: "pt", Size: 1 << 30, WriteCache: 64 << 20, Mode: ModePassthrough})
	for name, want := range map[string]Mode{"wb": ModeWriteback, "rd": ModeWritethrough, "pt": ModePassthrough} {
		if v, _ := l.Volume(name); v.Mode != want {
			t.Errorf("volume %s mode = %s, want %s", name, v.Mode, want)
		}
	}

	gen := l.Generation
	if err := l.SetMode("wb", ModeWritethrough); err != nil {
		t.Fatal(err)
	}
	if v, _ := l.Volume("wb"); v.Mode != ModeWritethrough || l.Generation != gen+1 {
		t.Errorf("after SetMode: mode %s generation %d", v.Mode, l.Generation)
	}
	if err := l.SetMode("wb", ModeWritethrough); err != nil || l.Generation != gen+1 {
		t.Errorf("no-op SetMode: %v, generation %d, want %d", err, l.Generation, gen+1)
	}
	if err := l.SetMode("pt", ModeWriteback); err != nil {
		t.Errorf("SetMode(pt, writeback) = %v", err)
	}

	err := l.SetMode("rd", ModeWriteback)
	if !errors.Is(err, ErrNoWriteCache) || !strings.Contains(err.Error(), `"rd"`) {
		t.Errorf("SetMode(rd, writeback) = %v, want ErrNoWriteCache naming rd", err)
	}
	if err := l.SetMode("nope", ModePassthrough); !errors.Is(err, ErrVolumeNotFound) {
		t.Errorf("SetMode(nope) = %v, want ErrVolumeNotFound", err)
	}
	if err := l.SetMode("rd", "turbo"); !errors.Is(err, ErrInvalidMode) {
		t.Errorf("SetMode(turbo) = %v, want ErrInvalidMode", err)
	}
	if err := l.RemoveVolume("nope"); !errors.Is(err, ErrVolumeNotFound) {
		t.Errorf("RemoveVolume(nope) = %v, want ErrVolumeNotFound", err)
	}
}

func TestCloneIsDeep(t *testing.T) {
	l := testLayout(t)
	mustAdd(t, l, VolumeRequest{Name: "v", Size: 1 << 30, WriteCache: 64 << 20, ReadCache: 64 << 20})
	c := l.Clone()
	if !reflect.DeepEqual(c, l) {
		t.Fatal("clone differs")
	}
	c.Volumes[0].WriteCache.Offset = 0
	c.Volumes[0].ReadMeta.Length = 1
	c.Members[0].Path = "/dev/sdz"
	c.Volumes[0].Name = "w"
	if err := l.Validate(); err != nil || l.Volumes[0].Name != "v" || l.Members[0].Path != "/dev/nvme0n1" {
		t.Errorf("changing the clone changed the original: %v", err)
	}
}

func TestFree(t *testing.T) {
	l := testLayout(t)
	origin, members := l.Free()
	if origin != 10*gib-4*mib || members["m1"] != gib-4*mib || members["m2"] != gib-4*mib {
		t.Fatalf("empty pool free: origin %d, members %v", origin, members)
	}
	mustAdd(t, l, VolumeRequest{Name: "v", Size: 1 << 30, WriteCache: 64 << 20, ReadCache: 64 << 20})
	origin, members = l.Free()
	if origin != 9*gib-4*mib || members["m1"] != gib-68*mib || members["m2"] != gib-76*mib {
		t.Errorf("free: origin %d, members %v", origin, members)
	}
	if got := l.FreeExtents("m2"); len(got) != 1 || got[0] != (Extent{Member: "m2", Offset: 76 * mib, Length: gib - 76*mib}) {
		t.Errorf("FreeExtents(m2) = %v", got)
	}
	if got := l.FreeExtents("nope"); got != nil {
		t.Errorf("FreeExtents(unknown) = %v", got)
	}
}

func TestFreeUnalignedDeviceEnd(t *testing.T) {
	l, err := New("p", "p", Origin{SizeSectors: 64*mib + 1000}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if origin, _ := l.Free(); origin != 60*mib {
		t.Errorf("free = %d, want the tail after the last MiB boundary left out", origin)
	}
}

func TestValidate(t *testing.T) {
	base := func(t *testing.T) *Layout {
		l := testLayout(t)
		mustAdd(t, l, VolumeRequest{Name: "a", Size: 1 << 30, WriteCache: 64 << 20, ReadCache: 64 << 20})
		mustAdd(t, l, VolumeRequest{Name: "b", Size: 1 << 30, WriteCache: 64 << 20})
		if err := l.Validate(); err != nil {
			t.Fatalf("base layout invalid: %v", err)
		}
		return l
	}
	ext := func(m string, off, length uint64) *Extent { return &Extent{Member: m, Offset: off, Length: length} }
	tests := []struct {
		name   string
		mutate func(l *Layout)
		want   string
	}{
		{"origin overlap", func(l *Layout) { l.Volumes[1].Origin.Offset = l.Volumes[0].Origin.Offset + gib/2 },
			`volume "b" origin extent origin [1056768+2097152) overlaps volume "a" origin extent`},
		{"slice overlap on member", func(l *Layout) { l.Volumes[1].WriteCache = ext("m1", 8*mib, 64*mib) },
			`overlaps volume "a" write cache member m1`},
		{"overlap inside a long extent", func(l *Layout) {
			l.Volumes[0].Origin.Length = 4 * gib
			l.Volumes = append(l.Volumes, Volume{Name: "c", UUID: "uc", Mode: ModePassthrough, BlockSize: 4096,
				Origin: Extent{Offset: 3 * gib, Length: gib}})
		}, `volume "c" origin extent origin [6291456+2097152) overlaps volume "a"`},
		{"read meta over read cache", func(l *Layout) { *l.Volumes[0].ReadMeta = *l.Volumes[0].ReadCache },
			`volume "a" read meta member m2 [8192+131072) overlaps volume "a" read cache`},
		{"beyond origin", func(l *Layout) { l.Volumes[1].Origin.Offset = 10 * gib },
			`volume "b": origin extent origin [20971520+2097152): ends beyond the device (20971520 sectors)`},
		{"beyond member", func(l *Layout) { l.Volumes[1].WriteCache.Length = gib },
			`volume "b": write cache member m1 [139264+2097152): ends beyond the device`},
		{"offset overflow", func(l *Layout) { l.Volumes[1].Origin.Offset = 1<<64 - Alignment },
			"ends beyond the device"},
		{"unaligned offset", func(l *Layout) { l.Volumes[1].Origin.Offset += 8 }, `volume "b": origin extent origin [2105352+2097152): not aligned to 2048 sectors`},
		{"unaligned length", func(l *Layout) { l.Volumes[0].ReadCache.Length-- }, `volume "a": read cache member m2 [8192+131071): not aligned`},
		{"in reserved area", func(l *Layout) { l.Volumes[0].WriteCache.Offset = 2048 }, `volume "a": write cache member m1 [2048+131072): starts inside the reserved first 8192 sectors`},
		{"empty extent", func(l *Layout) { l.Volumes[0].Origin.Length = 0 }, `volume "a": origin extent origin [8192+0): empty`},
		{"duplicate name", func(l *Layout) { l.Volumes[1].Name = "a" }, `volume "a": duplicate volume name`},
		{"invalid volume name", func(l *Layout) { l.Volumes[1].Name = "B" }, `invalid volume name "B"`},
		{"invalid pool name", func(l *Layout) { l.Name = "" }, `invalid pool name ""`},
		{"duplicate volume uuid", func(l *Layout) { l.Volumes[1].UUID = l.Volumes[0].UUID }, `volume "b": uuid uuid-a is also the uuid of volume "a"`},
		{"empty volume uuid", func(l *Layout) { l.Volumes[1].UUID = "" }, `volume "b": empty uuid`},
		{"empty pool uuid", func(l *Layout) { l.UUID = "" }, `pool "fast": empty uuid`},
		{"uuid with a space", func(l *Layout) { l.Volumes[0].UUID = "a b" }, `volume "a": uuid "a b": only A-Z`},
		{"uuid too long", func(l *Layout) { l.Members[0].UUID = strings.Repeat("u", 65) }, "longer than 64 characters"},
		{"bad md uuid", func(l *Layout) { l.Origin.MDUUID = "x/y" }, `origin md uuid "x/y"`},
		{"control char in path", func(l *Layout) { l.Members[1].Path = "/dev/nvme\n1" }, `member 1: path "/dev/nvme\n1" contains control characters`},
		{"invalid utf-8 path", func(l *Layout) { l.Origin.Path = "/dev/\xff" }, "not valid UTF-8"},
		{"unknown member", func(l *Layout) { l.Volumes[1].WriteCache.Member = "m9" }, `volume "b": write cache member m9 [139264+131072): unknown member`},
		{"duplicate member uuid", func(l *Layout) { l.Members[1].UUID = "m1" }, "duplicate member uuid m1"},
		{"member uuid is pool uuid", func(l *Layout) { l.Members[1].UUID = l.UUID }, "is the pool's uuid"},
		{"empty member uuid", func(l *Layout) { l.Members[0].UUID = "" }, "member 0 (/dev/nvme0n1): empty uuid"},
		{"duplicate path", func(l *Layout) { l.Members[1].Path = "/dev/md/tc-data" }, "path /dev/md/tc-data is also the origin"},
		{"bad mode", func(l *Layout) { l.Volumes[1].Mode = "fast" }, `volume "b": invalid mode "fast"`},
		{"writeback without write cache", func(l *Layout) { l.Volumes[1].WriteCache = nil }, `volume "b": mode writeback: volume has no write cache slice`},
		{"bad block size", func(l *Layout) { l.Volumes[1].BlockSize = 0 }, `volume "b": block size 0`},
		{"half a read tier", func(l *Layout) { l.Volumes[0].ReadMeta = nil }, `volume "a": read tier needs both`},
		{"bad read block size", func(l *Layout) { l.Volumes[0].ReadBlockSize = 48 << 10 }, `volume "a": read block size 49152: want a power of two from 32 KiB to 1 MiB`},
		{"read block size without read tier", func(l *Layout) { l.Volumes[1].ReadBlockSize = 64 << 10 }, `volume "b": read block size 65536 set without a read cache`},
		{"origin extent on a member", func(l *Layout) { l.Volumes[1].Origin.Member = "m1" }, `volume "b": origin extent is on member m1, want the origin`},
		{"slice on the origin", func(l *Layout) { l.Volumes[1].WriteCache.Member = "" }, `volume "b": write cache is on the origin, want an SSD member`},
		{"origin size zero", func(l *Layout) { l.Origin.SizeSectors = 0 }, "origin has size 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := base(t)
			tt.mutate(l)
			err := l.Validate()
			if err == nil {
				t.Fatalf("Validate = nil, want error containing %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate = %q\nwant it to contain %q", err, tt.want)
			}
		})
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	l := testLayout(t)
	mustAdd(t, l, VolumeRequest{Name: "a", Size: 1 << 30})
	l.Volumes[0].BlockSize = 3
	l.Volumes[0].Mode = "x"
	err := l.Validate()
	if err == nil || !strings.Contains(err.Error(), "block size 3") || !strings.Contains(err.Error(), `invalid mode "x"`) {
		t.Errorf("Validate = %v, want both problems", err)
	}
}

func TestAddVolumeReadBlockSize(t *testing.T) {
	tests := []struct {
		name      string
		readCache uint64
		rbs       uint32
	}{
		{"node default", 64 << 20, 0},
		{"smallest", 64 << 20, MinReadBlockSize},
		{"256 KiB", 64 << 20, 256 << 10},
		{"largest", 64 << 20, MaxReadBlockSize},
		// The smallest read cache still holds MinReadCacheBlocks of the
		// largest block.
		{"largest in the smallest cache", MinReadCacheBytes, MaxReadBlockSize},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := testLayout(t)
			v := mustAdd(t, l, VolumeRequest{Name: "v", Size: 1 << 30, ReadCache: tt.readCache, ReadBlockSize: tt.rbs})
			if v.ReadBlockSize != tt.rbs {
				t.Errorf("ReadBlockSize = %d, want %d", v.ReadBlockSize, tt.rbs)
			}
			stored, _ := l.Volume("v")
			if stored.ReadBlockSize != tt.rbs {
				t.Errorf("stored ReadBlockSize = %d, want %d", stored.ReadBlockSize, tt.rbs)
			}
		})
	}
}

// TestCheckReadBlockSize covers the block-count rule directly: with the
// current minimums AddVolume cannot reach it (16 MiB holds 16 blocks of
// 1 MiB), but it must hold if those minimums change.
func TestCheckReadBlockSize(t *testing.T) {
	tests := []struct {
		name      string
		readCache uint64
		rbs       uint32
		want      string // "" = valid
	}{
		{"fits exactly", 16 << 20, 1 << 20, ""},
		{"plenty", 1 << 30, 64 << 10, ""},
		{"one block short", 15 << 20, 1 << 20, "read cache 15 MiB holds fewer than 16 blocks of 1 MiB: use a read cache of at least 16 MiB or a smaller read block size"},
		{"no read cache", 0, 64 << 10, "without a read cache"},
		{"zero is not a size", 1 << 30, 0, "read block size 0 B: want a power of two"},
		{"multiple of 32 KiB but not a power of two", 1 << 30, 3 * 32 << 10, "read block size 96 KiB"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkReadBlockSize(tt.readCache, tt.rbs)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("checkReadBlockSize = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("checkReadBlockSize = %v, want error containing %q", err, tt.want)
			}
		})
	}
}

// TestReadMetaCoversEveryReadBlockSize checks the metadata slice is sized
// for the most blocks any allowed read block size gives: the smallest.
func TestReadMetaCoversEveryReadBlockSize(t *testing.T) {
	for _, cache := range []uint64{MinReadCacheBytes, 1 << 30, 100 << 30, 4 << 40} {
		meta := ReadMetaSectors(BytesToSectors(cache)) * SectorSize
		for rbs := uint64(MinReadBlockSize); rbs <= MaxReadBlockSize; rbs *= 2 {
			blocks := BytesToSectors(cache) * SectorSize / rbs
			if need := uint64(ReadMetaBaseBytes) + blocks*ReadMetaBytesPerBlock; meta < need {
				t.Errorf("read cache %s, block %s: meta slice %s < %s needed", FormatBytes(cache), FormatBytes(rbs), FormatBytes(meta), FormatBytes(need))
			}
		}
	}
}
