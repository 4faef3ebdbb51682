package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/interfaces/pingpong"
	"github.com/chanos/chanos/internal/testkit"
	"github.com/chanos/chanos/internal/testkit/files"
)

func init() {
	roles["hands"] = handsServer
	roles["handclient"] = handClient
	roles["handserve"] = handServe
}

// handsServer joins the monitor in args[0] and exports the files
// interface under args[1]; for each hand message it opens the pingpong
// endpoint it carries and serves echo on it, printing "opened via=V".
func handsServer(args []string) error {
	ctx := context.Background()
	d, err := chanos.Join(ctx, chanos.WithDir(args[0]), chanos.WithProgram("hands"))
	if err != nil {
		return err
	}
	l, err := files.Export(ctx, d, args[1])
	if err != nil {
		return err
	}
	fmt.Println("exported")
	return files.Serve(ctx, l, handsSrv{ctx: ctx})
}

type handsSrv struct {
	files.UnimplementedServer
	ctx context.Context
}

func (s handsSrv) Hand(_ context.Context, _ *files.Client, m files.Hand) error {
	raw, err := chanos.OpenEndpoint(m.Endpoint, pingpong.Interface)
	if err != nil {
		fmt.Printf("open: %v\n", err)
		return nil
	}
	fmt.Printf("opened via=%s\n", raw.Interconnect())
	c := pingpong.NewConn(raw)
	go func() {
		defer c.Close()
		c.Serve(s.ctx, &echoServer{})
	}()
	return nil
}

// handOver joins the monitor in dir as program, connects to the files
// export name (on another machine), makes a pingpong endpoint and hands it
// over on that connection. It returns the connection, the endpoint's own
// end, and what closes the domain and the connection; a hand that fails
// is printed ("hand: ERR"), and near is then nil.
func handOver(ctx context.Context, dir, name, program string) (c *files.Conn, near *chanos.Conn, done func(), err error) {
	d, err := chanos.Join(ctx, chanos.WithDir(dir), chanos.WithProgram(program))
	if err != nil {
		return nil, nil, nil, err
	}
	c, err = files.Connect(ctx, d, name)
	if err != nil {
		d.Close()
		return nil, nil, nil, err
	}
	done = func() { c.Close(); d.Close() }
	near, ep, err := chanos.NewEndpoint(pingpong.Interface)
	if err != nil {
		done()
		return nil, nil, nil, err
	}
	if err := c.Send(ctx, &files.Hand{Endpoint: ep, Iface: pingpong.InterfaceName}); err != nil {
		fmt.Printf("hand: %v\n", err)
		done()
		return nil, nil, nil, nil
	}
	return c, near, done, nil
}

// handClient joins the monitor in args[0], connects to the files export
// named args[1] (on another machine), makes a pingpong endpoint, hands it
// over and makes echo rpcs on its own end, printing "echo ok N"; then it
// tries to send a file descriptor and prints how that failed.
func handClient(args []string) error {
	ctx := context.Background()
	c, near, done, err := handOver(ctx, args[0], args[1], "handclient")
	if err != nil || near == nil {
		return err
	}
	defer done()
	p := pingpong.NewConn(near)
	n := 0
	for i := uint64(0); i < 1000; i++ {
		r, err := p.Echo(ctx, i)
		if err != nil || r != i+1 {
			fmt.Printf("echo %d: %d, %v\n", i, r, err)
			return nil
		}
		n++
	}
	fmt.Printf("echo ok %d\n", n)
	p.Close()
	f, err := os.Open("/dev/null")
	if err != nil {
		return err
	}
	err = c.Send(ctx, &files.Share{FD: f, Tag: 1})
	fmt.Printf("fd: caps unsupported %v\n", errors.Is(err, chanos.ErrCapsUnsupported))
	return nil
}

// handServe joins the monitor in args[0], connects to the files export
// named args[1] (on another machine), makes a pingpong endpoint, hands it
// over and serves echo on its own end until the endpoint's opener closes
// it; then it prints "served N" (N the echo calls answered) and, once the
// files connection ends too, exits.
func handServe(args []string) error {
	ctx := context.Background()
	_, near, done, err := handOver(ctx, args[0], args[1], "handserve")
	if err != nil || near == nil {
		return err
	}
	defer done()
	p := pingpong.NewConn(near)
	s := &countingEcho{}
	err = p.Serve(ctx, s)
	fmt.Printf("served %d\n", s.n.Load())
	if err != nil && !errors.Is(err, chanos.ErrClosed) {
		fmt.Printf("serve: %v\n", err)
	}
	return nil
}

