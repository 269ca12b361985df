// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// A VM's network link does not join qemu to its peer directly. qemu's
// `-netdev socket,connect=` gives up silently when nothing listens yet (its
// non-blocking connect fails after qemu has started), and neither side
// reconnects after the other was killed, which a power-cut test of two
// nodes does on purpose. So each VM's qemu connects to a link run by the
// harness in the test process, which
//   - listens on Network.Listen and accepts any number of peers, forwarding
//     every frame from any member (its qemu or a peer) to all the others: an
//     Ethernet hub, so several Connect VMs can join one Listen VM; or
//   - dials Network.Connect until it answers, and again whenever the peer
//     goes away (as a cable plugged back in).
// While no peer is there, frames are dropped, as on an unplugged cable.
// Frames use qemu's socket netdev format: a 4-byte big-endian length, then
// the Ethernet frame.

// maxFrame bounds a frame (qemu's NET_BUFSIZE is 4096 + 65536).
const maxFrame = 4096 + 65536

// portQueue is how many frames wait for a member, as at a switch port.
const portQueue = 256

// stallAfter is how long a member with a full queue may take no frame
// before the frames for it are dropped instead of waited for. Until then
// the link waits, so a member that reads slowly slows its senders down
// (TCP's back pressure) rather than losing frames. But a member may stop
// reading for seconds: qemu does not read its socket while the guest's
// NIC is not up, during a boot. Ending that member after a write deadline
// (as the link did before) ended the link of a VM booting beside two
// others' NVMe/TCP traffic, and the VM stayed off the network for good
// (TestMoveWarm, b after its power cut: "no route to host" both ways).
// Dropping is what a switch does at a full port; Ethernet's users
// retransmit.
const stallAfter = time.Second

type link struct {
	log      *slog.Logger
	qemuLn   net.Listener // qemu connects here
	peerLn   net.Listener // Listen side: peers connect here
	dialAddr string       // Connect side: the peer's address

	mu      sync.Mutex
	members map[*member]bool
	closed  bool
	done    chan struct{}
}

type member struct {
	conn    net.Conn
	out     chan []byte   // frames waiting to be written, portQueue at most
	gone    chan struct{} // closed when the member is removed
	wrote   atomic.Int64  // when it last took or wrote a frame, or joined (UnixNano)
	dropped atomic.Int64  // frames dropped while it took none
}

// startLink listens for the VM's qemu (the returned address goes in its
// -netdev socket,connect=) and for or towards the peer.
func startLink(n *Network, log *slog.Logger) (*link, string, error) {
	qln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", fmt.Errorf("network: %w", err)
	}
	l := &link{log: log, qemuLn: qln, members: map[*member]bool{}, done: make(chan struct{})}
	if n.Listen != "" {
		pln, err := net.Listen("tcp", n.Listen)
		if err != nil {
			qln.Close()
			return nil, "", fmt.Errorf("network: listen on %s: %w", n.Listen, err)
		}
		l.peerLn = pln
		go l.acceptPeers()
	} else {
		l.dialAddr = n.Connect
		go l.dialPeer()
	}
	go l.acceptQemu()
	return l, qln.Addr().String(), nil
}

// acceptQemu takes qemu's one connection; when it ends the VM is gone and
// so is the link.
func (l *link) acceptQemu() {
	conn, err := l.qemuLn.Accept()
	l.qemuLn.Close()
	if err != nil {
		return
	}
	m := l.add(conn)
	if m == nil {
		return
	}
	l.forward(m)
	l.close()
}

func (l *link) acceptPeers() {
	for {
		conn, err := l.peerLn.Accept()
		if err != nil {
			return
		}
		if m := l.add(conn); m != nil {
			l.log.Info("network peer joined", "peer", conn.RemoteAddr().String())
			go l.forward(m)
		}
	}
}

func (l *link) dialPeer() {
	for {
		conn, err := net.DialTimeout("tcp", l.dialAddr, time.Second)
		if err == nil {
			if m := l.add(conn); m != nil {
				l.log.Info("network peer connected", "peer", l.dialAddr)
				l.forward(m)
				if !l.isClosed() {
					l.log.Info("network peer gone; redialing", "peer", l.dialAddr)
				}
			}
		}
		select {
		case <-l.done:
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (l *link) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

func (l *link) add(conn net.Conn) *member {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		conn.Close()
		return nil
	}
	m := &member{conn: conn, out: make(chan []byte, portQueue), gone: make(chan struct{})}
	m.wrote.Store(time.Now().UnixNano())
	l.members[m] = true
	go m.write()
	return m
}

// write writes the frames queued for m until it is removed or a write
// fails (its forward loop then sees the closed conn and removes it).
func (m *member) write() {
	for {
		select {
		case <-m.gone:
			return
		case frame := <-m.out:
			// Taking a frame counts as progress: after a quiet spell
			// the first write of a burst is not a stall.
			m.wrote.Store(time.Now().UnixNano())
			if _, err := m.conn.Write(frame); err != nil {
				m.conn.Close()
				return
			}
			m.wrote.Store(time.Now().UnixNano())
		}
	}
}

// deliver queues frame for m, waiting while its queue is full unless m
// has been in one write for stallAfter: then the frame is dropped.
func (m *member) deliver(frame []byte) {
	select {
	case m.out <- frame:
		return
	default:
	}
	if time.Since(time.Unix(0, m.wrote.Load())) > stallAfter {
		m.dropped.Add(1)
		return
	}
	t := time.NewTimer(stallAfter)
	defer t.Stop()
	select {
	case m.out <- frame:
	case <-m.gone:
	case <-t.C:
		m.dropped.Add(1)
	}
}

func (l *link) remove(m *member) {
	l.mu.Lock()
	if l.members[m] {
		delete(l.members, m)
		close(m.gone)
	}
	l.mu.Unlock()
	m.conn.Close()
	if dropped := m.dropped.Load(); dropped > 0 {
		l.log.Info("network member gone; frames it did not read in time were dropped", "peer", m.conn.RemoteAddr().String(), "dropped", dropped)
	}
}

// forward copies frames from m to every other member until m fails.
func (l *link) forward(m *member) {
	defer l.remove(m)
	var hdr [4]byte
	buf := make([]byte, maxFrame)
	for {
		if _, err := io.ReadFull(m.conn, hdr[:]); err != nil {
			return
		}
		n := binary.BigEndian.Uint32(hdr[:])
		if n > maxFrame {
			l.log.Warn("network: oversized frame; dropping the member", "bytes", n)
			return
		}
		if _, err := io.ReadFull(m.conn, buf[:n]); err != nil {
			return
		}
		frame := append(hdr[:], buf[:n]...)
		l.mu.Lock()
		others := make([]*member, 0, len(l.members))
		for o := range l.members {
			if o != m {
				others = append(others, o)
			}
		}
		l.mu.Unlock()
		for _, o := range others {
			o.deliver(frame)
		}
	}
}

// close ends the link: listeners, members, the dial loop.
func (l *link) close() {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	close(l.done)
	ms := l.members
	l.members = map[*member]bool{}
	l.mu.Unlock()
	l.qemuLn.Close()
	if l.peerLn != nil {
		l.peerLn.Close()
	}
	for m := range ms {
		close(m.gone)
		m.conn.Close()
	}
}
