// SPDX-License-Identifier: Apache-2.0

package main

// The raw-aio workload: the raw-dsync records written through Linux
// native AIO (io_submit) at queue depth > 1 on an fd opened
// O_DIRECT|O_DSYNC. An asynchronous O_DSYNC direct write to a block device
// goes out as a FUA write and no flush follows it, so this is the
// workload that exposes dm-writecache acknowledging FUA writes into new
// cache blocks before their mapping is committed. Each record is
// acknowledged when its completion event arrives.
//
//	crashwriter raw-aio write  -dev D -ack /dev/ttyS1 -tag T -cycle N -blocks M [-qd 8]
//	crashwriter raw-aio verify -dev D -acks LOG -tag T -cycle N

import (
	"errors"
	"flag"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// iocb is struct iocb of <linux/aio_abi.h> (little-endian layout).
type iocb struct {
	data      uint64
	key       uint32
	rwFlags   int32
	opcode    uint16
	reqprio   int16
	fildes    uint32
	buf       uint64
	nbytes    uint64
	offset    int64
	reserved2 uint64
	flags     uint32
	resfd     uint32
}

// ioEvent is struct io_event.
type ioEvent struct {
	data uint64
	obj  uint64
	res  int64
	res2 int64
}

const iocbCmdPwrite = 1

func ioSetup(n int) (uint64, error) {
	var ctx uint64
	if _, _, e := unix.Syscall(unix.SYS_IO_SETUP, uintptr(n), uintptr(unsafe.Pointer(&ctx)), 0); e != 0 {
		return 0, fmt.Errorf("io_setup: %w", e)
	}
	return ctx, nil
}

func ioSubmit(ctx uint64, cb *iocb) error {
	list := [1]*iocb{cb}
	for {
		n, _, e := unix.Syscall(unix.SYS_IO_SUBMIT, uintptr(ctx), 1, uintptr(unsafe.Pointer(&list[0])))
		if e == unix.EINTR || e == unix.EAGAIN {
			continue
		}
		if e != 0 {
			return fmt.Errorf("io_submit: %w", e)
		}
		if n != 1 {
			return errors.New("io_submit: request not queued")
		}
		return nil
	}
}

func ioGetEvents(ctx uint64, min int, ev []ioEvent) (int, error) {
	for {
		n, _, e := unix.Syscall6(unix.SYS_IO_GETEVENTS, uintptr(ctx), uintptr(min), uintptr(len(ev)),
			uintptr(unsafe.Pointer(&ev[0])), 0, 0)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return 0, fmt.Errorf("io_getevents: %w", e)
		}
		return int(n), nil
	}
}

func rawAIOWrite(args []string) error {
	var r rawFlags
	fs := flag.NewFlagSet("raw-aio write", flag.ExitOnError)
	r.register(fs)
	qd := fs.Int("qd", 8, "writes in flight")
	_ = fs.Parse(args)
	if err := r.check(); err != nil {
		return err
	}
	if *qd < 1 || *qd > 128 {
		return fmt.Errorf("-qd %d: want 1-128", *qd)
	}
	f, a, err := r.open()
	if err != nil {
		return err
	}
	defer f.Close()
	defer a.Close()
	ctx, err := ioSetup(*qd)
	if err != nil {
		return err
	}
	defer unix.Syscall(unix.SYS_IO_DESTROY, uintptr(ctx), 0, 0)
	bufs, err := alignedBuffer(*qd * recordSize)
	if err != nil {
		return err
	}

	type slot struct {
		cb    iocb
		seq   uint64
		block uint64
		isNew bool
		busy  bool
	}
	slots := make([]slot, *qd)
	inFlight := map[uint64]bool{}
	p := newRawPicker(r.cycle, r.blocks, r.overwritePct, 0x61696f)
	events := make([]ioEvent, *qd)
	busy := 0
	for seq := uint64(0); ; {
		// Fill every free slot, then wait for at least one completion.
		for i := range slots {
			s := &slots[i]
			if s.busy {
				continue
			}
			before := p.next
			b := p.pick(func(b uint64) bool { return inFlight[b] })
			if b == ^uint64(0) {
				break
			}
			buf := bufs[i*recordSize : (i+1)*recordSize]
			encodeRaw(buf, r.cycle, seq, b)
			*s = slot{seq: seq, block: b, isNew: p.next != before, busy: true}
			s.cb = iocb{data: uint64(i), opcode: iocbCmdPwrite, fildes: uint32(f.Fd()),
				buf: uint64(uintptr(unsafe.Pointer(&buf[0]))), nbytes: recordSize, offset: int64(b) * recordSize}
			if err := ioSubmit(ctx, &s.cb); err != nil {
				return err
			}
			inFlight[b] = true
			busy++
			seq++
		}
		if busy == 0 {
			return errors.New("nothing to write")
		}
		n, err := ioGetEvents(ctx, 1, events)
		if err != nil {
			return err
		}
		for _, ev := range events[:n] {
			s := &slots[ev.data]
			if ev.res != recordSize {
				return fmt.Errorf("write %d at block %d: result %d", s.seq, s.block, ev.res)
			}
			s.busy = false
			busy--
			delete(inFlight, s.block)
			p.done(s.block, s.isNew)
			if err := a.ack("%d %d", s.seq, s.block); err != nil {
				return err
			}
		}
	}
}
