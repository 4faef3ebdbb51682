package engine

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"unsafe"

	"github.com/chanos/chanos/interconnect"
	"github.com/chanos/chanos/wire"
)

// The fast paths of this file serve the code chanosc generates, which
// knows the types of its messages (docs/codegen-go.md, "Fast paths"). A
// frame of a fixed size is encoded into an array on the generated code's
// stack and handed over as bytes (CallFrame, ReplyFrame, SendFrame);
// other values stay on that stack and their own Encode and Decode methods
// are handed over (CallEncoded, SendEncoded). Nothing here keeps what it
// is given, so none of it escapes to the heap, and no wire.Message
// interface is involved. Each method does what its general counterpart
// does (Call, Reply, Send), with the same errors.

// sendParts sends the frame made of head, body and tail, one after
// another, of which it keeps nothing, waiting for room if wait is set; it
// reports whether it sent it. Over ump the parts are copied into the ring
// as they are, so that a large body is copied once.
func (c *Conn) sendParts(ctx context.Context, head, body, tail []byte, wait bool) (bool, error) {
	if n := len(head) + len(body) + len(tail); len(body) > 0 && n <= smallFrame {
		// One contiguous frame costs the link less than three parts.
		var buf [smallFrame]byte
		k := copy(buf[:], head)
		k += copy(buf[k:], body)
		copy(buf[k:], tail)
		head, body, tail = buf[:n], nil, nil
	}
	var err error
	sent := true
	switch {
	case c.parts != nil && wait:
		err = c.parts.SendParts(ctx, transient(head), transient(body), transient(tail))
	case c.parts != nil:
		sent, err = c.parts.TrySendParts(transient(head), transient(body), transient(tail))
	case wait:
		err = c.l.SendFrame(ctx, slices.Concat(head, body, tail), nil)
	default:
		sent, err = c.l.TrySendFrame(slices.Concat(head, body, tail), nil)
	}
	return sent, c.wrap(err)
}

// smallFrame is the largest frame given in parts (a header and plain
// fields around an array of bytes) that sendParts joins on its stack
// before handing it to the link.
const smallFrame = 320

// newCallID returns a call id: never 0, which marks plain messages, and
// once the ids have wrapped around, none of a call still outstanding.
func (c *Conn) newCallID() uint32 {
	id := c.nextID.Add(1)
	if id < wrapNear && !c.wrapped.Load() {
		return id
	}
	return c.callIDNearWrap(id)
}

// wrapNear is where call ids are near enough to wrapping around that the
// connection counts them as wrapped: then a reply to an id above the
// counter is no longer taken for the answer to a call never made (route),
// even by a reader that sees the counter pass 0 before it sees wrapped.
const wrapNear = math.MaxUint32 - 1<<20

// callIDNearWrap returns id, or the first id after it that no call has
// outstanding (pending, or making its call holding the reading turn): a
// call that outlives 2^32 others keeps its id to itself.
func (c *Conn) callIDNearWrap(id uint32) uint32 {
	c.wrapped.Store(true)
	c.mu.Lock()
	defer c.mu.Unlock()
	for id == 0 || c.pending[id] != nil || uint32(c.turn.Load()) == id {
		id = c.nextID.Add(1)
	}
	return id
}

// CallFrame is Call for an rpc whose call and reply frames have fixed
// sizes, used by generated stubs: call is the whole call frame (built with
// wire.PutFixed, call id and timeout 0), and the reply frame, which must
// be len(reply) bytes long, is copied into reply. name is the rpc's name,
// for errors. Both frames may live on the caller's stack: nothing here
// keeps them.
func (c *Conn) CallFrame(ctx context.Context, name string, call, reply []byte) error {
	return c.callFrame(ctx, name, call, nil, nil, reply, nil)
}

// CallFrameDecode is CallFrame for a reply of no fixed size: decode
// decodes the reply frame into the reply value (its Decode method). The
// call frame, which the stub built on its stack, may have any size.
func (c *Conn) CallFrameDecode(ctx context.Context, name string, call []byte, decode func(frame []byte, caps []wire.Cap) error) error {
	return c.callFrame(ctx, name, call, nil, nil, nil, decode)
}

