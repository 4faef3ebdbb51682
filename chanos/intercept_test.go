package chanos_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/interfaces/kv"
	"github.com/chanos/chanos/interfaces/pingpong"
	"github.com/chanos/chanos/internal/testkit"
	"github.com/chanos/chanos/internal/testkit/testmonitor"
)

// traceServer answers echo and put, recording the trace-id each call
// carried; echo of 99 waits for its context's end.
type traceServer struct {
	pingpong.UnimplementedServer
	mu     sync.Mutex
	traces []string
}

func (s *traceServer) saw(ctx context.Context) {
	md, _ := chanos.MetadataFrom(ctx)
	s.mu.Lock()
	s.traces = append(s.traces, md["trace-id"])
	s.mu.Unlock()
}

func (s *traceServer) Echo(ctx context.Context, v uint64) (uint64, error) {
	s.saw(ctx)
	if v == 99 {
		<-ctx.Done()
		return 0, ctx.Err()
	}
	return v, nil
}

func (s *traceServer) Bounce(ctx context.Context, p []byte) ([]byte, error) {
	s.saw(ctx)
	return p, nil
}

type traceKV struct {
	kv.UnimplementedServer
	s *traceServer
}

func (k traceKV) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	k.s.saw(ctx)
	return uint64(len(value)), nil
}

// callLog is what the interceptors of TestCallInterceptors saw, in order.
type callLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *callLog) add(format string, args ...any) {
	l.mu.Lock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
	l.mu.Unlock()
}

func (l *callLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	lines := l.lines
	l.lines = nil
	return lines
}

// echoDeadline is the deadline TestCallInterceptors's outer interceptor
// gives echo calls, which one of them waits out.
const echoDeadline = 2 * time.Second

// A domain's call interceptors see each rpc call its connections make,
// over ump and locally, on every path the generated stubs take (a fixed
// frame, a frame in parts, an encoded one) and Call's: the outer one's
// context (metadata, a deadline) reaches the call, the inner one may
// refuse it unsent, and the afters see the result innermost first and
// decide what the caller gets. The domain's calls to its monitor do not
// go through them.
func TestCallInterceptors(t *testing.T) {
	dir := testmonitor.Start(t)
	ctx := testkit.Context(t)
	var log callLog
	outer := func(ctx context.Context, rpc string) (context.Context, func(error) error, error) {
		log.add("outer %s", rpc)
		ctx = chanos.WithMetadata(ctx, chanos.Metadata{"trace-id": "t-" + rpc})
		cancel := func() {}
		if rpc == "pingpong.echo" {
			// Long enough that the call reaches the server (whose trace
			// is checked) before it ends, however loaded the machine.
			ctx, cancel = context.WithTimeout(ctx, echoDeadline)
		}
		return ctx, func(err error) error {
			cancel()
			log.add("outer after %s: %v", rpc, chanos.CodeOf(err))
			if err != nil {
				return fmt.Errorf("outer: %w", err)
			}
			return nil
		}, nil
	}
	inner := func(ctx context.Context, rpc string) (context.Context, func(error) error, error) {
		log.add("inner %s", rpc)
		if rpc == "pingpong.bounce" {
			return nil, nil, chanos.Error(chanos.CodePermissionDenied, "no bounces")
		}
		return ctx, func(err error) error {
			log.add("inner after %s: %v", rpc, chanos.CodeOf(err))
			return err
		}, nil
	}
	d, err := chanos.Join(ctx, chanos.WithDir(dir), chanos.WithCallInterceptor(outer, inner))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	srvD, err := chanos.Join(ctx, chanos.WithDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer srvD.Close()
	srv := &traceServer{}
	for i, sd := range []*chanos.Domain{srvD, d} {
		name := fmt.Sprintf("traced-%d", i)
		l, err := pingpong.Export(ctx, sd, name)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		go pingpong.Serve(ctx, l, srv, chanos.Concurrent(4))
		kl, err := kv.Export(ctx, sd, name+"-kv")
		if err != nil {
			t.Fatal(err)
		}
		defer kl.Close()
		go kv.Serve(ctx, kl, traceKV{s: srv})
		if lines := log.take(); len(lines) != 0 {
			t.Fatalf("the exports ran the interceptors: %q", lines)
		}

		c, err := pingpong.Connect(ctx, d, name)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		kc, err := kv.Connect(ctx, d, name+"-kv")
		if err != nil {
			t.Fatal(err)
		}
		defer kc.Close()
		over := c.Raw().Interconnect()
		if lines := log.take(); len(lines) != 0 {
			t.Fatalf("over %s: the connects ran the interceptors: %q", over, lines)
		}

		if v, err := c.Echo(ctx, 7); err != nil || v != 7 {
			t.Fatalf("over %s: echo = %d, %v", over, v, err)
		}
		var reply pingpong.EchoReply
		if err := c.Raw().Call(ctx, &pingpong.EchoCall{Val: 8}, &reply); err != nil || reply.Result != 8 {
			t.Fatalf("over %s: Call = %d, %v", over, reply.Result, err)
		}
		if v, err := kc.Put(ctx, "k", []byte("abc")); err != nil || v != 3 {
			t.Fatalf("over %s: put = %d, %v", over, v, err)
		}
		want := []string{
			"outer pingpong.echo", "inner pingpong.echo", "inner after pingpong.echo: ok", "outer after pingpong.echo: ok",
			"outer pingpong.echo", "inner pingpong.echo", "inner after pingpong.echo: ok", "outer after pingpong.echo: ok",
			"outer kv.put", "inner kv.put", "inner after kv.put: ok", "outer after kv.put: ok",
		}
		if lines := log.take(); !slices.Equal(lines, want) {
			t.Errorf("over %s: the interceptors saw\n%q\nwant\n%q", over, lines, want)
		}

		// Refused by the inner interceptor: nothing is sent, and the
		// outer one's after sees the refusal.
		_, err = c.Bounce(ctx, []byte("x"))
		if !errors.Is(err, chanos.CodePermissionDenied) || !strings.HasPrefix(err.Error(), "outer: ") {
			t.Errorf("over %s: a refused bounce = %v, want the outer after's permission denied", over, err)
		}
		want = []string{"outer pingpong.bounce", "inner pingpong.bounce", "outer after pingpong.bounce: permission denied"}
		if lines := log.take(); !slices.Equal(lines, want) {
			t.Errorf("over %s: a refused call: the interceptors saw %q, want %q", over, lines, want)
		}

		// The outer interceptor's deadline ends a call whose caller set
		// none.
		start := time.Now()
		if _, err := c.Echo(context.Background(), 99); chanos.CodeOf(err) != chanos.CodeDeadlineExceeded || !strings.HasPrefix(err.Error(), "outer: ") {
			t.Errorf("over %s: echo past the interceptor's deadline = %v after %v", over, err, time.Since(start))
		}
		log.take()

		srv.mu.Lock()
		traces := srv.traces
		srv.traces = nil
		srv.mu.Unlock()
		want = []string{"t-pingpong.echo", "t-pingpong.echo", "t-kv.put", "t-pingpong.echo"}
		if !slices.Equal(traces, want) {
			t.Errorf("over %s: the server saw trace ids %q, want %q", over, traces, want)
		}
	}
}
