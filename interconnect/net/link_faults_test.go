package net

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	stdnet "net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chanos/chanos/interconnect"
	"github.com/chanos/chanos/internal/testkit"
	"github.com/chanos/chanos/internal/testkit/faultproxy"
)

// These tests look inside the link (its inbox, its reader, its hellos),
// so they are in the package itself.

// testFrame returns a chanos frame of n bytes: a header that says so,
// and zeros.
func testFrame(n int) []byte {
	b := make([]byte, n)
	binary.LittleEndian.PutUint32(b, uint32(n))
	binary.LittleEndian.PutUint16(b[4:], 1)
	return b
}

// testListen starts a Listener on loopback, closed when the test ends.
func testListen(t *testing.T, o *Options) *Listener {
	t.Helper()
	ln, err := stdnet.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	L := Listen(ln, o)
	t.Cleanup(func() { L.Close() })
	return L
}

// testConnect dials addr (L's, or a proxy's in front of it) and accepts
// on L; both links are closed when the test ends.
func testConnect(t *testing.T, L *Listener, addr string, so, co *Options) (cl, sl *Link) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := Dial(ctx, addr, co)
	if err != nil {
		t.Fatal(err)
	}
	sl, err = L.Accept(ctx)
	if err != nil {
		cl.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close(); sl.Close() })
	return cl, sl
}

// testPair is a connected pair of links on loopback.
func testPair(t *testing.T, so, co *Options) (cl, sl *Link) {
	t.Helper()
	L := testListen(t, so)
	return testConnect(t, L, L.Addr().String(), so, co)
}

// withMode returns copies of so and co in mode: "plain", "tls" or
// "auth" (TLS.AuthOnly), pinning fresh identities.
func withMode(t *testing.T, mode string, so, co Options) (*Options, *Options) {
	t.Helper()
	if mode == "plain" {
		return &so, &co
	}
	srv, err := NewIdentity()
	if err != nil {
		t.Fatal(err)
	}
	cli, err := NewIdentity()
	if err != nil {
		t.Fatal(err)
	}
	auth := mode == "auth"
	so.TLS = &TLS{Identity: srv, AuthOnly: auth, Admit: func(_ string, fp [32]byte) bool { return fp == cli.Fingerprint }}
	co.TLS = &TLS{Identity: cli, Peer: srv.Fingerprint, AuthOnly: auth}
	return &so, &co
}

