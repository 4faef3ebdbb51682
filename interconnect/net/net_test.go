package net_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	stdnet "net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/interconnect"
	cnet "github.com/chanos/chanos/interconnect/net"
	"github.com/chanos/chanos/interfaces/pingpong"
	"github.com/chanos/chanos/internal/testkit"
	"github.com/chanos/chanos/internal/testkit/faultproxy"
	"github.com/chanos/chanos/internal/testkit/files"
	"github.com/chanos/chanos/wire"
)

// listen starts a Listener on loopback, closed when the test ends.
func listen(t testing.TB, o *cnet.Options) *cnet.Listener {
	t.Helper()
	ln, err := stdnet.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	L := cnet.Listen(ln, o)
	t.Cleanup(func() { L.Close() })
	return L
}

// connect dials addr and accepts on L, returning both links, closed when
// the test ends.
func connect(t *testing.T, L *cnet.Listener, addr string, o *cnet.Options) (client, server *cnet.Link) {
	t.Helper()
	ctx := testkit.Context(t)
	c, err := cnet.Dial(ctx, addr, o)
	if err != nil {
		t.Fatal(err)
	}
	s, err := L.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c, s
}

// passOne sends one frame from one link and receives it, into in, on the
// other.
func passOne(t *testing.T, ctx context.Context, from, to *cnet.Link, in *interconnect.Incoming) {
	t.Helper()
	if err := from.SendFrame(ctx, frame(t, &pingpong.Ping{MsgID: 1}), nil); err != nil {
		t.Fatal(err)
	}
	if err := to.Receive(ctx, in); err != nil {
		t.Fatal(err)
	}
}

