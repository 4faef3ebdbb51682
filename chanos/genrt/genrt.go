// Package genrt is the runtime of the Go code that chanosc generates:
// what generated packages call and programs do not. Its API follows the
// generator and may change with it; programs use package chanos and the
// generated packages. It is public only because generated code outside
// this module must import it.
//
// Generated code holds what differs per interface: the message types and
// their codecs, a table of them (Binding), the typed rpc stubs and the
// Server's dispatch. What is the same for every interface lives here
// once: the typed connection (Stream), the listener, serving, and the
// engine's fast paths for frames on the caller's stack (Conn).
package genrt

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/chanos/internal/engine"
	"github.com/chanos/chanos/wire"
)

// Conn is the connection engine behind a chanos.Conn, with the methods
// only generated code calls: the fast paths that take frames built on the
// caller's stack (CallFrame, SendFrame, ReplyFrame, ...).
type Conn = engine.Conn

// Engine returns the engine behind c.
func Engine(c *chanos.Conn) *Conn { return (*engine.Conn)(c) }

// Replied is what a generated handler returns to Serve as the reply of a
// call it has answered itself (ReplyFrame, ReplyParts, ReplyEncoded).
var Replied = engine.Replied

// Binding is what a generated package tells the runtime about its
// interface: M is its message type (Msg), S its Server, C its Client.
type Binding[M wire.Message, S any, C any] struct {
	// Interface names the interface and bounds its frames.
	Interface chanos.Interface
	// Decode decodes a frame of the interface into a new value.
	Decode func(frame []byte, caps []wire.Cap) (M, error)
	// As asserts that a value the local interconnect delivered is one
	// of the interface's messages: v.(M), written in the generated
	// code. There, outside generic code, the compiler caches the
	// assertion where it is made; here, M being a type parameter, each
	// one would look the pair up in the runtime's table of interface
	// implementations, a few nanoseconds per message. Nil: the runtime
	// asserts itself.
	As func(wire.Message) (M, bool)
	// Serve gives a message or rpc call to the method of srv that handles
	// it, from is the connection's client. For a call it returns the
	// reply, or Replied when it has sent it. A frame that is not one of
	// the interface's ends the connection (an error matching
	// chanos.ErrProtocol).
	Serve func(ctx context.Context, srv S, from C, in *chanos.Incoming) (wire.Message, error)
	// Fixed lists the messages of a fixed size, which Handle gives to
	// Serve as the link delivered them, unparsed (Conn.ReceiveFrame):
	// their Decode checks the whole frame (wire.FixedBody).
	Fixed []uint16
}

// as is b.As, or the runtime's own assertion where the binding has none.
func (b *Binding[M, S, C]) as(v wire.Message) (M, bool) {
	if b.As != nil {
		return b.As(v)
	}
	m, ok := v.(M)
	return m, ok
}

// Stream is what a typed connection does beyond its Client's stubs:
// receiving, serving, and the connection's end. Generated Conn types
// embed it.
type Stream[M wire.Message, S any, C any] struct {
	c     *chanos.Conn
	b     *Binding[M, S, C]
	from  C
	once  sync.Once
	recv  chan M
	fixed chanos.Incoming // Handle's, for a frame of Fixed: the reading turn's holder's
}

// NewStream returns the Stream of c, whose typed client is from.
func NewStream[M wire.Message, S any, C any](c *chanos.Conn, b *Binding[M, S, C], from C) *Stream[M, S, C] {
	return &Stream[M, S, C]{c: c, b: b, from: from}
}

// decode turns what the connection received into a message value: the
// value itself on the local interconnect, else its decoded frame.
func (s *Stream[M, S, C]) decode(in *chanos.Incoming) (M, error) {
	if in.Msg != nil {
		if m, ok := s.b.as(in.Msg); ok {
			return m, nil
		}
		var zero M
		return zero, fmt.Errorf("%s: received a %s: %w", s.b.Interface.Name, in.Msg.MsgName(), wire.ErrUnknownMessage)
	}
	return s.b.Decode(in.Frame, in.Caps)
}

// Receive waits for the next message or rpc call from the peer, reading
// the connection in the calling goroutine. A frame that does not decode
// ends the connection with an error matching chanos.ErrProtocol; at the
// connection's end, Receive returns why (see Err).
func (s *Stream[M, S, C]) Receive(ctx context.Context) (M, error) {
	var m M
	err := s.c.ReceiveFunc(ctx, func(in *chanos.Incoming) error {
		var err error
		if m, err = s.decode(in); err != nil {
			return s.c.Violation(err)
		}
		return nil
	})
	return m, err
}

// Recv returns a channel of what the peer sends, for select. It is closed
// when the connection ends, and Err then says why. The first call starts
// a goroutine that receives on the channel's behalf (one hop per message
// compared with Receive); do not mix Recv and Receive on one connection.
func (s *Stream[M, S, C]) Recv() <-chan M {
	s.once.Do(func() {
		s.recv = make(chan M, 64)
		go func() {
			defer close(s.recv)
			ctx := s.c.Context()
			for {
				m, err := s.Receive(ctx)
				if err != nil {
					return
				}
				select {
				case s.recv <- m:
				case <-ctx.Done():
					return
				}
			}
		}()
	})
	return s.recv
}

