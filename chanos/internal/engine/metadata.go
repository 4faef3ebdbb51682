package engine

import (
	"context"
	"sync/atomic"

	"github.com/chanos/chanos/interconnect"
	"github.com/chanos/chanos/wire"
)

// Metadata rides on calls by context, as in gRPC: the caller's context
// carries what its calls send (WithOutgoingMetadata), and a handler's context
// what its call brought (IncomingMetadata). The two keys differ, so that a
// handler's incoming metadata is not sent on by the calls it makes.
type (
	outgoingKey struct{}
	incomingKey struct{}
)

// metadataUsed is set once any context has been given outgoing metadata:
// until then a call does not look in its context for any, so that calls
// of a program that never uses metadata pay one load for it.
var metadataUsed atomic.Bool

// WithOutgoingMetadata returns ctx with md as the metadata of the calls made
// with it, replacing any that ctx had. md is not copied: it must not be
// modified while calls use it.
func WithOutgoingMetadata(ctx context.Context, md wire.Metadata) context.Context {
	metadataUsed.Store(true)
	return context.WithValue(ctx, outgoingKey{}, md)
}

// OutgoingMetadata returns the metadata that calls made with ctx send.
func OutgoingMetadata(ctx context.Context) (wire.Metadata, bool) {
	md, ok := ctx.Value(outgoingKey{}).(wire.Metadata)
	return md, ok
}

// IncomingMetadata returns the metadata of the call whose handler was given ctx.
func IncomingMetadata(ctx context.Context) (wire.Metadata, bool) {
	md, ok := ctx.Value(incomingKey{}).(wire.Metadata)
	return md, ok
}

// outgoing returns the metadata a call made with ctx sends, nil if none.
func outgoing(ctx context.Context) wire.Metadata {
	if !metadataUsed.Load() {
		return nil
	}
	md, _ := ctx.Value(outgoingKey{}).(wire.Metadata)
	return md
}

// withIncoming returns the context of the handler of call in: ctx, with
// the call's metadata if it carried any.
func withIncoming(ctx context.Context, in *interconnect.Incoming) context.Context {
	if in.Meta == nil {
		return ctx
	}
	return context.WithValue(ctx, incomingKey{}, in.Meta)
}

// withMetadata returns encode followed by md's trailer (encode itself if
// md is empty).
func withMetadata(encode func(*wire.Buffer) error, md wire.Metadata) func(*wire.Buffer) error {
	if len(md) == 0 {
		return encode
	}
	return func(b *wire.Buffer) error {
		if err := encode(b); err != nil {
			return err
		}
		var err error
		b.B, err = wire.AppendMetadata(b.B, md)
		return err
	}
}
