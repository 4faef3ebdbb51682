package chanos_test

import (
	"context"
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
