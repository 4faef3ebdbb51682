package net_test

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	mrand "math/rand/v2"
	stdnet "net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chanos/chanos/interconnect"
	cnet "github.com/chanos/chanos/interconnect/net"
	"github.com/chanos/chanos/interfaces/pingpong"
	"github.com/chanos/chanos/internal/testkit"
)

// authOnly returns identities' options with encryption off on both sides.
func authOnly(t *testing.T) (so, co *cnet.Options) {
	_, _, so, co = identities(t)
	so.TLS.AuthOnly, co.TLS.AuthOnly = true, true
	return so, co
}

// In the authenticated-only mode, frames of up to 100 KB (past the
// buffered reader and writer, which take the other path to the tag)
// stream both ways through a proxy that resets the connection at random
// points, the server's certificate chosen by the server name; the resets
// fall in the TLS handshakes, in the hellos, at the switch to clear
// records and in them.
func TestAuthStreamThroughCuts(t *testing.T) {
	testkit.NoLeaks(t)
	srv, _ := cnet.NewIdentity()
	cli, _ := cnet.NewIdentity()
	var admitted atomic.Int32
	so := &cnet.Options{TLS: &cnet.TLS{AuthOnly: true,
		Select: func(name string) *cnet.Identity {
			if name == "c0042" {
				return srv
			}
			return nil
		},
		Admit: func(name string, fp [32]byte) bool {
			return name == "c0042" && fp == cli.Fingerprint && admitted.Add(1) == 1
		},
	}}
	co := &cnet.Options{TLS: &cnet.TLS{AuthOnly: true, Identity: cli, Peer: srv.Fingerprint, ServerName: "c0042"}}
	for _, o := range []*cnet.Options{so, co} {
		o.RedialMin, o.RedialMax, o.WindowFrames, o.WindowBytes, o.MaxFrameSize = time.Millisecond, 10*time.Millisecond, 32, 256<<10, 128<<10
	}
	L := listen(t, so)
	p := proxy(t, L)
	p.Seed(7, 11)
	cl, sl := connect(t, L, p.Addr(), co)
	if sl.ServerName() != "c0042" || sl.PeerFingerprint() != cli.Fingerprint {
		t.Errorf("accepted %q with %x", sl.ServerName(), sl.PeerFingerprint())
	}
	// Cuts far enough apart that what a resume retransmits (both windows,
	// up to 512 KiB) mostly gets through.
	p.CutRandom(1, 2<<20)
	streamBothWays(t, cl, sl, 400, 100000)
	t.Logf("%d cuts, %d resumes", p.Cuts(), cl.Resumes())
	if cl.Resumes() < 20 {
		t.Errorf("only %d resumes", cl.Resumes())
	}
	if n := cl.AuthFailures() + sl.AuthFailures(); n != 0 {
		t.Errorf("%d records failed authentication on an honest path", n)
	}
}

// In the authenticated-only mode, messages and rpcs both ways arrive
// exactly once and in order through hundreds of resets.
func TestAuthCutsExactlyOnceInOrder(t *testing.T) {
	testkit.NoLeaks(t)
	so, co := authOnly(t)
	for _, o := range []*cnet.Options{so, co} {
		o.RedialMin, o.RedialMax, o.Grace, o.WindowFrames = time.Millisecond, 10*time.Millisecond, 20*time.Second, 64
	}
	L := listen(t, so)
	p := proxy(t, L)
	p.Seed(21, 5)
	cl, sl := connect(t, L, p.Addr(), co)
	// A handshake with both certificates is about 2 KB: most cuts fall
	// past it, some in it.
	const wantCuts = 200
	p.CutRandom(1, 10000)
	exactlyOnceInOrder(t, cl, sl, func() bool { return p.Cuts() < wantCuts })
	p.NoCuts()
	t.Logf("%d cuts, %d TCP connections", p.Cuts(), p.Accepted())
	if p.Cuts() < wantCuts {
		t.Errorf("only %d cuts", p.Cuts())
	}
}

