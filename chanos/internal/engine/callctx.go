package engine

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// callContext is the context of a call that Serve starts inline: the
// serving context, with the caller's deadline if it has one, ended when
// the call returns or, once the call has been handed off (see handOff),
// when the caller cancels it. context.WithTimeout makes a timer, a cancel
// context and an entry among its parent's children for every such call,
// costing more than a round trip. A callContext is small, and a call that
// nobody asks for Done and that only its own return ends touches nothing
// but its state (st), with one atomic swap: what Done and an early end
// need (a lock, the channel, the timer that closes it at the deadline)
// is made only when one of them comes (ctxSlow). A serving goroutine
// allocates its calls' contexts in blocks (ctxBlocks).
type callContext struct {
	context.Context // serving: its values and its end

	// The caller's deadline, in nanoseconds after ctxEpoch, if
	// hasDeadline: a time.Time would make every call's context 16 bytes
	// larger, and each call allocates one.
	deadline    int64
	st          atomic.Int32 // ctxLive, ctxReturned or ctxEnded
	hasDeadline bool
	slow        atomic.Pointer[ctxSlow] // made by the first Done or end
	// the call, for SetReplyMetadata, until it returns: the Incoming is
	// the serving goroutine's, and holds the next call after this one
	call *Incoming
}

// ctxEpoch is the time call contexts count their deadlines from. It holds
// a monotonic clock reading, so the deadlines do too (see package time).
var ctxEpoch = time.Now()

// deadlineIn returns the deadline d from now, as callContext.deadline.
func deadlineIn(d time.Duration) int64 { return int64(time.Since(ctxEpoch) + d) }

// deadlineTime returns c's deadline as a time.
func (c *callContext) deadlineTime() time.Time { return ctxEpoch.Add(time.Duration(c.deadline)) }

// untilDeadline returns how long until c's deadline.
func (c *callContext) untilDeadline() time.Duration {
	return time.Duration(c.deadline) - time.Since(ctxEpoch)
}

// The states of a callContext (callContext.st); the zero value is live.
const (
	ctxLive     int32 = iota // the call runs, and nothing has ended it
	ctxReturned              // the call returned before anything ended it: context.Canceled
	ctxEnded                 // ended, or asked for Done while live: ctxSlow says the rest
)

// ctxSlow is what a callContext holds once Done is asked for or something
// other than its call's return ends it.
type ctxSlow struct {
	mu    sync.Mutex
	err   error         // why it ended, nil while it has not
	done  chan struct{} // made by Done
	timer *time.Timer   // closes done at the deadline; nil without one
	stop  func() bool   // unregisters the watch of the serving context
}

func newCallContext(serving context.Context, d time.Duration, call *Incoming) *callContext {
	return &callContext{Context: serving, deadline: deadlineIn(d), hasDeadline: true, call: call}
}

// ctxBlocks hands out the contexts of the calls one goroutine serves.
// Each call's context is its own, never reused, for a handler's goroutine
// may keep it, and ask it for its values, its deadline and its end, long
// after the call: it must go on answering for that call. An allocation
// per call would cost a third of the serving side's work, so contexts
// come in blocks, one allocation each: the first of 4, each next twice
// the last, up to ctxBlock, so that a connection that makes few calls
// holds little. The price is that a context kept after its call keeps
// its whole block in memory.
type ctxBlocks struct {
	free []callContext // the rest of the last block
	size int           // the last block's
}

// ctxBlock is the most call contexts a block holds: 8 KiB of them.
const ctxBlock = 8 << 10 / int(unsafe.Sizeof(callContext{}))

// next returns the context of call, a new call under serving, with the
// caller's time d if has.
func (b *ctxBlocks) next(serving context.Context, d time.Duration, has bool, call *Incoming) *callContext {
	if len(b.free) == 0 {
		b.size = min(max(2*b.size, 4), ctxBlock)
		b.free = make([]callContext, b.size)
	}
	cc := &b.free[0]
	b.free = b.free[1:]
	cc.Context, cc.hasDeadline, cc.call = serving, has, call
	if has {
		cc.deadline = deadlineIn(d)
	}
	return cc
}

// toEnded moves a live c to ctxEnded, under its slow part's lock, and
// reports whether c is ended now: false if its call returned first.
func (c *callContext) toEnded() bool {
	return c.st.CompareAndSwap(ctxLive, ctxEnded) || c.st.Load() == ctxEnded
}

