package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chanos/chanos/interconnect"
	"github.com/chanos/chanos/wire"
)

// Interface describes an interface to the connection layer. Generated
// packages define one as their variable Interface.
type Interface struct {
	// Name is the interface's name in the IDL; binding checks that both
	// ends use the same.
	Name string
	// MaxFrameSize is the largest frame of the interface, header included.
	MaxFrameSize int
	// Fingerprint is the hash of the interface's definition (the generated
	// Fingerprint constant); binding refuses an export whose fingerprint
	// differs. 0 declares none, and is not checked.
	Fingerprint uint64
	// Definition is the interface as an IDL file of its own (the generated
	// Definition constant), which a domain's reflection service answers
	// for its exports; "" for none.
	Definition string
}

// Incoming is a message or rpc call that arrived on a connection.
type Incoming = interconnect.Incoming

// inboxLimit bounds how many messages a connection holds for Receive while
// a Call reads past them to its reply, and inboxBytes the bytes of their
// frames (so that a peer's largest frames do not make 1024 of them). When
// either is reached the inbox is full: the reader stops reading, so the
// peer's sends block, and memory stays bounded.
const (
	inboxLimit = 1024
	inboxBytes = 4 << 20
)

// inboxFullError is err, the end of a call's context while the inbox was
// full, saying why the call could not read its reply: a program that calls
// must also take the messages the peer sends it.
func (c *Conn) inboxFullError(err error) error {
	c.mu.Lock()
	n, bytes := len(c.inbox), c.inboxBytes
	c.mu.Unlock()
	return fmt.Errorf("%w (the reply waits behind %d one-way messages from the peer, %d bytes, that fill this connection's inbox: receive them, with Recv, Receive or Handle)", err, n, bytes)
}

// Conn is a bound connection: typed messages in both directions and rpc
// calls, over the local or ump interconnect. Generated packages wrap it in
// a typed Conn; most programs use that.
//
// Send, Call and Receive may be called from several goroutines. The ring
// is read by whichever goroutine needs the next frame (a Receive, or a Call
// waiting for its reply), in that goroutine: there is no reader goroutine
// and no hop on the fast path. Frames that goroutine does not want are
// handed over: replies to their callers, messages to the next Receive.
//
// The right to read, the reading turn, is an atomic flag, so that a
// goroutine alone on the connection takes it without a lock; the mutex
// guards what is handed over (pending calls, the inbox) and the waiting.
type Conn struct {
	// The link, and the optional method sets it offers, looked up once
	// here so that the paths of a message make no type assertion.
	l      interconnect.Link
	parts  interconnect.PartsSender   // nil if l has none
	raw    interconnect.RawReceiver   // nil if l has none
	values interconnect.ValueSender   // set if l passes message values (within one process)
	peer   interconnect.PeerWatcher   // nil if l has none: the peer's end is known only when read
	swap   interconnect.BufferSwapper // nil if l has none: a frame kept past the next read is copied

	iface Interface
	log   *slog.Logger
	// the calls this side makes run through these (InterceptCalls); nil
	// for most connections, which then pay one test a call
	calls []CallInterceptor

	sendMu sync.Mutex
	sbuf   wire.Buffer

	nextID  atomic.Uint32
	wrapped atomic.Bool // nextID is about to wrap or has: any id may be outstanding

	// turn is 0 while nobody holds the reading turn, and turnHeld while a
	// goroutine does: or'ed with the id of its call when it is a call's
	// own (readReply), which new call ids must then avoid (newCallID).
	turn    atomic.Uint64
	waiting atomic.Int32 // goroutines that took wake since it was last closed; changed under mu
	ninbox  atomic.Int32 // len(inbox), or inboxLimit if its bytes fill it (countInboxLocked); changed under mu

	mu         sync.Mutex
	wake       chan struct{} // closed when the turn is released or the inbox changes
	pending    map[uint32]*pendingCall
	inbox      []Incoming                    // copied out of the link's buffers
	inboxBytes int                           // the bytes of the inbox's frames
	cur        Incoming                      // the frame being read; owned by the reading goroutine
	inflight   map[uint32]context.CancelFunc // calls served concurrently, by call id
	// early holds the ids of the last cancels that found no call in
	// inflight: a call served inline registers its cancel only once it
	// is handed off, and another goroutine's read (a call of the serving
	// side's own) may take its caller's cancel before that.
	early     [16]uint32
	earlyNext int
	endErr    error       // why the connection ended; nil while open
	ended     atomic.Bool // endErr != nil, readable without the lock

	ctx    context.Context // canceled by Close
	cancel context.CancelFunc

	peerInfo any         // who is at the other end, as SetPeer gave it
	onEnd    func(error) // called once the connection ends, with why
}

// OnEnd has fn called, once, when the connection ends (with why: what Err
// returns then), in the goroutine that finds the end; set it before the
// connection is used. The end is found by whoever reads the connection,
// by the peer watch of Serve, or by Close.
func (c *Conn) OnEnd(fn func(error)) { c.onEnd = fn }

// SetPeer records who is at the other end of the connection, for Peer
// (the chanos package's Peer, given by the monitor).
func (c *Conn) SetPeer(p any) { c.peerInfo = p }

// Peer returns what SetPeer recorded, or nil.
func (c *Conn) Peer() any { return c.peerInfo }

// connKey is the key of the connection among the values of the contexts
// Serve gives handlers.
type connKey struct{}

// ConnFrom returns the connection whose Serve runs the handler given ctx.
func ConnFrom(ctx context.Context) (*Conn, bool) {
	c, ok := ctx.Value(connKey{}).(*Conn)
	return c, ok
}

// pendingCall is a call whose reply another goroutine may read. The
// reply is decoded into reply by whichever goroutine reads it; a call of
// generated code's fast paths, whose reply value lives on its caller's
// stack, has no reply value: the frame is copied into frame instead, and
// the caller decodes it once the call is settled.
type pendingCall struct {
	reply wire.Message // nil: copy the frame
	name  string
	msg   uint16
	frame []byte        // the reply frame, when reply is nil
	caps  []wire.Cap    // its capabilities, which the caller takes
	meta  wire.Metadata // the reply's metadata
	// replied is set when a reply (or error reply) came, as opposed to
	// the connection's end
	replied bool
	done    chan struct{} // receives one token when err is set
	err     error
}

var pendingPool = sync.Pool{New: func() any { return &pendingCall{done: make(chan struct{}, 1)} }}

