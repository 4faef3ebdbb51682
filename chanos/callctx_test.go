package chanos_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/interfaces/pingpong"
	"github.com/chanos/chanos/internal/testkit"
	"github.com/chanos/chanos/wire"
)

// ctxServer's echo reports the context it ran with: after waiting for it
// to end (v == 0), or at once; kept is the context, for a look after the
// call.
type ctxServer struct {
	pingpong.UnimplementedServer
	seen chan error
	kept chan context.Context
}

func (s *ctxServer) Echo(ctx context.Context, v uint64) (uint64, error) {
	if v == 0 {
		<-ctx.Done()
		s.seen <- ctx.Err()
		return 0, ctx.Err()
	}
	derived, cancel := context.WithCancel(ctx)
	s.kept <- derived
	_ = cancel // ends with the call's context, which is the point
	return v, nil
}

// An inline call's context has the caller's deadline, its Done closes at
// the deadline, and it (with whatever was derived from it) ends when the
// call returns.
func TestCallContext(t *testing.T) {
	forEach(t, func(t *testing.T, c, s *pingpong.Conn) {
		srv := &ctxServer{seen: make(chan error, 1), kept: make(chan context.Context, 1)}
		go s.Serve(context.Background(), srv)

		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		// The caller's own deadline, or the handler's error reply, may
		// come first.
		var re *chanos.RemoteError
		if _, err := c.Echo(ctx, 0); !errors.Is(err, context.DeadlineExceeded) && !errors.As(err, &re) {
			t.Fatalf("echo past its deadline = %v, want DeadlineExceeded or the handler's error", err)
		}
		if err := <-srv.seen; !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("the handler's context ended with %v, want DeadlineExceeded", err)
		}

		ctx2, cancel2 := context.WithTimeout(context.Background(), time.Minute)
		defer cancel2()
		if v, err := c.Echo(ctx2, 7); err != nil || v != 7 {
			t.Fatalf("echo = %d, %v", v, err)
		}
		derived := <-srv.kept
		select {
		case <-derived.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("a context derived from the call's did not end with the call")
		}
		if err := derived.Err(); !errors.Is(err, context.Canceled) {
			t.Fatalf("derived context after the call: %v, want Canceled", err)
		}
		if dl, ok := derived.Deadline(); !ok || time.Until(dl) < 30*time.Second {
			t.Fatalf("derived deadline %v, %v: want the caller's, a minute away", dl, ok)
		}
	})
}

// A call with a deadline allocates nothing of its own over ump either:
// its context comes from the reading goroutine's block of them, and it
// makes no timer unless the handler asks for Done.
func TestDeadlineCallAllocations(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if allocs := echoAllocs(t, ctx); allocs != 0 {
		t.Errorf("an echo rpc with a deadline allocates %v times, want 0", allocs)
	}
}

