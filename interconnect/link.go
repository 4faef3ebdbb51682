// Package interconnect defines what every interconnect gives the
// connection engine: a Link, which carries frames with capabilities
// alongside in both directions and says why it ended.
//
// The interconnects are peers under this package: local (goroutines in one
// process), ump (shared-memory rings between processes), and the control
// socket between a domain and its monitor. Each implements Link, and may
// offer more through the optional method sets below (PartsSender,
// RawReceiver, ValueSender, PeerWatcher, BufferSwapper), which the engine
// looks up once, when it takes the link over, rather than branching on
// interconnect types per message.
package interconnect

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/chanos/chanos/wire"
)

// The reasons a link ends. Every error a Link returns because it ended
// matches one of them with errors.Is; package chanos exports the same
// values to its users.
var (
	// ErrClosed: the connection was closed, by this side or the peer.
	ErrClosed = errors.New("chanos: connection closed")
	// ErrPeerDied: the peer's process ended without closing.
	ErrPeerDied = errors.New("chanos: peer died")
	// ErrProtocol: the peer broke the protocol (a malformed frame, a reply
	// to no call, garbage in shared memory). The connection ends.
	ErrProtocol = errors.New("chanos: protocol violation")
	// ErrNetworkLost: the network between two machines stayed down past
	// the connection's grace period.
	ErrNetworkLost = errors.New("chanos: network lost")
)

// ErrCapsUnsupported is returned by a send of a frame with capabilities
// on a link that cannot carry them. The link stays open.
var ErrCapsUnsupported = errors.New("chanos: this interconnect cannot carry capabilities")

// Link is one end of a connection as an interconnect carries it.
//
// Receive is called by one goroutine at a time; what it sets in *in is
// valid until the next Receive. The sends may be called concurrently with
// Receive, and with each other only where the engine serialises them (it
// does). Errors that end the link match ErrClosed, ErrPeerDied,
// ErrProtocol or ErrNetworkLost; a context's end is returned as the
// context's error and ends nothing.
type Link interface {
	// SendFrame sends frame, a whole frame (header included), with caps,
	// waiting for room until ctx ends. It keeps neither: the caller may
	// reuse frame as soon as it returns, and the engine relies on that to
	// leave frames on its callers' stacks.
	SendFrame(ctx context.Context, frame []byte, caps []wire.Cap) error
	// TrySendFrame is SendFrame without the wait: it reports false, having
	// sent nothing, when the peer has no room.
	TrySendFrame(frame []byte, caps []wire.Cap) (bool, error)
	// Receive waits for the next frame and sets all of *in to it.
	Receive(ctx context.Context, in *Incoming) error
	// Close ends the link; the peer's Receive reports ErrClosed once it has
	// received everything sent before. It is safe to call more than once.
	Close() error
	// Kind names the interconnect, as `chanos ps` shows it: "local", "ump".
	Kind() string
}

// PartsSender is a Link that copies a frame given in three parts (head,
// which holds the header, body and tail, one after another) straight into
// its buffer, so that a large body is copied once. Like SendFrame, it
// keeps none of the parts.
type PartsSender interface {
	SendParts(ctx context.Context, head, body, tail []byte) error
	TrySendParts(head, body, tail []byte) (bool, error)
}

// RawReceiver is a Link that can hand over the next frame as it arrived,
// before it is parsed: a reader that knows the frame it expects (a reply
// of fixed size) checks it with one comparison of its header. Parse then
// does for a frame the reader does not take what Receive would have done.
// Both are called by the goroutine that may call Receive.
type RawReceiver interface {
	ReceiveRaw(ctx context.Context) ([]byte, error)
	Parse(frame []byte, in *Incoming) error
}

// ValueSender is a Link within one process, which passes a message as a
// value rather than as a frame: Receive delivers it in Incoming.Msg. m must
// be the receiver's to keep (generated code sends a copy that shares no
// memory with the sender's); capabilities sent on such a link reach the
// receiver as the same objects, so they are never closed on the sender's
// side.
type ValueSender interface {
	SendValue(ctx context.Context, m wire.Message) error
}

// BufferSwapper is a Link whose receiver may keep the frame it last
// received past the next Receive without copying it. SwapReceiveBuffer,
// called by the goroutine that may call Receive, after a Receive that
// succeeded and before the next, hands over the buffer that holds the
// frame that Receive set (the link never touches it again) and takes spare,
// a buffer the caller no longer uses, or nil, to receive later frames
// into. The engine's serving reader takes each call's frame this way
// rather than copying it out of the link, so that the next reader may
// read on while the call runs.
//
// A link whose frames are never reused (each Receive sets a frame of its
// own) returns nil, and does not take spare.
type BufferSwapper interface {
	SwapReceiveBuffer(spare []byte) []byte
}

