package chanos

import (
	"context"
	"log/slog"
	"runtime/debug"

	"github.com/chanos/chanos/wire"
)

// Recover returns an interceptor that turns a panic in an rpc handler
// into that call's failure: the caller gets an error of CodeInternal
// ("the handler panicked"), log gets the panic and its stack at level
// Error, and the connection, and every other connection of the process,
// goes on. Put it first in WithInterceptor, so that it also covers the
// interceptors after it.
//
// Serve does not recover panics by itself, as gRPC-Go does not: a panic
// is a bug, and a process that goes on after one runs with whatever state
// the handler left half changed. Recover is for a server that prefers
// that to losing every connection for one bug. A panic in the handler of
// a one-way message, which interceptors do not see, still ends the
// process.
func Recover(log *slog.Logger) Interceptor {
	if log == nil {
		log = slog.Default()
	}
	return func(ctx context.Context, in *Incoming, next Handler) (reply wire.Message, err error) {
		defer func() {
			if p := recover(); p != nil {
				attrs := []any{"msg", in.Header.Msg, "call", in.Header.CallID, "panic", p, "stack", string(debug.Stack())}
				if peer, ok := PeerFrom(ctx); ok {
					attrs = append(attrs, "peer", peer)
				}
				log.ErrorContext(ctx, "chanos: an rpc handler panicked; the call fails with CodeInternal", attrs...)
				reply, err = nil, Error(CodeInternal, "the handler panicked")
			}
		}()
		return next(ctx, in)
	}
}
