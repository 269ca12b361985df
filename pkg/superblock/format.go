// SPDX-License-Identifier: Apache-2.0

package superblock

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/tidecache/tidecache/pkg/pool"
)

// Format constants.
const (
	// Magic starts every slot image.
	Magic = "TIDECACH"
	// FormatVersion is the newest version this build reads and writes.
	// Version 2 is version 1 plus volumes of several origin extents
	// (origin_tail), version 3 version 2 plus the record of a volume
	// taken over in a planned move (failed_over.planned), version 4
	// version 3 plus a write cache on peers alone (write_mirror.remote0,
	// the volume of a node without SSDs). Encode writes
	// the oldest version the layout needs (formatFor), so a release that
	// reads an older version only keeps reading every pool that does not
	// need more, and refuses, by version, one that does.
	FormatVersion = 4
	// SlotSize is the size in bytes of each of the two slots: slot A at
	// byte 0, slot B at byte SlotSize.
	SlotSize = 1 << 20
	// HeaderSize is the length of a version 1 to 4 header.
	HeaderSize = 64
	// ImageAlign is the granularity of a slot image: Encode pads to it so
	// every write covers whole 4 KiB blocks.
	ImageAlign = 4096
	// MaxHeaderSize bounds the header length field in every version, so a
	// reader can checksum the header of a version it does not know.
	MaxHeaderSize = 4096
)

// Both slots lie inside the head of the device no extent uses; this
// constant fails to compile (negative uint) if that ever stops being true.
const _ = uint(pool.ReservedSectors*pool.SectorSize - 2*SlotSize)

// SlotOffset returns the byte offset of slot "A" or "B".
func SlotOffset(slot string) int64 {
	if slot == "B" {
		return SlotSize
	}
	return 0
}

