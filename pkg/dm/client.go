// SPDX-License-Identifier: Apache-2.0

//go:build linux

package dm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	// defaultBufferSize is the first buffer offered for replies that carry
	// data (libdevmapper starts at 16 KiB too); it doubles on
	// DM_BUFFER_FULL_FLAG up to maxBufferSize.
	defaultBufferSize = 16 << 10
	maxBufferSize     = 64 << 20
	// maxInterrupts bounds the retries of an ioctl interrupted by a
	// signal (EINTR).
	maxInterrupts = 1000
)

// Control is the open control device as a Client uses it: Open uses
// /dev/mapper/control, host tests a fake kernel (package dmtest).
type Control interface {
	// Ioctl issues one device-mapper ioctl (cmd is unix.DM_*) on buf, a
	// struct dm_ioctl with its payload that the kernel rewrites with its
	// reply, and returns the errno (a unix.Errno), or nil.
	Ioctl(cmd uintptr, buf []byte) error
	// Close releases the control device. Client.Close calls it once.
	Close() error
}

type controlFD int

func (fd controlFD) Ioctl(cmd uintptr, buf []byte) error {
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), cmd, uintptr(unsafe.Pointer(&buf[0])))
	if e != 0 {
		return e
	}
	return nil
}

func (fd controlFD) Close() error { return unix.Close(int(fd)) }

// Client talks to the kernel through /dev/mapper/control. It is safe for
// concurrent use; the kernel serialises what needs serialising. Close
// waits for ioctls in flight.
type Client struct {
	mu      sync.RWMutex
	ctl     Control // nil once closed
	devDir  string  // where device nodes live: /dev/mapper
	bufSize int     // first buffer size for replies with data
	// udev reports whether udevd runs, so that resumes and removes carry
	// a cookie and wait for its rules (udev.go); never for NewClient.
	udev func() bool
	// udevFlags gives a device's udev flags by its dm UUID (SetUdevFlags).
	udevFlags func(uuid string) UdevFlags
}

// Open opens /dev/mapper/control, creating the node (char 10:236, or the
// minor /proc/misc lists for device-mapper) if it is missing or wrong, and
// checks that the kernel speaks ioctl interface version 4. The caller
// closes the Client.
func Open() (*Client, error) {
	path := filepath.Join(mapperDir, controlName)
	fd, err := openControl(path)
	if err != nil {
		return nil, err
	}
	c := &Client{ctl: controlFD(fd), devDir: mapperDir, bufSize: defaultBufferSize, udev: udevRunning}
	v, err := c.Version(context.Background())
	if err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("dm: %s does not answer DM_VERSION: %w", path, err)
	}
	if v.Major != ioctlMajor {
		_ = c.Close()
		return nil, fmt.Errorf("dm: kernel speaks ioctl interface %s, want %d.x", v, ioctlMajor)
	}
	return c, nil
}

// NewClient returns a Client that issues its ioctls on ctl instead of
// /dev/mapper/control, and creates and removes device nodes in devDir (""
// for none). Unlike Open it issues no ioctl. The Client owns ctl:
// Client.Close closes it. Host tests use it with a fake kernel (package
// dmtest); production code uses Open.
func NewClient(ctl Control, devDir string) *Client {
	return &Client{ctl: ctl, devDir: devDir, bufSize: defaultBufferSize, udev: func() bool { return false }}
}

// SetUdevFlags sets the udev flags of each device, by its dm UUID, that
// resumes and removes pass to udev's dm rules when udevd runs: for
// instance UdevInner for the devices inside a stack. Every device also
// gets UdevPrimarySource. Call it before the Client is shared.
func (c *Client) SetUdevFlags(flags func(uuid string) UdevFlags) { c.udevFlags = flags }

// withUdev runs the ioctl of q with a udev cookie when udevd runs, and
// waits until udev has handled the device's event (at most UdevTimeout),
// so that its links exist when the caller goes on. Without udev, or when
// no cookie can be made, it runs q alone.
func (c *Client) withUdev(ctx context.Context, q request) (ioctlHeader, error) {
	if !c.udev() {
		h, _, err := c.do(ctx, q)
		return h, err
	}
	flags := UdevPrimarySource
	if c.udevFlags != nil {
		if info, err := c.Info(ctx, q.name); err == nil {
			flags |= c.udevFlags(info.UUID)
		}
	}
	sync, err := beginUdev(flags)
	if err != nil {
		h, _, err := c.do(ctx, q)
		return h, err
	}
	q.eventNr = sync.cookie
	h, _, err := c.do(ctx, q)
	if err != nil {
		sync.destroy()
		return h, err
	}
	sync.end(ctx, h.Flags, UdevTimeout)
	return h, nil
}

