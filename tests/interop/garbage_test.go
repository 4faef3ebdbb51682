package interop

// Bad peers, seen from the C side: a C server and a C client each face a
// peer that sends frames no correct peer sends, and a C server keeps
// running while garbage arrives on the monitor's socket (the monitor
// issue's garbage cases, issue 5's "Done when"). The frames are written
// by Go domains of this test with chanos.Conn.SendFrame, which over ump
// puts bytes into the ring as they are.

import (
	"context"
	"errors"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/chanos/genrt"
	"github.com/chanos/chanos/interfaces/pingpong"
	"github.com/chanos/chanos/internal/testkit"
	"github.com/chanos/chanos/wire"
)

// badFrames are frames that break the wire format or the pingpong
// interface in one way each.
func badFrames() []struct {
	name  string
	frame []byte
} {
	ping := func(n int) []byte { // a ping frame of n bytes, header included
		f := make([]byte, n)
		wire.PutFixed(f, pingpong.MsgPing, wire.KindMessage)
		return f
	}
	sizeLies := ping(wire.HeaderSize + 8)
	sizeLies[0] = 200 // the header's size says 200 bytes
	unknown := make([]byte, wire.HeaderSize+8)
	wire.PutFixed(unknown, 999, wire.KindMessage)
	caps := ping(wire.HeaderSize + 8)
	caps[7] = 3 // three capabilities, and none passed
	noise := make([]byte, 64)
	for i := range noise {
		noise[i] = byte(0xa5 ^ i*37)
	}
	return []struct {
		name  string
		frame []byte
	}{
		{"empty frame", nil},
		{"cut header", make([]byte, 5)},
		{"header size disagrees with the frame", sizeLies},
		{"unknown message number", unknown},
		{"ping cut short", ping(wire.HeaderSize + 4)},
		{"ping with trailing bytes", ping(wire.HeaderSize + 12)},
		{"capabilities claimed, none passed", caps},
		{"noise", noise},
	}
}

// A C server that receives garbage on one connection ends that connection
// and nothing else: a Go client connected before goes on calling, and a C
// client started after is served.
func TestCServerGarbage(t *testing.T) {
	srv, cli := cProg(t, "pingpong_server"), cProg(t, "pingpong_client")
	dir := startMonitor(t)
	start(t, dir, "serving", srv, "-name", "target")
	ctx := context.Background()
	d := join(t, dir)
	good, err := pingpong.Connect(ctx, d, "target")
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	for i, bc := range badFrames() {
		bad, err := pingpong.Connect(ctx, d, "target")
		if err != nil {
			t.Fatalf("%s: connect: %v", bc.name, err)
		}
		if err := genrt.Engine(bad.Raw()).SendFrame(ctx, bc.frame); err != nil {
			t.Fatalf("%s: send: %v", bc.name, err)
		}
		// The server closes the connection; the Go side learns it from
		// the ring's close word.
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		m, err := bad.Receive(rctx)
		cancel()
		if !errors.Is(err, chanos.ErrClosed) {
			t.Errorf("%s: the bad connection's receive = %v, %v; want ErrClosed", bc.name, m, err)
		}
		bad.Close()
		if v, err := good.Echo(ctx, uint64(i)); err != nil || v != uint64(i) {
			t.Fatalf("after %s: the good connection's echo = %d, %v", bc.name, v, err)
		}
	}
	checkClientOutput(t, run(t, dir, cli, "-name", "target", "-n", "1000"))
}

// A C client whose server answers a ping with garbage fails with a clear
// error and exit status 1: no crash, no hang.
func TestCClientGarbage(t *testing.T) {
	cli := cProg(t, "pingpong_client")
	dir := startMonitor(t)
	ctx := context.Background()
	d := join(t, dir)
	l, err := pingpong.Export(ctx, d, "liar")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	pong := func(n int) []byte {
		f := make([]byte, n)
		wire.PutFixed(f, pingpong.MsgPong, wire.KindMessage)
		return f
	}
	echo := make([]byte, wire.HeaderSize+8)
	wire.PutFixed(echo, pingpong.MsgEcho, wire.KindMessage)
	sizeLies := pong(wire.HeaderSize + 8)
	sizeLies[0] = 99
	answers := []struct {
		name  string
		frame []byte
	}{
		{"cut header", make([]byte, 3)},
		{"header size disagrees with the frame", sizeLies},
		{"pong cut short", pong(wire.HeaderSize + 2)},
		{"echo's message number in place of the pong's", echo},
	}
	for _, a := range answers {
		name, answer := a.name, a.frame
		cmd := exec.Command(cli, "-name", "liar", "-n", "10")
		cmd.Env = cEnv(dir)
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		actx, cancel := context.WithTimeout(ctx, 20*time.Second)
		c, err := l.Accept(actx)
		cancel()
		if err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("%s: accept: %v", name, err)
		}
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		m, err := c.Receive(rctx)
		cancel()
		if _, ok := m.(*pingpong.Ping); err != nil || !ok {
			t.Errorf("%s: the first message = %v, %v; want a ping", name, m, err)
		}
		if err := genrt.Engine(c.Raw()).SendFrame(ctx, answer); err != nil {
			t.Errorf("%s: send: %v", name, err)
		}
		err = testkit.Within(t, 20*time.Second, "the C client after "+name, cmd.Wait)
		c.Close()
		if !checkExit(t, "the C client answered with "+name, err, out.String(), 1) {
			continue
		}
		if !strings.Contains(out.String(), "pingpong_client: receive pong: ") && !strings.Contains(out.String(), "pingpong_client: decode pong: ") {
			t.Errorf("%s: the C client's output names no error of the pong:\n%s", name, &out)
		}
		t.Logf("%s: %s", name, strings.TrimSpace(out.String()))
	}
}

// Garbage on the monitor's socket ends the session that sent it; a C
// server registered before keeps its name and serves a C client after.
func TestMonitorGarbageCDomainsCarryOn(t *testing.T) {
	srv, cli := cProg(t, "pingpong_server"), cProg(t, "pingpong_client")
	dir := startMonitor(t)
	start(t, dir, "serving", srv, "-name", "steady")
	for _, junk := range [][]byte{
		[]byte("GET / HTTP/1.0\r\n\r\n"),
		{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0},
		make([]byte, 4096),
	} {
		nc, err := net.Dial("unixpacket", filepath.Join(dir, "monitor.sock"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := nc.Write(junk); err != nil {
			t.Fatal(err)
		}
		// The monitor drops the session: the read ends, at the latest when
		// the deadline passes (which fails the test).
		nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		buf := make([]byte, 1024)
		for {
			if _, err := nc.Read(buf); err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					t.Errorf("the monitor kept a session that sent %d bytes of garbage", len(junk))
				}
				break
			}
		}
		nc.Close()
	}
	checkClientOutput(t, run(t, dir, cli, "-name", "steady", "-n", "1000"))
}
