package seqpacket

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

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

// Gone is closed once the peer closes its end, though packets it sent
// before still wait to be received; they come first, then the end. Until
// then, packets arriving do not close it.
func TestLinkGone(t *testing.T) {
	a, b := pair(t, 256)
	la, lb := NewLink(a), NewLink(b)
	defer lb.Close()
	fds := countFDs(t)
	gone := lb.Gone()
	if lb.Gone() != gone {
		t.Fatal("Gone returned another channel the second time")
	}
	for i := range 3 {
		frame, _ := frameOf(t, uint16(i+1), []byte("queued"))
		if err := la.SendFrame(context.Background(), frame, nil); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-gone:
		t.Fatal("Gone closed while the peer is there")
	case <-time.After(50 * time.Millisecond):
	}
	la.Close()
	select {
	case <-gone:
	case <-time.After(5 * time.Second):
		t.Fatal("Gone not closed within 5s of the peer's close")
	}
	for i := range 3 {
		var in interconnect.Incoming
		if err := lb.Receive(context.Background(), &in); err != nil || in.Header.Msg != uint16(i+1) {
			t.Fatalf("receive %d after the peer's close = %v, msg %d", i, err, in.Header.Msg)
		}
	}
	var in interconnect.Incoming
	if err := lb.Receive(context.Background(), &in); !errors.Is(err, interconnect.ErrClosed) {
		t.Fatalf("receive past the queued packets = %v, want ErrClosed", err)
	}
	// The watch's duplicate of the socket has gone with the watch, and
	// the peer's socket with its close.
	if n := countFDs(t); n != fds-1 {
		t.Fatalf("%d descriptors open after the watch ended, want %d", n, fds-1)
	}
}

// This side's Close closes Gone too, and releases the watch's descriptor;
// Gone after Close is closed at once.
func TestLinkGoneOnClose(t *testing.T) {
	a, b := pair(t, 256)
	la, lb := NewLink(a), NewLink(b)
	defer la.Close()
	fds := countFDs(t)
	gone := lb.Gone()
	if n := countFDs(t); n != fds+1 {
		t.Fatalf("%d descriptors open while watching, want %d", n, fds+1)
	}
	lb.Close()
	select {
	case <-gone:
	case <-time.After(5 * time.Second):
		t.Fatal("Gone not closed within 5s of this side's close")
	}
	if n := countFDs(t); n != fds-1 {
		t.Fatalf("%d descriptors open after Close, want %d", n, fds-1)
	}
	c, _ := pair(t, 256)
	lc := NewLink(c)
	lc.Close()
	select {
	case <-lc.Gone():
	default:
		t.Fatal("Gone after Close is not closed")
	}
}

// countFDs returns how many descriptors the process has open.
func countFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}
