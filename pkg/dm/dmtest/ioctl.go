// SPDX-License-Identifier: Apache-2.0

//go:build linux

package dmtest

import (
	"encoding/binary"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/tidecache/tidecache/pkg/dm"
)

// Offsets in struct dm_ioctl (include/uapi/linux/dm-ioctl.h), written out
// by hand.
const (
	offDataSize    = 12
	offDataStart   = 16
	offTargetCount = 20
	offOpenCount   = 24
	offFlags       = 28
	offEventNr     = 32
	offDev         = 40
	offName        = 48
	offUUID        = 176
	headerMin      = 305 // offsetof(struct dm_ioctl, data)
	headerSize     = 312 // sizeof(struct dm_ioctl)
	specSize       = 40  // sizeof(struct dm_target_spec)
	nameLen        = 128
	uuidLen        = 129
)

// buf reads and writes a dm_ioctl buffer.
type buf []byte

func (b buf) u32(off int, v uint32) buf { binary.NativeEndian.PutUint32(b[off:], v); return b }
func (b buf) u64(off int, v uint64) buf { binary.NativeEndian.PutUint64(b[off:], v); return b }
func (b buf) str(off int, s string) buf { copy(b[off:], s); b[off+len(s)] = 0; return b }
func (b buf) getU32(off int) uint32     { return binary.NativeEndian.Uint32(b[off:]) }
func (b buf) getU64(off int) uint64     { return binary.NativeEndian.Uint64(b[off:]) }
func (b buf) getStr(off int) string {
	s, _ := cstring(b[off:])
	return s
}
func (b buf) setFlag(f uint32) buf { return b.u32(offFlags, b.getU32(offFlags)|f) }

// cstring returns the NUL-terminated string at the start of b; ok is false
// without a NUL.
func cstring(b []byte) (string, bool) {
	i := slices.Index(b, 0)
	if i < 0 {
		return "", false
	}
	return string(b[:i]), true
}

// Ioctl implements dm.Control: it answers one device-mapper ioctl on raw.
func (k *Kernel) Ioctl(cmd uintptr, raw []byte) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	b := buf(raw)
	if len(b) < headerSize {
		return unix.EINVAL
	}
	call := Call{Op: opOf(cmd, b.getU32(offFlags))}
	if cmd != unix.DM_VERSION && cmd != unix.DM_LIST_DEVICES && cmd != unix.DM_LIST_VERSIONS {
		call.Device = b.getStr(offName)
	}
	if call.Op == OpMessage {
		if start := int(b.getU32(offDataStart)); start+8 < len(b) {
			call.Message = b.getStr(start + 8)
		}
	}
	call.Err = k.ioctl(cmd, call, b)
	k.calls = append(k.calls, call)
	return call.Err
}

func (k *Kernel) ioctl(cmd uintptr, call Call, b buf) error {
	if k.interrupts > 0 {
		k.interrupts--
		return unix.EINTR
	}
	if err := k.inject(call.Op, call.Device); err != nil {
		return err
	}
	// check_version
	if b.getU32(0) != 4 || b.getU32(4) > 47 {
		return unix.EINVAL
	}
	b.u32(0, 4).u32(4, 47).u32(8, 0)
	if cmd == unix.DM_VERSION {
		return nil
	}
	size := int(b.getU32(offDataSize))
	if size < headerMin || size > len(b) {
		return unix.EINVAL
	}
	// validate_params
	b.u32(offFlags, b.getU32(offFlags)&^(unix.DM_BUFFER_FULL_FLAG|unix.DM_UEVENT_GENERATED_FLAG|unix.DM_DATA_OUT_FLAG))
	name, uuid := b.getStr(offName), b.getStr(offUUID)
	b.u32(offDataSize, headerMin)
	switch cmd {
	case unix.DM_LIST_VERSIONS, unix.DM_GET_TARGET_VERSION:
		return k.listVersions(b, size, cmd == unix.DM_GET_TARGET_VERSION, name)
	case unix.DM_LIST_DEVICES:
		k.listDevices(b, size)
		return nil
	case unix.DM_DEV_CREATE:
		if !validName(name) {
			return unix.EINVAL
		}
		for _, d := range k.devs {
			if d.Name == name || (uuid != "" && d.UUID == uuid) {
				return unix.EBUSY // dm_hash_insert
			}
		}
		k.devStatus(b, k.create(name, uuid))
		return nil
	}
	d, ok := k.devs[name]
	if !ok {
		return unix.ENXIO
	}
	switch cmd {
	case unix.DM_DEV_STATUS:
	case unix.DM_TABLE_LOAD:
		t, err := populateTable(b, size)
		if err != nil {
			return err
		}
		for _, tg := range t {
			if _, ok := k.targets[tg.Type]; !ok {
				return unix.EINVAL // dm_get_target_type
			}
		}
		d.Inactive = t
	case unix.DM_TABLE_CLEAR:
		d.Inactive = nil
	case unix.DM_DEV_SUSPEND:
		if b.getU32(offFlags)&unix.DM_SUSPEND_FLAG != 0 {
			d.Suspended = true
		} else {
			if d.Inactive != nil {
				d.Live, d.Inactive = d.Inactive, nil
			}
			d.Suspended = false
			d.EventNr++
		}
	case unix.DM_DEV_REMOVE:
		if d.OpenCount > 0 {
			return unix.EBUSY
		}
		delete(k.devs, name)
		return nil
	case unix.DM_TABLE_STATUS:
		k.devStatus(b, d)
		t := d.Live
		if b.getU32(offFlags)&unix.DM_QUERY_INACTIVE_TABLE_FLAG != 0 {
			t = d.Inactive
		}
		return k.retrieveStatus(b, size, d, t)
	case unix.DM_TARGET_MSG:
		return k.targetMessage(b, size, d)
	default:
		return unix.ENOTTY
	}
	k.devStatus(b, d)
	return nil
}

