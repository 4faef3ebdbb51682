package chanos_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/interfaces/nameservice"
	"github.com/chanos/chanos/interfaces/pingpong"
	"github.com/chanos/chanos/monitor"
)

type exampleServer struct{ pingpong.UnimplementedServer }

func (exampleServer) Echo(ctx context.Context, v uint64) (uint64, error) { return v, nil }

// A service and a client in one program. Across processes the code is the
// same; only the interconnect Connect picks changes (ump instead of local).
func Example() {
	ctx := context.Background()

	// A private monitor, as `chanos monitor --dir DIR` would run.
	dir, _ := os.MkdirTemp("", "chanos-example-")
	defer os.RemoveAll(dir)
	m, err := monitor.New(monitor.Config{Dir: dir, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		fmt.Println(err)
		return
	}
	mctx, stop := context.WithCancel(ctx)
	defer stop()
	go m.Serve(mctx)

	d, err := chanos.Join(ctx, chanos.WithDir(dir))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer d.Close()

	l, err := pingpong.Export(ctx, d, "example.pingpong")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Close()
	go pingpong.Serve(ctx, l, exampleServer{})

	c, err := pingpong.Connect(ctx, d, "example.pingpong")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	v, err := c.Echo(ctx, 42)
	fmt.Println(v, err, c.Raw().Interconnect())
	// Output: 42 <nil> local
}

type shelfServer struct{ pingpong.UnimplementedServer }

// codeNoShelf is an application's own code: from CodeApplication up.
const codeNoShelf = chanos.CodeApplication + 1

func (shelfServer) Echo(ctx context.Context, v uint64) (uint64, error) {
	switch {
	case v == 0:
		return 0, chanos.Errorf(chanos.CodeInvalidArgument, "shelf %d: shelves count from 1", v)
	case v > 100:
		return 0, chanos.Errorf(codeNoShelf, "shelf %d: no such shelf", v)
	}
	return v, nil
}

// Handlers fail with a status code; callers match it with errors.Is or
// read it with CodeOf. Application codes travel intact.
func ExampleErrorf() {
	a, b := chanos.LocalPair(pingpong.Interface)
	c, s := pingpong.NewConn(a), pingpong.NewConn(b)
	defer c.Close()
	defer s.Close()
	ctx := context.Background()
	go s.Serve(ctx, shelfServer{})

	_, err := c.Echo(ctx, 0)
	fmt.Println(errors.Is(err, chanos.CodeInvalidArgument), err)
	_, err = c.Echo(ctx, 101)
	fmt.Println(chanos.CodeOf(err) == codeNoShelf, err)
	// Output:
	// true pingpong.echo: invalid argument: shelf 0: shelves count from 1
	// true pingpong.echo: code 1001: shelf 101: no such shelf
}

// buggyServer's Echo indexes a table of three shelves without checking.
type buggyServer struct{ pingpong.UnimplementedServer }

func (buggyServer) Echo(ctx context.Context, v uint64) (uint64, error) {
	shelves := []uint64{10, 20, 30}
	return shelves[v], nil
}

// Under Recover, a handler's panic fails its call with CodeInternal, and
// the server goes on serving: the panic and its stack go to the log.
func ExampleRecover() {
	a, b := chanos.LocalPair(pingpong.Interface)
	c, s := pingpong.NewConn(a), pingpong.NewConn(b)
	defer c.Close()
	defer s.Close()
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler) // a real server logs somewhere
	go s.Serve(ctx, buggyServer{}, chanos.WithInterceptor(chanos.Recover(log)))

	_, err := c.Echo(ctx, 7)
	fmt.Println(errors.Is(err, chanos.CodeInternal), err)
	v, err := c.Echo(ctx, 1)
	fmt.Println(v, err)
	// Output:
	// true pingpong.echo: internal: the handler panicked
	// 20 <nil>
}

