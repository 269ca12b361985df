// SPDX-License-Identifier: Apache-2.0

package main

// The fs workload's operations, their generator and the model of what the
// files must hold. The generator is deterministic from (seed, model), and
// the model changes only through apply, so verify can replay the exact
// sequence the writer ran, including the one operation that was in flight
// when the power went (which was never acknowledged).
//
// Every file is a whole number of 4 KiB blocks. Each block carries a header
// (magic, cycle, seq of the operation that wrote it, slot, block index) and
// a CRC32C of its payload, so verify can tell exactly which version of each
// block a file holds.

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"strconv"
)

const (
	fsBlock      = 4096
	fsMagic      = "TCFSB001"
	fsHeaderSize = 8 + 8 + 8 + 4 + 4 + 4 // magic, cycle, seq, slot, block, crc32c(payload)
	fsSlots      = 48                    // files f00..f47
	fsMaxBlocks  = 48                    // blocks per file at most
)

// opKind is one kind of fs operation; its name appears in ack lines.
type opKind string

const (
	opCreate    opKind = "create"    // O_CREAT|O_EXCL, write, fsync, fsync(dir)
	opAppend    opKind = "append"    // write at EOF, fsync
	opOverwrite opKind = "overwrite" // pwrite in place, fdatasync
	opDsync     opKind = "dsync"     // pwrite in place through an O_DSYNC fd (buffered)
	opDirect    opKind = "direct"    // pwrite in place through O_DIRECT|O_DSYNC
	opRename    opKind = "rename"    // write tmp, fsync, rename over the file, fsync(dir)
)

// fsOp is one operation: it writes blocks [Off, Off+N) of file Slot with
// version Seq (rename: the whole file, N blocks).
type fsOp struct {
	Seq  uint64
	Kind opKind
	Slot int
	Off  int
	N    int
}

// ackFields is the op as written in its ack line after "<tag> <cycle>".
func (o fsOp) ackFields() string {
	return fmt.Sprintf("%d %s %d %d %d", o.Seq, o.Kind, o.Slot, o.Off, o.N)
}

func (o fsOp) String() string { return o.ackFields() }

func fsName(slot int) string { return "f" + strconv.Itoa(slot) }

// fsModel is what each file must hold: per block, the seq of the operation
// that last wrote it; nil for a file that does not exist.
type fsModel [fsSlots][]uint64

func (m *fsModel) apply(o fsOp) {
	switch o.Kind {
	case opCreate, opRename:
		m[o.Slot] = make([]uint64, o.N)
		for i := range m[o.Slot] {
			m[o.Slot][i] = o.Seq
		}
	case opAppend:
		for i := 0; i < o.N; i++ {
			m[o.Slot] = append(m[o.Slot], o.Seq)
		}
	default:
		for i := o.Off; i < o.Off+o.N; i++ {
			m[o.Slot][i] = o.Seq
		}
	}
}

// fsGen draws the next operation. O_DIRECT|O_DSYNC overwrites are the most
// frequent: on a filesystem they are FUA writes with no flush behind them.
type fsGen struct{ rng *rand.Rand }

func newFSGen(seed uint64) *fsGen { return &fsGen{rand.New(rand.NewPCG(seed, 0x6673))} }

func (g *fsGen) next(m *fsModel, seq uint64) fsOp {
	var have, free []int
	for s := range m {
		if m[s] == nil {
			free = append(free, s)
		} else {
			have = append(have, s)
		}
	}
	if len(have) == 0 || (len(free) > 0 && g.rng.IntN(100) < 15) {
		return fsOp{Seq: seq, Kind: opCreate, Slot: free[g.rng.IntN(len(free))], N: 1 + g.rng.IntN(8)}
	}
	s := have[g.rng.IntN(len(have))]
	size := len(m[s])
	o := fsOp{Seq: seq, Slot: s}
	switch r := g.rng.IntN(100); {
	case r < 12:
		o.Kind, o.Off, o.N = opAppend, size, 1+g.rng.IntN(4)
		if size+o.N <= fsMaxBlocks {
			return o
		}
		fallthrough // full: rewrite it smaller instead
	case r < 24:
		o.Kind, o.Off, o.N = opRename, 0, 1+g.rng.IntN(fsMaxBlocks/3)
		return o
	case r < 40:
		o.Kind = opOverwrite
	case r < 55:
		o.Kind = opDsync
	default:
		o.Kind = opDirect
	}
	o.Off = g.rng.IntN(size)
	o.N = 1 + g.rng.IntN(min(4, size-o.Off))
	return o
}

// fillBlock writes block blk of a file's version seq into buf.
func fillBlock(buf []byte, cycle, seq uint64, slot, blk int) {
	payload := buf[fsHeaderSize:fsBlock]
	x := seq*0x9e3779b97f4a7c15 ^ cycle<<40 ^ uint64(slot)<<20 ^ uint64(blk) | 1
	for i := 0; i+8 <= len(payload); i += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		binary.LittleEndian.PutUint64(payload[i:], x)
	}
	copy(buf, fsMagic)
	binary.LittleEndian.PutUint64(buf[8:], cycle)
	binary.LittleEndian.PutUint64(buf[16:], seq)
	binary.LittleEndian.PutUint32(buf[24:], uint32(slot))
	binary.LittleEndian.PutUint32(buf[28:], uint32(blk))
	binary.LittleEndian.PutUint32(buf[32:], crc32.Checksum(payload, castagnoli))
}

// blockZero is what readBlock reports for an all-zero block.
const blockZero = ^uint64(0)

// readBlock returns the seq of a valid block, blockZero for zeros, or why
// the block is neither.
func readBlock(buf []byte, cycle uint64, slot, blk int) (uint64, string) {
	if string(buf[:8]) != fsMagic {
		for _, c := range buf {
			if c != 0 {
				return 0, "neither a block of this workload nor zeros"
			}
		}
		return blockZero, ""
	}
	if c := binary.LittleEndian.Uint64(buf[8:]); c != cycle {
		return 0, fmt.Sprintf("block of cycle %d", c)
	}
	if s, b := binary.LittleEndian.Uint32(buf[24:]), binary.LittleEndian.Uint32(buf[28:]); int(s) != slot || int(b) != blk {
		return 0, fmt.Sprintf("block %d of file %d", b, s)
	}
	if got, want := crc32.Checksum(buf[fsHeaderSize:fsBlock], castagnoli), binary.LittleEndian.Uint32(buf[32:]); got != want {
		return 0, fmt.Sprintf("payload crc32c %08x, header says %08x", got, want)
	}
	return binary.LittleEndian.Uint64(buf[16:]), ""
}
