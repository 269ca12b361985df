// SPDX-License-Identifier: Apache-2.0

package main

// The raw-dsync workload: one O_DIRECT|O_DSYNC pwrite at a time (QD1) of
// a 4 KiB record, acknowledged once pwrite returned. A synchronous O_DSYNC
// write to a block device is followed by a flush (blkdev_fsync), so this
// is the control: it must never lose anything, fix or no fix.
//
//	crashwriter raw-dsync write  -dev D -ack /dev/ttyS1 -tag T -cycle N -blocks M
//	crashwriter raw-dsync verify -dev D -acks LOG -tag T -cycle N

import (
	"flag"
	"fmt"
)

func rawDsyncWrite(args []string) error {
	var r rawFlags
	fs := flag.NewFlagSet("raw-dsync write", flag.ExitOnError)
	r.register(fs)
	_ = fs.Parse(args)
	if err := r.check(); err != nil {
		return err
	}
	f, a, err := r.open()
	if err != nil {
		return err
	}
	defer f.Close()
	defer a.Close()
	buf, err := alignedBuffer(recordSize)
	if err != nil {
		return err
	}
	p := newRawPicker(r.cycle, r.blocks, r.overwritePct, 0x647379)
	for seq := uint64(0); ; seq++ {
		isNew := p.next
		b := p.pick(nil)
		encodeRaw(buf, r.cycle, seq, b)
		if _, err := f.WriteAt(buf, int64(b)*recordSize); err != nil {
			return fmt.Errorf("write %d at block %d: %w", seq, b, err)
		}
		p.done(b, p.next != isNew)
		if err := a.ack("%d %d", seq, b); err != nil {
			return err
		}
	}
}