// proxy starts a fault proxy to L, closed when the test ends.
func proxy(t *testing.T, L *cnet.Listener) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.New(L.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func frame(t testing.TB, m wire.Message) []byte {
	var b wire.Buffer
	if err := m.Encode(&b); err != nil {
		t.Fatal(err)
	}
	return b.B
}

// orderServer answers pings with pongs of the same number and echoes,
// and fails the test if pings come out of order.
type orderServer struct {
	pingpong.UnimplementedServer
	t     *testing.T
	mu    sync.Mutex
	next  uint32
	pings chan uint32
}

func (s *orderServer) Ping(ctx context.Context, from *pingpong.Client, m pingpong.Ping) error {
	s.mu.Lock()
	if m.MsgID != s.next {
		s.t.Errorf("ping %d arrived where %d was due", m.MsgID, s.next)
	}
	s.next = m.MsgID + 1
	s.mu.Unlock()
	if s.pings != nil {
		s.pings <- m.MsgID
	}
	return from.Send(ctx, &pingpong.Pong{ClientID: m.ClientID, MsgID: m.MsgID})
}

func (s *orderServer) Echo(ctx context.Context, v uint64) (uint64, error) { return v, nil }

func (s *orderServer) Bounce(ctx context.Context, p []byte) ([]byte, error) { return p, nil }

// serve runs srv on the server side until the connection ends, and
// returns the channel on which Serve's error comes.
func serve(t *testing.T, s *cnet.Link, srv pingpong.Server) (*pingpong.Conn, <-chan error) {
	sc := pingpong.NewConn(chanos.NewConn(s, pingpong.Interface))
	errc := make(chan error, 1)
	go func() { errc <- sc.Serve(context.Background(), srv) }()
	t.Cleanup(func() { sc.Close() })
	return sc, errc
}

// The generated pingpong interface runs over net: rpcs, a long payload,
// and messages both ways.
func TestPingpong(t *testing.T) {
	testkit.NoLeaks(t)
	L := listen(t, nil)
	cl, sl := connect(t, L, L.Addr().String(), nil)
	_, errc := serve(t, sl, &orderServer{t: t})
	c := pingpong.NewConn(chanos.NewConn(cl, pingpong.Interface))
	defer c.Close()
	ctx := testkit.Context(t)
	if got := c.Raw().Interconnect(); got != "net" {
		t.Errorf("interconnect %q, want net", got)
	}
	for i := uint64(0); i < 100; i++ {
		if v, err := c.Echo(ctx, i); err != nil || v != i {
			t.Fatalf("echo %d = %d, %v", i, v, err)
		}
	}
	big := make([]byte, 65536)
	rand.Read(big)
	if got, err := c.Bounce(ctx, big); err != nil || string(got) != string(big) {
		t.Fatalf("bounce of 64 KiB: %d bytes, %v", len(got), err)
	}
	for i := uint32(0); i < 100; i++ {
		if err := c.Send(ctx, &pingpong.Ping{ClientID: 1, MsgID: i}); err != nil {
			t.Fatal(err)
		}
	}
	for i := uint32(0); i < 100; i++ {
		m, err := c.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if p, ok := m.(*pingpong.Pong); !ok || p.MsgID != i {
			t.Fatalf("got %#v, want pong %d", m, i)
		}
	}
	c.Close()
	if err := <-errc; err != nil {
		t.Errorf("the server's Serve ended with %v, want nil (the peer closed)", err)
	}
}

// Through a proxy that resets the TCP connection at random points,
// hundreds of times, messages and rpcs both ways arrive exactly once and
// in order.
func TestCutsExactlyOnceInOrder(t *testing.T) {
	testkit.NoLeaks(t)
	o := &cnet.Options{RedialMin: time.Millisecond, RedialMax: 10 * time.Millisecond, Grace: 20 * time.Second, WindowFrames: 64}
	if os.Getenv("NET_DEBUG") != "" {
		o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	L := listen(t, o)
	p := proxy(t, L)
	p.Seed(21, 4)
	cl, sl := connect(t, L, p.Addr(), o)
	const wantCuts = 300
	p.CutRandom(1, 4000)
	exactlyOnceInOrder(t, cl, sl, func() bool { return p.Cuts() < wantCuts })
	p.NoCuts()
	t.Logf("%d cuts, %d TCP connections", p.Cuts(), p.Accepted())
	if p.Cuts() < wantCuts {
		t.Errorf("only %d cuts", p.Cuts())
	}
}

// exactlyOnceInOrder serves pingpong on sl and, from cl, sends numbered
// pings and calls numbered echoes at once, at least 1000 and 500 and for
// as long as more says, checking that every pong and every reply comes
// once and in order; then closes cl and checks that the server saw an
// orderly end.
func exactlyOnceInOrder(t *testing.T, cl, sl *cnet.Link, more func() bool) {
	_, errc := serve(t, sl, &orderServer{t: t})
	c := pingpong.NewConn(chanos.NewConn(cl, pingpong.Interface))
	defer c.Close()
	ctx := testkit.Context(t)

	var wg sync.WaitGroup
	sent := make(chan uint32, 1)
	wg.Add(3)
	go func() { // pings, until enough cuts happened
		defer wg.Done()
		i := uint32(0)
		for ; more() || i < 1000; i++ {
			if err := c.Send(ctx, &pingpong.Ping{ClientID: 7, MsgID: i}); err != nil {
				t.Errorf("ping %d: %v", i, err)
				break
			}
		}
		sent <- i
	}()
	go func() { // rpcs, interleaved with the pings
		defer wg.Done()
		for i := uint64(0); more() || i < 500; i++ {
			if v, err := c.Echo(ctx, i); err != nil || v != i {
				t.Errorf("echo %d = %d, %v", i, v, err)
				return
			}
		}
	}()
	go func() { // pongs, in order, as many as pings
		defer wg.Done()
		var n uint32
		total := ^uint32(0)
		for n != total {
			select {
			case total = <-sent:
				continue
			default:
			}
			if n == total {
				break
			}
			rctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			m, err := c.Receive(rctx)
			cancel()
			if errors.Is(err, context.DeadlineExceeded) {
				continue
			}
			if err != nil {
				t.Errorf("pong %d: %v", n, err)
				return
			}
			if pg, ok := m.(*pingpong.Pong); !ok || pg.MsgID != n {
				t.Errorf("got %#v, want pong %d", m, n)
				return
			}
			n++
		}
	}()
	wg.Wait()
	c.Close()
	if err := <-errc; err != nil {
		t.Errorf("the server's Serve ended with %v, want nil (the peer closed)", err)
	}
}

// A partition longer than the grace period ends the link with "network
// lost" on both sides, and a pending call fails with it.
func TestNetworkLost(t *testing.T) {
	testkit.NoLeaks(t)
	o := &cnet.Options{Grace: 300 * time.Millisecond, RedialMin: 5 * time.Millisecond, RedialMax: 50 * time.Millisecond}
	L := listen(t, o)
	p := proxy(t, L)
	cl, sl := connect(t, L, p.Addr(), o)
	_, errc := serve(t, sl, &orderServer{t: t})
	c := pingpong.NewConn(chanos.NewConn(cl, pingpong.Interface))
	defer c.Close()
	ctx := testkit.Context(t)
	if _, err := c.Echo(ctx, 1); err != nil {
		t.Fatal(err)
	}
	p.Partition(10 * time.Second)
	_, err := c.Echo(ctx, 2)
	if !errors.Is(err, chanos.ErrNetworkLost) || !strings.Contains(err.Error(), "(the last try: ") {
		t.Errorf("a call pending across the partition: %v, want ErrNetworkLost, saying how the last try failed", err)
	}
	if err := <-errc; !errors.Is(err, chanos.ErrNetworkLost) {
		t.Errorf("the server's Serve ended with %v, want ErrNetworkLost", err)
	}
	if err := c.Send(ctx, &pingpong.Ping{}); !errors.Is(err, chanos.ErrNetworkLost) {
		t.Errorf("a send after the end: %v, want ErrNetworkLost", err)
	}
}

// A partition shorter than the grace period is a pause: the call pending
// across it completes.
func TestPartitionWithinGrace(t *testing.T) {
	testkit.NoLeaks(t)
	o := &cnet.Options{Grace: 5 * time.Second, RedialMin: 5 * time.Millisecond, RedialMax: 20 * time.Millisecond}
	L := listen(t, o)
	p := proxy(t, L)
	cl, sl := connect(t, L, p.Addr(), o)
	serve(t, sl, &orderServer{t: t})
	c := pingpong.NewConn(chanos.NewConn(cl, pingpong.Interface))
	defer c.Close()
	ctx := testkit.Context(t)
	p.Partition(200 * time.Millisecond)
	if v, err := c.Echo(ctx, 5); err != nil || v != 5 {
		t.Fatalf("echo across a short partition = %d, %v", v, err)
	}
}

// A stalled connection (a black hole, nothing reset) is noticed by its
// keepalives, redialed and resumed.
func TestStallResumes(t *testing.T) {
	testkit.NoLeaks(t)
	o := &cnet.Options{KeepAlive: 20 * time.Millisecond, DeadAfter: 100 * time.Millisecond, HandshakeTimeout: 100 * time.Millisecond,
		RedialMin: 5 * time.Millisecond, RedialMax: 20 * time.Millisecond, Grace: 10 * time.Second}
	L := listen(t, o)
	p := proxy(t, L)
	cl, sl := connect(t, L, p.Addr(), o)
	serve(t, sl, &orderServer{t: t})
	c := pingpong.NewConn(chanos.NewConn(cl, pingpong.Interface))
	defer c.Close()
	ctx := testkit.Context(t)
	before := p.Accepted()
	p.Stall()
	go func() {
		// Stalled until the link has given up on its connection and
		// redialed: the echo can complete only on a new connection.
		for p.Accepted() == before {
			time.Sleep(5 * time.Millisecond)
		}
		p.Resume()
	}()
	if v, err := c.Echo(ctx, 9); err != nil || v != 9 {
		t.Fatalf("echo across a stall = %d, %v", v, err)
	}
	if p.Accepted() == before {
		t.Errorf("the echo completed without a new TCP connection")
	}
}

// Close delivers everything sent before it: the peer receives every
// message, in order, then ErrClosed, though it starts reading only after
// the sender has closed.
func TestOrderlyClose(t *testing.T) {
	testkit.NoLeaks(t)
	o := &cnet.Options{WindowFrames: 16}
	L := listen(t, o)
	cl, sl := connect(t, L, L.Addr().String(), o)
	ctx := testkit.Context(t)
	const n = 500
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		for i := uint32(0); i < n; i++ {
			if err := cl.SendFrame(ctx, frame(t, &pingpong.Ping{MsgID: i}), nil); err != nil {
				t.Errorf("send %d: %v", i, err)
				return
			}
		}
		cl.Close()
	}()
	time.Sleep(50 * time.Millisecond) // the sender fills the window first
	var in interconnect.Incoming
	for i := uint32(0); i < n; i++ {
		if err := sl.Receive(ctx, &in); err != nil {
			t.Fatalf("receive %d: %v", i, err)
		}
		var m pingpong.Ping
		if err := in.Decode(&m); err != nil || m.MsgID != i {
			t.Fatalf("frame %d: %+v, %v", i, m, err)
		}
	}
	<-closed
	if err := sl.Receive(ctx, &in); !errors.Is(err, interconnect.ErrClosed) {
		t.Errorf("after the last frame: %v, want ErrClosed", err)
	}
	select {
	case <-sl.Gone():
	default:
		t.Errorf("Gone is open after the peer closed")
	}
	if err := sl.SendFrame(ctx, frame(t, &pingpong.Ping{}), nil); !errors.Is(err, interconnect.ErrClosed) {
		t.Errorf("a send to a closed peer: %v, want ErrClosed", err)
	}
}

// A Close is acknowledged promptly by a peer whose application received
// earlier and has stopped receiving (busy elsewhere): the peer's link
// reads the close in the background soon after its last Receive, not at
// its next keepalive tick, which the long KeepAlive here puts out of reach.
// The last Receive either took a frame or was cut short by its context.
func TestCloseWhilePeerDoesNotReceive(t *testing.T) {
	testkit.NoLeaks(t)
	for _, last := range []string{"frame", "cut"} {
		t.Run(last, func(t *testing.T) {
			o := &cnet.Options{KeepAlive: 20 * time.Second, DeadAfter: 80 * time.Second, Linger: 30 * time.Second}
			L := listen(t, o)
			cl, sl := connect(t, L, L.Addr().String(), o)
			ctx := testkit.Context(t)
			var in interconnect.Incoming
			passOne(t, ctx, cl, sl, &in)
			if last == "cut" {
				short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
				err := sl.Receive(short, &in)
				cancel()
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("a receive with nothing sent: %v, want DeadlineExceeded", err)
				}
			}
			time.Sleep(100 * time.Millisecond) // the application is busy
			t0 := time.Now()
			cl.Close()
			if d := time.Since(t0); d > 5*time.Second {
				t.Errorf("Close took %v while the peer's application did not receive; the peer's keepalive tick is 10 s away", d)
			}
			if err := sl.Receive(ctx, &in); !errors.Is(err, interconnect.ErrClosed) {
				t.Errorf("the peer after the close: %v, want ErrClosed", err)
			}
		})
	}
}

