package chanos_test

// The peer's end reaches the handlers running for its calls: a client
// killed with -9, or one that closes its connection, while the server's
// handler waits on its context, inline (Serve's default) or concurrently.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/chanos/genrt"
	"github.com/chanos/chanos/interconnect"
	"github.com/chanos/chanos/interfaces/pingpong"
	"github.com/chanos/chanos/internal/testkit"
	"github.com/chanos/chanos/internal/testkit/testmonitor"
	"github.com/chanos/chanos/wire"
)

// roleCaller, in a child process, connects to the name args[0], says
// "calling" and calls echo with blockForever in the background. With
// args[1] "close" it closes the connection when a line comes on its
// stdin, says "closed" once its own call has ended with ErrClosed, and
// stays until its stdin ends: the server sees an orderly close from a
// process that is still there. Otherwise it waits to be killed.
func roleCaller(args []string) error {
	ctx := context.Background()
	d, err := chanos.Join(ctx)
	if err != nil {
		return err
	}
	c, err := pingpong.Connect(ctx, d, args[0])
	if err != nil {
		return err
	}
	echoed := make(chan error, 1)
	go func() { _, err := c.Echo(ctx, blockForever); echoed <- err }()
	fmt.Println("calling")
	in := bufio.NewScanner(os.Stdin)
	if len(args) < 2 || args[1] != "close" {
		return fmt.Errorf("echo returned: %w", <-echoed)
	}
	if !in.Scan() {
		return errors.New("stdin ended before the close")
	}
	c.Close()
	if err := <-echoed; !errors.Is(err, chanos.ErrClosed) {
		return fmt.Errorf("echo after close = %v, want ErrClosed", err)
	}
	fmt.Println("closed")
	for in.Scan() {
	}
	return nil
}

// goneServer's echo of blockForever says that it runs, waits for its
// context to end, reports how, then returns once the test lets it go.
// Other values are echoed plus one.
type goneServer struct {
	pingpong.UnimplementedServer
	called  chan struct{}
	ended   chan handlerEnd
	release chan struct{}
	once    sync.Once
}

// let lets the handler return; a test that fails before calls it too, on
// its way out.
func (s *goneServer) let() { s.once.Do(func() { close(s.release) }) }

// handlerEnd is how and when a handler's context ended.
type handlerEnd struct {
	err, cause error
	at         time.Time
}

func newGoneServer() *goneServer {
	return &goneServer{called: make(chan struct{}, 1), ended: make(chan handlerEnd, 1), release: make(chan struct{})}
}

func (s *goneServer) Echo(ctx context.Context, v uint64) (uint64, error) {
	if v != blockForever {
		return v + 1, nil
	}
	s.called <- struct{}{}
	<-ctx.Done()
	s.ended <- handlerEnd{ctx.Err(), context.Cause(ctx), time.Now()}
	<-s.release
	return 0, ctx.Err()
}

// resources counts the process's open descriptors and its mappings of
// ump ring pairs (memfds named chanos-ump).
func resources(t *testing.T) (fds, maps int) {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents), strings.Count(string(b), "chanos-ump")
}

