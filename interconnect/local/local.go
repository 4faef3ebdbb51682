// Package local is the interconnect between goroutines of one process.
//
// One-way messages travel as values (copies the sender makes, so that it
// may reuse its slices), never encoded; rpc calls, replies and the
// engine's own frames travel as frames, copied. Capabilities are handed
// over as they are, since both ends share one descriptor table. Each
// direction buffers Buffer items; a full buffer blocks the sender.
package local

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/chanos/chanos/interconnect"
	"github.com/chanos/chanos/wire"
)

// Buffer is how many items a direction holds before a send blocks.
const Buffer = 64

// An item is what travels on a local connection: a message value, or an
// encoded frame (a *frame); nil is a wake-up. An interface of two words
// rather than a struct of a value and a frame pointer (three): the
// channel copies each element in and out, and the longer copy costs a
// one-way message about 2 ns (BenchmarkLocalSendReceive). A frame is
// told from a value by its concrete type, one comparison; the values are
// wire.Messages already, so none needs an assertion.
type item = wire.Message

// frame is an encoded frame (an rpc call or reply, an error reply, a
// cancel), parsed once by the sender.
type frame struct {
	h     wire.Header
	k     wire.Kind
	frame []byte
	caps  []wire.Cap
	meta  wire.Metadata // a call's, taken off frame
}

// A frame is a wire.Message only to travel as an item; Receive sets it
// out as a frame, and nothing encodes or decodes it.
func (f *frame) Encode(*wire.Buffer) error       { return errFrameItem }
func (f *frame) Decode([]byte, []wire.Cap) error { return errFrameItem }
func (f *frame) MsgNumber() uint16               { return f.h.Msg }
func (f *frame) MsgKind() wire.Kind              { return f.k }
func (f *frame) MsgName() string                 { return "local.frame" }

var errFrameItem = errors.New("local: a frame in transit is not a message")

// pipe is one direction of a local connection.
//
// Its receiver waits on ch alone, which costs a fraction of a select over
// ch, the close and its context. What else must end that wait puts an
// empty item in ch, a wake-up: the close, and the end of the context the
// receiver waits with (context.AfterFunc, registered once per Done
// channel, as ump's parker does).
type pipe struct {
	ch     chan item
	closed chan struct{}
	shut   atomic.Bool // closed, for the fast paths that avoid a select
	once   sync.Once

	wmu   sync.Mutex
	wdone <-chan struct{} // Done of the context whose end wakes the receiver
	wstop func() bool     // unregisters that wake-up
}

