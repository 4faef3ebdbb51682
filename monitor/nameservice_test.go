package monitor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/interconnect/ump"
	"github.com/chanos/chanos/interfaces/nameservice"
	"github.com/chanos/chanos/internal/testkit"
	"github.com/chanos/chanos/names"
	"github.com/chanos/chanos/wire"
)

func iref(n byte) wire.Iref {
	return wire.Iref{Machine: 1, Export: uint64(n), Token: [16]byte{n}}
}

// The nameservice over a real ring pair, served by the monitor.
func TestNameservice(t *testing.T) {
	tm := startMonitor(t, Config{})
	base := snapshotResources(t)
	ctx := testkit.Context(t)
	func() {
		alice, _ := Dial(ctx, tm.dir, "alice")
		defer alice.Close()
		bob, _ := Dial(ctx, tm.dir, "bob")
		defer bob.Close()
		a, err := alice.Nameservice(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		b, err := bob.Nameservice(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()

		code := func(what string, got wire.Errval, err error, want wire.Errval) {
			t.Helper()
			if err != nil || got != want {
				t.Fatalf("%s: code %d, %v; want code %d", what, got, err, want)
			}
		}
		// set and get.
		c, err := a.Set(ctx, "svc.1", iref(1))
		code("set", c, err, NSOK)
		c, err = b.Set(ctx, "svc.1", iref(2))
		code("set of a taken name", c, err, NSExists)
		c, err = a.Set(ctx, "bad name", iref(1))
		code("set of an invalid name", c, err, NSInvalidName)
		c, err = a.Set(ctx, "", iref(1))
		code("set of the empty name", c, err, NSInvalidName)
		c, err = a.Set(ctx, "null", wire.Iref{})
		code("set of the null iref", c, err, NSInvalidRef)
		ref, c, err := b.Get(ctx, "svc.1")
		code("get", c, err, NSOK)
		// get names the iref, but without its token.
		if ref != iref(1).WithoutToken() || ref.HasToken() {
			t.Fatalf("get: %v", ref)
		}
		_, c, err = b.Get(ctx, "missing")
		code("get of a missing name", c, err, NSNotFound)
		_, c, err = b.Get(ctx, "bad\x7fname")
		code("get of an invalid name", c, err, NSInvalidName)

		// get_count counts a class.
		a.Set(ctx, "svc.2", iref(3))
		b.Set(ctx, "svc.10", iref(4))
		b.Set(ctx, "svc.x", iref(5))
		if n, err := a.GetCount(ctx, "svc"); err != nil || n != 3 {
			t.Fatalf("get_count: %d, %v", n, err)
		}
		if n, err := a.GetCount(ctx, "none"); err != nil || n != 0 {
			t.Fatalf("get_count of an empty class: %d, %v", n, err)
		}

		// remove: owner only.
		c, err = b.Remove(ctx, "svc.1")
		code("remove by another domain", c, err, NSNotOwner)
		c, err = a.Remove(ctx, "svc.1")
		code("remove", c, err, NSOK)
		c, err = a.Remove(ctx, "svc.1")
		code("remove twice", c, err, NSNotFound)
		c, err = a.Remove(ctx, "bad name")
		code("remove of an invalid name", c, err, NSInvalidName)
		// Names of exports are the exporting domain's too.
		if _, err := alice.Export(ctx, "exported", "kv", 1024); err != nil {
			t.Fatal(err)
		}
		c, err = b.Remove(ctx, "exported")
		code("remove of another domain's export", c, err, NSNotOwner)
		c, err = b.Remove(ctx, nameservice.ServiceName)
		code("remove of the nameservice", c, err, NSNotOwner)

		// wait_for: answered when the name appears; other calls proceed
		// meanwhile.
		type waited struct {
			ref  wire.Iref
			code wire.Errval
			err  error
		}
		done := make(chan waited, 1)
		go func() {
			r, c, err := b.WaitFor(ctx, "later")
			done <- waited{r, c, err}
		}()
		testkit.Eventually(t, "wait_for to wait", func() bool { return nsPending(tm.Monitor, bob.DomainID()) == 1 })
		if _, _, err := b.Get(ctx, "svc.2"); err != nil {
			t.Fatalf("get while a wait_for waits: %v", err)
		}
		c, err = a.Set(ctx, "later", iref(9))
		code("set", c, err, NSOK)
		w := <-done
		code("wait_for", w.code, w.err, NSOK)
		if w.ref != iref(9).WithoutToken() {
			t.Fatalf("wait_for: %v", w.ref)
		}
		_, c, err = b.WaitFor(ctx, "svc.2")
		code("wait_for of an existing name", c, err, NSOK)
		_, c, err = b.WaitFor(ctx, "in valid")
		code("wait_for of an invalid name", c, err, NSInvalidName)
		// Its deadline passes: NSTimeout, or the caller gave up first.
		dctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
		_, c, err = b.WaitFor(dctx, "never")
		cancel()
		if !(err == nil && c == NSTimeout) && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("wait_for past its deadline: %d, %v", c, err)
		}
		// Cancelled: the connection carries on.
		cctx, cancel := context.WithCancel(ctx)
		go func() {
			testkit.Eventually(t, "wait_for to wait", func() bool { return nsPending(tm.Monitor, bob.DomainID()) == 1 })
			cancel()
		}()
		if _, _, err := b.WaitFor(cctx, "never"); !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled wait_for: %v", err)
		}
		testkit.Eventually(t, "the cancelled wait_for to end", func() bool { return nsPending(tm.Monitor, bob.DomainID()) == 0 })
		if _, c, err := b.Get(ctx, "later"); err != nil || c != NSOK {
			t.Fatalf("get after a cancelled wait_for: %d, %v", c, err)
		}

		// list, in pages.
		var want []string
		for i := range 600 {
			name := fmt.Sprintf("page.%04d", i)
			if i%2 == 0 {
				name = fmt.Sprintf("page.%04d.%s", i, strings.Repeat("x", 240))
			}
			want = append(want, name)
			if c, err := a.Set(ctx, name, iref(7)); err != nil || c != NSOK {
				t.Fatalf("set %s: %d, %v", name, c, err)
			}
		}
		slices.Sort(want)
		page, more, err := b.List(ctx, "page.", "")
		if err != nil || !more || len(page) > nameservice.MaxListNamesLen {
			t.Fatalf("first page: %d bytes, more %v, %v", len(page), more, err)
		}
		first := strings.Split(string(page), "\n")
		if !slices.Equal(first, want[:len(first)]) {
			t.Fatalf("first page: %q", first[:3])
		}
		got, err := b.Names(ctx, "page.")
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("list: %d names, %v; want %d", len(got), err, len(want))
		}
		if got, err := b.Names(ctx, "nothing."); err != nil || len(got) != 0 {
			t.Fatalf("list of nothing: %q, %v", got, err)
		}
		all, err := b.Names(ctx, "")
		if err != nil || !slices.Contains(all, nameservice.ServiceName) || !slices.Contains(all, "svc.2") {
			t.Fatalf("list all: %d names, %v", len(all), err)
		}

		// watch: changes after the watch, in order.
		if err := b.Watch(ctx, "w."); err != nil {
			t.Fatal(err)
		}
		b.Get(ctx, "w.sync") // the ring is served in order: the watch is in place
		a.Set(ctx, "w.1", iref(11))
		a.Set(ctx, "other", iref(12))
		a.Remove(ctx, "w.1")
		for _, want := range []nameservice.Changed{{Name: "w.1", Ref: iref(11).WithoutToken()}, {Name: "w.1", Ref: iref(11).WithoutToken(), Removed: true}} {
			got := <-b.Changed()
			if got == nil || *got != want {
				t.Fatalf("changed %+v, want %+v", got, want)
			}
		}

		// Names set through the nameservice are the domain's lease: they
		// go when its session ends.
		alice.Close()
		testkit.Eventually(t, "alice's names to go", func() bool {
			_, c, _ := b.Get(ctx, "svc.2")
			return c == NSNotFound
		})
		if _, c, _ := b.Get(ctx, "exported"); c != NSNotFound {
			t.Fatalf("alice's export still registered: %d", c)
		}
		// Her nameservice connection went with her session.
		if _, _, err := a.Get(ctx, "svc.10"); err == nil {
			t.Fatal("a nameservice connection outlived its session")
		}
		if n, err := b.GetCount(ctx, "svc"); err != nil || n != 1 { // svc.10; svc.x is of class svc.x
			t.Fatalf("get_count after alice left: %d, %v", n, err)
		}
	}()
	tm.checkNoLeaks(t, base)
}

