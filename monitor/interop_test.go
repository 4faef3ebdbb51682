package monitor_test

import (
	"context"
	"testing"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/interfaces/nameservice"
	"github.com/chanos/chanos/interfaces/pingpong"
	"github.com/chanos/chanos/interfaces/spawn"
	"github.com/chanos/chanos/internal/testkit"
	"github.com/chanos/chanos/internal/testkit/testmonitor"
)

type echoServer struct{ pingpong.UnimplementedServer }

func (echoServer) Echo(ctx context.Context, v uint64) (uint64, error) { return v + 1, nil }

// TestWithChanos runs the domain side, package chanos and the generated
// bindings, against a monitor: export, connect over ump and locally, the
// nameservice, a taken name, and a connect racing its export.
func TestWithChanos(t *testing.T) {
	dir := testmonitor.Start(t)
	ctx := testkit.Context(t)
	d1, err := chanos.Join(ctx, chanos.WithDir(dir), chanos.WithProgram("srv"))
	if err != nil {
		t.Fatal(err)
	}
	defer d1.Close()
	l, err := pingpong.Export(ctx, d1, "pp")
	if err != nil {
		t.Fatal(err)
	}
	go pingpong.Serve(ctx, l, echoServer{})
	d2, err := chanos.Join(ctx, chanos.WithDir(dir), chanos.WithProgram("cli"))
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	c, err := pingpong.Connect(ctx, d2, "pp")
	if err != nil {
		t.Fatal(err)
	}
	if r, err := c.Echo(ctx, 41); err != nil || r != 42 {
		t.Fatalf("echo %d %v", r, err)
	}
	c2, err := pingpong.Connect(ctx, d1, "pp")
	if err != nil {
		t.Fatal(err)
	}
	if r, err := c2.Echo(ctx, 1); err != nil || r != 2 {
		t.Fatalf("local echo %d %v", r, err)
	}
	ns, err := nameservice.Connect(ctx, d2, "nameservice")
	if err != nil {
		t.Fatal(err)
	}
	if code, err := ns.Set(ctx, "x.1", l.Raw().Ref()); err != nil || code != 0 {
		t.Fatalf("set %v %v", code, err)
	}
	names, more, err := ns.List(ctx, "", "")
	if string(names) != "nameservice\npp\n"+spawn.ServiceName(d2.Machine())+"\nx.1" || more || err != nil {
		t.Fatalf("list %q %v %v", names, more, err)
	}
	if _, err := pingpong.Export(ctx, d2, "pp"); err == nil {
		t.Fatal("taken")
	}
	// A Connect racing the Export of its name: it waits if it comes first.
	done := make(chan error, 1)
	go func() {
		c, err := pingpong.Connect(ctx, d2, "later")
		if err == nil {
			_, err = c.Echo(ctx, 7)
		}
		done <- err
	}()
	later, err := pingpong.Export(ctx, d1, "later")
	if err != nil {
		t.Fatal(err)
	}
	go pingpong.Serve(ctx, later, echoServer{})
	if err := <-done; err != nil {
		t.Fatalf("connect to a name exported later: %v", err)
	}
}
