package seqpacket

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/chanos/chanos/interconnect"
	"github.com/chanos/chanos/wire"
)

// Link carries chanos frames over a seqpacket Conn, with their
// capabilities as descriptors beside them: the control path's
// interconnect (interconnect.Link). A context's end interrupts a send or
// a receive that waits, through the socket's deadlines. It is an
// interconnect.PeerWatcher too (Gone).
type Link struct {
	c *Conn

	wmu sync.Mutex // serialises sends, so that a write deadline is one send's
	rd  deadline
	wd  deadline

	gmu      sync.Mutex
	gone     chan struct{} // made by Gone; closed when the watch ends
	watch    *os.File      // a duplicate of the socket that the watch polls
	isClosed bool
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
	l.gmu.Lock()
	l.isClosed = true
	if l.watch != nil {
		l.watch.Close() // returns once the watch has let go of it
	}
	l.gmu.Unlock()
	err := l.c.Close()
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// Gone returns a channel closed once the peer has closed its end of the
// socket or died (a socket cannot tell which), or this side has closed
// the link; packets the peer sent before remain to be received. The
// first call starts the watch: a goroutine that waits, through the
// runtime's poller, on a duplicate of the socket (reading the socket
// itself would take packets from Receive) for the hang-up the kernel
// flags on the peer's close, whatever waits in the queue.
func (l *Link) Gone() <-chan struct{} {
	l.gmu.Lock()
	defer l.gmu.Unlock()
	if l.gone != nil {
		return l.gone
	}
	l.gone = make(chan struct{})
	if l.isClosed {
		close(l.gone)
		return l.gone
	}
	f, err := l.dupForWatch()
	if err != nil {
		// Without a watch the end is still read in order, only later:
		// the channel stays open rather than report a peer that is there.
		slog.Debug("seqpacket: no watch for the peer's end", "err", err)
		return l.gone
	}
	l.watch = f
	go l.watchPeer(f, l.gone)
	return l.gone
}

// dupForWatch returns a duplicate of the socket, non-blocking, as a file
// the runtime's poller waits on.
func (l *Link) dupForWatch() (*os.File, error) {
	rc, err := l.c.uc.SyscallConn()
	if err != nil {
		return nil, err
	}
	fd := -1
	var derr error
	if err := rc.Control(func(s uintptr) {
		r, _, e := syscall.Syscall(syscall.SYS_FCNTL, s, syscall.F_DUPFD_CLOEXEC, 0)
		if e != 0 {
			derr = os.NewSyscallError("fcntl", e)
			return
		}
		fd = int(r)
	}); err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, derr
	}
	if err := syscall.SetNonblock(fd, true); err != nil {
		syscall.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), "seqpacket-watch"), nil
}

// watchPeer waits until f, the socket's duplicate, flags the peer's
// hang-up or is closed, then closes gone. The poller wakes it when the
// socket's state changes (a packet, the hang-up); each time it looks,
// without waiting, whether the hang-up is among the socket's events.
func (l *Link) watchPeer(f *os.File, gone chan struct{}) {
	defer close(gone)
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	rc.Read(func(fd uintptr) bool { return hungUp(int(fd)) })
	f.Close() // the duplicate is needed no more; Close's own does nothing
}

// hungUp reports whether the socket fd has seen its peer's close, without
// waiting: POLLRDHUP or POLLHUP, which a seqpacket socket flags once the
// peer's end closed, whether or not packets wait to be read.
func hungUp(fd int) bool {
	const (
		pollERR   = 0x8
		pollHUP   = 0x10
		pollNVAL  = 0x20
		pollRDHUP = 0x2000
	)
	pfd := struct {
		fd             int32
		events, revent int16
	}{fd: int32(fd), events: pollRDHUP}
	var ts syscall.Timespec // zero: do not wait
	for {
		n, _, e := syscall.Syscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&pfd)), 1, uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
		switch {
		case e == syscall.EINTR:
			continue
		case e != 0:
			return true // the socket is unusable: stop watching
		}
		return n > 0 && pfd.revent&(pollRDHUP|pollHUP|pollERR|pollNVAL) != 0
	}
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
	_ interconnect.Link        = (*Link)(nil)
	_ interconnect.PeerWatcher = (*Link)(nil)
)