// devStatus fills the header like __dev_status and find_device.
func (k *Kernel) devStatus(b buf, d *device) {
	flags := b.getU32(offFlags) &^ (unix.DM_SUSPEND_FLAG | unix.DM_READONLY_FLAG | unix.DM_ACTIVE_PRESENT_FLAG | unix.DM_INACTIVE_PRESENT_FLAG)
	if d.Suspended {
		flags |= unix.DM_SUSPEND_FLAG
	}
	if d.Live != nil {
		flags |= unix.DM_ACTIVE_PRESENT_FLAG
	}
	if d.Inactive != nil {
		flags |= unix.DM_INACTIVE_PRESENT_FLAG
	}
	// huge_encode_dev
	dev := uint64(d.Minor&0xff | d.Major<<8 | (d.Minor&^0xff)<<12)
	b.u32(offFlags, flags).u32(offOpenCount, uint32(d.OpenCount)).u32(offEventNr, d.EventNr).
		u32(offTargetCount, uint32(len(d.Live))).u64(offDev, dev)
	clear(b[offName : offName+nameLen])
	clear(b[offUUID : offUUID+uuidLen])
	b.str(offName, d.Name).str(offUUID, d.UUID)
}

// populateTable reads the dm_target_specs of a DM_TABLE_LOAD.
func populateTable(b buf, size int) (dm.Table, error) {
	n := int(b.getU32(offTargetCount))
	if n == 0 {
		return nil, unix.EINVAL
	}
	var t dm.Table
	spec, next := 0, int(b.getU32(offDataStart))
	for range n {
		if next < specSize || next%8 != 0 || spec+next+specSize >= size {
			return nil, unix.EINVAL
		}
		spec += next
		params, ok := cstring(b[spec+specSize : size])
		if !ok {
			return nil, unix.EINVAL
		}
		t = append(t, dm.Target{Start: b.getU64(spec), Length: b.getU64(spec + 8), Type: b.getStr(spec + 24), Params: params})
		next = int(b.getU32(spec + 20))
	}
	return t, nil
}

// retrieveStatus writes the table or status of t after the header.
func (k *Kernel) retrieveStatus(b buf, size int, d *device, t dm.Table) error {
	status := ""
	if b.getU32(offFlags)&unix.DM_STATUS_TABLE_FLAG == 0 && len(t) > 0 && d.status != nil {
		d.statusN++
		s, err := d.status(StatusQuery{Device: d.Name, N: d.statusN, Live: slices.Clone(t), Messages: slices.Clone(d.messages)})
		if err != nil {
			return err
		}
		status = s
	}
	b.u32(offDataStart, headerSize).u32(offTargetCount, uint32(len(t)))
	out, used := headerSize, 0
	for _, tg := range t {
		text := tg.Params
		if b.getU32(offFlags)&unix.DM_STATUS_TABLE_FLAG == 0 {
			text = status
		}
		if size-out <= specSize || size-out-specSize <= len(text)+1 {
			b.setFlag(unix.DM_BUFFER_FULL_FLAG)
			return nil
		}
		b.u64(out, tg.Start).u64(out+8, tg.Length).str(out+24, tg.Type).str(out+specSize, text)
		used = out + specSize + len(text) + 1
		next := (used + 7) &^ 7
		b.u32(out+20, uint32(next-headerSize))
		out = next
	}
	if used > 0 {
		b.u32(offDataSize, uint32(used))
	}
	return nil
}

