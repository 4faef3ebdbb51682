package ump

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
)

// An endpoint is the far side of a fresh ring pair, as one descriptor
// that a message can carry to another process (docs/ump.md, "Endpoints"):
// a connected Unix stream socket on which the creator has already queued
// the hello of the handshake, with the attacher's descriptors and a label
// of the creator's (what the connection is for: chanos puts the
// interface there), and which becomes the attacher's liveness socket.
// Whoever holds it may attach, once; nothing waits for it, so the creator
// writes to the ring at once, and learns that the endpoint was dropped
// unopened as it would learn of a peer's death (the socket's end).

// MaxEndpointLabel bounds an endpoint's label.
const MaxEndpointLabel = 1024

// ErrEndpoint is matched by the errors of an endpoint that does not open:
// not one, already opened, or malformed.
var ErrEndpoint = errors.New("ump: not an endpoint, or one already opened")

// NewEndpoint makes a ring pair configured by o, opens its Creator side
// (returned) and returns the other side as an endpoint, which the caller
// owns: it hands it to another process, which opens it with
// OpenEndpoint. label (at most MaxEndpointLabel bytes) travels with it.
func NewEndpoint(o *Options, label []byte) (*Conn, *os.File, error) {
	if len(label) > MaxEndpointLabel {
		return nil, nil, fmt.Errorf("ump: endpoint label of %d bytes, at most %d", len(label), MaxEndpointLabel)
	}
	// The endpoint's end stays a bare descriptor, blocking, as C's are:
	// whoever opens it makes it a connection of its own (FileConn).
	myEnd, ep, err := LivenessPair()
	if err != nil {
		return nil, nil, err
	}
	mine, err := FileConn(myEnd)
	if err != nil {
		ep.Close()
		return nil, nil, err
	}
	f, err := NewFiles(o)
	if err != nil {
		mine.Close()
		ep.Close()
		return nil, nil, err
	}
	their, err := f.take(Attacher)
	if err != nil {
		f.Close()
		mine.Close()
		ep.Close()
		return nil, nil, err
	}
	defer their.Close() // sent, then closed: only the endpoint holds them
	c, err := open(Creator, f, mine, o, true)
	if err != nil {
		mine.Close()
		ep.Close()
		return nil, nil, err
	}
	msg := make([]byte, helloSize+4, helloSize+4+len(label))
	binary.LittleEndian.PutUint64(msg[0:], helloMagic)
	binary.LittleEndian.PutUint32(msg[8:], Version)
	binary.LittleEndian.PutUint32(msg[12:], helloFDs)
	binary.LittleEndian.PutUint32(msg[helloSize:], uint32(len(label)))
	msg = append(msg, label...)
	send := []int{their.Mem, their.Wake[Attacher][wakeData], their.Wake[Attacher][wakeSpace], their.Caps[Attacher]}
	// The socket pair is fresh and its buffer empty: this never waits.
	if _, _, err := mine.WriteMsgUnix(msg, syscall.UnixRights(send...), nil); err != nil {
		c.Close()
		ep.Close()
		return nil, nil, fmt.Errorf("ump: new endpoint: %w", err)
	}
	c.start()
	return c, ep, nil
}

// OpenEndpoint opens the Attacher side of the ring pair an endpoint
// leads to, taking ep over (closed on failure too), and returns the label
// it carried. Everything it reads was queued before the endpoint left its
// creator, so it never waits; what is not there, or not well formed,
// fails with ErrEndpoint (ErrProtocol for descriptors that do not pass
// Open's checks). o should set MaxMessageSize, so that a ring pair larger
// than the opener's interface needs is refused.
func OpenEndpoint(ep *os.File, o *Options) (*Conn, []byte, error) {
	sock, err := FileConn(ep)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrEndpoint, err)
	}
	c, label, err := openEndpoint(sock, o)
	if err != nil {
		sock.Close()
		return nil, nil, err
	}
	return c, label, nil
}

func openEndpoint(sock *net.UnixConn, o *Options) (*Conn, []byte, error) {
	// The bytes are there, or they never will be: one receive, which
	// never waits, takes the hello, its descriptors and the label (the
	// creator sent them in one message).
	buf := make([]byte, helloSize+4+MaxEndpointLabel+1)
	oob := make([]byte, syscall.CmsgSpace(16*4))
	rc, err := sock.SyscallConn()
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrEndpoint, err)
	}
	var n, oobn, flags int
	var rerr error
	if err := rc.Control(func(fd uintptr) {
		for {
			n, oobn, flags, _, rerr = syscall.Recvmsg(int(fd), buf, oob, syscall.MSG_DONTWAIT|syscall.MSG_CMSG_CLOEXEC)
			if rerr != syscall.EINTR {
				return
			}
		}
	}); err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrEndpoint, err)
	}
	var fds []int
	var perr error
	if rerr == nil {
		fds, perr = parseRights(oob[:oobn])
	}
	f := attacherFiles(fds)
	defer f.Close()
	switch {
	case rerr != nil:
		return nil, nil, fmt.Errorf("%w: %v", ErrEndpoint, rerr)
	case perr != nil:
		return nil, nil, perr
	case flags&syscall.MSG_CTRUNC != 0 || len(fds) != helloFDs:
		return nil, nil, fmt.Errorf("%w: %d descriptors, want %d", ErrEndpoint, len(fds), helloFDs)
	case n < helloSize+4:
		return nil, nil, fmt.Errorf("%w: a hello of %d bytes", ErrEndpoint, n)
	}
	head := buf[:helloSize+4]
	le := binary.LittleEndian
	if m, v, k := le.Uint64(head[0:]), le.Uint32(head[8:]), le.Uint32(head[12:]); m != helloMagic || v != Version || k != helloFDs {
		return nil, nil, fmt.Errorf("%w: bad hello (magic %#x, version %d, %d descriptors)", ErrEndpoint, m, v, k)
	}
	ln := le.Uint32(head[helloSize:])
	if ln > MaxEndpointLabel {
		return nil, nil, fmt.Errorf("%w: a label of %d bytes", ErrEndpoint, ln)
	}
	if n != helloSize+4+int(ln) {
		return nil, nil, fmt.Errorf("%w: %d bytes for a label of %d", ErrEndpoint, n-helloSize-4, ln)
	}
	label := append([]byte(nil), buf[helloSize+4:n]...)
	c, err := open(Attacher, f, sock, o, false)
	if err != nil {
		return nil, nil, err
	}
	c.start()
	return c, label, nil
}
