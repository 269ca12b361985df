// SPDX-License-Identifier: Apache-2.0

//go:build linux

package dm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Layout of the version 4 ioctl structures (include/uapi/linux/dm-ioctl.h),
// taken from the copies in golang.org/x/sys/unix so that a change there is
// a change here.
const (
	// headerSize is sizeof(struct dm_ioctl), 312 bytes, and the data_start
	// of every request: the payload follows the header, 8-byte aligned.
	headerSize = unix.SizeofDmIoctl
	// headerMin is offsetof(struct dm_ioctl, data), 305 bytes: the
	// data_size the kernel returns when it writes no payload.
	headerMin = int(unsafe.Offsetof(unix.DmIoctl{}.Data))

	offVersion     = int(unsafe.Offsetof(unix.DmIoctl{}.Version))
	offDataSize    = int(unsafe.Offsetof(unix.DmIoctl{}.Data_size))
	offDataStart   = int(unsafe.Offsetof(unix.DmIoctl{}.Data_start))
	offTargetCount = int(unsafe.Offsetof(unix.DmIoctl{}.Target_count))
	offOpenCount   = int(unsafe.Offsetof(unix.DmIoctl{}.Open_count))
	offFlags       = int(unsafe.Offsetof(unix.DmIoctl{}.Flags))
	offEventNr     = int(unsafe.Offsetof(unix.DmIoctl{}.Event_nr))
	offDev         = int(unsafe.Offsetof(unix.DmIoctl{}.Dev))
	offName        = int(unsafe.Offsetof(unix.DmIoctl{}.Name))
	offUUID        = int(unsafe.Offsetof(unix.DmIoctl{}.Uuid))

	// struct dm_target_spec, followed by the NUL-terminated parameters.
	specSize       = unix.SizeofDmTargetSpec
	offSpecStart   = int(unsafe.Offsetof(unix.DmTargetSpec{}.Sector_start))
	offSpecLength  = int(unsafe.Offsetof(unix.DmTargetSpec{}.Length))
	offSpecNext    = int(unsafe.Offsetof(unix.DmTargetSpec{}.Next))
	offSpecType    = int(unsafe.Offsetof(unix.DmTargetSpec{}.Target_type))
	specTypeLen    = unix.DM_MAX_TYPE_NAME
	offNameListDev = int(unsafe.Offsetof(unix.DmNameList{}.Dev))
	offNameListNxt = int(unsafe.Offsetof(unix.DmNameList{}.Next))
	offNameListNm  = int(unsafe.Offsetof(unix.DmNameList{}.Name))
	offVersionsNxt = int(unsafe.Offsetof(unix.DmTargetVersions{}.Next))
	offVersionsVer = int(unsafe.Offsetof(unix.DmTargetVersions{}.Version))
	offVersionsNm  = int(unsafe.Sizeof(unix.DmTargetVersions{})) // char name[] follows
	targetMsgSize  = int(unsafe.Sizeof(unix.DmTargetMsg{}))      // char message[] follows

	nameFieldLen = unix.DM_NAME_LEN
	uuidFieldLen = unix.DM_UUID_LEN

	// dmExistsFlag is DM_EXISTS_FLAG (1 << 2), which x/sys does not export.
	// It is libdevmapper's bookkeeping: the kernel neither reads nor sets
	// it, and a missing device is reported as ENXIO instead. It is
	// listed here so nobody waits for the kernel to set it.
	dmExistsFlag = 1 << 2

	// ioctlMajor is the interface major version we speak. We send minor 0
	// so that every 4.x kernel accepts the request (the kernel refuses a
	// minor newer than its own).
	ioctlMajor = unix.DM_VERSION_MAJOR
)

// ioctlHeader is struct dm_ioctl in Go form.
type ioctlHeader struct {
	Version     [3]uint32
	DataSize    uint32 // total size of the buffer, header included
	DataStart   uint32 // offset of the payload from the start of the header
	TargetCount uint32
	OpenCount   int32
	Flags       uint32
	EventNr     uint32
	Dev         uint64 // huge_encode_dev form, as unix.Mkdev
	Name        string
	UUID        string
}

// marshal writes h into b, which is at least headerSize bytes. Name and
// UUID must fit their fields (ValidateName, ValidateUUID).
func (h *ioctlHeader) marshal(b []byte) {
	clear(b[:headerSize])
	for i, v := range h.Version {
		binary.NativeEndian.PutUint32(b[offVersion+4*i:], v)
	}
	binary.NativeEndian.PutUint32(b[offDataSize:], h.DataSize)
	binary.NativeEndian.PutUint32(b[offDataStart:], h.DataStart)
	binary.NativeEndian.PutUint32(b[offTargetCount:], h.TargetCount)
	binary.NativeEndian.PutUint32(b[offOpenCount:], uint32(h.OpenCount))
	binary.NativeEndian.PutUint32(b[offFlags:], h.Flags)
	binary.NativeEndian.PutUint32(b[offEventNr:], h.EventNr)
	binary.NativeEndian.PutUint64(b[offDev:], h.Dev)
	copy(b[offName:offName+nameFieldLen-1], h.Name)
	copy(b[offUUID:offUUID+uuidFieldLen-1], h.UUID)
}