// tamperProxy relays TCP connections to a target. On each connection, in
// each direction, it flips one bit of the byte at a random offset at or
// past from (past the TLS handshake and the hellos, so in the clear
// records of the authenticated-only mode); and it keeps the first bytes
// each dialing side sent.
type tamperProxy struct {
	ln     stdnet.Listener
	target string
	from   int64
	span   int64

	flips atomic.Int64
	mu    sync.Mutex
	rng   *mrand.Rand
	conns map[stdnet.Conn]struct{}
	sent  bytes.Buffer // from dialing sides, up to 1 MiB
	wg    sync.WaitGroup
}

func newTamperProxy(t *testing.T, target string, from, span int64) *tamperProxy {
	t.Helper()
	ln, err := stdnet.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tamperProxy{ln: ln, target: target, from: from, span: span, rng: mrand.New(mrand.NewPCG(3, 9)), conns: map[stdnet.Conn]struct{}{}}
	p.wg.Add(1)
	go p.loop()
	t.Cleanup(p.close)
	return p
}

func (p *tamperProxy) addr() string { return p.ln.Addr().String() }

// track records c to be closed with the proxy; false if it is closed.
func (p *tamperProxy) track(c stdnet.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *tamperProxy) loop() {
	defer p.wg.Done()
	for {
		a, err := p.ln.Accept()
		if err != nil {
			return
		}
		b, err := stdnet.Dial("tcp", p.target)
		if err != nil {
			a.Close()
			continue
		}
		if !p.track(a) || !p.track(b) {
			a.Close()
			b.Close()
			return
		}
		p.mu.Lock()
		up, down := p.from+p.rng.Int64N(p.span), p.from+p.rng.Int64N(p.span)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.copy(b, a, up, true)
		go p.copy(a, b, down, false)
	}
}

// copy relays src to dst, flipping a bit of the byte at offset at.
func (p *tamperProxy) copy(dst, src stdnet.Conn, at int64, up bool) {
	defer p.wg.Done()
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	var off int64
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if at >= off && at < off+int64(n) {
				buf[at-off] ^= 0x10
				p.flips.Add(1)
			}
			off += int64(n)
			if up {
				p.mu.Lock()
				if p.sent.Len() < 1<<20 {
					p.sent.Write(buf[:n])
				}
				p.mu.Unlock()
			}
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *tamperProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
}

// A bit flipped in flight in a clear record is caught by the record's
// tag: the frame is never delivered, the TCP connection is dropped and
// the link resumes, so that every frame arrives once, in order and
// intact. With encryption, TLS catches the same flips the same way.
func TestAuthTamperedRecordResumes(t *testing.T) {
	for _, mode := range []struct {
		name     string
		authOnly bool
	}{{"auth-only", true}, {"encrypted", false}} {
		t.Run(mode.name, func(t *testing.T) {
			testkit.NoLeaks(t)
			_, _, so, co := identities(t)
			for _, o := range []*cnet.Options{so, co} {
				o.TLS.AuthOnly = mode.authOnly
				o.RedialMin, o.RedialMax, o.WindowFrames = time.Millisecond, 10*time.Millisecond, 32
				// A flipped length within the maximum (a TLS record's, or
				// a tagged record's) has the receiver wait for that many
				// bytes while keepalives trickle in, until the record
				// progress rule ends the TCP connection: about 1.5 s at
				// this rate.
				o.KeepAlive, o.DeadAfter, o.MinRecordRate = 20*time.Millisecond, 500*time.Millisecond, 1<<20
			}
			L := listen(t, so)
			p := newTamperProxy(t, L.Addr().String(), 8<<10, 64<<10)
			cl, sl := connect(t, L, p.addr(), co)
			streamBothWays(t, cl, sl, 400, 8000)
			t.Logf("%d flips, %d and %d records failed authentication, %d resumes", p.flips.Load(), cl.AuthFailures(), sl.AuthFailures(), cl.Resumes())
			if cl.Resumes() < 5 {
				t.Errorf("%d resumes after %d flips", cl.Resumes(), p.flips.Load())
			}
			failed := cl.AuthFailures() + sl.AuthFailures()
			if mode.authOnly && (failed == 0 || failed > uint64(p.flips.Load())) {
				t.Errorf("%d records failed authentication after %d flips", failed, p.flips.Load())
			}
		})
	}
}

