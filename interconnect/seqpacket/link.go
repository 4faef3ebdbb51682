package seqpacket

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/chanos/chanos/interconnect"
	"github.com/chanos/chanos/wire"
)

// Link carries chanos frames over a seqpacket Conn, with their
// capabilities as descriptors beside them: the control path's
// interconnect (interconnect.Link). A context's end interrupts a send or
// a receive that waits, through the socket's deadlines.
type Link struct {
	c *Conn

	wmu sync.Mutex // serialises sends, so that a write deadline is one send's
	rd  deadline
	wd  deadline
}

// NewLink returns the link over c, which it takes over.
func NewLink(c *Conn) *Link {
	l := &Link{c: c}
	l.rd.set = c.uc.SetReadDeadline
	l.wd.set = c.uc.SetWriteDeadline
	return l
}

// Conn returns the socket under the link.
func (l *Link) Conn() *Conn { return l.c }

// Kind returns "seqpacket".
func (l *Link) Kind() string { return "seqpacket" }

// SendFrame sends frame with caps, waiting for room in the peer's
// receive queue until ctx ends. The caps stay the caller's: the kernel
// duplicates their descriptors into the packet.
func (l *Link) SendFrame(ctx context.Context, frame []byte, caps []wire.Cap) error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	stop := l.wd.watch(ctx)
	err := l.c.Send(frame, caps)
	stop()
	return l.ended(ctx, err)
}

// TrySendFrame sends frame with caps if the peer's receive queue has room
// now.
func (l *Link) TrySendFrame(frame []byte, caps []wire.Cap) (bool, error) {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	sent, err := l.c.TrySend(frame, caps)
	return sent, l.ended(context.Background(), err)
}

// Receive waits for the next packet and sets *in to its frame and
// descriptors, which become the receiver's. A packet that is not a
// well-formed frame, too large or with too many descriptors ends the
// link with ErrProtocol, and the socket is closed so that the peer
// learns.
func (l *Link) Receive(ctx context.Context, in *interconnect.Incoming) error {
	stop := l.rd.watch(ctx)
	frame, caps, err := l.c.Receive()
	stop()
	if err != nil {
		*in = interconnect.Incoming{}
		if errors.Is(err, ErrTooLarge) || errors.Is(err, ErrTooManyCaps) {
			l.c.Close()
			return interconnect.Violation(err)
		}
		return l.ended(ctx, err)
	}
	if err := in.SetFrame(frame, caps); err != nil {
		wire.CloseCaps(caps)
		l.c.Close()
		return interconnect.Violation(fmt.Errorf("bad frame: %w", err))
	}
	if int(in.Header.NCaps) != len(caps) {
		n := in.Header.NCaps
		*in = interconnect.Incoming{}
		wire.CloseCaps(caps)
		l.c.Close()
		return interconnect.Violation(fmt.Errorf("the header announces %d descriptors but %d arrived", n, len(caps)))
	}
	return nil
}

// Close closes the socket.
func (l *Link) Close() error {
	err := l.c.Close()
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// ended classifies a socket error: the peer's close (or death, which a
// socket cannot tell apart) and this side's close end the link; the end
// of ctx is returned as ctx's error.
func (l *Link) ended(ctx context.Context, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, os.ErrDeadlineExceeded) && ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, io.EOF), errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.ECONNRESET):
		return interconnect.Ended(interconnect.ErrClosed, errors.New("chanos: connection closed: the peer's socket closed"))
	case errors.Is(err, net.ErrClosed):
		return interconnect.Ended(interconnect.ErrClosed, errors.New("chanos: connection closed: closed by this side"))
	}
	return err
}

// deadline interrupts one direction's wait when a context ends, by moving
// the socket's deadline for that direction into the past.
type deadline struct {
	set    func(time.Time) error
	mu     sync.Mutex
	active bool // a wait is in progress: the context's end may interrupt it
}

// watch arranges for ctx's end to interrupt the wait that follows, and
// returns the function that ends the arrangement, after which the
// direction has no deadline again. A context that never ends costs
// nothing.
func (d *deadline) watch(ctx context.Context) func() {
	if ctx.Done() == nil {
		return func() {}
	}
	d.mu.Lock()
	d.active = true
	d.mu.Unlock()
	stop := context.AfterFunc(ctx, func() {
		d.mu.Lock()
		if d.active {
			d.set(time.Unix(1, 0))
		}
		d.mu.Unlock()
	})
	return func() {
		stop()
		d.mu.Lock()
		d.active = false
		d.set(time.Time{})
		d.mu.Unlock()
	}
}

var (
	_ interconnect.Link = (*Link)(nil)
)
