// SPDX-License-Identifier: Apache-2.0

package superblock

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/tidecache/tidecache/pkg/pool"
)

func TestRoundTrip(t *testing.T) {
	l := testLayout(t)
	for _, sb := range []Superblock{
		ssdSB(l),
		{Role: RoleSSD, DeviceUUID: "member-2", Layout: *l},
		{Role: RoleOrigin, DeviceUUID: l.UUID, Layout: *l},
	} {
		t.Run(sb.Role.String()+"-"+sb.DeviceUUID, func(t *testing.T) {
			img := mustEncode(t, sb)
			if len(img)%ImageAlign != 0 || len(img) > SlotSize {
				t.Errorf("image is %d bytes, want a multiple of %d within a slot", len(img), ImageAlign)
			}
			le := binary.LittleEndian
			if string(img[:8]) != Magic || le.Uint32(img[8:]) != 1 || le.Uint32(img[12:]) != 64 ||
				img[20] != byte(sb.Role) || le.Uint64(img[24:]) != sb.Layout.Generation {
				t.Errorf("header fields not at the documented offsets: % x", img[:64])
			}
			got, err := Decode(img)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if !reflect.DeepEqual(got, sb) {
				t.Errorf("round trip differs:\n got %+v\nwant %+v", got, sb)
			}
			// A whole slot with trailing garbage decodes the same.
			slot := bytes.Repeat([]byte{0xA5}, SlotSize)
			copy(slot, img[:HeaderSize+len(payloadOf(img))])
			if got, err := Decode(slot); err != nil || !reflect.DeepEqual(got, sb) {
				t.Errorf("Decode(whole slot) = %v", err)
			}
		})
	}
}

func TestPayloadIsExplicitJSON(t *testing.T) {
	img := mustEncode(t, ssdSB(testLayout(t)))
	p := string(payloadOf(img))
	for _, key := range []string{`"device_uuid":"member-1"`, `"pool":{"name":"fast"`, `"generation":4`,
		`"md_uuid":`, `"size_sectors":`, `"write_cache":{"member":"member-1"`, `"read_meta":`, `"block_size":512`,
		`"created_unix":1700000000`, `"write_cache":null`} {
		if !strings.Contains(p, key) {
			t.Errorf("payload lacks %s:\n%s", key, p)
		}
	}
}

func TestEncodeRejects(t *testing.T) {
	l := testLayout(t)
	bad := l.Clone()
	bad.Volumes[1].Origin = bad.Volumes[0].Origin
	tests := []struct {
		name string
		sb   Superblock
		want string
	}{
		{"invalid layout", Superblock{Role: RoleSSD, DeviceUUID: "member-1", Layout: *bad}, "overlaps"},
		{"unknown member", Superblock{Role: RoleSSD, DeviceUUID: "member-9", Layout: *l}, `"member-9", which is not a member`},
		{"origin with member uuid", Superblock{Role: RoleOrigin, DeviceUUID: "member-1", Layout: *l}, "want the pool uuid"},
		{"no role", Superblock{DeviceUUID: "member-1", Layout: *l}, "unknown device role 0"},
		{"too large", tooLarge(t), "a slot holds"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Encode(tt.sb)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Encode = %v, want error containing %q", err, tt.want)
			}
		})
	}
}

