package chanos_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/interfaces/pingpong"
	"github.com/chanos/chanos/internal/testkit"
	"github.com/chanos/chanos/internal/testkit/testmonitor"
)

// dialEcho answers echo with its argument plus add, so that a test tells
// its servers apart.
type dialEcho struct {
	pingpong.UnimplementedServer
	add uint64
}

func (s dialEcho) Echo(ctx context.Context, val uint64) (uint64, error) { return val + s.add, nil }

// TestDialer: a Dialer's connection lasts while it lasts; once its server
// has gone, the calls on it fail, and the next Conn binds the server that
// exports the name then, waiting for it to come: several goroutines
// asking at once get one new connection. After Close, Conn fails with
// ErrClosed.
func TestDialer(t *testing.T) {
	dir := testmonitor.Start(t)
	ctx := testkit.Context(t)
	join := func() *chanos.Domain {
		d, err := chanos.Join(ctx, chanos.WithDir(dir))
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	// serve runs a server of the name; stopping it ends its connections,
	// as a server's restart would.
	serve := func(add uint64) (stop func()) {
		d := join()
		sctx, cancel := context.WithCancel(ctx)
		l, err := pingpong.Export(sctx, d, "dialed")
		if err != nil {
			t.Fatal(err)
		}
		served := make(chan struct{})
		go func() {
			defer close(served)
			pingpong.Serve(sctx, l, dialEcho{add: add})
		}()
		return func() {
			cancel()
			l.Close()
			<-served
			d.Close()
		}
	}
	cli := join()
	defer cli.Close()
	stop := serve(100)
	dl := pingpong.NewDialer(cli, "dialed")
	defer dl.Close()

	c1, err := dl.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := c1.Echo(ctx, 1); err != nil || v != 101 {
		t.Fatalf("echo on the first connection = %d, %v; want 101", v, err)
	}
	if again, err := dl.Conn(ctx); err != nil || again != c1 {
		t.Fatalf("Conn while the connection lasts = %p, %v; want the same %p", again, err, c1)
	}

	stop()
	if _, err := c1.Echo(ctx, 1); chanos.CodeOf(err) != chanos.CodeUnavailable {
		t.Fatalf("echo after the server stopped = %v, want unavailable", err)
	}
	// Asked before the next server exports the name: they wait for it.
	const askers = 8
	got := make([]*pingpong.Conn, askers)
	var wg sync.WaitGroup
	for i := range askers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := dl.Conn(ctx)
			if err != nil {
				t.Error(err)
			}
			got[i] = c
		}()
	}
	stop2 := serve(200)
	defer stop2()
	wg.Wait()
	for i, c := range got {
		if c == nil || c == c1 || c != got[0] {
			t.Fatalf("asker %d got %p; want one new connection for all (the first got %p, the old was %p)", i, c, got[0], c1)
		}
	}
	if v, err := got[0].Echo(ctx, 1); err != nil || v != 201 {
		t.Fatalf("echo on the new connection = %d, %v; want 201 from the new server", v, err)
	}

	dl.Close()
	if _, err := dl.Conn(ctx); !errors.Is(err, chanos.ErrClosed) {
		t.Errorf("Conn after Close = %v, want ErrClosed", err)
	}
	if got[0].Err() == nil {
		t.Error("the Dialer's connection is open after Close")
	}
}

// A Dialer whose name nobody exports fails Conn when its context ends,
// as Connect does, and a waiter for another goroutine's Connect stops
// waiting when its own context ends.
func TestDialerNotFound(t *testing.T) {
	dir := testmonitor.Start(t)
	ctx := testkit.Context(t)
	d, err := chanos.Join(ctx, chanos.WithDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	dl := chanos.NewDialer(d, "nobody", pingpong.Interface)
	defer dl.Close()
	long, cancelLong := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := dl.Conn(long)
		done <- err
	}()
	short, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := dl.Conn(short); !errors.Is(err, context.Canceled) {
		t.Errorf("Conn with an ended context = %v, want context.Canceled", err)
	}
	cancelLong()
	if err := testkit.Await(t, "the first Conn's end", done); err == nil || errors.Is(err, chanos.ErrClosed) {
		t.Errorf("Conn of a name nobody exports, its context canceled = %v", err)
	}
}
