package chanos_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/interfaces/pingpong"
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

// A call with a deadline costs the serving side one allocation, its
// context, over ump (the calling side none).
func TestDeadlineCallAllocations(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if allocs := echoAllocs(t, ctx); allocs > 1 {
		t.Errorf("an echo rpc with a deadline allocates %v times, want at most 1", allocs)
	}
}
