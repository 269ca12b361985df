// SPDX-License-Identifier: Apache-2.0

// Command crashwriter runs write workloads inside a test VM, acknowledging
// each operation on a side channel only after the syscalls that make it
// durable have returned, and, after a power cut and a reboot, verifies that
// every acknowledged operation survived.
//
// The acknowledgements go to a serial port (the VM's ack channel) that the
// host records to a file, so they survive the VM being killed. Each ack is
// one write() of one line followed by tcdrain (TCSBRK 1): the next
// operation starts only once the line has left the guest, so no
// acknowledgement is still in the UART when the power goes. Lines carry a
// workload tag so that several writers can share the port:
//
//	<tag> <cycle> <seq> <what the operation did...>
//
// Workloads (each file of this command holds one):
//
//	crashwriter write  -dev D -ack /dev/ttyS1 -cycle N -blocks M    (raw.go: sequential records, fdatasync per batch)
//	crashwriter verify -dev D -cycle N -through S
//	crashwriter fs        write|verify ...   (fs.go: files on a mounted filesystem)
//	crashwriter raw-dsync write|verify ...   (rawdsync.go: O_DIRECT|O_DSYNC pwrite at QD1)
//	crashwriter raw-aio   write|verify ...   (rawaio.go: O_DIRECT|O_DSYNC through Linux AIO at QD>1)
//
// A verify reads the ack log the host recorded (-acks FILE) and prints
// "verified N acknowledged records|ops ...: L lost"; it exits 1 when
// anything acknowledged is lost or damaged.
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "write":
		err = write(os.Args[2:])
	case "verify":
		err = verify(os.Args[2:])
	case "fs", "raw-dsync", "raw-aio":
		if len(os.Args) < 3 || (os.Args[2] != "write" && os.Args[2] != "verify") {
			usage()
		}
		err = workload(os.Args[1], os.Args[2], os.Args[3:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "crashwriter:", err)
		os.Exit(1)
	}
}

func workload(name, verb string, args []string) error {
	switch name + " " + verb {
	case "fs write":
		return fsWrite(args)
	case "fs verify":
		return fsVerify(args)
	case "raw-dsync write":
		return rawDsyncWrite(args)
	case "raw-aio write":
		return rawAIOWrite(args)
	default: // raw-dsync verify, raw-aio verify
		return rawVerify(name, args)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: crashwriter write|verify [flags]\n       crashwriter fs|raw-dsync|raw-aio write|verify [flags]")
	os.Exit(2)
}