// A frame with capabilities is refused at send, and the link goes on.
func TestCapsRefused(t *testing.T) {
	testkit.NoLeaks(t)
	L := listen(t, nil)
	cl, sl := connect(t, L, L.Addr().String(), nil)
	ctx := testkit.Context(t)
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fr := frame(t, &pingpong.Ping{MsgID: 1})
	if err := cl.SendFrame(ctx, fr, []wire.Cap{f}); !errors.Is(err, interconnect.ErrCapsUnsupported) {
		t.Errorf("send with a descriptor: %v, want ErrCapsUnsupported", err)
	}
	if _, err := cl.TrySendFrame(fr, []wire.Cap{f}); !errors.Is(err, interconnect.ErrCapsUnsupported) {
		t.Errorf("try-send with a descriptor: %v, want ErrCapsUnsupported", err)
	}
	if err := cl.SendFrame(ctx, fr, nil); err != nil {
		t.Fatal(err)
	}
	var in interconnect.Incoming
	if err := sl.Receive(ctx, &in); err != nil || in.Header.Msg != pingpong.MsgPing {
		t.Fatalf("receive after the refusal: %+v, %v", in.Header, err)
	}
}

// Capabilities that are irefs (RefCap) travel after their frame and
// arrive as RefCaps, in order; a frame may mix none of anything else.
func TestRefCaps(t *testing.T) {
	testkit.NoLeaks(t)
	L := listen(t, nil)
	cl, sl := connect(t, L, L.Addr().String(), nil)
	ctx := testkit.Context(t)
	refs := []wire.Cap{
		&cnet.RefCap{Ref: wire.Iref{Machine: 7, Export: 3, Token: [16]byte{1, 2, 3}}},
		&cnet.RefCap{Ref: wire.Iref{Machine: 9, Export: 4, Token: [16]byte{4, 5, 6}}},
	}
	var b wire.Buffer
	if err := (&files.Pass{Any: refs[0]}).Encode(&b); err != nil {
		t.Fatal(err)
	}
	if err := cl.SendFrame(ctx, b.B, b.Caps); err != nil {
		t.Fatal(err)
	}
	var in interconnect.Incoming
	if err := sl.Receive(ctx, &in); err != nil {
		t.Fatal(err)
	}
	var m files.Pass
	if err := in.Decode(&m); err != nil {
		t.Fatal(err)
	}
	if r, ok := m.Any.(*cnet.RefCap); !ok || r.Ref != refs[0].(*cnet.RefCap).Ref {
		t.Fatalf("received %#v, want %v", m.Any, refs[0])
	}
	// A descriptor among them is refused at send.
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b = wire.Buffer{}
	(&files.Pass{Any: f}).Encode(&b)
	if err := cl.SendFrame(ctx, b.B, b.Caps); !errors.Is(err, interconnect.ErrCapsUnsupported) {
		t.Errorf("a descriptor: %v, want ErrCapsUnsupported", err)
	}
}