// Header field offsets of version 1. Magic, version and header length stay
// at these offsets in every version, and the header CRC always occupies the
// last 4 bytes of the header: that is what lets a reader tell a newer
// format from a corrupt one.
const (
	offMagic      = 0  // [8]byte "TIDECACH"
	offVersion    = 8  // u32
	offHeaderLen  = 12 // u32
	offPayloadLen = 16 // u32
	offRole       = 20 // u8
	offReserved   = 21 // u8, zero
	offFlags      = 22 // u16, zero in version 1
	offGeneration = 24 // u64, equals the payload's pool generation
	offPayloadCRC = 32 // u32, CRC32C of the payload
	// 36..59 reserved, zero
	offHeaderCRC = HeaderSize - 4 // u32, CRC32C of bytes [0, offHeaderCRC)
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func checksum(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// Role says which kind of device a superblock sits on.
type Role uint8

// The device roles.
const (
	RoleSSD    Role = 1 // an SSD member; DeviceUUID is its member UUID
	RoleOrigin Role = 2 // the origin; DeviceUUID is the pool UUID
)

func (r Role) String() string {
	switch r {
	case RoleSSD:
		return "ssd"
	case RoleOrigin:
		return "origin"
	}
	return fmt.Sprintf("role(%d)", uint8(r))
}

// Superblock is what one device records: its own identity and the layout
// of the whole pool.
type Superblock struct {
	Role       Role
	DeviceUUID string // member UUID, or the pool UUID for the origin
	Layout     pool.Layout
}

// check validates the superblock as a whole: role, identity, layout.
func (sb *Superblock) check() error {
	if err := sb.Layout.Validate(); err != nil {
		return fmt.Errorf("layout of pool %q: %w", sb.Layout.Name, err)
	}
	switch sb.Role {
	case RoleOrigin:
		if sb.DeviceUUID != sb.Layout.UUID {
			return fmt.Errorf("origin superblock carries device uuid %q, want the pool uuid %q", sb.DeviceUUID, sb.Layout.UUID)
		}
	case RoleSSD:
		if _, ok := sb.Layout.Member(sb.DeviceUUID); !ok {
			return fmt.Errorf("SSD superblock carries device uuid %q, which is not a member of pool %q", sb.DeviceUUID, sb.Layout.Name)
		}
	default:
		return fmt.Errorf("unknown device role %d", uint8(sb.Role))
	}
	return nil
}

// Encode returns the slot image of sb: the 64-byte header and the JSON
// payload, zero-padded to a multiple of ImageAlign. It refuses a
// superblock whose layout fails pool.Layout.Validate, whose identity does
// not match its role, or whose image would not fit a slot.
func Encode(sb Superblock) ([]byte, error) {
	if err := sb.check(); err != nil {
		return nil, fmt.Errorf("superblock: refusing to encode: %w", err)
	}
	payload, err := json.Marshal(toWire(&sb))
	if err != nil {
		return nil, fmt.Errorf("superblock: encode payload: %w", err)
	}
	if len(payload) > SlotSize-HeaderSize {
		return nil, fmt.Errorf("superblock: layout of pool %q takes %d bytes, a slot holds %d", sb.Layout.Name, len(payload), SlotSize-HeaderSize)
	}
	n := HeaderSize + len(payload)
	img := make([]byte, (n+ImageAlign-1)/ImageAlign*ImageAlign)
	le := binary.LittleEndian
	copy(img[offMagic:], Magic)
	le.PutUint32(img[offVersion:], formatFor(&sb.Layout))
	le.PutUint32(img[offHeaderLen:], HeaderSize)
	le.PutUint32(img[offPayloadLen:], uint32(len(payload)))
	img[offRole] = byte(sb.Role)
	le.PutUint64(img[offGeneration:], sb.Layout.Generation)
	le.PutUint32(img[offPayloadCRC:], checksum(payload))
	le.PutUint32(img[offHeaderCRC:], checksum(img[:offHeaderCRC]))
	copy(img[HeaderSize:], payload)
	return img, nil
}

// formatFor returns the oldest format version that can hold l: 4 if a
// volume's write cache is on peers alone, 3 if a volume was taken over in
// a planned move, 2 if a volume has several origin extents, else 1.
func formatFor(l *pool.Layout) uint32 {
	need := uint32(1)
	for i := range l.Volumes {
		v := &l.Volumes[i]
		switch {
		case v.WriteMirror != nil && v.WriteMirror.Remote0 != nil:
			return 4
		case v.FailedOver != nil && v.FailedOver.Planned:
			need = 3
		case len(v.OriginTail) > 0:
			need = max(need, 2)
		}
	}
	return need
}

// Decode parses one slot image. b may be longer than the image (a whole
// slot); bytes after the payload are ignored. It returns ErrNoSuperblock
// if b does not start with Magic, *VersionError for a newer format, and
// *CorruptError (with an empty Slot) for anything else wrong. It never
// panics, whatever b holds.
func Decode(b []byte) (Superblock, error) {
	sb, _, err := decode(b)
	return sb, err
}

// decode is Decode that also returns the image bytes it checked (header
// and payload), so Read can compare two slots.
func decode(b []byte) (Superblock, []byte, error) {
	corrupt := func(err error, format string, a ...any) (Superblock, []byte, error) {
		return Superblock{}, nil, &CorruptError{Reason: fmt.Sprintf(format, a...), Err: err}
	}
	if len(b) < len(Magic) || string(b[:len(Magic)]) != Magic {
		return Superblock{}, nil, ErrNoSuperblock
	}
	le := binary.LittleEndian
	if len(b) < offHeaderLen+4 {
		return corrupt(nil, "truncated header: %d bytes", len(b))
	}
	version := le.Uint32(b[offVersion:])
	hlen := le.Uint32(b[offHeaderLen:])
	if hlen < HeaderSize || hlen > MaxHeaderSize {
		return corrupt(nil, "header length %d outside %d..%d", hlen, HeaderSize, MaxHeaderSize)
	}
	if uint64(len(b)) < uint64(hlen) {
		return corrupt(nil, "truncated header: %d of %d bytes", len(b), hlen)
	}
	hdr := b[:hlen]
	if want, got := le.Uint32(hdr[hlen-4:]), checksum(hdr[:hlen-4]); want != got {
		return corrupt(nil, "header CRC32C mismatch: expected %#08x, actual %#08x", want, got)
	}
	switch {
	case version == 0:
		return corrupt(nil, "format version 0 is invalid")
	case version > FormatVersion:
		return Superblock{}, nil, &VersionError{Version: version}
	}

	// Versions 1 to 3 share the header; 2 and 3 only add payload fields.
	if hlen != HeaderSize {
		return corrupt(nil, "header length %d, version %d headers are %d bytes", hlen, version, HeaderSize)
	}
	if hdr[offReserved] != 0 || le.Uint16(hdr[offFlags:]) != 0 || !allZero(hdr[offPayloadCRC+4:offHeaderCRC]) {
		return corrupt(nil, "reserved header bytes or flags set (flags %#04x)", le.Uint16(hdr[offFlags:]))
	}
	role := Role(hdr[offRole])
	if role != RoleSSD && role != RoleOrigin {
		return corrupt(nil, "unknown device role %d", uint8(role))
	}
	plen := le.Uint32(hdr[offPayloadLen:])
	if plen == 0 || plen > SlotSize-HeaderSize {
		return corrupt(nil, "payload length %d outside 1..%d (beyond the slot)", plen, SlotSize-HeaderSize)
	}
	end := HeaderSize + int(plen)
	if len(b) < end {
		return corrupt(nil, "truncated payload: %d of %d bytes", len(b)-HeaderSize, plen)
	}
	payload := b[HeaderSize:end]
	if want, got := le.Uint32(hdr[offPayloadCRC:]), checksum(payload); want != got {
		return corrupt(nil, "payload CRC32C mismatch: expected %#08x, actual %#08x", want, got)
	}

	var w wirePayload
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return corrupt(err, "payload does not decode: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return corrupt(nil, "payload has data after the JSON document")
	}
	sb := fromWire(&w, role)
	if need := formatFor(&sb.Layout); need > version {
		return corrupt(nil, "payload needs format version %d, the header says %d", need, version)
	}
	if gen := le.Uint64(hdr[offGeneration:]); gen != sb.Layout.Generation {
		return corrupt(nil, "header generation %d differs from payload generation %d", gen, sb.Layout.Generation)
	}
	if err := sb.check(); err != nil {
		return corrupt(err, "payload fails validation: %v", err)
	}
	return sb, b[:end], nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
