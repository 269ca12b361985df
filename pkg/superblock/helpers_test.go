// SPDX-License-Identifier: Apache-2.0

package superblock

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/tidecache/tidecache/pkg/pool"
)

const gib = 1 << 30

// memDev is a fixed-size in-memory block device.
type memDev struct {
	b      []byte
	writes int
	// tear, if set, is applied to every write: it returns the part of p
	// that reaches the device, as (offset within p, length), and the write
	// then fails like a power cut.
	tear func(p []byte) (from, n int)
	// readErr, if set, fails every read.
	readErr error
}

func newDev(size int) *memDev { return &memDev{b: make([]byte, size)} }

func (d *memDev) ReadAt(p []byte, off int64) (int, error) {
	if d.readErr != nil {
		return 0, d.readErr
	}
	if off >= int64(len(d.b)) {
		return 0, io.EOF
	}
	n := copy(p, d.b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (d *memDev) WriteAt(p []byte, off int64) (int, error) {
	d.writes++
	if off+int64(len(p)) > int64(len(d.b)) {
		return 0, fmt.Errorf("write beyond end of device")
	}
	if d.tear != nil {
		from, n := d.tear(p)
		copy(d.b[off+int64(from):], p[from:from+n])
		return n, errors.New("power cut")
	}
	return copy(d.b[off:], p), nil
}

func noSync() error { return nil }

// testLayout returns a pool with an origin, two SSDs and three volumes
// covering every kind of extent.
func testLayout(t testing.TB) *pool.Layout {
	t.Helper()
	l, err := pool.New("fast", "5d6a0c8e-pool", pool.Origin{Path: "/dev/md/tc-data", MDUUID: "a1b2c3d4:e5f60718:293a4b5c:6d7e8f90", SizeSectors: 100 * gib / 512},
		[]pool.Member{
			{UUID: "member-1", Path: "/dev/nvme0n1", SizeSectors: 10 * gib / 512},
			{UUID: "member-2", Path: "/dev/nvme1n1", SizeSectors: 10 * gib / 512},
		})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1700000000, 0)
	for _, r := range []pool.VolumeRequest{
		{Name: "db", Size: 20 * gib, WriteCache: 2 * gib, ReadCache: 2 * gib},
		{Name: "logs", Size: 10 * gib, WriteCache: 1 * gib, BlockSize: 512},
		{Name: "archive", Size: 30 * gib},
	} {
		if _, err := l.AddVolume(r, "uuid-"+r.Name, now); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

func ssdSB(l *pool.Layout) Superblock {
	return Superblock{Role: RoleSSD, DeviceUUID: "member-1", Layout: *l.Clone()}
}

// withGen returns a copy of sb at another generation.
func withGen(sb Superblock, gen uint64) Superblock {
	sb.Layout = *sb.Layout.Clone()
	sb.Layout.Generation = gen
	return sb
}

func mustEncode(t testing.TB, sb Superblock) []byte {
	t.Helper()
	img, err := Encode(sb)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// rawImage builds a format 1 slot image from a header edit and a payload,
// with correct checksums, to test the checks behind them.
func rawImage(edit func(h []byte), payload []byte) []byte {
	le := binary.LittleEndian
	img := make([]byte, HeaderSize+len(payload))
	copy(img, Magic)
	le.PutUint32(img[offVersion:], 1) // an edit may set another
	le.PutUint32(img[offHeaderLen:], HeaderSize)
	le.PutUint32(img[offPayloadLen:], uint32(len(payload)))
	img[offRole] = byte(RoleSSD)
	copy(img[HeaderSize:], payload)
	le.PutUint32(img[offPayloadCRC:], checksum(payload))
	if edit != nil {
		edit(img[:HeaderSize])
	}
	hlen := le.Uint32(img[offHeaderLen:])
	if hlen >= 4 && int(hlen) <= len(img) {
		le.PutUint32(img[hlen-4:], checksum(img[:hlen-4]))
	}
	return img
}

// payloadOf returns the JSON payload of an encoded image.
func payloadOf(img []byte) []byte {
	return img[HeaderSize : HeaderSize+int(binary.LittleEndian.Uint32(img[offPayloadLen:]))]
}

func setGen(gen uint64) func(h []byte) {
	return func(h []byte) { binary.LittleEndian.PutUint64(h[offGeneration:], gen) }
}