// New returns a Conn speaking iface over l, which it takes over, logging
// to log (slog.Default if nil).
func New(l interconnect.Link, iface Interface, log *slog.Logger) *Conn {
	if log == nil {
		log = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	parts, _ := l.(interconnect.PartsSender)
	raw, _ := l.(interconnect.RawReceiver)
	values, _ := l.(interconnect.ValueSender)
	peer, _ := l.(interconnect.PeerWatcher)
	swap, _ := l.(interconnect.BufferSwapper)
	return &Conn{
		l:        l,
		parts:    parts,
		raw:      raw,
		values:   values,
		peer:     peer,
		swap:     swap,
		iface:    iface,
		log:      log,
		wake:     make(chan struct{}),
		pending:  map[uint32]*pendingCall{},
		inflight: map[uint32]context.CancelFunc{},
		ctx:      ctx,
		cancel:   cancel,
	}
}

// Interconnect names the connection's interconnect: "local" or "ump".
func (c *Conn) Interconnect() string { return c.l.Kind() }

// Link returns the interconnect's link under the connection.
func (c *Conn) Link() interconnect.Link { return c.l }

// Interface returns the interface the connection speaks.
func (c *Conn) Interface() Interface { return c.iface }

// Err returns why the connection ended, or nil while it is open. The error
// matches interconnect.ErrClosed, interconnect.ErrPeerDied or interconnect.ErrProtocol.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.endErr
}

// Close closes the connection. The peer's Receive reports interconnect.ErrClosed once
// it has received everything sent before. Close is safe to call more than
// once and concurrently with other methods.
func (c *Conn) Close() error {
	c.end(interconnect.ErrClosed)
	err := c.l.Close()
	c.cancel()
	return err
}

// end records why the connection ended (the first reason wins), fails
// outstanding calls and wakes every waiter.
func (c *Conn) end(err error) {
	c.mu.Lock()
	if c.endErr != nil {
		c.mu.Unlock()
		return
	}
	c.endErr = err
	c.ended.Store(true)
	for id, p := range c.pending {
		p.err = err
		p.done <- struct{}{}
		delete(c.pending, id)
	}
	c.wakeLocked()
	c.mu.Unlock()
	if c.onEnd != nil {
		c.onEnd(err)
	}
}

// wakeLocked wakes the goroutines waiting on c.wake. Without waiters it
// does nothing, so the uncontended path allocates no channel.
func (c *Conn) wakeLocked() {
	if c.waiting.Load() == 0 {
		return
	}
	c.waiting.Store(0)
	close(c.wake)
	c.wake = make(chan struct{})
}

// Send encodes m and sends it as a one-way message. It blocks while the
// peer's buffer is full, until there is room, ctx ends or the connection
// ends. m may be reused as soon as Send returns. Generated code sends
// copies of its messages as values on the local interconnect (SendValue);
// Send always sends the frame, which every interconnect carries.
func (c *Conn) Send(ctx context.Context, m wire.Message) error {
	if m.MsgKind() != wire.KindMessage {
		return fmt.Errorf("chanos: Send of %s %s: use Call for rpcs", m.MsgName(), m.MsgKind())
	}
	if c.ended.Load() {
		return c.Err()
	}
	return c.sendEncoded(ctx, m, 0, 0)
}

// sendEncoded encodes m, patches in the call id and timeout, and sends it.
func (c *Conn) sendEncoded(ctx context.Context, m wire.Message, callID, timeoutUS uint32) error {
	return c.sendWith(ctx, m.Encode, callID, timeoutUS)
}

// sendWith sends the frame encode appends, with call id callID and, on a
// call, timeout timeoutUS, waiting for room.
func (c *Conn) sendWith(ctx context.Context, encode func(*wire.Buffer) error, callID, timeoutUS uint32) error {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	if err := c.encodeLocked(encode, callID, timeoutUS); err != nil {
		return err
	}
	caps, err := c.sendCaps()
	if err != nil {
		return err
	}
	err = c.l.SendFrame(ctx, c.sbuf.B, caps)
	if err != nil {
		c.dropCopies(caps)
	}
	c.sentLocked()
	return c.wrap(err)
}

// dropCopies closes the copies sendCaps made for a frame that did not go.
func (c *Conn) dropCopies(caps []wire.Cap) {
	if c.values == nil {
		return
	}
	for i, cp := range caps {
		if i >= len(c.sbuf.GiveAway) || !c.sbuf.GiveAway[i] {
			cp.Close()
		}
	}
}

// sendCaps returns the capabilities that go with sbuf's frame: sbuf's,
// except within one process, where they travel as values and the
// receiver of a cap (not a give_away_cap) must get a copy of its own, as
// it would from another process (wire.DupCap).
func (c *Conn) sendCaps() ([]wire.Cap, error) {
	caps := c.sbuf.Caps
	if c.values == nil || len(caps) == 0 {
		return caps, nil
	}
	out := make([]wire.Cap, len(caps))
	for i, cp := range caps {
		if i < len(c.sbuf.GiveAway) && c.sbuf.GiveAway[i] {
			out[i] = cp
			continue
		}
		d, err := wire.DupCap(cp)
		if err != nil {
			wire.CloseCaps(out[:i])
			return nil, fmt.Errorf("chanos: copy capability %d for the receiver: %w", i, err)
		}
		out[i] = d
	}
	return out, nil
}

// trySendEncoded is sendEncoded without the wait, of the frame encode
// appends: it reports false, having sent nothing, when the peer's buffer
// lacks room.
func (c *Conn) trySendEncoded(encode func(*wire.Buffer) error, callID, timeoutUS uint32) (bool, error) {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	if err := c.encodeLocked(encode, callID, timeoutUS); err != nil {
		return false, err
	}
	caps, err := c.sendCaps()
	if err != nil {
		return false, err
	}
	sent, err := c.l.TrySendFrame(c.sbuf.B, caps)
	if !sent || err != nil {
		c.dropCopies(caps)
	}
	if sent || err != nil {
		c.sentLocked()
	}
	return sent, c.wrap(err)
}

// encodeLocked puts the frame encode appends into sbuf, with its call id
// and, on a call, its timeout.
func (c *Conn) encodeLocked(encode func(*wire.Buffer) error, callID, timeoutUS uint32) error {
	c.sbuf.Reset()
	if err := encode(&c.sbuf); err != nil {
		return err
	}
	if callID != 0 {
		wire.SetCallID(c.sbuf.B, callID)
		if len(c.sbuf.B) > 6 && c.sbuf.B[6]&wire.FlagCall != 0 {
			wire.SetTimeout(c.sbuf.B, timeoutUS)
		}
	}
	return nil
}

// maxKeptSendBuffer bounds the send buffer a connection keeps from one
// send to the next: a rare large frame (a monitor's ps reply of a
// megabyte, say) does not pin a buffer of its size for the connection's
// life, so that a server's memory is not its connections times its
// largest frame.
const maxKeptSendBuffer = 64 << 10

// sentLocked finishes a send of sbuf, done or failed: the give_away_caps
// went with the frame, except within one process, where the receiver now
// holds them; a buffer grown past maxKeptSendBuffer is let go.
func (c *Conn) sentLocked() {
	if c.values == nil && len(c.sbuf.Caps) > 0 {
		c.closeGiveAway()
	}
	if cap(c.sbuf.B) > maxKeptSendBuffer {
		c.sbuf.B = nil
	}
}

// sendRaw sends a frame the connection layer built itself (error replies,
// cancels).
func (c *Conn) sendRaw(ctx context.Context, frame []byte) error {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	return c.wrap(c.l.SendFrame(ctx, frame, nil))
}

