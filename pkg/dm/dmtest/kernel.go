// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package dmtest is a fake device-mapper for host tests: a Kernel that
// answers the ioctls of /dev/mapper/control on their byte buffers the way
// drivers/md/dm-ioctl.c does, behind a real *dm.Client (Kernel.Client).
// Code that takes a *dm.Client runs against it unchanged, on a host
// without device-mapper.
//
// The Kernel keeps devices with a live and an inactive table, their
// suspend state, open count and the messages sent to them, and the target
// types it knows with their versions. What a target would report is up to
// the test: SetStatus gives a device a fixed status text, SetStatusFunc a
// function asked on every status read (a write cache whose dirty count
// falls, stalls, or turns to an error). Fail makes chosen ioctls fail with
// an errno; Calls records every ioctl with its outcome.
//
// The fake checks what the kernel checks at the ioctl level (versions,
// buffer sizes, names, an existing device) and nothing a target checks: any
// table with targets loads. It reads and writes buffers with its own
// offsets, written out from include/uapi/linux/dm-ioctl.h, not with
// package dm's encoders, so a test of dm against it checks those.
package dmtest

import (
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tidecache/tidecache/pkg/dm"
)

// Op names an ioctl as the fake tells them apart.
type Op string

// The ioctls. Suspend and Resume are both DM_DEV_SUSPEND; Table and
// Status both DM_TABLE_STATUS (Table for the live or inactive table text).
const (
	OpVersion        Op = "version"
	OpListVersions   Op = "list-versions"
	OpTargetVersion  Op = "target-version"
	OpList           Op = "list"
	OpCreate         Op = "create"
	OpInfo           Op = "info"
	OpLoad           Op = "load"
	OpClear          Op = "clear"
	OpSuspend        Op = "suspend"
	OpResume         Op = "resume"
	OpRemove         Op = "remove"
	OpStatus         Op = "status"
	OpTable          Op = "table"
	OpMessage        Op = "message"
	OpUnknownCommand Op = "unknown"
)

// Call is one ioctl the Kernel answered.
type Call struct {
	Op     Op
	Device string // device name, or target type for OpTargetVersion; "" for others
	// Message is the message text of an OpMessage.
	Message string
	// Err is the errno returned, or nil.
	Err error
}

// Failure makes ioctls fail. Op and Device select the calls (Device ""
// matches every device); counting from when Fail is called, the Nth
// matching call (1 for the next one) and the Times-1 after it fail with
// Errno, without any effect.
type Failure struct {
	Op     Op
	Device string
	Nth    int // 0 means 1
	Times  int // 0 means 1; negative: every call from the Nth on
	Errno  syscall.Errno
}

// StatusQuery is what a StatusFunc is told about a status read.
type StatusQuery struct {
	Device string
	// N counts the status reads of this device since SetStatusFunc, from 1.
	N int
	// Live is the live table being reported.
	Live dm.Table
	// Messages are the messages the device has received so far, oldest
	// first.
	Messages []string
}

// StatusFunc returns the status text every target of a device reports
// (what follows the target type in `dmsetup status`), or an errno to fail
// the read with. It runs with the Kernel locked: it must not call the
// Kernel or the Client.
type StatusFunc func(StatusQuery) (string, error)

// MessageFunc answers a message sent to a device: the reply text, or an
// errno to fail the ioctl with. It runs with the Kernel locked.
type MessageFunc func(device, msg string) (reply string, err error)

// Device is a snapshot of one fake device.
type Device struct {
	Name, UUID     string
	Major, Minor   uint32
	Live, Inactive dm.Table
	Suspended      bool
	OpenCount      int32
	EventNr        uint32
	// Messages are the messages received, oldest first.
	Messages []string
}

// Kernel is a fake device-mapper. Its methods are safe for concurrent use
// with the Clients talking to it.
type Kernel struct {
	mu         sync.Mutex
	devs       map[string]*device
	nextMinor  uint32
	targets    map[string]dm.Version
	interrupts int
	failures   []*failure
	message    MessageFunc
	calls      []Call
	closed     bool
	// pendingStatus are status functions set for devices not created yet.
	pendingStatus map[string]StatusFunc
}

type device struct {
	Device
	status   StatusFunc
	statusN  int
	messages []string
}

type failure struct {
	Failure
	seen int
}

// Major is the block major number the fake gives its devices (the usual
// dynamic major of device-mapper).
const Major = 253

// New returns a Kernel without devices that knows the linear, writecache,
// cache and zero targets.
func New() *Kernel {
	return &Kernel{
		devs: map[string]*device{},
		targets: map[string]dm.Version{
			"linear": {Major: 1, Minor: 4}, "writecache": {Major: 1, Minor: 6}, "cache": {Major: 2, Minor: 3},
			"zero": {Major: 1, Minor: 2},
		},
	}
}

// Client returns a *dm.Client talking to k, closed at the end of the test.
// It makes no device nodes (its device directory is "").
func (k *Kernel) Client(t testing.TB) *dm.Client {
	c := dm.NewClient(k, "")
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// SetTarget makes a target type known with version v, as loading its
// module would.
func (k *Kernel) SetTarget(target string, v dm.Version) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.targets[target] = v
}

// RemoveTarget forgets a target type, as if its module were not loaded.
func (k *Kernel) RemoveTarget(target string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.targets, target)
}

// Targets returns the target types the kernel knows, with their versions.
func (k *Kernel) Targets() map[string]dm.Version {
	k.mu.Lock()
	defer k.mu.Unlock()
	m := make(map[string]dm.Version, len(k.targets))
	for n, v := range k.targets {
		m[n] = v
	}
	return m
}

