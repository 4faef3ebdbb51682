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
