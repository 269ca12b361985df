// SPDX-License-Identifier: Apache-2.0

// Package testnet gives tests loopback ports that stay theirs between the
// pick and the bind.
//
// A test that must know a server's address before the server binds it (an
// etcd member advertises every peer's URL before any starts; a proxy
// listens again on the port it was cut from) used to take a port the
// kernel chose for port 0 and close it. Such a port comes from the
// ephemeral range (net.ipv4.ip_local_port_range), from which the kernel
// also picks the source port of every outgoing connection — etcd's peers
// and clients open many — so the port could be gone by the time the
// server bound it: a CI run failed so with "address already in use". The
// ports here come from below that range, where only an explicit bind can
// take one; the pick is random so that test processes running side by
// side rarely try the same port, and a busy port is skipped.
package testnet

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// LoopbackPorts returns n distinct ports on 127.0.0.1, free when it
// returns and outside the ephemeral range.
func LoopbackPorts(t testing.TB, n int) []int {
	t.Helper()
	low, high := fixedRange()
	var ports []int
	// Hold every listener until all are chosen so no port comes twice.
	for tries := 0; len(ports) < n; tries++ {
		if tries > 1000 {
			t.Fatalf("no %d free loopback ports in %d-%d after %d tries", n, low, high, tries)
		}
		port := low + rand.IntN(high-low+1)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue // taken: try another
		}
		defer l.Close()
		ports = append(ports, port)
	}
	return ports
}

// LoopbackAddr returns one such port as host:port.
func LoopbackAddr(t testing.TB) string {
	t.Helper()
	return fmt.Sprintf("127.0.0.1:%d", LoopbackPorts(t, 1)[0])
}

// fixedRange returns the ports from 10000 (clear of the well-known and
// most registered service ports) to just below the ephemeral range.
func fixedRange() (low, high int) {
	const floor, linuxDefault = 10000, 32768
	start := linuxDefault
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil && v > floor+1000 {
				start = v
			}
		}
	}
	return floor, start - 1
}