// A frame over the connection's maximum is refused at send; the link
// goes on.
func TestFrameTooLargeRefused(t *testing.T) {
	testkit.NoLeaks(t)
	L := listen(t, &cnet.Options{MaxFrameSize: 1024})
	cl, sl := connect(t, L, L.Addr().String(), nil)
	ctx := testkit.Context(t)
	big := frame(t, &pingpong.BounceCall{Payload: make([]byte, 2000)})
	if err := cl.SendFrame(ctx, big, nil); !errors.Is(err, cnet.ErrTooLarge) {
		t.Errorf("send of %d bytes to a peer that takes 1024: %v, want ErrTooLarge", len(big), err)
	}
	if err := cl.SendFrame(ctx, frame(t, &pingpong.Ping{MsgID: 3}), nil); err != nil {
		t.Fatal(err)
	}
	var in interconnect.Incoming
	if err := sl.Receive(ctx, &in); err != nil {
		t.Fatal(err)
	}
}

// rawHello opens a TCP connection to addr and sends a hello for a new
// connection, returning the connection and the reader past the reply.
func rawHello(t *testing.T, addr string) (stdnet.Conn, *bufio.Reader) {
	t.Helper()
	c, err := stdnet.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	h := make([]byte, 24+36)
	h[0] = 4
	binary.LittleEndian.PutUint32(h[4:], 36)
	copy(h[24:], "chnt")
	binary.LittleEndian.PutUint16(h[28:], 1)
	rand.Read(h[32:48])
	binary.LittleEndian.PutUint32(h[48:], 1<<20)
	binary.LittleEndian.PutUint32(h[52:], 64)
	binary.LittleEndian.PutUint32(h[56:], 1<<20)
	if _, err := c.Write(h); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	reply := make([]byte, 60)
	if _, err := io.ReadFull(br, reply); err != nil || reply[0] != 4 {
		t.Fatalf("the hello's reply: % x, %v", reply, err)
	}
	return c, br
}

