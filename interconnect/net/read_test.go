package net_test

import (
	"bytes"
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
	inEachMode(t, func(t *testing.T, so, co *cnet.Options) {
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

// With nobody receiving, the link still reads: a sender's window frees
// as its peer acknowledges, and the peer's close is seen (Gone) within
// the keepalive period.
func TestReadWhileNobodyReceives(t *testing.T) {
	testkit.NoLeaks(t)
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

// A frame that arrives slowly (a throttled network) is read in pieces by
// Receives whose contexts end before it has all come, on TLS,
// authenticated-only and plain links: each such Receive ends with its
// context, the next goes on where it stopped, and the frame arrives
// whole, byte for byte, on the same TCP connection, followed by the next.
func TestReceiveContextEndsDuringASlowFrame(t *testing.T) {
	inEachMode(t, func(t *testing.T, so, co *cnet.Options) {
		L := listen(t, so)
		p := proxy(t, L)
		cl, sl := connect(t, L, p.Addr(), co)
		ctx := testkit.Context(t)
		var in interconnect.Incoming
		passOne(t, ctx, cl, sl, &in)
		p.Throttle(256 << 10) // a 256 KiB frame takes about 1 s
		payload := make([]byte, 256<<10)
		for i := range payload {
			payload[i] = byte(i % 251)
		}
		big := frame(t, &pingpong.Data{Payload: payload})
		sent := make(chan error, 1)
		go func() {
			if err := cl.SendFrame(ctx, big, nil); err != nil {
				sent <- err
				return
			}
			sent <- cl.SendFrame(ctx, frame(t, &pingpong.Ping{MsgID: 2}), nil)
		}()
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
		if !bytes.Equal(in.Frame, big) {
			t.Fatalf("a frame of %d bytes, not the %d sent", len(in.Frame), len(big))
		}
		if cut < 10 {
			t.Errorf("only %d receives ended with their 20 ms contexts while the frame took its time", cut)
		}
		if err := sl.Receive(ctx, &in); err != nil {
			t.Fatal(err)
		}
		var m pingpong.Ping
		if err := in.Decode(&m); err != nil || m.MsgID != 2 {
			t.Fatalf("the frame after: %+v, %v", m, err)
		}
		if err := <-sent; err != nil {
			t.Fatal(err)
		}
		if n := cl.Resumes() + sl.Resumes(); n != 0 {
			t.Errorf("%d resumes: a receive cut short broke the TCP connection", n)
		}
		t.Logf("%d receives cut short while the frame came", cut)
	})
}

// inEachMode runs f as a subtest on plain, TLS and authenticated-only
// links, with the options of the listening and the dialing side, and
// checks that it leaks nothing.
func inEachMode(t *testing.T, f func(t *testing.T, so, co *cnet.Options)) {
	for _, mode := range []string{"plain", "tls", "auth"} {
		t.Run(mode, func(t *testing.T) {
			testkit.NoLeaks(t)
			so, co := (*cnet.Options)(nil), (*cnet.Options)(nil)
			if mode != "plain" {
				so, co = tlsPair(mode == "auth")
			}
			f(t, so, co)
		})
	}
}