// awaitResources waits until the counts are back to fds (unless it is
// negative) and maps.
func awaitResources(t *testing.T, fds, maps int) {
	t.Helper()
	limit := time.Now().Add(10 * time.Second)
	for {
		f, m := resources(t)
		if (f == fds || fds < 0) && m == maps {
			return
		}
		if time.Now().After(limit) {
			t.Fatalf("%d descriptors and %d ring mappings open, want %d and %d as before the client came", f, m, fds, maps)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// serveModes are the ways Serve runs a call: inline in the reading
// goroutine, or in a goroutine of its own.
var serveModes = map[string][]chanos.ServeOption{
	"inline":     nil,
	"concurrent": {chanos.Concurrent(4)},
}

// A client process that dies (kill -9) or closes its connection in the
// middle of an rpc cancels the context of the server's handler at once,
// inline or concurrent; the connection's descriptors and mapping are
// released once the handler returns, and the server goes on serving other
// clients.
func TestPeerEndCancelsHandler(t *testing.T) {
	for _, how := range []string{"kill", "close"} {
		for mode, opts := range serveModes {
			t.Run(how+"/"+mode, func(t *testing.T) { testPeerEndOverUMP(t, how, opts) })
		}
	}
}

// serveGone serves a goneServer under name, from a domain of a new
// monitor, until the test ends; it returns the monitor's directory, the
// domain and the server.
func serveGone(t *testing.T, name string, opts []chanos.ServeOption) (string, *chanos.Domain, *goneServer) {
	t.Helper()
	dir := testmonitor.Start(t)
	ctx := testkit.Context(t)
	d, err := chanos.Join(ctx, chanos.WithDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	l, err := pingpong.Export(ctx, d, name)
	if err != nil {
		t.Fatal(err)
	}
	srv := newGoneServer()
	sctx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- pingpong.Serve(sctx, l, srv, opts...) }()
	t.Cleanup(func() { // before d.Close
		srv.let()
		stop()
		l.Close()
		<-served
	})
	return dir, d, srv
}

func testPeerEndOverUMP(t *testing.T, how string, opts []chanos.ServeOption) {
	ctx := testkit.Context(t)
	dir, _, srv := serveGone(t, "mortal", opts)
	fds, maps := resources(t)

	cmd := testkit.Self("caller", "mortal", how)
	cmd.Env = append(cmd.Env, "CHANOS_DIR="+dir)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	cli := testkit.Start(t, cmd)
	cli.Expect(t, "calling")
	testkit.Await(t, "the client's echo call in the handler", srv.called)
	if _, m := resources(t); m != maps+1 {
		t.Fatalf("%d ring mappings while the client is connected, want %d", m, maps+1)
	}

	var endedAt time.Time
	if how == "kill" {
		endedAt = time.Now()
		cli.Kill()
	} else {
		endedAt = time.Now()
		fmt.Fprintln(stdin, "close")
	}
	var end handlerEnd
	select {
	case end = <-srv.ended:
	case <-time.After(10 * time.Second):
		t.Fatalf("the handler's context did not end within 10s of the client's %s", how)
	}
	if dt := end.at.Sub(endedAt); dt > time.Second {
		t.Errorf("the handler's context ended %v after the client's %s, want within 1s", dt, how)
	}
	// Why: the peer's going, seen by the watch, or the connection's end,
	// if the reader saw it first (it reads on while a call runs
	// concurrently).
	want := chanos.ErrPeerDied
	if how == "close" {
		want = chanos.ErrClosed
	}
	if !errors.Is(end.err, context.Canceled) || end.cause == nil || !strings.Contains(end.cause.Error(), "peer has gone") && !errors.Is(end.cause, want) {
		t.Errorf("the handler's context ended with %v (cause %v), want context.Canceled because the peer has gone", end.err, end.cause)
	}
	if how == "close" {
		cli.Expect(t, "closed")
	}
	// The connection is held while its handler runs: its mapping is there.
	if _, m := resources(t); m != maps+1 {
		t.Errorf("%d ring mappings while the handler still runs, want %d", m, maps+1)
	}
	srv.let()
	if how == "close" {
		// The ring pair goes with the handler; the client's session with
		// the monitor, in this process too, with the client.
		awaitResources(t, -1, maps)
		stdin.Close()
		if err := cli.Wait(t); err != nil {
			t.Fatalf("client: %v", err)
		}
	}
	awaitResources(t, fds, maps)

	// The server goes on: another client (a domain of its own, so over
	// ump) is served.
	d2, err := chanos.Join(ctx, chanos.WithDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	c, err := pingpong.Connect(ctx, d2, "mortal")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Raw().Interconnect() != "ump" {
		t.Fatalf("second client over %s, want ump", c.Raw().Interconnect())
	}
	if v, err := c.Echo(ctx, 41); err != nil || v != 42 {
		t.Fatalf("echo from the next client = %d, %v", v, err)
	}
	stdin.Close()
}

// Over the local interconnect (a client of the server's own domain), a
// client that closes its connection in the middle of an rpc cancels the
// server handler's context at once too, and the server goes on serving.
func TestPeerCloseCancelsLocalHandler(t *testing.T) {
	for mode, opts := range serveModes {
		t.Run(mode, func(t *testing.T) {
			ctx := testkit.Context(t)
			_, d, srv := serveGone(t, "neighbour", opts)
			c, err := pingpong.Connect(ctx, d, "neighbour")
			if err != nil {
				t.Fatal(err)
			}
			if c.Raw().Interconnect() != "local" {
				t.Fatalf("client over %s, want local", c.Raw().Interconnect())
			}
			echoed := make(chan error, 1)
			go func() { _, err := c.Echo(ctx, blockForever); echoed <- err }()
			testkit.Await(t, "the client's echo call in the handler", srv.called)
			closedAt := time.Now()
			c.Close()
			if err := <-echoed; !errors.Is(err, chanos.ErrClosed) {
				t.Fatalf("the client's echo after its close = %v, want ErrClosed", err)
			}
			var end handlerEnd
			select {
			case end = <-srv.ended:
			case <-time.After(10 * time.Second):
				t.Fatal("the handler's context did not end within 10s of the client's close")
			}
			if dt := end.at.Sub(closedAt); dt > time.Second || !errors.Is(end.err, context.Canceled) {
				t.Errorf("the handler's context ended %v after the close, with %v; want within 1s, context.Canceled", dt, end.err)
			}
			srv.let()
			c2, err := pingpong.Connect(ctx, d, "neighbour")
			if err != nil {
				t.Fatal(err)
			}
			defer c2.Close()
			if v, err := c2.Echo(ctx, 41); err != nil || v != 42 {
				t.Fatalf("echo from the next client = %d, %v", v, err)
			}
		})
	}
}

// lastWordsServer holds its first ping until the test lets it go, so that
// the peer's later frames wait in the connection, and records the pings
// and whether their handlers' contexts had ended; an echo records its
// context's error.
type lastWordsServer struct {
	pingpong.UnimplementedServer
	first   chan struct{} // receives when the first ping is in its handler
	hold    chan struct{}
	mu      sync.Mutex
	pings   []uint32
	ctxErrs []error
	echoErr chan error
}

func (s *lastWordsServer) Ping(ctx context.Context, from *pingpong.Client, m pingpong.Ping) error {
	if m.MsgID == 0 {
		s.first <- struct{}{}
		<-s.hold
	}
	s.mu.Lock()
	s.pings = append(s.pings, m.MsgID)
	s.ctxErrs = append(s.ctxErrs, ctx.Err())
	s.mu.Unlock()
	return nil
}

func (s *lastWordsServer) Echo(ctx context.Context, v uint64) (uint64, error) {
	s.echoErr <- ctx.Err()
	return v, nil
}

// A peer's orderly close loses none of what it sent before: its messages
// are still handled, in order, with contexts that its going does not
// end, while a call it sent, whose caller is gone, is handled with a
// context already canceled. Serve then returns nil.
func TestPeerCloseDeliversLastMessages(t *testing.T) {
	for mode, opts := range serveModes {
		t.Run(mode, func(t *testing.T) {
			forEach(t, func(t *testing.T, c, s *pingpong.Conn) {
				ctx := testkit.Context(t)
				srv := &lastWordsServer{first: make(chan struct{}, 1), hold: make(chan struct{}), echoErr: make(chan error, 1)}
				held := true
				defer func() {
					if held { // failed on the way: let the handler go
						close(srv.hold)
					}
				}()
				served := make(chan error, 1)
				go func() { served <- s.Serve(ctx, srv, opts...) }()
				if err := c.Send(ctx, &pingpong.Ping{MsgID: 0}); err != nil {
					t.Fatal(err)
				}
				testkit.Await(t, "the first ping in its handler", srv.first)
				const n = 20
				for i := uint32(1); i <= n; i++ {
					if err := c.Send(ctx, &pingpong.Ping{MsgID: i}); err != nil {
						t.Fatal(err)
					}
				}
				// A call frame, sent as is: it waits behind the pings when
				// the client closes, its caller gone.
				var call wire.Buffer
				if err := (&pingpong.EchoCall{Val: 7}).Encode(&call); err != nil {
					t.Fatal(err)
				}
				wire.SetCallID(call.B, 1)
				if err := genrt.Engine(c.Raw()).SendFrame(ctx, call.B); err != nil {
					t.Fatal(err)
				}
				c.Close()
				// The server's side learns of the close (over ump, through
				// the liveness socket, a moment later) before it reads on.
				gone := genrt.Engine(s.Raw()).Link().(interconnect.PeerWatcher).Gone()
				testkit.Await(t, "the server's side seeing the close", gone)
				close(srv.hold)
				held = false
				if err := testkit.Within(t, 10*time.Second, "Serve after the peer's close", func() error { return <-served }); err != nil {
					t.Fatalf("Serve = %v, want nil after the peer's close", err)
				}
				srv.mu.Lock()
				defer srv.mu.Unlock()
				if len(srv.pings) != n+1 {
					t.Fatalf("%d pings handled, want %d", len(srv.pings), n+1)
				}
				for i, id := range srv.pings {
					if id != uint32(i) || srv.ctxErrs[i] != nil {
						t.Fatalf("ping %d handled as %d with its context ended (%v)", i, id, srv.ctxErrs[i])
					}
				}
				select {
				case err := <-srv.echoErr:
					if !errors.Is(err, context.Canceled) {
						t.Fatalf("the call sent before the close was handled with context error %v, want context.Canceled", err)
					}
				default:
					t.Fatal("the call sent before the close was not handled")
				}
			})
		})
	}
}
