// SPDX-License-Identifier: Apache-2.0

package main

// Records of the raw-dsync and raw-aio workloads, and their shared verify.
//
// A record is one 4 KiB block: magic, cycle, seq (the operation number),
// block (where it was written), CRC32C of the payload, then the payload.
// The writers overwrite blocks already written in the same cycle as well as
// writing new ones, so the device must hold, at each block, the record of
// the last acknowledged write there, or of a later write that was never
// acknowledged (one in flight at the cut).
//
// Ack lines: "<tag> <cycle> <seq> <block>".

import (
	"encoding/binary"
	"flag"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"

	"golang.org/x/sys/unix"
)

const (
	rawMagic      = "TCRAW002"
	rawHeaderSize = 8 + 8 + 8 + 8 + 4 // magic, cycle, seq, block, crc32c(payload)
)

// rawFlags are the flags both raw writers take.
type rawFlags struct {
	dev, ack, tag string
	cycle, blocks uint64
	overwritePct  int
}

func (r *rawFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&r.dev, "dev", "", "block device to write")
	fs.StringVar(&r.ack, "ack", "", "device or file receiving acknowledgements")
	fs.StringVar(&r.tag, "tag", "", "workload tag on every ack line")
	fs.Uint64Var(&r.cycle, "cycle", 0, "cycle number stamped in every record")
	fs.Uint64Var(&r.blocks, "blocks", 0, "number of 4 KiB blocks available")
	fs.IntVar(&r.overwritePct, "overwrite", 40, "percentage of writes that overwrite a block already written this cycle")
}

func (r *rawFlags) check() error {
	if r.dev == "" || r.ack == "" || r.tag == "" || r.blocks == 0 {
		return fmt.Errorf("write needs -dev, -ack, -tag and -blocks")
	}
	return nil
}

// open opens the device for O_DIRECT|O_DSYNC writes (each write a FUA
// write, asynchronous ones without a flush) and the ack channel; the
// caller closes both.
func (r *rawFlags) open() (*os.File, *acker, error) {
	f, err := os.OpenFile(r.dev, os.O_WRONLY|unix.O_DIRECT|unix.O_DSYNC, 0)
	if err != nil {
		return nil, nil, err
	}
	a, err := openAcker(r.ack, r.tag, r.cycle)
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, a, nil
}

// rawPicker chooses where the next record goes: a block not yet written in
// this cycle, walking from a random start so that a new cycle mostly hits
// blocks the cache no longer holds (written back and freed: new cache
// blocks), or one already written (in place if the cache still holds it).
type rawPicker struct {
	rng     *rand.Rand
	blocks  uint64
	start   uint64
	next    uint64   // blocks handed out so far
	written []uint64 // blocks written (and completed) this cycle
	pct     int
}

func newRawPicker(cycle, blocks uint64, pct int, salt uint64) *rawPicker {
	rng := rand.New(rand.NewPCG(cycle, salt))
	return &rawPicker{rng: rng, blocks: blocks, start: rng.Uint64N(blocks), pct: pct}
}

// pick returns a block for the next write; busy reports blocks that must
// not be chosen (in flight).
func (p *rawPicker) pick(busy func(uint64) bool) uint64 {
	if len(p.written) > 0 && (p.next == p.blocks || p.rng.IntN(100) < p.pct) {
		for try := 0; try < 8; try++ {
			b := p.written[p.rng.IntN(len(p.written))]
			if busy == nil || !busy(b) {
				return b
			}
		}
	}
	if p.next == p.blocks {
		// Every block written and the tries above hit busy ones: wait
		// for the caller to complete something.
		return ^uint64(0)
	}
	b := (p.start + p.next) % p.blocks
	p.next++
	return b
}

// done records a completed write of a block handed out by pick.
func (p *rawPicker) done(b uint64, isNew bool) {
	if isNew {
		p.written = append(p.written, b)
	}
}

