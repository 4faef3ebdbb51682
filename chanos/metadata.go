package chanos

import (
	"context"
	"strings"

	"github.com/chanos/chanos/chanos/internal/engine"
	"github.com/chanos/chanos/wire"
)

// Metadata is what an rpc call may carry beside its arguments, as gRPC's
// metadata: a trace id, a tenant, a token. Keys are 1 to 64 bytes of
// lower-case letters, digits, '-', '_' and '.'; values up to 1024 bytes
// without NUL; at most 32 keys and 8 KiB in all (docs/wire.md,
// "Metadata"). A call that breaks a bound fails before it is sent, with an
// error that matches wire.ErrMalformed.
type Metadata = wire.Metadata

// WithMetadata returns a context whose rpc calls carry md, replacing the
// metadata ctx had for them. The handler of such a call reads it with
// MetadataFrom. Keys with upper-case ASCII letters are lowered, as gRPC
// does ("Trace-ID" travels as "trace-id"), into a copy of md; otherwise md
// is not copied: leave it unmodified while calls use it.
//
// Calls of a program that never calls WithMetadata pay nothing for it.
func WithMetadata(ctx context.Context, md Metadata) context.Context {
	for k := range md {
		if k != strings.ToLower(k) {
			lowered := make(Metadata, len(md))
			for k, v := range md {
				lowered[strings.ToLower(k)] = v
			}
			md = lowered
			break
		}
	}
	return engine.WithOutgoingMetadata(ctx, md)
}

// MetadataFrom returns the metadata of the rpc call whose handler (or
// interceptor) was given ctx, and whether the call carried any. A
// handler's incoming metadata is not sent on by the calls it makes with
// ctx: those carry what WithMetadata gives them.
func MetadataFrom(ctx context.Context) (Metadata, bool) {
	return engine.IncomingMetadata(ctx)
}

// OutgoingMetadata returns the metadata that rpc calls made with ctx carry.
func OutgoingMetadata(ctx context.Context) (Metadata, bool) {
	return engine.OutgoingMetadata(ctx)
}
