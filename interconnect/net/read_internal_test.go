package net

import (
	"context"
	stdnet "net"
	"testing"
	"time"

	"github.com/chanos/chanos/interconnect"
	"github.com/chanos/chanos/wire"
)

// A frame that the background reader takes in between a Receive's look
// at the inbox and its taking of the reading turn is returned by that
// Receive, not left in the inbox while the Receive waits on the
// connection for a frame the peer will never send (the peer waits for an
// answer to it): the hang of an rpc client over net, about once in a
// million round trips under load, when the background reader held the
// turn as the reply came.
func TestFrameTakenInByBackgroundReaderIsReceived(t *testing.T) {
	ln, err := stdnet.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	L := Listen(ln, nil)
	defer L.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := Dial(ctx, L.Addr().String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := L.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	// c's background reader takes the turn, as after a keepalive tick,
	// and waits on the connection.
	c.kickReader()
	for c.rturn.TryLock() {
		c.rturn.Unlock()
		if ctx.Err() != nil {
			t.Fatal("the background reader never took the reading turn")
		}
		c.kickReader()
		time.Sleep(time.Millisecond)
	}
	var hooked bool
	testHookTakeTurn = func(l *Link) {
		if l != c || hooked {
			return
		}
		hooked = true
		// The reply comes now: the background reader takes it in and,
		// a Receive waiting, gives the turn up.
		f := make([]byte, wire.HeaderSize)
		wire.PutHeader(f, wire.Header{Size: wire.HeaderSize, Msg: 1})
		if err := s.SendFrame(ctx, f, nil); err != nil {
			t.Error(err)
			return
		}
		for {
			l.mu.Lock()
			in := len(l.inbox) - l.inboxHead
			l.mu.Unlock()
			if in > 0 && l.rturn.TryLock() {
				l.rturn.Unlock()
				return
			}
			if ctx.Err() != nil {
				t.Error("the background reader never took the frame in and gave the turn up")
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	defer func() { testHookTakeTurn = nil }()
	rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
	defer rcancel()
	var in interconnect.Incoming
	if err := c.Receive(rctx, &in); err != nil {
		t.Fatalf("Receive with a frame in the inbox: %v", err)
	}
	if !hooked {
		t.Fatal("the Receive found the frame without the race: the test set nothing up")
	}
	if in.Header.Msg != 1 {
		t.Fatalf("received message %d, want 1", in.Header.Msg)
	}
}
