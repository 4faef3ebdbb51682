package engine

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chanos/chanos/interconnect"
	"github.com/chanos/chanos/wire"
)

// HandOffAfter is how long Serve lets a call run in the goroutine that
// reads the connection, at least, before another goroutine takes over the
// reading: a watchdog looks at the running call every HandOffAfter and
// hands the reading off when it finds the same call running twice, so
// after between one and two periods. A call that answers within it costs
// no goroutine hop; one that takes longer holds up the connection for
// twice this long at most.
const HandOffAfter = 100 * time.Microsecond

// MaxHandedOff is how many calls of one connection Serve lets run at a
// time once handed off, by default: with that many running, a slow call
// keeps the reading until it returns, so the peer is slowed rather than
// goroutines growing.
const MaxHandedOff = 128

// Reader states (reader.state).
const (
	idle       int32 = iota // between calls
	running                 // a call runs inline
	handingOff              // the timer is registering the call's cancel
	handedOff               // the call runs on; another goroutine reads
)

// handOff is Serve's default way (neither Ordered nor Concurrent): the
// reading goroutine, a reader, runs each call inline, and a watchdog starts
// a new reader if the call has not returned within HandOffAfter (to twice
// that). The watchdog is a timer that ticks while calls run and stops when
// it finds the reader idle: a call only counts itself (seq) and, if the
// watchdog is stopped, starts it, so that a call that returns at once pays
// no timer of its own. The old reader finishes its call, sends its reply
// and ends; the new one reads on, so other calls, and the caller's cancel
// of the slow one, are read meanwhile. The frame of a call or a message is
// taken out of the link (interconnect.BufferSwapper: the link receives
// into the buffer of the frame the reader had before) or copied, and its
// handler runs once the reading turn is given back: the next reader's
// reads cannot overwrite what the handler still reads (@borrow views
// included), and a handler may call the peer back on the connection, as
// the reply is read meanwhile (by the call itself, or a reader). Messages
// are still handled one at a time, in order: what other goroutines read
// meanwhile waits in the inbox.
type handOff struct {
	c       *Conn
	ctx     context.Context // serving
	callers func() context.Context
	handle  func(ctx context.Context, in *Incoming) (wire.Message, error)
	message func(in *Incoming) error
	wg      *sync.WaitGroup // the readers started here
	result  chan error      // the last reader's end
	running atomic.Int32    // calls handed off and not yet returned
	limit   int32
}

// reader is one goroutine's turn at serving a connection.
type reader struct {
	h     *handOff
	state atomic.Int32
	seq   atomic.Uint64            // calls started
	timer *time.Timer              // the watchdog
	armed atomic.Bool              // the watchdog is ticking
	seen  atomic.Uint64            // seq at the watchdog's last look
	take  func(in *Incoming) error // r.takeFrame, made once
	got   bool                     // take copied a call into in
	in    Incoming                 // the call being served
	buf   []byte                   // its frame
	caps  []wire.Cap
	cc    *callContext // its context
	ctxs  ctxBlocks    // where its calls' contexts come from
	// set by the hand-off before it stores handedOff
	inflight bool // the call's cancel is registered (Conn.inflight)
}

func (h *handOff) newReader() *reader {
	r := &reader{h: h}
	r.take = r.takeFrame
	r.timer = time.AfterFunc(time.Hour, r.watch)
	r.timer.Stop()
	return r
}

// serve runs the first reader in the calling goroutine and returns the
// end of the last.
func (h *handOff) serve() error {
	if err, off := h.loop(h.newReader()); !off {
		return err
	}
	return <-h.result
}

// loop reads and serves until the connection or serving ends (it returns
// why) or its call is handed off (off).
func (h *handOff) loop(r *reader) (err error, off bool) {
	defer r.timer.Stop()
	for {
		r.got = false
		if err := h.c.ReceiveFunc(h.ctx, r.take); err != nil {
			return err, false
		}
		if !r.got {
			continue
		}
		if r.in.Kind != wire.KindCall {
			// A message, in order, but not holding the turn: its handler
			// may call the peer back on this connection, and the reply
			// must be read meanwhile.
			err := h.message(&r.in)
			r.clear()
			if err != nil {
				return err, false
			}
			continue
		}
		if off, err := h.call(r); off || err != nil {
			return err, off
		}
	}
}