// closeGiveAway closes the give_away_caps of the frame just sent: their
// ownership went with it.
func (c *Conn) closeGiveAway() {
	for i, cp := range c.sbuf.Caps {
		if i < len(c.sbuf.GiveAway) && c.sbuf.GiveAway[i] && cp != nil {
			cp.Close()
		}
	}
}

// wrap turns the error of a send on the link into the connection's: if
// the connection ended, it records why. A link's send ends with its
// context only while it waits for room, so such an error says that the
// peer stopped taking frames; the most common cause, two sides each
// waiting to send while neither receives, is named, since a bare
// deadline on a one-way send leaves the reader without a clue.
func (c *Conn) wrap(err error) error {
	if err == nil {
		return nil
	}
	if interconnect.IsEnd(err) {
		c.end(err)
	} else if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return fmt.Errorf("%w (%s)", err, sendFull)
	}
	return err
}

// sendFull explains a send that waited for room until its context ended.
const sendFull = "the peer took no frame while this one waited for room: " +
	"a peer that is itself waiting to send to this side takes none until this side " +
	"receives what it sends (Recv, Receive, Handle or Serve)"

// timeoutOf returns ctx's remaining time in microseconds for a call
// frame's timeout_us (docs/wire.md): 0 without a deadline.
func timeoutOf(ctx context.Context) uint32 {
	dl, ok := ctx.Deadline()
	if !ok {
		return 0
	}
	return wire.TimeoutUS(time.Until(dl))
}

// Call makes an rpc call: it sends call with a fresh call id and ctx's
// deadline, and waits for the reply, which it decodes into reply. An
// error reply comes back as a *RemoteError. If ctx ends first, Call tells
// the peer that the call is abandoned and returns ctx's error.
func (c *Conn) Call(ctx context.Context, call, reply wire.Message) error {
	return c.CallTimeout(ctx, -1, call, reply)
}

// CallTimeout is Call with d, rather than what remains of ctx's time, as
// the timeout the call frame carries: a caller that waits until ctx ends
// while asking the peer to answer by d (less) gets the peer's own answer
// at that deadline, and so tells a peer that answered "not in time" from
// one that did not answer at all. d must be positive (a negative d is
// Call's: the frame carries what remains of ctx's time).
func (c *Conn) CallTimeout(ctx context.Context, d time.Duration, call, reply wire.Message) error {
	if c.calls != nil {
		ctx, after, err := c.intercept(ctx, call.MsgName())
		if err != nil {
			return err
		}
		err = c.call(ctx, d, call, reply)
		if err != nil {
			err = callError(call.MsgName(), err)
		}
		return after.finish(err)
	}
	if err := c.call(ctx, d, call, reply); err != nil {
		return callError(call.MsgName(), err)
	}
	return nil
}

// callError names the rpc whose call failed with err (a context's end,
// the connection's), so that a program that makes many tells which: an
// error reply names it already (RemoteError), as do the errors that
// start with the name. err stays matchable (errors.Is, errors.As).
func callError(name string, err error) error {
	var re *RemoteError
	if errors.As(err, &re) || strings.HasPrefix(err.Error(), name) {
		return err
	}
	return fmt.Errorf("%s: %w", name, err)
}

// callTimeout returns the timeout_us of a call frame: d's, or, if d is
// negative, ctx's remaining time (timeoutOf).
func callTimeout(ctx context.Context, d time.Duration) uint32 {
	if d >= 0 {
		return wire.TimeoutUS(d)
	}
	return timeoutOf(ctx)
}

// call is Call, with d as the frame's timeout unless it is negative.
func (c *Conn) call(ctx context.Context, d time.Duration, call, reply wire.Message) error {
	if call.MsgKind() != wire.KindCall || reply.MsgKind() != wire.KindReply || call.MsgNumber() != reply.MsgNumber() {
		return fmt.Errorf("chanos: Call with %s %s and %s %s", call.MsgName(), call.MsgKind(), reply.MsgName(), reply.MsgKind())
	}
	id := c.newCallID()
	// Calls are encoded even on the local interconnect: the reply must be
	// decoded into the caller's value, and a frame makes the call id and
	// timeout travel as they do elsewhere.
	encode := withMetadata(call.Encode, outgoing(ctx))
	if c.ninbox.Load() < inboxLimit && c.takeTurn(id) {
		if done, err := c.callDirect(ctx, d, call.MsgName(), encode, reply, id); done {
			return err
		}
	}
	p, err := c.register(id, call.MsgName(), call.MsgNumber(), reply)
	if err != nil {
		return err
	}
	if err := c.sendWith(ctx, encode, id, callTimeout(ctx, d)); err != nil {
		c.forget(id, p)
		return err
	}
	err = c.await(ctx, id, p)
	if p.replied {
		captureReply(ctx, p.meta)
	}
	c.recycle(p)
	return err
}

// register adds call id of rpc msg, called name, whose reply is to be
// decoded into reply (or copied, if reply is nil), to the pending calls,
// unless the connection has ended; then it returns why.
func (c *Conn) register(id uint32, name string, msg uint16, reply wire.Message) (*pendingCall, error) {
	c.mu.Lock()
	if c.endErr != nil {
		err := c.endErr
		c.mu.Unlock()
		return nil, err
	}
	p := pendingPool.Get().(*pendingCall)
	p.reply, p.name, p.msg, p.err = reply, name, msg, nil
	c.pending[id] = p
	c.mu.Unlock()
	return p, nil
}

// callDirect makes call id (with d as its timeout: see call) while
// holding the reading turn, which it releases, and reports done unless
// the peer's buffer had no room for the call, which it then has not sent.
// While this goroutine holds the turn nobody else reads the link, so its
// reply can only come here: the call is not registered as pending.
func (c *Conn) callDirect(ctx context.Context, d time.Duration, name string, encode func(*wire.Buffer) error, reply wire.Message, id uint32) (bool, error) {
	if c.ended.Load() {
		c.release()
		return true, c.Err()
	}
	// Sending without waiting: a goroutine that holds the turn while it
	// waits for room could deadlock with a peer that waits for room too.
	sent, err := c.trySendEncoded(encode, id, callTimeout(ctx, d))
	if !sent || err != nil {
		c.release()
		return err != nil, err
	}
	in, err := c.readReply(ctx, id, reply.MsgNumber(), nil)
	if err == nil {
		captureReply(ctx, in.Meta)
		err = c.checkReply(in, id, name, reply.MsgNumber())
		if err == nil {
			err = in.Decode(reply)
		}
	}
	c.releaseCur()
	return true, err
}

// checkReply returns what is wrong with in as the answer to call id of
// rpc msg, called name: a reply to another rpc ends the connection, and an
// error reply gives its error.
func (c *Conn) checkReply(in *Incoming, id uint32, name string, msg uint16) error {
	switch {
	case in.Header.Msg != msg:
		wire.CloseCaps(in.Caps)
		return c.Violation(fmt.Errorf("reply to call %d of %s is message %d", id, name, in.Header.Msg))
	case in.Kind == wire.KindErrorReply:
		return replyResult(in, nil, name)
	}
	return nil
}