// Handle waits for the next message or rpc call from the peer and calls
// srv's method for it in the calling goroutine, as Serve does for each; an
// rpc's results go back to the peer as its reply. It returns the error of
// a message's method. Unlike Receive it allocates nothing for a message
// of a fixed size, which srv's method gets by value: a client that reads
// the peer's messages one at a time can use it with a Server that
// implements only those messages' methods.
func (s *Stream[M, S, C]) Handle(ctx context.Context, srv S) error {
	e := Engine(s.c)
	serve := func(ctx context.Context, in *chanos.Incoming) (wire.Message, error) {
		return s.b.Serve(ctx, srv, s.from, in)
	}
	if len(s.b.Fixed) == 0 {
		return e.ServeOne(ctx, serve)
	}
	return e.ReceiveFrame(ctx, func(frame []byte) (bool, error) {
		msg, ok := wire.PeekMsg(frame)
		if !ok || !slices.Contains(s.b.Fixed, msg) {
			return false, nil
		}
		in := &s.fixed
		in.Kind, in.Header.Msg, in.Frame = wire.KindMessage, msg, frame
		_, err := s.b.Serve(ctx, srv, s.from, in)
		*in = chanos.Incoming{}
		return true, err
	}, func(in *chanos.Incoming) error {
		return e.ServeIncoming(ctx, in, serve)
	})
}

// Serve calls srv's method for each message and rpc call that arrives, in
// the calling goroutine, and sends each rpc's reply, until the connection
// or ctx ends. It returns nil when the peer closes. With
// chanos.Concurrent, rpc calls run in goroutines of their own and see
// their callers' cancels.
func (s *Stream[M, S, C]) Serve(ctx context.Context, srv S, opts ...chanos.ServeOption) error {
	return s.c.Serve(ctx, func(ctx context.Context, in *chanos.Incoming) (wire.Message, error) {
		return s.b.Serve(ctx, srv, s.from, in)
	}, opts...)
}

// Err returns why the connection ended, or nil while it is open.
func (s *Stream[M, S, C]) Err() error { return s.c.Err() }

// Close closes the connection.
func (s *Stream[M, S, C]) Close() error { return s.c.Close() }

// Raw returns the untyped connection.
func (s *Stream[M, S, C]) Raw() *chanos.Conn { return s.c }

// Listener accepts the connections bound to an export, as typed
// connections T.
type Listener[T any] struct {
	l    *chanos.Listener
	conn func(*chanos.Conn) T
}

// Export registers name for a service of iface on d's machine, with the
// policy opts set, and returns its listener, whose connections conn makes
// typed.
func Export[T any](ctx context.Context, d *chanos.Domain, name string, iface chanos.Interface, conn func(*chanos.Conn) T, opts ...chanos.ExportOption) (*Listener[T], error) {
	l, err := chanos.Export(ctx, d, name, iface, opts...)
	if err != nil {
		return nil, err
	}
	return &Listener[T]{l: l, conn: conn}, nil
}

// Connect binds to the service of iface exported under name on d's
// machine, waiting for the name until ctx ends, and returns the
// connection made typed by conn.
func Connect[T any](ctx context.Context, d *chanos.Domain, name string, iface chanos.Interface, conn func(*chanos.Conn) T) (T, error) {
	c, err := chanos.Connect(ctx, d, name, iface)
	if err != nil {
		var zero T
		return zero, err
	}
	return conn(c), nil
}

// Dialer is chanos.Dialer with its connections made typed: the same
// typed connection for as long as one connection lasts.
type Dialer[T any] struct {
	r    *chanos.Dialer
	conn func(*chanos.Conn) T

	mu    sync.Mutex
	raw   *chanos.Conn // what typed wraps
	typed T
}

// Dial returns a Dialer of the service of iface exported under name,
// whose connections conn makes typed.
func Dial[T any](d *chanos.Domain, name string, iface chanos.Interface, conn func(*chanos.Conn) T) *Dialer[T] {
	return &Dialer[T]{r: chanos.NewDialer(d, name, iface), conn: conn}
}

