// SPDX-License-Identifier: Apache-2.0

//go:build linux

package dm

import (
	"encoding/binary"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// kbuf builds byte buffers the way the kernel lays them out, with the
// offsets written out by hand from include/uapi/linux/dm-ioctl.h so that
// the tests do not reuse the constants they check.
type kbuf []byte

func (b kbuf) u32(off int, v uint32) kbuf { binary.NativeEndian.PutUint32(b[off:], v); return b }
func (b kbuf) u64(off int, v uint64) kbuf { binary.NativeEndian.PutUint64(b[off:], v); return b }
func (b kbuf) str(off int, s string) kbuf { copy(b[off:], s); b[off+len(s)] = 0; return b }
func (b kbuf) getU32(off int) uint32      { return binary.NativeEndian.Uint32(b[off:]) }
func (b kbuf) getU64(off int) uint64      { return binary.NativeEndian.Uint64(b[off:]) }
func (b kbuf) getStr(off int) string {
	s, _ := cstring(b[off:])
	return s
}

// Hand-written struct dm_ioctl offsets.
const (
	kVersion     = 0
	kDataSize    = 12
	kDataStart   = 16
	kTargetCount = 20
	kOpenCount   = 24
	kFlags       = 28
	kEventNr     = 32
	kDev         = 40
	kName        = 48
	kUUID        = 176
	kHeader      = 312
)

func TestLayoutMatchesDmIoctlH(t *testing.T) {
	got := map[string]int{
		"sizeof(dm_ioctl)": headerSize, "offsetof(data)": headerMin,
		"version": offVersion, "data_size": offDataSize, "data_start": offDataStart,
		"target_count": offTargetCount, "open_count": offOpenCount, "flags": offFlags,
		"event_nr": offEventNr, "dev": offDev, "name": offName, "uuid": offUUID,
		"sizeof(dm_target_spec)": specSize, "spec.length": offSpecLength, "spec.next": offSpecNext,
		"spec.target_type": offSpecType, "name_list.next": offNameListNxt, "name_list.name": offNameListNm,
		"versions.version": offVersionsVer, "versions.name": offVersionsNm, "sizeof(dm_target_msg)": targetMsgSize,
	}
	want := map[string]int{
		"sizeof(dm_ioctl)": 312, "offsetof(data)": 305,
		"version": 0, "data_size": 12, "data_start": 16,
		"target_count": 20, "open_count": 24, "flags": 28,
		"event_nr": 32, "dev": 40, "name": 48, "uuid": 176,
		"sizeof(dm_target_spec)": 40, "spec.length": 8, "spec.next": 20,
		"spec.target_type": 24, "name_list.next": 8, "name_list.name": 12,
		"versions.version": 4, "versions.name": 16, "sizeof(dm_target_msg)": 8,
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("layout:\n got  %v\n want %v", got, want)
	}
}

func TestRequestMarshal(t *testing.T) {
	q := request{op: opCreate, cmd: unix.DM_DEV_CREATE, name: "tc-vol1-top", uuid: "TIDECACHE-abc",
		flags: unix.DM_SUSPEND_FLAG, targetCount: 3, payload: []byte("xyz")}
	b := kbuf(q.marshal(400))
	if len(b) != 400 {
		t.Fatalf("len %d", len(b))
	}
	checks := []struct {
		what      string
		got, want uint32
	}{
		{"version[0]", b.getU32(0), 4},
		{"version[1]", b.getU32(4), 0},
		{"data_size", b.getU32(kDataSize), 400},
		{"data_start", b.getU32(kDataStart), 312},
		{"target_count", b.getU32(kTargetCount), 3},
		{"flags", b.getU32(kFlags), 0x2},
		{"event_nr", b.getU32(kEventNr), 0},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.what, c.got, c.want)
		}
	}
	if got := b.getStr(kName); got != "tc-vol1-top" {
		t.Errorf("name %q", got)
	}
	if got := b.getStr(kUUID); got != "TIDECACHE-abc" {
		t.Errorf("uuid %q", got)
	}
	if got := string(b[312:315]); got != "xyz" {
		t.Errorf("payload %q", got)
	}
	if uintptr(unsafe.Pointer(&b[0]))%8 != 0 {
		t.Errorf("buffer not 8-byte aligned")
	}
}