// Garbage from a peer ends that one connection with a protocol
// violation; other connections go on, and a listener given garbage
// instead of a hello goes on accepting.
func TestGarbageEndsOneConnection(t *testing.T) {
	testkit.NoLeaks(t)
	L := listen(t, nil)
	cl, sl := connect(t, L, L.Addr().String(), nil)
	ctx := testkit.Context(t)

	// Garbage where a hello is due: refused, nothing accepted.
	g, err := stdnet.Dial("tcp", L.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	g.Write([]byte("GET / HTTP/1.1\r\nHost: chanos\r\n\r\n"))
	if _, err := io.ReadAll(g); err != nil {
		t.Logf("garbage hello: %v", err)
	}
	g.Close()

	cases := []struct {
		name   string
		record func() []byte
	}{
		{"unknown type", func() []byte { b := make([]byte, 24); b[0] = 99; return b }},
		{"frame past the maximum", func() []byte {
			b := make([]byte, 24)
			b[0] = 1
			binary.LittleEndian.PutUint32(b[4:], 1<<30)
			binary.LittleEndian.PutUint64(b[8:], 1)
			return b
		}},
		{"frame out of sequence", func() []byte {
			f := frame(t, &pingpong.Ping{})
			b := make([]byte, 24+len(f))
			b[0] = 1
			binary.LittleEndian.PutUint32(b[4:], uint32(len(f)))
			binary.LittleEndian.PutUint64(b[8:], 5)
			copy(b[24:], f)
			return b
		}},
		{"bad chanos frame", func() []byte {
			b := make([]byte, 24+16)
			b[0] = 1
			binary.LittleEndian.PutUint32(b[4:], 16)
			binary.LittleEndian.PutUint64(b[8:], 1)
			for i := 24; i < len(b); i++ {
				b[i] = 0xee
			}
			return b
		}},
		{"capabilities without their irefs", func() []byte {
			f := frame(t, &pingpong.Ping{})
			f[7] = 2 // ncaps, with no trailer
			b := make([]byte, 24+len(f))
			b[0] = 1
			binary.LittleEndian.PutUint32(b[4:], uint32(len(f)))
			binary.LittleEndian.PutUint64(b[8:], 1)
			copy(b[24:], f)
			return b
		}},
		{"a null iref as a capability", func() []byte {
			f := frame(t, &pingpong.Ping{})
			f[7] = 1
			b := make([]byte, 24+len(f)+32)
			b[0] = 1
			binary.LittleEndian.PutUint32(b[4:], uint32(len(f)+32))
			binary.LittleEndian.PutUint64(b[8:], 1)
			copy(b[24:], f)
			return b
		}},
		{"acknowledgement of what was never sent", func() []byte {
			b := make([]byte, 24)
			b[0] = 2
			binary.LittleEndian.PutUint64(b[16:], 1000)
			return b
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			raw, _ := rawHello(t, L.Addr().String())
			victim, err := L.Accept(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer victim.Close()
			if _, err := raw.Write(tc.record()); err != nil {
				t.Fatal(err)
			}
			var in interconnect.Incoming
			if err := victim.Receive(ctx, &in); !errors.Is(err, interconnect.ErrProtocol) {
				t.Errorf("receive after garbage: %v, want ErrProtocol", err)
			}
		})
	}

	// The first connection is unaffected.
	if err := cl.SendFrame(ctx, frame(t, &pingpong.Ping{MsgID: 42}), nil); err != nil {
		t.Fatal(err)
	}
	var in interconnect.Incoming
	var m pingpong.Ping
	if err := sl.Receive(ctx, &in); err != nil {
		t.Fatal(err)
	}
	if err := in.Decode(&m); err != nil || m.MsgID != 42 {
		t.Fatalf("the other connection: %+v, %v", m, err)
	}
}

// A resume of a connection the listener no longer holds (its side was
// closed while the network was down, or its process restarted) ends the
// dialing side with "peer died".
func TestResumeUnknownConnection(t *testing.T) {
	testkit.NoLeaks(t)
	o := &cnet.Options{RedialMin: time.Millisecond, Linger: 50 * time.Millisecond}
	L := listen(t, o)
	p := proxy(t, L)
	cl, sl := connect(t, L, p.Addr(), o)
	p.Stall()
	sl.Close() // its close record never arrives
	p.Cut()
	p.Resume()
	ctx := testkit.Context(t)
	var in interconnect.Incoming
	if err := cl.Receive(ctx, &in); !errors.Is(err, interconnect.ErrPeerDied) {
		t.Errorf("receive: %v, want ErrPeerDied", err)
	}
}

// streamBothWays sends n data frames of random sizes each way between a
// and b, checking on each side that every frame arrives once, in order
// and intact, then closes a and checks that b sees the end after them.
func streamBothWays(t *testing.T, a, b *cnet.Link, n int, maxPayload int) {
	ctx := testkit.Context(t)
	var wg sync.WaitGroup
	send := func(l *cnet.Link, seed uint64) {
		defer wg.Done()
		sizes := mrand.New(mrand.NewPCG(seed, 1))
		for i := 0; i < n; i++ {
			p := make([]byte, sizes.IntN(maxPayload))
			for j := range p {
				p[j] = byte(i + j)
			}
			if err := l.SendFrame(ctx, frame(t, &pingpong.Data{Seq: uint64(i), Payload: p}), nil); err != nil {
				t.Errorf("send %d: %v", i, err)
				return
			}
		}
	}
	recv := func(l *cnet.Link, seed uint64) {
		defer wg.Done()
		sizes := mrand.New(mrand.NewPCG(seed, 1))
		var in interconnect.Incoming
		for i := 0; i < n; i++ {
			if err := l.Receive(ctx, &in); err != nil {
				t.Errorf("receive %d: %v", i, err)
				return
			}
			var m pingpong.Data
			if err := in.Decode(&m); err != nil {
				t.Errorf("frame %d: %v", i, err)
				return
			}
			want := sizes.IntN(maxPayload)
			if m.Seq != uint64(i) || len(m.Payload) != want {
				t.Errorf("frame %d: seq %d with %d bytes, want %d bytes", i, m.Seq, len(m.Payload), want)
				return
			}
			for j, c := range m.Payload {
				if c != byte(i+j) {
					t.Errorf("frame %d: byte %d is %#x", i, j, c)
					return
				}
			}
		}
	}
	wg.Add(4)
	go send(a, 1)
	go send(b, 2)
	go recv(b, 1)
	go recv(a, 2)
	wg.Wait()
	a.Close()
	var in interconnect.Incoming
	if err := b.Receive(ctx, &in); !errors.Is(err, interconnect.ErrClosed) {
		t.Errorf("after the stream: %v, want ErrClosed", err)
	}
}

// Frames of random sizes, up to many TCP segments each, stream both ways
// through a proxy that resets the connection at random points: each
// arrives once, in order, intact, and Close delivers them all.
func TestStreamThroughCuts(t *testing.T) {
	testkit.NoLeaks(t)
	o := &cnet.Options{RedialMin: time.Millisecond, RedialMax: 10 * time.Millisecond, WindowFrames: 32, WindowBytes: 256 << 10}
	L := listen(t, o)
	p := proxy(t, L)
	p.Seed(4, 21)
	cl, sl := connect(t, L, p.Addr(), o)
	p.CutRandom(1, 200<<10)
	streamBothWays(t, cl, sl, 2000, 20000)
	t.Logf("%d cuts, %d TCP connections", p.Cuts(), p.Accepted())
	if p.Cuts() < 100 {
		t.Errorf("only %d cuts", p.Cuts())
	}
}

// A throttled connection is slow, not broken: nothing is resumed.
func TestThrottled(t *testing.T) {
	testkit.NoLeaks(t)
	L := listen(t, nil)
	p := proxy(t, L)
	cl, sl := connect(t, L, p.Addr(), nil)
	p.Throttle(4 << 20)
	streamBothWays(t, cl, sl, 100, 20000)
	if p.Accepted() != 1 {
		t.Errorf("%d TCP connections, want 1", p.Accepted())
	}
}

// Frames that arrived before the network was lost are received before
// the end.
func TestNetworkLostAfterReceived(t *testing.T) {
	testkit.NoLeaks(t)
	o := &cnet.Options{Grace: 200 * time.Millisecond, RedialMin: 5 * time.Millisecond}
	L := listen(t, o)
	p := proxy(t, L)
	cl, sl := connect(t, L, p.Addr(), o)
	ctx := testkit.Context(t)
	for i := uint32(0); i < 3; i++ {
		if err := cl.SendFrame(ctx, frame(t, &pingpong.Ping{MsgID: i}), nil); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Eventually(t, "the frames to arrive", func() bool {
		return cl.Err() == nil && sl.Pending() == 3
	})
	p.Partition(time.Minute)
	testkit.Eventually(t, "the end", func() bool { return sl.Err() != nil })
	var in interconnect.Incoming
	for i := 0; i < 3; i++ {
		if err := sl.Receive(ctx, &in); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
	}
	if err := sl.Receive(ctx, &in); !errors.Is(err, interconnect.ErrNetworkLost) {
		t.Errorf("after the frames: %v, want ErrNetworkLost", err)
	}
}

// A full window blocks the sender until the receiver takes a frame, or
// the sender's context ends; a try-send reports no room.
func TestWindowBlocksSender(t *testing.T) {
	testkit.NoLeaks(t)
	L := listen(t, &cnet.Options{WindowFrames: 4})
	cl, sl := connect(t, L, L.Addr().String(), nil)
	ctx := testkit.Context(t)
	f := frame(t, &pingpong.Ping{})
	for i := 0; i < 4; i++ {
		if err := cl.SendFrame(ctx, f, nil); err != nil {
			t.Fatal(err)
		}
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := cl.SendFrame(short, f, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a send into a full window: %v, want the context's end", err)
	}
	if sent, err := cl.TrySendFrame(f, nil); sent || err != nil {
		t.Errorf("a try-send into a full window: %v, %v; want false, nil", sent, err)
	}
	sent := make(chan error, 1)
	go func() { sent <- cl.SendFrame(ctx, f, nil) }()
	var in interconnect.Incoming
	if err := sl.Receive(ctx, &in); err != nil {
		t.Fatal(err)
	}
	if err := testkit.Await(t, "the blocked send", sent); err != nil {
		t.Errorf("the send once the receiver took a frame: %v", err)
	}
	for i := 0; i < 4; i++ {
		if err := sl.Receive(ctx, &in); err != nil {
			t.Fatal(err)
		}
	}
	if sl.Pending() != 0 {
		t.Errorf("%d frames more than were sent", sl.Pending())
	}
}

// Close while the network is down returns after its linger, and the
// peer, which never heard of it, ends with "network lost" after its
// grace period.
func TestCloseDuringPartition(t *testing.T) {
	testkit.NoLeaks(t)
	o := &cnet.Options{Grace: 300 * time.Millisecond, Linger: 100 * time.Millisecond, RedialMin: 5 * time.Millisecond}
	L := listen(t, o)
	p := proxy(t, L)
	cl, sl := connect(t, L, p.Addr(), o)
	ctx := testkit.Context(t)
	p.Partition(time.Minute)
	testkit.Within(t, 10*time.Second, "Close", cl.Close)
	var in interconnect.Incoming
	if err := sl.Receive(ctx, &in); !errors.Is(err, interconnect.ErrNetworkLost) {
		t.Errorf("the peer of a close that never arrived: %v, want ErrNetworkLost", err)
	}
}

// Connections that open and say nothing hold at most MaxHandshakes
// handshakes; beyond, new ones are dropped at once, and the connection
// already open goes on.
func TestHandshakeBound(t *testing.T) {
	testkit.NoLeaks(t)
	L := listen(t, &cnet.Options{MaxHandshakes: 4, HandshakeTimeout: 5 * time.Second})
	cl, sl := connect(t, L, L.Addr().String(), nil)
	ctx := testkit.Context(t)
	var idle []stdnet.Conn
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	for range 4 {
		c, err := stdnet.Dial("tcp", L.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
	}
	time.Sleep(100 * time.Millisecond)
	extra, err := stdnet.Dial("tcp", L.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	extra.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := extra.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Errorf("a connection beyond the bound: read %v, want it closed at once (EOF)", err)
	}
	if err := cl.SendFrame(ctx, frame(t, &pingpong.Ping{MsgID: 5}), nil); err != nil {
		t.Fatal(err)
	}
	var in interconnect.Incoming
	if err := sl.Receive(ctx, &in); err != nil {
		t.Fatalf("the open connection: %v", err)
	}
}

// blockServer's echo blocks until its context ends and reports why.
type blockServer struct {
	pingpong.UnimplementedServer
	ended chan error
}

func (s *blockServer) Echo(ctx context.Context, v uint64) (uint64, error) {
	<-ctx.Done()
	s.ended <- ctx.Err()
	return 0, ctx.Err()
}

// A caller's deadline, and its cancel without one, reach the handler on
// the other side of a net connection.
func TestDeadlineAndCancelReachHandler(t *testing.T) {
	testkit.NoLeaks(t)
	L := listen(t, nil)
	cl, sl := connect(t, L, L.Addr().String(), nil)
	srv := &blockServer{ended: make(chan error, 2)}
	serve(t, sl, srv)
	c := pingpong.NewConn(chanos.NewConn(cl, pingpong.Interface))
	defer c.Close()
	ctx := testkit.Context(t)
	dctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err := c.Echo(dctx, 1)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, chanos.CodeDeadlineExceeded) {
		t.Errorf("a call past its deadline: %v", err)
	}
	if err := testkit.Await(t, "the handler's end", srv.ended); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("the handler's context ended with %v, want DeadlineExceeded", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	go func() { time.Sleep(50 * time.Millisecond); cancel() }()
	if _, err := c.Echo(cctx, 2); !errors.Is(err, context.Canceled) && !errors.Is(err, chanos.CodeCanceled) {
		t.Errorf("a cancelled call: %v", err)
	}
	if err := testkit.Await(t, "the handler's end", srv.ended); !errors.Is(err, context.Canceled) {
		t.Errorf("the handler's context ended with %v, want Canceled", err)
	}
}

// A frame whose buffer SwapReceiveBuffer handed over stays as it was
// while the next frame is received, whether it came through the buffered
// reader or as a whole record of its own, and giving the buffer back (as
// the connection engine does, once the frame's handler has returned)
// disturbs nothing the link reads after. The frames mostly shrink, so
// that each would fit a buffer the link reuses.
func TestSwapReceiveBuffer(t *testing.T) {
	L := listen(t, nil)
	c, s := connect(t, L, L.Addr().String(), nil)
	ctx := testkit.Context(t)
	var prev, prevBuf []byte // the frame before, and the buffer it lies in
	var prevSent []byte
	for i, n := range []int{60000, 50000, 3000, 2000, 100, 70000, 200000, 100, 10} {
		sent := frame(t, &pingpong.Data{Seq: uint64(i), Payload: bytes.Repeat([]byte{byte(i + 1)}, n)})
		if err := c.SendFrame(ctx, sent, nil); err != nil {
			t.Fatal(err)
		}
		var in interconnect.Incoming
		if err := s.Receive(ctx, &in); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(in.Frame, sent) {
			t.Fatalf("frame %d (%d bytes of payload) arrived changed", i, n)
		}
		if i > 0 && !bytes.Equal(prev, prevSent) {
			t.Fatalf("frame %d changed while frame %d was received", i-1, i)
		}
		buf := s.SwapReceiveBuffer(prevBuf)
		start := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
		at := uintptr(unsafe.Pointer(unsafe.SliceData(in.Frame)))
		if at < start || at+uintptr(len(in.Frame)) > start+uintptr(cap(buf)) {
			t.Fatalf("frame %d does not lie in the buffer handed over", i)
		}
		prev, prevBuf, prevSent = in.Frame, buf, sent
	}
}
