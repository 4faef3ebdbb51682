package chanos_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	stdnet "net"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/chanos/chanos/chanos"
	cnet "github.com/chanos/chanos/interconnect/net"
	"github.com/chanos/chanos/interconnect/ump"
	"github.com/chanos/chanos/interfaces/pingpong"
	"github.com/chanos/chanos/internal/testkit"
	"github.com/chanos/chanos/wire"
)

// rawPeer returns a pingpong client over a ring pair whose other end the
// test drives with bare frames.
func rawPeer(t *testing.T) (*pingpong.Conn, *ump.Conn) {
	t.Helper()
	x, y, err := ump.Pipe(&ump.Options{MaxMessageSize: pingpong.MaxFrameSize})
	if err != nil {
		t.Fatal(err)
	}
	c := pingpong.NewConn(chanos.NewConn(ump.NewLink(x), pingpong.Interface))
	t.Cleanup(func() { c.Close(); y.Close() })
	return c, y
}

// answer reads one call on y and answers it with reply, its call id
// patched in.
func answer(ctx context.Context, y *ump.Conn, reply []byte) error {
	call, err := y.Receive(ctx)
	if err != nil {
		return err
	}
	h, err := wire.ParseHeader(call)
	if err != nil {
		return err
	}
	wire.SetCallID(reply, h.CallID)
	return y.Send(ctx, reply)
}

// A reply of a fixed-size rpc whose size is wrong is refused as the reply
// type's Decode refuses it, and the connection goes on.
func TestFixedReplyOfWrongSize(t *testing.T) {
	c, y := rawPeer(t)
	ctx := testkit.Context(t)
	var good wire.Buffer
	(&pingpong.EchoReply{Result: 5}).Encode(&good)
	for _, tc := range []struct {
		frame []byte
		want  error
	}{
		{append(append([]byte(nil), good.B...), 0), wire.ErrTrailing},
		{good.B[:len(good.B)-1], wire.ErrTruncated},
	} {
		frame := append([]byte(nil), tc.frame...)
		wire.PutUint32(frame, uint32(len(frame))) // a consistent header: only the body is off
		errc := make(chan error, 1)
		go func() { errc <- answer(ctx, y, frame) }()
		if _, err := c.Echo(ctx, 5); !errors.Is(err, tc.want) {
			t.Errorf("echo with a %d-byte reply = %v, want %v", len(frame), err, tc.want)
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	go answer(ctx, y, good.B)
	if v, err := c.Echo(ctx, 5); err != nil || v != 5 {
		t.Fatalf("echo after the bad replies = %d, %v", v, err)
	}
}

// A call whose reply comes behind more messages than the inbox holds
// completes once a Receive makes room, on both paths of a call: the
// stubs' fast path and Call's.
func TestReplyBehindFullInbox(t *testing.T) {
	const n = 3000 // more than the inbox holds
	c, y := rawPeer(t)
	ctx := testkit.Context(t)
	var pong, reply wire.Buffer
	(&pingpong.Pong{MsgID: 1}).Encode(&pong)
	(&pingpong.EchoReply{Result: 9}).Encode(&reply)
	calls := map[string]func() (uint64, error){
		"fast": func() (uint64, error) { return c.Echo(ctx, 9) },
		"Call": func() (uint64, error) {
			var r pingpong.EchoReply
			err := c.Raw().Call(ctx, &pingpong.EchoCall{Val: 9}, &r)
			return r.Result, err
		},
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				frame, err := y.Receive(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				h, _ := wire.ParseHeader(frame)
				for range n {
					if err := y.Send(ctx, pong.B); err != nil {
						t.Error(err)
						return
					}
				}
				wire.SetCallID(reply.B, h.CallID)
				if err := y.Send(ctx, reply.B); err != nil {
					t.Error(err)
				}
			}()
			got := make(chan error, 1)
			go func() {
				v, err := call()
				if err == nil && v != 9 {
					err = errors.New("wrong result")
				}
				got <- err
			}()
			// The call fills the inbox and waits; receiving drains it.
			testkit.Eventually(t, "the call to fill the inbox and wait", func() bool { return chanos.InboxFullAndWaiting(c.Raw()) })
			for i := range n {
				m, err := c.Receive(ctx)
				if err != nil {
					t.Fatalf("message %d: %v", i, err)
				}
				if _, ok := m.(*pingpong.Pong); !ok {
					t.Fatalf("message %d is a %T", i, m)
				}
			}
			select {
			case err := <-got:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the call did not complete after the inbox was drained")
			}
			wg.Wait()
		})
	}
}