func encodeRaw(buf []byte, cycle, seq, block uint64) {
	payload := buf[rawHeaderSize:recordSize]
	x := seq*0x9e3779b97f4a7c15 ^ cycle<<32 ^ block
	for i := 0; i+8 <= len(payload); i += 8 {
		// xorshift64: cheap, and distinct for every (cycle, seq, block).
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		binary.LittleEndian.PutUint64(payload[i:], x)
	}
	copy(buf, rawMagic)
	binary.LittleEndian.PutUint64(buf[8:], cycle)
	binary.LittleEndian.PutUint64(buf[16:], seq)
	binary.LittleEndian.PutUint64(buf[24:], block)
	binary.LittleEndian.PutUint32(buf[32:], crc32.Checksum(payload, castagnoli))
}

// decodeRaw returns the seq of a valid record of this cycle at this block,
// or why the block is not one.
func decodeRaw(buf []byte, cycle, block uint64) (uint64, string) {
	if string(buf[:8]) != rawMagic {
		return 0, "no record magic"
	}
	if c := binary.LittleEndian.Uint64(buf[8:]); c != cycle {
		return 0, fmt.Sprintf("record of cycle %d", c)
	}
	if b := binary.LittleEndian.Uint64(buf[24:]); b != block {
		return 0, fmt.Sprintf("record for block %d", b)
	}
	if got, want := crc32.Checksum(buf[rawHeaderSize:recordSize], castagnoli), binary.LittleEndian.Uint32(buf[32:]); got != want {
		return 0, fmt.Sprintf("payload crc32c %08x, header says %08x", got, want)
	}
	return binary.LittleEndian.Uint64(buf[16:]), ""
}

// rawVerify checks every block against the last acknowledged write to it.
func rawVerify(name string, args []string) error {
	fs := flag.NewFlagSet(name+" verify", flag.ExitOnError)
	dev := fs.String("dev", "", "block device to read")
	acks := fs.String("acks", "", "ack log recorded by the host")
	tag := fs.String("tag", "", "workload tag")
	cycle := fs.Uint64("cycle", 0, "cycle to check")
	_ = fs.Parse(args)
	if *dev == "" || *acks == "" || *tag == "" {
		return fmt.Errorf("verify needs -dev, -acks and -tag")
	}
	lines, err := readAcks(*acks, *tag, *cycle)
	if err != nil {
		return err
	}
	last := map[uint64]uint64{} // block -> last acknowledged seq
	acked := map[uint64]bool{}
	var order []uint64
	for _, l := range lines {
		v, err := atoiFields(l)
		if err != nil || len(v) != 2 {
			return fmt.Errorf("ack line %q: want <seq> <block>", l)
		}
		seq, block := uint64(v[0]), uint64(v[1])
		if acked[seq] {
			return fmt.Errorf("seq %d acknowledged twice", seq)
		}
		acked[seq] = true
		if prev, ok := last[block]; !ok || seq > prev {
			if !ok {
				order = append(order, block)
			}
			last[block] = seq
		}
	}
	f, err := os.OpenFile(*dev, os.O_RDONLY|unix.O_DIRECT, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	buf, err := alignedBuffer(recordSize)
	if err != nil {
		return err
	}
	lost, newer := 0, 0
	for _, block := range order {
		want := last[block]
		if _, err := f.ReadAt(buf, int64(block)*recordSize); err != nil {
			return fmt.Errorf("read block %d: %w", block, err)
		}
		seq, why := decodeRaw(buf, *cycle, block)
		switch {
		case why == "" && seq == want:
			continue
		case why == "" && seq > want && !acked[seq]:
			newer++ // a later write, in flight at the cut, made it
			continue
		case why == "":
			why = fmt.Sprintf("holds write %d", seq)
		}
		lost++
		if lost <= 20 {
			fmt.Printf("LOST write %d at block %d: %s\n", want, block, why)
		}
	}
	fmt.Printf("verified %d acknowledged records (%d blocks) of %s cycle %d: %d lost; %d blocks hold a later unacknowledged write\n",
		len(acked), len(order), *tag, *cycle, lost, newer)
	if lost > 0 {
		return fmt.Errorf("%d acknowledged records lost or damaged", lost)
	}
	return nil
}
