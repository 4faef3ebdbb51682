package health

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/internal/testkit"
	"github.com/chanos/chanos/internal/testkit/testmonitor"
)

// served exports st as NameOf("kv") in a domain of a fresh monitor and
// returns a client's connection to it, from another domain (over ump).
func served(t *testing.T, st *Statuses) *Conn {
	t.Helper()
	dir := testmonitor.Start(t)
	ctx := testkit.Context(t)
	srv, err := chanos.Join(ctx, chanos.WithDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	l, err := Export(ctx, srv, NameOf("kv"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go Serve(ctx, l, st)
	cli, err := chanos.Join(ctx, chanos.WithDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	c, err := Connect(ctx, cli, NameOf("kv"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// next returns the next changed message c receives.
func next(t *testing.T, c *Conn) Changed {
	t.Helper()
	m, err := c.Receive(testkit.Context(t))
	if err != nil {
		t.Fatal(err)
	}
	ch, ok := m.(*Changed)
	if !ok {
		t.Fatalf("received %T, want a changed message", m)
	}
	return *ch
}

// Check answers the domain as a whole serving from the start, a service
// with no status not found, and each status as set; Shutdown turns
// everything away and Resume back.
func TestCheck(t *testing.T) {
	st := NewStatuses()
	c := served(t, st)
	ctx := testkit.Context(t)
	check := func(service string, want ServingStatus) {
		t.Helper()
		if got, err := c.Check(ctx, service); err != nil || got != want {
			t.Fatalf("check %q = %v, %v; want %v", service, got, err, want)
		}
	}
	check("", ServingStatusServing)
	if _, err := c.Check(ctx, "kv"); !errors.Is(err, chanos.CodeNotFound) {
		t.Fatalf("check of a service with no status = %v, want not found", err)
	}
	st.Set("kv", ServingStatusServing)
	check("kv", ServingStatusServing)
	st.Set("kv", ServingStatusNotServing)
	check("kv", ServingStatusNotServing)
	st.Set("kv", ServingStatusServing)
	st.Shutdown()
	check("", ServingStatusNotServing)
	check("kv", ServingStatusNotServing)
	st.Set("kv", ServingStatusServing)
	check("kv", ServingStatusNotServing)
	st.Resume()
	check("", ServingStatusServing)
	check("kv", ServingStatusServing)
}

// A watch is answered at once, then at each change; a service with no
// status is service_unknown until it gets one. The watcher's goroutine
// goes with its connection.
func TestWatch(t *testing.T) {
	st := NewStatuses()
	c := served(t, st)
	ctx := testkit.Context(t)
	st.Set("kv", ServingStatusServing)
	if err := c.Send(ctx, &Watch{Service: "kv"}); err != nil {
		t.Fatal(err)
	}
	if got := next(t, c); got != (Changed{Service: "kv", Status: ServingStatusServing}) {
		t.Fatalf("first changed = %+v", got)
	}
	st.Set("kv", ServingStatusNotServing)
	if got := next(t, c); got != (Changed{Service: "kv", Status: ServingStatusNotServing}) {
		t.Fatalf("changed after the set = %+v", got)
	}
	st.Set("other", ServingStatusServing) // not watched: nothing comes
	if err := c.Send(ctx, &Watch{Service: "new"}); err != nil {
		t.Fatal(err)
	}
	if got := next(t, c); got != (Changed{Service: "new", Status: ServingStatusServiceUnknown}) {
		t.Fatalf("changed of an unknown service = %+v", got)
	}
	st.Set("new", ServingStatusServing)
	if got := next(t, c); got != (Changed{Service: "new", Status: ServingStatusServing}) {
		t.Fatalf("changed of the new service = %+v", got)
	}
	st.mu.Lock()
	n := len(st.watchers)
	st.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d watchers, want 1", n)
	}
	c.Close()
	testkit.Eventually(t, "the watcher to go with its connection", func() bool {
		st.mu.Lock()
		defer st.mu.Unlock()
		return len(st.watchers) == 0
	})
}

// A connection that watches more than MaxWatched services is ended; the
// server goes on serving others.
func TestWatchQuota(t *testing.T) {
	st := NewStatuses()
	c := served(t, st)
	ctx := testkit.Context(t)
	var err error
	for i := 0; i <= MaxWatched && err == nil; i++ {
		err = c.Send(ctx, &Watch{Service: fmt.Sprintf("s%d", i)})
	}
	for err == nil {
		_, err = c.Receive(ctx)
	}
	if !errors.Is(err, chanos.ErrClosed) {
		t.Fatalf("the connection of a watcher past the quota ended with %v, want closed", err)
	}
	testkit.Eventually(t, "the watcher to go with its connection", func() bool {
		st.mu.Lock()
		defer st.mu.Unlock()
		return len(st.watchers) == 0
	})
	if _, err := c.Check(context.Background(), ""); err == nil {
		t.Fatal("check on the ended connection succeeded")
	}
}
