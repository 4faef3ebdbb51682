package chanos

import (
	"context"
	"maps"
	"strings"

	"github.com/chanos/chanos/chanos/internal/engine"
	"github.com/chanos/chanos/wire"
)

// Metadata is what an rpc call may carry beside its arguments, as gRPC's
// metadata: a trace id, a tenant, a token; and what its reply may carry
// back, as gRPC's trailers (SetReplyMetadata, CaptureReplyMetadata). Keys are 1 to 64 bytes of
// lower-case letters, digits, '-', '_' and '.'; values up to 1024 bytes
// without NUL; at most 32 keys and 8 KiB in all (docs/wire.md,
// "Metadata"). A call that breaks a bound fails before it is sent, with an
// error that matches wire.ErrMalformed.
type Metadata = wire.Metadata

// WithMetadata returns a context whose rpc calls carry md, replacing the
// metadata ctx had for them (AppendMetadata adds to it). The handler of
// such a call reads it with MetadataFrom. Keys with upper-case ASCII
// letters are lowered, as gRPC does ("Trace-ID" travels as "trace-id"),
// into a copy of md; otherwise md is not copied: leave it unmodified
// while calls use it.
//
// Calls of a program that never calls WithMetadata pay nothing for it.
func WithMetadata(ctx context.Context, md Metadata) context.Context {
	return engine.WithOutgoingMetadata(ctx, lowered(md))
}

// AppendMetadata returns a context whose rpc calls carry the metadata ctx
// had for them with md's entries added, an entry of md taking the place of
// one of the same key: gRPC's AppendToOutgoingContext. A call interceptor
// (WithCallInterceptor) adds a trace id or a tenant this way without
// dropping what its caller gave the call with WithMetadata, which
// replaces it all. Keys are lowered as by WithMetadata. The result is a
// copy: neither md nor the metadata ctx had is modified, or kept.
func AppendMetadata(ctx context.Context, md Metadata) context.Context {
	if len(md) == 0 {
		return ctx
	}
	had, _ := engine.OutgoingMetadata(ctx)
	merged := make(Metadata, len(had)+len(md))
	maps.Copy(merged, had)
	for k, v := range md {
		merged[strings.ToLower(k)] = v
	}
	return engine.WithOutgoingMetadata(ctx, merged)
}

// lowered returns md with its keys' upper-case ASCII letters lowered: md
// itself if it has none, else a copy.
func lowered(md Metadata) Metadata {
	for k := range md {
		if k != strings.ToLower(k) {
			low := make(Metadata, len(md))
			for k, v := range md {
				low[strings.ToLower(k)] = v
			}
			return low
		}
	}
	return md
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

// SetReplyMetadata makes the reply to the rpc call whose handler (or
// interceptor) was given ctx carry md back to the caller, as gRPC's
// trailers: the reply or, if the handler fails, its error reply (a
// server's load, a retry-after, the time it spent). A later call replaces
// what an earlier one set. Keys are lowered as by WithMetadata. It must
// be called before the handler returns, and fails, leaving the reply
// without metadata, if md breaks a bound of Metadata (the error matches
// wire.ErrMalformed) or ctx is no rpc handler's: a one-way message's
// handler, or a call served by ServeIncoming without a deadline. md is
// not copied unless lowered: leave it unmodified until the reply is sent.
func SetReplyMetadata(ctx context.Context, md Metadata) error {
	return engine.SetReplyMetadata(ctx, lowered(md))
}

// CaptureReplyMetadata returns a context whose rpc calls give their
// reply's metadata (SetReplyMetadata's) to dst: each call that gets an
// answer, a reply or an error reply, sets *dst to its metadata, nil if it
// carried none, before it returns. Calls made at the same time with the
// context share dst; give each its own.
//
// Calls of a program that never calls CaptureReplyMetadata pay nothing
// for it but one load when their reply has no metadata.
func CaptureReplyMetadata(ctx context.Context, dst *Metadata) context.Context {
	return engine.CaptureReplyMetadata(ctx, dst)
}