// Messages and rpcs, small records whose header and tag are most of
// their bytes, through flips: exactly once, in order.
func TestAuthTamperedSmallRecords(t *testing.T) {
	testkit.NoLeaks(t)
	so, co := authOnly(t)
	for _, o := range []*cnet.Options{so, co} {
		o.RedialMin, o.RedialMax, o.Grace, o.WindowFrames = time.Millisecond, 10*time.Millisecond, 20*time.Second, 64
		// A flipped length within the maximum has the receiver wait for
		// that many bytes while keepalives trickle in, until the record
		// progress rule ends the TCP connection: about 1.5 s at this
		// rate (with the byte rule alone, minutes).
		o.KeepAlive, o.DeadAfter, o.MinRecordRate = 20*time.Millisecond, 500*time.Millisecond, 1<<20
	}
	L := listen(t, so)
	p := newTamperProxy(t, L.Addr().String(), 4<<10, 16<<10)
	cl, sl := connect(t, L, p.addr(), co)
	exactlyOnceInOrder(t, cl, sl, func() bool { return cl.AuthFailures()+sl.AuthFailures() < 50 })
	t.Logf("%d flips, %d and %d records failed authentication, %d resumes", p.flips.Load(), cl.AuthFailures(), sl.AuthFailures(), cl.Resumes())
	if cl.AuthFailures()+sl.AuthFailures() < 50 {
		t.Errorf("%d records failed authentication after %d flips", cl.AuthFailures()+sl.AuthFailures(), p.flips.Load())
	}
}

// Encryption is off in the authenticated-only mode, and only there: a
// frame's bytes cross the wire as they are.
func TestAuthOnlyIsInTheClear(t *testing.T) {
	marker := []byte("a frame the wire may show, or not")
	for _, mode := range []struct {
		name     string
		authOnly bool
	}{{"auth-only", true}, {"encrypted", false}} {
		t.Run(mode.name, func(t *testing.T) {
			testkit.NoLeaks(t)
			_, _, so, co := identities(t)
			so.TLS.AuthOnly, co.TLS.AuthOnly = mode.authOnly, mode.authOnly
			L := listen(t, so)
			p := newTamperProxy(t, L.Addr().String(), 1<<40, 1)
			cl, sl := connect(t, L, p.addr(), co)
			ctx := testkit.Context(t)
			if err := cl.SendFrame(ctx, frame(t, &pingpong.BounceCall{Payload: marker}), nil); err != nil {
				t.Fatal(err)
			}
			var in interconnect.Incoming
			if err := sl.Receive(ctx, &in); err != nil {
				t.Fatal(err)
			}
			p.mu.Lock()
			seen := bytes.Contains(p.sent.Bytes(), marker)
			p.mu.Unlock()
			if seen != mode.authOnly {
				t.Errorf("the frame's bytes on the wire: %v, want %v", seen, mode.authOnly)
			}
		})
	}
}

// Wrong pins, clients not admitted and stolen connection ids are refused
// in the authenticated-only mode as with encryption.
func TestAuthRefusals(t *testing.T) { refusals(t, true) }