// AddDevice creates a device with live table, resumed, as if a Client had
// created, loaded and resumed it. It panics if the name is taken.
func (k *Kernel) AddDevice(name, uuid string, live dm.Table) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.devs[name]; ok {
		panic("dmtest: AddDevice: device " + name + " exists")
	}
	d := k.create(name, uuid)
	d.Live = slices.Clone(live)
}

// Device returns a snapshot of a device.
func (k *Kernel) Device(name string) (Device, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	d, ok := k.devs[name]
	if !ok {
		return Device{}, false
	}
	s := d.Device
	s.Live, s.Inactive = slices.Clone(d.Live), slices.Clone(d.Inactive)
	s.Messages = slices.Clone(d.messages)
	return s, true
}

// Devices returns the names of all devices, sorted.
func (k *Kernel) Devices() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	names := make([]string, 0, len(k.devs))
	for n := range k.devs {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// SetOpenCount sets how many times a device is open (mounted, held by
// another device); an open device cannot be removed (EBUSY).
func (k *Kernel) SetOpenCount(name string, n int32) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.mustDev(name).OpenCount = n
}

// SetStatus makes every target of a device report text as its status.
func (k *Kernel) SetStatus(name, text string) {
	k.SetStatusFunc(name, func(StatusQuery) (string, error) { return text, nil })
}

// SetStatusFunc makes fn answer the status reads of a device; nil makes
// the targets report an empty status. A device that does not exist yet
// gets fn when it is created (the code under test creates it).
func (k *Kernel) SetStatusFunc(name string, fn StatusFunc) {
	k.mu.Lock()
	defer k.mu.Unlock()
	d, ok := k.devs[name]
	if !ok {
		if k.pendingStatus == nil {
			k.pendingStatus = map[string]StatusFunc{}
		}
		k.pendingStatus[name] = fn
		return
	}
	d.status, d.statusN = fn, 0
}

// SetMessageFunc makes fn answer every message; by default a message to a
// device with a live table is accepted with no reply.
func (k *Kernel) SetMessageFunc(fn MessageFunc) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.message = fn
}

// Fail makes matching calls fail (see Failure).
func (k *Kernel) Fail(f Failure) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if f.Nth == 0 {
		f.Nth = 1
	}
	if f.Times == 0 {
		f.Times = 1
	}
	k.failures = append(k.failures, &failure{Failure: f})
}

// Interrupt makes the next n ioctls fail with EINTR, as a signal would.
func (k *Kernel) Interrupt(n int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.interrupts = n
}

// Calls returns the ioctls answered so far, oldest first.
func (k *Kernel) Calls() []Call {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.calls)
}

// CallsOf returns the calls of the given ops on a device ("" for any),
// oldest first.
func (k *Kernel) CallsOf(device string, ops ...Op) []Call {
	var out []Call
	for _, c := range k.Calls() {
		if (device == "" || c.Device == device) && (len(ops) == 0 || slices.Contains(ops, c.Op)) {
			out = append(out, c)
		}
	}
	return out
}

// ResetCalls forgets the calls recorded so far.
func (k *Kernel) ResetCalls() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.calls = nil
}

// Closed reports whether the Client closed the control device.
func (k *Kernel) Closed() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.closed
}

// Close implements dm.Control.
func (k *Kernel) Close() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.closed = true
	return nil
}

func (k *Kernel) mustDev(name string) *device {
	d, ok := k.devs[name]
	if !ok {
		panic("dmtest: no device " + name)
	}
	return d
}

func (k *Kernel) create(name, uuid string) *device {
	d := &device{Device: Device{Name: name, UUID: uuid, Major: Major, Minor: k.nextMinor}}
	k.nextMinor++
	k.devs[name] = d
	if fn, ok := k.pendingStatus[name]; ok {
		d.status = fn
		delete(k.pendingStatus, name)
	}
	return d
}

// inject returns the errno of the first failure matching a call, counting
// the call against every matching failure.
func (k *Kernel) inject(op Op, dev string) error {
	var err error
	for _, f := range k.failures {
		if f.Op != op || (f.Device != "" && f.Device != dev) {
			continue
		}
		f.seen++
		if err == nil && f.seen >= f.Nth && (f.Times < 0 || f.seen < f.Nth+f.Times) {
			err = f.Errno
		}
	}
	return err
}

// opOf tells the ioctls apart as Op does.
func opOf(cmd uintptr, flags uint32) Op {
	switch cmd {
	case unix.DM_VERSION:
		return OpVersion
	case unix.DM_LIST_VERSIONS:
		return OpListVersions
	case unix.DM_GET_TARGET_VERSION:
		return OpTargetVersion
	case unix.DM_LIST_DEVICES:
		return OpList
	case unix.DM_DEV_CREATE:
		return OpCreate
	case unix.DM_DEV_STATUS:
		return OpInfo
	case unix.DM_TABLE_LOAD:
		return OpLoad
	case unix.DM_TABLE_CLEAR:
		return OpClear
	case unix.DM_DEV_SUSPEND:
		if flags&unix.DM_SUSPEND_FLAG != 0 {
			return OpSuspend
		}
		return OpResume
	case unix.DM_DEV_REMOVE:
		return OpRemove
	case unix.DM_TABLE_STATUS:
		if flags&unix.DM_STATUS_TABLE_FLAG != 0 {
			return OpTable
		}
		return OpStatus
	case unix.DM_TARGET_MSG:
		return OpMessage
	}
	return OpUnknownCommand
}

// validName is what dm-ioctl.c's check_name and dm_hash_insert accept.
func validName(name string) bool {
	return name != "" && !strings.Contains(name, "/")
}