func openControl(path string) (int, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err == nil {
		return fd, nil
	}
	// ENOENT: no node (no udev). ENODEV/ENXIO: a node with a stale number.
	if !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ENODEV) && !errors.Is(err, unix.ENXIO) {
		return -1, fmt.Errorf("dm: %w", &os.PathError{Op: "open", Path: path, Err: err})
	}
	dev := unix.Mkdev(miscMajor, controlMinor(procMisc))
	if err := ensureNode(filepath.Dir(path), filepath.Base(path), unix.S_IFCHR, dev); err != nil {
		return -1, fmt.Errorf("dm: create control node: %w", err)
	}
	fd, err = unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("dm: %w (is the dm-mod module loaded?)", &os.PathError{Op: "open", Path: path, Err: err})
	}
	return fd, nil
}

// Close releases the control device. It waits for ioctls in flight; later
// calls fail with ErrClosed.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctl == nil {
		return nil
	}
	err := c.ctl.Close()
	c.ctl = nil
	if err != nil {
		return fmt.Errorf("dm: close control device: %w", err)
	}
	return nil
}

// Version returns the kernel's ioctl interface version, e.g. 4.47.0 on
// Linux 6.1.
func (c *Client) Version(ctx context.Context) (Version, error) {
	h, _, err := c.do(ctx, request{op: opVersion, cmd: unix.DM_VERSION})
	if err != nil {
		return Version{}, err
	}
	return Version{h.Version[0], h.Version[1], h.Version[2]}, nil
}

// TargetVersions lists the target types the kernel has loaded
// (DM_LIST_VERSIONS). Targets whose module is not loaded yet are absent;
// TargetVersion loads the module.
func (c *Client) TargetVersions(ctx context.Context) (map[string]Version, error) {
	q := request{op: opListVersions, cmd: unix.DM_LIST_VERSIONS, grow: true}
	_, data, err := c.doData(ctx, q)
	if err != nil {
		return nil, err
	}
	vers, err := decodeTargetVersions(data)
	if err != nil {
		return nil, q.wrap(err)
	}
	return vers, nil
}

// TargetVersion returns the version of one target type
// (DM_GET_TARGET_VERSION, ioctl 4.41+, Linux 5.4+). The kernel loads the
// target's module (dm-<type>) if needed; an unknown type is an
// *IoctlError with EINVAL, an older kernel answers ENOTTY.
func (c *Client) TargetVersion(ctx context.Context, target string) (Version, error) {
	q := request{op: opTargetVersion, cmd: unix.DM_GET_TARGET_VERSION, name: target, grow: true}
	if target == "" || len(target) > MaxTypeLen || strings.ContainsAny(target, "/ \x00") {
		return Version{}, q.wrap(fmt.Errorf("invalid target type %q", target))
	}
	_, data, err := c.doData(ctx, q)
	if err != nil {
		return Version{}, err
	}
	vers, err := decodeTargetVersions(data)
	if err != nil {
		return Version{}, q.wrap(err)
	}
	v, ok := vers[target]
	if !ok {
		return Version{}, q.wrap(fmt.Errorf("reply does not list target %q", target))
	}
	return v, nil
}

// List returns every device-mapper device, tidecache's or not, with its
// UUID where the kernel reports it (Linux 5.13+).
func (c *Client) List(ctx context.Context) ([]Device, error) {
	q := request{op: opList, cmd: unix.DM_LIST_DEVICES, flags: unix.DM_UUID_FLAG, grow: true}
	_, data, err := c.doData(ctx, q)
	if err != nil {
		return nil, err
	}
	devs, err := decodeNameList(data)
	if err != nil {
		return nil, q.wrap(err)
	}
	return devs, nil
}

// Info returns the state of a device; ErrNotFound if there is none.
func (c *Client) Info(ctx context.Context, name string) (DeviceInfo, error) {
	h, _, err := c.do(ctx, request{op: opInfo, cmd: unix.DM_DEV_STATUS, name: name})
	if err != nil {
		return DeviceInfo{}, err
	}
	return deviceInfo(h), nil
}

// Create creates a device with no table. uuid may be empty; tidecache gives
// every device a UUID marking it as its own. ErrExists if the name or the
// UUID is taken.
func (c *Client) Create(ctx context.Context, name, uuid string) (DeviceInfo, error) {
	q := request{op: opCreate, cmd: unix.DM_DEV_CREATE, name: name, uuid: uuid}
	if err := ValidateUUID(uuid); err != nil {
		return DeviceInfo{}, q.wrap(err)
	}
	h, _, err := c.do(ctx, q)
	if err != nil {
		return DeviceInfo{}, err
	}
	return deviceInfo(h), nil
}