// slowPart returns c's ctxSlow, made on first use.
func (c *callContext) slowPart() *ctxSlow {
	if s := c.slow.Load(); s != nil {
		return s
	}
	c.slow.CompareAndSwap(nil, &ctxSlow{})
	return c.slow.Load()
}

// Value returns the call for replyKey, while it runs, and otherwise the
// serving context's values.
func (c *callContext) Value(key any) any {
	if _, ok := key.(replyKey); ok {
		if c.call == nil {
			return nil
		}
		return c.call
	}
	return c.Context.Value(key)
}

// Deadline returns the earlier of the caller's deadline and the serving
// context's, as a context made by context.WithDeadline would.
func (c *callContext) Deadline() (time.Time, bool) {
	d, ok := c.Context.Deadline()
	if !c.hasDeadline {
		return d, ok
	}
	if mine := c.deadlineTime(); !ok || mine.Before(d) {
		return mine, true
	}
	return d, true
}

// Done returns a channel closed when the deadline passes, the serving
// context ends, the caller cancels or the call returns.
func (c *callContext) Done() <-chan struct{} {
	if c.st.Load() == ctxReturned {
		return closedDone
	}
	s := c.slowPart()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done != nil {
		return s.done
	}
	if !c.toEnded() {
		return closedDone // the call returned meanwhile
	}
	s.done = make(chan struct{})
	if s.err != nil {
		close(s.done)
		return s.done
	}
	if c.hasDeadline {
		s.timer = time.AfterFunc(c.untilDeadline(), func() { c.end(context.DeadlineExceeded) })
	}
	s.stop = context.AfterFunc(c.Context, func() { c.end(c.Context.Err()) })
	return s.done
}

// closedDone is the Done of a call that returned before anybody asked.
var closedDone = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

// Err returns why the context ended, as a context made by
// context.WithTimeout would.
func (c *callContext) Err() error {
	switch c.st.Load() {
	case ctxReturned:
		return context.Canceled
	case ctxEnded:
		if err := c.slowPart().errNow(); err != nil {
			return err
		}
	}
	var err error
	if err = c.Context.Err(); err == nil && c.hasDeadline && c.untilDeadline() <= 0 {
		err = context.DeadlineExceeded
	}
	if err != nil {
		// Once Err has said why, it says so for good (the Context
		// contract): a later return of the call must not turn it into
		// Canceled. The first to see it ends the context with it; the
		// context has then ended, or its call returned first.
		c.end(err)
		return c.Err()
	}
	return nil
}

// errNow returns why the context ended, under the lock.
func (s *ctxSlow) errNow() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// finish ends the context as its call returns: as end does, but without
// asking the serving context, which the call's end does not concern.
func (c *callContext) finish() {
	c.call = nil
	if c.st.CompareAndSwap(ctxLive, ctxReturned) {
		return // nobody waits: no timer, no watch to stop
	}
	c.end(context.Canceled)
}

// cancelSlack is how close to a call's deadline a cancel from its
// caller is taken for the deadline: a caller whose deadline passes
// cancels the call, and its cancel may arrive a moment before the
// deadline here, which counts from the call's arrival.
const cancelSlack = 5 * time.Millisecond

// cancel ends the context as the caller's cancel does: with Canceled, or
// DeadlineExceeded if the deadline is due within cancelSlack.
func (c *callContext) cancel() {
	if c.hasDeadline && c.untilDeadline() < cancelSlack {
		c.end(context.DeadlineExceeded)
		return
	}
	c.end(context.Canceled)
}

// end ends the context with err unless it has ended already; an end that
// comes after the deadline or the serving context's is theirs.
func (c *callContext) end(err error) {
	if c.st.Load() == ctxReturned {
		return
	}
	if perr := c.Context.Err(); perr != nil {
		err = perr
	} else if err == context.Canceled && c.hasDeadline && c.untilDeadline() <= 0 {
		err = context.DeadlineExceeded
	}
	s := c.slowPart()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return
	}
	if !c.toEnded() {
		return // the call returned meanwhile
	}
	s.err = err
	if s.done != nil {
		close(s.done)
		if s.timer != nil {
			s.timer.Stop()
		}
		s.stop()
	}
}

// String names the context, as those of package context are named.
func (c *callContext) String() string {
	if !c.hasDeadline {
		return "chanos.callContext"
	}
	return "chanos.callContext(deadline " + c.deadlineTime().String() + ")"
}