// targetMessage delivers a DM_TARGET_MSG and writes the target's reply.
func (k *Kernel) targetMessage(b buf, size int, d *device) error {
	start := int(b.getU32(offDataStart))
	if start+8 >= size {
		return unix.EINVAL
	}
	msg := b.getStr(start + 8)
	if d.Live == nil || msg == "" {
		return unix.EINVAL
	}
	reply := ""
	if k.message != nil {
		r, err := k.message(d.Name, msg)
		if err != nil {
			return err
		}
		reply = r
	}
	d.messages = append(d.messages, msg)
	k.devStatus(b, d)
	if reply == "" {
		return nil
	}
	b.u32(offDataStart, headerSize)
	if headerSize+len(reply)+1 >= size {
		b.setFlag(unix.DM_DATA_OUT_FLAG | unix.DM_BUFFER_FULL_FLAG)
		return nil
	}
	b.str(headerSize, reply)
	b.setFlag(unix.DM_DATA_OUT_FLAG).u32(offDataSize, uint32(headerSize+len(reply)+1))
	return nil
}

// listDevices writes the dm_name_list of DM_LIST_DEVICES.
func (k *Kernel) listDevices(b buf, size int) {
	names := make([]string, 0, len(k.devs))
	for n := range k.devs {
		names = append(names, n)
	}
	slices.Sort(names)
	withUUID := b.getU32(offFlags)&unix.DM_UUID_FLAG != 0
	var out buf
	prev := -1
	for _, n := range names {
		d := k.devs[n]
		off := len(out)
		if prev >= 0 {
			out.u32(prev+8, uint32(off-prev))
		}
		prev = off
		rec := buf(make([]byte, (12+len(n)+1+7)&^7+8))
		rec.u64(0, uint64(d.Minor&0xff|d.Major<<8)).str(12, n)
		flags := uint32(0)
		if withUUID {
			flags = 2 // DM_NAME_LIST_FLAG_DOESNT_HAVE_UUID
			if d.UUID != "" {
				flags = 1 // DM_NAME_LIST_FLAG_HAS_UUID
			}
		}
		rec.u32(len(rec)-8, d.EventNr).u32(len(rec)-4, flags)
		out = append(out, rec...)
		if flags == 1 {
			padded := (len(d.UUID) + 1 + 7) &^ 7
			out = append(out, make([]byte, padded)...)
			out.str(len(out)-padded, d.UUID)
		}
	}
	b.u32(offDataStart, headerSize)
	if size-headerSize < len(out) || size-headerSize < 8 {
		b.setFlag(unix.DM_BUFFER_FULL_FLAG)
		return
	}
	b.u64(headerSize, 0)
	copy(b[headerSize:], out)
	b.u32(offDataSize, uint32(headerSize+len(out)))
}

// listVersions writes the dm_target_versions of DM_LIST_VERSIONS, or of
// one target for DM_GET_TARGET_VERSION.
func (k *Kernel) listVersions(b buf, size int, one bool, name string) error {
	names := make([]string, 0, len(k.targets))
	for n := range k.targets {
		if !one || n == name {
			names = append(names, n)
		}
	}
	if one && len(names) == 0 {
		return unix.EINVAL
	}
	slices.Sort(names)
	var out buf
	prev := -1
	for _, n := range names {
		v := k.targets[n]
		off := len(out)
		if prev >= 0 {
			out.u32(prev, uint32(off-prev))
		}
		prev = off
		rec := buf(make([]byte, (16+len(n)+1+7)&^7))
		rec.u32(4, v.Major).u32(8, v.Minor).u32(12, v.Patch).str(16, n)
		out = append(out, rec...)
	}
	b.u32(offDataStart, headerSize)
	if size-headerSize < len(out) {
		b.setFlag(unix.DM_BUFFER_FULL_FLAG)
		return nil
	}
	copy(b[headerSize:], out)
	b.u32(offDataSize, uint32(headerSize+len(out)))
	return nil
}