// unmarshalHeader reads a header the kernel returned. The kernel copies
// back only data_size bytes, which is headerMin when it wrote no payload.
func unmarshalHeader(b []byte) (ioctlHeader, error) {
	if len(b) < headerMin {
		return ioctlHeader{}, fmt.Errorf("dm ioctl reply: %d bytes, want at least %d", len(b), headerMin)
	}
	var h ioctlHeader
	for i := range h.Version {
		h.Version[i] = binary.NativeEndian.Uint32(b[offVersion+4*i:])
	}
	h.DataSize = binary.NativeEndian.Uint32(b[offDataSize:])
	h.DataStart = binary.NativeEndian.Uint32(b[offDataStart:])
	h.TargetCount = binary.NativeEndian.Uint32(b[offTargetCount:])
	h.OpenCount = int32(binary.NativeEndian.Uint32(b[offOpenCount:]))
	h.Flags = binary.NativeEndian.Uint32(b[offFlags:])
	h.EventNr = binary.NativeEndian.Uint32(b[offEventNr:])
	h.Dev = binary.NativeEndian.Uint64(b[offDev:])
	h.Name, _ = cstring(b[offName : offName+nameFieldLen])
	h.UUID, _ = cstring(b[offUUID : offUUID+uuidFieldLen])
	return h, nil
}

// replyData returns the payload of a reply: buf[data_start:data_size], or
// nil when the kernel wrote none.
func replyData(buf []byte, h ioctlHeader) ([]byte, error) {
	if h.DataSize <= h.DataStart {
		return nil, nil
	}
	if h.DataStart < headerSize || int(h.DataSize) > len(buf) {
		return nil, fmt.Errorf("dm ioctl reply: data_start %d, data_size %d outside the %d-byte buffer", h.DataStart, h.DataSize, len(buf))
	}
	return buf[h.DataStart:h.DataSize], nil
}

// deviceInfo reads the device state __dev_status put in a header.
func deviceInfo(h ioctlHeader) DeviceInfo {
	return DeviceInfo{
		Name:          h.Name,
		UUID:          h.UUID,
		Major:         unix.Major(h.Dev),
		Minor:         unix.Minor(h.Dev),
		Suspended:     h.Flags&unix.DM_SUSPEND_FLAG != 0,
		ReadOnly:      h.Flags&unix.DM_READONLY_FLAG != 0,
		LiveTable:     h.Flags&unix.DM_ACTIVE_PRESENT_FLAG != 0,
		InactiveTable: h.Flags&unix.DM_INACTIVE_PRESENT_FLAG != 0,
		OpenCount:     h.OpenCount,
		TargetCount:   h.TargetCount,
		EventNr:       h.EventNr,
	}
}

// encodeTargets builds the DM_TABLE_LOAD payload: for each target a struct
// dm_target_spec followed by its NUL-terminated parameters, padded to 8
// bytes. spec.next is the distance from this spec to the next one (the
// kernel checks it is 8-byte aligned). The table must be valid
// (Table.Validate).
func encodeTargets(t Table) []byte {
	var out []byte
	for _, tg := range t {
		n := align8(specSize + len(tg.Params) + 1)
		rec := make([]byte, n)
		binary.NativeEndian.PutUint64(rec[offSpecStart:], tg.Start)
		binary.NativeEndian.PutUint64(rec[offSpecLength:], tg.Length)
		binary.NativeEndian.PutUint32(rec[offSpecNext:], uint32(n))
		copy(rec[offSpecType:offSpecType+specTypeLen-1], tg.Type)
		copy(rec[specSize:], tg.Params)
		out = append(out, rec...)
	}
	return out
}

// decodeTargets reads the DM_TABLE_STATUS payload: count specs, each
// followed by its NUL-terminated status or table text. Unlike on load,
// spec.next here is an offset from the start of the payload.
func decodeTargets(data []byte, count uint32) (Table, error) {
	if uint64(count)*specSize > uint64(len(data)) {
		return nil, fmt.Errorf("dm status reply: %d targets do not fit in %d bytes", count, len(data))
	}
	t := make(Table, 0, count)
	off := 0
	for i := range count {
		if off+specSize > len(data) {
			return nil, fmt.Errorf("dm status reply: target %d at offset %d is truncated", i, off)
		}
		rec := data[off:]
		typ, _ := cstring(rec[offSpecType : offSpecType+specTypeLen])
		params, ok := cstring(rec[specSize:])
		if !ok {
			return nil, fmt.Errorf("dm status reply: target %d: text not NUL-terminated", i)
		}
		t = append(t, Target{
			Start:  binary.NativeEndian.Uint64(rec[offSpecStart:]),
			Length: binary.NativeEndian.Uint64(rec[offSpecLength:]),
			Type:   typ,
			Params: params,
		})
		next := int(binary.NativeEndian.Uint32(rec[offSpecNext:]))
		if i+1 < count && next <= off {
			return nil, fmt.Errorf("dm status reply: target %d: next offset %d does not advance", i, next)
		}
		off = next
	}
	return t, nil
}

