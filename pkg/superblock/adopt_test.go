// SPDX-License-Identifier: Apache-2.0

package superblock

import (
	"encoding/binary"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tidecache/tidecache/pkg/pool"
)

// TestAdoptedRoundTrip checks that a pool of SSDs alone, with a volume
// that adopted an existing md array, survives its SSDs' superblock: the
// device's identifiers are all assembly has to find it by. A build that
// does not know adopted volumes refuses the payload instead of reading
// the device's extent as one of the pool's origin.
func TestAdoptedRoundTrip(t *testing.T) {
	l, err := pool.New("fast", "5d6a0c8e-pool", pool.Origin{}, []pool.Member{{UUID: "member-1", Path: "/dev/nvme0n1", SizeSectors: 2 * gib / 512}})
	if err != nil {
		t.Fatal(err)
	}
	dev := &pool.Adopted{Path: "/dev/md0", MDUUID: "a1b2c3d4:e5f60718:293a4b5c:6d7e8f90", SizeSectors: 8*gib/512 + 3}
	if _, err := l.AddVolume(pool.VolumeRequest{Name: "mysql", WriteCache: 256 << 20, Adopt: dev}, "uuid-mysql", time.Unix(1700000000, 0)); err != nil {
		t.Fatal(err)
	}
	sb := ssdSB(l)
	img := mustEncode(t, sb)
	p := string(payloadOf(img))
	for _, key := range []string{`"origin":{"path":"","md_uuid":"","size_sectors":0}`, `"adopted":{"path":"/dev/md0","md_uuid":"a1b2c3d4:e5f60718:293a4b5c:6d7e8f90","size_sectors":16777219}`} {
		if !strings.Contains(p, key) {
			t.Errorf("payload lacks %s:\n%s", key, p)
		}
	}
	got, err := Decode(img)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, sb) {
		t.Fatalf("round trip differs:\n got %+v\nwant %+v", got.Layout.Volumes, sb.Layout.Volumes)
	}
	renamed := []byte(strings.Replace(p, `"adopted"`, `"adopted_v9"`, 1))
	var ce *CorruptError
	if _, err := Decode(rawImage(setGen(l.Generation), renamed)); !errors.As(err, &ce) || !strings.Contains(err.Error(), `unknown field "adopted_v9"`) {
		t.Fatalf("Decode of an unknown adopted field = %v, want a refusal naming it", err)
	}
}

// TestDataLossRoundTrip checks that the record of a force-start's lost
// writes survives the superblock.
func TestDataLossRoundTrip(t *testing.T) {
	l, err := pool.New("fast", "5d6a0c8e-pool", pool.Origin{Path: "/dev/md0", SizeSectors: 8 * gib / 512}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.AddVolume(pool.VolumeRequest{Name: "db", Size: gib, Mode: pool.ModePassthrough}, "uuid-db", time.Unix(1700000000, 0)); err != nil {
		t.Fatal(err)
	}
	l.Volumes[0].DataLoss = &pool.DataLoss{Unix: 1700000100, Member: "member-1"}
	sb := Superblock{Role: RoleOrigin, DeviceUUID: l.UUID, Layout: *l}
	img := mustEncode(t, sb)
	if p := string(payloadOf(img)); !strings.Contains(p, `"data_loss":{"unix":1700000100,"member":"member-1"}`) {
		t.Errorf("payload lacks the data loss record:\n%s", p)
	}
	got, err := Decode(img)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Layout.Volumes[0].DataLoss, l.Volumes[0].DataLoss) {
		t.Fatalf("data loss after the round trip: %+v", got.Layout.Volumes[0].DataLoss)
	}
}

