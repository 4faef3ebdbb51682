package interop

// The net interconnect between Go and C: a C link (libchanos_net, driven
// by c/tools/net_peer.c) and a Go link (interconnect/net), each side in
// turn dialing, plain, with TLS and authenticated only, through a proxy
// that resets the TCP connection at random points hundreds of times:
// frames both ways arrive exactly once and in order. Then the refusals of
// TLS: a wrong pin and a client not admitted, each way, and a peer of the
// other mode (encrypted or authenticated only), each way.

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	stdnet "net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/interconnect"
	cnet "github.com/chanos/chanos/interconnect/net"
	"github.com/chanos/chanos/interfaces/pingpong"
	"github.com/chanos/chanos/internal/testkit"
	"github.com/chanos/chanos/internal/testkit/faultproxy"
	"github.com/chanos/chanos/wire"
)

// netFrames is how many frames each side streams to the other.
const netFrames = 3000

// netModes are the modes a net link runs in: plain TCP, TLS, and TLS
// authenticated only (cnet.TLS.AuthOnly; chanos-net-peer -auth), in which
// the records cross in the clear with a tag each.
var netModes = []struct {
	name      string
	tls, auth bool
}{{"plain", false, false}, {"tls", true, false}, {"auth", true, true}}

// netFrame is frame i of a stream, as frame_make of c/tools/net_peer.c
// writes it: a message whose payload is i, then (i*7919)%3000 bytes, byte
// k being i+k.
func netFrame(i uint64) []byte {
	fill := int(i * 7919 % 3000)
	n := wire.HeaderSize + 8 + fill
	b := make([]byte, n)
	binary.LittleEndian.PutUint32(b[0:], uint32(n))
	binary.LittleEndian.PutUint16(b[4:], 1)
	binary.LittleEndian.PutUint64(b[wire.HeaderSize:], i)
	for k := range fill {
		b[wire.HeaderSize+8+k] = byte(i + uint64(k))
	}
	return b
}

