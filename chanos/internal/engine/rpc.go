package engine

import (
	"context"

	"github.com/chanos/chanos/wire"
)

// Sender sends messages on one connection.
type Sender interface {
	// Send encodes m as a frame and sends it. It returns an error if m
	// cannot be encoded (see wire.Encoder), if the connection has ended,
	// or if ctx ends before there is room to send. A give_away_cap in m is
	// closed once the frame is sent, also when Send fails after encoding.
	Send(ctx context.Context, m wire.Message) error
}

// Transport sends messages and makes rpc calls on one connection.
type Transport interface {
	Sender
	// Call sends call, which must be of kind wire.KindCall, as an rpc call
	// frame with a fresh call id and ctx's deadline as its timeout, waits
	// for the reply with the same call id, and decodes it into reply
	// (which must be the reply type of the same rpc). An error reply from
	// the peer is returned as a *RemoteError. If ctx ends first, Call sends
	// a cancel for the call and returns ctx's error. On error, reply is
	// left zero. Call keeps neither call nor reply once it returns: the
	// generated stubs reuse them.
	Call(ctx context.Context, call, reply wire.Message) error
}