// takenOver is the superblock of an SSD pool that kept node a's replica
// of volume db and took db over from it, in a planned move or not.
func takenOver(t *testing.T, planned bool) Superblock {
	t.Helper()
	l, err := pool.New("fast", "5d6a0c8e-pool", pool.Origin{}, []pool.Member{{UUID: "member-1", Path: "/dev/nvme0n1", SizeSectors: 2 * gib / 512}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.AddReplica(pool.ReplicaRequest{Volume: "db", Owner: "a", HostNQN: "nqn.2026-11.io.tidecache:node:a", WriteCache: 256 << 20}, "6d1e0c8e-0000-4000-8000-000000000001"); err != nil {
		t.Fatal(err)
	}
	lun := &pool.Adopted{Path: "/dev/nvme2n1", WWN: "uuid.6f1c2a0e-5b7d-5b1e-9c3a-2d4e6f8a0b1c", SizeSectors: 8 * gib / 512}
	req := pool.TakeOverRequest{Volume: "db", From: "a", Adopt: lun, Mode: pool.ModeWriteback, BlockSize: 4096, Planned: planned}
	if _, err := l.TakeOverReplica(req, "uuid-db", time.Unix(1700000200, 0)); err != nil {
		t.Fatal(err)
	}
	return ssdSB(l)
}

// TestFailedOverRoundTrip checks that the record of a take-over survives
// the superblock, and that a build without it refuses the payload.
func TestFailedOverRoundTrip(t *testing.T) {
	sb := takenOver(t, false)
	l := &sb.Layout
	img := mustEncode(t, sb)
	p := string(payloadOf(img))
	if !strings.Contains(p, `"failed_over":{"from":"a","unix":1700000200}`) {
		t.Errorf("payload lacks the failed-over record:\n%s", p)
	}
	got, err := Decode(img)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, sb) {
		t.Fatalf("round trip differs:\n got %+v\nwant %+v", got.Layout.Volumes, sb.Layout.Volumes)
	}
	renamed := []byte(strings.Replace(p, `"failed_over"`, `"failed_over_v9"`, 1))
	var ce *CorruptError
	if _, err := Decode(rawImage(setGen(l.Generation), renamed)); !errors.As(err, &ce) {
		t.Fatalf("Decode of an unknown failed-over field = %v, want a refusal", err)
	}
}

// TestPlannedTakeOverFormat checks the record of a take-over in a planned
// move: it needs format 3, which Encode writes only then (a failover's
// record stays format 1, readable by the releases before moves), and a
// slot that says an older version but holds one is corrupt: no writer of
// that version made it.
func TestPlannedTakeOverFormat(t *testing.T) {
	for _, tc := range []struct {
		name    string
		planned bool
		version uint32
		record  string
	}{
		{"failover", false, 1, `"failed_over":{"from":"a","unix":1700000200}`},
		{"planned move", true, 3, `"failed_over":{"from":"a","unix":1700000200,"planned":true}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb := takenOver(t, tc.planned)
			img := mustEncode(t, sb)
			if got := headerVersion(img); got != tc.version {
				t.Errorf("format version %d, want %d", got, tc.version)
			}
			if p := string(payloadOf(img)); !strings.Contains(p, tc.record) {
				t.Errorf("payload lacks %s:\n%s", tc.record, p)
			}
			got, err := Decode(img)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, sb) {
				t.Fatalf("round trip differs:\n got %+v\nwant %+v", got.Layout.Volumes, sb.Layout.Volumes)
			}
			if f := got.Layout.Volumes[0].FailedOver; f == nil || f.Planned != tc.planned {
				t.Errorf("decoded record %+v, want planned %t", f, tc.planned)
			}
		})
	}
	img := mustEncode(t, takenOver(t, true))
	gen := binary.LittleEndian.Uint64(img[offGeneration:])
	_, err := Decode(rawImage(func(h []byte) { binary.LittleEndian.PutUint32(h[offVersion:], 2); setGen(gen)(h) }, payloadOf(img)))
	var ce *CorruptError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "needs format version 3") {
		t.Fatalf("Decode of a planned record under version 2 = %v, want a *CorruptError saying the payload needs format 3", err)
	}
}

// TestCacheOnPeersFormat checks the volume of a node without SSDs, whose
// write cache is on two peers' replicas: its pool is an origin alone, the
// record needs format 4 (Encode writes it only then), round-trips, and a
// slot that says version 3 but holds it is corrupt.
func TestCacheOnPeersFormat(t *testing.T) {
	l, err := pool.New("hdd", "5d6a0c8e-hdd", pool.Origin{Path: "/dev/md/tc-data", MDUUID: "a1b2c3d4:e5f60718:293a4b5c:6d7e8f90", SizeSectors: 100 * gib / 512}, nil)
	if err != nil {
		t.Fatal(err)
	}
	leg := func(node, uuid string) *pool.RemoteLeg {
		return &pool.RemoteLeg{Node: node, NQN: "nqn.2026-11.io.tidecache:replica:" + uuid, HostNQN: "nqn.2026-11.io.tidecache:node:a",
			Addr: "10.0.0." + node, Port: 4420, UUID: uuid}
	}
	if _, err := l.AddVolume(pool.VolumeRequest{Name: "db", Size: gib, WriteCache: 256 << 20, Protect: pool.ProtectPeer,
		Peer: leg("2", "replica-b"), Peer0: leg("3", "replica-c")}, "uuid-db", time.Unix(1700000000, 0)); err != nil {
		t.Fatal(err)
	}
	sb := Superblock{Role: RoleOrigin, DeviceUUID: l.UUID, Layout: *l}
	img := mustEncode(t, sb)
	if got := headerVersion(img); got != 4 {
		t.Errorf("format version %d, want 4", got)
	}
	p := string(payloadOf(img))
	for _, want := range []string{`"member":"@peers"`, `"remote0":{"node":"3"`, `"remote":{"node":"2"`} {
		if !strings.Contains(p, want) {
			t.Errorf("payload lacks %s:\n%s", want, p)
		}
	}
	got, err := Decode(img)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, sb) {
		t.Fatalf("round trip differs:\n got %+v\nwant %+v", got.Layout.Volumes, sb.Layout.Volumes)
	}
	gen := binary.LittleEndian.Uint64(img[offGeneration:])
	_, err = Decode(rawImage(func(h []byte) { binary.LittleEndian.PutUint32(h[offVersion:], 3); setGen(gen)(h) }, payloadOf(img)))
	var ce *CorruptError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "needs format version 4") {
		t.Fatalf("Decode of a cache on peers under version 3 = %v, want a *CorruptError saying the payload needs format 4", err)
	}
}
