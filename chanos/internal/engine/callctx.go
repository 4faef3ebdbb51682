package engine

import (
	"context"
	"sync"
	"time"
)

// callContext is the context of a call that Serve starts inline: the
// serving context, with the caller's deadline if it has one, ended when
// the call returns or, once the call has been handed off (see handOff),
// when the caller cancels it. context.WithTimeout makes a timer, a cancel
// context and an entry among its parent's children for every such call,
// costing more than a round trip; a callContext makes the channel of
// Done, with the timer that closes it, only if the handler asks for
// Done, and a reading goroutine reuses its callContext for the next call
// when the last handler never asked (see reset).
type callContext struct {
	context.Context // serving: its values and its end

	deadline    time.Time
	hasDeadline bool

	mu    sync.Mutex
	err   error         // why it ended, nil while it has not
	done  chan struct{} // made by Done
	timer *time.Timer   // closes done at the deadline; nil without one
	stop  func() bool   // unregisters the watch of the serving context
}

func newCallContext(serving context.Context, d time.Duration) *callContext {
	return &callContext{Context: serving, deadline: time.Now().Add(d), hasDeadline: true}
}

// reset makes c the context of a new call, under serving, with the
// caller's time d if has, and reports whether it could: a context whose
// Done was asked for may be waited on still, so it is never reused.
func (c *callContext) reset(serving context.Context, d time.Duration, has bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done != nil {
		return false
	}
	c.Context, c.err, c.hasDeadline = serving, nil, has
	if has {
		c.deadline = time.Now().Add(d)
	}
	return true
}

// Deadline returns the caller's deadline, if it has one.
func (c *callContext) Deadline() (time.Time, bool) {
	if !c.hasDeadline {
		return c.Context.Deadline()
	}
	return c.deadline, true
}

// Done returns a channel closed when the deadline passes, the serving
// context ends, the caller cancels or the call returns.
func (c *callContext) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		c.done = make(chan struct{})
		if c.err != nil {
			close(c.done)
		} else {
			if c.hasDeadline {
				c.timer = time.AfterFunc(time.Until(c.deadline), func() { c.end(context.DeadlineExceeded) })
			}
			c.stop = context.AfterFunc(c.Context, func() { c.end(c.Context.Err()) })
		}
	}
	return c.done
}

// Err returns why the context ended, as a context made by
// context.WithTimeout would.
func (c *callContext) Err() error {
	c.mu.Lock()
	err := c.err
	c.mu.Unlock()
	if err != nil {
		return err
	}
	if err := c.Context.Err(); err != nil {
		return err
	}
	if c.hasDeadline && !time.Now().Before(c.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

// finish ends the context as its call returns: as end does, but without
// asking the serving context, which the call's end does not concern.
func (c *callContext) finish() {
	c.mu.Lock()
	if c.done == nil { // nobody waits: no timer, no watch to stop
		if c.err == nil {
			c.err = context.Canceled
		}
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
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
	if c.hasDeadline && time.Until(c.deadline) < cancelSlack {
		c.end(context.DeadlineExceeded)
		return
	}
	c.end(context.Canceled)
}

// end ends the context with err unless it has ended already; an end that
// comes after the deadline or the serving context's is theirs.
func (c *callContext) end(err error) {
	if perr := c.Context.Err(); perr != nil {
		err = perr
	} else if err == context.Canceled && c.hasDeadline && !time.Now().Before(c.deadline) {
		err = context.DeadlineExceeded
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return
	}
	c.err = err
	if c.done != nil {
		close(c.done)
		if c.timer != nil {
			c.timer.Stop()
		}
		c.stop()
	}
}

// String names the context, as those of package context are named.
func (c *callContext) String() string {
	if !c.hasDeadline {
		return "chanos.callContext"
	}
	return "chanos.callContext(deadline " + c.deadline.String() + ")"
}