// Load loads table into the device's inactive slot, replacing a table
// loaded there before. Resume makes it live. The kernel checks the table
// (devices exist, target arguments parse) and refuses it with EINVAL; its
// log says why.
func (c *Client) Load(ctx context.Context, name string, table Table) error {
	q := request{op: opLoad, cmd: unix.DM_TABLE_LOAD, name: name}
	if err := table.Validate(); err != nil {
		return q.wrap(err)
	}
	q.targetCount = uint32(len(table))
	q.payload = encodeTargets(table)
	_, _, err := c.do(ctx, q)
	return err
}

// ClearInactive drops a table loaded but not resumed.
func (c *Client) ClearInactive(ctx context.Context, name string) error {
	_, _, err := c.do(ctx, request{op: opClear, cmd: unix.DM_TABLE_CLEAR, name: name})
	return err
}

// Suspend suspends a device: new I/O is queued and, unless opts.NoFlush,
// I/O in flight is flushed first; a filesystem on it is frozen unless
// opts.SkipLockfs. Suspending a suspended device does nothing. The ioctl
// can block for long (until the flush completes) and cannot be cancelled.
func (c *Client) Suspend(ctx context.Context, name string, opts SuspendOptions) error {
	flags := uint32(unix.DM_SUSPEND_FLAG)
	if opts.NoFlush {
		flags |= unix.DM_NOFLUSH_FLAG
	}
	if opts.SkipLockfs {
		flags |= unix.DM_SKIP_LOCKFS_FLAG
	}
	_, _, err := c.do(ctx, request{op: opSuspend, cmd: unix.DM_DEV_SUSPEND, name: name, flags: flags})
	return err
}

// Resume makes a loaded inactive table live (suspending the device first
// if needed) and resumes I/O. Then it makes sure /dev/mapper/<name> is a
// block node with the device's number, creating or replacing it; an error
// doing so is returned, but the device is resumed by then.
func (c *Client) Resume(ctx context.Context, name string) error {
	q := request{op: opResume, cmd: unix.DM_DEV_SUSPEND, name: name}
	h, err := c.withUdev(ctx, q)
	if err != nil {
		return err
	}
	if c.devDir == "" {
		return nil
	}
	if err := ensureNode(c.devDir, name, unix.S_IFBLK, h.Dev); err != nil {
		return q.wrap(fmt.Errorf("device resumed, but its node: %w", err))
	}
	return nil
}

// Remove removes a device and its /dev/mapper node. ErrBusy if the device
// is open (mounted, held by another dm device, opened by a process);
// ErrNotFound if there is no such device.
func (c *Client) Remove(ctx context.Context, name string) error {
	q := request{op: opRemove, cmd: unix.DM_DEV_REMOVE, name: name}
	if _, err := c.withUdev(ctx, q); err != nil {
		return err
	}
	if c.devDir == "" {
		return nil
	}
	if err := removeNode(c.devDir, name); err != nil {
		return q.wrap(fmt.Errorf("device removed, but its node: %w", err))
	}
	return nil
}

// Status returns the live table with each target's status text in Params
// (what `dmsetup status` prints). A device without a live table gives an
// empty Table.
func (c *Client) Status(ctx context.Context, name string) (Table, error) {
	return c.tableStatus(ctx, request{op: opStatus, cmd: unix.DM_TABLE_STATUS, name: name, grow: true})
}

// Table returns the live table as the kernel prints it (`dmsetup table`):
// devices appear as major:minor and options in the target's own order.
func (c *Client) Table(ctx context.Context, name string) (Table, error) {
	return c.tableStatus(ctx, request{op: opTable, cmd: unix.DM_TABLE_STATUS, name: name,
		flags: unix.DM_STATUS_TABLE_FLAG, grow: true})
}

// InactiveTable returns the table loaded but not yet resumed, empty if
// there is none (`dmsetup table --inactive`).
func (c *Client) InactiveTable(ctx context.Context, name string) (Table, error) {
	return c.tableStatus(ctx, request{op: opInactiveTable, cmd: unix.DM_TABLE_STATUS, name: name,
		flags: unix.DM_STATUS_TABLE_FLAG | unix.DM_QUERY_INACTIVE_TABLE_FLAG, grow: true})
}

func (c *Client) tableStatus(ctx context.Context, q request) (Table, error) {
	h, data, err := c.doData(ctx, q)
	if err != nil {
		return nil, err
	}
	t, err := decodeTargets(data, h.TargetCount)
	if err != nil {
		return nil, q.wrap(err)
	}
	return t, nil
}

