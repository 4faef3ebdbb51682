package engine

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/chanos/chanos/interconnect/local"
	"github.com/chanos/chanos/wire"
)

// echoCall and echoReply are an rpc of one uint64 each way.
type echoCall struct{ Val uint64 }

func (*echoCall) MsgNumber() uint16  { return 4 }
func (*echoCall) MsgKind() wire.Kind { return wire.KindCall }
func (*echoCall) MsgName() string    { return "test.echo" }
func (m *echoCall) Encode(b *wire.Buffer) error {
	wire.PutUint64(wire.AppendFixed(b, 4, wire.KindCall, 8), m.Val)
	return nil
}
func (m *echoCall) Decode(f []byte, caps []wire.Cap) error {
	if b, ok := wire.FixedBody(f, caps, 4, wire.KindCall, 8); ok {
		m.Val = wire.Uint64(b)
		return nil
	}
	return wire.FixedError(f, caps, "test.echo call", 4, wire.KindCall, 8)
}

type echoReply struct{ Val uint64 }

func (*echoReply) MsgNumber() uint16  { return 4 }
func (*echoReply) MsgKind() wire.Kind { return wire.KindReply }
func (*echoReply) MsgName() string    { return "test.echo" }
func (m *echoReply) Encode(b *wire.Buffer) error {
	wire.PutUint64(wire.AppendFixed(b, 4, wire.KindReply, 8), m.Val)
	return nil
}
func (m *echoReply) Decode(f []byte, caps []wire.Cap) error {
	if b, ok := wire.FixedBody(f, caps, 4, wire.KindReply, 8); ok {
		m.Val = wire.Uint64(b)
		return nil
	}
	return wire.FixedError(f, caps, "test.echo reply", 4, wire.KindReply, 8)
}

// A call that outlives the wrap-around of the call ids keeps its id to
// itself: the calls made after the wrap skip it, whether it waits as a
// pending call or holds the reading turn, and each call gets its own
// reply. The counter is moved near its end rather than counted there.
func TestCallIDsSkipOutstandingCallsAfterWrap(t *testing.T) {
	for _, holdsTurn := range []bool{false, true} {
		a, b := local.Pair()
		cli, srv := New(a, Interface{Name: "test", MaxFrameSize: 4096}, nil), New(b, Interface{Name: "test", MaxFrameSize: 4096}, nil)
		release := make(chan struct{})
		go srv.Serve(context.Background(), func(ctx context.Context, in *Incoming) (wire.Message, error) {
			var call echoCall
			if err := in.Decode(&call); err != nil {
				return nil, err
			}
			if call.Val == 1 {
				<-release // a long call: a watch, a wait
			}
			return &echoReply{Val: call.Val}, nil
		}, Concurrent(4))
		if !holdsTurn {
			// Another goroutine holds the reading turn: the long call is
			// a pending one.
			cli.turn.Store(turnHeld)
		}
		slow := make(chan error, 1)
		var slowReply echoReply
		go func() { slow <- cli.Call(context.Background(), &echoCall{Val: 1}, &slowReply) }()
		deadline := time.Now().Add(5 * time.Second)
		for cli.nextID.Load() == 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(10 * time.Millisecond) // the long call (id 1) is out
		if !holdsTurn {
			cli.turn.Store(0)
		}
		cli.nextID.Store(math.MaxUint32 - 2) // the next ids wrap around to 0, then 1
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		for v := uint64(2); v < 6; v++ {
			var r echoReply
			if err := cli.Call(ctx, &echoCall{Val: v}, &r); err != nil || r.Val != v {
				t.Errorf("holding the turn %v: call %d after the wrap = %d, %v", holdsTurn, v, r.Val, err)
			}
		}
		cancel()
		close(release)
		select {
		case err := <-slow:
			if err != nil || slowReply.Val != 1 {
				t.Errorf("holding the turn %v: the long call = %d, %v; want its own reply, 1", holdsTurn, slowReply.Val, err)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("holding the turn %v: the long call never returned", holdsTurn)
		}
		cli.Close()
		srv.Close()
	}
}
