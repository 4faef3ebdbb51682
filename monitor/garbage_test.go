package monitor

import (
	"crypto/rand"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	proto "github.com/chanos/chanos/internal/protocol/monitor"
	"github.com/chanos/chanos/internal/testkit"
	"github.com/chanos/chanos/wire"
)

// rawConn is a connection to the monitor that sends whatever the test
// wants.
type rawConn struct {
	t  *testing.T
	uc *net.UnixConn
}

func (tm *testMonitor) raw(t *testing.T) *rawConn {
	t.Helper()
	return rawDial(t, tm.Socket())
}

// rawDial connects to the monitor's socket sock.
func rawDial(t *testing.T, sock string) *rawConn {
	t.Helper()
	uc, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { uc.Close() })
	return &rawConn{t: t, uc: uc}
}

func (r *rawConn) send(frame []byte, files ...*os.File) {
	r.t.Helper()
	var oob []byte
	if len(files) > 0 {
		fds := make([]int, len(files))
		for i, f := range files {
			fds[i] = int(f.Fd())
		}
		oob = syscall.UnixRights(fds...)
	}
	if _, _, err := r.uc.WriteMsgUnix(frame, oob, nil); err != nil {
		r.t.Fatalf("send: %v", err)
	}
}

// receive reads one packet; nil at end of file.
func (r *rawConn) receive() []byte {
	r.t.Helper()
	buf := make([]byte, 1<<16)
	n, err := r.uc.Read(buf)
	if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
		return nil
	}
	if err != nil {
		r.t.Fatalf("receive: %v", err)
	}
	return buf[:n]
}

// hello says hello and returns the reply.
func (r *rawConn) hello() {
	r.t.Helper()
	r.send(encode(r.t, &proto.HelloCall{Version: proto.ProtocolVersion, Program: "raw"}, 1))
	var rep proto.HelloReply
	if err := rep.Decode(r.receive(), nil); err != nil {
		r.t.Fatalf("hello reply: %v", err)
	}
}

// wantHangUp checks that the monitor hangs up, dropping what it received.
func (r *rawConn) wantHangUp() {
	r.t.Helper()
	for {
		p := r.receive()
		if p == nil {
			return
		}
		// An error reply may precede the hang-up; anything else is wrong.
		if _, _, err := wire.ParseErrorReply(p); err != nil {
			r.t.Fatalf("got a %d-byte packet instead of the hang-up", len(p))
		}
	}
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// Garbage ends the session that sent it, with the reason logged, and
// nothing else: other sessions carry on and nothing leaks.
func TestGarbageDropsOnlyItsSession(t *testing.T) {
	tm := startMonitor(t, Config{})
	base := snapshotResources(t)
	ctx := testkit.Context(t)
	good := tm.dial(t, "good")
	if _, err := good.Export(ctx, "good", "kv", 1024); err != nil {
		t.Fatal(err)
	}

	hello := encode(t, &proto.HelloCall{Version: proto.ProtocolVersion, Program: "x"}, 1)
	withNCaps := func(frame []byte, n uint8) []byte {
		f := append([]byte(nil), frame...)
		f[7] = n
		return f
	}
	ps := encode(t, &proto.PsCall{}, 2)
	var cancelWithBody wire.Buffer
	wire.AppendCancel(&cancelWithBody, proto.MsgBind, 3)
	cancelWithBody.B = append(cancelWithBody.B, 0)
	wire.PutUint32(cancelWithBody.B, uint32(len(cancelWithBody.B)))
	badBool := encode(t, &proto.BindCall{Name: "x", Iface: "kv", Wait: true}, 4)
	badBool[len(badBool)-1-wire.IrefSize-8] = 2 // wait, before the target iref and the fingerprint
	longName := encode(t, &proto.WithdrawCall{Name: "x"}, 5)
	wire.PutUint32(longName[wire.HeaderSize:], 100000) // the name's length, past its bound
	badFlags := withNCaps(ps, 0)
	badFlags[6] = 0x10

	cases := []struct {
		name       string
		afterHello bool
		frame      []byte
		pipe       bool // attach a descriptor
		want       string
	}{
		{"random bytes", false, randomBytes(1000), false, "bad frame"},
		{"random bytes after hello", true, randomBytes(1000), false, "bad frame"},
		{"truncated header", false, hello[:10], false, "shorter than the 16-byte header"},
		{"truncated body", true, ps[:wire.HeaderSize-1], false, "shorter than the 16-byte header"},
		{"size field too large", false, append(append([]byte(nil), hello...), 0, 0, 0), false, "bad frame"},
		{"ncaps without descriptors", false, withNCaps(hello, 1), false, "announces 1 descriptors but 0 arrived"},
		{"descriptor without ncaps", false, hello, true, "announces 0 descriptors but 1 arrived"},
		{"descriptor without ncaps after hello", true, ps, true, "announces 0 descriptors but 1 arrived"},
		{"ncaps on a call without caps", true, withNCaps(ps, 1), true, "monitor.ps"},
		{"first call not hello", false, ps, false, "the first frame must be the hello call"},
		{"hello twice", true, hello, false, "hello sent twice"},
		{"a reply from a domain", true, encode(t, &proto.HelloReply{}, 1), false, "which was never made"},
		{"a message from a domain", true, encode(t, &proto.Incoming{}, 0), false, "not a message"},
		{"bad flags", true, badFlags, false, "invalid flags"},
		{"cancel with a body", true, cancelWithBody.B, false, "bad cancel"},
		{"bad bool", true, badBool, false, "bool"},
		{"string past its bound", true, longName, false, "bound"},
		{"empty packet", true, []byte{}, false, ""},
		{"packet over the call bound", true, randomBytes(MaxCallFrame + 1), false, "packet too large"},
		{"packet over the call bound before hello", false, randomBytes(100000), false, "packet too large"},
		{"unknown message", true, func() []byte { f := append([]byte(nil), ps...); f[4] = 99; return f }(), false, "names no message of monitor"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := tm.raw(t)
			if c.afterHello {
				r.hello()
			}
			var pr, pw *os.File
			if c.pipe {
				var err error
				if pr, pw, err = os.Pipe(); err != nil {
					t.Fatal(err)
				}
				defer pw.Close()
				r.send(c.frame, pr)
				pr.Close()
			} else {
				r.send(c.frame)
			}
			r.wantHangUp()
			if c.want != "" {
				if c.afterHello {
					tm.logs.Wait(t, "domain dropped", "program=raw", c.want)
				} else {
					tm.logs.Wait(t, "dropped before hello", c.want)
				}
			}
			if c.pipe {
				// The monitor closed the descriptor it was sent: the pipe
				// has no reader left.
				testkit.Eventually(t, "the monitor to close the descriptor", func() bool {
					_, err := pw.Write([]byte{1})
					return errors.Is(err, syscall.EPIPE)
				})
			}
			// The others carry on.
			if _, err := good.Ps(ctx); err != nil {
				t.Fatalf("the good session after %s: %v", c.name, err)
			}
		})
	}

	// Hanging up in the middle of calls: a waiting bind, an export whose
	// reply is never read.
	for range 20 {
		r := tm.raw(t)
		r.hello()
		r.send(encode(t, &proto.BindCall{Name: "never", Iface: "kv", Wait: true}, 7))
		r.send(encode(t, &proto.ExportCall{Name: "half", Iface: "kv", MaxFrame: 1024}, 8))
		r.send(encode(t, &proto.BindCall{Name: "good", Iface: "kv"}, 9))
		r.uc.Close()
	}
	// The good domain got (and must release) the incoming connections of
	// the binds that were served before the hang-ups.
	drain := make(chan struct{})
	go func() {
		defer close(drain)
		for in := range good.Incoming() {
			closeCaps(in.Fds)
		}
	}()
	testkit.Eventually(t, "the raw sessions to end", func() bool { return tm.sessionCount() == 1 })
	if _, err := good.Export(ctx, "half", "kv", 1024); err != nil {
		t.Fatalf("the name of a departed domain: %v", err)
	}
	good.Close()
	<-drain
	tm.checkNoLeaks(t, base)
}

