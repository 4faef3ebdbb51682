package chanos

import (
	"context"

	"github.com/chanos/chanos/chanos/internal/engine"
	"github.com/chanos/chanos/interconnect"
	"github.com/chanos/chanos/wire"
)

// Conn is a bound connection: messages in both directions and rpc calls,
// over whichever interconnect binding chose. Generated packages wrap it in
// a typed Conn with a method per rpc; most programs use that, and this
// type for what all connections share (Err, Close, the interconnect).
//
// Send, Call and the receiving methods may be called from several
// goroutines. There is no reader goroutine: whichever goroutine needs the
// next frame reads it, and hands on what another is waiting for.
type Conn engine.Conn

// Interface describes an interface to the connection engine. Generated
// packages define one as their variable Interface. Its fields: Name (the
// interface's name in the IDL, which binding checks), MaxFrameSize (its
// largest frame, header included) and Fingerprint (the hash of its
// definition, which binding checks too; 0 declares none).
type Interface = engine.Interface

// Incoming is a message or rpc call that arrived on a connection. Its
// fields: Kind (wire.KindMessage or wire.KindCall), Header (the message
// number Msg, the CallID, the caller's TimeoutUS, ...), Frame (the
// encoded frame, header included; nil for a message that came as a value
// within one process, Msg then), Caps (the capabilities that came with
// it), Meta (a call's metadata) and Inline (set for a call served in the
// goroutine that reads the connection). Decode decodes it into a message
// of its type. See interconnect.Incoming.
type Incoming = interconnect.Incoming

// NewConn returns a Conn speaking iface over l, which it takes over.
// Domains get their connections from Connect and Listener.Accept; NewConn
// is for programs that set up links themselves, like the monitor, and for
// tests.
func NewConn(l interconnect.Link, iface Interface) *Conn {
	return (*Conn)(engine.New(l, iface, nil))
}

func eng(c *Conn) *engine.Conn { return (*engine.Conn)(c) }

// Interconnect names the connection's interconnect: "local" or "ump".
func (c *Conn) Interconnect() string { return eng(c).Interconnect() }

// Interface returns the interface the connection speaks.
func (c *Conn) Interface() Interface { return eng(c).Interface() }

// Err returns why the connection ended, or nil while it is open. The error
// matches ErrClosed, ErrPeerDied, ErrProtocol or ErrNetworkLost.
func (c *Conn) Err() error { return eng(c).Err() }

// Close closes the connection. The peer's receive reports ErrClosed once
// it has received everything sent before. Close is safe to call more than
// once and concurrently with other methods.
func (c *Conn) Close() error { return eng(c).Close() }

// Context returns a context that is canceled when the connection is
// closed on this side; goroutines that serve the connection can stop on it.
func (c *Conn) Context() context.Context { return eng(c).Context() }

// Send encodes m and sends it as a one-way message. It blocks while the
// peer's buffer is full, until there is room, ctx ends or the connection
// ends. m may be reused as soon as Send returns: on the local
// interconnect the receiver gets a copy (slices included), never m itself.
func (c *Conn) Send(ctx context.Context, m wire.Message) error { return eng(c).Send(ctx, m) }

// Call makes an rpc call: it sends call with a fresh call id and ctx's
// deadline, and waits for the reply, which it decodes into reply. An
// error reply comes back as a *RemoteError. If ctx ends first, Call tells
// the peer that the call is abandoned and returns ctx's error. Call keeps
// neither call nor reply once it returns. A reply that comes behind
// one-way messages this side has not received waits for them to be
// received once the connection's inbox is full (docs/codegen-go.md, "One
// order per connection"): a program that calls must also receive what the
// peer sends it.
func (c *Conn) Call(ctx context.Context, call, reply wire.Message) error {
	return eng(c).Call(ctx, call, reply)
}

// ReceiveFunc waits for the next message or rpc call from the peer and
// calls fn with it, in the calling goroutine. in.Frame is valid only until
// fn returns: fn decodes it (in.Decode) or copies it. While fn runs, other
// goroutines' receives and calls wait, so fn should not block for long.
// An rpc call is answered with Reply.
//
// ReceiveFunc returns fn's error, ctx's error, or the connection's end
// once every message sent before the end has been received.
func (c *Conn) ReceiveFunc(ctx context.Context, fn func(in *Incoming) error) error {
	return eng(c).ReceiveFunc(ctx, fn)
}

// Reply answers the rpc call in with reply, or with err when err is not
// nil: the error reply carries CodeOf(err) (CodeUnknown for an error that
// has no code) and, as its detail, the Detail of a *RemoteError returned
// as is (see Errorf), else err's text, less the text of a Code or of an
// Errorf that it wraps, which the caller prints before the detail anyway.
func (c *Conn) Reply(ctx context.Context, in *Incoming, reply wire.Message, err error) error {
	return eng(c).Reply(ctx, in, reply, err)
}

