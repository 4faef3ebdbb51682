package chanos_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/internal/testkit"
	files "github.com/chanos/chanos/internal/testkit/files"
	"github.com/chanos/chanos/wire"
)

func newEvent(t *testing.T, opts ...chanos.EventOption) *chanos.Event {
	t.Helper()
	e, err := chanos.NewEvent(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// Counting: a Wait takes every Signal since the last; semaphore: one.
func TestEventCounting(t *testing.T) {
	ctx := testkit.Context(t)
	e := newEvent(t)
	for range 3 {
		if err := e.Signal(); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := e.Wait(ctx); err != nil || n != 3 {
		t.Fatalf("Wait = %d, %v; want 3", n, err)
	}
	if _, ok, err := e.TryWait(); ok || err != nil {
		t.Fatalf("TryWait of an empty event = %v, %v", ok, err)
	}
	s := newEvent(t, chanos.Semaphore(), chanos.InitialCount(1))
	if err := s.Add(2); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if n, err := s.Wait(ctx); err != nil || n != 1 {
			t.Fatalf("semaphore Wait %d = %d, %v; want 1", i, n, err)
		}
	}
	if _, ok, _ := s.TryWait(); ok {
		t.Fatal("a fourth take of a semaphore of 3")
	}
}

// A Wait ends with its context, and the next Wait is not disturbed; a
// Wait in progress ends when the event is closed.
func TestEventWaitEnds(t *testing.T) {
	e := newEvent(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := e.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait past its deadline = %v", err)
	}
	go func() {
		time.Sleep(10 * time.Millisecond)
		e.Signal()
	}()
	if n, err := e.Wait(testkit.Context(t)); err != nil || n != 1 {
		t.Fatalf("the next Wait = %d, %v", n, err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := e.Wait(context.Background())
		done <- err
	}()
	time.Sleep(10 * time.Millisecond)
	e.Close()
	if err := testkit.Await(t, "a Wait on a closed event", done); !errors.Is(err, chanos.ErrClosed) {
		t.Fatalf("Wait on a closed event = %v, want ErrClosed", err)
	}
}

// More Waits at once than sleep on threads: those beyond are parked by
// the netpoller, and every one is woken by its own Signal, or ended by
// its context; closing the Events leaves no descriptor behind.
func TestEventManyWaits(t *testing.T) {
	const n = 12
	fds := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	before := fds()
	evs := make([]*chanos.Event, n)
	for i := range evs {
		e, err := chanos.NewEvent()
		if err != nil {
			t.Fatal(err)
		}
		evs[i] = e
	}
	ctx, cancel := context.WithCancel(testkit.Context(t))
	defer cancel()
	done := make(chan error, n)
	for i, e := range evs {
		wctx := testkit.Context(t)
		if i == n-1 {
			wctx = ctx
		}
		go func() {
			k, err := e.Wait(wctx)
			if err == nil && k != 1 {
				err = fmt.Errorf("took %d, want 1", k)
			}
			done <- err
		}()
	}
	time.Sleep(20 * time.Millisecond) // every Wait asleep
	for _, e := range evs[:n-1] {
		if err := e.Signal(); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	var ended int
	for range n {
		err := testkit.Await(t, "a Wait", done)
		switch {
		case errors.Is(err, context.Canceled):
			ended++
		case err != nil:
			t.Fatal(err)
		}
	}
	if ended != 1 {
		t.Fatalf("%d Waits ended by their context, want 1", ended)
	}
	for _, e := range evs {
		e.Close()
	}
	if after := fds(); after > before {
		t.Fatalf("%d descriptors before, %d after", before, after)
	}
}

// C is for select; it costs one goroutine, which Close ends.
func TestEventSelect(t *testing.T) {
	before := runtime.NumGoroutine()
	e, err := chanos.NewEvent()
	if err != nil {
		t.Fatal(err)
	}
	e.Add(5)
	select {
	case n := <-e.C():
		if n != 5 {
			t.Fatalf("C gave %d, want 5", n)
		}
	case <-time.After(testkit.Limit):
		t.Fatal("C gave nothing")
	}
	e.Close()
	if _, ok := <-e.C(); ok {
		t.Fatal("C is open after Close")
	}
	waitGoroutines(t, before)
}

// The adapters: a timerfd, a signal's delivery, a pollable descriptor.
func TestEventAdapters(t *testing.T) {
	ctx := testkit.Context(t)
	tm, err := chanos.NewTimerEvent(5*time.Millisecond, 5*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer tm.Close()
	for range 2 {
		if n, err := tm.Wait(ctx); err != nil || n < 1 {
			t.Fatalf("timer Wait = %d, %v", n, err)
		}
	}
	if err := tm.Signal(); err == nil {
		t.Fatal("a timer event took a Signal: only the kernel signals it")
	}

	sig, err := chanos.NewSignalEvent(syscall.SIGUSR1)
	if err != nil {
		t.Fatal(err)
	}
	defer sig.Close()
	syscall.Kill(os.Getpid(), syscall.SIGUSR1)
	if n, err := sig.Wait(ctx); err != nil || n < 1 {
		t.Fatalf("signal Wait = %d, %v", n, err)
	}

	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	pe, err := chanos.EventFromFile(r)
	if err != nil {
		t.Fatal(err)
	}
	defer pe.Close()
	if _, ok, _ := pe.TryWait(); ok {
		t.Fatal("an empty pipe is ready")
	}
	w.Write([]byte("x"))
	if n, err := pe.Wait(ctx); err != nil || n != 1 {
		t.Fatalf("pollable Wait = %d, %v", n, err)
	}
	if err := pe.Signal(); err == nil {
		t.Fatal("a pollable event took a Signal")
	}
}

// capServer hands the events it is sent back, signalled.
type capServer struct{ files.UnimplementedServer }

func (capServer) Ring(ctx context.Context, from *files.Client, m files.Ring) error {
	defer m.Event.Close()
	return m.Event.Add(m.Times)
}

// fileRing is the ring message with a file where its event goes, as a
// peer that does not follow the interface may send it.
type fileRing struct{ f *os.File }

func (fileRing) MsgNumber() uint16  { return files.MsgRing }
func (fileRing) MsgKind() wire.Kind { return wire.KindMessage }
func (fileRing) MsgName() string    { return "files.ring" }
func (r fileRing) Encode(buf *wire.Buffer) error {
	var e wire.Encoder
	e.Begin(buf, "files.ring", files.MsgRing, wire.KindMessage, 12)
	e.Cap("event", r.f)
	e.Uint64(1)
	return e.Finish()
}
func (fileRing) Decode([]byte, []wire.Cap) error { return errors.New("not for decoding") }

// An Event travels in a message, over each interconnect: the receiver
// signals the sender's object. A file is refused as an event.
func TestEventInMessages(t *testing.T) {
	for name, mk := range map[string]func() (*chanos.Conn, *chanos.Conn, error){
		"local": func() (*chanos.Conn, *chanos.Conn, error) {
			a, b := chanos.LocalPair(files.Interface)
			return a, b, nil
		},
		"ump": func() (*chanos.Conn, *chanos.Conn, error) { return chanos.UMPPair(files.Interface) },
	} {
		t.Run(name, func(t *testing.T) {
			a, b, err := mk()
			if err != nil {
				t.Fatal(err)
			}
			c, s := files.NewConn(a), files.NewConn(b)
			defer c.Close()
			defer s.Close()
			go s.Serve(context.Background(), capServer{})
			ctx := testkit.Context(t)
			ev := newEvent(t)
			if err := c.Send(ctx, &files.Ring{Event: ev, Times: 7}); err != nil {
				t.Fatal(err)
			}
			if n, err := ev.Wait(ctx); err != nil || n != 7 {
				t.Fatalf("Wait = %d, %v; want 7", n, err)
			}
		})
	}
}

// A file where a cap(event) goes fails decoding with ErrCap, and the
// generated code closes what it refused.
func TestEventRefusesAFile(t *testing.T) {
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	var b wire.Buffer
	if err := (fileRing{f}).Encode(&b); err != nil {
		t.Fatal(err)
	}
	var m files.Ring
	err = m.Decode(b.B, b.Caps)
	if !errors.Is(err, wire.ErrCap) || !strings.Contains(err.Error(), "not an event") {
		t.Fatalf("Decode of a ring carrying a file: %v; want ErrCap, not an event", err)
	}
	if m.Event != nil {
		t.Error("the event of a refused ring is set")
	}
	if _, err := f.Stat(); !errors.Is(err, os.ErrClosed) {
		t.Errorf("the refused file: %v, want it closed", err)
	}
}

// clearNonblock clears O_NONBLOCK on e's open file, as another domain that
// shares the descriptor can.
func clearNonblock(t *testing.T, e *chanos.Event) {
	t.Helper()
	rc, err := e.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = syscall.SetNonblock(int(fd), false) }); err != nil || serr != nil {
		t.Fatal(err, serr)
	}
}

// A peer that clears O_NONBLOCK on a shared Event's open file makes no
// Wait outlast its context, no TryWait block, and no Add of a full count
// wait: on the thread's wait, the netpoller's, and the waiter that loses
// the count to a waiter in another Event of the same open file.
func TestEventSharedFlagCleared(t *testing.T) {
	e := newEvent(t)
	other, err := e.Copy()
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	within := func(what string, fn func() error) {
		t.Helper()
		clearNonblock(t, e)
		done := make(chan error, 1)
		go func() { done <- fn() }()
		if err := testkit.Await(t, what, done); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	within("TryWait of an empty count", func() error {
		if n, ok, err := e.TryWait(); ok || err != nil {
			return fmt.Errorf("TryWait = %d, %v, %v; want nothing", n, ok, err)
		}
		return nil
	})
	within("Waits past their deadlines", func() error {
		// More than wait on threads: the rest are parked by the netpoller.
		errs := make(chan error, 8)
		for range 8 {
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
				defer cancel()
				ev, err := e.Copy()
				if err != nil {
					errs <- err
					return
				}
				defer ev.Close()
				_, err = ev.Wait(ctx)
				errs <- err
			}()
		}
		for range 8 {
			if err := <-errs; !errors.Is(err, context.DeadlineExceeded) {
				return fmt.Errorf("Wait = %v, want DeadlineExceeded", err)
			}
		}
		return nil
	})
	within("two Waits for one count", func() error {
		errs := make(chan error, 2)
		for _, ev := range []*chanos.Event{e, other} {
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
				defer cancel()
				_, err := ev.Wait(ctx)
				errs <- err
			}()
		}
		time.Sleep(20 * time.Millisecond)
		if err := e.Signal(); err != nil {
			return err
		}
		var took, late int
		for range 2 {
			switch err := <-errs; {
			case err == nil:
				took++
			case errors.Is(err, context.DeadlineExceeded):
				late++
			default:
				return err
			}
		}
		if took != 1 || late != 1 {
			return fmt.Errorf("%d Waits took the count and %d reached their deadline, want 1 and 1", took, late)
		}
		return nil
	})
	within("an Add past the count's maximum", func() error {
		if err := e.Add(1<<64 - 3); err != nil {
			return err
		}
		clearNonblock(t, e)
		if err := e.Add(5); err == nil {
			return errors.New("Add past the maximum succeeded")
		}
		n, ok, err := e.TryWait()
		if !ok || err != nil || n != 1<<64-3 {
			return fmt.Errorf("TryWait = %d, %v, %v", n, ok, err)
		}
		return nil
	})
}