// listenTCP listens on a free port of 127.0.0.1.
func listenTCP(t *testing.T) stdnet.Listener {
	t.Helper()
	ln, err := stdnet.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

func netPeer(t *testing.T) string {
	t.Helper()
	return filepath.Join(testkit.CBuild(t, filepath.Join("tools", "chanos-net-peer")), "tools", "chanos-net-peer")
}

// netStream streams netFrames frames each way over l and checks those it
// receives.
func netStream(t *testing.T, l *cnet.Link) {
	t.Helper()
	ctx := testkit.Context(t)
	errc := make(chan error, 1)
	go func() {
		for i := range uint64(netFrames) {
			if err := l.SendFrame(ctx, netFrame(i), nil); err != nil {
				errc <- fmt.Errorf("send %d: %w", i, err)
				return
			}
		}
		errc <- nil
	}()
	var in interconnect.Incoming
	for i := range uint64(netFrames) {
		if err := l.Receive(ctx, &in); err != nil {
			t.Fatalf("receive %d: %v", i, err)
		}
		if !bytes.Equal(in.Frame, netFrame(i)) {
			t.Fatalf("frame %d is not the one due (%d bytes)", i, len(in.Frame))
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// field returns the value after key in a line "key value", failing the
// test otherwise.
func field(t *testing.T, line, key string) string {
	t.Helper()
	v, ok := strings.CutPrefix(line, key+" ")
	if !ok {
		t.Fatalf("got %q, want %q...", line, key+" ")
	}
	return v
}

func fingerprint(t *testing.T, s string) [32]byte {
	t.Helper()
	var fp [32]byte
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 32 {
		t.Fatalf("a fingerprint of %q: %v", s, err)
	}
	copy(fp[:], b)
	return fp
}

// checkPeerDone reads the C peer's report of its stream and close, and
// waits for its exit.
func checkPeerDone(t *testing.T, p *proc) {
	t.Helper()
	if got := field(t, p.Line(t), "received"); !strings.HasPrefix(got, fmt.Sprintf("%d resumes ", netFrames)) {
		t.Errorf("the C peer received %s, want %d", got, netFrames)
	} else {
		t.Logf("the C peer: received %s", got)
	}
	p.Expect(t, "closed")
	p.wait(t, 0)
}

// cuts makes p reset connections at random points, more often without
// TLS, whose handshakes are larger.
func cuts(p *faultproxy.Proxy, tls bool) {
	p.Seed(7, 11)
	if tls {
		p.CutRandom(1, 100_000)
	} else {
		p.CutRandom(1, 20_000)
	}
}

func checkCuts(t *testing.T, p *faultproxy.Proxy, l *cnet.Link) {
	t.Helper()
	p.NoCuts()
	t.Logf("%d cuts, %d TCP connections, the Go link resumed %d times", p.Cuts(), p.Accepted(), l.Resumes())
	if p.Cuts() < 50 || l.Resumes() < 50 {
		t.Errorf("%d cuts and %d resumes, want 50 or more", p.Cuts(), l.Resumes())
	}
	// The proxy cuts, and changes nothing: no record of the C side's
	// fails its tag.
	if n := l.AuthFailures(); n != 0 {
		t.Errorf("%d records of the C side failed their tags", n)
	}
}

func TestNetCDialerGoListener(t *testing.T) {
	for _, m := range netModes {
		tls := m.tls
		t.Run(m.name, func(t *testing.T) {
			peer := netPeer(t)
			o := &cnet.Options{}
			var admitted atomic.Pointer[[32]byte]
			args := []string{}
			if tls {
				srv, err := cnet.NewIdentity()
				if err != nil {
					t.Fatal(err)
				}
				o.TLS = &cnet.TLS{Identity: srv, AuthOnly: m.auth, Admit: func(_ string, fp [32]byte) bool {
					want := admitted.Swap(nil)
					return want != nil && *want == fp
				}}
				args = append(args, "-pin", hex.EncodeToString(srv.Fingerprint[:]))
				if m.auth {
					args = append(args, "-auth")
				}
			}
			L := cnet.Listen(listenTCP(t), o)
			defer L.Close()
			px, err := faultproxy.New(L.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer px.Close()
			p := spawn(t, "", peer, append([]string{"dial", px.Addr(), fmt.Sprint(netFrames)}, args...)...)
			if tls {
				fp := fingerprint(t, field(t, p.Line(t), "fp"))
				admitted.Store(&fp)
			}
			io.WriteString(p.stdin, "go\n")
			l, err := L.Accept(testkit.Context(t))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			cuts(px, tls)
			netStream(t, l)
			checkCuts(t, px, l)
			l.Close()
			checkPeerDone(t, p)
		})
	}
}

func TestNetGoDialerCListener(t *testing.T) {
	for _, m := range netModes {
		tls := m.tls
		t.Run(m.name, func(t *testing.T) {
			peer := netPeer(t)
			o := &cnet.Options{}
			args := []string{"listen", fmt.Sprint(netFrames)}
			var cli *cnet.Identity
			if tls {
				var err error
				if cli, err = cnet.NewIdentity(); err != nil {
					t.Fatal(err)
				}
				args = append(args, "-admit", hex.EncodeToString(cli.Fingerprint[:]))
				if m.auth {
					args = append(args, "-auth")
				}
			}
			p := spawn(t, "", peer, args...)
			if tls {
				o.TLS = &cnet.TLS{Identity: cli, Peer: fingerprint(t, field(t, p.Line(t), "fp")), AuthOnly: m.auth}
			}
			port := field(t, p.Line(t), "port")
			px, err := faultproxy.New("127.0.0.1:" + port)
			if err != nil {
				t.Fatal(err)
			}
			defer px.Close()
			l, err := cnet.Dial(testkit.Context(t), px.Addr(), o)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			cuts(px, tls)
			netStream(t, l)
			checkCuts(t, px, l)
			l.Close()
			checkPeerDone(t, p)
		})
	}
}

// A C dialer refuses a Go server whose certificate is not the pinned one,
// and is refused by a Go server that does not admit its certificate.
func TestNetCDialerRefused(t *testing.T) {
	peer := netPeer(t)
	srv, err := cnet.NewIdentity()
	if err != nil {
		t.Fatal(err)
	}
	other, err := cnet.NewIdentity()
	if err != nil {
		t.Fatal(err)
	}
	var asked atomic.Int32
	o := &cnet.Options{TLS: &cnet.TLS{Identity: srv, Admit: func(string, [32]byte) bool {
		asked.Add(1)
		return false
	}}}
	L := cnet.Listen(listenTCP(t), o)
	defer L.Close()
	for _, c := range []struct {
		name  string
		pin   [32]byte
		asked int32
	}{
		{"wrong pin", other.Fingerprint, 0},
		{"not admitted", srv.Fingerprint, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := spawn(t, "", peer, "dial", L.Addr().String(), "1", "-pin", hex.EncodeToString(c.pin[:]))
			field(t, p.Line(t), "fp")
			io.WriteString(p.stdin, "go\n")
			if got := field(t, p.Line(t), "error"); !strings.HasPrefix(got, "-4502 ") {
				t.Errorf("the C dialer: error %s, want -4502 (CHANOS_ERR_AUTH)", got)
			}
			p.wait(t, 2)
			if n := asked.Swap(0); n != c.asked {
				t.Errorf("the Go listener was asked to admit %d times, want %d", n, c.asked)
			}
		})
	}
}

// A Go dialer refuses a C server whose certificate is not the pinned one,
// and is refused by a C server that does not admit its certificate.
func TestNetGoDialerRefused(t *testing.T) {
	peer := netPeer(t)
	cli, err := cnet.NewIdentity()
	if err != nil {
		t.Fatal(err)
	}
	other, err := cnet.NewIdentity()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name     string
		admit    [32]byte
		wrongPin bool
	}{
		{name: "wrong pin", admit: cli.Fingerprint, wrongPin: true},
		{name: "not admitted", admit: other.Fingerprint},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := spawn(t, "", peer, "listen", "1", "-admit", hex.EncodeToString(c.admit[:]))
			pin := fingerprint(t, field(t, p.Line(t), "fp"))
			if c.wrongPin {
				pin = other.Fingerprint
			}
			addr := "127.0.0.1:" + field(t, p.Line(t), "port")
			_, err := cnet.Dial(testkit.Context(t), addr, &cnet.Options{TLS: &cnet.TLS{Identity: cli, Peer: pin}})
			if !errors.Is(err, cnet.ErrAuth) {
				t.Errorf("Dial = %v, want ErrAuth", err)
			}
			// The C listener still waits for a connection it would admit.
			p.kill(t)
		})
	}
}

// The generated C stubs serve a Go client over a net link (pingpong_serve
// on chanos_net_conn_new, in chanos-net-peer serve), through resets:
// every ping gets its pong in order and every echo its value; then the
// 64 KiB bounce comes back intact.
func TestNetGoClientCServer(t *testing.T) {
	for _, m := range netModes {
		tls := m.tls
		t.Run(m.name, func(t *testing.T) {
			peer := netPeer(t)
			o := &cnet.Options{}
			args := []string{"serve"}
			var cli *cnet.Identity
			if tls {
				var err error
				if cli, err = cnet.NewIdentity(); err != nil {
					t.Fatal(err)
				}
				args = append(args, "-admit", hex.EncodeToString(cli.Fingerprint[:]))
				if m.auth {
					args = append(args, "-auth")
				}
			}
			p := spawn(t, "", peer, args...)
			if tls {
				o.TLS = &cnet.TLS{Identity: cli, Peer: fingerprint(t, field(t, p.Line(t), "fp")), AuthOnly: m.auth}
			}
			px, err := faultproxy.New("127.0.0.1:" + field(t, p.Line(t), "port"))
			if err != nil {
				t.Fatal(err)
			}
			defer px.Close()
			ctx := testkit.Context(t)
			l, err := cnet.Dial(ctx, px.Addr(), o)
			if err != nil {
				t.Fatal(err)
			}
			c := pingpong.NewConn(chanos.NewConn(l, pingpong.Interface))
			defer c.Close()
			px.Seed(3, 5)
			if tls {
				px.CutRandom(2_000, 12_000)
			} else {
				px.CutRandom(1, 4_000)
			}
			for i := range uint32(500) {
				if err := c.Send(ctx, &pingpong.Ping{ClientID: 9, MsgID: i}); err != nil {
					t.Fatalf("ping %d: %v", i, err)
				}
				m, err := c.Receive(ctx)
				if err != nil {
					t.Fatalf("pong %d: %v", i, err)
				}
				if pg, ok := m.(*pingpong.Pong); !ok || pg.MsgID != i || pg.ClientID != 9 {
					t.Fatalf("got %#v, want pong %d", m, i)
				}
			}
			for i := range uint64(1000) {
				if v, err := c.Echo(ctx, i); err != nil || v != i {
					t.Fatalf("echo %d = %d, %v", i, v, err)
				}
			}
			// A record crosses whole or not at all: a 64 KiB frame needs
			// a connection that lives past 64 KiB.
			px.NoCuts()
			payload := make([]byte, 64<<10)
			for i := range payload {
				payload[i] = byte(i * 13)
			}
			if got, err := c.Bounce(ctx, payload); err != nil || !bytes.Equal(got, payload) {
				t.Fatalf("bounce: %d bytes, %v", len(got), err)
			}
			t.Logf("%d cuts, %d TCP connections, the Go link resumed %d times", px.Cuts(), px.Accepted(), l.Resumes())
			if px.Cuts() < 20 {
				t.Errorf("only %d cuts", px.Cuts())
			}
			c.Close()
			p.Expect(t, "served")
			p.wait(t, 0)
		})
	}
}

// A C dialer and a Go listener, then a Go dialer and a C listener, one
// side authenticated only and the other encrypting, each way round: the
// dial fails with the mode's error (CHANOS_ERR_MODE, -4505, in C; ErrMode
// in Go), and the listener is not asked to admit the client.
func TestNetModeMismatch(t *testing.T) {
	peer := netPeer(t)
	srv, err := cnet.NewIdentity()
	if err != nil {
		t.Fatal(err)
	}
	cli, err := cnet.NewIdentity()
	if err != nil {
		t.Fatal(err)
	}
	for _, goAuth := range []bool{false, true} {
		name := map[bool]string{false: "go encrypts", true: "go auth only"}[goAuth]
		t.Run(name+", C dials", func(t *testing.T) {
			var asked atomic.Int32
			L := cnet.Listen(listenTCP(t), &cnet.Options{TLS: &cnet.TLS{Identity: srv, AuthOnly: goAuth, Admit: func(string, [32]byte) bool {
				asked.Add(1)
				return true
			}}})
			defer L.Close()
			args := []string{"dial", L.Addr().String(), "1", "-pin", hex.EncodeToString(srv.Fingerprint[:])}
			if !goAuth {
				args = append(args, "-auth")
			}
			p := spawn(t, "", peer, args...)
			field(t, p.Line(t), "fp")
			io.WriteString(p.stdin, "go\n")
			if got := field(t, p.Line(t), "error"); !strings.HasPrefix(got, "-4505 ") {
				t.Errorf("the C dialer: error %s, want -4505 (CHANOS_ERR_MODE)", got)
			}
			p.wait(t, 3)
			if n := asked.Load(); n != 0 {
				t.Errorf("the Go listener was asked to admit %d times, want 0", n)
			}
		})
		t.Run(name+", Go dials", func(t *testing.T) {
			args := []string{"listen", "1", "-admit", hex.EncodeToString(cli.Fingerprint[:])}
			if !goAuth {
				args = append(args, "-auth")
			}
			p := spawn(t, "", peer, args...)
			pin := fingerprint(t, field(t, p.Line(t), "fp"))
			addr := "127.0.0.1:" + field(t, p.Line(t), "port")
			_, err := cnet.Dial(testkit.Context(t), addr, &cnet.Options{TLS: &cnet.TLS{Identity: cli, Peer: pin, AuthOnly: goAuth}})
			if !errors.Is(err, cnet.ErrMode) {
				t.Errorf("Dial = %v, want ErrMode", err)
			}
			// The admission was not spent: a client of the listener's mode
			// is admitted, and one frame crosses each way.
			ctx := testkit.Context(t)
			l, err := cnet.Dial(ctx, addr, &cnet.Options{TLS: &cnet.TLS{Identity: cli, Peer: pin, AuthOnly: !goAuth}})
			if err != nil {
				t.Fatalf("a dial of the listener's mode after the refused one: %v", err)
			}
			defer l.Close()
			if err := l.SendFrame(ctx, netFrame(0), nil); err != nil {
				t.Fatal(err)
			}
			var in interconnect.Incoming
			if err := l.Receive(ctx, &in); err != nil || !bytes.Equal(in.Frame, netFrame(0)) {
				t.Fatalf("receive: %d bytes, %v", len(in.Frame), err)
			}
			l.Close()
			p.Expect(t, "received 1 resumes 0")
			p.Expect(t, "closed")
			p.wait(t, 0)
		})
	}
}

// A C listener answers a resume that presents another certificate than
// the one that opened the connection as an unknown connection (REJECT 1),
// even with the right connection id, and takes one with the opening
// certificate; the connection goes on.
func TestNetCListenerResumeNeedsSameCertificate(t *testing.T) {
	peer := netPeer(t)
	cli, err := cnet.NewIdentity()
	if err != nil {
		t.Fatal(err)
	}
	thief, err := cnet.NewIdentity()
	if err != nil {
		t.Fatal(err)
	}
	p := spawn(t, "", peer, "listen", fmt.Sprint(netFrames), "-admit", hex.EncodeToString(cli.Fingerprint[:]))
	pin := fingerprint(t, field(t, p.Line(t), "fp"))
	addr := "127.0.0.1:" + field(t, p.Line(t), "port")
	ctx := testkit.Context(t)
	l, err := cnet.Dial(ctx, addr, &cnet.Options{TLS: &cnet.TLS{Identity: cli, Peer: pin}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	// resume sends a hello that resumes the connection, over TLS with
	// cert, and returns the type of the record that answers it and the
	// code of a REJECT.
	resume := func(cert tls.Certificate) (byte, uint32) {
		raw, err := (&stdnet.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer raw.Close()
		tc := tls.Client(raw, &tls.Config{
			MinVersion:         tls.VersionTLS13,
			Certificates:       []tls.Certificate{cert},
			InsecureSkipVerify: true, // who the server is does not matter here
			ServerName:         "chanos",
		})
		if err := tc.HandshakeContext(ctx); err != nil {
			t.Fatal(err)
		}
		id := l.ID()
		hello := make([]byte, 24+36)
		hello[0] = 4 // HELLO; its ack, the last received, is 0
		binary.LittleEndian.PutUint32(hello[4:], 36)
		copy(hello[24:], "chnt")
		binary.LittleEndian.PutUint16(hello[28:], 1) // version
		binary.LittleEndian.PutUint16(hello[30:], 1) // RESUME
		copy(hello[32:48], id[:])
		binary.LittleEndian.PutUint32(hello[48:], 1<<16)
		binary.LittleEndian.PutUint32(hello[52:], 64)
		binary.LittleEndian.PutUint32(hello[56:], 1<<20)
		if _, err := tc.Write(hello); err != nil {
			t.Fatal(err)
		}
		reply := make([]byte, 28)
		if _, err := io.ReadFull(tc, reply); err != nil {
			t.Fatalf("reading the answer to a resume: %v", err)
		}
		return reply[0], binary.LittleEndian.Uint32(reply[24:])
	}
	// The thief knows the id, but has a certificate of its own.
	if typ, code := resume(thief.Cert); typ != 5 || code != 1 {
		t.Errorf("the stolen resume was answered with record type %d, code %d; want REJECT 1", typ, code)
	}
	// The same resume with the opening certificate is taken (a HELLO
	// answers it): the id was right. The Go link's own connection is
	// dropped for it, and the Go link resumes in turn.
	if typ, _ := resume(cli.Cert); typ != 4 {
		t.Errorf("the resume with the opening certificate was answered with record type %d, want HELLO", typ)
	}

	netStream(t, l)
	if n := l.Resumes(); n == 0 {
		t.Errorf("the Go link was not resumed after its connection was taken over")
	}
	l.Close()
	checkPeerDone(t, p)
}