func TestRequestMarshalLongestName(t *testing.T) {
	name := strings.Repeat("n", MaxNameLen)
	uuid := strings.Repeat("u", MaxUUIDLen)
	b := kbuf(request{name: name, uuid: uuid}.marshal(kHeader))
	if b[kName+127] != 0 || b[kUUID+128] != 0 {
		t.Fatal("name or uuid not NUL-terminated")
	}
	if b.getStr(kName) != name || b.getStr(kUUID) != uuid {
		t.Fatal("name or uuid truncated")
	}
}

func TestUnmarshalHeaderDeviceInfo(t *testing.T) {
	// A DM_DEV_STATUS reply: the kernel copies back data_size = 305 bytes.
	b := kbuf(make([]byte, 305)).
		u32(0, 4).u32(4, 47).u32(8, 0).
		u32(kDataSize, 305).u32(kDataStart, 312).u32(kTargetCount, 1).
		u32(kOpenCount, 2).u32(kEventNr, 7).
		u32(kFlags, 0x1|0x2|0x20|0x40|dmExistsFlag). // RO, SUSPEND, ACTIVE, INACTIVE
		u64(kDev, 253<<8|3).                         // huge_encode_dev(253:3)
		str(kName, "tc-a-top").str(kUUID, "TIDECACHE-a-top")
	h, err := unmarshalHeader(b)
	if err != nil {
		t.Fatal(err)
	}
	if h.Version != [3]uint32{4, 47, 0} || h.DataSize != 305 || h.DataStart != 312 {
		t.Errorf("header %+v", h)
	}
	got := deviceInfo(h)
	want := DeviceInfo{Name: "tc-a-top", UUID: "TIDECACHE-a-top", Major: 253, Minor: 3,
		Suspended: true, ReadOnly: true, LiveTable: true, InactiveTable: true,
		OpenCount: 2, TargetCount: 1, EventNr: 7}
	if got != want {
		t.Errorf("deviceInfo\n got  %+v\n want %+v", got, want)
	}
	// Minor numbers above 255 use the split encoding (new_encode_dev).
	b.u64(kDev, (300&0xff)|253<<8|(300&^0xff)<<12)
	h, _ = unmarshalHeader(b)
	if i := deviceInfo(h); i.Major != 253 || i.Minor != 300 {
		t.Errorf("dev 253:300 decoded as %d:%d", i.Major, i.Minor)
	}
	if d, err := replyData(b, h); err != nil || d != nil {
		t.Errorf("replyData of a no-payload reply = %v, %v", d, err)
	}
	if _, err := unmarshalHeader(b[:304]); err == nil {
		t.Error("short reply accepted")
	}
}

func TestReplyData(t *testing.T) {
	b := kbuf(make([]byte, 400)).u32(kDataStart, 312).u32(kDataSize, 320)
	h, _ := unmarshalHeader(b)
	d, err := replyData(b, h)
	if err != nil || len(d) != 8 {
		t.Fatalf("replyData = %d bytes, %v", len(d), err)
	}
	for _, bad := range []struct{ start, size uint32 }{{312, 401}, {100, 320}} {
		b.u32(kDataStart, bad.start).u32(kDataSize, bad.size)
		h, _ := unmarshalHeader(b)
		if _, err := replyData(b, h); err == nil {
			t.Errorf("data_start %d data_size %d accepted", bad.start, bad.size)
		}
	}
}