// A connection that never says hello is dropped after the hello timeout.
func TestHelloTimeout(t *testing.T) {
	tm := startMonitor(t, Config{HelloTimeout: 10 * time.Millisecond})
	r := tm.raw(t)
	r.wantHangUp()
	tm.logs.Wait(t, "dropped before hello", "no hello within the hello timeout")
}

// A connection beyond --max-domains has its hello answered with "monitor
// full: N of N sessions", and is closed; the warnings name the cap, a
// line a second with the count of those left out; the domains within the
// cap carry on.
func TestSessionCap(t *testing.T) {
	const cap = 4
	tm := startMonitor(t, Config{MaxDomains: cap})
	ctx := testkit.Context(t)
	var clients []*Client
	for range cap {
		clients = append(clients, tm.dial(t, "member"))
	}
	start := time.Now()
	const flood = 3000
	for i := range flood {
		r := tm.raw(t)
		r.send(encode(t, &proto.HelloCall{Version: proto.ProtocolVersion, Program: "extra"}, 1))
		p := r.receive()
		_, st, err := wire.ParseErrorReply(p)
		if err != nil || st.Code != wire.Errval(proto.StatusLimit) || st.Detail != "monitor full: 4 of 4 sessions" {
			t.Fatalf("connection %d beyond the cap: %q, %+v, %v; want the error reply \"monitor full: 4 of 4 sessions\"", i, p, st, err)
		}
		r.wantHangUp()
		r.uc.Close()
	}
	elapsed := time.Since(start)
	lines := tm.logs.Count("too many domains", "max_domains=4")
	if most := int(elapsed/time.Second) + 2; lines == 0 || lines > most {
		t.Fatalf("%d warnings naming the cap in %v, want 1 to %d", lines, elapsed, most)
	}
	testkit.Eventually(t, "the count of the warnings left out", func() bool {
		return tm.logs.Count("too many domains", "suppressed=") > 0 || tm.logs.Count("kind=monitor-full", "suppressed=") > 0
	})
	for _, c := range clients {
		if _, err := c.Ps(ctx); err != nil {
			t.Fatalf("a member after the flood: %v", err)
		}
	}
	// A place freed is taken again.
	clients[0].Close()
	testkit.Eventually(t, "the session to end", func() bool { return tm.sessionCount() == cap-1 })
	c := tm.dial(t, "newcomer")
	snap, err := c.Ps(ctx)
	if err != nil || snap.Monitor.Limits.Domains != cap || snap.Monitor.Limits.MaxDomains != cap {
		t.Fatalf("ps %+v, %v", snap.Monitor.Limits, err)
	}
}

// A call id reused while the bind that has it is in progress ends the
// session: a cancel for it could not tell the two apart.
func TestReusedCallID(t *testing.T) {
	tm := startMonitor(t, Config{})
	r := tm.raw(t)
	r.hello()
	r.send(encode(t, &proto.BindCall{Name: "never", Iface: "kv", Wait: true}, 7))
	r.send(encode(t, &proto.BindCall{Name: "never", Iface: "kv", Wait: true}, 7))
	r.wantHangUp()
	tm.logs.Wait(t, "domain dropped", "program=raw", "call id 7 reused while its call is in progress")
}