// Serve receives messages and rpc calls until the connection or ctx ends,
// calling handle for each. By default a call starts in the receiving
// goroutine, with no goroutine hop; if it has not returned within
// HandOffAfter (to twice that), a new goroutine takes over the reading,
// so a slow call holds up no other and sees its caller's cancel (with or
// without a deadline) through its context. Up to MaxHandedOff calls run at a time
// that way; then a slow call keeps the reading until it returns. Ordered
// runs every call in the receiving goroutine, one at a time; Concurrent
// runs each in a goroutine of its own. One-way messages are handled in
// order in the receiving goroutine. A call's context ends when its
// handler returns, and stays that call's: a goroutine that outlives the
// handler may keep it, and sees it ended (Err is context.Canceled, Done
// closed); in and its frame are the handler's only until it returns. A
// call's result is sent as the reply. An error from handle
// for a one-way message is logged and serving goes on; one matching
// ErrProtocol ends the connection. Serve returns nil when the peer closes
// the connection, and otherwise why it stopped.
//
// When the peer closes the connection or dies (kill -9), the contexts of
// the calls' handlers then running, inline or concurrent, are canceled at
// once (context.Cause says that the peer has gone), and their replies are
// not sent: a handler that waits on its context does not keep the
// connection, and with it the connection's descriptors and shared memory,
// past its caller. A call the peer sent before it closed and read after
// is handled with its context already canceled. One-way messages the
// peer sent before it closed are still handled, in order, with ctx: they
// ask for no answer. Serve returns once every handler has; the
// connection's resources go with its Close (Listener.Serve closes each
// connection when its handler returns). ServeOne and generated code's
// Handle, which serve one frame with the context they are given, do not
// watch for the peer's going.
func (c *Conn) Serve(ctx context.Context, handle func(ctx context.Context, in *Incoming) (wire.Message, error), opts ...ServeOption) error {
	return eng(c).Serve(ctx, handle, opts...)
}

// Violation ends the connection because the peer broke the protocol (for
// example, sent a frame that does not decode), closing it so that the peer
// learns, and returns err wrapped so that it matches ErrProtocol.
func (c *Conn) Violation(err error) error { return eng(c).Violation(err) }

// ServeOption adjusts Serve.
type ServeOption = engine.ServeOption

// Concurrent makes Serve run up to n rpc calls at a time, each in a
// goroutine of its own, while it goes on reading: a call that blocks no
// longer holds up the connection, and a caller that gives up cancels the
// handler's context. When n calls are running, Serve stops reading until
// one ends, so the peer is slowed rather than memory growing. One-way
// messages are still handled in order in the reading goroutine, holding
// the reading turn: a message handler must not wait for a call it makes
// on the same connection. The price is one goroutine hop per call.
func Concurrent(n int) ServeOption { return engine.Concurrent(n) }

// ConcurrentFor is Concurrent for the rpcs numbered msgs only (those that
// may block, such as a wait); the others run inline, without the hop.
func ConcurrentFor(n int, msgs ...uint16) ServeOption { return engine.ConcurrentFor(n, msgs...) }

// Ordered makes Serve run every rpc call in the receiving goroutine, one
// at a time and in the order the calls arrive, holding the reading turn: a
// slow call holds up the connection, and a caller's cancel is not seen
// until the call returns (its deadline is). Nor is the reply to a call a
// handler makes on the same connection: a handler must not wait for one.
// For servers whose calls must not overlap.
func Ordered() ServeOption { return engine.Ordered() }

// HandOffAfter (100 µs) is how long Serve lets a call run in the
// goroutine reading the connection, at least, before another goroutine
// takes over the reading; at most twice as long.
const HandOffAfter = engine.HandOffAfter

// MaxHandedOff (128) is how many calls of one connection run at a time,
// handed off, under Serve's default.
const MaxHandedOff = engine.MaxHandedOff

// Handler handles a message or rpc call that Serve received, as Serve's
// handle does: for a call, its result is the reply. It is
//
//	func(ctx context.Context, in *Incoming) (wire.Message, error)
type Handler = engine.Handler

// Interceptor wraps the handling of each rpc call Serve runs: it may look
// at the call (in: its header, its frame) and its context (PeerFrom),
// give next another context, answer with an error of its own without
// calling next, or look at next's reply and error. A handler under an
// interceptor returns its reply as a value, so that the interceptor sees
// it (generated handlers otherwise send it themselves). It is
//
//	func(ctx context.Context, in *Incoming, next Handler) (wire.Message, error)
//
// and in.Header.Msg is the rpc's number: the generated package's
// New(in.Header.Msg, in.Kind), when not nil (a number the interface
// has), names it with MsgName ("kv.get").
type Interceptor = engine.Interceptor

// WithInterceptor has Serve run each rpc call through is, the first
// outermost: for logging, metrics, authorization by peer. One-way
// messages go to the handler directly. A Serve without interceptors pays
// nothing for them.
func WithInterceptor(is ...Interceptor) ServeOption { return engine.WithInterceptor(is...) }

// CallInterceptor runs before each rpc call a connection makes, for
// tracing, metrics, metadata every call carries, or a deadline each call
// gets. It is
//
//	func(ctx context.Context, rpc string) (_ context.Context, after func(error) error, err error)
//
// and is called with the call's context and the rpc's name ("kv.get").
// It returns the context to make the call with (ctx, or one from
// WithMetadata or context.WithTimeout) and after, which, if not nil, is
// called with the call's error (nil on success) once the call has
// returned, so that the interceptor may time the call, log or count its
// code (CodeOf), or replace the error; what after returns is what the
// caller gets. A non-nil err refuses the call unsent: the interceptors
// outside this one see err as the call's result in their afters.
//
// An interceptor sees the rpc's name and context, not the arguments or
// the reply, which the generated stubs keep on their stack so that a call
// allocates nothing; a server's Interceptor sees the frame. Use
// WithCallInterceptor to run them.
type CallInterceptor = engine.CallInterceptor
