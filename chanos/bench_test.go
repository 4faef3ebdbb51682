package chanos_test

import (
	"context"
	"encoding/binary"
	"testing"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/interconnect/ump"
	"github.com/chanos/chanos/interfaces/pingpong"
	"github.com/chanos/chanos/wire"
)

// BenchmarkLocalSendReceive measures a one-way message on the local
// interconnect: Send in one goroutine, Receive in another. Compare with
// BenchmarkGoChannel, the same traffic over a plain Go channel of the same
// capacity.
func BenchmarkLocalSendReceive(b *testing.B) {
	a, z := chanos.LocalPair(pingpong.Interface)
	c, s := pingpong.NewConn(a), pingpong.NewConn(z)
	defer c.Close()
	defer s.Close()
	ctx := context.Background()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < b.N; i++ {
			if _, err := s.Receive(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	}()
	b.ReportAllocs()
	b.ResetTimer()
	m := &pingpong.Ping{ClientID: 1}
	for i := 0; i < b.N; i++ {
		m.MsgID = uint32(i)
		if err := c.Send(ctx, m); err != nil {
			b.Fatal(err)
		}
	}
	<-done
}

func BenchmarkGoChannel(b *testing.B) {
	ch := make(chan *pingpong.Ping, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < b.N; i++ {
			<-ch
		}
	}()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m := &pingpong.Ping{ClientID: 1, MsgID: uint32(i)}
		ch <- m
	}
	<-done
}

// BenchmarkRPCOverUMP is a round trip through the generated stubs (Echo)
// over a ring pair in this process; BenchmarkRawUMPRoundTrip is the same
// round trip of 24-byte frames straight over the ring, the floor.
func BenchmarkRPCOverUMP(b *testing.B) {
	a, z, err := chanos.UMPPair(pingpong.Interface)
	if err != nil {
		b.Fatal(err)
	}
	c, s := pingpong.NewConn(a), pingpong.NewConn(z)
	defer c.Close()
	go pingpong.ServeConn(context.Background(), s, benchServer{})
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := c.Echo(ctx, uint64(i)); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	s.Close()
}

type benchServer struct{ pingpong.UnimplementedServer }

func (benchServer) Echo(ctx context.Context, v uint64) (uint64, error) { return v, nil }

func BenchmarkRawUMPRoundTrip(b *testing.B) {
	x, y, err := ump.Pipe(&ump.Options{MaxMessageSize: 1024})
	if err != nil {
		b.Fatal(err)
	}
	defer x.Close()
	ctx := context.Background()
	go func() {
		for {
			m, err := y.Receive(ctx)
			if err != nil {
				return
			}
			if y.Send(ctx, m) != nil {
				return
			}
		}
	}()
	msg := make([]byte, 24)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := x.Send(ctx, msg); err != nil {
			b.Fatal(err)
		}
		if _, err := x.Receive(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	y.Close()
}

// BenchmarkServeOverhead is the serving side's work per rpc with no
// interconnect: receive a call frame, decode, dispatch, encode the reply.
func BenchmarkServeOverhead(b *testing.B) {
	var call wire.Buffer
	(&pingpong.EchoCall{Val: 7}).Encode(&call)
	wire.SetCallID(call.B, 1)
	n := 0
	c := chanos.LoopConn(pingpong.Interface, call.B, func([]byte) []byte {
		if n++; n >= b.N {
			return nil
		}
		return call.B
	})
	b.ReportAllocs()
	b.ResetTimer()
	if err := pingpong.ServeConn(context.Background(), pingpong.NewConn(c), benchServer{}); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkCallOverhead is the calling side's work per rpc with no
// interconnect: encode the call, receive and decode the reply.
func BenchmarkCallOverhead(b *testing.B) {
	var reply wire.Buffer
	(&pingpong.EchoReply{Result: 7}).Encode(&reply)
	c := pingpong.NewConn(chanos.LoopConn(pingpong.Interface, nil, func(sent []byte) []byte {
		wire.SetCallID(reply.B, binary.LittleEndian.Uint32(sent[8:]))
		return reply.B
	}))
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := c.Echo(ctx, 7); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMessageOverhead is a client's work per ping-pong of one-way
// messages with no interconnect: encode and send a ping, receive and
// decode the pong (seed 000's Figure 4.18 client, as the clients suite
// runs it).
func BenchmarkMessageOverhead(b *testing.B) {
	var pong wire.Buffer
	(&pingpong.Pong{ClientID: 1, MsgID: 7}).Encode(&pong)
	c := pingpong.NewConn(chanos.LoopConn(pingpong.Interface, nil, func([]byte) []byte { return pong.B }))
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := c.Send(ctx, &pingpong.Ping{ClientID: 1, MsgID: uint32(i)}); err != nil {
			b.Fatal(err)
		}
		if _, err := c.Receive(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

type bounceServer struct{ pingpong.UnimplementedServer }

func (bounceServer) Bounce(ctx context.Context, p []byte) ([]byte, error) { return p, nil }

// BenchmarkServeOverheadBounce and BenchmarkCallOverheadBounce are
// BenchmarkServeOverhead and BenchmarkCallOverhead for the bounce rpc with
// 8 bytes each way (a dynamic array: the pingpong suite's 8-byte case).
func BenchmarkServeOverheadBounce(b *testing.B) {
	var call wire.Buffer
	(&pingpong.BounceCall{Payload: make([]byte, 8)}).Encode(&call)
	wire.SetCallID(call.B, 1)
	n := 0
	c := chanos.LoopConn(pingpong.Interface, call.B, func([]byte) []byte {
		if n++; n >= b.N {
			return nil
		}
		return call.B
	})
	b.ReportAllocs()
	b.ResetTimer()
	if err := pingpong.ServeConn(context.Background(), pingpong.NewConn(c), bounceServer{}); err != nil {
		b.Fatal(err)
	}
}

func BenchmarkCallOverheadBounce(b *testing.B) {
	var reply wire.Buffer
	(&pingpong.BounceReply{Reply: make([]byte, 8)}).Encode(&reply)
	c := pingpong.NewConn(chanos.LoopConn(pingpong.Interface, nil, func(sent []byte) []byte {
		wire.SetCallID(reply.B, binary.LittleEndian.Uint32(sent[8:]))
		return reply.B
	}))
	ctx := context.Background()
	p := make([]byte, 8)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := c.Bounce(ctx, p); err != nil {
			b.Fatal(err)
		}
	}
}
