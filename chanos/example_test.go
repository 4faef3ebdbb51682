package chanos_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/chanos/chanos/chanos"
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
