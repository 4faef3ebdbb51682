package engine

import (
	"context"
	"sync"
	"time"
)

// callContext is the context of a call that Serve runs inline and whose
// caller has a deadline: the serving context, with that deadline, ended
// when the call returns. context.WithTimeout makes a timer, a cancel
// context and an entry among its parent's children for every such call,
// costing more than a round trip; a callContext is one allocation,
// and makes the channel of Done, with the timer that closes it, only if
// the handler asks for Done.
type callContext struct {
	context.Context // serving: its values and its end

	deadline time.Time

	mu    sync.Mutex
	err   error         // why it ended, nil while it has not
	done  chan struct{} // made by Done
	timer *time.Timer   // closes done at the deadline
	stop  func() bool   // unregisters the watch of the serving context
}

func newCallContext(serving context.Context, d time.Duration) *callContext {
	return &callContext{Context: serving, deadline: time.Now().Add(d)}
}

// Deadline returns the caller's deadline.
func (c *callContext) Deadline() (time.Time, bool) { return c.deadline, true }

// Done returns a channel closed when the deadline passes, the serving
// context ends or the call returns.
func (c *callContext) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		c.done = make(chan struct{})
		if c.err != nil {
			close(c.done)
		} else {
			c.timer = time.AfterFunc(time.Until(c.deadline), func() { c.end(context.DeadlineExceeded) })
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
	if !time.Now().Before(c.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

// end ends the context with err unless it has ended already; an end that
// comes after the deadline or the serving context's is theirs.
func (c *callContext) end(err error) {
	if perr := c.Context.Err(); perr != nil {
		err = perr
	} else if err == context.Canceled && !time.Now().Before(c.deadline) {
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
		c.timer.Stop()
		c.stop()
	}
}

// String names the context, as those of package context are named.
func (c *callContext) String() string {
	return "chanos.callContext(deadline " + c.deadline.String() + ")"
}