// Client.Send refuses nil and rpc frames with an error, on every
// interconnect and over another Transport.
func TestClientSendRefuses(t *testing.T) {
	forEach(t, func(t *testing.T, c, s *pingpong.Conn) {
		ctx := testkit.Context(t)
		for _, m := range []pingpong.Msg{nil, (*pingpong.Ping)(nil), (*pingpong.Data)(nil), &pingpong.EchoCall{}, &pingpong.BounceReply{}} {
			if err := c.Send(ctx, m); err == nil {
				t.Errorf("Send(%#v) succeeded", m)
			}
		}
	})
}

// Sending a message over ump allocates nothing: neither the message, which
// stays on the caller's stack, nor its frame.
func TestSendDoesNotAllocate(t *testing.T) {
	c, y := rawPeer(t)
	ctx := testkit.Context(t)
	payload := make([]byte, 100)
	allocs := testing.AllocsPerRun(100, func() {
		if err := c.Send(ctx, &pingpong.Ping{ClientID: 1, MsgID: 2}); err != nil {
			t.Fatal(err)
		}
		if err := c.Send(ctx, &pingpong.Data{Seq: 3, Payload: payload}); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if _, err := y.Receive(ctx); err != nil {
				t.Fatal(err)
			}
		}
	})
	if allocs != 0 {
		t.Errorf("Send allocates %v times per ping and data message, want 0", allocs)
	}
}

// An rpc of a fixed size over ump allocates nothing of its own, on either
// side, also when the sides park (AllocsPerRun runs on one CPU): the
// serving side's call contexts come in blocks, on a busy connection one
// allocation each 204 calls, which AllocsPerRun's whole count per run
// does not show.
func TestFixedRPCDoesNotAllocate(t *testing.T) {
	if allocs := echoAllocs(t, context.Background()); allocs != 0 {
		t.Errorf("an echo rpc allocates %v times, want 0", allocs)
	}
}

// echoAllocs returns the allocations of an echo rpc made with ctx over
// ump, both sides counted.
func echoAllocs(t *testing.T, ctx context.Context) float64 {
	c := servedOverUMP(t, &server{})
	return testing.AllocsPerRun(200, func() {
		if v, err := c.Echo(ctx, 41); err != nil || v != 42 {
			t.Fatal(v, err)
		}
	})
}