// tooLarge returns a valid superblock whose payload exceeds a slot.
func tooLarge(t *testing.T) Superblock {
	l, err := pool.New("big", "p", pool.Origin{SizeSectors: 1 << 40}, []pool.Member{{UUID: "m", SizeSectors: 1 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	name := strings.Repeat("v", 40)
	for i := range 5000 {
		n := fmt.Sprintf("%s%05d", name, i)
		l.Volumes = append(l.Volumes, pool.Volume{Name: n, UUID: n, Mode: pool.ModePassthrough, BlockSize: 4096,
			Origin: pool.Extent{Offset: pool.ReservedSectors + uint64(i)*pool.Alignment, Length: pool.Alignment}})
	}
	return Superblock{Role: RoleOrigin, DeviceUUID: "p", Layout: *l}
}

func TestCorruptAnyByte(t *testing.T) {
	img := mustEncode(t, ssdSB(testLayout(t)))
	n := HeaderSize + len(payloadOf(img))
	for i := range n {
		for _, mask := range []byte{0x01, 0x80, 0xff} {
			b := bytes.Clone(img)
			b[i] ^= mask
			_, err := Decode(b)
			var ce *CorruptError
			switch {
			case i < len(Magic):
				if !errors.Is(err, ErrNoSuperblock) {
					t.Fatalf("byte %d ^ %#x (magic): Decode = %v, want ErrNoSuperblock", i, mask, err)
				}
			case !errors.As(err, &ce):
				t.Fatalf("byte %d ^ %#x: Decode = %v, want *CorruptError", i, mask, err)
			}
		}
	}
}

func TestCRCMismatchMessages(t *testing.T) {
	img := mustEncode(t, ssdSB(testLayout(t)))
	hdr := bytes.Clone(img)
	hdr[offGeneration] ^= 1
	_, err := Decode(hdr)
	if err == nil || !strings.Contains(err.Error(), "header CRC32C mismatch: expected 0x") || !strings.Contains(err.Error(), ", actual 0x") {
		t.Errorf("header flip: %v", err)
	}
	pay := bytes.Clone(img)
	pay[HeaderSize+10] ^= 1
	_, err = Decode(pay)
	if err == nil || !strings.Contains(err.Error(), "payload CRC32C mismatch: expected 0x") {
		t.Errorf("payload flip: %v", err)
	}
}

func TestDecodeRejects(t *testing.T) {
	good := mustEncode(t, ssdSB(testLayout(t)))
	payload := payloadOf(good)
	le := binary.LittleEndian
	gen4 := setGen(4)
	invalid := testLayout(t)
	invalid.Volumes[1].Origin = invalid.Volumes[0].Origin
	invalidPayload := mustJSON(t, toWire(&Superblock{Role: RoleSSD, DeviceUUID: "member-1", Layout: *invalid}))
	otherDevice := mustJSON(t, toWire(&Superblock{Role: RoleSSD, DeviceUUID: "member-7", Layout: *testLayout(t)}))

	tests := []struct {
		name string
		b    []byte
		want string // substring of a *CorruptError unless wantVersion
		// wantVersion expects a *VersionError instead.
		wantVersion bool
	}{
		{"newer version", rawImage(func(h []byte) { le.PutUint32(h[offVersion:], 7); gen4(h) }, payload),
			fmt.Sprintf("superblock format version 7 is newer than this tidecache (%d)", FormatVersion), true},
		{"newer version with a longer header", func() []byte {
			b := make([]byte, 256)
			copy(b, Magic)
			le.PutUint32(b[offVersion:], FormatVersion+1)
			le.PutUint32(b[offHeaderLen:], 256)
			le.PutUint32(b[252:], checksum(b[:252]))
			return b
		}(), fmt.Sprintf("format version %d is newer", FormatVersion+1), true},
		{"version 0", rawImage(func(h []byte) { le.PutUint32(h[offVersion:], 0) }, payload), "format version 0 is invalid", false},
		{"short header length", rawImage(func(h []byte) { le.PutUint32(h[offHeaderLen:], 32) }, payload), "header length 32 outside 64..4096", false},
		{"huge header length", rawImage(func(h []byte) { le.PutUint32(h[offHeaderLen:], 1<<31) }, payload), "header length 2147483648 outside", false},
		{"v1 with a longer header", func() []byte {
			b := make([]byte, 128)
			copy(b, Magic)
			le.PutUint32(b[offVersion:], 1)
			le.PutUint32(b[offHeaderLen:], 128)
			le.PutUint32(b[124:], checksum(b[:124]))
			return b
		}(), "header length 128, version 1 headers are 64 bytes", false},
		{"truncated header", good[:40], "truncated header: 40 of 64 bytes", false},
		{"tiny", good[:12], "truncated header: 12 bytes", false},
		{"flags", rawImage(func(h []byte) { gen4(h); h[offFlags] = 1 }, payload), "flags 0x0001", false},
		{"reserved", rawImage(func(h []byte) { gen4(h); h[40] = 1 }, payload), "reserved header bytes", false},
		{"role", rawImage(func(h []byte) { gen4(h); h[offRole] = 9 }, payload), "unknown device role 9", false},
		{"payload beyond slot", rawImage(func(h []byte) { le.PutUint32(h[offPayloadLen:], SlotSize) }, payload),
			"payload length 1048576 outside 1..1048512 (beyond the slot)", false},
		{"empty payload", rawImage(func(h []byte) { le.PutUint32(h[offPayloadLen:], 0) }, payload), "payload length 0", false},
		{"truncated payload", rawImage(gen4, payload)[:HeaderSize+100], "truncated payload: 100 of", false},
		{"generation mismatch", rawImage(setGen(5), payload), "header generation 5 differs from payload generation 4", false},
		{"not JSON", rawImage(nil, []byte("hello")), "payload does not decode", false},
		{"unknown field", rawImage(nil, []byte(`{"device_uuid":"x","pool":{},"extra":1}`)), `unknown field "extra"`, false},
		{"trailing data", rawImage(gen4, append(bytes.Clone(payload), []byte(" {}")...)), "data after the JSON document", false},
		{"wrong type", rawImage(nil, []byte(`{"pool":{"generation":"four"}}`)), "payload does not decode", false},
		{"fails validation", rawImage(gen4, invalidPayload), "payload fails validation", false},
		{"empty layout", rawImage(nil, []byte(`{}`)), "payload fails validation", false},
		{"device not a member", rawImage(gen4, otherDevice), `"member-7", which is not a member`, false},
		{"origin role with member uuid", rawImage(func(h []byte) { gen4(h); h[offRole] = byte(RoleOrigin) }, payload), "want the pool uuid", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode(tt.b)
			if tt.wantVersion {
				var ve *VersionError
				if !errors.As(err, &ve) {
					t.Fatalf("Decode = %v, want *VersionError", err)
				}
			} else {
				var ce *CorruptError
				if !errors.As(err, &ce) {
					t.Fatalf("Decode = %v, want *CorruptError", err)
				}
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Decode = %q\nwant it to contain %q", err, tt.want)
			}
		})
	}
}

func mustJSON(t *testing.T, w *wirePayload) []byte {
	t.Helper()
	b, err := json.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestNoMagic(t *testing.T) {
	for name, b := range map[string][]byte{
		"empty":   nil,
		"zeros":   make([]byte, 4096),
		"short":   []byte("TIDE"),
		"other":   []byte("XFSB\x00\x00\x10\x00"),
		"lower":   []byte("tidecach" + strings.Repeat("\x00", 100)),
		"shifted": append([]byte{0}, mustEncode(t, ssdSB(testLayout(t)))...),
	} {
		if _, err := Decode(b); !errors.Is(err, ErrNoSuperblock) {
			t.Errorf("%s: Decode = %v, want ErrNoSuperblock", name, err)
		}
	}
}

func FuzzDecode(f *testing.F) {
	img := mustEncode(f, ssdSB(testLayout(f)))
	full := img[:HeaderSize+len(payloadOf(img))]
	f.Add(full)
	f.Add(mustEncode(f, Superblock{Role: RoleOrigin, DeviceUUID: "5d6a0c8e-pool", Layout: *testLayout(f)}))
	f.Add([]byte{})
	f.Add([]byte(Magic))
	f.Add(full[:HeaderSize])
	f.Add(rawImage(nil, []byte(`{}`)))
	f.Add(rawImage(func(h []byte) { binary.LittleEndian.PutUint32(h[offVersion:], 7) }, []byte("x")))
	f.Add(rawImage(setGen(1), []byte(`{"device_uuid":"m","pool":{"name":"p","uuid":"u","generation":1,"origin":{"size_sectors":99999999},"members":[{"uuid":"m","size_sectors":99999999}],"volumes":[{"name":"v","uuid":"v","mode":"writeback","origin":{"offset":8192,"length":2048},"write_cache":{"member":"m","offset":8192,"length":2048},"block_size":4096}]}}`)))
	flipped := bytes.Clone(full)
	flipped[HeaderSize+3] ^= 0x20
	f.Add(flipped)

	f.Fuzz(func(t *testing.T, b []byte) {
		sb, err := Decode(b)
		if err != nil {
			var ce *CorruptError
			var ve *VersionError
			if !errors.Is(err, ErrNoSuperblock) && !errors.As(err, &ce) && !errors.As(err, &ve) {
				t.Fatalf("Decode returned an unexpected error type %T: %v", err, err)
			}
			return
		}
		// Whatever decodes must encode again and decode to the same value.
		img, err := Encode(sb)
		if err != nil {
			t.Fatalf("decoded superblock does not encode: %v", err)
		}
		again, err := Decode(img)
		if err != nil || !reflect.DeepEqual(again, sb) {
			t.Fatalf("re-encoded superblock differs: %v", err)
		}
	})
}

// FuzzDecodePayload gets past the checksums: it wraps arbitrary payloads in
// a header with correct CRCs, so the JSON decoding and the layout checks
// behind them are fuzzed too.
func FuzzDecodePayload(f *testing.F) {
	l := testLayout(f)
	f.Add(payloadOf(mustEncode(f, ssdSB(l))), uint64(4), uint8(RoleSSD))
	f.Add(payloadOf(mustEncode(f, Superblock{Role: RoleOrigin, DeviceUUID: l.UUID, Layout: *l})), uint64(4), uint8(RoleOrigin))
	f.Add([]byte(`{"device_uuid":"m","pool":{"name":"p","uuid":"u","generation":1,"origin":{"size_sectors":99999999},"members":[{"uuid":"m","size_sectors":99999999}],"volumes":[{"name":"v","uuid":"v","mode":"writeback","origin":{"offset":8192,"length":2048},"write_cache":{"member":"m","offset":18446744073709549568,"length":4096},"block_size":4096}]}}`), uint64(1), uint8(RoleSSD))
	f.Add([]byte(`{}`), uint64(0), uint8(0))
	// The optional fields added within format 1.
	f.Add([]byte(`{"device_uuid":"m","pool":{"name":"p","uuid":"u","generation":1,"origin":{"size_sectors":99999999},"members":[{"uuid":"m","size_sectors":99999999}],"volumes":[{"name":"v","uuid":"v","mode":"writethrough","origin":{"offset":8192,"length":2048},"read_cache":{"member":"m","offset":8192,"length":32768},"read_meta":{"member":"m","offset":40960,"length":16384},"block_size":4096,"read_block_size":262144,"tuning":{"autocommit_time_ms":100}}]}}`), uint64(1), uint8(RoleSSD))

	f.Fuzz(func(t *testing.T, payload []byte, gen uint64, role uint8) {
		if len(payload) > SlotSize-HeaderSize {
			return
		}
		b := rawImage(func(h []byte) {
			binary.LittleEndian.PutUint64(h[offGeneration:], gen)
			h[offRole] = role
		}, payload)
		sb, err := Decode(b)
		if err != nil {
			var ce *CorruptError
			if !errors.As(err, &ce) {
				t.Fatalf("Decode returned %T: %v, want *CorruptError", err, err)
			}
			return
		}
		img, err := Encode(sb)
		if err != nil {
			t.Fatalf("decoded superblock does not encode: %v", err)
		}
		if again, err := Decode(img); err != nil || !reflect.DeepEqual(again, sb) {
			t.Fatalf("re-encoded superblock differs: %v", err)
		}
	})
}
