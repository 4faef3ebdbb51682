package chanos

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/chanos/chanos/interconnect/ump"
	"github.com/chanos/chanos/wire"
)

// endError is an interconnect's error, classified as one of ErrClosed,
// ErrPeerDied or ErrProtocol while keeping the interconnect's text.
type endError struct {
	kind  error
	cause error
}

func (e *endError) Error() string {
	if e.cause == nil {
		return e.kind.Error()
	}
	return e.cause.Error()
}

func (e *endError) Is(target error) bool { return target == e.kind }
func (e *endError) Unwrap() error        { return e.cause }

// isEnd reports whether err means the connection has ended.
func isEnd(err error) bool {
	return err != nil && (errors.Is(err, ErrClosed) || errors.Is(err, ErrPeerDied) || errors.Is(err, ErrProtocol))
}

// umpLink carries frames over a shared-memory ring pair.
type umpLink struct {
	u *ump.Conn
}

// NewConn returns a Conn speaking iface over u, which it takes over.
// Domains get their connections from Connect and Listener.Accept; NewConn
// is for programs that set up ring pairs themselves, like the monitor.
func NewConn(u *ump.Conn, iface Interface) *Conn {
	return newConn(&umpLink{u: u}, iface, nil)
}

func (l *umpLink) kind() string { return "ump" }

func (l *umpLink) sendFrame(ctx context.Context, frame []byte, caps []wire.Cap) error {
	if len(caps) > 0 {
		return ErrCapsUnsupported
	}
	return umpErr(l.u.Send(ctx, frame))
}

func (l *umpLink) trySendFrame(frame []byte, caps []wire.Cap) (bool, error) {
	if len(caps) > 0 {
		return false, ErrCapsUnsupported
	}
	ok, err := l.u.TrySend(frame)
	return ok, umpErr(err)
}

func (l *umpLink) sendValue(context.Context, wire.Message) error {
	return errors.New("chanos: values only travel on the local interconnect")
}

func (l *umpLink) receive(ctx context.Context, in *Incoming) error {
	frame, err := l.u.ReceiveExclusive(ctx) // callers hold the reading turn
	if err != nil {
		*in = Incoming{}
		return umpErr(err)
	}
	return l.incoming(frame, in)
}

// incoming sets *in to frame, a frame the ring delivered.
func (l *umpLink) incoming(frame []byte, in *Incoming) error {
	k, err := wire.ParseFrameInto(&in.Header, frame)
	if err == nil && in.Header.NCaps == 0 {
		in.Kind, in.Frame, in.Caps, in.Msg, in.Inline = k, frame, nil, nil, false
		return nil
	}
	if err == nil {
		err = fmt.Errorf("frame carries %d capabilities, which ump cannot pass yet", in.Header.NCaps)
	}
	*in = Incoming{}
	// A malformed frame ends the connection: close it so the peer learns.
	l.u.Close()
	return &endError{kind: ErrProtocol, cause: fmt.Errorf("chanos: protocol violation: %w", err)}
}

func (l *umpLink) close() error { return l.u.Close() }

// umpErr classifies the ring's errors.
func umpErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ump.ErrClosed):
		return &endError{kind: ErrClosed, cause: err}
	case errors.Is(err, ump.ErrPeerDied):
		return &endError{kind: ErrPeerDied, cause: err}
	case errors.Is(err, ump.ErrProtocol):
		return &endError{kind: ErrProtocol, cause: err}
	}
	return err
}

// localBuffer is how many messages a local connection holds per direction
// before Send blocks.
const localBuffer = 64

// A localItem is what travels on a local connection: a message value
// (m), or an encoded frame (f). A struct rather than an interface holding
// either: taking the message out of an interface cost a type assertion,
// an itab lookup, per message.
type localItem struct {
	m wire.Message
	f *localFrame
}

// localFrame is an encoded frame (an rpc call or reply, an error reply, a
// cancel) on a local connection.
type localFrame struct {
	h     wire.Header
	k     wire.Kind
	frame []byte
	caps  []wire.Cap
}

// pipe is one direction of a local connection.
//
// Its receiver waits on ch alone, which costs a fraction of a select over
// ch, the close and its context. What else must end that wait puts an
// empty item in ch, a wake-up: the close, and the end of the context the
// receiver waits with (context.AfterFunc, registered once per Done
// channel, as ump's parker does).
type pipe struct {
	ch     chan localItem
	closed chan struct{}
	shut   atomic.Bool // closed, for the fast paths that avoid a select
	once   sync.Once

	wmu   sync.Mutex
	wdone <-chan struct{} // Done of the context whose end wakes the receiver
	wstop func() bool     // unregisters that wake-up
}

func newPipe() *pipe {
	return &pipe{ch: make(chan localItem, localBuffer), closed: make(chan struct{})}
}

func (p *pipe) close() {
	p.once.Do(func() {
		p.shut.Store(true)
		close(p.closed)
		p.wake()
		p.wmu.Lock()
		if p.wstop != nil {
			p.wstop()
			p.wstop, p.wdone = nil, nil
		}
		p.wmu.Unlock()
	})
}