func TestEncodeTargets(t *testing.T) {
	tbl := Table{
		{Start: 0, Length: 100, Type: "linear", Params: "8:16 0"},                // 40+7 -> 48
		{Start: 100, Length: 50, Type: "writecache", Params: "s 1:2 3:4 4096 0"}, // 40+17 -> 64
	}
	b := kbuf(encodeTargets(tbl))
	if len(b) != 48+64 {
		t.Fatalf("payload %d bytes, want 112", len(b))
	}
	// First spec at the start of the payload; next is relative to it.
	if b.getU64(0) != 0 || b.getU64(8) != 100 || b.getU32(16) != 0 || b.getU32(20) != 48 ||
		b.getStr(24) != "linear" || b.getStr(40) != "8:16 0" {
		t.Errorf("first spec wrong: % x", b[:48])
	}
	if b.getU64(48) != 100 || b.getU64(56) != 50 || b.getU32(68) != 64 ||
		b.getStr(72) != "writecache" || b.getStr(88) != "s 1:2 3:4 4096 0" {
		t.Errorf("second spec wrong: % x", b[48:])
	}
}

// statusReply builds a DM_TABLE_STATUS payload as retrieve_status does:
// spec, text, NUL, align; spec.next relative to the payload start.
func statusReply(targets ...Target) kbuf {
	var b kbuf
	for _, tg := range targets {
		off := len(b)
		rec := kbuf(make([]byte, 40+len(tg.Params)+1))
		rec.u64(0, tg.Start).u64(8, tg.Length).str(24, tg.Type).str(40, tg.Params)
		b = append(b, rec...)
		for len(b)%8 != 0 {
			b = append(b, 0)
		}
		b.u32(off+20, uint32(len(b)))
	}
	return b
}