// Serving a message of a fixed size over ump allocates nothing: the
// handler gets the message by value, and its answer is sent from Send's
// stack.
func TestServeMessageDoesNotAllocate(t *testing.T) {
	c := servedOverUMP(t, &server{})
	ctx := context.Background()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const n = 1000
	for i := range n {
		if err := c.Send(ctx, &pingpong.Ping{MsgID: uint32(i)}); err != nil {
			t.Fatal(err)
		}
		// Receive would allocate the pong it returns: take the frame.
		if err := c.Raw().ReceiveFunc(ctx, func(*chanos.Incoming) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	if got := float64(after.Mallocs-before.Mallocs) / n; got > 0.05 {
		t.Errorf("a ping served and answered allocates %.2f times, want 0", got)
	}
}

// bigReplyServer answers bounce with a reply over its bound.
type bigReplyServer struct{ pingpong.UnimplementedServer }

func (bigReplyServer) Bounce(ctx context.Context, p []byte) ([]byte, error) {
	return make([]byte, pingpong.MaxBounceReplyLen+1), nil
}

// A reply that cannot be encoded reaches the caller as an error reply, and
// the connection goes on.
func TestUnencodableReply(t *testing.T) {
	forEach(t, func(t *testing.T, c, s *pingpong.Conn) {
		go s.Serve(context.Background(), bigReplyServer{})
		ctx := testkit.Context(t)
		for range 2 {
			_, err := c.Bounce(ctx, []byte("x"))
			var re *chanos.RemoteError
			if !errors.As(err, &re) || chanos.CodeOf(err) != chanos.CodeInternal {
				t.Fatalf("bounce with an unencodable reply = %v, want a RemoteError", err)
			}
		}
	})
}

// A Receive waiting on the local interconnect ends when its context does,
// or when the peer closes (after what was sent before), and a later
// Receive is not disturbed by the wake-ups these leave behind.
func TestLocalReceiveWakeUps(t *testing.T) {
	a, b := chanos.LocalPair(pingpong.Interface)
	c, s := pingpong.NewConn(a), pingpong.NewConn(b)
	defer c.Close()
	ctx := testkit.Context(t)
	for range 3 {
		wctx := testkit.NewWaitContext()
		got := make(chan error, 1)
		go func() { _, err := s.Receive(wctx); got <- err }()
		wctx.Waiting(t)
		wctx.Cancel()
		if err := <-got; !errors.Is(err, context.Canceled) {
			t.Fatalf("Receive with a canceled context = %v", err)
		}
	}
	if err := c.Send(ctx, &pingpong.Ping{MsgID: 7}); err != nil {
		t.Fatal(err)
	}
	if m, err := s.Receive(ctx); err != nil || m.(*pingpong.Ping).MsgID != 7 {
		t.Fatalf("Receive after the cancels = %v, %v", m, err)
	}
	wctx := testkit.NewWaitContext()
	defer wctx.Cancel()
	type received struct {
		m   pingpong.Msg
		err error
	}
	got := make(chan received, 1)
	go func() { m, err := s.Receive(wctx); got <- received{m, err} }()
	wctx.Waiting(t)
	if err := c.Send(ctx, &pingpong.Ping{MsgID: 8}); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if r := <-got; r.err != nil || r.m.(*pingpong.Ping).MsgID != 8 {
		t.Fatalf("Receive before the close = %v, %v", r.m, r.err)
	}
	if _, err := s.Receive(ctx); !errors.Is(err, chanos.ErrClosed) {
		t.Fatalf("Receive after the close = %v, want ErrClosed", err)
	}
}

// A Receive whose context has no Done (context.Background) waits on the
// local interconnect with one plain channel receive: the close, of
// either end, still ends it, after what was sent before.
func TestLocalReceiveWithoutDoneEndsOnClose(t *testing.T) {
	for _, closer := range []string{"peer", "self"} {
		t.Run(closer, func(t *testing.T) {
			a, b := chanos.LocalPair(pingpong.Interface)
			c, s := pingpong.NewConn(a), pingpong.NewConn(b)
			defer c.Close()
			defer s.Close()
			got := make(chan error, 2)
			go func() {
				for range 2 {
					_, err := s.Receive(context.Background())
					got <- err
				}
			}()
			if err := c.Send(context.Background(), &pingpong.Ping{MsgID: 1}); err != nil {
				t.Fatal(err)
			}
			if err := <-got; err != nil {
				t.Fatalf("Receive of the message = %v", err)
			}
			// Most likely asleep in the channel by now; correct either way.
			time.Sleep(20 * time.Millisecond)
			if closer == "peer" {
				c.Close()
			} else {
				s.Close()
			}
			select {
			case err := <-got:
				if !errors.Is(err, chanos.ErrClosed) {
					t.Fatalf("Receive at the close = %v, want ErrClosed", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Receive did not end at the close")
			}
		})
	}
}

// pongKeeper keeps the last pong Handle gave it, and echoes.
type pongKeeper struct {
	pingpong.UnimplementedServer
	last pingpong.Pong
}

func (p *pongKeeper) Pong(ctx context.Context, from *pingpong.Client, m pingpong.Pong) error {
	p.last = m
	return nil
}

func (p *pongKeeper) Echo(ctx context.Context, v uint64) (uint64, error) { return v + 1, nil }

// Handle gives the next message to the Server's method by value, answers
// an rpc call, and returns a message method's error.
func TestHandle(t *testing.T) {
	forEach(t, func(t *testing.T, c, s *pingpong.Conn) {
		ctx := testkit.Context(t)
		var keep pongKeeper
		if err := s.Send(ctx, &pingpong.Pong{ClientID: 3, MsgID: 4}); err != nil {
			t.Fatal(err)
		}
		if err := c.Handle(ctx, &keep); err != nil || keep.last != (pingpong.Pong{ClientID: 3, MsgID: 4}) {
			t.Fatalf("Handle = %v, kept %+v", err, keep.last)
		}
		got := make(chan error, 1)
		go func() {
			v, err := s.Echo(ctx, 9)
			if err == nil && v != 10 {
				err = errors.New("wrong echo")
			}
			got <- err
		}()
		if err := c.Handle(ctx, &keep); err != nil {
			t.Fatalf("Handle of a call = %v", err)
		}
		if err := <-got; err != nil {
			t.Fatal(err)
		}
		// A message the Server does not implement: its error comes back.
		if err := s.Send(ctx, &pingpong.Ping{}); err != nil {
			t.Fatal(err)
		}
		if err := c.Handle(ctx, &keep); !errors.Is(err, errors.ErrUnsupported) {
			t.Fatalf("Handle of an unimplemented message = %v", err)
		}
	})
}

// Handle takes a message of a fixed size from the frame the ring delivered
// (ReceiveFrame) only when wire.FixedBody accepts the whole frame; any
// other frame with that message's number goes the general way, which ends
// the connection with ErrProtocol, and the Server never sees it.
func TestHandleFixedFrames(t *testing.T) {
	var good wire.Buffer
	if err := (&pingpong.Pong{ClientID: 1, MsgID: 2}).Encode(&good); err != nil {
		t.Fatal(err)
	}
	patch := func(f func(b []byte) []byte) []byte { return f(slices.Clone(good.B)) }
	for name, frame := range map[string][]byte{
		"size field":     patch(func(b []byte) []byte { b[0]++; return b }),
		"one byte more":  patch(func(b []byte) []byte { b[0]++; return append(b, 0) }),
		"one byte less":  patch(func(b []byte) []byte { b[0]--; return b[:len(b)-1] }),
		"capabilities":   patch(func(b []byte) []byte { b[7] = 1; return b }),
		"a call":         patch(func(b []byte) []byte { b[6] = wire.FlagCall; wire.SetCallID(b, 1); return b }),
		"timeout":        patch(func(b []byte) []byte { b[12] = 1; return b }),
		"header cut off": good.B[:wire.HeaderSize-1],
	} {
		t.Run(name, func(t *testing.T) {
			c, y := rawPeer(t)
			ctx := testkit.Context(t)
			if err := y.Send(ctx, frame); err != nil {
				t.Fatal(err)
			}
			var keep pongKeeper
			if err := c.Handle(ctx, &keep); !errors.Is(err, chanos.ErrProtocol) {
				t.Fatalf("Handle = %v, want ErrProtocol", err)
			}
			if keep.last != (pingpong.Pong{}) {
				t.Fatalf("the Server got %+v", keep.last)
			}
		})
	}

	// A reply read on the way is handed to its call; the message after it
	// still reaches the Server.
	c, y := rawPeer(t)
	ctx := testkit.Context(t)
	var keep pongKeeper
	hctx := testkit.NewWaitContext()
	defer hctx.Cancel()
	handled := make(chan error, 1)
	go func() { handled <- c.Handle(hctx, &keep) }()
	hctx.Waiting(t) // Handle holds the reading turn, and waits on the ring
	echoed := make(chan error, 1)
	go func() {
		v, err := c.Echo(ctx, 5)
		if err == nil && v != 6 {
			err = fmt.Errorf("echo = %d", v)
		}
		echoed <- err
	}()
	var reply wire.Buffer
	if err := (&pingpong.EchoReply{Result: 6}).Encode(&reply); err != nil {
		t.Fatal(err)
	}
	if err := answer(ctx, y, reply.B); err != nil {
		t.Fatal(err)
	}
	if err := <-echoed; err != nil {
		t.Fatal(err)
	}
	if err := y.Send(ctx, good.B); err != nil {
		t.Fatal(err)
	}
	if err := <-handled; err != nil || keep.last != (pingpong.Pong{ClientID: 1, MsgID: 2}) {
		t.Fatalf("Handle = %v, kept %+v", err, keep.last)
	}

	// A context that ends ends the wait, not the connection.
	wctx := testkit.NewWaitContext()
	go func() { handled <- c.Handle(wctx, &keep) }()
	wctx.Waiting(t)
	wctx.Cancel()
	if err := <-handled; !errors.Is(err, context.Canceled) {
		t.Fatalf("Handle with a context that ends = %v, want Canceled", err)
	}

	// What the peer sent before it closed comes first, then ErrClosed.
	if err := y.Send(ctx, good.B); err != nil {
		t.Fatal(err)
	}
	y.Close()
	keep = pongKeeper{}
	if err := c.Handle(ctx, &keep); err != nil || keep.last.MsgID != 2 {
		t.Fatalf("Handle before the close = %v, kept %+v", err, keep.last)
	}
	if err := c.Handle(ctx, &keep); !errors.Is(err, chanos.ErrClosed) {
		t.Fatalf("Handle after the peer's close = %v, want ErrClosed", err)
	}
}

// Receiving a message of a fixed size with Handle allocates nothing.
func TestHandleDoesNotAllocate(t *testing.T) {
	c, y := rawPeer(t)
	ctx := context.Background()
	var pong wire.Buffer
	(&pingpong.Pong{MsgID: 5}).Encode(&pong)
	keep := &pongKeeper{}
	allocs := testing.AllocsPerRun(100, func() {
		if err := y.Send(ctx, pong.B); err != nil {
			t.Fatal(err)
		}
		if err := c.Handle(ctx, keep); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 || keep.last.MsgID != 5 {
		t.Errorf("Handle allocates %v times (kept %+v), want 0", allocs, keep.last)
	}
}

// A payload travels the same whether the stubs build its frame on the
// stack (up to 256 bytes) or encode it into the connection's buffer, and
// both ways keep the bounds: every size around the switch, each way.
func TestPayloadsAroundStackLimit(t *testing.T) {
	forEach(t, func(t *testing.T, c, s *pingpong.Conn) {
		ctx := testkit.Context(t)
		got := make(chan pingpong.Data, 1)
		serve(t, s, &dataServer{got: got})
		for _, n := range []int{0, 1, 255, 256, 257, 4096, pingpong.MaxBouncePayloadLen} {
			payload := make([]byte, n)
			for i := range payload {
				payload[i] = byte(i*7 + n)
			}
			out, err := c.Bounce(ctx, payload)
			if err != nil || !bytes.Equal(out, payload) {
				t.Fatalf("bounce of %d bytes = %d bytes, %v", n, len(out), err)
			}
			if err := c.Send(ctx, &pingpong.Data{Seq: uint64(n), Payload: payload}); err != nil {
				t.Fatalf("send data of %d bytes: %v", n, err)
			}
			if m := <-got; m.Seq != uint64(n) || !bytes.Equal(m.Payload, payload) {
				t.Fatalf("data of %d bytes arrived as seq %d, %d bytes", n, m.Seq, len(m.Payload))
			}
		}
		if _, err := c.Bounce(ctx, make([]byte, pingpong.MaxBouncePayloadLen+1)); !errors.Is(err, wire.ErrBound) {
			t.Fatalf("bounce over the bound = %v, want wire.ErrBound", err)
		}
		// The connection goes on.
		if out, err := c.Bounce(ctx, []byte("ok")); err != nil || string(out) != "ok" {
			t.Fatalf("bounce after the refusal = %q, %v", out, err)
		}
	})
}

// dataServer bounces, and passes on each data message.
type dataServer struct {
	server
	got chan<- pingpong.Data
}

func (s *dataServer) Data(ctx context.Context, from *pingpong.Client, m pingpong.Data) error {
	m.Payload = bytes.Clone(m.Payload) // borrowed (@borrow): copied to keep
	s.got <- m
	return nil
}

// A bounce of 8 bytes over ump allocates only the payload the caller
// gets back: the handler borrows its argument (@borrow) and the frames
// are built on the stack.
func TestShortBounceAllocatesPayloadsOnly(t *testing.T) {
	c := servedOverUMP(t, &server{})
	ctx := context.Background()
	p := []byte("8 bytes!")
	allocs := testing.AllocsPerRun(200, func() {
		if out, err := c.Bounce(ctx, p); err != nil || string(out) != string(p) {
			t.Fatal(out, err)
		}
	})
	if allocs > 1 {
		t.Errorf("a bounce of 8 bytes allocates %v times, want 1", allocs)
	}
}

// keepingServer keeps every bounce payload it is handed.
type keepingServer struct {
	pingpong.UnimplementedServer
	mu   sync.Mutex
	kept [][]byte
}

func (s *keepingServer) Bounce(ctx context.Context, p []byte) ([]byte, error) {
	s.mu.Lock()
	s.kept = append(s.kept, p)
	s.mu.Unlock()
	return p, nil
}

// bounce is @borrow: a call run inline hands its handler a view into the
// receive buffer, which the next frame overwrites, but a call run in a
// goroutine of its own (chanos.Concurrent) gets a copy it may keep.
func TestBorrowOnlyInline(t *testing.T) {
	for _, concurrent := range []bool{false, true} {
		a, b, err := chanos.UMPPair(pingpong.Interface)
		if err != nil {
			t.Fatal(err)
		}
		c, s := pingpong.NewConn(a), pingpong.NewConn(b)
		srv := &keepingServer{}
		var opts []chanos.ServeOption
		if concurrent {
			opts = append(opts, chanos.Concurrent(2))
		}
		go s.Serve(context.Background(), srv, opts...)
		ctx := testkit.Context(t)
		const n = 20
		for i := range n {
			p := bytes.Repeat([]byte{byte(i)}, 600) // a bulk message each
			if out, err := c.Bounce(ctx, p); err != nil || !bytes.Equal(out, p) {
				t.Fatalf("bounce %d: %d bytes, %v", i, len(out), err)
			}
		}
		srv.mu.Lock()
		changed := 0
		for i, p := range srv.kept {
			if !bytes.Equal(p, bytes.Repeat([]byte{byte(i)}, 600)) {
				changed++
			}
		}
		srv.mu.Unlock()
		switch {
		case concurrent && changed > 0:
			t.Errorf("Concurrent: %d of %d kept payloads changed after their handler returned", changed, n)
		case !concurrent && changed == 0:
			t.Errorf("inline: no kept payload changed; the handler got copies, not views")
		}
		c.Close()
		s.Close()
	}
}

// slowFirstServer bounces; the first call's handler waits until release
// closes, long enough to be handed off, and reads its borrowed payload
// only after that, as the payload of calls served meanwhile arrived.
type slowFirstServer struct {
	pingpong.UnimplementedServer
	first   sync.Once
	running chan struct{} // closed once the first call runs
	release chan struct{}
}

func (s *slowFirstServer) Bounce(ctx context.Context, p []byte) ([]byte, error) {
	slow := false
	s.first.Do(func() { slow = true })
	if slow {
		close(s.running)
		<-s.release
	}
	return p, nil
}

// The frame of a call handed off to a goroutine of its own stays the
// call's: the readers after it, which serve other calls meanwhile, read
// into other buffers (taken out of the link, not copied), so the slow
// call's @borrow view still holds its payload when it replies. Over
// local, ump and net; the calls meanwhile are shorter than the slow one,
// so that a link reusing its buffer would put them in it.
func TestBorrowedPayloadSurvivesHandOff(t *testing.T) {
	forEach(t, borrowedPayloadSurvivesHandOff)
	t.Run("net", func(t *testing.T) {
		ln, err := stdnet.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		L := cnet.Listen(ln, nil)
		defer L.Close()
		ctx := testkit.Context(t)
		cl, err := cnet.Dial(ctx, ln.Addr().String(), nil)
		if err != nil {
			t.Fatal(err)
		}
		sl, err := L.Accept(ctx)
		if err != nil {
			cl.Close()
			t.Fatal(err)
		}
		c := pingpong.NewConn(chanos.NewConn(cl, pingpong.Interface))
		s := pingpong.NewConn(chanos.NewConn(sl, pingpong.Interface))
		defer c.Close()
		defer s.Close()
		borrowedPayloadSurvivesHandOff(t, c, s)
	})
}

func borrowedPayloadSurvivesHandOff(t *testing.T, c, s *pingpong.Conn) {
	srv := &slowFirstServer{running: make(chan struct{}), release: make(chan struct{})}
	wait := serve(t, s, srv)
	ctx := testkit.Context(t)
	first := bytes.Repeat([]byte{0xA5}, 700) // a bulk message over ump
	done := make(chan error, 1)
	go func() {
		out, err := c.Bounce(ctx, first)
		if err == nil && !bytes.Equal(out, first) {
			err = fmt.Errorf("the slow call's reply changed: %d bytes, first %#x", len(out), out[0])
		}
		done <- err
	}()
	<-srv.running
	for i := range 50 { // served by the readers after the hand-off
		p := bytes.Repeat([]byte{byte(i)}, 650-i)
		if out, err := c.Bounce(ctx, p); err != nil || !bytes.Equal(out, p) {
			t.Fatalf("bounce %d meanwhile: %d bytes, %v", i, len(out), err)
		}
	}
	close(srv.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	c.Close()
	if err := wait(); err != nil {
		t.Errorf("Serve = %v", err)
	}
}

// servedOverUMP returns a client over a ring pair whose other end
// Conn.Serve serves with srv until the test ends.
func servedOverUMP(t *testing.T, srv pingpong.Server) *pingpong.Conn {
	a, b, err := chanos.UMPPair(pingpong.Interface)
	if err != nil {
		t.Fatal(err)
	}
	c, s := pingpong.NewConn(a), pingpong.NewConn(b)
	t.Cleanup(func() { c.Close(); s.Close() })
	go s.Serve(context.Background(), srv)
	return c
}

// BounceAppend appends the reply to the caller's slice over every
// interconnect, returns that slice as it was on an error, and over ump
// allocates nothing once the slice has grown, whatever the size.
func TestAppendStub(t *testing.T) {
	forEach(t, func(t *testing.T, c, s *pingpong.Conn) {
		ctx := testkit.Context(t)
		serve(t, s, &server{})
		prefix := []byte("kept:")
		for _, n := range []int{0, 8, 300, 4096, pingpong.MaxBouncePayloadLen} {
			p := bytes.Repeat([]byte{byte(n)}, n)
			out, err := c.BounceAppend(ctx, p, prefix)
			if err != nil || !bytes.Equal(out, append(bytes.Clone(prefix), p...)) {
				t.Fatalf("BounceAppend of %d bytes = %d bytes, %v", n, len(out), err)
			}
		}
		dst := append(make([]byte, 0, 16), "x"...)
		out, err := c.BounceAppend(ctx, []byte("fail"), dst)
		var re *chanos.RemoteError
		if !errors.As(err, &re) || string(out) != "x" || &out[0] != &dst[0] {
			t.Fatalf("BounceAppend with an error reply = %q, %v; want dst as it was and the RemoteError", out, err)
		}
		if _, err := c.BounceAppend(ctx, make([]byte, pingpong.MaxBouncePayloadLen+1), nil); !errors.Is(err, wire.ErrBound) {
			t.Fatalf("BounceAppend over the bound = %v, want wire.ErrBound", err)
		}
	})
	c := servedOverUMP(t, &server{})
	ctx := context.Background()
	for _, n := range []int{8, 4096, pingpong.MaxBouncePayloadLen} {
		p := make([]byte, n)
		buf, _ := c.BounceAppend(ctx, p, nil)
		if allocs := testing.AllocsPerRun(50, func() {
			var err error
			if buf, err = c.BounceAppend(ctx, p, buf[:0]); err != nil || len(buf) != n {
				t.Fatal(len(buf), err)
			}
		}); allocs != 0 {
			t.Errorf("BounceAppend of %d bytes into a grown slice allocates %v times, want 0", n, allocs)
		}
	}
}