// A client of one mode and a server of the other do not connect: the
// dialing side learns why (ErrMode), and the refusal spends no
// admission. A client that asks for no mode (no ALPN) is taken for one
// that encrypts: refused for its mode by a server in the
// authenticated-only mode, and by one that encrypts only for its
// certificate.
func TestModeMismatch(t *testing.T) {
	testkit.NoLeaks(t)
	ctx := testkit.Context(t)
	for _, srvAuth := range []bool{false, true} {
		_, _, so, co := identities(t)
		so.TLS.AuthOnly = srvAuth
		co.TLS.AuthOnly = !srvAuth
		L := listen(t, so)
		if _, err := cnet.Dial(ctx, L.Addr().String(), co); !errors.Is(err, cnet.ErrMode) {
			t.Errorf("server auth-only %v, client auth-only %v: %v, want ErrMode", srvAuth, !srvAuth, err)
		}

		other, _ := cnet.NewIdentity()
		tc, err := tls.Dial("tcp", L.Addr().String(), &tls.Config{Certificates: []tls.Certificate{other.Cert}, InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
		if err != nil {
			t.Fatal(err)
		}
		h := make([]byte, 24+36)
		h[0] = 4
		binary.LittleEndian.PutUint32(h[4:], 36)
		copy(h[24:], "chnt")
		binary.LittleEndian.PutUint16(h[28:], 1)
		h[32] = 1 // an id
		binary.LittleEndian.PutUint32(h[48:], 1<<20)
		binary.LittleEndian.PutUint32(h[52:], 64)
		binary.LittleEndian.PutUint32(h[56:], 1<<20)
		if _, err := tc.Write(h); err != nil {
			t.Fatal(err)
		}
		reply := make([]byte, 28)
		_, err = io.ReadFull(bufio.NewReader(tc), reply)
		tc.Close()
		want := byte(4) // not admitted
		if srvAuth {
			want = 5 // the other mode
		}
		if err != nil || reply[0] != 5 || reply[24] != want {
			t.Errorf("server auth-only %v, a client without ALPN: % x, %v; want a reject with code %d", srvAuth, reply, err, want)
		}

		// The client of the right mode is admitted (once), the refusals
		// having spent nothing.
		co.TLS.AuthOnly = srvAuth
		cl, sl := connect(t, L, L.Addr().String(), co)
		cl.Close()
		sl.Close()
	}
}

// Whatever a dialing side sent on a TCP connection in the
// authenticated-only mode (handshake, hello, clear records), replayed on
// a new TCP connection, opens nothing: the TLS handshake fails before the
// hello is read, and the connection it was taken from goes on.
func TestAuthReplayedConnectionOpensNothing(t *testing.T) {
	testkit.NoLeaks(t)
	srv, _ := cnet.NewIdentity()
	cli, _ := cnet.NewIdentity()
	var asked atomic.Int32
	so := &cnet.Options{TLS: &cnet.TLS{Identity: srv, AuthOnly: true, Admit: func(_ string, fp [32]byte) bool {
		// Admits the client every time, so that only the handshake stops
		// a replay.
		asked.Add(1)
		return fp == cli.Fingerprint
	}}}
	co := &cnet.Options{TLS: &cnet.TLS{Identity: cli, Peer: srv.Fingerprint, AuthOnly: true}}
	L := listen(t, so)
	p := newTamperProxy(t, L.Addr().String(), 1<<40, 1)
	cl, sl := connect(t, L, p.addr(), co)
	ctx := testkit.Context(t)
	var in interconnect.Incoming
	for i := uint32(0); i < 10; i++ {
		if err := cl.SendFrame(ctx, frame(t, &pingpong.Ping{MsgID: i}), nil); err != nil {
			t.Fatal(err)
		}
		if err := sl.Receive(ctx, &in); err != nil {
			t.Fatal(err)
		}
	}
	p.mu.Lock()
	sent := append([]byte(nil), p.sent.Bytes()...)
	p.mu.Unlock()

	c, err := stdnet.Dial("tcp", L.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(sent); err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, c) // until the listener closes it
	if n := asked.Load(); n != 1 {
		t.Errorf("the listener was asked to admit %d connections, want 1", n)
	}
	if err := cl.SendFrame(ctx, frame(t, &pingpong.Ping{MsgID: 10}), nil); err != nil {
		t.Fatal(err)
	}
	if err := sl.Receive(ctx, &in); err != nil {
		t.Fatalf("the connection after the replay: %v", err)
	}
	if cl.Resumes() != 0 {
		t.Errorf("%d resumes", cl.Resumes())
	}
}