// Conn returns the typed connection (see chanos.Dialer.Conn).
func (t *Dialer[T]) Conn(ctx context.Context) (T, error) {
	c, err := t.r.Conn(ctx)
	if err != nil {
		var zero T
		return zero, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.raw != c {
		t.raw, t.typed = c, t.conn(c)
	}
	return t.typed, nil
}

// Close closes the Dialer (see chanos.Dialer.Close).
func (t *Dialer[T]) Close() error { return t.r.Close() }

// ConnectRef binds to the service of iface that ref names (see
// chanos.ConnectRef) and returns the connection made typed by conn.
func ConnectRef[T any](ctx context.Context, d *chanos.Domain, ref wire.Iref, iface chanos.Interface, conn func(*chanos.Conn) T) (T, error) {
	c, err := chanos.ConnectRef(ctx, d, ref, iface)
	if err != nil {
		var zero T
		return zero, err
	}
	return conn(c), nil
}

// Ref returns the export's iref, token and all: the capability to bind
// it (see chanos.Listener.Ref).
func (l *Listener[T]) Ref() wire.Iref { return l.l.Ref() }

// Name returns the exported name.
func (l *Listener[T]) Name() string { return l.l.Name() }

// Accept waits for the next connection.
func (l *Listener[T]) Accept(ctx context.Context) (T, error) {
	c, err := l.l.Accept(ctx)
	if err != nil {
		var zero T
		return zero, err
	}
	return l.conn(c), nil
}

// Serve accepts connections until ctx ends or the listener closes, and
// runs serve for each in a goroutine of its own (see chanos.Listener.Serve).
func (l *Listener[T]) Serve(ctx context.Context, serve func(ctx context.Context, c T) error) error {
	return l.l.Serve(ctx, func(ctx context.Context, c *chanos.Conn) error {
		return serve(ctx, l.conn(c))
	})
}

// Close withdraws the export.
func (l *Listener[T]) Close() error { return l.l.Close() }

// Raw returns the untyped listener.
func (l *Listener[T]) Raw() *chanos.Listener { return l.l }

// Unknown returns the error of a frame that is not one of the interface's
// messages or rpc calls (a number it does not have, or a reply sent to
// the side that serves), to end the connection with.
func Unknown(iface string, in *chanos.Incoming) error {
	err := wire.UnknownMessage(iface, in.Header.Msg)
	if in.Kind != wire.KindMessage && in.Kind != wire.KindCall {
		return fmt.Errorf("%s: a %s is not for the side that serves: %w", iface, in.Kind, err)
	}
	return err
}

// Dispatch gives m, a message or rpc call of the interface that came from
// the peer from, to the method of srv that handles it, as Serve does. For
// a message it returns the method's error and no reply; for a call, the
// reply made of the method's results, or its error. A reply, or nil, is
// not for a server: Dispatch fails with an error matching
// chanos.ErrProtocol.
func Dispatch[M wire.Message, S any, C any](ctx context.Context, b *Binding[M, S, C], srv S, from C, m M) (M, error) {
	var zero M
	if any(m) == nil {
		return zero, fmt.Errorf("%s: Dispatch of a nil message: %w", b.Interface.Name, chanos.ErrProtocol)
	}
	k := m.MsgKind()
	if k != wire.KindMessage && k != wire.KindCall {
		return zero, fmt.Errorf("%s: a server cannot handle a %s %s: %w", b.Interface.Name, m.MsgName(), k, chanos.ErrProtocol)
	}
	in := &chanos.Incoming{Kind: k, Msg: m}
	in.Header.Msg = m.MsgNumber()
	reply, err := b.Serve(ctx, srv, from, in)
	if err != nil || reply == nil {
		return zero, err
	}
	r, ok := b.as(reply)
	if !ok {
		return zero, fmt.Errorf("%s: the reply to %s is a %s: %w", b.Interface.Name, m.MsgName(), reply.MsgName(), wire.ErrUnknownMessage)
	}
	return r, nil
}

// Take sets *m to the message or call in holds: the value itself, when it
// came as one (on the local interconnect, or from Dispatch), else the
// frame decoded by decode (m's Decode).
func Take[T any, P interface {
	*T
	wire.Message
}](in *chanos.Incoming, m P, decode func(frame []byte, caps []wire.Cap) error) error {
	if v, ok := in.Msg.(P); ok && v != nil {
		*m = *v
		return nil
	}
	return decode(in.Frame, in.Caps)
}

// Borrow returns how the handler of an @borrow rpc decodes the call in:
// with view, its bytes views into the frame, when the call runs inline
// (the frame outlives the handler, whose reply is sent before the next
// frame is read); else with decode, copies.
func Borrow(in *chanos.Incoming, decode, view func(frame []byte, caps []wire.Cap) error) func(frame []byte, caps []wire.Cap) error {
	if in.Inline {
		return view
	}
	return decode
}

// SendCopy sends a copy of m, a message of plain fields, on the local
// interconnect, which passes values: the copy is the receiver's.
func SendCopy[T any, P interface {
	*T
	wire.Message
}](ctx context.Context, c *Conn, m P) error {
	v := *m
	return c.SendValue(ctx, P(&v))
}

// Unsupported returns the error of a method of a generated
// UnimplementedServer: the message or rpc name of interface iface is not
// handled (errors.ErrUnsupported). Its text is the detail of the error
// reply, which the caller reads after the rpc's name and the code
// ("kv.get: unimplemented: the server has no handler for kv.get: ...").
func Unsupported(iface, name string) error {
	return fmt.Errorf("the server has no handler for %s.%s: %w", iface, name, errors.ErrUnsupported)
}