// wake ends the receiver's wait, if it waits: a full ch does not keep it
// waiting anyway.
func (p *pipe) wake() {
	select {
	case p.ch <- localItem{}:
	default:
	}
}

// watch makes the end of ctx, whose Done is done, wake the receiver.
func (p *pipe) watch(ctx context.Context, done <-chan struct{}) {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if done == p.wdone || p.shut.Load() {
		return
	}
	if p.wstop != nil {
		p.wstop()
	}
	p.wdone, p.wstop = done, context.AfterFunc(ctx, p.wake)
}

// localLink is one end of a connection within one process. One-way
// messages travel as values (copies made by the generated MsgClone, so the
// sender may reuse its slices); rpc calls and replies travel as frames.
type localLink struct {
	in, out *pipe
}

// localPair returns the two ends of a local connection.
func localPair() (a, b *localLink) {
	ab, ba := newPipe(), newPipe()
	return &localLink{in: ba, out: ab}, &localLink{in: ab, out: ba}
}

func (l *localLink) kind() string { return "local" }

func (l *localLink) put(ctx context.Context, it localItem) error {
	if l.out.shut.Load() || l.in.shut.Load() {
		return &endError{kind: ErrClosed}
	}
	// A multi-way select costs several times a plain channel operation:
	// try the plain one first.
	select {
	case l.out.ch <- it:
		return nil
	default:
	}
	select {
	case l.out.ch <- it:
		return nil
	case <-l.out.closed:
		return &endError{kind: ErrClosed}
	case <-l.in.closed:
		return &endError{kind: ErrClosed}
	case <-ctx.Done():
		return ctx.Err()
	}
}

// tryPut is put without the wait.
func (l *localLink) tryPut(it localItem) (bool, error) {
	if l.out.shut.Load() || l.in.shut.Load() {
		return false, &endError{kind: ErrClosed}
	}
	select {
	case l.out.ch <- it:
		return true, nil
	default:
		return false, nil
	}
}

func (l *localLink) sendValue(ctx context.Context, m wire.Message) error {
	return l.put(ctx, localItem{m: m})
}

// copyFrame parses frame and copies it, with caps: the caller reuses its
// buffer, and the capabilities are handed over as they are, since both
// ends share one descriptor table.
func copyFrame(frame []byte, caps []wire.Cap) (*localFrame, error) {
	return ownFrame(append([]byte(nil), frame...), append([]wire.Cap(nil), caps...))
}

// ownFrame parses frame, which the caller hands over with caps.
func ownFrame(frame []byte, caps []wire.Cap) (*localFrame, error) {
	h, k, err := wire.ParseFrame(frame)
	if err != nil {
		return nil, err
	}
	return &localFrame{h: h, k: k, frame: frame, caps: caps}, nil
}

func (l *localLink) sendFrame(ctx context.Context, frame []byte, caps []wire.Cap) error {
	f, err := copyFrame(frame, caps)
	if err != nil {
		return err
	}
	return l.put(ctx, localItem{f: f})
}

func (l *localLink) trySendFrame(frame []byte, caps []wire.Cap) (bool, error) {
	f, err := copyFrame(frame, caps)
	if err != nil {
		return false, err
	}
	return l.tryPut(localItem{f: f})
}

func (l *localLink) receive(ctx context.Context, in *Incoming) error {
	it, err := l.next(ctx)
	if err != nil {
		*in = Incoming{}
		return err
	}
	// Field by field rather than *in = Incoming{...}: a composite value is
	// built in pieces on the stack and copied whole, which stalls on every
	// message (see wire.ParseFrameInto).
	in.Inline = false
	if f := it.f; f != nil {
		in.Kind, in.Header, in.Frame, in.Caps, in.Msg = f.k, f.h, f.frame, f.caps, nil
	} else {
		in.Kind, in.Header, in.Frame, in.Caps, in.Msg = wire.KindMessage, wire.Header{}, nil, nil, it.m
		in.Header.Msg = it.m.MsgNumber()
	}
	return nil
}

// next waits for the next item.
func (l *localLink) next(ctx context.Context) (localItem, error) {
	p := l.in
	for {
		select {
		case it := <-p.ch:
			if it.m != nil || it.f != nil {
				return it, nil
			}
			continue // a wake-up: look again
		default:
		}
		if p.shut.Load() {
			return l.drain()
		}
		if done := ctx.Done(); done != nil {
			select {
			case <-done:
				return localItem{}, ctx.Err()
			default:
			}
			p.watch(ctx, done)
		}
		if it := <-p.ch; it.m != nil || it.f != nil {
			return it, nil
		}
	}
}

// drain returns what was sent before the connection closed, then
// ErrClosed.
func (l *localLink) drain() (localItem, error) {
	for {
		select {
		case it := <-l.in.ch:
			if it.m != nil || it.f != nil {
				return it, nil
			}
		default:
			return localItem{}, &endError{kind: ErrClosed}
		}
	}
}

func (l *localLink) close() error {
	l.out.close()
	l.in.close()
	return nil
}
