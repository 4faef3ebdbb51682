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