// readReply reads frames, as the holder of the reading turn, until the
// reply to call id of rpc msg arrives, and returns it (it is c.cur).
// Frames for others are routed on: replies to their callers, messages
// and calls to the inbox; while the inbox is full, it waits for a Receive
// to take from it. An error is the connection's end, or ctx's, and then
// the peer has been told that the call is abandoned.
//
// With fixed (CallFrame's), over ump, a reply of len(fixed) bytes, the
// one expected, is known by its header's 16 bytes and copied into fixed
// without being parsed: readReply then returns nil, nil.
func (c *Conn) readReply(ctx context.Context, id uint32, msg uint16, fixed []byte) (*Incoming, error) {
	in := &c.cur // only the reading goroutine touches it: no allocation
	fast := fixed != nil && c.raw != nil
	head := [2]uint64{uint64(len(fixed)) | uint64(msg)<<32 | uint64(wire.FlagReply)<<48, uint64(id)}
	for {
		if c.ninbox.Load() >= inboxLimit {
			if err := c.awaitInboxRoom(ctx); err != nil {
				c.sendCancel(msg, id)
				return nil, c.inboxFullError(err)
			}
		}
		var err error
		if fast {
			var frame []byte
			if frame, err = c.raw.ReceiveRaw(ctx); err != nil {
				*in = Incoming{}
			} else if len(frame) == len(fixed) && [2]uint64{binary.LittleEndian.Uint64(frame), binary.LittleEndian.Uint64(frame[8:])} == head {
				copy(fixed, frame)
				return nil, nil
			} else {
				err = c.raw.Parse(frame, in)
			}
		} else {
			err = c.l.Receive(ctx, in)
		}
		if err != nil {
			err = c.linkEnded(ctx, err)
			if !interconnect.IsEnd(err) { // ctx ended: the reply will be dropped
				c.sendCancel(msg, id)
			}
			return nil, err
		}
		if (in.Kind == wire.KindReply || in.Kind == wire.KindErrorReply) && in.Header.CallID == id {
			return in, nil
		}
		if _, err := c.route(in, true, nil); err != nil {
			return nil, err
		}
	}
}

// awaitInboxRoom waits, holding the reading turn, until a Receive has
// taken from the full inbox, the connection has ended or ctx ends.
func (c *Conn) awaitInboxRoom(ctx context.Context) error {
	for {
		c.mu.Lock()
		if !c.inboxFullLocked() || c.endErr != nil {
			c.mu.Unlock()
			return nil
		}
		c.waiting.Add(1)
		if err := c.sleepLocked(ctx); err != nil {
			return err
		}
	}
}

