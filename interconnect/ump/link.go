package ump

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/chanos/chanos/interconnect"
	"github.com/chanos/chanos/wire"
)

// Link carries chanos frames over a ring pair: it is the ump interconnect
// as the connection engine sees it (interconnect.Link, PartsSender,
// RawReceiver, PeerWatcher and BufferSwapper). The descriptors of frames with
// capabilities travel beside the rings, on the caps socket (fds.go).
//
// Its Receive and ReceiveRaw use the ring's exclusive receive: the engine
// calls them from one goroutine at a time (the holder of its reading
// turn).
type Link struct {
	c *Conn
}

// NewLink returns the link over c, which it takes over.
func NewLink(c *Conn) *Link { return &Link{c: c} }

// Conn returns the ring pair under the link.
func (l *Link) Conn() *Conn { return l.c }

// Kind returns "ump".
func (l *Link) Kind() string { return "ump" }

// SendFrame sends frame, waiting for room, with the descriptors of caps
// beside it (the receiver gets duplicates; the caller keeps caps).
func (l *Link) SendFrame(ctx context.Context, frame []byte, caps []wire.Cap) error {
	if len(caps) == 0 {
		return l.c.Send(ctx, frame)
	}
	if sent, err := l.sendNow(frame, caps); sent || err != nil {
		return err
	}
	fds, err := capFDs(caps)
	if err != nil {
		return err
	}
	defer closeFDs(fds...)
	return l.c.SendFDs(ctx, frame, fds)
}

// TrySendFrame sends frame, with caps, if there is room now.
func (l *Link) TrySendFrame(frame []byte, caps []wire.Cap) (bool, error) {
	if len(caps) == 0 {
		return l.c.TrySend(frame)
	}
	if sent, err := l.sendNow(frame, caps); sent || err != nil {
		return sent, err
	}
	fds, err := capFDs(caps)
	if err != nil {
		return false, err
	}
	defer closeFDs(fds...)
	return l.c.TrySendFDs(frame, fds)
}

// sendNow sends frame with the caps' own descriptors, lent for a send
// that waits for nothing (sendFDsNow), and reports whether it did. Usually
// it does; when the ring is full, or another send holds it, the caller
// sends with duplicates instead, so that a Close of a cap meanwhile does
// not wait for a slow peer.
func (l *Link) sendNow(frame []byte, caps []wire.Cap) (bool, error) {
	if err := checkFDCount(len(caps)); err != nil {
		return false, err
	}
	var sent bool
	err := lendFDs(caps, make([]int, 0, len(caps)), func(fds []int) (err error) {
		sent, err = l.c.sendFDsNow(frame, fds)
		return err
	})
	return sent, err
}

// lendFDs calls send with the descriptors of caps appended to fds, held
// for the call without a duplicate: a cap with a SyscallConn (a file, a
// socket) lends its descriptor inside RawConn.Control, during which the
// descriptor cannot be closed, so its number cannot be reused; any other
// cap is duplicated (wire.DupFD) and the duplicate closed after. Lending
// saves those two system calls per descriptor per message. send must not
// wait: a Close of a lent cap waits for it to return.
func lendFDs(caps []wire.Cap, fds []int, send func(fds []int) error) error {
	if len(caps) == 0 {
		return send(fds)
	}
	i := len(fds)
	if sc, ok := caps[0].(syscall.Conn); ok {
		rc, err := sc.SyscallConn()
		if err != nil {
			return fmt.Errorf("ump: capability %d: %w", i, err)
		}
		var serr error
		if err := rc.Control(func(fd uintptr) { serr = lendFDs(caps[1:], append(fds, int(fd)), send) }); err != nil {
			return fmt.Errorf("ump: capability %d: %w", i, err)
		}
		return serr
	}
	fd, err := wire.DupFD(caps[0])
	if err != nil {
		return fmt.Errorf("ump: capability %d: %w", i, err)
	}
	defer closeFDs(fd)
	return lendFDs(caps[1:], append(fds, fd), send)
}

// SendParts sends the frame made of head, body and tail, copying each
// part straight into the ring.
func (l *Link) SendParts(ctx context.Context, head, body, tail []byte) error {
	return l.c.SendParts(ctx, head, body, tail)
}

// TrySendParts is SendParts if the ring has room now.
func (l *Link) TrySendParts(head, body, tail []byte) (bool, error) {
	return l.c.TrySendParts(head, body, tail)
}

// Receive waits for the next frame and parses it into *in. in.Frame is
// valid until the next receive.
func (l *Link) Receive(ctx context.Context, in *interconnect.Incoming) error {
	frame, err := l.c.ReceiveExclusive(ctx)
	if err != nil {
		*in = interconnect.Incoming{}
		return err
	}
	return l.Parse(frame, in)
}

// ReceiveRaw waits for the next frame and returns it unparsed, copied out
// of shared memory but not checked. It is valid until the next receive.
func (l *Link) ReceiveRaw(ctx context.Context) ([]byte, error) {
	return l.c.ReceiveExclusive(ctx)
}

// SwapReceiveBuffer implements interconnect.BufferSwapper (see
// Conn.SwapReceiveBuffer).
func (l *Link) SwapReceiveBuffer(spare []byte) []byte { return l.c.SwapReceiveBuffer(spare) }

// Parse sets *in to frame, a frame ReceiveRaw returned, with the
// descriptors its header announces (as *os.File capabilities, which the
// receiver owns). A malformed frame, or descriptors that do not match,
// end the connection: the ring is closed so that the peer learns, and the
// error matches ErrProtocol.
func (l *Link) Parse(frame []byte, in *interconnect.Incoming) error {
	n := 0
	if len(frame) >= wire.HeaderSize {
		n = int(frame[7]) // ncaps, taken whatever the rest says: a bad frame's descriptors are closed
	}
	var caps []wire.Cap
	if n > 0 {
		fds, err := l.c.ReceiveFDs(n)
		if err != nil {
			*in = interconnect.Incoming{}
			if interconnect.IsEnd(err) && !errors.Is(err, ErrProtocol) {
				return err // closed meanwhile
			}
			l.c.Close()
			return interconnect.Violation(err)
		}
		caps = make([]wire.Cap, len(fds))
		for i, fd := range fds {
			caps[i] = os.NewFile(uintptr(fd), "chanos-cap")
		}
	}
	err := in.SetFrame(frame, caps)
	if err == nil {
		return nil
	}
	wire.CloseCaps(caps)
	l.c.Close()
	return interconnect.Violation(err)
}

// Close closes the ring pair.
func (l *Link) Close() error { return l.c.Close() }

// Gone returns a channel closed once the peer's end of the connection's
// socket has closed (the peer closed the connection or died) or this
// side has closed the ring pair: it is closed when the connection's
// socket watcher exits, which it does only then, having recorded how the
// peer ended. Messages the peer sent before remain to be received.
func (l *Link) Gone() <-chan struct{} { return l.c.watchDone }

var (
	_ interconnect.Link          = (*Link)(nil)
	_ interconnect.BufferSwapper = (*Link)(nil)
	_ interconnect.PartsSender   = (*Link)(nil)
	_ interconnect.RawReceiver   = (*Link)(nil)
	_ interconnect.PeerWatcher   = (*Link)(nil)
)
