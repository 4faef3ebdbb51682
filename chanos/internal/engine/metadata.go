package engine

import (
	"context"
	"errors"
	"fmt"
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
	// a handler's context holds its call under replyKey, for
	// SetReplyMetadata: a *Incoming
	replyKey struct{}
	// a caller's context holds where its replies' metadata go under
	// captureKey: a *wire.Metadata
	captureKey struct{}
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

// captureUsed is set once a context has been given a place for reply
// metadata (CaptureReplyMetadata): until then a reply without metadata
// costs its call one load.
var captureUsed atomic.Bool

// SetReplyMetadata makes the reply of the rpc call whose handler was
// given ctx carry md, replacing what an earlier SetReplyMetadata gave it:
// the reply or, if the handler fails, the error reply. It must be called
// before the handler returns. It fails, and the reply carries none, if md
// breaks a bound of docs/wire.md, "Metadata" (the error matches
// wire.ErrBound or wire.ErrHeader), or if ctx is no handler's: a
// message's handler, or a call's after it returned, or one served by
// ServeIncoming without a deadline. md is not copied: it must not change
// until the reply is sent.
func SetReplyMetadata(ctx context.Context, md wire.Metadata) error {
	in, _ := ctx.Value(replyKey{}).(*interconnect.Incoming)
	if in == nil || in.Kind != wire.KindCall {
		return errNoCall
	}
	if len(md) > 0 {
		var probe [wire.HeaderSize]byte
		wire.PutHead(probe[:], in.Header.Msg, wire.KindReply, 0)
		if _, err := wire.AppendMetadata(probe[:], md); err != nil {
			return fmt.Errorf("chanos: reply metadata: %w", err)
		}
	}
	in.ReplyMeta = md
	return nil
}

var errNoCall = errors.New("chanos: reply metadata outside the handler of an rpc call")

// CaptureReplyMetadata returns ctx with dst as where the metadata of the
// replies to the calls made with it go: each call sets *dst to its
// reply's (or error reply's) metadata, nil if it carried none, once the
// call has returned. Calls made at once with ctx share dst.
func CaptureReplyMetadata(ctx context.Context, dst *wire.Metadata) context.Context {
	captureUsed.Store(true)
	return context.WithValue(ctx, captureKey{}, dst)
}

// captureReply gives md, the metadata of the reply to a call made with
// ctx, to the place CaptureReplyMetadata gave ctx, if any.
func captureReply(ctx context.Context, md wire.Metadata) {
	if md == nil && !captureUsed.Load() {
		return
	}
	if dst, ok := ctx.Value(captureKey{}).(*wire.Metadata); ok {
		*dst = md
	}
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