// Message sends msg to the target of the live table that covers sector
// (0 for single-target tables), e.g. "flush" or "cleaner" to
// dm-writecache, and returns the target's reply text, if any. If the reply
// does not fit the buffer the message is sent again with a larger one, so
// only messages that are safe to repeat should expect long replies.
func (c *Client) Message(ctx context.Context, name string, sector uint64, msg string) (string, error) {
	q := request{op: opMessage, cmd: unix.DM_TARGET_MSG, name: name, grow: true}
	if strings.TrimSpace(msg) == "" || strings.ContainsRune(msg, 0) {
		return "", q.wrap(fmt.Errorf("invalid message %q", msg))
	}
	q.payload = encodeTargetMsg(sector, msg)
	h, data, err := c.doData(ctx, q)
	if err != nil {
		return "", err
	}
	reply, err := decodeMessageReply(data, h.Flags)
	if err != nil {
		return "", q.wrap(err)
	}
	return reply, nil
}

// request is one ioctl call before marshalling.
type request struct {
	op          string // for errors
	cmd         uintptr
	name        string // device (or target type) name in the header
	uuid        string // DM_DEV_CREATE only
	flags       uint32
	eventNr     uint32 // a udev cookie for resume and remove
	targetCount uint32
	payload     []byte
	grow        bool // the reply carries data: offer a buffer, grow it on DM_BUFFER_FULL_FLAG
}

// wrap gives an error the "dm <op> <name>: " context.
func (q request) wrap(err error) error {
	if q.name == "" {
		return fmt.Errorf("dm %s: %w", q.op, err)
	}
	return fmt.Errorf("dm %s %s: %w", q.op, q.name, err)
}

// needsName reports whether the command addresses one device.
func (q request) needsName() bool {
	switch q.cmd {
	case unix.DM_VERSION, unix.DM_LIST_DEVICES, unix.DM_LIST_VERSIONS, unix.DM_GET_TARGET_VERSION:
		return false
	}
	return true
}

// marshal builds the ioctl buffer: header, then payload at data_start.
func (q request) marshal(size int) []byte {
	buf := alignedBuffer(size)
	h := ioctlHeader{
		Version:     [3]uint32{ioctlMajor, 0, 0},
		DataSize:    uint32(size),
		DataStart:   headerSize,
		TargetCount: q.targetCount,
		Flags:       q.flags,
		EventNr:     q.eventNr,
		Name:        q.name,
		UUID:        q.uuid,
	}
	h.marshal(buf)
	copy(buf[headerSize:], q.payload)
	return buf
}

// do runs one request: it checks ctx, issues the ioctl, retries on EINTR
// (the Go runtime's signals interrupt waits such as a suspend's flush) and
// on DM_BUFFER_FULL_FLAG with a buffer twice as large, and returns the
// reply header and buffer.
// doData issues an ioctl and returns the reply header with its data area.
func (c *Client) doData(ctx context.Context, q request) (ioctlHeader, []byte, error) {
	h, buf, err := c.do(ctx, q)
	if err != nil {
		return h, nil, err
	}
	data, err := replyData(buf, h)
	if err != nil {
		return h, nil, q.wrap(err)
	}
	return h, data, nil
}

func (c *Client) do(ctx context.Context, q request) (ioctlHeader, []byte, error) {
	if q.needsName() {
		if err := ValidateName(q.name); err != nil {
			return ioctlHeader{}, nil, q.wrap(err)
		}
	}
	size := headerSize + len(q.payload)
	if q.grow {
		size = max(size, c.bufSize, headerSize+8)
	}
	interrupts := 0
	for {
		if err := ctx.Err(); err != nil {
			return ioctlHeader{}, nil, q.wrap(err)
		}
		buf := q.marshal(size)
		err := c.ioctl(q.cmd, buf)
		if errors.Is(err, unix.EINTR) && interrupts < maxInterrupts {
			interrupts++
			continue
		}
		var errno unix.Errno
		if errors.As(err, &errno) {
			return ioctlHeader{}, nil, &IoctlError{Op: q.op, Name: q.name, Errno: errno}
		}
		if err != nil {
			return ioctlHeader{}, nil, q.wrap(err)
		}
		h, err := unmarshalHeader(buf)
		if err != nil {
			return ioctlHeader{}, nil, q.wrap(err)
		}
		if h.Flags&unix.DM_BUFFER_FULL_FLAG == 0 {
			return h, buf, nil
		}
		if !q.grow || size >= maxBufferSize {
			return ioctlHeader{}, nil, q.wrap(fmt.Errorf("reply does not fit in %d bytes", size))
		}
		size = min(2*size, maxBufferSize)
	}
}

func (c *Client) ioctl(cmd uintptr, buf []byte) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.ctl == nil {
		return ErrClosed
	}
	return c.ctl.Ioctl(cmd, buf)
}
