// SPDX-License-Identifier: Apache-2.0

// The legacy raw workload (TestPowerCut): 4 KiB records written with
// O_DIRECT at block index = sequence number, never overwritten within a
// cycle, in batches of 1-16 followed by fdatasync, each batch acknowledged
// as "ACK <cycle> <last seq>" once fdatasync returned.

package main

import (
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"

	"golang.org/x/sys/unix"
)

const (
	recordSize = 4096
	magic      = "TCREC001"
	headerSize = 8 + 8 + 8 + 4 // magic, cycle, seq, crc32c(payload)
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// alignedBuffer returns a page-aligned buffer for O_DIRECT.
func alignedBuffer(n int) ([]byte, error) {
	return unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
}

func encode(buf []byte, cycle, seq uint64, rng *rand.Rand) {
	payload := buf[headerSize:recordSize]
	for i := 0; i+8 <= len(payload); i += 8 {
		binary.LittleEndian.PutUint64(payload[i:], rng.Uint64())
	}
	copy(buf, magic)
	binary.LittleEndian.PutUint64(buf[8:], cycle)
	binary.LittleEndian.PutUint64(buf[16:], seq)
	binary.LittleEndian.PutUint32(buf[24:], crc32.Checksum(payload, castagnoli))
}

func write(args []string) error {
	fs := flag.NewFlagSet("write", flag.ExitOnError)
	dev := fs.String("dev", "", "block device to write")
	ack := fs.String("ack", "", "device or file receiving acknowledgements")
	cycle := fs.Uint64("cycle", 0, "cycle number stamped in every record")
	blocks := fs.Uint64("blocks", 0, "number of 4 KiB blocks available")
	maxBatch := fs.Int("max-batch", 16, "records written between two fdatasync calls, at most")
	_ = fs.Parse(args)
	if *dev == "" || *ack == "" || *blocks == 0 {
		return errors.New("write needs -dev, -ack and -blocks")
	}
	f, err := os.OpenFile(*dev, os.O_WRONLY|unix.O_DIRECT, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	a, err := openAcker(*ack, "", 0)
	if err != nil {
		return err
	}
	defer a.Close()
	buf, err := alignedBuffer(recordSize)
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(*cycle, 0x7469646563616368))
	if err := a.ack("START %d", *cycle); err != nil {
		return err
	}
	for seq := uint64(0); seq < *blocks; {
		n := uint64(1 + rng.IntN(*maxBatch))
		first := seq
		for ; seq < first+n && seq < *blocks; seq++ {
			encode(buf, *cycle, seq, rng)
			if _, err := f.WriteAt(buf, int64(seq)*recordSize); err != nil {
				return fmt.Errorf("write record %d: %w", seq, err)
			}
		}
		if err := unix.Fdatasync(int(f.Fd())); err != nil {
			return fmt.Errorf("fdatasync after record %d: %w", seq-1, err)
		}
		// Only now are records first..seq-1 acknowledged.
		if err := a.ack("ACK %d %d", *cycle, seq-1); err != nil {
			return err
		}
	}
	return a.ack("FULL %d", *cycle)
}

func verify(args []string) error {
	fs := flag.NewFlagSet("verify", flag.ExitOnError)
	dev := fs.String("dev", "", "block device to read")
	cycle := fs.Uint64("cycle", 0, "cycle whose records are checked")
	through := fs.Int64("through", -1, "last acknowledged sequence number")
	_ = fs.Parse(args)
	if *dev == "" {
		return errors.New("verify needs -dev")
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
	bad := 0
	for seq := int64(0); seq <= *through; seq++ {
		if _, err := f.ReadAt(buf, seq*recordSize); err != nil {
			return fmt.Errorf("read record %d: %w", seq, err)
		}
		if why := check(buf, *cycle, uint64(seq)); why != "" {
			bad++
			if bad <= 20 {
				fmt.Printf("LOST record %d: %s\n", seq, why)
			}
		}
	}
	// Records past the last ack may or may not have made it; count them.
	extra := 0
	for seq := *through + 1; ; seq++ {
		if _, err := f.ReadAt(buf, seq*recordSize); err != nil || check(buf, *cycle, uint64(seq)) != "" {
			break
		}
		extra++
	}
	fmt.Printf("verified %d acknowledged records of cycle %d: %d lost; %d unacknowledged records also present\n", *through+1, *cycle, bad, extra)
	if bad > 0 {
		return fmt.Errorf("%d acknowledged records lost or damaged", bad)
	}
	return nil
}

// check returns why a block is not the expected record, or "".
func check(buf []byte, cycle, seq uint64) string {
	if string(buf[:8]) != magic {
		return "no record magic"
	}
	if c := binary.LittleEndian.Uint64(buf[8:]); c != cycle {
		return fmt.Sprintf("cycle %d, want %d", c, cycle)
	}
	if s := binary.LittleEndian.Uint64(buf[16:]); s != seq {
		return fmt.Sprintf("sequence %d, want %d", s, seq)
	}
	want := binary.LittleEndian.Uint32(buf[24:])
	if got := crc32.Checksum(buf[headerSize:recordSize], castagnoli); got != want {
		return fmt.Sprintf("payload crc32c %08x, header says %08x", got, want)
	}
	return ""
}