// takeFrame takes the frame, a one-way message or a call, into r, to be
// handled once the reading turn is given back: out of the link where it
// can (Conn.keepFrame), in exchange for the buffer of the frame r handled
// before, else copied.
func (r *reader) takeFrame(in *Incoming) error {
	r.in = *in
	if len(in.Frame) <= keepCopyMax {
		// Short (most calls): the copy, with no call on the way.
		if in.Frame != nil {
			r.buf = append(r.buf[:0], in.Frame...)
			r.in.Frame = r.buf
		}
	} else {
		r.in.Frame, r.buf = r.h.c.keepFrame(in, r.buf)
	}
	if in.Caps != nil {
		r.caps = append(r.caps[:0], in.Caps...)
		r.in.Caps = r.caps
	}
	r.got = true
	return nil
}

// call runs r's call inline and answers it, unless it is handed off
// meanwhile: then it answers it all the same, and reports off.
func (h *handOff) call(r *reader) (bool, error) {
	in := &r.in
	in.Inline = true
	callers := h.callers()
	d, has := wire.Timeout(in.Header.TimeoutUS)
	cc := r.newContext(callers, d, has, in)
	r.seq.Add(1)
	r.state.Store(running)
	if !r.armed.Load() && r.armed.CompareAndSwap(false, true) {
		r.timer.Reset(HandOffAfter)
	}
	reply, err := h.handle(withIncoming(cc, in), in)
	if r.state.CompareAndSwap(running, idle) {
		cc.finish()
		defer r.clear()
		if reply != Replied {
			if callers.Err() != nil && h.ctx.Err() == nil && !errors.Is(err, interconnect.ErrProtocol) {
				return false, nil // the peer has gone: nobody takes the reply
			}
			return false, h.c.answer(h.ctx, in, reply, err)
		} else if interconnect.IsEnd(err) {
			return false, err
		}
		return false, nil
	}
	// Handed off: another reader reads on, once the hand-off has
	// registered the call's cancel (a moment).
	for r.state.Load() != handedOff {
		runtime.Gosched()
	}
	defer h.running.Add(-1)
	cc.call = nil // returned: SetReplyMetadata no longer reaches it
	gaveUp := cc.Err() == context.Canceled && h.ctx.Err() == nil
	cc.end(context.Canceled)
	if r.inflight {
		h.c.mu.Lock()
		delete(h.c.inflight, in.Header.CallID)
		h.c.mu.Unlock()
	}
	if reply == Replied {
		err = nil // its sending failed only if the connection ended
	} else if !gaveUp || errors.Is(err, interconnect.ErrProtocol) {
		err = h.c.answer(h.ctx, in, reply, err)
	} else {
		err = nil // the caller gave up; nobody waits for the reply
	}
	if err != nil && !interconnect.IsEnd(err) {
		h.c.Violation(err)
	}
	r.clear()
	return true, nil
}

// newContext returns the context of a new call under serving, with the
// caller's time d if has, and makes it r's.
func (r *reader) newContext(serving context.Context, d time.Duration, has bool, call *Incoming) *callContext {
	r.cc = r.ctxs.next(serving, d, has, call)
	return r.cc
}

// clear drops what r kept of its call.
func (r *reader) clear() {
	clear(r.caps)
	r.in = Incoming{}
}

// watch, run by r's watchdog timer, hands r's call off if it is the
// call that ran at the last look, ticks on while calls run, and stops
// when r is idle.
func (r *reader) watch() {
	seq, state := r.seq.Load(), r.state.Load()
	if state == running && seq == r.seen.Load() && r.handOff() {
		return // r reads no more: the new reader has a watchdog of its own
	}
	r.seen.Store(seq)
	if state != running {
		r.armed.Store(false)
		// A call that began meanwhile saw the watchdog ticking: watch it.
		if r.state.Load() != running || !r.armed.CompareAndSwap(false, true) {
			return
		}
	}
	r.timer.Reset(HandOffAfter)
}

// handOff starts a new reader if r's call is still running, unless
// MaxHandedOff calls are already running, and reports whether it did.
func (r *reader) handOff() bool {
	h := r.h
	if h.running.Add(1) > h.limit {
		h.running.Add(-1)
		return false
	}
	if !r.state.CompareAndSwap(running, handingOff) {
		h.running.Add(-1)
		return false
	}
	// r.in and r.cc stay as they are until r's call returns. The cancel
	// is registered before the next reader can read it.
	c := h.c
	id := r.in.Header.CallID
	c.mu.Lock()
	if c.inflight[id] == nil {
		c.inflight[id] = r.cc.cancel
		r.inflight = true
	}
	early := c.canceledEarly(id)
	c.mu.Unlock()
	if early {
		r.cc.cancel()
	}
	r.state.Store(handedOff)
	next := h.newReader()
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		if err, off := h.loop(next); !off {
			h.result <- err
		}
	}()
	return true
}

// String names the hand-off, for debugging.
func (h *handOff) String() string {
	return fmt.Sprintf("handOff(%s, %d running)", h.c.iface.Name, h.running.Load())
}
