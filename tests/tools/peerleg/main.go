// SPDX-License-Identifier: Apache-2.0

// Command peerleg drives package nvmeof from a test VM: it exports a block
// device to one host over NVMe/TCP, or attaches such an export, with the
// timeouts tidecache uses for the peer leg of a mirror. It exists for the
// VM tests: tests/vm/peer_test.go checks with it that a replica export refuses
// every host but its owner.
//
//	peerleg export -nqn NQN -uuid UUID -device DEV -host HOSTNQN -addr IP [-port 4420]
//	peerleg unexport -nqn NQN
//	peerleg attach -nqn NQN -host HOSTNQN -addr IP [-port 4420]   (prints the device)
//	peerleg detach -nqn NQN
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/tidecache/tidecache/pkg/nvmeof"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: peerleg export|unexport|attach|detach [flags]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	nqn := fs.String("nqn", "", "subsystem NQN of the export")
	device := fs.String("device", "", "block device to export")
	host := fs.String("host", "", "host NQN: the only host the export allows (export), this host's NQN (attach)")
	addr := fs.String("addr", "", "IPv4 address the target listens on")
	port := fs.Int("port", 4420, "TCP port")
	wait := fs.Duration("wait", 30*time.Second, "how long attach waits for the namespace, and detach for the controllers to go")
	uuid := fs.String("uuid", "", "namespace UUID of the export (the same on every export of one replica)")
	secret := fs.String("secret", "", "DH-HMAC-CHAP secret: the host's key (export), the one this host presents (attach)")
	_ = fs.Parse(os.Args[2:])

	var err error
	switch os.Args[1] {
	case "export":
		err = nvmeof.NewTarget().Export(nvmeof.Export{NQN: *nqn, Device: *device, HostNQN: *host, HostKey: *secret, Addr: *addr, Port: *port, UUID: *uuid})
	case "unexport":
		err = nvmeof.NewTarget().Unexport(*nqn)
	case "attach":
		ctx, cancel := context.WithTimeout(context.Background(), *wait)
		defer cancel()
		var dev string
		dev, err = nvmeof.NewInitiator().Attach(ctx, nvmeof.Remote{NQN: *nqn, HostNQN: *host, Addr: *addr, Port: *port, Secret: *secret}, nvmeof.PeerLegTimeouts)
		if err == nil {
			fmt.Println(dev)
		}
	case "detach":
		ctx, cancel := context.WithTimeout(context.Background(), *wait)
		defer cancel()
		err = nvmeof.NewInitiator().Detach(ctx, *nqn)
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "peerleg:", err)
		os.Exit(1)
	}
}
