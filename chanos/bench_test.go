package chanos_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"unsafe"

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
	go s.Serve(context.Background(), benchServer{})
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
	benchServe(b, &pingpong.EchoCall{Val: 7}, benchServer{})
}

// BenchmarkCallOverhead is the calling side's work per rpc with no
// interconnect: encode the call, receive and decode the reply.
func BenchmarkCallOverhead(b *testing.B) {
	benchCall(b, &pingpong.EchoReply{Result: 7}, func(ctx context.Context, c *pingpong.Conn) error {
		_, err := c.Echo(ctx, 7)
		return err
	})
}

// benchServe serves call b.N times over a connection whose peer sends it
// again for every reply.
func benchServe(b *testing.B, call wire.Message, srv pingpong.Server) {
	var frame wire.Buffer
	if err := call.Encode(&frame); err != nil {
		b.Fatal(err)
	}
	wire.SetCallID(frame.B, 1)
	n := 0
	c := chanos.LoopConn(pingpong.Interface, frame.B, func([]byte) []byte {
		if n++; n >= b.N {
			return nil
		}
		return frame.B
	})
	b.ReportAllocs()
	b.ResetTimer()
	if err := pingpong.NewConn(c).Serve(context.Background(), srv); err != nil {
		b.Fatal(err)
	}
}

