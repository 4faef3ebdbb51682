package health_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/interfaces/health"
	"github.com/chanos/chanos/monitor"
)

// A domain serves the health of its service kv beside it, and a probe
// asks for it.
func Example() {
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

	st := health.NewStatuses()
	l, err := health.Export(ctx, d, health.NameOf("kv"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Close()
	go health.Serve(ctx, l, st)
	st.Set("kv", health.ServingStatusServing)

	probe, err := health.Connect(ctx, d, health.NameOf("kv"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer probe.Close()
	s, err := probe.Check(ctx, "kv")
	fmt.Println(s, err)
	st.Shutdown() // draining: probes are turned away first
	s, err = probe.Check(ctx, "kv")
	fmt.Println(s, err)
	// Output:
	// serving <nil>
	// not_serving <nil>
}
