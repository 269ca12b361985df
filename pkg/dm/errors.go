// SPDX-License-Identifier: Apache-2.0

package dm

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// Sentinel errors. An *IoctlError matches them with errors.Is.
var (
	// ErrNotFound: the kernel has no device of that name (ENXIO).
	ErrNotFound = errors.New("device-mapper device not found")
	// ErrExists: Create found a device with the same name or UUID. The
	// kernel reports this as EBUSY on DM_DEV_CREATE; EEXIST is accepted
	// too.
	ErrExists = errors.New("device-mapper device already exists")
	// ErrBusy: the device is open or otherwise in use (EBUSY), for example
	// on Remove.
	ErrBusy = errors.New("device-mapper device busy")
	// ErrClosed: the Client was closed.
	ErrClosed = errors.New("device-mapper client closed")
)

// Operation names used in IoctlError.Op.
const (
	opVersion       = "version"
	opListVersions  = "list-versions"
	opTargetVersion = "target-version"
	opList          = "list"
	opInfo          = "info"
	opCreate        = "create"
	opLoad          = "load"
	opClear         = "clear"
	opSuspend       = "suspend"
	opResume        = "resume"
	opRemove        = "remove"
	opStatus        = "status"
	opTable         = "table"
	opMessage       = "message"
	opInactiveTable = "inactive-table"
)

// IoctlError is a device-mapper ioctl the kernel refused.
type IoctlError struct {
	Op    string // "create", "load", "suspend", ...
	Name  string // device name; empty for global operations
	Errno unix.Errno
}

func (e *IoctlError) Error() string {
	if e.Name == "" {
		return fmt.Sprintf("dm %s: %v", e.Op, e.Errno)
	}
	return fmt.Sprintf("dm %s %s: %v", e.Op, e.Name, e.Errno)
}

// Unwrap returns the errno, so errors.Is(err, unix.EINVAL) works.
func (e *IoctlError) Unwrap() error { return e.Errno }

// Is maps errnos to the package's sentinel errors.
func (e *IoctlError) Is(target error) bool {
	switch target {
	case ErrNotFound:
		return e.Errno == unix.ENXIO
	case ErrExists:
		// dm_hash_insert answers EBUSY for a duplicate name or UUID.
		return e.Errno == unix.EEXIST || (e.Op == opCreate && e.Errno == unix.EBUSY)
	case ErrBusy:
		return e.Errno == unix.EBUSY && e.Op != opCreate
	}
	return false
}

// ParseError reports a malformed target parameter, status or table string.
// Its message names what was parsed, the argument and the offending token:
//
//	writecache params: block size "abc": invalid syntax
type ParseError struct {
	What  string // "writecache params", "cache status", "dm table line 2"
	Arg   string // the argument being parsed, e.g. "block size"
	Value string // the offending token; empty when it was missing
	Err   error
}

func (e *ParseError) Error() string {
	if e.Value == "" {
		return fmt.Sprintf("%s: %s: %v", e.What, e.Arg, e.Err)
	}
	return fmt.Sprintf("%s: %s %q: %v", e.What, e.Arg, e.Value, e.Err)
}

func (e *ParseError) Unwrap() error { return e.Err }

// Reasons used inside ParseError.
var (
	errMissing  = errors.New("missing")
	errTrailing = errors.New("unexpected trailing argument")
)
