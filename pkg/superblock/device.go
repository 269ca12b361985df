// SPDX-License-Identifier: Apache-2.0

package superblock

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Slots are the two slot names, in the order they are read.
var Slots = [2]string{"A", "B"}

// ReadResult is a superblock with where it came from.
type ReadResult struct {
	Superblock
	// Slot is the slot the superblock was read from, "A" or "B".
	Slot string
	// Warnings are problems with the other slot that did not stop the
	// read, e.g. the *CorruptError of a torn write. The caller should log
	// them; the next Write repairs the slot.
	Warnings []error

	image []byte // header and payload as on disk, for Write's same-generation check
}

// ReadWriterAt is a device Write can read back and write.
type ReadWriterAt interface {
	io.ReaderAt
	io.WriterAt
}

// Read returns the superblock of the valid slot with the highest
// generation. See ReadDetailed for the rules; Read drops the warnings.
func Read(r io.ReaderAt) (Superblock, error) {
	res, err := ReadDetailed(r)
	return res.Superblock, err
}

// ReadDetailed reads both slots and returns the valid one with the highest
// generation:
//
//   - both valid: the higher generation wins; equal generations must hold
//     identical images (slot A is returned). Two valid slots of different
//     pools, devices or roles are a *CorruptError with Slot "A+B": there is
//     no telling which one is current.
//   - one valid: it is returned; if the other carries the magic but is
//     corrupt, its *CorruptError is in Warnings.
//   - any slot written by a newer format: *VersionError, even if the other
//     slot is valid, because that slot may hold a stale layout.
//   - magic present but no slot valid: the *CorruptError of each slot,
//     joined (errors.As finds the first).
//   - no magic in either slot: ErrNoSuperblock.
//
// A device shorter than two slots is read as far as it goes. I/O errors
// other than io.EOF are returned wrapped.
func ReadDetailed(r io.ReaderAt) (ReadResult, error) {
	type slotState struct {
		name  string
		sb    Superblock
		image []byte
		err   error
	}
	var states []slotState
	for _, slot := range Slots {
		buf, err := readSlot(r, slot)
		if err != nil {
			return ReadResult{}, err
		}
		sb, img, err := decode(buf)
		var ce *CorruptError
		var ve *VersionError
		switch {
		case errors.As(err, &ce):
			ce.Slot = slot
		case errors.As(err, &ve):
			ve.Slot = slot
			return ReadResult{}, ve
		}
		states = append(states, slotState{slot, sb, img, err})
	}

	var valid []slotState
	var corrupt []error
	for _, s := range states {
		switch {
		case s.err == nil:
			valid = append(valid, s)
		case !errors.Is(s.err, ErrNoSuperblock):
			corrupt = append(corrupt, s.err)
		}
	}
	switch len(valid) {
	case 0:
		if len(corrupt) > 0 {
			return ReadResult{}, errors.Join(corrupt...)
		}
		return ReadResult{}, ErrNoSuperblock
	case 1:
		v := valid[0]
		return ReadResult{Superblock: v.sb, Slot: v.name, Warnings: corrupt, image: v.image}, nil
	}

	a, b := valid[0], valid[1]
	if a.sb.Layout.UUID != b.sb.Layout.UUID || a.sb.DeviceUUID != b.sb.DeviceUUID || a.sb.Role != b.sb.Role {
		return ReadResult{}, &CorruptError{Slot: "A+B", Reason: fmt.Sprintf(
			"the slots disagree: A holds pool %q (%s) %s device %s, B holds pool %q (%s) %s device %s",
			a.sb.Layout.Name, a.sb.Layout.UUID, a.sb.Role, a.sb.DeviceUUID,
			b.sb.Layout.Name, b.sb.Layout.UUID, b.sb.Role, b.sb.DeviceUUID)}
	}
	best := a
	switch ga, gb := a.sb.Layout.Generation, b.sb.Layout.Generation; {
	case gb > ga:
		best = b
	case ga == gb && !bytes.Equal(a.image, b.image):
		return ReadResult{}, &CorruptError{Slot: "A+B", Reason: fmt.Sprintf(
			"both slots hold generation %d with different contents", ga)}
	}
	return ReadResult{Superblock: best.sb, Slot: best.name, image: best.image}, nil
}