// A record that takes longer than DeadAfter to arrive keeps its TCP
// connection alive while its bytes come: the connection is taken for
// broken only when nothing at all is read for DeadAfter. Otherwise the
// record is cut short, sent again on the resumed connection, and cut
// short again, forever.
func TestSlowRecordKeepsConnectionAlive(t *testing.T) {
	const (
		rate = 128 << 10
		size = 160 << 10 // about 1.25 s at rate, 2.5 DeadAfters
	)
	for _, mode := range []string{"plain", "tls", "auth"} {
		t.Run(mode, func(t *testing.T) {
			o := Options{KeepAlive: 100 * time.Millisecond, DeadAfter: 500 * time.Millisecond, Grace: 20 * time.Second, RedialMin: time.Millisecond, Linger: 100 * time.Millisecond}
			so, co := withMode(t, mode, o, o)
			L := testListen(t, so)
			p, err := faultproxy.New(L.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Close() })
			cl, sl := testConnect(t, L, p.Addr(), so, co)
			p.Throttle(rate)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			sent := make(chan error, 1)
			go func() { sent <- cl.SendFrame(ctx, testFrame(size), nil) }()
			var in interconnect.Incoming
			err = sl.Receive(ctx, &in)
			t.Logf("TCP connections through the proxy: %d; resumes: client %d, server %d", p.Accepted(), cl.Resumes(), sl.Resumes())
			if err != nil {
				t.Fatalf("a frame of %d bytes at %d B/s did not arrive: %v", size, rate, err)
			}
			if len(in.Frame) != size {
				t.Fatalf("a frame of %d bytes arrived, not %d", len(in.Frame), size)
			}
			if err := <-sent; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// The inbox keeps no more room than the window needs while the receiver
// lags behind, however long it does: it never empties here (a frame is
// taken only while another waits behind it).
func TestInboxStaysBoundedWhileReceiverLags(t *testing.T) {
	o := &Options{WindowFrames: 16}
	cl, sl := testPair(t, o, o)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 3000
	sent := make(chan error, 1)
	go func() {
		f := testFrame(64)
		for i := 0; i < n; i++ {
			if err := cl.SendFrame(ctx, f, nil); err != nil {
				sent <- fmt.Errorf("send %d: %w", i, err)
				return
			}
		}
		sent <- nil
	}()
	var in interconnect.Incoming
	for i := 0; i < n; i++ {
		for i < n-1 && sl.Pending() < 2 {
			if ctx.Err() != nil {
				t.Fatalf("frame %d: %v", i, ctx.Err())
			}
			time.Sleep(100 * time.Microsecond)
		}
		if err := sl.Receive(ctx, &in); err != nil {
			t.Fatalf("receive %d: %v", i, err)
		}
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	sl.mu.Lock()
	c := cap(sl.inbox)
	sl.mu.Unlock()
	t.Logf("the inbox has room for %d frames", c)
	if c > 16*o.WindowFrames {
		t.Errorf("the inbox grew to room for %d frames for a window of %d, after %d frames", c, o.WindowFrames, n)
	}
}

// After a resume each side writes its acknowledgement at once: the
// acknowledgements written on the broken connection may be lost, and a
// sender whose window they would have freed must not wait for the next
// keepalive.
func TestAckFollowsResume(t *testing.T) {
	o := &Options{WindowFrames: 8, KeepAlive: 4 * time.Second, DeadAfter: 16 * time.Second, RedialMin: time.Millisecond, RedialMax: 5 * time.Millisecond}
	L := testListen(t, o)
	p, err := faultproxy.New(L.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	cl, sl := testConnect(t, L, p.Addr(), o, o)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	f := testFrame(32)
	for i := 0; i < 8; i++ {
		if err := cl.SendFrame(ctx, f, nil); err != nil {
			t.Fatal(err)
		}
	}
	for sl.Pending() < 8 {
		if ctx.Err() != nil {
			t.Fatal("the frames did not arrive")
		}
		time.Sleep(time.Millisecond)
	}
	// The acknowledgements of the frames taken now are lost in the proxy.
	p.Stall()
	var in interconnect.Incoming
	for i := 0; i < 8; i++ {
		if err := sl.Receive(ctx, &in); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond)
	sent := make(chan time.Time, 1)
	go func() {
		if err := cl.SendFrame(ctx, f, nil); err != nil {
			t.Error(err)
		}
		sent <- time.Now()
	}()
	time.Sleep(50 * time.Millisecond)
	p.Cut()
	p.Resume()
	for cl.Resumes() == 0 || sl.Resumes() == 0 {
		if ctx.Err() != nil {
			t.Fatal("no resume")
		}
		time.Sleep(time.Millisecond)
	}
	resumed := time.Now()
	var at time.Time
	select {
	case at = <-sent:
	case <-ctx.Done():
		t.Fatal("the send never found room")
	}
	if d := at.Sub(resumed); d > o.KeepAlive/2 {
		t.Errorf("the sender waited %v after the resume (a keepalive comes every %v) for an acknowledgement of frames taken before it", d.Round(time.Millisecond), o.KeepAlive)
	}
}

// When both sides close at once, neither waits for its Linger: each
// takes the other's close for the end of the exchange. A link both sides
// closed in order ends closed on both, never "peer died": whichever side
// is done first reads the TCP connection to its end before it closes it
// (a socket closed with the peer's bytes unread in it resets the
// connection, dropping the close in flight), and a side whose close was
// acknowledged takes the peer's end of the TCP connection for the end of
// the exchange, not for a break to resume (docs/net.md, "Close"). Under
// TLS, and in the authenticated-only mode, each lingers on the TCP
// connection itself.
func TestSimultaneousCloseDoesNotLinger(t *testing.T) {
	testkit.NoLeaks(t)
	for _, mode := range []string{"plain", "tls", "auth"} {
		t.Run(mode, func(t *testing.T) {
			o := Options{Linger: 3 * time.Second}
			so, co := withMode(t, mode, o, o)
			rounds := 200
			if mode != "plain" {
				rounds = 50 // a TLS handshake each
			}
			slow := 0
			for i := 0; i < rounds; i++ {
				cl, sl := testPair(t, so, co)
				for _, l := range []*Link{cl, sl} {
					l.mu.Lock()
					c := l.conn
					l.mu.Unlock()
					if _, ok := rawConn(c).(*stdnet.TCPConn); !ok {
						t.Fatalf("Close would linger on a %T, not on the TCP connection", rawConn(c))
					}
				}
				var wg sync.WaitGroup
				var dc, ds time.Duration
				wg.Add(2)
				go func() { defer wg.Done(); t0 := time.Now(); cl.Close(); dc = time.Since(t0) }()
				go func() { defer wg.Done(); t0 := time.Now(); sl.Close(); ds = time.Since(t0) }()
				wg.Wait()
				if dc > o.Linger/2 || ds > o.Linger/2 {
					slow++
					t.Logf("round %d: the client's Close took %v, the server's %v", i, dc, ds)
				}
				for _, side := range []struct {
					name string
					l    *Link
				}{{"client", cl}, {"server", sl}} {
					if err := side.l.Err(); !errors.Is(err, interconnect.ErrClosed) {
						t.Errorf("round %d: the %s's link ended with %v", i, side.name, err)
					}
				}
			}
			if slow > 0 {
				t.Errorf("%d of %d simultaneous closes waited for the Linger", slow, rounds)
			}
		})
	}
}

// testReadRecord reads the next record's header from c, past any ACK
// records: its type and sequence number; recAck when the stream ends or
// the read fails (err).
func testReadRecord(c stdnet.Conn) (typ uint8, seq uint64, err error) {
	hb := make([]byte, recHeaderSize)
	for {
		if _, err := io.ReadFull(c, hb); err != nil {
			return recAck, 0, err
		}
		h := parseHeader(hb)
		if h.length > 0 {
			if _, err := io.CopyN(io.Discard, c, int64(h.length)); err != nil {
				return recAck, 0, err
			}
		}
		if h.typ != recAck {
			return h.typ, h.seq, nil
		}
	}
}

// Close, its close acknowledged, shuts down its TCP connection's writing
// and reads until the peer closes its side too (docs/net.md, "Close"):
// the peer reads the close and then the end of the stream, never a reset,
// although its own records may lie unread on this side. A peer that never
// closes holds Close for its Linger, no longer; one that floods it with
// records, not even that long.
func TestCloseLingersUntilPeerEnds(t *testing.T) {
	testkit.NoLeaks(t)
	const linger = 1500 * time.Millisecond
	for _, peer := range []string{"closes", "stays", "floods"} {
		t.Run(peer, func(t *testing.T) {
			raw, sl := testRawPeer(t, &Options{Linger: linger})
			took := make(chan time.Duration, 1)
			go func() { t0 := time.Now(); sl.Close(); took <- time.Since(t0) }()
			raw.SetReadDeadline(time.Now().Add(5 * time.Second))
			typ, seq, err := testReadRecord(raw)
			if err != nil || typ != recClose {
				t.Fatalf("the link's close: a record of type %d, %v", typ, err)
			}
			acks := bytes.Repeat(testRecord(recAck, 0, seq, nil), 100)
			if _, err := raw.Write(acks); err != nil {
				t.Fatal(err)
			}
			switch peer {
			case "closes":
				if typ, _, err := testReadRecord(raw); err != io.EOF {
					t.Fatalf("after the close: a record of type %d, %v; want the end of the stream", typ, err)
				}
				select {
				case d := <-took:
					t.Fatalf("Close returned %v after it began, before the peer's end", d)
				case <-time.After(200 * time.Millisecond):
				}
				raw.Write(acks) // read and dropped
				raw.Close()
				if d := <-took; d > linger/2 {
					t.Errorf("Close took %v, its Linger %v, with a peer that closed after 200 ms", d, linger)
				}
			case "stays":
				d := <-took
				if d < linger/2 || d > linger+time.Second {
					t.Errorf("Close took %v, with a peer that acknowledged its close and never closed; its Linger is %v", d, linger)
				}
			case "floods":
				flooded := make(chan struct{})
				go func() {
					defer close(flooded)
					b := bytes.Repeat(testRecord(recAck, 0, seq, nil), (64<<10)/recHeaderSize)
					for {
						if _, err := raw.Write(b); err != nil {
							return
						}
					}
				}()
				d := <-took
				raw.Close()
				<-flooded
				if d > linger/2 {
					t.Errorf("Close took %v, its Linger %v, under a flood of acknowledgements", d, linger)
				}
			}
			if err := sl.Err(); !errors.Is(err, interconnect.ErrClosed) {
				t.Errorf("the link ended with %v", err)
			}
		})
	}
}

// A peer that had read this side's close before it closed sends no close
// of its own: it acknowledges this side's, ends its TCP connection and
// forgets the connection. The dialing side takes that end for the end of
// the exchange, not for a break: it neither redials (the peer would
// refuse the resume) nor ends "peer died".
func TestAckedCloseIsNotResumed(t *testing.T) {
	testkit.NoLeaks(t)
	ln, err := stdnet.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	conns := make(chan stdnet.Conn)
	go func() {
		defer close(conns)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns <- c
		}
	}()
	o := &Options{Linger: 3 * time.Second, RedialMin: time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := 0; i < 20; i++ {
		dialed := make(chan *Link, 1)
		go func() {
			l, err := Dial(ctx, ln.Addr().String(), o)
			if err != nil {
				t.Error(err)
			}
			dialed <- l
		}()
		c := <-conns
		c.SetDeadline(time.Now().Add(5 * time.Second))
		b := make([]byte, recHeaderSize+helloSize)
		if _, err := io.ReadFull(c, b); err != nil {
			t.Fatal(err)
		}
		h, err := parseHello(parseHeader(b), b[recHeaderSize:])
		if err != nil {
			t.Fatal(err)
		}
		reply := hello{id: h.id, maxFrame: 1 << 20, winFrames: 64, winBytes: 1 << 20}
		if _, err := c.Write(reply.encode()); err != nil {
			t.Fatal(err)
		}
		cl := <-dialed
		if cl == nil {
			c.Close()
			return
		}
		closed := make(chan struct{})
		go func() { cl.Close(); close(closed) }()
		typ, seq, err := testReadRecord(c)
		if err != nil || typ != recClose {
			t.Fatalf("the link's close: a record of type %d, %v", typ, err)
		}
		c.Write(testRecord(recAck, 0, seq, nil))
		c.Close()
		<-closed
		if err := cl.Err(); !errors.Is(err, interconnect.ErrClosed) {
			t.Errorf("round %d: the link ended with %v", i, err)
		}
		select {
		case c := <-conns:
			c.Close()
			t.Fatalf("round %d: the link redialed after its close was acknowledged", i)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// A connection refused as busy (the accept backlog full) spends no
// admission: its client can try again once there is room.
func TestBusyRefusalKeepsAdmission(t *testing.T) {
	g := NewGrants(time.Minute, 10, time.Second)
	defer g.Close()
	L := testListen(t, &Options{TLS: g.TLS(), AcceptBacklog: 1, Linger: 100 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	mk := func() *Identity {
		id, err := NewIdentity()
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	s1, c1, s2, c2 := mk(), mk(), mk(), mk()
	g.Add("one", s1, c1.Fingerprint, false, 1)
	g.Add("two", s2, c2.Fingerprint, false, 2)
	dial := func(name string, c, s *Identity) (*Link, error) {
		return Dial(ctx, L.Addr().String(), &Options{TLS: &TLS{Identity: c, Peer: s.Fingerprint, ServerName: name}, Linger: 100 * time.Millisecond})
	}
	l1, err := dial("one", c1, s1)
	if err != nil {
		t.Fatal(err)
	}
	defer l1.Close()
	if l, err := dial("two", c2, s2); err == nil {
		l.Close()
		t.Fatal("a connection past the accept backlog was not refused")
	} else if errors.Is(err, ErrAuth) {
		t.Fatalf("a connection past the accept backlog: %v, not busy", err)
	}
	a1, err := L.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer a1.Close()
	l2, err := dial("two", c2, s2)
	if err != nil {
		t.Fatalf("a connection refused as busy could not open once there was room: %v", err)
	}
	l2.Close()
}

// testRawHello opens a TCP connection to addr and exchanges hellos for a
// new connection, returning the connection.
func testRawHello(t *testing.T, addr string) stdnet.Conn {
	t.Helper()
	c, err := stdnet.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	var id [16]byte
	rand.Read(id[:])
	h := hello{id: id, maxFrame: 1 << 20, winFrames: 64, winBytes: 1 << 20}
	if _, err := c.Write(h.encode()); err != nil {
		t.Fatal(err)
	}
	reply := make([]byte, recHeaderSize+helloSize)
	if _, err := io.ReadFull(c, reply); err != nil || reply[0] != recHello {
		t.Fatalf("the hello's reply: % x, %v", reply, err)
	}
	return c
}

// testRawPeer listens with o and connects to it as a raw peer that has
// said its hello: its TCP connection, and the link it made on the
// accepting side, closed when the test ends.
func testRawPeer(t *testing.T, o *Options) (stdnet.Conn, *Link) {
	t.Helper()
	L := testListen(t, o)
	raw := testRawHello(t, L.Addr().String())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sl, err := L.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sl.Close() })
	return raw, sl
}

func testRecord(typ uint8, seq, ack uint64, p []byte) []byte {
	b := make([]byte, recHeaderSize+len(p))
	putHeader(b, typ, len(p), seq, ack)
	copy(b[recHeaderSize:], p)
	return b
}

// After its CLOSE a peer sends only acknowledgements: a frame or another
// close after it is a protocol violation, and is not delivered.
func TestRecordAfterPeerCloseIsViolation(t *testing.T) {
	for _, after := range []string{"data", "close"} {
		t.Run(after, func(t *testing.T) {
			raw, sl := testRawPeer(t, &Options{Linger: 100 * time.Millisecond})
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			s := testRecord(recData, 1, 0, testFrame(16))
			s = append(s, testRecord(recClose, 2, 0, nil)...)
			if after == "data" {
				s = append(s, testRecord(recData, 3, 0, testFrame(20))...)
			} else {
				s = append(s, testRecord(recClose, 3, 0, nil)...)
			}
			s = append(s, testRecord(recAck, 0, 0, nil)...)
			if _, err := raw.Write(s); err != nil {
				t.Fatal(err)
			}
			for {
				var in interconnect.Incoming
				rctx, rcancel := context.WithTimeout(ctx, 200*time.Millisecond)
				err := sl.Receive(rctx, &in)
				rcancel()
				if err != nil {
					break
				}
				if len(in.Frame) != 16 {
					t.Errorf("a frame of %d bytes after the peer's close was delivered", len(in.Frame))
				}
			}
			for sl.Err() == nil && ctx.Err() == nil {
				time.Sleep(5 * time.Millisecond)
			}
			if err := sl.Err(); !errors.Is(err, interconnect.ErrProtocol) {
				t.Errorf("a %s record after the peer's close: the link ended with %v, not a protocol violation", after, err)
			}
		})
	}
}

// A hello whose record header has flags or reserved bytes set is
// malformed: the accepting side refuses it (code 2), and neither side's
// hello parser accepts it.
func TestHelloHeaderFlagsRefused(t *testing.T) {
	L := testListen(t, &Options{Linger: 100 * time.Millisecond})
	for _, at := range []int{1, 2, 3} {
		var id [16]byte
		rand.Read(id[:])
		h := hello{id: id, maxFrame: 1 << 20, winFrames: 64, winBytes: 1 << 20}
		b := h.encode()
		b[at] = 0x80
		if _, err := parseHello(parseHeader(b), b[recHeaderSize:]); err == nil {
			t.Errorf("parseHello accepted a hello with header byte %d = 0x80", at)
		}
		c, err := stdnet.Dial("tcp", L.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(b); err != nil {
			t.Fatal(err)
		}
		reply := make([]byte, recHeaderSize+4)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = io.ReadFull(c, reply)
		c.Close()
		if err != nil || reply[0] != recReject || binary.LittleEndian.Uint32(reply[recHeaderSize:]) != rejectBadHello {
			t.Errorf("a hello with header byte %d = 0x80: answered % x (%v), not a reject of a bad hello", at, reply, err)
		}
	}
}

// testLog records the messages of a logger, with the time of each.
type testLog struct {
	mu   sync.Mutex
	msgs []string
	at   []time.Time
}

func (h *testLog) Enabled(context.Context, slog.Level) bool { return true }

func (h *testLog) Handle(_ context.Context, r slog.Record) error {
	m := r.Message
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "err" {
			m += ": " + a.Value.String()
		}
		return true
	})
	h.mu.Lock()
	h.msgs = append(h.msgs, m)
	h.at = append(h.at, time.Now())
	h.mu.Unlock()
	return nil
}

func (h *testLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *testLog) WithGroup(string) slog.Handler      { return h }

// Once Close (or End, then Close) has returned, nothing of the link runs
// on: the liveness watch of its last TCP connection is stopped too, and
// never reports that connection broken.
func TestCloseStopsConnectionWatch(t *testing.T) {
	for _, how := range []string{"Close", "End"} {
		t.Run(how, func(t *testing.T) {
			h := &testLog{}
			// No keepalive tick wakes the background reader, idle while
			// Receive reads, before the link ends.
			so := &Options{KeepAlive: 2 * time.Second, DeadAfter: 400 * time.Millisecond, Logger: slog.New(h)}
			co := &Options{KeepAlive: 2 * time.Second, DeadAfter: 400 * time.Millisecond}
			cl, sl := testPair(t, so, co)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := cl.SendFrame(ctx, testFrame(16), nil); err != nil {
				t.Fatal(err)
			}
			var in interconnect.Incoming
			if err := sl.Receive(ctx, &in); err != nil {
				t.Fatal(err)
			}
			if how == "Close" {
				// The peer's close is read by Receive, not by the
				// background reader.
				closed := make(chan struct{})
				go func() { cl.Close(); close(closed) }()
				defer func() { <-closed }()
				for sl.Receive(ctx, &in) == nil {
				}
			} else {
				sl.End(interconnect.Ended(interconnect.ErrPeerDied, errors.New("the peer died")))
			}
			sl.Close()
			closed := time.Now()
			sl.mu.Lock()
			r := sl.rcur
			sl.mu.Unlock()
			if r != nil && !r.stopped() {
				t.Errorf("after %s returned, the link still reads a TCP connection", how)
			}
			time.Sleep(2 * so.DeadAfter)
			h.mu.Lock()
			defer h.mu.Unlock()
			for i, m := range h.msgs {
				if h.at[i].After(closed) && strings.Contains(m, "broke") {
					t.Errorf("%v after %s returned: %q", h.at[i].Sub(closed).Round(time.Millisecond), how, m)
				}
			}
		})
	}
}

// Listener.Close closes the connections not yet accepted together: it
// waits for at most one Linger, not one for each.
func TestListenerCloseLingersOnce(t *testing.T) {
	const n = 4
	o := &Options{Linger: time.Second}
	ln, err := stdnet.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	L := Listen(ln, o)
	defer L.Close()
	// Raw peers, which never acknowledge a close.
	for i := 0; i < n; i++ {
		testRawHello(t, L.Addr().String())
	}
	for len(L.accepted) < n {
		time.Sleep(time.Millisecond)
	}
	t0 := time.Now()
	L.Close()
	if d := time.Since(t0); d > (n-1)*o.Linger {
		t.Errorf("Close of a listener holding %d connections not accepted took %v, with a Linger of %v", n, d.Round(time.Millisecond), o.Linger)
	}
}

// A record whose length was corrupted on the way is not waited out while
// the peer's keepalives trickle in as its body: the TCP connection is
// taken for broken once no record has completed within DeadAfter plus
// the record's time at MinRecordRate. Bytes alone keep it alive only
// with the rule turned off.
func TestCorruptedLengthIsNotWaitedOut(t *testing.T) {
	for _, rate := range []int{1 << 20, -1} {
		t.Run(fmt.Sprintf("rate=%d", rate), func(t *testing.T) {
			raw, _ := testRawPeer(t, &Options{KeepAlive: 50 * time.Millisecond, DeadAfter: 300 * time.Millisecond,
				MinRecordRate: rate, Grace: 10 * time.Second, Linger: 100 * time.Millisecond})
			// A data record's header that says 512 KiB, then a trickle,
			// as of keepalives swallowed into its body.
			hdr := make([]byte, recHeaderSize)
			putHeader(hdr, recData, 512<<10, 1, 0)
			if _, err := raw.Write(hdr); err != nil {
				t.Fatal(err)
			}
			stop := make(chan struct{})
			trickled := make(chan struct{})
			go func() {
				defer close(trickled)
				tick := time.NewTicker(20 * time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-stop:
						return
					case <-tick.C:
						if _, err := raw.Write(make([]byte, 8)); err != nil {
							return
						}
					}
				}
			}()
			defer func() { close(stop); <-trickled }()
			limit := 5 * time.Second
			if rate < 0 {
				limit = 2 * time.Second
			}
			t0 := time.Now()
			raw.SetReadDeadline(t0.Add(limit))
			_, err := io.Copy(io.Discard, raw) // the link's keepalives, until it drops the connection
			took := time.Since(t0)
			dropped := err == nil || !errors.Is(err, os.ErrDeadlineExceeded)
			switch {
			case rate > 0 && !dropped:
				t.Errorf("the connection outlived %v of a trickling record: %v", limit, err)
			case rate < 0 && dropped:
				t.Errorf("with the rule off, the connection ended after %v: %v", took, err)
			}
			t.Logf("rate %d: connection ended %v after %v", rate, dropped, took)
		})
	}
}
