// SPDX-License-Identifier: Apache-2.0

package superblock

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tidecache/tidecache/pkg/pool"
)

// TestTuningRoundTrip checks that a volume's write-tier tuning survives the
// superblock, since boot assembly rebuilds the table from it, and that a
// volume without tuning writes no tuning key at all.
func TestTuningRoundTrip(t *testing.T) {
	l := testLayout(t)
	if len(l.Volumes) == 0 {
		t.Fatal("test layout has no volume")
	}
	hi, lo, jobs, hold := 30, 20, uint64(64), uint64(0)
	if err := l.SetTuning(l.Volumes[0].Name, &pool.Tuning{HighWatermark: &hi, LowWatermark: &lo, WritebackJobs: &jobs, ReadFirstMaxHoldMs: &hold}); err != nil {
		t.Fatal(err)
	}
	sb := ssdSB(l)
	img := mustEncode(t, sb)
	if !strings.Contains(string(payloadOf(img)), `"tuning":{"high_watermark":30,"low_watermark":20,"writeback_jobs":64,"readfirst_max_hold_ms":0}`) {
		t.Errorf("tuning not in the payload as documented:\n%s", payloadOf(img))
	}
	got, err := Decode(img)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, sb) {
		t.Fatalf("round trip differs:\n got %+v\nwant %+v", got.Layout.Volumes[0].Tuning, sb.Layout.Volumes[0].Tuning)
	}
	if err := l.SetTuning(l.Volumes[0].Name, nil); err != nil {
		t.Fatal(err)
	}
	if p := string(payloadOf(mustEncode(t, ssdSB(l)))); strings.Contains(p, "tuning") {
		t.Errorf("untuned volume writes a tuning key:\n%s", p)
	}
}

// oldPayload returns the format 1 payload in testdata written before the
// optional read_block_size and autocommit_time_ms fields existed.
func oldPayload(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "v1-payload-before-read-block-size.json"))
	if err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSpace(b)
}

// TestDecodeOlderV1Payload checks a payload written before the optional
// fields were added still decodes to what it meant (node defaults for both)
// and that writing the same layout back produces the same bytes, so a
// pool that uses neither field stays readable by the older binary.
func TestDecodeOlderV1Payload(t *testing.T) {
	payload := oldPayload(t)
	sb, err := Decode(rawImage(setGen(5), payload))
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	for _, v := range sb.Layout.Volumes {
		if v.ReadBlockSize != 0 {
			t.Errorf("volume %s: ReadBlockSize %d, want 0 (node default)", v.Name, v.ReadBlockSize)
		}
	}
	logs, ok := sb.Layout.Volume("logs")
	if !ok || logs.Tuning == nil {
		t.Fatal("volume logs lost its tuning")
	}
	if logs.Tuning.AutocommitTimeMs != nil || *logs.Tuning.HighWatermark != 30 || *logs.Tuning.LowWatermark != 20 || *logs.Tuning.WritebackJobs != 64 {
		t.Errorf("logs tuning = %+v, want watermarks 30/20, 64 jobs, no autocommit time", *logs.Tuning)
	}
	if got := payloadOf(mustEncode(t, sb)); !bytes.Equal(got, payload) {
		t.Errorf("re-encoded payload differs from the older one:\n got %s\nwant %s", got, payload)
	}
}

// TestReadBlockSizeAndAutocommitRoundTrip checks the two optional fields
// survive the superblock under their documented names.
func TestReadBlockSizeAndAutocommitRoundTrip(t *testing.T) {
	l := testLayout(t)
	db, _ := l.Volume("db")
	db.ReadBlockSize = 256 << 10
	ac := uint64(100)
	if err := l.SetTuning("logs", &pool.Tuning{AutocommitTimeMs: &ac}); err != nil {
		t.Fatal(err)
	}
	sb := ssdSB(l)
	img := mustEncode(t, sb)
	p := string(payloadOf(img))
	for _, key := range []string{`"block_size":4096,"read_block_size":262144,"created_unix"`, `"tuning":{"autocommit_time_ms":100}`} {
		if !strings.Contains(p, key) {
			t.Errorf("payload lacks %s:\n%s", key, p)
		}
	}
	if n := strings.Count(p, "read_block_size"); n != 1 {
		t.Errorf("read_block_size written %d times, want only for the volume that chose one", n)
	}
	got, err := Decode(img)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, sb) {
		t.Fatalf("round trip differs:\n got %+v\nwant %+v", got.Layout.Volumes, sb.Layout.Volumes)
	}
}

