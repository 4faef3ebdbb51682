package nameservice_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/interfaces/nameservice"
	"github.com/chanos/chanos/interfaces/pingpong"
	"github.com/chanos/chanos/monitor"
)

type echo struct{ pingpong.UnimplementedServer }

// A domain looks names up in its machine's nameservice, waits for one
// to appear, and counts a class. Export and Connect use the same names;
// in cluster mode they are the cluster's (docs/cluster.md).
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

	ns, err := nameservice.Connect(ctx, d, nameservice.ServiceName)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ns.Close()

	// wait_for answers once the name exists: here, once the workers below
	// are exported.
	found := make(chan bool)
	go func() {
		_, code, err := ns.WaitFor(ctx, "example.worker.1")
		found <- code == 0 && err == nil
	}()
	for _, name := range []string{"example.worker.0", "example.worker.1"} {
		l, err := pingpong.Export(ctx, d, name)
		if err != nil {
			fmt.Println(err)
			return
		}
		defer l.Close()
		go pingpong.Serve(ctx, l, echo{})
	}
	fmt.Println("waited for:", <-found)

	names, err := ns.Names(ctx, "example.")
	fmt.Println(names, err)
	n, err := ns.GetCount(ctx, "example.worker")
	fmt.Println(n, err)
	_, code, err := ns.Get(ctx, "example.worker.2")
	fmt.Println(code == monitor.NSNotFound, monitor.NSError(code), err)
	// Output:
	// waited for: true
	// [example.worker.0 example.worker.1] <nil>
	// 2 <nil>
	// true name not found <nil>
}