// trimImage cuts the padding off an image made by Encode.
func trimImage(img []byte) []byte {
	return img[:HeaderSize+int(binary.LittleEndian.Uint32(img[offPayloadLen:]))]
}

func readSlot(r io.ReaderAt, slot string) ([]byte, error) {
	buf := make([]byte, SlotSize)
	n, err := r.ReadAt(buf, SlotOffset(slot))
	if err != nil && !(errors.Is(err, io.EOF) && n < len(buf)) {
		return nil, fmt.Errorf("read superblock slot %s: %w", slot, err)
	}
	return buf[:n], nil
}

// Write stores sb on the device so that a torn write never destroys the
// last good copy. It reads the device first and
//
//   - writes slot A if the device has no superblock;
//   - otherwise writes the slot that does not hold the current (highest
//     valid) generation, which also repairs a corrupt slot;
//   - refuses (ErrDeviceMismatch) to overwrite a superblock of another
//     pool, another device or another role; wipe the device first;
//   - refuses (ErrStaleGeneration) an older generation, or the current one
//     with different contents; the current generation with identical
//     contents is a no-op, so re-applying the same layout is safe;
//   - refuses to write over a device that reads as corrupt or newer.
//
// The slot image is followed by zeros to the end of the slot, so a slot
// never carries the tail of an older, longer image. After the write Write
// calls sync (e.g. (*os.File).Sync) and reads the slot back to check it.
func Write(rw ReadWriterAt, sync func() error, sb Superblock) error {
	if sync == nil {
		return errors.New("superblock: Write needs a sync function")
	}
	img, err := Encode(sb)
	if err != nil {
		return err
	}
	slot := "A"
	cur, err := ReadDetailed(rw)
	switch {
	case errors.Is(err, ErrNoSuperblock):
	case err != nil:
		return fmt.Errorf("superblock: not writing over an unreadable superblock: %w", err)
	default:
		if cur.Layout.UUID != sb.Layout.UUID || cur.DeviceUUID != sb.DeviceUUID || cur.Role != sb.Role {
			return fmt.Errorf("%w: it holds pool %q (%s) as %s device %s, asked to write pool %q (%s) as %s device %s",
				ErrDeviceMismatch, cur.Layout.Name, cur.Layout.UUID, cur.Role, cur.DeviceUUID,
				sb.Layout.Name, sb.Layout.UUID, sb.Role, sb.DeviceUUID)
		}
		switch g, c := sb.Layout.Generation, cur.Layout.Generation; {
		case g < c:
			return fmt.Errorf("%w: asked to write generation %d, slot %s holds %d", ErrStaleGeneration, g, cur.Slot, c)
		case g == c && bytes.Equal(trimImage(img), cur.image):
			return nil
		case g == c:
			return fmt.Errorf("%w: generation %d is already in slot %s with different contents", ErrStaleGeneration, g, cur.Slot)
		}
		if cur.Slot == "A" {
			slot = "B"
		}
	}

	buf := make([]byte, SlotSize)
	copy(buf, img)
	if _, err := rw.WriteAt(buf, SlotOffset(slot)); err != nil {
		return fmt.Errorf("write superblock slot %s: %w", slot, err)
	}
	if err := sync(); err != nil {
		return fmt.Errorf("sync superblock slot %s: %w", slot, err)
	}
	back, err := readSlot(rw, slot)
	if err != nil {
		return err
	}
	if !bytes.Equal(back, buf) {
		return fmt.Errorf("superblock slot %s reads back different from what was written", slot)
	}
	return nil
}

// Wipe zeroes both slots and syncs, so the device reads as
// ErrNoSuperblock. Used when a pool is destroyed or a member leaves it.
func Wipe(w io.WriterAt, sync func() error) error {
	if sync == nil {
		return errors.New("superblock: Wipe needs a sync function")
	}
	if _, err := w.WriteAt(make([]byte, 2*SlotSize), 0); err != nil {
		return fmt.Errorf("wipe superblock slots: %w", err)
	}
	if err := sync(); err != nil {
		return fmt.Errorf("sync after wiping superblock slots: %w", err)
	}
	return nil
}