// TestDecodeRejectsBadOptionalFields checks the new fields are decoded as
// strictly as the rest: a misspelt key is unknown, a bad value fails
// validation before it can reach a dm table.
func TestDecodeRejectsBadOptionalFields(t *testing.T) {
	payload := string(oldPayload(t))
	edit := func(old, new string) []byte {
		t.Helper()
		if !strings.Contains(payload, old) {
			t.Fatalf("fixture lacks %s", old)
		}
		return []byte(strings.Replace(payload, old, new, 1))
	}
	dbBlock := `"block_size":4096,"created_unix":1700000000},{"name":"logs"`
	tests := []struct {
		name    string
		payload []byte
		want    string
	}{
		{"misspelt read block size", edit(dbBlock, `"block_size":4096,"read_blocksize":65536,"created_unix":1700000000},{"name":"logs"`),
			`unknown field "read_blocksize"`},
		{"misspelt autocommit", edit(`"writeback_jobs":64}`, `"writeback_jobs":64,"autocommit_ms":100}`), `unknown field "autocommit_ms"`},
		{"read block size not a power of two", edit(dbBlock, `"block_size":4096,"read_block_size":98304,"created_unix":1700000000},{"name":"logs"`),
			`volume "db": read block size 98304: want a power of two`},
		{"read block size without read tier", edit(`"block_size":512,`, `"block_size":512,"read_block_size":65536,`),
			`volume "logs": read block size 65536 set without a read cache`},
		{"autocommit zero", edit(`"writeback_jobs":64}`, `"writeback_jobs":64,"autocommit_time_ms":0}`), "autocommit time 0 ms"},
		{"autocommit too long", edit(`"writeback_jobs":64}`, `"writeback_jobs":64,"autocommit_time_ms":3600000}`), "autocommit time 3600000 ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode(rawImage(setGen(5), tt.payload))
			var ce *CorruptError
			if !errors.As(err, &ce) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Decode = %v, want *CorruptError containing %q", err, tt.want)
			}
		})
	}
}

// TestWriteMirrorRoundTrip checks a mirrored write cache's legs survive the
// superblock under their documented names (boot assembly builds the raid1
// from them), that a volume without one writes no key, and that a reader
// that does not know the field refuses the payload rather than building
// the write tier on one leg.
func TestWriteMirrorRoundTrip(t *testing.T) {
	l := testLayout(t)
	if _, err := l.AddVolume(pool.VolumeRequest{Name: "ledger", Size: gib, WriteCache: gib, Protect: pool.ProtectLocal}, "uuid-ledger", time.Unix(1700000000, 0)); err != nil {
		t.Fatal(err)
	}
	sb := ssdSB(l)
	img := mustEncode(t, sb)
	p := string(payloadOf(img))
	if n := strings.Count(p, `"write_mirror":{"meta":{"member":`); n != 1 {
		t.Errorf("write_mirror written %d times, want once (only ledger has one):\n%s", n, p)
	}
	got, err := Decode(img)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, sb) {
		t.Fatalf("round trip differs:\n got %+v\nwant %+v", got.Layout.Volumes, sb.Layout.Volumes)
	}
	if m := got.Layout.Volumes[len(got.Layout.Volumes)-1].WriteMirror; m == nil || m.Leg.Member == got.Layout.Volumes[len(got.Layout.Volumes)-1].WriteCache.Member {
		t.Fatalf("decoded mirror %+v: want a leg on the other member", m)
	}
	// A build without the field decodes with DisallowUnknownFields and
	// refuses the payload: shown here with the field renamed.
	renamed := []byte(strings.Replace(p, `"write_mirror"`, `"write_mirror_v9"`, 1))
	var ce *CorruptError
	if _, err := Decode(rawImage(setGen(l.Generation), renamed)); !errors.As(err, &ce) || !strings.Contains(err.Error(), `unknown field "write_mirror_v9"`) {
		t.Fatalf("Decode of an unknown mirror field = %v, want a refusal naming it", err)
	}
}

// TestPeerMirrorRoundTrip checks both halves of a peer mirror survive the
// superblock: the owner's remote leg, from which it attaches the peer's
// export after a reboot, and the peer's replica, which keeps its slice out
// of every other allocation and lets it export the slice again.
func TestPeerMirrorRoundTrip(t *testing.T) {
	l := testLayout(t)
	peer := &pool.RemoteLeg{Node: "b", NQN: "nqn.2026-11.io.tidecache:replica:u1", HostNQN: "nqn.2026-11.io.tidecache:node:a",
		Addr: "10.0.0.2", Port: 4420, UUID: "0b7e3e2a-1c55-4b8e-9f39-4f1f0e0f2a11"}
	if _, err := l.AddVolume(pool.VolumeRequest{Name: "ledger", Size: gib, WriteCache: 64 << 20, Protect: pool.ProtectPeer, Peer: peer}, "uuid-ledger", time.Unix(1700000000, 0)); err != nil {
		t.Fatal(err)
	}
	if _, err := l.AddReplica(pool.ReplicaRequest{Volume: "orders", Owner: "c", HostNQN: "nqn.2026-11.io.tidecache:node:c", WriteCache: 64 << 20}, "uuid-replica"); err != nil {
		t.Fatal(err)
	}
	sb := ssdSB(l)
	img := mustEncode(t, sb)
	p := string(payloadOf(img))
	for _, key := range []string{`"remote":{"node":"b","nqn":`, `"replicas":[{"volume":"orders","owner":"c",`} {
		if !strings.Contains(p, key) {
			t.Errorf("payload lacks %s:\n%s", key, p)
		}
	}
	got, err := Decode(img)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, sb) {
		t.Fatalf("round trip differs:\n got %+v %+v\nwant %+v %+v", got.Layout.Volumes, got.Layout.Replicas, sb.Layout.Volumes, sb.Layout.Replicas)
	}
}
