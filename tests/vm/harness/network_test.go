// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/tidecache/tidecache/internal/testnet"
)

// fakeQemu connects to a link the way qemu's -netdev socket,connect= does.
func fakeQemu(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func sendFrame(t *testing.T, c net.Conn, payload string) {
	t.Helper()
	b := binary.BigEndian.AppendUint32(nil, uint32(len(payload)))
	if _, err := c.Write(append(b, payload...)); err != nil {
		t.Fatal(err)
	}
}

func recvFrame(t *testing.T, c net.Conn) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var hdr [4]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, binary.BigEndian.Uint32(hdr[:]))
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// startTestLink starts a link and its fake qemu, and waits until the link
// has taken the qemu connection.
func startTestLink(t *testing.T, n *Network) (*link, net.Conn) {
	t.Helper()
	l, addr, err := startLink(n, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.close)
	return l, fakeQemu(t, addr)
}

// exchange sends frames from a until b sees one: peers join asynchronously.
func exchange(t *testing.T, from, to net.Conn, payload string) {
	t.Helper()
	got := make(chan string, 1)
	go func() {
		var hdr [4]byte
		to.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(to, hdr[:]); err != nil {
			got <- "error: " + err.Error()
			return
		}
		b := make([]byte, binary.BigEndian.Uint32(hdr[:]))
		io.ReadFull(to, b)
		got <- string(b)
	}()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		sendFrame(t, from, payload)
		select {
		case s := <-got:
			if s != payload {
				t.Fatalf("got %q, want %q", s, payload)
			}
			drain(to)
			return
		case <-tick.C:
		}
	}
}

// drain discards frames that were sent while waiting for the first one.
func drain(c net.Conn) {
	c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	io.Copy(io.Discard, c)
	c.SetReadDeadline(time.Time{})
}

func TestLinkHubAndRejoin(t *testing.T) {
	addr := testnet.LoopbackAddr(t)
	// The Connect sides start first: they must wait for the Listen side.
	_, qb := startTestLink(t, &Network{Connect: addr})
	lc, qc := startTestLink(t, &Network{Connect: addr})
	la, qa := startTestLink(t, &Network{Listen: addr})

	exchange(t, qb, qa, "b to a")
	exchange(t, qc, qa, "c to a")
	// A hub: the others saw those frames too.
	drain(qb)
	drain(qc)
	sendFrame(t, qa, "a to all")
	if got := recvFrame(t, qb); got != "a to all" {
		t.Fatalf("b got %q", got)
	}
	if got := recvFrame(t, qc); got != "a to all" {
		t.Fatalf("c got %q", got)
	}
	sendFrame(t, qb, "b to c via the hub")
	if got := recvFrame(t, qc); got != "b to c via the hub" {
		t.Fatalf("c got %q", got)
	}
	drain(qa)

	// The Listen side's VM dies and comes back on the same address.
	la.close()
	qa.Close()
	_, qa = startTestLink(t, &Network{Listen: addr})
	exchange(t, qb, qa, "b to the new a")

	// A Connect side dies and comes back.
	lc.close()
	qc.Close()
	_, qc = startTestLink(t, &Network{Connect: addr})
	exchange(t, qa, qc, "a to the new c")
}

// TestLinkKeepsAMemberThatStopsReading: a VM's qemu that reads nothing
// for seconds (its NIC not up yet, during a boot) while another floods
// the hub keeps its link: what it could not take is dropped, and once it
// reads again it exchanges frames both ways. The link used to end a
// member after a 5-s write deadline, and the booting VM stayed off the
// network.
func TestLinkKeepsAMemberThatStopsReading(t *testing.T) {
	addr := testnet.LoopbackAddr(t)
	_, qa := startTestLink(t, &Network{Listen: addr})
	_, qb := startTestLink(t, &Network{Connect: addr})
	exchange(t, qa, qb, "b joined")

	// 12 MB/s for 6 s, b reading none of it: more than the queues and
	// the sockets hold.
	frame := binary.BigEndian.AppendUint32(nil, 60000)
	frame = append(frame, make([]byte, 60000)...)
	for end := time.Now().Add(6 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		qa.SetWriteDeadline(time.Now().Add(2 * time.Second))
		if _, err := qa.Write(frame); err != nil {
			t.Fatalf("a's flood: %v (the link stopped taking a's frames)", err)
		}
	}
	qa.SetWriteDeadline(time.Time{})

	// b reads what was kept for it, then the link carries frames again.
	for {
		qb.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		n, err := io.Copy(io.Discard, qb)
		if n == 0 || err == nil {
			break
		}
	}
	qb.SetReadDeadline(time.Time{})
	exchange(t, qb, qa, "b to a after the flood")
	exchange(t, qa, qb, "a to b after the flood")
}

func TestLinkListenInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if _, _, err := startLink(&Network{Listen: ln.Addr().String()}, slog.New(slog.DiscardHandler)); err == nil {
		t.Fatal("listening on a busy address succeeded")
	}
}
