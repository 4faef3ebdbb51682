package engine

import (
	"context"

	"github.com/chanos/chanos/wire"
)

// Handler handles a message or rpc call that Serve received, as Serve's
// handle does: for a call, its result is the reply.
type Handler func(ctx context.Context, in *Incoming) (wire.Message, error)

// Interceptor wraps the handling of each rpc call Serve runs: it may look
// at the call (in: its header, its frame) and its context (PeerFrom),
// give next another context, answer with an error of its own without
// calling next, or look at next's reply and error. A handler under an
// interceptor returns its reply as a value (in.Inline is cleared), so that
// the interceptor sees it.
type Interceptor func(ctx context.Context, in *Incoming, next Handler) (wire.Message, error)

// WithInterceptor has Serve run each rpc call through is, the first
// outermost. One-way messages go to the handler directly. A Serve without
// interceptors pays nothing for them.
func WithInterceptor(is ...Interceptor) ServeOption {
	return func(c *serveConfig) { c.interceptors = append(c.interceptors, is...) }
}

// intercepted returns h with the calls it handles run through is.
func intercepted(h Handler, is []Interceptor) Handler {
	for i := len(is) - 1; i >= 0; i-- {
		ic, next := is[i], h
		h = func(ctx context.Context, in *Incoming) (wire.Message, error) {
			if in.Kind != wire.KindCall {
				return next(ctx, in)
			}
			in.Inline = false
			return ic(ctx, in, next)
		}
	}
	return h
}

// CallInterceptor is run before each rpc call a connection makes, with the
// call's context and the rpc's name ("kv.get"). It returns the context to
// make the call with (ctx, or ctx with metadata or a deadline added) and
// after, which, if not nil, is called with the call's error (nil when it
// succeeded) once the call has returned: what after returns is what the
// caller gets. A non-nil err refuses the call, which is not sent: the
// afters of the interceptors outside this one see err as a failed call's
// result, and the caller gets what they make of it.
//
// An interceptor sees the rpc's name and context, not its arguments or
// reply: the generated stubs keep those on their stack, and a hook that
// could hold on to them would cost every call an allocation. It cannot
// make the call twice; a retry is the caller's loop.
type CallInterceptor func(ctx context.Context, rpc string) (_ context.Context, after func(error) error, err error)

// InterceptCalls runs the rpc calls c makes through is, the first
// outermost: its context goes to the second, and its after sees what the
// second's after returned. It must be called before c makes a call.
func (c *Conn) InterceptCalls(is ...CallInterceptor) {
	c.calls = append(c.calls[:len(c.calls):len(c.calls)], is...)
}

// afterCall holds the after functions of a call's interceptors, innermost
// last.
type afterCall []func(error) error

// intercept runs c's interceptors for a call of rpc name: the context to
// make it with, what to run after it, or the error that refuses it (the
// afters of the interceptors that ran before the refusing one see it).
func (c *Conn) intercept(ctx context.Context, name string) (context.Context, afterCall, error) {
	var after afterCall
	for _, ic := range c.calls {
		next, fn, err := ic(ctx, name)
		if err != nil {
			return nil, nil, after.finish(err)
		}
		if next != nil {
			ctx = next
		}
		if fn != nil {
			after = append(after, fn)
		}
	}
	return ctx, after, nil
}

// finish runs the afters on err, innermost first, and returns what the
// outermost returned.
func (a afterCall) finish(err error) error {
	for i := len(a) - 1; i >= 0; i-- {
		err = a[i](err)
	}
	return err
}
