package net_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/chanos/chanos/interconnect"
	cnet "github.com/chanos/chanos/interconnect/net"
	"github.com/chanos/chanos/interfaces/pingpong"
	"github.com/chanos/chanos/internal/testkit"
)

// A Receive that reads the connection itself ends with its context, at
// once, whether the context is canceled or runs past its deadline, and
// takes nothing from the connection: the frames sent next arrive whole
// and in order, on TLS, authenticated-only and plain links.
func TestReceiveContextEndsLeaveTheStream(t *testing.T) {
	for _, mode := range []string{"plain", "tls", "auth"} {
		t.Run(mode, func(t *testing.T) {
			noLeaks(t)
			so, co := (*cnet.Options)(nil), (*cnet.Options)(nil)
			if mode != "plain" {
				so, co = tlsPair(mode == "auth")
			}
			L := listen(t, so)
			cl, sl := connect(t, L, L.Addr().String(), co)
			ctx := testkit.Context(t)
			var in interconnect.Incoming
			for i := uint32(0); i < 20; i++ {
				var rctx context.Context
				var cancel context.CancelFunc
				if i%2 == 0 {
					rctx, cancel = context.WithTimeout(ctx, 5*time.Millisecond)
				} else {
					rctx, cancel = context.WithCancel(ctx)
					time.AfterFunc(5*time.Millisecond, cancel)
				}
				t0 := time.Now()
				err := sl.Receive(rctx, &in)
				cancel()
				if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
					t.Fatalf("round %d: a receive with nothing sent: %v, want its context's end", i, err)
				}
				if d := time.Since(t0); d > 2*time.Second {
					t.Fatalf("round %d: the receive returned %v after its context ended", i, d)
				}
				// Each receive cut short is followed by two frames, which
				// must arrive whole and in order on the same connection.
				if err := cl.SendFrame(ctx, frame(t, &pingpong.Ping{MsgID: 2 * i}), nil); err != nil {
					t.Fatal(err)
				}
				if err := cl.SendFrame(ctx, frame(t, &pingpong.Ping{MsgID: 2*i + 1}), nil); err != nil {
					t.Fatal(err)
				}
				for k := 2 * i; k < 2*i+2; k++ {
					if err := sl.Receive(ctx, &in); err != nil {
						t.Fatalf("frame %d: %v", k, err)
					}
					var m pingpong.Ping
					if err := in.Decode(&m); err != nil || m.MsgID != k {
						t.Fatalf("frame %d: got %+v, %v", k, m, err)
					}
				}
			}
			if n := cl.Resumes() + sl.Resumes(); n != 0 {
				t.Errorf("%d resumes: a context's end broke the TCP connection", n)
			}
		})
	}
}

// With nobody receiving, the link still reads: a sender's window frees
// as its peer acknowledges, and the peer's close is seen (Gone) within
// the keepalive period.
func TestReadWhileNobodyReceives(t *testing.T) {
	noLeaks(t)
	o := &cnet.Options{WindowFrames: 8, KeepAlive: 100 * time.Millisecond}
	L := listen(t, o)
	cl, sl := connect(t, L, L.Addr().String(), o)
	ctx := testkit.Context(t)
	// The client only sends, never receives: the acknowledgements of
	// the server's receives must be read for it to get past the window.
	got := make(chan error, 1)
	go func() {
		var in interconnect.Incoming
		for i := 0; i < 100; i++ {
			if err := sl.Receive(ctx, &in); err != nil {
				got <- err
				return
			}
		}
		got <- nil
	}()
	for i := uint32(0); i < 100; i++ {
		if err := cl.SendFrame(ctx, frame(t, &pingpong.Ping{MsgID: i}), nil); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	// Idle for a while: the link's own reader reads the keepalives.
	time.Sleep(300 * time.Millisecond)
	t0 := time.Now()
	sl.Close()
	select {
	case <-cl.Gone():
		t.Logf("the peer's close seen after %v with nobody receiving", time.Since(t0))
	case <-time.After(10 * time.Second):
		t.Fatal("the peer's close not seen with nobody receiving")
	}
	var in interconnect.Incoming
	if err := cl.Receive(ctx, &in); !errors.Is(err, interconnect.ErrClosed) {
		t.Errorf("receive after the peer's close: %v, want ErrClosed", err)
	}
}

// A frame that arrives slowly (a throttled network) is read by the
// link's own reader, not by a Receive that found it begun: that Receive
// still ends with its context, and the frame then arrives whole.
func TestReceiveContextEndsDuringASlowFrame(t *testing.T) {
	noLeaks(t)
	L := listen(t, nil)
	p := proxy(t, L)
	cl, sl := connect(t, L, p.Addr(), nil)
	ctx := testkit.Context(t)
	// A small frame first, so that Receive reads the connection itself
	// (the link's own reader gives it the turn once a Receive waits).
	if err := cl.SendFrame(ctx, frame(t, &pingpong.Ping{MsgID: 1}), nil); err != nil {
		t.Fatal(err)
	}
	var in interconnect.Incoming
	if err := sl.Receive(ctx, &in); err != nil {
		t.Fatal(err)
	}
	p.Throttle(256 << 10) // a 512 KiB frame takes about 2 s
	big := frame(t, &pingpong.Data{Payload: make([]byte, 512<<10)})
	sent := make(chan error, 1)
	go func() { sent <- cl.SendFrame(ctx, big, nil) }()
	cut := 0
	for {
		rctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		err := sl.Receive(rctx, &in)
		cancel()
		if err == nil {
			break
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("a receive while the frame arrives: %v", err)
		}
		cut++
	}
	if len(in.Frame) != len(big) {
		t.Fatalf("a frame of %d bytes, want %d", len(in.Frame), len(big))
	}
	if cut < 20 {
		t.Errorf("only %d receives ended with their 20 ms contexts while the frame took its time", cut)
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
}