// PeerWatcher is a Link that learns of its peer's end without a receive:
// Gone returns a channel that is closed once the peer has closed its end
// or died, or this side has closed the link. Frames the peer sent before
// may still wait: Receive returns them first, as always, then the end.
//
// The engine watches it while it serves the link (Serve), to cancel the
// contexts of the handlers running for the peer's calls the moment their
// caller is gone: a handler that runs in the reading goroutine would
// otherwise hold the connection, and its resources, until it returned,
// as the end is read only then. A Link offers it where its interconnect
// learns of the end anyway (ump's liveness socket, local's close) or
// cheaply; Gone may be called more than once and returns the same
// channel.
type PeerWatcher interface {
	Gone() <-chan struct{}
}

// Incoming is a message, rpc call, reply or cancel that arrived on a link.
type Incoming struct {
	// Kind is the frame's kind; what reaches a handler or a receiver of
	// the engine is always wire.KindMessage or wire.KindCall, as the engine
	// consumes replies and cancels itself.
	Kind wire.Kind
	// Header is the frame's header; for a value, the header its frame would
	// have had.
	Header wire.Header
	// Frame is the encoded frame, header included. It is nil for a message
	// that came as a value (see Msg).
	Frame []byte
	// Caps are the capabilities that came with Frame.
	Caps []wire.Cap
	// Msg is the message itself, when it came as a value on a link within
	// one process; it is the receiver's to keep.
	Msg wire.Message
	// Meta is the metadata a call or reply carried (wire.FlagMeta), nil if
	// none: SetFrame takes it off the frame, so that Frame is the call or
	// reply as it would have been without it.
	Meta wire.Metadata
	// ReplyMeta is the metadata the handler of this rpc call gives its
	// reply (the engine's SetReplyMetadata), nil if none: the reply, or
	// error reply, carries it.
	ReplyMeta wire.Metadata
	// Inline is set by the engine for an rpc call served in the goroutine
	// reading the connection: the reply is encoded before the next frame
	// is read, so a handler may return the same reply value every time.
	Inline bool
}

// Decode decodes in into m, which must be the message's type: it calls
// m.Decode on the frame, or copies the value of a local message (a
// pointer to a struct, as generated messages are) into m.
func (in *Incoming) Decode(m wire.Message) error {
	if in.Msg == nil {
		return m.Decode(in.Frame, in.Caps)
	}
	dst, src := reflect.ValueOf(m), reflect.ValueOf(in.Msg)
	if dst.Type() != src.Type() || dst.Kind() != reflect.Pointer || dst.IsNil() || src.IsNil() {
		return fmt.Errorf("chanos: decode %s into %s: %w", in.Msg.MsgName(), m.MsgName(), wire.ErrUnknownMessage)
	}
	dst.Elem().Set(src.Elem())
	return nil
}

// SetFrame sets *in to frame, a frame the caller has received with caps,
// parsing its header. On error *in is cleared and the error says what is
// wrong with the frame (it matches none of the Err values: the caller
// decides whether it ends the link).
func (in *Incoming) SetFrame(frame []byte, caps []wire.Cap) error {
	k, err := wire.ParseFrameInto(&in.Header, frame)
	if err != nil {
		if len(frame) > 6 && wire.CarriesMetadata(frame[6]) {
			return in.setFrameMeta(frame, caps)
		}
		*in = Incoming{}
		return err
	}
	// Field by field rather than *in = Incoming{...}: a composite value is
	// built in pieces on the stack and copied whole, which stalls on every
	// frame (see wire.ParseFrameInto).
	in.Kind, in.Frame, in.Caps, in.Msg, in.Meta, in.ReplyMeta, in.Inline = k, frame, caps, nil, nil, nil, false
	return nil
}

// setFrameMeta is SetFrame of a call or reply with metadata, which the
// header check refuses (decoders never see FlagMeta): it takes the
// trailer off and sets *in to the frame as it would have been without it. Out of
// line, so that calls without metadata pay nothing for it.
//
//go:noinline
func (in *Incoming) setFrameMeta(frame []byte, caps []wire.Cap) error {
	call, md, err := wire.SplitMetadata(frame)
	if err == nil {
		err = in.SetFrame(call, caps)
	}
	if err != nil {
		*in = Incoming{}
		return err
	}
	in.Meta = md
	return nil
}

// endError is a link's end: one of the Err values as its kind, and the
// interconnect's own error as its text.
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

// Ended returns an error that matches kind (one of the Err values) and
// cause, whose text it keeps: an interconnect's reason for ending, with
// its detail.
func Ended(kind, cause error) error {
	return &endError{kind: kind, cause: cause}
}

// Violation returns the error of a peer that broke the protocol: err,
// wrapped so that it matches ErrProtocol.
func Violation(err error) error {
	return &endError{kind: ErrProtocol, cause: fmt.Errorf("chanos: protocol violation: %w", err)}
}

// IsEnd reports whether err means the link has ended.
func IsEnd(err error) bool {
	return err != nil && (errors.Is(err, ErrClosed) || errors.Is(err, ErrPeerDied) ||
		errors.Is(err, ErrProtocol) || errors.Is(err, ErrNetworkLost))
}