// sleepLocked, called with mu held by a goroutine counted in waiting,
// releases mu and waits for c.wake to close or ctx to end.
func (c *Conn) sleepLocked(ctx context.Context) error {
	wake := c.wake
	c.mu.Unlock()
	select {
	case <-wake:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// replyResult decodes reply from in, or returns the error an error reply
// carries.
//
// Capabilities that came with the reply become reply's; those of a reply
// that does not decode, or of an error reply, are closed.
func replyResult(in *Incoming, reply wire.Message, name string) error {
	if in.Kind == wire.KindErrorReply {
		wire.CloseCaps(in.Caps)
		_, st, err := wire.ParseErrorReply(in.Frame)
		if err != nil {
			return fmt.Errorf("%s: malformed error reply: %w", name, err)
		}
		return &RemoteError{Msg: name, Code: st.Code, Detail: st.Detail}
	}
	err := in.Decode(reply)
	if err != nil {
		wire.CloseCaps(in.Caps)
	}
	return err
}

// recycle returns p to the pool. p must hold no token: a call taken out
// of pending by deliver or end is always signalled, so whoever gives up a
// call that is no longer pending first waits for its token (settle).
func (c *Conn) recycle(p *pendingCall) {
	p.reply, p.err, p.caps, p.meta, p.replied = nil, nil, nil, nil, false
	if cap(p.frame) > maxPooledFrame {
		p.frame = nil
	}
	p.frame = p.frame[:0]
	pendingPool.Put(p)
}

// settle takes call id out of pending and reports whether it was still
// there; if it was not, it waits for the token deliver or end sends.
func (c *Conn) settle(id uint32, p *pendingCall) bool {
	c.mu.Lock()
	still := c.pending[id] == p
	if still {
		delete(c.pending, id)
	}
	c.mu.Unlock()
	if !still {
		<-p.done
	}
	return still
}

// maxPooledFrame bounds the reply buffer a pooled call keeps.
const maxPooledFrame = 64 << 10

// forget drops a call that will not be waited for.
func (c *Conn) forget(id uint32, p *pendingCall) {
	c.settle(id, p)
	c.recycle(p)
}

// await waits for call id's reply, reading the link itself when nobody
// else is.
func (c *Conn) await(ctx context.Context, id uint32, p *pendingCall) error {
	for {
		c.mu.Lock()
		if c.pending[id] != p {
			// The reply was delivered (or the connection ended): deliver
			// and end take the call out of pending under the lock, then
			// signal it, so the token is there or on its way.
			c.mu.Unlock()
			<-p.done
			return p.err
		}
		full := c.inboxFullLocked()
		if c.endErr == nil && !full && c.takeTurn(0) {
			c.mu.Unlock()
			mine, err := c.readFor(ctx, p)
			c.release()
			if mine {
				return p.err
			}
			if err != nil && !interconnect.IsEnd(err) {
				// ctx ended while we were reading.
				if !c.abandon(id, p) {
					return p.err // the reply came first after all
				}
				return err
			}
			continue
		}
		if full {
			// Nobody may read until a Receive takes from the inbox, and
			// that wakes the waiting; a free turn is no reason to look
			// again (that would spin, deaf to ctx, as long as the inbox
			// stays full).
			c.waiting.Add(1)
		} else if !c.waitLocked() {
			continue
		}
		wake := c.wake
		c.mu.Unlock()
		select {
		case <-p.done:
			return p.err
		case <-wake:
		case <-ctx.Done():
			if !c.abandon(id, p) {
				// The reply came as ctx ended: the call is answered, and
				// what the reply brought (its descriptors) is the
				// caller's, not dropped with an error.
				return p.err
			}
			if full {
				return c.inboxFullError(ctx.Err())
			}
			return ctx.Err()
		}
	}
}

// abandon gives up on a call whose context ended, unless the reply
// arrived meanwhile: it drops the call and tells the peer, and reports
// whether it did.
func (c *Conn) abandon(id uint32, p *pendingCall) bool {
	if c.settle(id, p) {
		c.sendCancel(p.msg, id)
		return true
	}
	return false
}

// sendCancel tells the peer that call id, of rpc msg, is abandoned.
func (c *Conn) sendCancel(msg uint16, id uint32) {
	var b wire.Buffer
	wire.AppendCancel(&b, msg, id)
	// Best effort and brief: the caller has already given up.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	c.sendRaw(ctx, b.B)
	cancel()
}

// waitLocked registers the calling goroutine, which holds mu, as waiting
// on c.wake, and reports whether it may wait: false means the turn was
// released meanwhile, so the caller must look again (release reads
// waiting without the lock, after freeing the turn).
func (c *Conn) waitLocked() bool {
	c.waiting.Add(1)
	if c.turn.Load() == 0 {
		c.mu.Unlock()
		return false
	}
	return true
}

// releaseCur clears the frame being read and releases the turn.
func (c *Conn) releaseCur() {
	c.cur = Incoming{}
	c.release()
}

// canceledEarly reports whether a cancel of call id came before the call
// registered its cancel in inflight, and forgets it. Called with mu held.
func (c *Conn) canceledEarly(id uint32) bool {
	for i, e := range c.early {
		if e == id && id != 0 {
			c.early[i] = 0
			return true
		}
	}
	return false
}

// turnHeld marks the reading turn as held (Conn.turn).
const turnHeld = 1 << 32

// takeTurn takes the reading turn if nobody holds it, for call id (0: not
// for a call of its own), and reports whether it did.
func (c *Conn) takeTurn(id uint32) bool {
	return c.turn.CompareAndSwap(0, turnHeld|uint64(id))
}

// release ends this goroutine's turn at reading the link, and wakes the
// goroutines waiting, if any.
func (c *Conn) release() {
	c.turn.Store(0)
	if c.waiting.Load() != 0 {
		c.mu.Lock()
		c.wakeLocked()
		c.mu.Unlock()
	}
}

// readFor reads frames until p's reply arrives (it returns true, with
// p.err set), the inbox is full, or the link or ctx ends. The caller holds
// the reading turn.
func (c *Conn) readFor(ctx context.Context, p *pendingCall) (bool, error) {
	in := &c.cur // only the reading goroutine touches it: no allocation
	defer func() { *in = Incoming{} }()
	for {
		if c.ninbox.Load() >= inboxLimit {
			// Let a Receive drain it; we will be woken.
			return false, nil
		}
		var err error
		if err = c.l.Receive(ctx, in); err != nil {
			return false, c.linkEnded(ctx, err)
		}
		mine, err := c.route(in, true, p)
		if err != nil || mine {
			return mine, err
		}
	}
}

// linkEnded handles an error from the link's receive: the end of the
// connection, or of ctx. The interconnect's own deadline may fire a moment
// before ctx reports it, so a deadline or cancellation never ends the
// connection.
func (c *Conn) linkEnded(ctx context.Context, err error) error {
	if !interconnect.IsEnd(err) && (ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) {
		return err
	}
	c.end(err)
	return err
}

// route delivers a frame the reader does not keep: a reply to its caller,
// and (when keep) a message or call to the inbox, copied out of the
// link's buffer. It returns an error when the frame breaks the protocol.
func (c *Conn) route(in *Incoming, keep bool, self *pendingCall) (bool, error) {
	switch in.Kind {
	case wire.KindReply, wire.KindErrorReply:
		// Call ids are issued in order from 1: until they wrap around, a
		// reply above the last one issued answers no call ever made.
		if id := in.Header.CallID; id == 0 || (!c.wrapped.Load() && id > c.nextID.Load()) {
			return false, c.Violation(fmt.Errorf("%s to call %d, which was never made", in.Kind, id))
		}
		return c.deliver(in, self)
	case wire.KindCancel:
		// A call running under Serve's Concurrent option is canceled;
		// otherwise the call has been answered already.
		wire.CloseCaps(in.Caps)
		if in.Frame != nil {
			if _, err := wire.ParseCancel(in.Frame); err != nil {
				return false, c.Violation(fmt.Errorf("bad cancel: %w", err))
			}
		}
		c.mu.Lock()
		cancel := c.inflight[in.Header.CallID]
		if cancel == nil {
			c.early[c.earlyNext] = in.Header.CallID
			c.earlyNext = (c.earlyNext + 1) % len(c.early)
		}
		c.mu.Unlock()
		if cancel != nil {
			cancel()
		}
		return false, nil
	}
	if !keep {
		return false, nil
	}
	cp := *in
	if in.Frame != nil {
		cp.Frame = append([]byte(nil), in.Frame...)
	}
	c.mu.Lock()
	c.inbox = append(c.inbox, cp)
	c.inboxBytes += len(cp.Frame)
	c.countInboxLocked()
	c.wakeLocked()
	c.mu.Unlock()
	return false, nil
}

// countInboxLocked sets ninbox from the inbox, which mu guards: its length,
// or inboxLimit once its frames' bytes reach inboxBytes, so that the checks
// of ninbox against inboxLimit, made without the lock, see it full.
func (c *Conn) countInboxLocked() {
	n := len(c.inbox)
	if c.inboxBytes >= inboxBytes && n > 0 {
		n = max(n, inboxLimit)
	}
	c.ninbox.Store(int32(n))
}

// inboxFullLocked reports whether the inbox is full; mu is held.
func (c *Conn) inboxFullLocked() bool { return c.ninbox.Load() >= inboxLimit }

// deliver completes the call a reply answers, and reports whether that
// call is self, the reader's own, which it then does not signal: the
// reader returns straight away. A reply to no outstanding call is dropped:
// it answers a call that was abandoned.
func (c *Conn) deliver(in *Incoming, self *pendingCall) (bool, error) {
	id := in.Header.CallID
	c.mu.Lock()
	p := c.pending[id]
	delete(c.pending, id)
	c.mu.Unlock()
	if p == nil {
		wire.CloseCaps(in.Caps) // nobody takes them
		return false, nil
	}
	var bad error
	p.meta, p.replied = in.Meta, true
	switch {
	case p.msg != in.Header.Msg:
		wire.CloseCaps(in.Caps)
		bad = c.Violation(fmt.Errorf("reply to call %d of %s is message %d", id, p.name, in.Header.Msg))
		p.err = bad
	case p.reply != nil || in.Kind == wire.KindErrorReply:
		p.err = replyResult(in, p.reply, p.name)
	default: // the caller decodes it once the call is settled
		p.frame = append(p.frame[:0], in.Frame...)
		p.caps = in.Caps
		p.err = nil
	}
	if p == self {
		return true, bad
	}
	p.done <- struct{}{}
	return false, bad
}

// ReceiveFunc waits for the next message or rpc call from the peer and
// calls fn with it, in the calling goroutine. in.Frame is valid only until
// fn returns: fn decodes it (in.Decode) or copies it. While fn runs, other
// goroutines' Receive and Call wait, so fn should not block for long; a
// server that wants concurrency hands the decoded message to a goroutine.
//
// ReceiveFunc returns fn's error, ctx's error, or the connection's end
// (matching interconnect.ErrClosed, interconnect.ErrPeerDied or
// interconnect.ErrProtocol) once every message sent before the end has been
// received.
func (c *Conn) ReceiveFunc(ctx context.Context, fn func(in *Incoming) error) error {
	// Alone on the connection, with nothing handed over: no lock.
	if c.ninbox.Load() == 0 && c.takeTurn(0) {
		// Only the turn's holder adds to the inbox: it stays empty.
		if c.ninbox.Load() == 0 && !c.ended.Load() {
			done, err := c.readOne(ctx, fn)
			c.release()
			if done || err != nil {
				return err
			}
		} else {
			c.release()
		}
	}
	for {
		c.mu.Lock()
		if len(c.inbox) > 0 {
			in := c.inbox[0]
			c.inbox[0] = Incoming{}
			c.inbox = c.inbox[1:]
			c.inboxBytes -= len(in.Frame)
			if len(c.inbox) == 0 {
				c.inbox = nil
			}
			c.countInboxLocked()
			c.wakeLocked() // a Call may be waiting for room in the inbox
			c.mu.Unlock()
			return fn(&in)
		}
		if c.turn.Load() == 0 {
			if c.endErr != nil {
				err := c.endErr
				c.mu.Unlock()
				return err
			}
			if !c.takeTurn(0) {
				c.mu.Unlock()
				continue
			}
			c.mu.Unlock()
			done, err := c.readOne(ctx, fn)
			c.release()
			if done || err != nil {
				return err
			}
			continue
		}
		if !c.waitLocked() {
			continue
		}
		if err := c.sleepLocked(ctx); err != nil {
			return err
		}
	}
}

// ReceiveFrame is ReceiveFunc with a first look for generated code: over
// ump, when the connection has nothing handed over, fast gets the next
// frame as the ring delivered it (header included, copied out of shared
// memory but not checked: fast checks it, as wire.FixedBody does) and
// reports whether it handled it, while the reading turn is held. A frame
// fast leaves goes to fn as ReceiveFunc would give it, as does every
// frame of other interconnects. Generated Conn.Handle gives messages of a
// fixed size to the Server this way, without the parsing and the calls of
// ReceiveFunc's path between a message's arrival and the answer.
func (c *Conn) ReceiveFrame(ctx context.Context, fast func(frame []byte) (bool, error), fn func(in *Incoming) error) error {
	if c.raw == nil || c.ninbox.Load() != 0 || !c.takeTurn(0) {
		return c.ReceiveFunc(ctx, fn)
	}
	if c.ninbox.Load() != 0 || c.ended.Load() { // only the turn's holder adds to the inbox
		c.release()
		return c.ReceiveFunc(ctx, fn)
	}
	frame, err := c.raw.ReceiveRaw(ctx)
	if err != nil {
		err = c.linkEnded(ctx, err)
		c.release()
		return err
	}
	if handled, err := fast(frame); handled {
		c.release()
		return err
	}
	in := &c.cur
	if err := c.raw.Parse(frame, in); err != nil {
		err = c.linkEnded(ctx, err)
		c.release()
		return err
	}
	switch in.Kind {
	case wire.KindMessage, wire.KindCall:
		err = fn(in)
		c.releaseCur()
		return err
	}
	// A reply or a cancel: routed, then on to the next frame.
	_, err = c.route(in, false, nil)
	c.releaseCur()
	if err != nil {
		return err
	}
	return c.ReceiveFunc(ctx, fn)
}

// readOne reads frames, routing replies, until a message or call arrives,
// which it hands to fn while still holding the reading turn.
func (c *Conn) readOne(ctx context.Context, fn func(in *Incoming) error) (bool, error) {
	in := &c.cur // only the reading goroutine touches it: no allocation
	for {
		if err := c.l.Receive(ctx, in); err != nil {
			return false, c.linkEnded(ctx, err)
		}
		switch in.Kind {
		case wire.KindMessage, wire.KindCall:
			err := fn(in)
			*in = Incoming{}
			return true, err
		}
		if _, err := c.route(in, false, nil); err != nil {
			*in = Incoming{}
			return false, err
		}
	}
}

// Context returns a context that is canceled when the connection is
// closed on this side; goroutines that serve the connection can stop on it.
func (c *Conn) Context() context.Context { return c.ctx }

// Violation ends the connection because the peer broke the protocol (for
// example, sent a frame that does not decode), closing it so that the peer
// learns, and returns err wrapped so that it matches interconnect.ErrProtocol.
func (c *Conn) Violation(err error) error {
	err = interconnect.Violation(err)
	c.end(err)
	c.l.Close()
	c.cancel()
	return err
}

// Reply answers the rpc call in with reply, or with err when err is not
// nil: the error reply carries CodeOf(err) (CodeUnknown for an error that
// has no code) and, as its detail, the Detail of a *RemoteError returned
// as is, else err's text. A reply that cannot be encoded is answered with
// CodeInternal.
func (c *Conn) Reply(ctx context.Context, in *Incoming, reply wire.Message, err error) error {
	if in.Kind != wire.KindCall {
		return fmt.Errorf("chanos: Reply to a %s", in.Kind)
	}
	id := in.Header.CallID
	if err == nil {
		if reply == nil {
			err = &RemoteError{Code: wire.Errval(CodeInternal), Detail: "handler returned no reply"}
		} else if err = c.sendWith(ctx, withMetadata(reply.Encode, in.ReplyMeta), id, 0); err == nil || interconnect.IsEnd(err) {
			return err
		}
		// The reply could not be encoded: the caller still gets an answer.
		err = &RemoteError{Code: wire.Errval(CodeInternal), Detail: err.Error()}
	}
	st := statusOf(err)
	if len(st.Detail) > wire.MaxStatusDetail {
		st.Detail = st.Detail[:wire.MaxStatusDetail]
	}
	var b wire.Buffer
	if wire.AppendErrorReply(&b, in.Header.Msg, st) != nil {
		b.Reset()
		st.Detail = "error detail not encodable"
		wire.AppendErrorReply(&b, in.Header.Msg, st)
	}
	if in.ReplyMeta != nil {
		// Checked by SetReplyMetadata; an error reply too long for it
		// goes without.
		if withMD, err := wire.AppendMetadata(b.B, in.ReplyMeta); err == nil {
			b.B = withMD
		}
	}
	wire.SetCallID(b.B, id)
	return c.sendRaw(ctx, b.B)
}

// ServeOption adjusts Serve.
type ServeOption func(*serveConfig)

type serveConfig struct {
	concurrent int
	only       map[uint16]bool // if set, the rpcs that run concurrently
	ordered    bool
	// run each call through these (WithInterceptor)
	interceptors []Interceptor
}

// Ordered makes Serve run every rpc call in the reading goroutine, one at
// a time and in the order they arrive, holding the reading turn: a slow
// call holds up the connection, and the caller's cancel is not seen until
// the call returns (its deadline is). So is the reply to a call the
// handler makes on the same connection: such a call waits until the
// handler returns, and a handler must not wait for one.
func Ordered() ServeOption { return func(c *serveConfig) { c.ordered = true } }

// Concurrent makes Serve run up to n rpc calls at a time, each in a
// goroutine of its own, while it goes on reading: a call that blocks
// (waiting for a name, say) no longer holds up the connection, and a
// caller that gives up cancels the handler's context. When n calls are
// running, Serve stops reading until one ends, so the peer is slowed
// rather than memory growing. One-way messages are still handled in
// order in the reading goroutine, holding the reading turn, as under
// Ordered: their handlers must not wait for a call on the same
// connection. The price is one goroutine hop per call.
func Concurrent(n int) ServeOption { return func(c *serveConfig) { c.concurrent = n } }

// ConcurrentFor is Concurrent for the rpcs numbered msgs only (those that
// may block, such as a wait); the others run inline, without the hop.
func ConcurrentFor(n int, msgs ...uint16) ServeOption {
	return func(c *serveConfig) {
		c.concurrent = n
		c.only = map[uint16]bool{}
		for _, m := range msgs {
			c.only[m] = true
		}
	}
}

// Serve receives messages and rpc calls until the connection or ctx ends,
// calling handle for each. By default a call starts in the receiving
// goroutine (no hop); if it has not returned within HandOffAfter, a new
// goroutine takes over the reading (see handOff), so a slow call holds up
// no other, and the caller's cancel, deadline or not, ends the call's
// context. Ordered keeps every call in the receiving goroutine, and
// Concurrent runs each in a goroutine of its own. One-way messages are
// handled in order in the receiving goroutine. By default a handler, of
// a call or a message, may call the peer back on the same connection and
// wait for the reply: the handler runs without the reading turn. A call's result is sent as
// the reply. An error from handle
// for a one-way message is logged and serving goes on; one matching
// interconnect.ErrProtocol ends the connection. Serve returns nil when the peer closes
// the connection, and otherwise why it stopped.
//
// When the peer closes the connection or dies, the contexts of the calls'
// handlers then running, inline or concurrent, are canceled at once, on
// the interconnects that learn of the end without a read
// (interconnect.PeerWatcher: ump, local). The monitor's socket
// (seqpacket) is not one: a watch would cost each session a descriptor
// and a goroutine woken by every packet, and the long calls on it (binds)
// are served concurrently, so the reader sees the end. A call
// read after that, one the peer sent before it closed, is handled with a
// context already canceled, and no reply is sent to a peer that is gone.
// One-way messages the peer sent before it closed are still handled, with
// the serving context: they ask for no answer. Serve returns once the
// handlers have, and the connection's resources go with its Close.
func (c *Conn) Serve(ctx context.Context, handle func(ctx context.Context, in *Incoming) (wire.Message, error), opts ...ServeOption) error {
	var cfg serveConfig
	for _, o := range opts {
		o(&cfg)
	}
	if len(cfg.interceptors) > 0 {
		handle = intercepted(handle, cfg.interceptors)
	}
	var (
		wg  sync.WaitGroup
		sem chan struct{}
	)
	if cfg.concurrent > 0 {
		sem = make(chan struct{}, cfg.concurrent)
	}
	// Calls in progress end when serving does, also when the connection
	// ends (the peer closes or dies) rather than ctx: Serve waits for them.
	// The connection's end, if it has ended, is why (context.Cause).
	ctx, stop := context.WithCancelCause(context.WithValue(ctx, connKey{}, c))
	defer wg.Wait()
	defer func() { stop(c.Err()) }()
	// The context of calls' handlers, which the peer's going ends too,
	// made for the first call: a connection that only gets messages
	// watches nothing.
	var watch *peerWatch
	callers := func() context.Context {
		if watch == nil {
			watch = c.watchPeer(ctx)
		}
		return watch.context()
	}
	handleMessage := func(in *Incoming) error {
		if _, err := handle(ctx, in); errors.Is(err, interconnect.ErrProtocol) {
			return err
		} else if err != nil {
			c.log.Warn("chanos: message handler failed", "interface", c.iface.Name, "msg", in.Header.Msg, "err", err)
		}
		return nil
	}
	var inlineCtxs ctxBlocks // the receiving goroutine's, for the calls it runs
	handleFrame := func(in *Incoming) error {
		if in.Kind != wire.KindCall {
			return handleMessage(in)
		}
		if sem == nil || (cfg.only != nil && !cfg.only[in.Header.Msg]) {
			return c.serveInline(ctx, callers(), in, handle, &inlineCtxs)
		}
		var (
			hctx   context.Context
			cancel context.CancelFunc
		)
		if d, ok := wire.Timeout(in.Header.TimeoutUS); ok {
			hctx, cancel = context.WithTimeout(callers(), d)
		} else {
			hctx, cancel = context.WithCancel(callers())
		}
		// The frame is only valid during this function: take it.
		call := *in
		call.Frame, _ = c.keepFrame(in, nil)
		hctx = context.WithValue(hctx, replyKey{}, &call) // SetReplyMetadata's
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			cancel()
			return ctx.Err()
		}
		c.mu.Lock()
		if c.inflight[call.Header.CallID] != nil {
			// Its cancel would reach the wrong call, and the first to end
			// would forget the other.
			c.mu.Unlock()
			<-sem
			cancel()
			return c.Violation(fmt.Errorf("call id %d reused while its call is in progress", call.Header.CallID))
		}
		c.inflight[call.Header.CallID] = cancel
		if c.canceledEarly(call.Header.CallID) {
			cancel()
		}
		c.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := c.serveCall(ctx, hctx, cancel, &call, handle); err != nil && !interconnect.IsEnd(err) {
				c.Violation(err)
			}
		}()
		return nil
	}
	serveEnd := func(err error) error {
		if errors.Is(err, interconnect.ErrClosed) {
			// Closed, but perhaps for a reason found elsewhere (a call
			// served concurrently that broke the protocol): say that one.
			if end := c.Err(); end != nil && !errors.Is(end, interconnect.ErrClosed) {
				return end
			}
			return nil
		}
		return err
	}
	if sem == nil && !cfg.ordered {
		h := &handOff{c: c, ctx: ctx, callers: callers, handle: handle, message: handleMessage, wg: &wg, result: make(chan error, 1), limit: MaxHandedOff}
		return serveEnd(h.serve())
	}
	for {
		err := c.receiveEach(ctx, handleFrame)
		switch {
		case err == nil:
		case errors.Is(err, interconnect.ErrClosed):
			// Closed, but perhaps for a reason found elsewhere (a call
			// served concurrently that broke the protocol): say that one.
			if end := c.Err(); end != nil && !errors.Is(end, interconnect.ErrClosed) {
				return end
			}
			return nil
		default:
			return err
		}
	}
}

