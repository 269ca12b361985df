// SPDX-License-Identifier: Apache-2.0

package main

// The on-disk format of a dm-log-writes log (drivers/md/dm-log-writes.c,
// Linux 6.1), all little-endian:
//
//	block 0:  super   magic u64, version u64, nr_entries u64, sectorsize u32
//	block 1…: entry   sector u64, nr_sectors u64, flags u64, data_len u64,
//	                  then, for a MARK, data_len bytes of its name in the
//	                  same block
//	          data    nr_sectors blocks of written data right after the
//	                  entry (none for a DISCARD, a MARK or an empty FLUSH)
//
// "Block" and "sector" are the logical block size of the logged device
// (sectorsize in the super, 512 on virtio disks): an entry's sector and
// nr_sectors count those units, not 512-byte bio sectors.
//
// The order is the one the target logged in, which is not submission
// order: a plain write is held until the next FLUSH completes and is
// logged just before that FLUSH; a FUA write is logged when it completes;
// a MARK when the message arrives. The super's nr_entries is rewritten
// after every FUA and MARK entry and when the target is removed.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

const (
	logMagic   = 0x6a736677736872
	logVersion = 1
	superSize  = 8 + 8 + 8 + 4
	entrySize  = 8 + 8 + 8 + 8
)

// Entry flags.
const (
	FlagFlush    = 1 << 0
	FlagFUA      = 1 << 1
	FlagDiscard  = 1 << 2
	FlagMark     = 1 << 3
	FlagMetadata = 1 << 4
)

// Entry is one logged request.
type Entry struct {
	Index     int    // position in the log, from 0
	Sector    uint64 // first block written, in SectorSize units
	NrSectors uint64 // blocks written or discarded
	Flags     uint64
	Mark      string // name of a MARK
	DataOff   int64  // byte offset of the data in the log (writes only)
}

func (e Entry) is(f uint64) bool { return e.Flags&f != 0 }

// isWrite reports whether the entry carries data to write.
func (e Entry) isWrite() bool { return !e.is(FlagMark|FlagDiscard) && e.NrSectors > 0 }

// FlagString names the flags: "FLUSH|FUA", or "WRITE" for none.
func (e Entry) FlagString() string {
	var s string
	for _, f := range []struct {
		bit  uint64
		name string
	}{{FlagFlush, "FLUSH"}, {FlagFUA, "FUA"}, {FlagDiscard, "DISCARD"}, {FlagMark, "MARK"}, {FlagMetadata, "METADATA"}} {
		if e.Flags&f.bit != 0 {
			if s != "" {
				s += "|"
			}
			s += f.name
		}
	}
	if s == "" {
		return "WRITE"
	}
	return s
}

// Log is a parsed log: its entries, not their data.
type Log struct {
	SectorSize uint32
	Entries    []Entry
}

// ReadLog parses the super and every entry of a log.
func ReadLog(r io.ReaderAt) (*Log, error) {
	var sb [superSize]byte
	if _, err := r.ReadAt(sb[:], 0); err != nil {
		return nil, fmt.Errorf("read super: %w", err)
	}
	le := binary.LittleEndian
	if m := le.Uint64(sb[0:]); m != logMagic {
		return nil, fmt.Errorf("not a dm-log-writes log: magic %#x", m)
	}
	if v := le.Uint64(sb[8:]); v != logVersion {
		return nil, fmt.Errorf("log version %d, want %d", v, logVersion)
	}
	n := le.Uint64(sb[16:])
	ss := le.Uint32(sb[24:])
	if ss < 512 || ss&(ss-1) != 0 || ss > 1<<16 {
		return nil, fmt.Errorf("bad sectorsize %d in the super", ss)
	}
	l := &Log{SectorSize: ss}
	blk := make([]byte, ss)
	pos := int64(ss)
	for i := uint64(0); i < n; i++ {
		if _, err := r.ReadAt(blk, pos); err != nil {
			return nil, fmt.Errorf("entry %d at byte %d: %w", i, pos, err)
		}
		e := Entry{Index: int(i), Sector: le.Uint64(blk[0:]), NrSectors: le.Uint64(blk[8:]), Flags: le.Uint64(blk[16:])}
		dataLen := le.Uint64(blk[24:])
		pos += int64(ss)
		switch {
		case e.is(FlagMark):
			if dataLen > uint64(ss)-entrySize {
				return nil, fmt.Errorf("entry %d: mark of %d bytes does not fit its block", i, dataLen)
			}
			e.Mark = string(blk[entrySize : entrySize+dataLen])
		case dataLen != 0:
			// Inline data: only written for metadata the 6.1 target
			// never produces on its own.
			return nil, fmt.Errorf("entry %d: inline data (%d bytes) is not supported", i, dataLen)
		case e.is(FlagDiscard):
		default:
			e.DataOff = pos
			pos += int64(e.NrSectors) * int64(ss)
		}
		l.Entries = append(l.Entries, e)
	}
	return l, nil
}

// FindMark returns the index of the one MARK named name.
func (l *Log) FindMark(name string) (int, error) {
	at := -1
	for _, e := range l.Entries {
		if e.is(FlagMark) && e.Mark == name {
			if at >= 0 {
				return 0, fmt.Errorf("mark %q appears twice (entries %d and %d)", name, at, e.Index)
			}
			at = e.Index
		}
	}
	if at < 0 {
		return 0, fmt.Errorf("no mark %q in the log", name)
	}
	return at, nil
}

// Cut is the set of entries to replay for the state at a mark.
type Cut struct {
	Mark      int     // index of the mark
	LastFlush int     // index of the last FLUSH before the mark, -1 if none
	Entries   []Entry // writes and discards to apply, in log order
	Dropped   []Entry // writes and discards left out by the volatile rule
}

var errNoEntries = errors.New("empty log")

// CutAt selects what to replay for the state at the mark at index mark.
// Without volatile: every write and discard logged before the mark. With
// volatile, a drive with a volatile write cache that lost it at the mark:
// everything up to and including the last FLUSH before the mark, and after
// that flush only FUA writes; other writes and discards after it were
// still in the drive's cache.
func (l *Log) CutAt(mark int, volatile bool) (Cut, error) {
	if len(l.Entries) == 0 {
		return Cut{}, errNoEntries
	}
	if mark < 0 || mark >= len(l.Entries) || !l.Entries[mark].is(FlagMark) {
		return Cut{}, fmt.Errorf("entry %d is not a mark", mark)
	}
	c := Cut{Mark: mark, LastFlush: -1}
	for i := mark - 1; i >= 0; i-- {
		if l.Entries[i].is(FlagFlush) {
			c.LastFlush = i
			break
		}
	}
	for _, e := range l.Entries[:mark] {
		if e.is(FlagMark) || (!e.isWrite() && !e.is(FlagDiscard)) {
			continue // marks and empty flushes change no data
		}
		if volatile && e.Index > c.LastFlush && !e.is(FlagFUA) {
			c.Dropped = append(c.Dropped, e)
			continue
		}
		c.Entries = append(c.Entries, e)
	}
	return c, nil
}
