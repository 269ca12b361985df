// SPDX-License-Identifier: Apache-2.0

package testnet

import (
	"net"
	"strconv"
	"testing"
)

// The ports are distinct, bindable, and below the ephemeral range.
func TestLoopbackPorts(t *testing.T) {
	low, high := fixedRange()
	if low >= high {
		t.Fatalf("empty range %d-%d", low, high)
	}
	ports := LoopbackPorts(t, 20)
	seen := map[int]bool{}
	for _, p := range ports {
		if p < low || p > high {
			t.Errorf("port %d outside %d-%d", p, low, high)
		}
		if seen[p] {
			t.Errorf("port %d twice", p)
		}
		seen[p] = true
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Errorf("port %d not free after the pick: %v", p, err)
			continue
		}
		l.Close()
	}
}