// decodeNameList reads the DM_LIST_DEVICES payload: struct dm_name_list
// records chained by next (relative to the record; 0 ends the list). A
// first record with dev 0 means no devices. Since ioctl 4.37 an aligned
// event_nr and flags word follow each name; with DM_UUID_FLAG (4.45+) the
// flags say whether a NUL-terminated UUID follows them.
func decodeNameList(data []byte) ([]Device, error) {
	var devs []Device
	off := 0
	for {
		if len(data)-off < offNameListNm {
			if off == 0 {
				return nil, nil // nothing written: no devices
			}
			return nil, fmt.Errorf("dm list reply: record at offset %d is truncated", off)
		}
		rec := data[off:]
		dev := binary.NativeEndian.Uint64(rec[offNameListDev:])
		next := int(binary.NativeEndian.Uint32(rec[offNameListNxt:]))
		if off == 0 && dev == 0 {
			return nil, nil
		}
		end := len(rec)
		if next != 0 {
			if next <= offNameListNm || next > len(rec) {
				return nil, fmt.Errorf("dm list reply: record at offset %d: bad next %d", off, next)
			}
			end = next
		}
		name, ok := cstring(rec[offNameListNm:end])
		if !ok {
			return nil, fmt.Errorf("dm list reply: record at offset %d: name not NUL-terminated", off)
		}
		d := Device{Name: name, Major: unix.Major(dev), Minor: unix.Minor(dev)}
		// The payload starts 8-byte aligned, so payload offsets align like
		// the kernel's pointers.
		ext := align8(off+offNameListNm+len(name)+1) - off
		if ext+8 <= end {
			flags := binary.NativeEndian.Uint32(rec[ext+4:])
			if flags&unix.DM_NAME_LIST_FLAG_HAS_UUID != 0 {
				if d.UUID, ok = cstring(rec[ext+8 : end]); !ok {
					return nil, fmt.Errorf("dm list reply: device %s: uuid not NUL-terminated", name)
				}
			}
		}
		devs = append(devs, d)
		if next == 0 {
			return devs, nil
		}
		off += next
	}
}

// decodeTargetVersions reads the DM_LIST_VERSIONS (and
// DM_GET_TARGET_VERSION) payload: struct dm_target_versions records chained
// by next (relative to the record; 0 ends the list).
func decodeTargetVersions(data []byte) (map[string]Version, error) {
	vers := make(map[string]Version)
	off := 0
	for len(data) > off {
		rec := data[off:]
		if len(rec) < offVersionsNm {
			return nil, fmt.Errorf("dm versions reply: record at offset %d is truncated", off)
		}
		next := int(binary.NativeEndian.Uint32(rec[offVersionsNxt:]))
		end := len(rec)
		if next != 0 {
			if next <= offVersionsNm || next > len(rec) {
				return nil, fmt.Errorf("dm versions reply: record at offset %d: bad next %d", off, next)
			}
			end = next
		}
		name, ok := cstring(rec[offVersionsNm:end])
		if !ok {
			return nil, fmt.Errorf("dm versions reply: record at offset %d: name not NUL-terminated", off)
		}
		vers[name] = Version{
			Major: binary.NativeEndian.Uint32(rec[offVersionsVer:]),
			Minor: binary.NativeEndian.Uint32(rec[offVersionsVer+4:]),
			Patch: binary.NativeEndian.Uint32(rec[offVersionsVer+8:]),
		}
		if next == 0 {
			break
		}
		off += next
	}
	return vers, nil
}

// encodeTargetMsg builds the DM_TARGET_MSG payload: struct dm_target_msg
// (the sector that selects the target) and the NUL-terminated message.
func encodeTargetMsg(sector uint64, msg string) []byte {
	b := make([]byte, align8(targetMsgSize+len(msg)+1))
	binary.NativeEndian.PutUint64(b, sector)
	copy(b[targetMsgSize:], msg)
	return b
}

// decodeMessageReply returns the text a target wrote in reply to a
// message: the NUL-terminated string at data_start, present only when the
// kernel set DM_DATA_OUT_FLAG.
func decodeMessageReply(data []byte, flags uint32) (string, error) {
	if flags&unix.DM_DATA_OUT_FLAG == 0 {
		return "", nil
	}
	s, ok := cstring(data)
	if !ok {
		return "", errors.New("dm message reply: text not NUL-terminated")
	}
	return s, nil
}

// cstring returns the bytes of b before the first NUL and whether there
// was one.
func cstring(b []byte) (string, bool) {
	for i, c := range b {
		if c == 0 {
			return string(b[:i]), true
		}
	}
	return string(b), false
}

func align8(n int) int { return (n + 7) &^ 7 }

// alignedBuffer returns n zero bytes starting on an 8-byte boundary, like
// the buffers libdevmapper hands the kernel.
func alignedBuffer(n int) []byte {
	words := make([]uint64, (n+7)/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), n)
}