// CallParts is CallFrameDecode for a call frame in three parts, one after
// another: head, which holds the frame's header, body and tail. Generated
// stubs pass a large array of bytes as body, so that it is copied once,
// straight into the link.
func (c *Conn) CallParts(ctx context.Context, name string, head, body, tail []byte, decode func(frame []byte, caps []wire.Cap) error) error {
	return c.callFrame(ctx, name, head, body, tail, nil, decode)
}

// callFrame is CallFrame with a reply of fixed size, or CallParts if reply
// is nil (see callWith).
func (c *Conn) callFrame(ctx context.Context, name string, call, body, tail, reply []byte, decode func(frame []byte, caps []wire.Cap) error) error {
	if c.calls != nil {
		ctx, after, err := c.intercept(ctx, name)
		if err != nil {
			return err
		}
		return after.finish(c.sendFrameCall(ctx, name, call, body, tail, reply, decode))
	}
	return c.sendFrameCall(ctx, name, call, body, tail, reply, decode)
}

// sendFrameCall is callFrame past the interceptors.
func (c *Conn) sendFrameCall(ctx context.Context, name string, call, body, tail, reply []byte, decode func(frame []byte, caps []wire.Cap) error) error {
	if md := outgoing(ctx); md != nil {
		frame, err := wire.AppendMetadata(slices.Concat(call, body, tail), md)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		call, body, tail = frame, nil, nil
	}
	wire.SetTimeout(call, timeoutOf(ctx))
	return c.callWith(ctx, name, binary.LittleEndian.Uint16(call[4:]), func(id uint32, wait bool) (bool, error) {
		wire.SetCallID(call, id)
		return c.sendParts(ctx, call, body, tail, wait)
	}, reply, decode)
}

// CallEncoded is Call for an rpc whose call or reply has no fixed size,
// used by generated stubs that keep both values on their stack: encode
// appends the call's frame (the call value's Encode method) and decode
// decodes the reply frame into the reply value (its Decode). name is the
// rpc's name, for errors. Like CallFrame, it keeps neither.
func (c *Conn) CallEncoded(ctx context.Context, name string, msg uint16, encode func(*wire.Buffer) error, decode func(frame []byte, caps []wire.Cap) error) error {
	if c.calls != nil {
		ctx, after, err := c.intercept(ctx, name)
		if err != nil {
			return err
		}
		return after.finish(c.callEncoded(ctx, name, msg, encode, decode))
	}
	return c.callEncoded(ctx, name, msg, encode, decode)
}

// callEncoded is CallEncoded past the interceptors.
func (c *Conn) callEncoded(ctx context.Context, name string, msg uint16, encode func(*wire.Buffer) error, decode func(frame []byte, caps []wire.Cap) error) error {
	encode = withMetadata(encode, outgoing(ctx))
	return c.callWith(ctx, name, msg, func(id uint32, wait bool) (bool, error) {
		if wait {
			return true, c.sendWith(ctx, encode, id, timeoutOf(ctx))
		}
		return c.trySendEncoded(encode, id, timeoutOf(ctx))
	}, nil, decode)
}

// callWith makes call id of rpc msg, called name, which send sends
// (without waiting for room unless wait is set, reporting whether it did):
// holding the reading turn it reads the reply itself, straight into reply
// or decode; when another goroutine reads the connection, or the peer has
// no room for the call (the turn's holder must not wait for room: the
// peer may be waiting for room too), it makes the call a pending one,
// whose reply frame the reader copies for it.
func (c *Conn) callWith(ctx context.Context, name string, msg uint16, send func(id uint32, wait bool) (bool, error), reply []byte, decode func(frame []byte, caps []wire.Cap) error) error {
	id, ok, err := c.beginCall()
	if err != nil {
		return callError(name, err)
	}
	if ok {
		sent, err := send(id, false)
		if sent && err == nil {
			if err := c.finishCall(ctx, id, name, msg, reply, decode); err != nil {
				return callError(name, err)
			}
			return nil
		}
		c.release()
		if err != nil {
			return callError(name, err)
		}
	}
	p, err := c.register(id, name, msg, nil)
	if err != nil {
		return callError(name, err)
	}
	if _, err := send(id, true); err != nil {
		c.forget(id, p)
		return callError(name, err)
	}
	if err := c.settled(ctx, id, p, reply, decode); err != nil {
		return callError(name, err)
	}
	return nil
}

