package testkit

import (
	"context"
	"sync"
	"testing"
	"time"
)

// A WaitContext is a context that tells the test when a wait begins. The
// interconnects' waits register to be woken by the end of their context
// (context.AfterFunc) right before they park; a WaitContext counts the
// registrations. A test that cancels it once Waiting has returned ends a
// call that waits, not one that has not begun to.
type WaitContext struct {
	done chan struct{}
	regs chan struct{} // a token per registration

	mu  sync.Mutex
	err error
	fns map[*func()]bool
}

// NewWaitContext returns a WaitContext; Cancel ends it.
func NewWaitContext() *WaitContext {
	return &WaitContext{done: make(chan struct{}), regs: make(chan struct{}, 1024), fns: map[*func()]bool{}}
}

func (c *WaitContext) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c *WaitContext) Done() <-chan struct{}       { return c.done }
func (c *WaitContext) Value(any) any               { return nil }

func (c *WaitContext) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// AfterFunc is what context.AfterFunc calls for a context that has it:
// the registration a wait makes before it parks.
func (c *WaitContext) AfterFunc(f func()) (stop func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		go f()
		return func() bool { return false }
	}
	key := &f
	c.fns[key] = true
	c.regs <- struct{}{}
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		ok := c.fns[key]
		delete(c.fns, key)
		return ok
	}
}

// Waiting returns once a wait has registered with the context since the
// last call, and fails the test if none does within Limit.
func (c *WaitContext) Waiting(t testing.TB) {
	t.Helper()
	timer := time.NewTimer(Limit)
	defer timer.Stop()
	select {
	case <-c.regs:
	case <-timer.C:
		t.Fatalf("no wait began within %v", Limit)
	}
}

// Cancel ends the context, with context.Canceled, and wakes the waits
// registered with it.
func (c *WaitContext) Cancel() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return
	}
	c.err = context.Canceled
	close(c.done)
	for key := range c.fns {
		go (*key)()
	}
	c.fns = nil
}

var _ context.Context = (*WaitContext)(nil)
