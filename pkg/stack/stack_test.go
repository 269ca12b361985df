// SPDX-License-Identifier: Apache-2.0

package stack

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tidecache/tidecache/pkg/dm"
	"github.com/tidecache/tidecache/pkg/pool"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func testVolume() pool.Volume {
	return pool.Volume{
		Name:       "db",
		UUID:       "0b5e2f4c-1111-4222-8333-944455556666",
		Mode:       pool.ModeWriteback,
		Origin:     pool.Extent{Offset: 8192, Length: 2097152},
		WriteCache: &pool.Extent{Member: "ssd-a", Offset: 8192, Length: 262144},
		ReadCache:  &pool.Extent{Member: "ssd-b", Offset: 8192, Length: 524288},
		ReadMeta:   &pool.Extent{Member: "ssd-a", Offset: 270336, Length: 16384},
		BlockSize:  4096,
	}
}

var testDevices = Devices{
	Origin:  "/dev/md/tc-fast",
	Members: map[string]string{"ssd-a": "/dev/nvme0n1", "ssd-b": "/dev/nvme1n1"},
	Adopted: map[string]string{"0b5e2f4c-1111-4222-8333-944455556666": "/dev/md127"},
}

// render prints a stack the way a golden file holds it: one dm device per
// block, name, uuid and table.
func render(s Stack) string {
	var b strings.Builder
	for _, d := range s.Devices {
		b.WriteString("# " + d.Name + " " + d.UUID + " (" + string(d.Role) + ")\n")
		b.WriteString(d.Table.String())
		if !strings.HasSuffix(d.Table.String(), "\n") {
			b.WriteString("\n")
		}
	}
	return b.String()
}