// keepFrame returns in's frame so that it stays valid after the reading
// turn is given back and the next frame is read, and the buffer the
// caller may reuse from then on, for the next frame it keeps. A frame the
// link has just set in c.cur is copied into buf if it is short, and
// otherwise taken out of the link (interconnect.BufferSwapper), which
// receives into buf instead, or else copied; any other (from the inbox,
// a copy already) is the caller's as it is. The caller holds the reading
// turn if in is &c.cur.
func (c *Conn) keepFrame(in *Incoming, buf []byte) (frame, reuse []byte) {
	switch {
	case in.Frame == nil || in != &c.cur:
		return in.Frame, buf
	case c.swap != nil && len(in.Frame) > keepCopyMax:
		if got := c.swap.SwapReceiveBuffer(buf); got != nil {
			return in.Frame, got
		}
		return in.Frame, buf // a link whose frames are its receiver's: buf unused
	}
	buf = append(buf[:0], in.Frame...)
	return buf, buf
}

// keepCopyMax is the longest frame keepFrame copies rather than takes out
// of a link that could hand it over: up to about this size a copy costs
// less than the exchange of buffers (rpc over ump, 8 bytes each way:
// about 5 ns a round trip more when exchanged).
const keepCopyMax = 256

// serveInline runs handle for the call in, in the reading goroutine, and
// sends its reply. Under Serve (ctxs not nil), the handler's context is
// the call's own, from ctxs: callers (the serving context, or one that
// ends also when the peer goes: see peerWatch) with the caller's deadline
// if it has one, ended when the handler returns. The peer's cancel cannot
// be read meanwhile. Under ServeIncoming (ctxs nil) it is callers, with
// the caller's deadline if it has one.
func (c *Conn) serveInline(ctx, callers context.Context, in *Incoming, handle func(ctx context.Context, in *Incoming) (wire.Message, error), ctxs *ctxBlocks) error {
	in.Inline = true
	hctx, cc := callers, (*callContext)(nil)
	d, has := wire.Timeout(in.Header.TimeoutUS)
	switch {
	case ctxs != nil:
		cc = ctxs.next(callers, d, has, in)
	case has:
		cc = newCallContext(callers, d, in)
	}
	if cc != nil {
		hctx = cc
	}
	reply, err := handle(withIncoming(hctx, in), in)
	if cc != nil {
		cc.finish()
	}
	if reply != Replied { // else the handler has sent it
		if callers.Err() != nil && ctx.Err() == nil && !errors.Is(err, interconnect.ErrProtocol) {
			return nil // the peer has gone: nobody takes the reply
		}
		return c.answer(ctx, in, reply, err)
	} else if interconnect.IsEnd(err) {
		return err
	}
	return nil
}