func TestDecodeTargets(t *testing.T) {
	want := Table{
		{Start: 0, Length: 2097152, Type: "writecache", Params: "0 32640 32000 0 1 2 3 4 5 6 7 8 9 10"},
		{Start: 2097152, Length: 8, Type: "linear", Params: ""},
		{Start: 2097160, Length: 8, Type: "a-fifteen-bytes", Params: "x"},
	}
	data := statusReply(want...)
	got, err := decodeTargets(data, 3)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v\nwant %v", got, want)
	}
	// The kernel sets data_size to the end of the last text, before padding.
	if got, err := decodeTargets(data[:len(data)-6], 3); err != nil || got[2].Params != "x" {
		t.Errorf("unpadded end: %v, %v", got, err)
	}
	if got, err := decodeTargets(nil, 0); err != nil || len(got) != 0 {
		t.Errorf("no table: %v, %v", got, err)
	}
	for name, bad := range map[string]struct {
		data  []byte
		count uint32
	}{
		"truncated spec":  {data[:30], 1},
		"unterminated":    {data[:45], 1},
		"count too large": {data, 1 << 30},
		"next backwards":  {kbuf(append([]byte(nil), data...)).u32(20, 0), 2},
	} {
		if _, err := decodeTargets(bad.data, bad.count); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// nameList builds a DM_LIST_DEVICES payload. ext adds the event_nr/flags
// word (ioctl 4.37+); withUUID asks for DM_UUID_FLAG behaviour (4.45+).
func nameList(ext, withUUID bool, devs ...Device) kbuf {
	var b kbuf
	prev := -1
	for i, d := range devs {
		off := len(b)
		if prev >= 0 {
			b.u32(prev+8, uint32(off-prev))
		}
		prev = off
		rec := kbuf(make([]byte, 12+len(d.Name)+1))
		rec.u64(0, unix.Mkdev(d.Major, d.Minor)).str(12, d.Name)
		b = append(b, rec...)
		for len(b)%8 != 0 {
			b = append(b, 0)
		}
		if !ext {
			continue
		}
		var flags uint32
		if withUUID {
			flags = 2 // DM_NAME_LIST_FLAG_DOESNT_HAVE_UUID
			if d.UUID != "" {
				flags = 1
			}
		}
		b = append(b, make([]byte, 8)...)
		b.u32(len(b)-8, uint32(10+i)).u32(len(b)-4, flags)
		if withUUID && d.UUID != "" {
			b = append(b, append([]byte(d.UUID), 0)...)
			for len(b)%8 != 0 {
				b = append(b, 0)
			}
		}
	}
	return b
}

func TestDecodeNameList(t *testing.T) {
	devs := []Device{
		{Name: "tc-a-top", Major: 253, Minor: 2, UUID: "TIDECACHE-a-top"},
		{Name: "other", Major: 253, Minor: 0},
		{Name: "tc-b-wdata", Major: 253, Minor: 300, UUID: "TIDECACHE-b"},
	}
	noUUID := make([]Device, len(devs))
	for i, d := range devs {
		d.UUID = ""
		noUUID[i] = d
	}
	for _, c := range []struct {
		name          string
		ext, withUUID bool
		want          []Device
	}{
		{"uuid flag (4.45+)", true, true, devs},
		{"event_nr only (4.37+)", true, false, noUUID},
		{"old kernel", false, false, noUUID},
	} {
		got, err := decodeNameList(nameList(c.ext, c.withUUID, devs...))
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s:\n got  %+v\n want %+v", c.name, got, c.want)
		}
	}
	// No devices: the kernel writes nothing (data_size == data_start), or
	// a record with dev 0.
	for _, empty := range [][]byte{nil, make([]byte, 16)} {
		if got, err := decodeNameList(empty); err != nil || got != nil {
			t.Errorf("empty list: %v, %v", got, err)
		}
	}
	good := nameList(true, true, devs...)
	for name, bad := range map[string][]byte{
		"truncated record": good[:44],
		"bad next":         kbuf(append([]byte(nil), good...)).u32(8, 5),
		"next past end":    kbuf(append([]byte(nil), good...)).u32(8, 4096),
		"unterminated":     append(kbuf(make([]byte, 12)).u64(0, 1), 'a', 'b'),
	} {
		if _, err := decodeNameList(bad); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestDecodeTargetVersions(t *testing.T) {
	var b kbuf
	prev := -1
	for _, tv := range []struct {
		name string
		v    [3]uint32
	}{{"cache", [3]uint32{2, 2, 0}}, {"writecache", [3]uint32{1, 6, 0}}, {"linear", [3]uint32{1, 4, 0}}} {
		off := len(b)
		if prev >= 0 {
			b.u32(prev, uint32(off-prev))
		}
		prev = off
		rec := kbuf(make([]byte, 16+len(tv.name)+1))
		rec.u32(4, tv.v[0]).u32(8, tv.v[1]).u32(12, tv.v[2]).str(16, tv.name)
		b = append(b, rec...)
		for len(b)%8 != 0 {
			b = append(b, 0)
		}
	}
	got, err := decodeTargetVersions(b)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Version{"cache": {2, 2, 0}, "writecache": {1, 6, 0}, "linear": {1, 4, 0}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	for name, bad := range map[string][]byte{
		"truncated":    b[:10],
		"bad next":     kbuf(append([]byte(nil), b...)).u32(0, 3),
		"unterminated": kbuf(make([]byte, 20)).str(16, "abc")[:19],
	} {
		if _, err := decodeTargetVersions(bad); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestTargetMessage(t *testing.T) {
	b := kbuf(encodeTargetMsg(2048, "flush"))
	if len(b) != 16 || b.getU64(0) != 2048 || b.getStr(8) != "flush" {
		t.Errorf("message payload % x", b)
	}
	// The reply text sits at data_start when DM_DATA_OUT_FLAG is set.
	reply := kbuf(make([]byte, 8)).str(0, "ok 42")
	if s, err := decodeMessageReply(reply, unix.DM_DATA_OUT_FLAG); err != nil || s != "ok 42" {
		t.Errorf("reply %q, %v", s, err)
	}
	if s, err := decodeMessageReply(reply, 0); err != nil || s != "" {
		t.Errorf("reply without DM_DATA_OUT_FLAG: %q, %v", s, err)
	}
	if _, err := decodeMessageReply([]byte("abc"), unix.DM_DATA_OUT_FLAG); err == nil {
		t.Error("unterminated reply accepted")
	}
}
