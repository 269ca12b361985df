// SPDX-License-Identifier: Apache-2.0

package superblock

import (
	"errors"
	"fmt"
)

// ErrNoSuperblock means no slot carries the magic: the device does not
// belong to tidecache (or was wiped).
var ErrNoSuperblock = errors.New("no tidecache superblock")

// ErrDeviceMismatch means Write found the superblock of another pool, or of
// another device of the pool, where it was asked to write. The device must
// be wiped deliberately before it can join another pool.
var ErrDeviceMismatch = errors.New("device holds the superblock of another pool or device")

// ErrStaleGeneration means Write was given a generation older than the one
// on disk, or the same generation with different contents.
var ErrStaleGeneration = errors.New("superblock generation is not newer than the one on disk")

// CorruptError reports a slot that carries the magic but fails its checks
// (checksums, lengths, decoding, layout validation), or two slots that
// contradict each other. A device whose superblock is corrupt must not be
// assembled.
type CorruptError struct {
	// Slot is "A", "B", "A+B" for a contradiction between the slots, or
	// "" when Decode was called on a bare image.
	Slot string
	// Reason says what check failed, with expected and actual values.
	Reason string
	// Err is the underlying error, if any (JSON or validation).
	Err error
}

func (e *CorruptError) Error() string {
	if e.Slot == "" {
		return "corrupt superblock: " + e.Reason
	}
	return fmt.Sprintf("corrupt superblock in slot %s: %s", e.Slot, e.Reason)
}

func (e *CorruptError) Unwrap() error { return e.Err }

// VersionError reports a slot written in a newer format than this build
// understands. Its header checksum was verified, so it is not corruption.
type VersionError struct {
	Slot    string // "A", "B", or "" from Decode
	Version uint32
}

func (e *VersionError) Error() string {
	s := fmt.Sprintf("superblock format version %d is newer than this tidecache (%d)", e.Version, FormatVersion)
	if e.Slot != "" {
		s += " (slot " + e.Slot + ")"
	}
	return s
}