// errPeerGone is the cause (context.Cause) of the end of the contexts of
// calls' handlers whose caller went away.
var errPeerGone = errors.New("chanos: the peer has gone (it closed the connection or died): nobody waits for the reply")

// peerWatch ends the context of calls' handlers (ctx) when the link
// reports that the peer has gone (interconnect.PeerWatcher), so that a
// handler waiting on its context learns at once that its caller is gone,
// whether it runs inline, holding the reading turn, or concurrently. One
// goroutine per Serve waits for that until serving ends; the calls
// themselves cost nothing more.
type peerWatch struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	gone   <-chan struct{} // nil: the link has no watch
}

// watchPeer starts the watch of Serve's connection, serving until
// serving ends. Without a PeerWatcher the context is serving itself.
func (c *Conn) watchPeer(serving context.Context) *peerWatch {
	if c.peer == nil {
		return &peerWatch{ctx: serving}
	}
	w := &peerWatch{gone: c.peer.Gone()}
	w.ctx, w.cancel = context.WithCancelCause(serving)
	go func() {
		select {
		case <-w.gone:
			w.cancel(errPeerGone)
		case <-serving.Done():
			w.cancel(context.Cause(serving))
		}
	}()
	return w
}

// context returns the context of the handler of a call about to run: a
// call read once the peer is known to have gone gets it ended already,
// whether or not the watch's goroutine has run.
func (w *peerWatch) context() context.Context {
	if w.gone != nil {
		select {
		case <-w.gone:
			w.cancel(errPeerGone)
		default:
		}
	}
	return w.ctx
}