// settled waits for the pending call id, whose reply frame the reader
// copies into p, and copies it into reply (of a fixed size) or decodes it
// with decode.
func (c *Conn) settled(ctx context.Context, id uint32, p *pendingCall, reply []byte, decode func(frame []byte, caps []wire.Cap) error) error {
	err := c.await(ctx, id, p)
	if p.replied {
		captureReply(ctx, p.meta)
	}
	switch {
	case err != nil:
	case reply != nil:
		err = fixedReply(p.frame, p.name, reply)
		wire.CloseCaps(p.caps)
	default:
		if err = decode(p.frame, p.caps); err != nil {
			wire.CloseCaps(p.caps)
		}
	}
	c.recycle(p)
	return err
}

// beginCall returns a new call's id and takes the reading turn for it, on
// the fast path. ok false: another goroutine reads the connection or the
// inbox is full, and the turn was not taken (the call goes on as a
// pending one, with the id); an error: the connection has ended (the
// turn is given back).
func (c *Conn) beginCall() (id uint32, ok bool, err error) {
	id = c.newCallID()
	if c.ninbox.Load() >= inboxLimit || !c.takeTurn(id) {
		if c.ended.Load() {
			return 0, false, c.Err()
		}
		return id, false, nil
	}
	if c.ended.Load() {
		c.release()
		return 0, false, c.Err()
	}
	return id, true, nil
}

// finishCall reads the reply to call id of rpc msg, which the caller has
// sent holding the turn, and gives the turn back: a reply of fixed size
// lands in reply, another is decoded by decode.
func (c *Conn) finishCall(ctx context.Context, id uint32, name string, msg uint16, reply []byte, decode func(frame []byte, caps []wire.Cap) error) error {
	in, err := c.readReply(ctx, id, msg, reply)
	if err == nil {
		var md wire.Metadata
		if in != nil {
			md = in.Meta
		}
		captureReply(ctx, md)
	}
	switch {
	case err != nil || in == nil: // failed, or the fixed reply is in reply
	case reply != nil: // not the reply of the size expected
		if err = c.checkReply(in, id, name, msg); err == nil {
			err = fixedReply(in.Frame, name, reply)
			wire.CloseCaps(in.Caps)
		}
	default:
		if err = c.checkReply(in, id, name, msg); err == nil {
			if err = decode(in.Frame, in.Caps); err != nil {
				wire.CloseCaps(in.Caps)
			}
		}
	}
	c.releaseCur()
	return err
}

// fixedReply copies frame, the reply to rpc name, into reply, checking
// its size as the reply type's Decode would.
func fixedReply(frame []byte, name string, reply []byte) error {
	switch {
	case len(frame) < len(reply):
		return fmt.Errorf("%s reply: %d bytes, want %d: %w", name, len(frame), len(reply), wire.ErrTruncated)
	case len(frame) > len(reply):
		return fmt.Errorf("%s reply: %d bytes, want %d: %w", name, len(frame), len(reply), wire.ErrTrailing)
	}
	copy(reply, frame)
	return nil
}

// Replied is what a generated handler returns to Serve as the reply of a
// call it has answered itself, with ReplyFrame.
var Replied wire.Message = replied{}

type replied struct{}

func (replied) Encode(*wire.Buffer) error       { return nil }
func (replied) Decode([]byte, []wire.Cap) error { return nil }
func (replied) MsgNumber() uint16               { return 0 }
func (replied) MsgKind() wire.Kind              { return wire.KindReply }
func (replied) MsgName() string                 { return "chanos.replied" }

// ReplyFrame is Reply for a reply of a fixed size, used by generated
// handlers for the calls Serve runs inline: reply is the whole reply frame
// (built with wire.PutFixed, call id 0). It returns Replied, which the
// handler returns to Serve, and the error of sending.
func (c *Conn) ReplyFrame(ctx context.Context, in *Incoming, reply []byte) (wire.Message, error) {
	return c.ReplyParts(ctx, in, reply, nil, nil)
}

// ReplyParts is ReplyFrame for a reply frame in three parts, as CallParts
// takes a call: head holds the header.
func (c *Conn) ReplyParts(ctx context.Context, in *Incoming, head, body, tail []byte) (wire.Message, error) {
	if in.Kind != wire.KindCall {
		return nil, fmt.Errorf("chanos: Reply to a %s", in.Kind)
	}
	wire.SetCallID(head, in.Header.CallID)
	if in.ReplyMeta != nil {
		// Checked by SetReplyMetadata: AppendMetadata cannot fail.
		frame, _ := wire.AppendMetadata(slices.Concat(head, body, tail), in.ReplyMeta)
		head, body, tail = frame, nil, nil
	}
	_, err := c.sendParts(ctx, head, body, tail, true)
	return Replied, err
}