func TestBuildGolden(t *testing.T) {
	hi, lo := 60, 40
	jobs := uint64(512)
	noRead := testVolume()
	noRead.ReadCache, noRead.ReadMeta = nil, nil
	volHi := 30
	tunedVol := noRead
	tunedVol.Tuning = &pool.Tuning{HighWatermark: &volHi}
	nodeAutocommit, volAutocommit := uint64(1000), uint64(100)
	autocommitVol := noRead
	autocommitVol.Tuning = &pool.Tuning{AutocommitTimeMs: &volAutocommit}
	bigReadBlocks := testVolume()
	bigReadBlocks.ReadBlockSize = 256 << 10
	fuaWindow := noRead
	fuaWindow.FUAWindow = true
	mirrored := testVolume()
	mirrored.WriteMirror = &pool.Mirror{
		Meta:    pool.Extent{Member: "ssd-a", Offset: 286720, Length: 2048},
		Leg:     pool.Extent{Member: "ssd-b", Offset: 532480, Length: 262144},
		LegMeta: pool.Extent{Member: "ssd-b", Offset: 794624, Length: 2048},
	}
	grown := testVolume()
	grown.OriginTail = []pool.Extent{{Offset: 6299648, Length: 1048576}, {Offset: 4202496, Length: 524288}}
	adopted := noRead
	adopted.Adopted = &pool.Adopted{Path: "/dev/md0", MDUUID: "3f2a9c41:8b7d6e50:1a2b3c4d:5e6f7a8b", SizeSectors: 2097159}
	adopted.Origin = pool.Extent{Length: pool.AdoptedSectors(adopted.Adopted.SizeSectors)}
	noHold, shortHold := uint64(0), uint64(250)
	noReadFirst := noRead
	noReadFirst.Tuning = &pool.Tuning{ReadFirstMaxHoldMs: &noHold}
	ownReadFirst := noRead
	ownReadFirst.Tuning = &pool.Tuning{ReadFirstMaxHoldMs: &shortHold}
	cases := []struct {
		golden string
		vol    pool.Volume
		mode   pool.Mode
		tuning Tuning
	}{
		{"writeback-readtier", testVolume(), pool.ModeWriteback, DefaultTuning()},
		{"writethrough-readtier", testVolume(), pool.ModeWritethrough, DefaultTuning()},
		{"passthrough-readtier", testVolume(), pool.ModePassthrough, DefaultTuning()},
		{"writeback-only", noRead, pool.ModeWriteback, DefaultTuning()},
		{"writethrough-only", noRead, pool.ModeWritethrough, DefaultTuning()},
		{"writeback-tuned", noRead, pool.ModeWriteback, Tuning{HighWatermark: &hi, LowWatermark: &lo, WritebackJobs: &jobs}},
		// The volume's own tuning (from policy) wins over the node's.
		{"writeback-volume-tuned", tunedVol, pool.ModeWriteback, Tuning{HighWatermark: &hi, LowWatermark: &lo, WritebackJobs: &jobs}},
		// The volume's autocommit time wins over the node's; the node's
		// other knobs stay.
		{"writeback-volume-autocommit", autocommitVol, pool.ModeWriteback, Tuning{WritebackJobs: &jobs, AutocommitTimeMs: &nodeAutocommit}},
		// The read block size the volume chose at creation (256 KiB = 512
		// sectors) wins over the node's 64 KiB.
		{"writeback-readtier-blocksize", bigReadBlocks, pool.ModeWriteback, DefaultTuning()},
		{"writethrough-readtier-blocksize", bigReadBlocks, pool.ModeWritethrough, DefaultTuning()},
		// An operator who accepted the FUA window gets a linear top over
		// the write tier instead of fuaflush.
		{"writeback-fua-window", fuaWindow, pool.ModeWriteback, DefaultTuning()},
		{"writethrough-fua-window", fuaWindow, pool.ModeWritethrough, DefaultTuning()},
		// A mirrored write cache: dm-raid raid1 of two legs on two SSDs
		// under dm-writecache; in writethrough none of it is built.
		{"writeback-mirror", mirrored, pool.ModeWriteback, DefaultTuning()},
		{"writethrough-mirror", mirrored, pool.ModeWritethrough, DefaultTuning()},
		// An adopted md array: the origin device maps all of it (rounded
		// down to 4 KiB), the rest is the usual stack.
		{"writeback-adopted", adopted, pool.ModeWriteback, DefaultTuning()},
		{"passthrough-adopted", adopted, pool.ModePassthrough, DefaultTuning()},
		// A volume grown past its neighbours: the origin device maps its
		// three extents one after the other, every tier above sees the
		// sum (1.75 GiB).
		{"writeback-grown", grown, pool.ModeWriteback, DefaultTuning()},
		// A volume tuned to run without the readfirst layer has its write
		// tier straight on the origin; one with its own hold bound keeps
		// the node's idle window.
		{"writeback-no-readfirst", noReadFirst, pool.ModeWriteback, DefaultTuning()},
		{"writeback-volume-readfirst", ownReadFirst, pool.ModeWriteback, DefaultTuning()},
		{"passthrough-grown", grown, pool.ModePassthrough, DefaultTuning()},
	}
	for _, tc := range cases {
		t.Run(tc.golden, func(t *testing.T) {
			s, err := BuildMode(tc.vol, tc.mode, testDevices, tc.tuning)
			if err != nil {
				t.Fatalf("BuildMode: %v", err)
			}
			got := render(s)
			path := filepath.Join("testdata", tc.golden+".golden")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("read golden (run go test ./pkg/stack -update): %v", err)
			}
			if got != string(want) {
				t.Errorf("stack differs from %s\n--- got\n%s--- want\n%s", path, got, want)
			}
			if top := s.Top(); top.Name != "tc-db" || top.Role != RoleTop {
				t.Errorf("top device = %s (%s), want tc-db (top)", top.Name, top.Role)
			}
			for _, d := range s.Devices {
				if !Owned(d.UUID) || len(d.Name) > 127 || len(d.UUID) > 128 {
					t.Errorf("device %s uuid %s: not a valid owned dm identity", d.Name, d.UUID)
				}
				for _, tg := range d.Table {
					if tg.Length == 0 {
						t.Errorf("device %s: zero-length target", d.Name)
					}
				}
			}
		})
	}
}

