// SPDX-License-Identifier: Apache-2.0

package dm

// Device is one entry of Client.List.
type Device struct {
	Name         string
	Major, Minor uint32
	// UUID is the device's dm UUID, or "" when it has none or the kernel
	// is too old to report UUIDs in the list (before ioctl 4.45, Linux
	// 5.13); use Client.Info then.
	UUID string
}

// DeviceInfo is the state of a device as DM_DEV_STATUS reports it.
type DeviceInfo struct {
	Name, UUID    string
	Major, Minor  uint32 // of the block device /dev/dm-<Minor>
	Suspended     bool
	ReadOnly      bool
	LiveTable     bool // a table is active
	InactiveTable bool // a table is loaded but not yet resumed
	OpenCount     int32
	TargetCount   uint32 // targets in the live table
	EventNr       uint32
}

// SuspendOptions tune Client.Suspend.
type SuspendOptions struct {
	// NoFlush suspends without flushing queued I/O (DM_NOFLUSH_FLAG): I/O
	// the target holds back stays queued. Used for targets that may hang
	// a flush, like multipath with no paths; tidecache's normal mode
	// changes flush.
	NoFlush bool
	// SkipLockfs does not freeze a filesystem mounted on the device
	// (DM_SKIP_LOCKFS_FLAG). By default the kernel freezes it so the
	// filesystem is consistent while suspended.
	SkipLockfs bool
}