// ReplyEncoded is Reply for a reply of no fixed size, used by generated
// handlers for the calls Serve runs inline: encode appends the reply's
// frame (the reply value's Encode method). It returns Replied, which the
// handler returns to Serve, and the error of sending; a reply that cannot
// be encoded is answered with an error reply, as Reply does.
func (c *Conn) ReplyEncoded(ctx context.Context, in *Incoming, encode func(*wire.Buffer) error) (wire.Message, error) {
	if in.Kind != wire.KindCall {
		return nil, fmt.Errorf("chanos: Reply to a %s", in.Kind)
	}
	err := c.sendWith(ctx, withMetadata(encode, in.ReplyMeta), in.Header.CallID, 0)
	if err != nil && !interconnect.IsEnd(err) && ctx.Err() == nil {
		return c.ReplyUnencodable(ctx, in, err)
	}
	return Replied, err
}

// ReplyUnencodable answers the rpc call in, whose reply could not be
// encoded (err), with an error reply of CodeInternal: the caller still
// gets an answer, and the code says the server broke the interface, not
// that the caller gave a bad argument (which the encoder's error alone
// would say). It returns Replied, as ReplyEncoded does.
func (c *Conn) ReplyUnencodable(ctx context.Context, in *Incoming, err error) (wire.Message, error) {
	return Replied, c.Reply(ctx, in, nil, &RemoteError{Code: wire.Errval(CodeInternal), Detail: err.Error()})
}

// The Send fast paths below are for generated code, which knows the
// message's type and so can keep the message itself from escaping: it
// hands over a frame on its stack, an encoding function, or a copy.

// Local reports whether the connection's interconnect passes messages as
// values, not frames (the local interconnect).
func (c *Conn) Local() bool { return c.values != nil }

// SendFrame is Send for a message of a fixed size over ump: frame is the
// whole frame, built with wire.PutFixed.
func (c *Conn) SendFrame(ctx context.Context, frame []byte) error {
	if c.ended.Load() {
		return c.Err()
	}
	if err := c.l.SendFrame(ctx, transient(frame), nil); err != nil {
		return c.wrap(err)
	}
	return nil
}

// SendParts is SendFrame for a frame in three parts, as CallParts takes
// a call: head holds the header.
func (c *Conn) SendParts(ctx context.Context, head, body, tail []byte) error {
	if c.ended.Load() {
		return c.Err()
	}
	_, err := c.sendParts(ctx, head, body, tail, true)
	return err
}

// SendEncoded is Send for a message that encode appends to the buffer it
// is given (the message's Encode method).
func (c *Conn) SendEncoded(ctx context.Context, encode func(*wire.Buffer) error) error {
	if c.ended.Load() {
		return c.Err()
	}
	return c.sendWith(ctx, encode, 0, 0)
}

// SendValue is Send of m, a message the connection may keep: a copy that
// shares no memory with the caller's, checked as Encode would check it
// (generated code's copy). On the local interconnect m itself travels.
func (c *Conn) SendValue(ctx context.Context, m wire.Message) error {
	if c.values == nil {
		return c.Send(ctx, m)
	}
	if c.ended.Load() {
		return c.Err()
	}
	return c.wrap(c.values.SendValue(ctx, m))
}

// transient returns b, hidden from escape analysis, for passing to a
// Link. A call through an interface makes the compiler assume that its
// arguments escape, which would move every frame generated code builds on
// its stack to the heap, an allocation per message. Every Link copies
// what it is given to send before it returns, keeping nothing (the
// interconnect.Link contract), so the frame may stay where it is. The
// slice's address is written as an integer, which the compiler does not
// follow; word by word, so that the processor forwards each store to the
// load that reads it back.
func transient(b []byte) []byte {
	var out []byte
	h := (*struct {
		data     uintptr
		len, cap int
	})(unsafe.Pointer(&out))
	h.data, h.len, h.cap = uintptr(unsafe.Pointer(unsafe.SliceData(b))), len(b), cap(b)
	return out
}