func newPipe() *pipe {
	return &pipe{ch: make(chan item, Buffer), closed: make(chan struct{})}
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
	case p.ch <- nil:
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

// Link is one end of a connection within one process. It implements
// interconnect.Link, PartsSender, ValueSender, PeerWatcher and
// BufferSwapper.
type Link struct {
	in, out *pipe
}

// Pair returns the two ends of a local connection.
func Pair() (a, b *Link) {
	ab, ba := newPipe(), newPipe()
	return &Link{in: ba, out: ab}, &Link{in: ab, out: ba}
}

var errClosed = interconnect.Ended(interconnect.ErrClosed, nil)

// Kind returns "local".
func (l *Link) Kind() string { return "local" }

func (l *Link) put(ctx context.Context, it item) error {
	if l.out.shut.Load() || l.in.shut.Load() {
		return errClosed
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
		return errClosed
	case <-l.in.closed:
		return errClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// tryPut is put without the wait.
func (l *Link) tryPut(it item) (bool, error) {
	if l.out.shut.Load() || l.in.shut.Load() {
		return false, errClosed
	}
	select {
	case l.out.ch <- it:
		return true, nil
	default:
		return false, nil
	}
}

// SendValue sends m, which the receiver gets as it is: the caller hands
// it over.
func (l *Link) SendValue(ctx context.Context, m wire.Message) error {
	if m == nil {
		return errors.New("local: send of a nil message")
	}
	return l.put(ctx, m)
}

// own parses b, which the caller hands over with caps.
func own(b []byte, caps []wire.Cap) (*frame, error) {
	var in interconnect.Incoming
	if err := in.SetFrame(b, caps); err != nil {
		return nil, err
	}
	return &frame{h: in.Header, k: in.Kind, frame: in.Frame, caps: caps, meta: in.Meta}, nil
}

// copyFrame parses b and copies it, with caps: the caller reuses its
// buffer.
func copyFrame(b []byte, caps []wire.Cap) (*frame, error) {
	return own(append([]byte(nil), b...), append([]wire.Cap(nil), caps...))
}

// SendFrame sends a copy of b with caps, waiting for room.
func (l *Link) SendFrame(ctx context.Context, b []byte, caps []wire.Cap) error {
	f, err := copyFrame(b, caps)
	if err != nil {
		return err
	}
	return l.put(ctx, f)
}

// TrySendFrame is SendFrame without the wait.
func (l *Link) TrySendFrame(b []byte, caps []wire.Cap) (bool, error) {
	f, err := copyFrame(b, caps)
	if err != nil {
		return false, err
	}
	return l.tryPut(f)
}

// SendParts sends the frame made of head, body and tail, copied once.
func (l *Link) SendParts(ctx context.Context, head, body, tail []byte) error {
	f, err := own(slices.Concat(head, body, tail), nil)
	if err != nil {
		return err
	}
	return l.put(ctx, f)
}

// TrySendParts is SendParts without the wait.
func (l *Link) TrySendParts(head, body, tail []byte) (bool, error) {
	f, err := own(slices.Concat(head, body, tail), nil)
	if err != nil {
		return false, err
	}
	return l.tryPut(f)
}

// Receive waits for the next item and sets *in to it: a frame, or a
// message value in in.Msg with the header its frame would have had.
func (l *Link) Receive(ctx context.Context, in *interconnect.Incoming) error {
	it, err := l.next(ctx)
	if err != nil {
		*in = interconnect.Incoming{}
		return err
	}
	// Field by field rather than *in = Incoming{...}: a composite value is
	// built in pieces on the stack and copied whole, which stalls on every
	// message (see wire.ParseFrameInto).
	in.Inline, in.ReplyMeta = false, nil
	if f, ok := it.(*frame); ok {
		in.Kind, in.Header, in.Frame, in.Caps, in.Msg, in.Meta = f.k, f.h, f.frame, f.caps, nil, f.meta
	} else {
		in.Kind, in.Header, in.Frame, in.Caps, in.Msg, in.Meta = wire.KindMessage, wire.Header{}, nil, nil, it, nil
		in.Header.Msg = it.MsgNumber()
	}
	return nil
}

// next waits for the next item.
func (l *Link) next(ctx context.Context) (item, error) {
	p := l.in
	if ctx.Done() == nil {
		// Nothing but the close ends this wait, and the close puts a
		// wake-up in ch: one plain receive, as on a Go channel, without
		// the look that finds ch empty first.
		for {
			if p.shut.Load() {
				return l.drain()
			}
			if it := <-p.ch; it != nil {
				return it, nil
			}
		}
	}
	for {
		select {
		case it := <-p.ch:
			if it != nil {
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
				return nil, ctx.Err()
			default:
			}
			p.watch(ctx, done)
		}
		if it := <-p.ch; it != nil {
			return it, nil
		}
	}
}

// drain returns what was sent before the connection closed, then
// ErrClosed.
func (l *Link) drain() (item, error) {
	for {
		select {
		case it := <-l.in.ch:
			if it != nil {
				return it, nil
			}
		default:
			return nil, errClosed
		}
	}
}

// SwapReceiveBuffer implements interconnect.BufferSwapper: every frame
// Receive sets is one of its own, a copy its sender made, never reused,
// so there is no buffer to hand over (nil) and spare is not taken.
func (l *Link) SwapReceiveBuffer(spare []byte) []byte { return nil }

// Close closes both directions.
func (l *Link) Close() error {
	l.out.close()
	l.in.close()
	return nil
}

// Gone returns a channel closed once either end has closed the
// connection (a Close closes both directions): what the peer sent before
// remains to be received.
func (l *Link) Gone() <-chan struct{} { return l.in.closed }

var (
	_ interconnect.Link          = (*Link)(nil)
	_ interconnect.PartsSender   = (*Link)(nil)
	_ interconnect.ValueSender   = (*Link)(nil)
	_ interconnect.PeerWatcher   = (*Link)(nil)
	_ interconnect.BufferSwapper = (*Link)(nil)
)