// By default a slow call holds up no other call on its connection, and
// its caller's cancel, without a deadline, ends the handler's context.
func TestSlowCallHandedOff(t *testing.T) {
	forEach(t, func(t *testing.T, c, s *pingpong.Conn) {
		srv := &ctxServer{seen: make(chan error, 1), kept: make(chan context.Context, 1)}
		wait := serve(t, s, srv)
		slow, cancel := context.WithCancel(context.Background())
		slowErr := make(chan error, 1)
		go func() {
			_, err := c.Echo(slow, 0)
			slowErr <- err
		}()
		time.Sleep(10 * time.Millisecond) // the slow call is running
		start := time.Now()
		ctx, cancelFast := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancelFast()
		if v, err := c.Echo(ctx, 3); err != nil || v != 3 {
			t.Fatalf("a fast call behind a slow one = %d, %v", v, err)
		}
		<-srv.kept
		if d := time.Since(start); d > time.Second {
			t.Errorf("a fast call behind a slow one took %v", d)
		}
		cancel()
		select {
		case err := <-srv.seen:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("the slow handler's context ended with %v, want Canceled", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the caller's cancel did not reach the handler")
		}
		if err := <-slowErr; !errors.Is(err, context.Canceled) {
			t.Errorf("the canceled call returned %v", err)
		}
		c.Close()
		if err := wait(); err != nil {
			t.Errorf("Serve = %v", err)
		}
	})
}

// With Ordered, calls are served one at a time: a fast call waits for
// the slow one before it.
func TestOrderedServing(t *testing.T) {
	forEach(t, func(t *testing.T, c, s *pingpong.Conn) {
		srv := &ctxServer{seen: make(chan error, 1), kept: make(chan context.Context, 1)}
		go s.Serve(context.Background(), srv, chanos.Ordered())
		slow, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		go c.Echo(slow, 0)
		time.Sleep(10 * time.Millisecond)
		start := time.Now()
		if v, err := c.Echo(context.Background(), 3); err != nil || v != 3 {
			t.Fatalf("echo = %d, %v", v, err)
		}
		if d := time.Since(start); d < 200*time.Millisecond {
			t.Errorf("an ordered call overtook a slow one (%v)", d)
		}
		<-srv.seen
	})
}

// Interceptors see each call, the first outermost, with its reply, and may
// refuse it; one-way messages pass them by.
func TestInterceptors(t *testing.T) {
	forEach(t, func(t *testing.T, c, s *pingpong.Conn) {
		var trace []string
		var mu sync.Mutex
		record := func(name string) chanos.Interceptor {
			return func(ctx context.Context, in *chanos.Incoming, next chanos.Handler) (wire.Message, error) {
				mu.Lock()
				trace = append(trace, name)
				mu.Unlock()
				if in.Header.Msg == pingpong.MsgEcho && name == "outer" {
					var call pingpong.EchoCall
					if err := in.Decode(&call); err != nil {
						return nil, err
					}
					if call.Val == 13 {
						return nil, errors.New("refused")
					}
				}
				reply, err := next(ctx, in)
				if r, ok := reply.(*pingpong.EchoReply); ok && name == "inner" {
					r.Result *= 10
				}
				return reply, err
			}
		}
		go s.Serve(context.Background(), &server{}, chanos.WithInterceptor(record("outer"), record("inner")))
		ctx := context.Background()
		if v, err := c.Echo(ctx, 4); err != nil || v != 50 {
			t.Fatalf("echo through the interceptors = %d, %v; want 50", v, err)
		}
		var re *chanos.RemoteError
		if _, err := c.Echo(ctx, 13); !errors.As(err, &re) || !strings.Contains(re.Detail, "refused") {
			t.Fatalf("echo refused by an interceptor = %v", err)
		}
		if err := c.Send(ctx, &pingpong.Ping{MsgID: 1}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Receive(ctx); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		if got := strings.Join(trace, " "); got != "outer inner outer" {
			t.Errorf("interceptors ran %q, want %q", got, "outer inner outer")
		}
	})
}

// stressServer echoes v+1, after a while for some values: the calls that
// take long are handed off, the others run inline.
type stressServer struct{ pingpong.UnimplementedServer }

func (stressServer) Echo(ctx context.Context, v uint64) (uint64, error) {
	switch v % 4 {
	case 1:
		time.Sleep(300 * time.Microsecond)
	case 2:
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
	return v + 1, nil
}

// Many callers at once, fast and slow calls, some canceled midway: each
// call that is not canceled gets its own answer, whichever goroutine
// served it.
func TestHandOffStress(t *testing.T) {
	forEach(t, func(t *testing.T, c, s *pingpong.Conn) {
		wait := serve(t, s, stressServer{})
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for g := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 100 {
					v := uint64(g*1000 + i)
					ctx, cancel := context.WithCancel(context.Background())
					if i%7 == 0 {
						time.AfterFunc(time.Millisecond, cancel)
					}
					got, err := c.Echo(ctx, v)
					cancel()
					if err != nil && !errors.Is(err, context.Canceled) {
						var re *chanos.RemoteError
						if !errors.As(err, &re) {
							errs <- err
							return
						}
						continue // the handler saw the cancel first
					}
					if err == nil && got != v+1 {
						errs <- fmt.Errorf("echo %d = %d", v, got)
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		c.Close()
		if err := wait(); err != nil {
			t.Errorf("Serve = %v", err)
		}
	})
}

// leakServer's echo hands its first call's context to a goroutine that
// outlives the call and asks it what a context is asked (its values, its
// deadline, its end) until stop closes, as a handler that starts
// background work with its context does.
type leakServer struct {
	pingpong.UnimplementedServer
	stop    chan struct{}
	wg      sync.WaitGroup
	once    sync.Once
	revived atomic.Bool // the context said it had ended, then that it had not
	kept    context.Context
}

type leakKey struct{}

func (s *leakServer) Echo(ctx context.Context, v uint64) (uint64, error) {
	s.once.Do(func() {
		s.kept = ctx
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			ended := false
			for {
				select {
				case <-s.stop:
					return
				default:
				}
				_ = ctx.Value(leakKey{})
				_, _ = ctx.Deadline()
				if err := ctx.Err(); err != nil {
					ended = true
				} else if ended {
					s.revived.Store(true)
				}
			}
		}()
	})
	return v, nil
}

// A handler's context that outlives its call stays that call's while the
// connection serves other calls, with and without deadlines, whichever
// way Serve runs the calls: it says that its call has ended, and never
// takes it back; and, run with -race, nothing the serving does for the
// next calls races with what the outliving goroutine asks of it.
func TestContextOutlivesItsCall(t *testing.T) {
	for _, mode := range []struct {
		name string
		opts []chanos.ServeOption
	}{
		{"default", nil},
		{"ordered", []chanos.ServeOption{chanos.Ordered()}},
		{"concurrent", []chanos.ServeOption{chanos.Concurrent(4)}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			forEach(t, func(t *testing.T, c, s *pingpong.Conn) {
				srv := &leakServer{stop: make(chan struct{})}
				errc := make(chan error, 1)
				go func() { errc <- s.Serve(context.Background(), srv, mode.opts...) }()
				for i := range 2000 {
					ctx, cancel := context.Background(), context.CancelFunc(func() {})
					if i%2 == 1 {
						ctx, cancel = context.WithTimeout(ctx, time.Minute)
					}
					if v, err := c.Echo(ctx, uint64(i)); err != nil || v != uint64(i) {
						t.Fatalf("echo %d = %d, %v", i, v, err)
					}
					cancel()
				}
				close(srv.stop)
				srv.wg.Wait()
				if srv.revived.Load() {
					t.Error("a call's context said it had ended, then, during later calls, that it had not")
				}
				if err := srv.kept.Err(); !errors.Is(err, context.Canceled) {
					t.Errorf("the first call's context after 2000 more: Err = %v, want Canceled", err)
				}
				select {
				case <-srv.kept.Done():
				default:
					t.Error("the first call's context after 2000 more: Done is open")
				}
				c.Close()
				if err := <-errc; err != nil {
					t.Errorf("Serve = %v", err)
				}
			})
		})
	}
}

// cancelWaitServer's echo of 0 waits for its context to end, or 2 s, and says
// which; other values come back at once.
type cancelWaitServer struct {
	pingpong.UnimplementedServer
	seen chan error
}

func (s *cancelWaitServer) Echo(ctx context.Context, v uint64) (uint64, error) {
	if v != 0 {
		return v, nil
	}
	select {
	case <-ctx.Done():
		s.seen <- ctx.Err()
	case <-time.After(2 * time.Second):
		s.seen <- nil
	}
	return 0, ctx.Err()
}

// A caller's cancel reaches a handler served inline also while the
// serving side makes calls of its own on the connection, whose reads may
// take the cancel before the call is handed off and registers it.
func TestCancelWhileServerCalls(t *testing.T) {
	forEach(t, func(t *testing.T, c, s *pingpong.Conn) {
		srv := &cancelWaitServer{seen: make(chan error, 1)}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go s.Serve(ctx, srv)
		go c.Serve(ctx, &cancelWaitServer{})
		stop := make(chan struct{})
		calls := make(chan struct{})
		go func() { // the server's own calls to the client
			defer close(calls)
			for {
				select {
				case <-stop:
					return
				default:
				}
				s.Echo(ctx, 1)
			}
		}()
		lost := 0
		for range 10 {
			cctx, ccancel := context.WithCancel(ctx) // no deadline: only the cancel ends it
			tm := time.AfterFunc(50*time.Microsecond, ccancel)
			c.Echo(cctx, 0)
			tm.Stop()
			ccancel()
			if err := <-srv.seen; err == nil {
				lost++
			}
		}
		close(stop)
		<-calls
		if lost > 0 {
			t.Errorf("%d of 10 canceled calls: the handler's context never ended (2 s)", lost)
		}
		cancel()
	})
}

// panicking answers echo, and panics on 66.
type panicking struct{ server }

func (p *panicking) Echo(ctx context.Context, v uint64) (uint64, error) {
	if v == 66 {
		panic("sixty-six")
	}
	return p.server.Echo(ctx, v)
}

// Under Recover, a handler's panic fails its call with CodeInternal, is
// logged with its stack, and the connection serves on, in each serving
// mode.
func TestRecover(t *testing.T) {
	for _, mode := range []struct {
		name string
		opts []chanos.ServeOption
	}{{"default", nil}, {"ordered", []chanos.ServeOption{chanos.Ordered()}}, {"concurrent", []chanos.ServeOption{chanos.Concurrent(4)}}} {
		t.Run(mode.name, func(t *testing.T) {
			forEach(t, func(t *testing.T, c, s *pingpong.Conn) {
				var logs testkit.Output
				log := slog.New(slog.NewTextHandler(&logs, nil))
				opts := append([]chanos.ServeOption{chanos.WithInterceptor(chanos.Recover(log))}, mode.opts...)
				go s.Serve(context.Background(), &panicking{}, opts...)
				ctx := context.Background()
				for range 3 {
					if _, err := c.Echo(ctx, 66); !errors.Is(err, chanos.CodeInternal) || !strings.Contains(err.Error(), "panicked") {
						t.Fatalf("echo that panics = %v, want CodeInternal", err)
					}
					if v, err := c.Echo(ctx, 4); err != nil || v != 5 {
						t.Fatalf("echo after a panic = %d, %v", v, err)
					}
				}
				if n := logs.Count("an rpc handler panicked", "sixty-six", "panicking"); n != 3 {
					t.Errorf("%d panics logged with the value and the stack, want 3:\n%s", n, logs.String())
				}
			})
		})
	}
}