// countingEcho answers echo with val + 1 and counts the calls.
type countingEcho struct {
	pingpong.UnimplementedServer
	n atomic.Uint64
}

func (s *countingEcho) Echo(_ context.Context, val uint64) (uint64, error) {
	s.n.Add(1)
	return val + 1, nil
}

// TestCEndpointAcrossMachines: a Go domain on machine 2 hands a pingpong
// endpoint to a C domain on machine 1, which opens it (re-bound through
// the monitors) and makes echo rpcs on it; opened as another interface,
// with a forged token, or a second time, it is refused, and nothing of
// that disturbs the opened connection.
func TestCEndpointAcrossMachines(t *testing.T) {
	peer := filepath.Join(testkit.CBuild(t, filepath.Join("tools", "chanos-ep-peer")), "tools", "chanos-ep-peer")
	w := twoMachines(t)
	cs := testkit.Start(t, w.net.Machines[0].Command(peer, "open", w.dirs[0], "chands", "1000"))
	cs.Expect(t, "exported chands")
	argv := testkit.Command("handserve", w.dirs[1], "chands")
	gs := testkit.Start(t, w.net.Machines[1].Command(argv[0], argv[1:]...))
	for _, want := range []string{
		"ref other machine",
		fmt.Sprintf("wrong interface %d", cMismatch),
		fmt.Sprintf("forged %d", cDenied),
		"opened",
		"echo ok 1000",
		fmt.Sprintf("used %d", cNotFound),
		"done",
	} {
		if l := cs.Line(t); l != want {
			t.Fatalf("C domain: %q, want %q", l, want)
		}
	}
	exited(t, cs)
	if l := gs.Line(t); l != "served 1000" {
		t.Fatalf("Go domain: %q, want served 1000", l)
	}
	exited(t, gs)
	for i := range 2 {
		if strings.Contains(w.logs[i].String(), "level=ERROR") {
			t.Errorf("machine %d's monitor logged an error:\n%s", i+1, w.logs[i])
		}
	}
}

// TestCEndpointToOtherMachine: a C domain on machine 2 hands a pingpong
// endpoint to a Go domain on machine 1, which opens it over net (the C
// side exports it privately and relays it) and serves echo on it; the C
// domain makes 1000 echo rpcs on its own end. A pipe sent the same way is
// refused at send, and the connection goes on. The same to a C domain on
// machine 1; and the opener killed, the endpoint's maker sees its peer go,
// as does the maker of an endpoint whose frame could not be sent.
func TestCEndpointToOtherMachine(t *testing.T) {
	peer := filepath.Join(testkit.CBuild(t, filepath.Join("tools", "chanos-ep-peer")), "tools", "chanos-ep-peer")
	w, srv := handsWorld(t)
	cl := testkit.Start(t, w.net.Machines[1].Command(peer, "hand", w.dirs[1], "hands", "1000"))
	if l := srv.Line(t); l != "opened via=net" {
		t.Fatalf("Go server: %q, want the endpoint opened over net", l)
	}
	cl.Expect(t, "echo ok 1000")
	cl.Expect(t, fmt.Sprintf("fd: %d", cCap))
	cl.Expect(t, "done")
	exited(t, cl)

	// C to C: a C domain on machine 1 opens it and serves echo.
	cs := testkit.Start(t, w.net.Machines[0].Command(peer, "serve", w.dirs[0], "cserve"))
	cs.Expect(t, "exported cserve")
	cl = testkit.Start(t, w.net.Machines[1].Command(peer, "hand", w.dirs[1], "cserve", "500"))
	cs.Expect(t, "opened")
	cl.Expect(t, "echo ok 500")
	cl.Expect(t, fmt.Sprintf("fd: %d", cCap))
	cl.Expect(t, "done")
	exited(t, cl)
	cs.Expect(t, "served 500")
	exited(t, cs)

	// The opener killed with -9: the relay ends, and the endpoint's maker
	// sees its peer go, as on one machine.
	cw := testkit.Start(t, w.net.Machines[1].Command(peer, "hand-wait", w.dirs[1], "hands"))
	if l := srv.Line(t); l != "opened via=net" {
		t.Fatalf("Go server: %q, want the endpoint opened over net", l)
	}
	cw.Expect(t, "bound")
	killed := time.Now()
	srv.Kill()
	if l := cw.Line(t); l != fmt.Sprintf("ended %d", cClosed) && l != fmt.Sprintf("ended %d", cPeerDied) {
		t.Fatalf("C maker after the opener was killed: %q, want closed or peer died", l)
	} else {
		t.Logf("C maker, the opener of its endpoint on another machine killed with -9: %s; %v after the kill", l, time.Since(killed).Round(time.Millisecond))
	}
	// An endpoint handed over on the connection that died with the server:
	// the send fails, the export is withdrawn, and its maker sees its peer go.
	var sent, maker int
	l := cw.Line(t)
	if _, err := fmt.Sscanf(l, "unsent %d maker %d", &sent, &maker); err != nil || sent >= 0 || (maker != cClosed && maker != cPeerDied) {
		t.Fatalf("C maker: %q, want a failed send (unsent CODE) and its endpoint's maker to see its peer go (maker closed or peer died)", l)
	}
	t.Logf("C maker, an endpoint on a dead connection: %s", l)
	exited(t, cw)
	for i := range 2 {
		if strings.Contains(w.logs[i].String(), "level=ERROR") {
			t.Errorf("machine %d's monitor logged an error:\n%s", i+1, w.logs[i])
		}
	}
}

