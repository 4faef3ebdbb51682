package seqpacket

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/chanos/chanos/interconnect"
	"github.com/chanos/chanos/wire"
)

// frameOf encodes a one-way message of number msg with body and caps.
func frameOf(t *testing.T, msg uint16, body []byte, caps ...wire.Cap) ([]byte, []wire.Cap) {
	t.Helper()
	frame := make([]byte, wire.HeaderSize+len(body))
	copy(frame[wire.HeaderSize:], body)
	wire.PutHeader(frame, wire.Header{Size: uint32(len(frame)), Msg: msg, NCaps: uint8(len(caps))})
	return frame, caps
}

func TestLinkFramesAndCaps(t *testing.T) {
	a, b := pair(t, 256)
	la, lb := NewLink(a), NewLink(b)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	frame, caps := frameOf(t, 3, []byte("body"), w)
	if err := la.SendFrame(context.Background(), frame, caps); err != nil {
		t.Fatal(err)
	}
	var in interconnect.Incoming
	if err := lb.Receive(context.Background(), &in); err != nil {
		t.Fatal(err)
	}
	if in.Kind != wire.KindMessage || in.Header.Msg != 3 || string(in.Frame[wire.HeaderSize:]) != "body" || len(in.Caps) != 1 {
		t.Fatalf("received %+v", in)
	}
	wire.CloseCaps(in.Caps)
}

// A receive or a send that waits ends with its context, and the link
// stays usable.
func TestLinkContextEndsWait(t *testing.T) {
	a, b := pair(t, 256)
	la, lb := NewLink(a), NewLink(b)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		var in interconnect.Incoming
		errc <- lb.Receive(ctx, &in)
	}()
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Receive after cancel = %v, want context.Canceled", err)
	}
	// Fill the peer's queue, then a send waits until its context ends.
	frame, _ := frameOf(t, 1, make([]byte, 200))
	n := 0
	for ; n < 100000; n++ {
		sent, err := la.TrySendFrame(frame, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !sent {
			break
		}
	}
	if n == 100000 {
		t.Fatal("the socket's queue never filled")
	}
	sctx, scancel := context.WithCancel(context.Background())
	go func() { errc <- la.SendFrame(sctx, frame, nil) }()
	scancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("SendFrame on a full queue after cancel = %v, want context.Canceled", err)
	}
	// Both directions work again: the deadlines were cleared.
	var in interconnect.Incoming
	for i := 0; i < n; i++ {
		if err := lb.Receive(context.Background(), &in); err != nil {
			t.Fatalf("receive %d of %d: %v", i, n, err)
		}
	}
	if err := la.SendFrame(context.Background(), frame, nil); err != nil {
		t.Fatal(err)
	}
	if err := lb.Receive(context.Background(), &in); err != nil {
		t.Fatal(err)
	}
}

// A packet that is not a frame, or whose header counts other
// capabilities than came with it, ends the link with ErrProtocol; the
// descriptors are closed and the peer sees the end.
func TestLinkBadPackets(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	good, _ := frameOf(t, 1, nil)
	for _, tc := range []struct {
		name  string
		frame []byte
		caps  []wire.Cap
	}{
		{"short", []byte("abc"), nil},
		{"caps not counted", good, []wire.Cap{w}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := pair(t, 256)
			lb := NewLink(b)
			if err := a.Send(tc.frame, tc.caps); err != nil {
				t.Fatal(err)
			}
			var in interconnect.Incoming
			if err := lb.Receive(context.Background(), &in); !errors.Is(err, interconnect.ErrProtocol) {
				t.Fatalf("Receive = %v, want ErrProtocol", err)
			}
			if _, _, err := a.Receive(); err == nil {
				t.Fatal("the peer's socket is still open")
			}
		})
	}
}

// Once closed, the link's calls report ErrClosed; the peer's too.
func TestLinkClose(t *testing.T) {
	a, b := pair(t, 256)
	la, lb := NewLink(a), NewLink(b)
	if err := la.Close(); err != nil {
		t.Fatal(err)
	}
	frame, _ := frameOf(t, 1, nil)
	if err := la.SendFrame(context.Background(), frame, nil); !errors.Is(err, interconnect.ErrClosed) {
		t.Fatalf("SendFrame after Close = %v, want ErrClosed", err)
	}
	var in interconnect.Incoming
	if err := lb.Receive(context.Background(), &in); !errors.Is(err, interconnect.ErrClosed) {
		t.Fatalf("peer's Receive = %v, want ErrClosed", err)
	}
}