// exampleMonitor starts a private monitor in dir and returns a function
// that stops it (as if it died).
func exampleMonitor(dir string) (stop func(), err error) {
	m, err := monitor.New(monitor.Config{Dir: dir, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Serve(ctx); close(done) }()
	return func() { cancel(); <-done }, nil
}

// A domain whose monitor goes away hears of it at once, and rejoins the
// monitor that next starts in its directory, exporting its names again.
func ExampleOnMonitor() {
	dir, _ := os.MkdirTemp("", "chanos-example-")
	defer os.RemoveAll(dir)
	stop, err := exampleMonitor(dir)
	if err != nil {
		fmt.Println(err)
		return
	}
	events := make(chan chanos.MonitorEvent, 2)
	ctx := context.Background()
	d, err := chanos.Join(ctx, chanos.WithDir(dir), chanos.OnMonitor(func(ev chanos.MonitorEvent) { events <- ev }))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer d.Close()
	l, err := pingpong.Export(ctx, d, "example.rejoin")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Close()

	stop() // the monitor goes
	ev := <-events
	fmt.Println("lost:", ev.Lost)
	stop, err = exampleMonitor(dir) // a new one, in the same directory
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()
	ev = <-events
	fmt.Println("rejoined:", !ev.Lost, ev.Err)
	// Output:
	// lost: true
	// rejoined: true <nil>
}

type peerEcho struct{ pingpong.UnimplementedServer }

func (peerEcho) Echo(ctx context.Context, v uint64) (uint64, error) {
	if p, ok := chanos.PeerFrom(ctx); ok {
		fmt.Println("called by", p.Program)
	}
	return v, nil
}

// A handler sees who calls it.
func ExamplePeerFrom() {
	dir, _ := os.MkdirTemp("", "chanos-example-")
	defer os.RemoveAll(dir)
	stop, err := exampleMonitor(dir)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()
	ctx := context.Background()
	d, err := chanos.Join(ctx, chanos.WithDir(dir), chanos.WithProgram("example"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer d.Close()
	l, err := pingpong.Export(ctx, d, "example.peer")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Close()
	go pingpong.Serve(ctx, l, peerEcho{})
	c, err := pingpong.Connect(ctx, d, "example.peer")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	c.Echo(ctx, 1)
	// Output: called by example
}

// A server whose calls must not overlap serves them in order.
func ExampleOrdered() {
	a, b, err := chanos.UMPPair(pingpong.Interface)
	if err != nil {
		fmt.Println(err)
		return
	}
	c, s := pingpong.NewConn(a), pingpong.NewConn(b)
	defer c.Close()
	defer s.Close()
	go s.Serve(context.Background(), exampleServer{}, chanos.Ordered())
	v, err := c.Echo(context.Background(), 7)
	fmt.Println(v, err)
	// Output: 7 <nil>
}

// tenantServer answers echo with its argument plus the tenant's offset,
// which it finds in the call's metadata.
type tenantServer struct{ pingpong.UnimplementedServer }

func (tenantServer) Echo(ctx context.Context, v uint64) (uint64, error) {
	md, _ := chanos.MetadataFrom(ctx)
	if md["tenant"] == "" {
		return 0, chanos.Error(chanos.CodeUnauthenticated, "no tenant")
	}
	return v + uint64(len(md["tenant"])), nil
}

// Metadata travels with a call by its context, and the handler (or an
// interceptor) reads it from its own.
func ExampleWithMetadata() {
	a, b := chanos.LocalPair(pingpong.Interface)
	c, s := pingpong.NewConn(a), pingpong.NewConn(b)
	defer c.Close()
	defer s.Close()
	ctx := context.Background()
	go s.Serve(ctx, tenantServer{})

	v, err := c.Echo(chanos.WithMetadata(ctx, chanos.Metadata{"tenant": "acme"}), 10)
	fmt.Println(v, err)
	_, err = c.Echo(ctx, 10)
	fmt.Println(err)
	// Output:
	// 14 <nil>
	// pingpong.echo: unauthenticated: no tenant
}

// An endpoint is the far side of a fresh connection, as a capability: a
// message carries it (a cap field) to another domain, which opens it and
// talks to whoever made it, with no name and no monitor involved. Here
// the two sides are in one process.
func ExampleNewEndpoint() {
	ctx := context.Background()
	raw, ep, err := chanos.NewEndpoint(pingpong.Interface)
	if err != nil {
		fmt.Println(err)
		return
	}
	s := pingpong.NewConn(raw)
	defer s.Close()
	go s.Serve(ctx, exampleServer{})

	// What the receiver of the message does with the endpoint it found in
	// a cap field: open it for the interface it expects.
	opened, err := chanos.OpenEndpoint(ep, pingpong.Interface)
	if err != nil {
		fmt.Println(err)
		return
	}
	c := pingpong.NewConn(opened)
	defer c.Close()
	v, err := c.Echo(ctx, 7)
	fmt.Println(v, err, opened.Interconnect())

	// An endpoint opens once, and only for the interface it was made for.
	raw2, ep2, err := chanos.NewEndpoint(pingpong.Interface)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer raw2.Close()
	_, err = chanos.OpenEndpoint(ep2, nameservice.Interface)
	fmt.Println(errors.Is(err, chanos.ErrEndpoint))
	// Output:
	// 7 <nil> ump
	// true
}

// An Event is a counter that one domain signals and another waits on. A
// message carries it (a cap field) as it carries a file; here Copy stands
// for the copy the receiver gets.
func ExampleNewEvent() {
	ev, err := chanos.NewEvent()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ev.Close()
	theirs, err := ev.Copy()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer theirs.Close()

	theirs.Signal()
	theirs.Add(2)
	n, err := ev.Wait(context.Background()) // takes the whole count
	fmt.Println(n, err)

	_, ok, _ := ev.TryWait()
	fmt.Println(ok)

	// A Semaphore event hands its count out one at a time.
	sem, _ := chanos.NewEvent(chanos.Semaphore(), chanos.InitialCount(2))
	defer sem.Close()
	a, _ := sem.Wait(context.Background())
	b, _ := sem.Wait(context.Background())
	_, ok, _ = sem.TryWait()
	fmt.Println(a, b, ok)
	// Output:
	// 3 <nil>
	// false
	// 1 1 false
}

// A client's call interceptor: every call its connections make carries
// the tenant in its metadata (tenantServer adds its length), added with
// AppendMetadata so that what a caller gives a call stays (tracedServer
// tells the caller what it saw in its reply's metadata), and a call that
// fails is reported with its code.
func ExampleWithCallInterceptor() {
	dir, _ := os.MkdirTemp("", "chanos-example-")
	defer os.RemoveAll(dir)
	stop, err := exampleMonitor(dir)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()
	tenant := func(ctx context.Context, rpc string) (context.Context, func(error) error, error) {
		ctx = chanos.AppendMetadata(ctx, chanos.Metadata{"tenant": "2"})
		return ctx, func(err error) error {
			if err != nil {
				fmt.Printf("%s failed: %v\n", rpc, chanos.CodeOf(err))
			}
			return err
		}, nil
	}
	ctx := context.Background()
	d, err := chanos.Join(ctx, chanos.WithDir(dir), chanos.WithCallInterceptor(tenant))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer d.Close()
	l, err := pingpong.Export(ctx, d, "example.tenant")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Close()
	go pingpong.Serve(ctx, l, tracedServer{})
	c, err := pingpong.Connect(ctx, d, "example.tenant")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	v, err := c.Echo(ctx, 1)
	fmt.Println(v, err)
	var reply chanos.Metadata
	traced := chanos.WithMetadata(ctx, chanos.Metadata{"trace-id": "t-7"})
	v, err = c.Echo(chanos.CaptureReplyMetadata(traced, &reply), 1)
	fmt.Println(v, err, reply["saw"])
	_, err = c.Bounce(ctx, nil)
	fmt.Println(errors.Is(err, chanos.CodeUnimplemented))
	// Output:
	// 2 <nil>
	// 2 <nil> tenant 2, trace t-7
	// pingpong.bounce failed: unimplemented
	// true
}

// tracedServer is tenantServer that tells its caller, in the reply's
// metadata (gRPC's trailers), the tenant and trace id its call carried.
type tracedServer struct{ tenantServer }

func (s tracedServer) Echo(ctx context.Context, v uint64) (uint64, error) {
	md, _ := chanos.MetadataFrom(ctx)
	saw := fmt.Sprintf("tenant %s, trace %s", md["tenant"], md["trace-id"])
	if err := chanos.SetReplyMetadata(ctx, chanos.Metadata{"saw": saw}); err != nil {
		return 0, err
	}
	return s.tenantServer.Echo(ctx, v)
}

// A client that outlives its server's restart: the Dialer's next Conn
// binds the server that exports the name then.
func ExampleNewDialer() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "chanos-example-")
	defer os.RemoveAll(dir)
	m, err := monitor.New(monitor.Config{Dir: dir, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		fmt.Println(err)
		return
	}
	mctx, stop := context.WithCancel(ctx)
	defer stop()
	go m.Serve(mctx)
	d, err := chanos.Join(ctx, chanos.WithDir(dir))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer d.Close()

	// start runs a server of "kv.counter"; its stop ends its connections.
	start := func() (stop func()) {
		sctx, cancel := context.WithCancel(ctx)
		l, err := pingpong.Export(sctx, d, "kv.counter")
		if err != nil {
			fmt.Println(err)
			return cancel
		}
		done := make(chan struct{})
		go func() { defer close(done); pingpong.Serve(sctx, l, exampleServer{}) }()
		return func() { cancel(); l.Close(); <-done }
	}

	stopServer := start()
	dl := pingpong.NewDialer(d, "kv.counter")
	defer dl.Close()
	c, _ := dl.Conn(ctx)
	v, err := c.Echo(ctx, 1)
	fmt.Println(v, err)

	stopServer() // the server restarts
	_, err = c.Echo(ctx, 2)
	fmt.Println(chanos.CodeOf(err))
	stopServer = start()
	defer stopServer()

	c, err = dl.Conn(ctx) // a new connection, to the new server
	if err != nil {
		fmt.Println(err)
		return
	}
	v, err = c.Echo(ctx, 3)
	fmt.Println(v, err)
	// Output:
	// 1 <nil>
	// unavailable
	// 3 <nil>
}