// twoMachines starts two admitted machines, 1 and 2, of a three-member
// etcd, and waits until machine 2 has its control link to machine 1.
func twoMachines(t *testing.T) *world {
	w := newWorld(t, 3, 3)
	for i := range 2 {
		w.admit(i, w.root)
		w.start(i)
	}
	w.awaitLink(1, 0)
	return w
}

// handsWorld is twoMachines with a Go domain on machine 1 that takes the
// endpoints handed to its files export "hands" (the role hands).
func handsWorld(t *testing.T) (*world, *testkit.Child) {
	w := twoMachines(t)
	argv := testkit.Command("hands", w.dirs[0], "hands")
	srv := testkit.Start(t, w.net.Machines[0].Command(argv[0], argv[1:]...))
	srv.Expect(t, "exported")
	return w, srv
}

// exited waits for c to end and fails the test unless it exited with 0
// (a sanitizer's report exits with 23), showing what it printed last.
func exited(t *testing.T, c *testkit.Child) {
	t.Helper()
	if err := c.Wait(t); err != nil {
		t.Fatalf("%v:\n%s", err, strings.Join(c.Remaining(), "\n"))
	}
}

// libchanos's codes (chanos.h) that the C domains of these tests print.
const (
	cCap      = -4109
	cClosed   = -4203
	cPeerDied = -4204
	cNotFound = -4305
	cMismatch = -4306
	cDenied   = -4308
)

// TestEndpointAcrossMachines: a channel endpoint sent to a domain of
// another machine arrives as a working net connection (re-bound through
// the monitors), and rpcs run over it; a file descriptor sent to another
// machine fails at send with ErrCapsUnsupported, and the connection goes
// on.
func TestEndpointAcrossMachines(t *testing.T) {
	w, srv := handsWorld(t)
	argv := testkit.Command("handclient", w.dirs[1], "hands")
	cl := testkit.Start(t, w.net.Machines[1].Command(argv[0], argv[1:]...))
	if l := srv.Line(t); l != "opened via=net" {
		t.Fatalf("server: %q, want the endpoint opened over net", l)
	}
	if l := cl.Line(t); l != "echo ok 1000" {
		t.Fatalf("client: %q", l)
	}
	if l := cl.Line(t); l != "fd: caps unsupported true" {
		t.Fatalf("client: %q", l)
	}
	cl.Wait(t)
	if strings.Contains(w.logs[0].String(), "level=ERROR") {
		t.Errorf("machine 1's monitor logged an error:\n%s", w.logs[0])
	}
}
