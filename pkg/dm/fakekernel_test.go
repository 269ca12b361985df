//go:build linux

package dm

import (
	"slices"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// fakeKernel answers device-mapper ioctls on a byte buffer the way
// drivers/md/dm-ioctl.c does, so that Client can be tested end to end on a
// host without device-mapper. It reads and writes the buffer with its own
// hand-written offsets (kbuf), not with the package's encoders.
type fakeKernel struct {
	mu         sync.Mutex
	devs       map[string]*fakeDev
	nextMinor  uint32
	targets    map[string]Version
	status     map[string]string // device name -> status text of every target
	msgReply   string            // text a target returns to any message
	interrupts int               // answer EINTR this many times first
	calls      []uintptr
	closed     bool
}

type fakeDev struct {
	name, uuid     string
	minor          uint32
	live, inactive Table
	suspended      bool
	open           int32
	event          uint32
	messages       []string
}

func newFakeKernel() *fakeKernel {
	return &fakeKernel{
		devs:      map[string]*fakeDev{},
		targets:   map[string]Version{"linear": {1, 4, 0}, "writecache": {1, 6, 0}, "cache": {2, 3, 0}},
		status:    map[string]string{},
		nextMinor: 0,
	}
}

func (k *fakeKernel) close() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.closed = true
	return nil
}

func (k *fakeKernel) ioctl(cmd uintptr, raw []byte) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.calls = append(k.calls, cmd)
	if k.interrupts > 0 {
		k.interrupts--
		return unix.EINTR
	}
	b := kbuf(raw)
	// check_version
	if b.getU32(0) != 4 || b.getU32(4) > 47 {
		return unix.EINVAL
	}
	b.u32(0, 4).u32(4, 47).u32(8, 0)
	if cmd == unix.DM_VERSION {
		return nil
	}
	size := int(b.getU32(kDataSize))
	if size < 305 || size > len(b) {
		return unix.EINVAL
	}
	// validate_params
	b.u32(kFlags, b.getU32(kFlags)&^(unix.DM_BUFFER_FULL_FLAG|unix.DM_UEVENT_GENERATED_FLAG|unix.DM_DATA_OUT_FLAG))
	name, uuid := b.getStr(kName), b.getStr(kUUID)
	b.u32(kDataSize, 305)
	switch cmd {
	case unix.DM_LIST_VERSIONS, unix.DM_GET_TARGET_VERSION:
		return k.listVersions(b, size, cmd == unix.DM_GET_TARGET_VERSION, name)
	case unix.DM_LIST_DEVICES:
		return k.listDevices(b, size)
	case unix.DM_DEV_CREATE:
		if name == "" || strings.Contains(name, "/") {
			return unix.EINVAL
		}
		for _, d := range k.devs {
			if d.name == name || (uuid != "" && d.uuid == uuid) {
				return unix.EBUSY // dm_hash_insert
			}
		}
		d := &fakeDev{name: name, uuid: uuid, minor: k.nextMinor}
		k.nextMinor++
		k.devs[name] = d
		k.devStatus(b, d)
		return nil
	}
	d, ok := k.devs[name]
	if !ok {
		return unix.ENXIO
	}
	switch cmd {
	case unix.DM_DEV_STATUS:
	case unix.DM_TABLE_LOAD:
		t, err := k.populateTable(b, size)
		if err != nil {
			return err
		}
		d.inactive = t
	case unix.DM_TABLE_CLEAR:
		d.inactive = nil
	case unix.DM_DEV_SUSPEND:
		if b.getU32(kFlags)&unix.DM_SUSPEND_FLAG != 0 {
			d.suspended = true
		} else {
			if d.inactive != nil {
				d.live, d.inactive = d.inactive, nil
			}
			d.suspended = false
			d.event++
		}
	case unix.DM_DEV_REMOVE:
		if d.open > 0 {
			return unix.EBUSY
		}
		delete(k.devs, name)
		return nil
	case unix.DM_TABLE_STATUS:
		k.devStatus(b, d)
		t := d.live
		if b.getU32(kFlags)&unix.DM_QUERY_INACTIVE_TABLE_FLAG != 0 {
			t = d.inactive
		}
		k.retrieveStatus(b, size, d, t)
		return nil
	case unix.DM_TARGET_MSG:
		start := int(b.getU32(kDataStart))
		msg := b.getStr(start + 8)
		if d.live == nil || msg == "" {
			return unix.EINVAL
		}
		d.messages = append(d.messages, msg)
		k.devStatus(b, d)
		if k.msgReply != "" {
			b.u32(kDataStart, 312)
			if 312+len(k.msgReply)+1 >= size {
				b.u32(kFlags, b.getU32(kFlags)|unix.DM_DATA_OUT_FLAG|unix.DM_BUFFER_FULL_FLAG)
			} else {
				b.str(312, k.msgReply)
				b.u32(kFlags, b.getU32(kFlags)|unix.DM_DATA_OUT_FLAG).u32(kDataSize, uint32(312+len(k.msgReply)+1))
			}
		}
		return nil
	default:
		return unix.ENOTTY
	}
	k.devStatus(b, d)
	return nil
}