// ServeOne waits for the next message or rpc call and handles it as Serve
// does (inline), then returns: handle's error for a message, and for a
// call only an error that ends the connection, as the call's own error
// goes back to the caller as its reply.
func (c *Conn) ServeOne(ctx context.Context, handle func(ctx context.Context, in *Incoming) (wire.Message, error)) error {
	return c.ReceiveFunc(ctx, func(in *Incoming) error { return c.ServeIncoming(ctx, in, handle) })
}

// ServeIncoming handles in, a message or rpc call that ReceiveFunc handed
// to its function, as ServeOne does. Generated code's Conn.Handle calls it
// for what it does not handle itself: its own function for ReceiveFunc
// gives a message straight to the Server's method, one call fewer than
// ServeOne's on the way from a message's arrival to the answer.
func (c *Conn) ServeIncoming(ctx context.Context, in *Incoming, handle func(ctx context.Context, in *Incoming) (wire.Message, error)) error {
	if in.Kind == wire.KindCall {
		return c.serveInline(ctx, ctx, in, handle, nil)
	}
	_, err := handle(ctx, in)
	return err
}

// receiveEach calls fn for messages and calls as ReceiveFunc does, for as
// long as it can keep the reading turn: while no other goroutine waits
// for it and nothing waits in the inbox. It returns nil when it had to
// give up, and otherwise the first error.
func (c *Conn) receiveEach(ctx context.Context, fn func(in *Incoming) error) error {
	if c.ninbox.Load() != 0 || !c.takeTurn(0) {
		return c.ReceiveFunc(ctx, fn)
	}
	in := &c.cur // only the reading goroutine touches it: no allocation
	var err error
	for err == nil && c.ninbox.Load() == 0 && c.waiting.Load() == 0 && !c.ended.Load() {
		if err = c.l.Receive(ctx, in); err != nil {
			err = c.linkEnded(ctx, err)
			break
		}
		switch in.Kind {
		case wire.KindMessage, wire.KindCall:
			err = fn(in)
		default:
			_, err = c.route(in, false, nil)
		}
	}
	c.releaseCur()
	if err == nil && c.ended.Load() {
		return c.ReceiveFunc(ctx, fn) // reports the end
	}
	return err
}

// serveCall runs handle for one call in a context of its own, hctx, which
// cancel ends, and sends its reply.
func (c *Conn) serveCall(ctx, hctx context.Context, cancel context.CancelFunc, in *Incoming, handle func(ctx context.Context, in *Incoming) (wire.Message, error)) error {
	reply, herr := handle(withIncoming(hctx, in), in)
	// A context of its own: see whether the caller gave up.
	canceled := hctx.Err() == context.Canceled && ctx.Err() == nil
	cancel()
	c.mu.Lock()
	delete(c.inflight, in.Header.CallID)
	c.mu.Unlock()
	if reply == Replied { // the handler has sent its reply (ReplyFrame)
		if interconnect.IsEnd(herr) {
			return herr
		}
		return nil
	}
	if canceled && !errors.Is(herr, interconnect.ErrProtocol) {
		return nil // the caller gave up; nobody waits for the reply
	}
	return c.answer(ctx, in, reply, herr)
}

// answer sends the reply (or error reply) to call in that handle returned,
// unless the handler's error is the peer's protocol violation, which ends
// serving.
func (c *Conn) answer(ctx context.Context, in *Incoming, reply wire.Message, herr error) error {
	if errors.Is(herr, interconnect.ErrProtocol) {
		return herr
	}
	if err := c.Reply(ctx, in, reply, herr); err != nil && interconnect.IsEnd(err) {
		return err
	}
	return nil
}

// Backlog reports how many received messages wait in the inbox for a
// receiver, whether it is full (by their count or their bytes), and how
// many goroutines wait for the connection's state to change: what tests
// watch to know that an interleaving they name has been reached.
func (c *Conn) Backlog() (inbox int, full bool, waiting int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.inbox), c.inboxFullLocked(), int(c.waiting.Load())
}