// nsPending returns the wait_for calls in progress on the nameservice
// connections of domain.
func nsPending(m *Monitor, domain uint64) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, c := range m.nsConns {
		if c.client == domain {
			c.mu.Lock()
			n += c.waits
			c.mu.Unlock()
		}
	}
	return n
}

// Garbage on a nameservice ring ends that connection only.
func TestNameserviceGarbage(t *testing.T) {
	tm := startMonitor(t, Config{})
	base := snapshotResources(t)
	ctx := testkit.Context(t)
	func() {
		cli, _ := Dial(ctx, tm.dir, "client")
		defer cli.Close()
		good, err := cli.Nameservice(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer good.Close()
		setCall := func(name string) []byte {
			return encode(t, &nameservice.SetCall{Name: name, Ref: iref(1)}, 1)
		}
		badBool := encode(t, &nameservice.ListReply{More: true}, 0)
		badBool[len(badBool)-1] = 7
		for _, c := range []struct {
			name  string
			frame []byte
			want  string
		}{
			{"random", randomBytes(500), "protocol violation"},
			{"short", []byte{1, 2, 3}, "shorter than the 16-byte header"},
			{"ncaps", func() []byte { f := setCall("x"); f[7] = 1; return f }(), "descriptors"},
			{"changed", encode(t, &nameservice.Changed{Name: "x"}, 0), "changed is sent by the nameservice"},
			{"unknown", func() []byte { f := setCall("x"); f[4] = 77; return f }(), "names no message"},
		} {
			t.Run(c.name, func(t *testing.T) {
				r, err := cli.Bind(ctx, nameservice.ServiceName, nameservice.InterfaceName, false)
				if err != nil {
					t.Fatal(err)
				}
				u, err := OpenUMP(ump.Attacher, r.Fds, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer u.Close()
				if err := u.Send(ctx, c.frame); err != nil {
					t.Fatal(err)
				}
				if _, err := u.Receive(ctx); !errors.Is(err, ump.ErrClosed) {
					t.Fatalf("after %s: %v; want the monitor to close", c.name, err)
				}
				tm.logs.Wait(t, "nameservice connection dropped", c.want)
				if _, code, err := good.Get(ctx, nameservice.ServiceName); err != nil || code != NSOK {
					t.Fatalf("the good connection: %d, %v", code, err)
				}
			})
		}
		// A reply or error reply sent to the nameservice answers no call it
		// ever made: a protocol violation, which ends that connection only.
		for _, stray := range []string{"reply", "error reply"} {
			t.Run(stray, func(t *testing.T) {
				r, err := cli.Bind(ctx, nameservice.ServiceName, nameservice.InterfaceName, false)
				if err != nil {
					t.Fatal(err)
				}
				u, err := OpenUMP(ump.Attacher, r.Fds, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer u.Close()
				frame := encode(t, &nameservice.SetReply{}, 1)
				if stray == "error reply" {
					var er wire.Buffer
					if err := wire.AppendErrorReply(&er, nameservice.MsgGet, wire.Status{Code: 1}); err != nil {
						t.Fatal(err)
					}
					wire.SetCallID(er.B, 7)
					frame = er.B
				}
				if err := u.Send(ctx, frame); err != nil {
					t.Fatal(err)
				}
				if _, err := u.Receive(ctx); !errors.Is(err, ump.ErrClosed) {
					t.Fatalf("after a stray %s: %v; want the monitor to close", stray, err)
				}
				tm.logs.Wait(t, "nameservice connection dropped", "never made")
				if _, code, err := good.Get(ctx, nameservice.ServiceName); err != nil || code != NSOK {
					t.Fatalf("the good connection: %d, %v", code, err)
				}
			})
		}
		// Too many watches end the connection: a message cannot carry an
		// error back.
		greedy, err := cli.Nameservice(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer greedy.Close()
		for range nsMaxWatches + 1 {
			greedy.Watch(ctx, "")
		}
		greedy.Get(ctx, "x")
		<-greedy.Changed() // closed when the connection ends
		tm.logs.Wait(t, "nameservice connection dropped", "watches on one nameservice connection")
	}()
	tm.checkNoLeaks(t, base)
}

// Error replies, for get_count and list, which have no errval out
// argument, come back as chanos.RemoteError with a nameservice code.
func TestNameserviceErrorReply(t *testing.T) {
	store := names.NewMemory()
	tm := startMonitor(t, Config{Store: store})
	ctx := testkit.Context(t)
	cli := tm.dial(t, "client")
	ns, err := cli.Nameservice(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	store.Close()
	_, err = ns.GetCount(ctx, "x")
	var re *chanos.RemoteError
	if !errors.As(err, &re) || re.Code != NSUnavailable {
		t.Fatalf("get_count on a closed store: %v", err)
	}
	if _, _, err := ns.List(ctx, "", ""); !errors.As(err, &re) || re.Code != NSUnavailable {
		t.Fatalf("list on a closed store: %v", err)
	}
	if _, c, err := ns.Get(ctx, "x"); err != nil || c != NSUnavailable {
		t.Fatalf("get on a closed store: %d, %v", c, err)
	}
	if !errors.Is(NSError(NSUnavailable), names.ErrClosed) || NSError(NSOK) != nil || !errors.Is(NSError(NSNotOwner), names.ErrNotOwner) {
		t.Fatal("NSError")
	}
}

// At most nsMaxWaits wait_for calls wait at a time on a connection; one
// more is answered with NSLimit at once, and other calls are still served.
func TestNameserviceWaitLimit(t *testing.T) {
	tm := startMonitor(t, Config{})
	base := snapshotResources(t)
	ctx := testkit.Context(t)
	func() {
		cli, _ := Dial(ctx, tm.dir, "client")
		defer cli.Close()
		ns, err := cli.Nameservice(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer ns.Close()
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		done := make(chan error, nsMaxWaits)
		for range nsMaxWaits {
			go func() {
				_, _, err := ns.WaitFor(wctx, "never")
				done <- err
			}()
		}
		testkit.Eventually(t, "the waits to wait", func() bool { return nsPending(tm.Monitor, cli.DomainID()) == nsMaxWaits })
		if _, c, err := ns.WaitFor(ctx, "never"); err != nil || c != NSLimit {
			t.Fatalf("wait_for beyond the limit: %d, %v", c, err)
		}
		if _, c, err := ns.Get(ctx, nameservice.ServiceName); err != nil || c != NSOK {
			t.Fatalf("get while the waits wait: %d, %v", c, err)
		}
		if c, err := ns.Set(ctx, "late", iref(1)); err != nil || c != NSOK {
			t.Fatalf("set while the waits wait: %d, %v", c, err)
		}
		cancel()
		for range nsMaxWaits {
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled wait_for: %v", err)
			}
		}
		testkit.Eventually(t, "the waits to end", func() bool { return nsPending(tm.Monitor, cli.DomainID()) == 0 })
		if _, c, err := ns.WaitFor(ctx, "late"); err != nil || c != NSOK {
			t.Fatalf("wait_for after the waits: %d, %v", c, err)
		}
	}()
	tm.checkNoLeaks(t, base)
}

// A client that closes its connection while a wait_for without a deadline
// waits ends the connection at once, though its session goes on.
func TestNameserviceCloseDuringWait(t *testing.T) {
	tm := startMonitor(t, Config{})
	ctx := testkit.Context(t)
	cli := tm.dial(t, "client")
	ns, err := cli.Nameservice(ctx)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		ns.WaitFor(ctx, "never")
	}()
	testkit.Eventually(t, "wait_for to wait", func() bool { return nsPending(tm.Monitor, cli.DomainID()) == 1 })
	ns.Close()
	<-done
	testkit.Eventually(t, "the connection to end", func() bool {
		tm.mu.Lock()
		defer tm.mu.Unlock()
		return len(tm.nsConns) == 0
	})
}