// devStatus fills the header like __dev_status and find_device.
func (k *fakeKernel) devStatus(b kbuf, d *fakeDev) {
	flags := b.getU32(kFlags) &^ (unix.DM_SUSPEND_FLAG | unix.DM_READONLY_FLAG | unix.DM_ACTIVE_PRESENT_FLAG | unix.DM_INACTIVE_PRESENT_FLAG)
	if d.suspended {
		flags |= unix.DM_SUSPEND_FLAG
	}
	if d.live != nil {
		flags |= unix.DM_ACTIVE_PRESENT_FLAG
	}
	if d.inactive != nil {
		flags |= unix.DM_INACTIVE_PRESENT_FLAG
	}
	b.u32(kFlags, flags).u32(kOpenCount, uint32(d.open)).u32(kEventNr, d.event).
		u32(kTargetCount, uint32(len(d.live))).u64(kDev, uint64(d.minor&0xff|253<<8|(d.minor&^0xff)<<12))
	clear(b[kName : kName+128])
	clear(b[kUUID : kUUID+129])
	b.str(kName, d.name).str(kUUID, d.uuid)
}

func (k *fakeKernel) populateTable(b kbuf, size int) (Table, error) {
	n := int(b.getU32(kTargetCount))
	if n == 0 {
		return nil, unix.EINVAL
	}
	var t Table
	spec, next := 0, int(b.getU32(kDataStart))
	for range n {
		if next < 40 || next%8 != 0 || spec+next+40 >= size {
			return nil, unix.EINVAL
		}
		spec += next
		params, ok := cstring(b[spec+40 : size])
		if !ok {
			return nil, unix.EINVAL
		}
		t = append(t, Target{Start: b.getU64(spec), Length: b.getU64(spec + 8), Type: b.getStr(spec + 24), Params: params})
		next = int(b.getU32(spec + 20))
	}
	return t, nil
}

func (k *fakeKernel) retrieveStatus(b kbuf, size int, d *fakeDev, t Table) {
	b.u32(kDataStart, 312).u32(kTargetCount, uint32(len(t)))
	out, used := 312, 0
	for _, tg := range t {
		text := tg.Params
		if b.getU32(kFlags)&unix.DM_STATUS_TABLE_FLAG == 0 {
			text = k.status[d.name]
		}
		if size-out <= 40 || size-out-40 <= len(text)+1 {
			b.u32(kFlags, b.getU32(kFlags)|unix.DM_BUFFER_FULL_FLAG)
			return
		}
		b.u64(out, tg.Start).u64(out+8, tg.Length).str(out+24, tg.Type).str(out+40, text)
		used = out + 40 + len(text) + 1
		next := (used + 7) &^ 7
		b.u32(out+20, uint32(next-312))
		out = next
	}
	if used > 0 {
		b.u32(kDataSize, uint32(used))
	}
}

func (k *fakeKernel) listDevices(b kbuf, size int) error {
	names := make([]string, 0, len(k.devs))
	for n := range k.devs {
		names = append(names, n)
	}
	slices.Sort(names)
	withUUID := b.getU32(kFlags)&unix.DM_UUID_FLAG != 0
	var out kbuf
	prev := -1
	for _, n := range names {
		d := k.devs[n]
		off := len(out)
		if prev >= 0 {
			out.u32(prev+8, uint32(off-prev))
		}
		prev = off
		rec := kbuf(make([]byte, (12+len(n)+1+7)&^7+8))
		rec.u64(0, uint64(d.minor&0xff|253<<8)).str(12, n)
		flags := uint32(0)
		if withUUID {
			flags = 2
			if d.uuid != "" {
				flags = 1
			}
		}
		rec.u32(len(rec)-8, d.event).u32(len(rec)-4, flags)
		out = append(out, rec...)
		if flags == 1 {
			padded := (len(d.uuid) + 1 + 7) &^ 7
			out = append(out, make([]byte, padded)...)
			out.str(len(out)-padded, d.uuid)
		}
	}
	b.u32(kDataStart, 312)
	if size-312 < len(out) || size-312 < 8 {
		b.u32(kFlags, b.getU32(kFlags)|unix.DM_BUFFER_FULL_FLAG)
		return nil
	}
	b.u64(312, 0)
	copy(b[312:], out)
	b.u32(kDataSize, uint32(312+len(out)))
	return nil
}

func (k *fakeKernel) listVersions(b kbuf, size int, one bool, name string) error {
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
	var out kbuf
	prev := -1
	for _, n := range names {
		v := k.targets[n]
		off := len(out)
		if prev >= 0 {
			out.u32(prev, uint32(off-prev))
		}
		prev = off
		rec := kbuf(make([]byte, (16+len(n)+1+7)&^7))
		rec.u32(4, v.Major).u32(8, v.Minor).u32(12, v.Patch).str(16, n)
		out = append(out, rec...)
	}
	b.u32(kDataStart, 312)
	if size-312 < len(out) {
		b.u32(kFlags, b.getU32(kFlags)|unix.DM_BUFFER_FULL_FLAG)
		return nil
	}
	copy(b[312:], out)
	b.u32(kDataSize, uint32(312+len(out)))
	return nil
}