func TestReadBlockSectors(t *testing.T) {
	vol := func(rbs uint32) pool.Volume { v := testVolume(); v.ReadBlockSize = rbs; return v }
	cases := []struct {
		name string
		vol  pool.Volume
		t    Tuning
		want uint64
	}{
		{"recorded none: 64 KiB, whatever the node says", vol(0), Tuning{ReadBlockSectors: 256}, 128},
		{"volume's own", vol(1 << 20), Tuning{ReadBlockSectors: 256}, 2048},
		{"smallest", vol(pool.MinReadBlockSize), DefaultTuning(), 64},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := ReadBlockSectors(tc.vol); got != tc.want {
				t.Errorf("ReadBlockSectors = %d, want %d", got, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		t    Tuning
		want uint64
	}{{DefaultTuning(), DefaultTuning().ReadBlockSectors}, {Tuning{ReadBlockSectors: 256}, 256}, {Tuning{}, DefaultTuning().ReadBlockSectors}} {
		if got := NewReadBlockSectors(tc.t); got != tc.want {
			t.Errorf("NewReadBlockSectors(%+v) = %d, want %d", tc.t, got, tc.want)
		}
	}
}

func TestBuildErrors(t *testing.T) {
	noWrite := testVolume()
	noWrite.WriteCache = nil
	empty := testVolume()
	empty.Origin.Length = 0
	cases := []struct {
		name string
		vol  pool.Volume
		mode pool.Mode
		devs Devices
		want string
	}{
		{"writeback without slice", noWrite, pool.ModeWriteback, testDevices, "needs a write cache slice"},
		{"missing member", testVolume(), pool.ModeWriteback, Devices{Origin: "/dev/md0", Members: map[string]string{"ssd-a": "/dev/x"}}, "ssd-b not found"},
		{"missing origin", testVolume(), pool.ModeWriteback, Devices{Members: testDevices.Members}, "origin device not resolved"},
		{"empty extent", empty, pool.ModeWriteback, testDevices, "empty origin extent"},
		{"bad mode", testVolume(), pool.Mode("sideways"), testDevices, "unknown mode"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := BuildMode(tc.vol, tc.mode, tc.devs, DefaultTuning())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestUUIDRoundTrip(t *testing.T) {
	for _, r := range []Role{RoleOrigin, RoleReadMeta, RoleReadData, RoleReadTier, RoleWriteData, RoleTop} {
		u := DeviceUUID("0b5e2f4c-1111-4222-8333-944455556666", r)
		role, vol, err := ParseUUID(u)
		if err != nil || role != r || vol != "0b5e2f4c-1111-4222-8333-944455556666" {
			t.Errorf("ParseUUID(%q) = %q, %q, %v", u, role, vol, err)
		}
	}
	for _, bad := range []string{"LVM-abc", "TIDECACHE-", "TIDECACHE-top", "TIDECACHE-bogus-123"} {
		if _, _, err := ParseUUID(bad); err == nil {
			t.Errorf("ParseUUID(%q) accepted a foreign uuid", bad)
		}
	}
	if Owned("LVM-xyz") || !Owned("TIDECACHE-top-x") {
		t.Error("Owned misclassifies uuids")
	}
	if DeviceName("db", RoleTop) != "tc-db" || DeviceName("db", RoleWriteData) != "tc-db-wdata" {
		t.Error("unexpected device names")
	}
}

// TestReservedSuffixesMatchRoles keeps pool's name rule in step with the
// roles here: a volume may not be named like another volume's lower device.
func TestReservedSuffixesMatchRoles(t *testing.T) {
	roles := slices.DeleteFunc(slices.Clone(Roles), func(r Role) bool { return r == RoleTop })
	if len(pool.ReservedVolumeSuffixes) != len(roles) {
		t.Fatalf("pool.ReservedVolumeSuffixes = %v, roles below top = %v", pool.ReservedVolumeSuffixes, roles)
	}
	for _, r := range roles {
		if err := pool.ValidateName("volume", "db-"+string(r)); err == nil {
			t.Errorf("volume name db-%s accepted; it would collide with %s", r, DeviceName("db", r))
		}
	}
}

// TestBuildMirrorDegraded: a mirror leg whose SSD is not on the node is
// left out of the raid table ("- -") and its slices are not built; with
// neither leg there is nothing to build on.
func TestBuildMirrorDegraded(t *testing.T) {
	v := testVolume()
	v.ReadCache, v.ReadMeta = nil, nil
	v.WriteMirror = &pool.Mirror{
		Meta:    pool.Extent{Member: "ssd-a", Offset: 286720, Length: 2048},
		Leg:     pool.Extent{Member: "ssd-b", Offset: 8192, Length: 262144},
		LegMeta: pool.Extent{Member: "ssd-b", Offset: 270336, Length: 2048},
	}
	cases := []struct {
		name    string
		members map[string]string
		raid    string
		absent  Role
	}{
		{"second SSD gone", map[string]string{"ssd-a": "/dev/nvme0n1"},
			"raid1 3 0 min_recovery_rate 65536 2 /dev/mapper/tc-db-wmeta0 /dev/mapper/tc-db-wleg0 - -", RoleWriteLeg1},
		{"first SSD gone", map[string]string{"ssd-b": "/dev/nvme1n1"},
			"raid1 3 0 min_recovery_rate 65536 2 - - /dev/mapper/tc-db-wmeta1 /dev/mapper/tc-db-wleg1", RoleWriteLeg0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Build(v, Devices{Origin: "/dev/md/tc-fast", Members: tc.members}, DefaultTuning())
			if err != nil {
				t.Fatalf("Build: %v", err)
			}
			raid, ok := s.Find(RoleWriteData)
			if !ok || raid.Table[0].Params != tc.raid {
				t.Fatalf("raid device = %+v, want params %q", raid, tc.raid)
			}
			if _, built := s.Find(tc.absent); built {
				t.Errorf("%s built for a leg whose SSD is gone", tc.absent)
			}
		})
	}
	if _, err := Build(v, Devices{Origin: "/dev/md/tc-fast"}, DefaultTuning()); !errors.Is(err, ErrNoLeg) {
		t.Errorf("Build with both SSDs gone: %v, want an error saying no leg is on this node", err)
	}

	// Leg 1 missed writes: never built alone, built beside leg 0 (dm-raid
	// resyncs it), and leg 0 alone is fine.
	v.WriteMirror.OutOfSync = []int{1}
	if _, err := Build(v, Devices{Origin: "/dev/md/tc-fast", Members: map[string]string{"ssd-b": "/dev/nvme1n1"}}, DefaultTuning()); !errors.Is(err, ErrStaleLeg) {
		t.Errorf("Build on the stale leg alone: %v, want ErrStaleLeg", err)
	}
	for _, members := range []map[string]string{testDevices.Members, {"ssd-a": "/dev/nvme0n1"}} {
		if _, err := Build(v, Devices{Origin: "/dev/md/tc-fast", Members: members}, DefaultTuning()); err != nil {
			t.Errorf("Build with members %v and leg 1 out of sync: %v", members, err)
		}
	}
}

// TestBuildPeerMirror checks leg 1 of a peer mirror is carved from the
// attached export (metadata first, then data), is left out while the
// export is not attached, and that a stale local leg is never built alone.
func TestBuildPeerMirror(t *testing.T) {
	v := testVolume()
	v.ReadCache, v.ReadMeta = nil, nil
	v.WriteMirror = &pool.Mirror{
		Meta:   pool.Extent{Member: "ssd-a", Offset: 286720, Length: 2048},
		Remote: &pool.RemoteLeg{Node: "b", NQN: "nqn.2026-11.io.tidecache:replica:r", HostNQN: "nqn.2026-11.io.tidecache:node:a", Addr: "10.0.0.2", Port: 4420, UUID: "r-uuid"},
	}
	attached := Devices{Origin: testDevices.Origin, Members: testDevices.Members, Remote: map[string]string{"r-uuid": "/dev/nvme2n1"}}
	s, err := Build(v, attached, DefaultTuning())
	if err != nil {
		t.Fatal(err)
	}
	want := map[Role]string{
		RoleWriteMeta1: "0 2048 linear /dev/nvme2n1 0",
		RoleWriteLeg1:  "0 262144 linear /dev/nvme2n1 2048",
		// Reads stay on the local leg: the peer's is write-mostly.
		RoleWriteData: "0 262144 raid raid1 5 0 min_recovery_rate 65536 write_mostly 1 2 /dev/mapper/tc-db-wmeta0 /dev/mapper/tc-db-wleg0 /dev/mapper/tc-db-wmeta1 /dev/mapper/tc-db-wleg1",
	}
	wantTables(t, s, want)
	detached := Devices{Origin: testDevices.Origin, Members: testDevices.Members}
	s, err = Build(v, detached, DefaultTuning())
	if err != nil {
		t.Fatal(err)
	}
	if raid, _ := s.Find(RoleWriteData); raid.Table[0].Params != "raid1 3 0 min_recovery_rate 65536 2 /dev/mapper/tc-db-wmeta0 /dev/mapper/tc-db-wleg0 - -" {
		t.Errorf("raid without the export = %q, want leg 1 missing and no write_mostly", raid.Table[0].Params)
	}
	// On a shared origin the volume can fail over: the peer leg's slices
	// hold the I/O the peer fails (errhold) instead of passing the error
	// to md, which would drop the leg and go on on the local one.
	shared := v
	shared.Adopted = &pool.Adopted{Path: "/dev/nvme3n1", SizeSectors: 2097152}
	shared.Origin = pool.Extent{Length: 2097152}
	withOrigin := attached
	withOrigin.Adopted = testDevices.Adopted
	s, err = Build(shared, withOrigin, DefaultTuning())
	if err != nil {
		t.Fatal(err)
	}
	for role, table := range map[Role]string{
		RoleWriteMeta1: "0 2048 errhold /dev/nvme2n1 0",
		RoleWriteLeg1:  "0 262144 errhold /dev/nvme2n1 2048",
		RoleWriteMeta0: "0 2048 linear /dev/nvme0n1 286720",
	} {
		if d, ok := s.Find(role); !ok || strings.TrimSpace(d.Table.String()) != table {
			t.Errorf("shared origin: %s = %q, want %q", role, d.Table.String(), table)
		}
	}
	// Without the local SSD the peer's leg is the one md reads from.
	v.WriteMirror.OutOfSync = []int{0}
	s, err = Build(v, Devices{Origin: testDevices.Origin, Remote: attached.Remote}, DefaultTuning())
	if err != nil {
		t.Fatal(err)
	}
	if raid, _ := s.Find(RoleWriteData); raid.Table[0].Params != "raid1 3 0 min_recovery_rate 65536 2 - - /dev/mapper/tc-db-wmeta1 /dev/mapper/tc-db-wleg1" {
		t.Errorf("raid on the peer leg alone = %q, want leg 0 missing and no write_mostly", raid.Table[0].Params)
	}
	v.WriteMirror.OutOfSync = []int{1}
	if _, err := Build(v, Devices{Origin: testDevices.Origin, Remote: attached.Remote}, DefaultTuning()); !errors.Is(err, ErrStaleLeg) {
		t.Errorf("Build on the stale remote leg alone: %v, want ErrStaleLeg", err)
	}
}

// wantTables fails t for each role of want whose device in s is missing
// or has another table.
func wantTables(t *testing.T, s Stack, want map[Role]string) {
	t.Helper()
	for role, table := range want {
		d, ok := s.Find(role)
		if !ok || strings.TrimSpace(d.Table.String()) != table {
			t.Errorf("%s = %q, want %q", role, d.Table.String(), table)
		}
	}
}

// TestBuildMirrorOnPeers checks the write mirror of a node without SSDs:
// both legs carved from two attached exports, no slice of the node's own
// devices, a leg left out while its export is not attached, nothing built
// with neither, and never a stale leg alone.
func TestBuildMirrorOnPeers(t *testing.T) {
	v := testVolume()
	v.ReadCache, v.ReadMeta = nil, nil
	v.WriteCache = &pool.Extent{Member: pool.OnPeers, Length: 262144}
	v.WriteMirror = &pool.Mirror{
		Remote0: &pool.RemoteLeg{Node: "c", NQN: "nqn.2026-11.io.tidecache:replica:q", HostNQN: "nqn.2026-11.io.tidecache:node:a", Addr: "10.0.0.3", Port: 4420, UUID: "q-uuid"},
		Remote:  &pool.RemoteLeg{Node: "b", NQN: "nqn.2026-11.io.tidecache:replica:r", HostNQN: "nqn.2026-11.io.tidecache:node:a", Addr: "10.0.0.2", Port: 4420, UUID: "r-uuid"},
	}
	both := map[string]string{"q-uuid": "/dev/nvme3n1", "r-uuid": "/dev/nvme2n1"}
	s, err := Build(v, Devices{Origin: testDevices.Origin, Remote: both}, DefaultTuning())
	if err != nil {
		t.Fatal(err)
	}
	want := map[Role]string{
		RoleWriteMeta0: "0 2048 linear /dev/nvme3n1 0",
		RoleWriteLeg0:  "0 262144 linear /dev/nvme3n1 2048",
		RoleWriteMeta1: "0 2048 linear /dev/nvme2n1 0",
		RoleWriteLeg1:  "0 262144 linear /dev/nvme2n1 2048",
		RoleWriteData:  "0 262144 raid raid1 3 0 min_recovery_rate 65536 2 /dev/mapper/tc-db-wmeta0 /dev/mapper/tc-db-wleg0 /dev/mapper/tc-db-wmeta1 /dev/mapper/tc-db-wleg1",
	}
	wantTables(t, s, want)
	for _, d := range s.Devices {
		if strings.Contains(d.Table.String(), "nvme0n1") || strings.Contains(d.Table.String(), "nvme1n1") {
			t.Errorf("%s = %q: a cache on peers uses none of the node's SSDs", d.Role, d.Table.String())
		}
	}
	s, err = Build(v, Devices{Origin: testDevices.Origin, Remote: map[string]string{"r-uuid": "/dev/nvme2n1"}}, DefaultTuning())
	if err != nil {
		t.Fatal(err)
	}
	if raid, _ := s.Find(RoleWriteData); !strings.HasSuffix(raid.Table[0].Params, "2 - - /dev/mapper/tc-db-wmeta1 /dev/mapper/tc-db-wleg1") {
		t.Errorf("raid without leg 0's export = %q, want leg 0 missing", raid.Table[0].Params)
	}
	if _, err := Build(v, Devices{Origin: testDevices.Origin}, DefaultTuning()); !errors.Is(err, ErrNoLeg) {
		t.Errorf("Build with neither export attached: %v, want no leg", err)
	}
	v.WriteMirror.OutOfSync = []int{1}
	if _, err := Build(v, Devices{Origin: testDevices.Origin, Remote: map[string]string{"r-uuid": "/dev/nvme2n1"}}, DefaultTuning()); !errors.Is(err, ErrStaleLeg) {
		t.Errorf("Build on the stale leg 1 alone: %v, want ErrStaleLeg", err)
	}
}

// TestBuildAdoptedNotFound: an adopted volume whose device the engine did
// not find (absent, or its identifiers did not match) gets no stack.
func TestBuildAdoptedNotFound(t *testing.T) {
	v := testVolume()
	v.Adopted = &pool.Adopted{Path: "/dev/md0", MDUUID: "3f2a9c41:8b7d6e50:1a2b3c4d:5e6f7a8b", SizeSectors: 2097152}
	v.Origin = pool.Extent{Length: 2097152}
	devs := testDevices
	devs.Adopted = nil
	_, err := Build(v, devs, DefaultTuning())
	if err == nil || !strings.Contains(err.Error(), "adopted device /dev/md0 (md uuid 3f2a9c41:8b7d6e50:1a2b3c4d:5e6f7a8b) not found on this node") {
		t.Fatalf("Build without the adopted device = %v, want it named as not found", err)
	}
}

func TestUdevFlags(t *testing.T) {
	for _, tc := range []struct {
		uuid string
		want dm.UdevFlags
	}{
		{DeviceUUID("v1", RoleTop), 0},
		{DeviceUUID("v1", RoleOrigin), dm.UdevInner},
		{DeviceUUID("v1", RoleWriteTier), dm.UdevInner},
		{DeviceUUID("v1", RoleWriteLeg1), dm.UdevInner},
		{UUIDPrefix + string(ReplicaRole) + "-v1", dm.UdevInner},
		{"LVM-abc", 0},
		{"", 0},
	} {
		if got := UdevFlags(tc.uuid); got != tc.want {
			t.Errorf("UdevFlags(%q) = %#x, want %#x", tc.uuid, got, tc.want)
		}
	}
}

// TestVolumeOf: the volume of every name DeviceName makes, a volume with
// dashes included, and no volume for names tidecache does not make.
func TestVolumeOf(t *testing.T) {
	for _, volume := range []string{"db", "my-db", "w"} {
		for _, r := range Roles {
			if got, ok := VolumeOf(DeviceName(volume, r)); !ok || got != volume {
				t.Errorf("VolumeOf(%q) = %q, %v; want %q", DeviceName(volume, r), got, ok, volume)
			}
		}
	}
	for _, name := range []string{"tc-", "tcr-db", "vg-lv", ""} {
		if got, ok := VolumeOf(name); ok {
			t.Errorf("VolumeOf(%q) = %q, want none", name, got)
		}
	}
}