// benchCall makes b.N calls with call over a connection whose peer
// answers each with reply.
func benchCall(b *testing.B, reply wire.Message, call func(context.Context, *pingpong.Conn) error) {
	var frame wire.Buffer
	if err := reply.Encode(&frame); err != nil {
		b.Fatal(err)
	}
	c := pingpong.NewConn(chanos.LoopConn(pingpong.Interface, nil, func(sent []byte) []byte {
		wire.SetCallID(frame.B, binary.LittleEndian.Uint32(sent[8:]))
		return frame.B
	}))
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := call(ctx, c); err != nil {
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
	benchServe(b, &pingpong.BounceCall{Payload: make([]byte, 8)}, bounceServer{})
}

func BenchmarkCallOverheadBounce(b *testing.B) {
	p := make([]byte, 8)
	benchCall(b, &pingpong.BounceReply{Reply: make([]byte, 8)}, func(ctx context.Context, c *pingpong.Conn) error {
		_, err := c.Bounce(ctx, p)
		return err
	})
}

// clientOverRing returns a pingpong client over a ring pair, and the
// ring's other end, which the benchmark drives itself.
func clientOverRing(b *testing.B) (*pingpong.Conn, *ump.Conn) {
	x, y, err := ump.Pipe(&ump.Options{MaxMessageSize: pingpong.MaxFrameSize})
	if err != nil {
		b.Fatal(err)
	}
	c := pingpong.NewConn(chanos.NewConn(ump.NewLink(x), pingpong.Interface))
	b.Cleanup(func() { c.Close(); y.Close() })
	return c, y
}

// BenchmarkEchoOverUMPOneGoroutine is the calling side of the echo rpc
// over a real ring pair, in one goroutine and without a peer process: the
// reply is in the ring before each call (call ids are issued from 1), and
// the call is drained after. BenchmarkRawUMPOneGoroutine is the same
// traffic with bare ring messages: the difference is the connection
// layer's work on the calling side, free of cross-CPU noise.
func BenchmarkEchoOverUMPOneGoroutine(b *testing.B) {
	benchCallOverRing(b, &pingpong.EchoReply{Result: 7}, func(ctx context.Context, c *pingpong.Conn) error {
		if v, err := c.Echo(ctx, 7); err != nil || v != 7 {
			return fmt.Errorf("echo = %d, %v", v, err)
		}
		return nil
	})
}

// benchCallOverRing makes b.N calls with call over a real ring pair whose
// far end the benchmark drives itself: reply is in the ring before each
// call (call ids are issued from 1), and the call is drained after.
func benchCallOverRing(b *testing.B, reply wire.Message, call func(context.Context, *pingpong.Conn) error) {
	c, y := clientOverRing(b)
	var frame wire.Buffer
	if err := reply.Encode(&frame); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		wire.SetCallID(frame.B, uint32(i+1))
		if err := y.Send(ctx, frame.B); err != nil {
			b.Fatal(err)
		}
		if err := call(ctx, c); err != nil {
			b.Fatal(err)
		}
		if _, err := y.Receive(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRawUMPOneGoroutine(b *testing.B) { rawRoundTrips(b, 24) }

// rawRoundTrips sends a message of size bytes each way over a bare ring
// pair, b.N times, in one goroutine.
func rawRoundTrips(b *testing.B, size int) {
	x, y, err := ump.Pipe(&ump.Options{MaxMessageSize: pingpong.MaxFrameSize})
	if err != nil {
		b.Fatal(err)
	}
	defer x.Close()
	defer y.Close()
	msg := make([]byte, size)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := y.Send(ctx, msg); err != nil {
			b.Fatal(err)
		}
		if err := x.Send(ctx, msg); err != nil {
			b.Fatal(err)
		}
		if _, err := x.Receive(ctx); err != nil {
			b.Fatal(err)
		}
		if _, err := y.Receive(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkServeEchoOverUMPOneGoroutine is the serving side of the echo
// rpc over a real ring pair in one goroutine: batches of calls are put in
// the ring before Conn.Serve runs, the last of which makes the server
// cancel Serve's context; the replies are drained after.
// BenchmarkRawEchoOneGoroutine echoes the same traffic with bare ring
// messages, the last of which is 1 byte long.
func BenchmarkServeEchoOverUMPOneGoroutine(b *testing.B) {
	benchServeOverRing(b, 24, func(last bool) wire.Message {
		if last {
			return &pingpong.EchoCall{Val: stopVal}
		}
		return &pingpong.EchoCall{Val: 7}
	})
}

// benchServeOverRing serves the calls call returns (last: the one that
// stops the server) with Conn.Serve over a ring pair, in batches, as
// benchBatches puts them.
func benchServeOverRing(b *testing.B, size int, call func(last bool) wire.Message) {
	var frame wire.Buffer
	id := uint32(0)
	srv := &stoppingServer{}
	benchBatches(b, size, func(y *ump.Conn, last bool) error {
		frame.Reset()
		if err := call(last).Encode(&frame); err != nil {
			return err
		}
		id++
		wire.SetCallID(frame.B, id)
		return y.Send(context.Background(), frame.B)
	}, srv.serving)
}

const stopVal = 1 << 62

// stoppingServer echoes, and calls stop on stopVal.
type stoppingServer struct {
	pingpong.UnimplementedServer
	stop func()
}

// serving returns a function that serves x with Conn.Serve until stopVal.
func (s *stoppingServer) serving(x *ump.Conn) func() error {
	c := pingpong.NewConn(chanos.NewConn(ump.NewLink(x), pingpong.Interface))
	return func() error {
		ctx, cancel := context.WithCancel(context.Background())
		s.stop = cancel
		if err := c.Serve(ctx, s); !errors.Is(err, context.Canceled) {
			return fmt.Errorf("Serve = %v, want context.Canceled", err)
		}
		return nil
	}
}

func (s *stoppingServer) Echo(ctx context.Context, v uint64) (uint64, error) {
	if v == stopVal {
		s.stop()
	}
	return v, nil
}

func BenchmarkRawEchoOneGoroutine(b *testing.B) {
	msg := make([]byte, 24)
	benchBatches(b, 24, func(y *ump.Conn, last bool) error {
		if last {
			return y.Send(context.Background(), msg[:1])
		}
		return y.Send(context.Background(), msg)
	}, func(x *ump.Conn) func() error {
		return func() error {
			for {
				m, err := x.Receive(context.Background())
				if err != nil {
					return err
				}
				if err := x.Send(context.Background(), m); err != nil || len(m) == 1 {
					return err
				}
			}
		}
	})
}

// benchBatches runs b.N requests in batches that fit in a ring pair: put
// writes a request on the client's end (last: the one that stops the
// server, or is followed by it), then the server returned by serve
// answers them on the other end, and the answers are drained. Each batch
// is one Serve, and the timer stops and starts around it: with 1,000
// requests to a batch, their share of that (a Serve's start and end,
// its peer watch's goroutine among them) was about 40 of ServeEcho's
// 150 ns a request; 8,000 make it about 5. Requests and answers of up to
// size bytes a frame; larger than ump.BulkMin, they travel through bulk
// regions of 64 MiB, and a batch is as many as fit.
func benchBatches(b *testing.B, size int, put func(y *ump.Conn, last bool) error, serve func(x *ump.Conn) func() error) {
	batch, o := 8000, &ump.Options{MaxMessageSize: pingpong.MaxFrameSize, RingSlots: 1 << 14}
	if size > ump.BulkMin {
		o.BulkSize = 64 << 20
		batch = min(batch, o.BulkSize/(2*size))
	}
	x, y, err := ump.Pipe(o)
	if err != nil {
		b.Fatal(err)
	}
	defer x.Close()
	defer y.Close()
	run := serve(x)
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; done += batch {
		b.StopTimer()
		n := min(batch, b.N-done)
		for i := range n {
			if err := put(y, i == n-1); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		if err := run(); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		drained, cancel := context.WithCancel(context.Background())
		cancel() // Receive returns what is there, then the context's error
		for {
			if _, err := y.Receive(drained); err != nil {
				break
			}
		}
		b.StartTimer()
	}
}

// BenchmarkPingOverUMPOneGoroutine is the client of the clients suite
// (examples/pingpong/client) in one goroutine over a real ring pair: send
// a ping, take the pong the peer put in the ring before with Handle.
// BenchmarkServePingOverUMPOneGoroutine is its server (a pong for each
// ping, as examples/pingpong/server), fed as BenchmarkServeEcho... is.
func BenchmarkPingOverUMPOneGoroutine(b *testing.B) {
	c, y := clientOverRing(b)
	var pong wire.Buffer
	(&pingpong.Pong{ClientID: 1, MsgID: 7}).Encode(&pong)
	ping := &pingpong.Ping{ClientID: 1}
	var got pongKeeper
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := y.Send(ctx, pong.B); err != nil {
			b.Fatal(err)
		}
		ping.MsgID = uint32(i)
		if err := c.Send(ctx, ping); err != nil {
			b.Fatal(err)
		}
		if err := c.Handle(ctx, &got); err != nil || got.last.MsgID != 7 {
			b.Fatal(got.last, err)
		}
		if _, err := y.Receive(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkServePingOverUMPOneGoroutine(b *testing.B) {
	var ping wire.Buffer
	srv := &stoppingServer{}
	benchBatches(b, 24, func(y *ump.Conn, last bool) error {
		ping.Reset()
		(&pingpong.Ping{ClientID: 1, MsgID: 7}).Encode(&ping)
		if err := y.Send(context.Background(), ping.B); err != nil || !last {
			return err
		}
		// The last ping is followed by a call that stops the server.
		var call wire.Buffer
		(&pingpong.EchoCall{Val: stopVal}).Encode(&call)
		wire.SetCallID(call.B, 1)
		return y.Send(context.Background(), call.B)
	}, srv.serving)
}

func (s *stoppingServer) Ping(ctx context.Context, from *pingpong.Client, m pingpong.Ping) error {
	return from.Send(ctx, &pingpong.Pong{ClientID: m.ClientID, MsgID: m.MsgID})
}

// BenchmarkBounceOverUMPOneGoroutine is the calling side of the bounce
// rpc (the pingpong suite's rtt case) over a real ring pair in one
// goroutine, by payload size, as BenchmarkEchoOverUMPOneGoroutine is for
// echo; BenchmarkRawBounceOneGoroutine moves frames of the same sizes
// over bare rings, the floor.
func BenchmarkBounceOverUMPOneGoroutine(b *testing.B) {
	for _, size := range bounceSizes {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			payload := make([]byte, size)
			b.SetBytes(int64(2 * size))
			benchCallOverRing(b, &pingpong.BounceReply{Reply: payload}, func(ctx context.Context, c *pingpong.Conn) error {
				if r, err := c.Bounce(ctx, payload); err != nil || len(r) != size {
					return fmt.Errorf("bounce = %d bytes, %v", len(r), err)
				}
				return nil
			})
		})
	}
}

var bounceSizes = []int{8, 512, 4096, 65536}

func BenchmarkRawBounceOneGoroutine(b *testing.B) {
	for _, size := range bounceSizes {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			b.SetBytes(int64(2 * size))
			rawRoundTrips(b, size+20) // the frame: header, count, payload
		})
	}
}

// BenchmarkServeBounceOverUMPOneGoroutine is
// BenchmarkServeEchoOverUMPOneGoroutine for the bounce rpc, by payload
// size (each way), as BenchmarkBounceOverUMPOneGoroutine is its calling
// side.
func BenchmarkServeBounceOverUMPOneGoroutine(b *testing.B) {
	for _, size := range bounceSizes {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			payload := make([]byte, size)
			b.SetBytes(int64(2 * size))
			benchServeOverRing(b, size+20, func(last bool) wire.Message {
				if last {
					return &pingpong.EchoCall{Val: stopVal}
				}
				return &pingpong.BounceCall{Payload: payload}
			})
		})
	}
}

func (s *stoppingServer) Bounce(ctx context.Context, p []byte) ([]byte, error) { return p, nil }

// BenchmarkEventSignalWait is a Signal and a Wait that finds the count
// set, in one goroutine: an Event's system calls and its own work, with
// no sleep and no other CPU. BenchmarkEventfdRaw is the same on a bare
// eventfd: "read" as the raw baseline of chanos bench caps (event-wake)
// waits, with one read(2) that would block, and "ppoll+read" as a Wait
// does, which must be able to end on its context or Close and so cannot
// block in read(2) on a descriptor that other domains share non-blocking
// (docs/capabilities.md, "Event objects").
func BenchmarkEventSignalWait(b *testing.B) {
	ev, err := chanos.NewEvent()
	if err != nil {
		b.Fatal(err)
	}
	defer ev.Close()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := ev.Signal(); err != nil {
			b.Fatal(err)
		}
		if _, err := ev.Wait(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEventfdRaw(b *testing.B) {
	one := []byte{1, 0, 0, 0, 0, 0, 0, 0}
	for _, poll := range []bool{false, true} {
		name := "read"
		if poll {
			name = "ppoll+read"
		}
		b.Run(name, func(b *testing.B) {
			fd, _, errno := syscall.Syscall(syscall.SYS_EVENTFD2, 0, syscall.O_CLOEXEC|syscall.O_NONBLOCK, 0)
			if errno != 0 {
				b.Fatal(errno)
			}
			defer syscall.Close(int(fd))
			var buf [8]byte
			// struct pollfd: the descriptor, then POLLIN in events.
			pfd := [1]struct {
				fd            int32
				events, revts int16
			}{{fd: int32(fd), events: 0x1}}
			for b.Loop() {
				if _, err := syscall.Write(int(fd), one); err != nil {
					b.Fatal(err)
				}
				if poll {
					if _, _, errno := syscall.Syscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&pfd[0])), 1, 0, 0, 0, 0); errno != 0 {
						b.Fatal(errno)
					}
				}
				if _, err := syscall.Read(int(fd), buf[:]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
