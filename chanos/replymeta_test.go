package chanos_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"sync"
	"testing"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/chanos/genrt"
	"github.com/chanos/chanos/interfaces/kv"
	"github.com/chanos/chanos/interfaces/pingpong"
	"github.com/chanos/chanos/internal/testkit"
	"github.com/chanos/chanos/wire"
)

// replyMDServer answers echo of v with reply metadata {"v": v} (none for
// v 0), failing with not found after setting it for v >= 100; bounce with
// {"len": its length}. Echo of 60 says it has started, then runs until
// the test releases it. Echo of 50 sets metadata that breaks a bound and
// records SetReplyMetadata's error.
type replyMDServer struct {
	pingpong.UnimplementedServer
	mu      sync.Mutex
	badErr  error
	started chan struct{} // echo of 60 has started; room for one
	release chan struct{} // closed: echo of 60 may return
}

func newReplyMDServer() *replyMDServer {
	return &replyMDServer{started: make(chan struct{}, 1), release: make(chan struct{})}
}

func (s *replyMDServer) Echo(ctx context.Context, v uint64) (uint64, error) {
	switch {
	case v == 50:
		err := chanos.SetReplyMetadata(ctx, chanos.Metadata{"bad key": "x"})
		s.mu.Lock()
		s.badErr = err
		s.mu.Unlock()
		return v, nil
	case v == 60:
		s.started <- struct{}{}
		select {
		case <-s.release:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		fallthrough
	case v != 0:
		if err := chanos.SetReplyMetadata(ctx, chanos.Metadata{"V": fmt.Sprint(v)}); err != nil {
			return 0, err
		}
	}
	if v >= 100 {
		return 0, chanos.Errorf(chanos.CodeNotFound, "no %d", v)
	}
	return v, nil
}

func (s *replyMDServer) Bounce(ctx context.Context, p []byte) ([]byte, error) {
	if err := chanos.SetReplyMetadata(ctx, chanos.Metadata{"len": fmt.Sprint(len(p))}); err != nil {
		return nil, err
	}
	return p, nil
}

// A handler's reply metadata reaches the caller that asked for it, on
// every path a reply takes: a fixed reply sent inline or as a value
// (under an interceptor, or handed off to a goroutine of its own), a
// reply in parts, an error reply, a reply to a call that waited as a
// pending one; a reply without metadata sets none. Metadata that breaks
// a bound is refused by SetReplyMetadata, and the reply goes without.
// The call handed off is known to be: another call on its connection is
// answered while it runs, which the connection's reader, were it still
// running that call, could not do (Ordered runs it inline, in turn).
func TestReplyMetadata(t *testing.T) {
	modes := map[string][]chanos.ServeOption{
		"inline":     nil,
		"concurrent": {chanos.Concurrent(4)},
		"ordered":    {chanos.Ordered()},
		"intercepted": {chanos.WithInterceptor(func(ctx context.Context, in *chanos.Incoming, next chanos.Handler) (wire.Message, error) {
			return next(ctx, in)
		})},
	}
	for mode, opts := range modes {
		t.Run(mode, func(t *testing.T) {
			forEach(t, func(t *testing.T, c, s *pingpong.Conn) {
				srv := newReplyMDServer()
				go s.Serve(context.Background(), srv, opts...)
				ctx := testkit.Context(t)
				var md chanos.Metadata
				cctx := chanos.CaptureReplyMetadata(ctx, &md)
				if v, err := c.Echo(cctx, 7); err != nil || v != 7 || !maps.Equal(md, chanos.Metadata{"v": "7"}) {
					t.Fatalf("echo 7 = %d, %v, reply metadata %v; want {v: 7}", v, err, md)
				}
				if _, err := c.Echo(cctx, 0); err != nil || md != nil {
					t.Fatalf("echo 0 = %v, reply metadata %v; want none", err, md)
				}
				var reply pingpong.EchoReply
				if err := c.Raw().Call(cctx, &pingpong.EchoCall{Val: 8}, &reply); err != nil || !maps.Equal(md, chanos.Metadata{"v": "8"}) {
					t.Fatalf("Call echo 8 = %v, reply metadata %v", err, md)
				}
				if p, err := c.Bounce(cctx, make([]byte, 3000)); err != nil || len(p) != 3000 || !maps.Equal(md, chanos.Metadata{"len": "3000"}) {
					t.Fatalf("bounce = %d bytes, %v, reply metadata %v", len(p), err, md)
				}
				if _, err := c.Echo(cctx, 100); !errors.Is(err, chanos.CodeNotFound) || !maps.Equal(md, chanos.Metadata{"v": "100"}) {
					t.Fatalf("echo 100 = %v, reply metadata %v; want not found with {v: 100}", err, md)
				}
				if mode == "ordered" {
					close(srv.release)
					if v, err := c.Echo(cctx, 60); err != nil || v != 60 || !maps.Equal(md, chanos.Metadata{"v": "60"}) {
						t.Fatalf("echo 60 = %d, %v, reply metadata %v", v, err, md)
					}
				} else {
					var slowMD chanos.Metadata
					slow := echoAsync(ctx, c, 60, &slowMD)
					testkit.Await(t, "echo 60's start", srv.started)
					if v, err := c.Echo(cctx, 9); err != nil || v != 9 || !maps.Equal(md, chanos.Metadata{"v": "9"}) {
						t.Fatalf("echo 9 while echo 60 runs = %d, %v, reply metadata %v: echo 60 was not handed off", v, err, md)
					}
					close(srv.release)
					if r := testkit.Await(t, "echo 60's reply", slow); r.err != nil || r.v != 60 || !maps.Equal(slowMD, chanos.Metadata{"v": "60"}) {
						t.Fatalf("echo 60, handed off = %d, %v, reply metadata %v", r.v, r.err, slowMD)
					}
				}
				md = chanos.Metadata{"stale": "x"}
				if v, err := c.Echo(cctx, 50); err != nil || v != 50 || md != nil {
					t.Fatalf("echo 50 = %d, %v, reply metadata %v; want none", v, err, md)
				}
				srv.mu.Lock()
				badErr := srv.badErr
				srv.mu.Unlock()
				if chanos.CodeOf(badErr) != chanos.CodeInvalidArgument || !errors.Is(badErr, wire.ErrHeader) {
					t.Errorf("SetReplyMetadata with a bad key = %v, want invalid argument matching wire.ErrHeader", badErr)
				}
				// Calls at once: most wait as pending ones, each with its
				// own place for the metadata.
				var wg sync.WaitGroup
				for i := range 8 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						v := uint64(i + 1)
						var mine chanos.Metadata
						if got, err := c.Echo(chanos.CaptureReplyMetadata(ctx, &mine), v); err != nil || got != v || !maps.Equal(mine, chanos.Metadata{"v": fmt.Sprint(v)}) {
							t.Errorf("echo %d at once = %d, %v, reply metadata %v", v, got, err, mine)
						}
					}()
				}
				wg.Wait()
			})
		})
	}
	if err := chanos.SetReplyMetadata(context.Background(), chanos.Metadata{"k": "v"}); err == nil {
		t.Error("SetReplyMetadata outside a handler succeeded")
	}
}

// echoResult is what an echo call that echoAsync made gave.
type echoResult struct {
	v   uint64
	err error
}

// echoAsync calls echo(v) on c in a goroutine of its own, with its
// reply's metadata going to *md, and returns where its result comes.
func echoAsync(ctx context.Context, c *pingpong.Conn, v uint64, md *chanos.Metadata) <-chan echoResult {
	done := make(chan echoResult, 1)
	go func() {
		got, err := c.Echo(chanos.CaptureReplyMetadata(ctx, md), v)
		done <- echoResult{got, err}
	}()
	return done
}

// kvReplyServer answers get with a reply of no fixed size (encoded) and
// reply metadata.
type kvReplyServer struct{ kv.UnimplementedServer }

func (kvReplyServer) Get(ctx context.Context, key string) (kv.Status, []byte, error) {
	if err := chanos.SetReplyMetadata(ctx, chanos.Metadata{"key": key}); err != nil {
		return 0, nil, err
	}
	return kv.StatusOk, []byte(key + key), nil
}

// An encoded reply carries its metadata too, over ump and locally.
func TestReplyMetadataEncoded(t *testing.T) {
	for name, mk := range map[string]func() (*chanos.Conn, *chanos.Conn, error){
		"local": func() (*chanos.Conn, *chanos.Conn, error) {
			a, b := chanos.LocalPair(kv.Interface)
			return a, b, nil
		},
		"ump": func() (*chanos.Conn, *chanos.Conn, error) { return chanos.UMPPair(kv.Interface) },
	} {
		t.Run(name, func(t *testing.T) {
			a, b, err := mk()
			if err != nil {
				t.Fatal(err)
			}
			c, s := kv.NewConn(a), kv.NewConn(b)
			defer c.Close()
			defer s.Close()
			go s.Serve(context.Background(), kvReplyServer{})
			var md chanos.Metadata
			st, v, err := c.Get(chanos.CaptureReplyMetadata(testkit.Context(t), &md), "ab")
			if err != nil || st != kv.StatusOk || string(v) != "abab" || !maps.Equal(md, chanos.Metadata{"key": "ab"}) {
				t.Fatalf("get = %v, %q, %v, reply metadata %v", st, v, err, md)
			}
		})
	}
}

// A reply whose metadata trailer is malformed is the server's protocol
// violation: the call fails, coded internal, and the connection ends;
// nothing panics and nothing is left running.
func TestReplyMetadataMalformed(t *testing.T) {
	before := runtime.NumGoroutine()
	a, b, err := chanos.UMPPair(pingpong.Interface)
	if err != nil {
		t.Fatal(err)
	}
	c, s := pingpong.NewConn(a), pingpong.NewConn(b)
	defer c.Close()
	defer s.Close()
	ctx := testkit.Context(t)
	go func() {
		var id uint32
		if genrt.Engine(s.Raw()).ReceiveFunc(ctx, func(in *chanos.Incoming) error {
			id = in.Header.CallID
			return nil
		}) != nil {
			return
		}
		var buf wire.Buffer
		(&pingpong.EchoReply{Result: 1}).Encode(&buf)
		frame, err := wire.AppendMetadata(buf.B, chanos.Metadata{"k": "v"})
		if err != nil {
			panic(err)
		}
		frame[len(frame)-2] = 0xff // the entries' length past the frame
		wire.SetCallID(frame, id)
		genrt.Engine(s.Raw()).SendFrame(ctx, frame)
	}()
	_, err = c.Echo(ctx, 1)
	if !errors.Is(err, chanos.ErrProtocol) || chanos.CodeOf(err) != chanos.CodeInternal {
		t.Fatalf("a reply with a malformed trailer: %v (code %v), want a protocol violation", err, chanos.CodeOf(err))
	}
	c.Close()
	s.Close()
	waitGoroutines(t, before)
}

// setterServer answers echo after trying SetReplyMetadata, whose result
// it hands the test.
type setterServer struct {
	pingpong.UnimplementedServer
	set chan error
}

func (s *setterServer) Echo(ctx context.Context, v uint64) (uint64, error) {
	s.set <- chanos.SetReplyMetadata(ctx, chanos.Metadata{"v": fmt.Sprint(v)})
	return v, nil
}

// A call served by ServeIncoming (here through the generated Handle)
// without a deadline has no handler's context to keep reply metadata in:
// SetReplyMetadata fails, as documented, and the reply goes without
// metadata; with a deadline, the same handler's metadata reaches the
// caller.
func TestReplyMetadataServeIncomingWithoutDeadline(t *testing.T) {
	forEach(t, func(t *testing.T, c, s *pingpong.Conn) {
		srv := &setterServer{set: make(chan error, 1)}
		for _, tc := range []struct {
			name     string
			deadline bool
		}{{"no deadline", false}, {"a deadline", true}} {
			ctx := context.Background() // no deadline: the frame's timeout_us is 0
			if tc.deadline {
				ctx = testkit.Context(t)
			}
			md := chanos.Metadata{"stale": "x"}
			done := echoAsync(ctx, c, 5, &md)
			if err := s.Handle(testkit.Context(t), srv); err != nil {
				t.Fatalf("%s: Handle = %v", tc.name, err)
			}
			setErr := testkit.Await(t, tc.name+": SetReplyMetadata's result", srv.set)
			r := testkit.Await(t, tc.name+": the echo's reply", done)
			if r.err != nil || r.v != 5 {
				t.Fatalf("%s: echo = %d, %v; want 5", tc.name, r.v, r.err)
			}
			switch {
			case !tc.deadline && (setErr == nil || md != nil):
				t.Errorf("%s: SetReplyMetadata = %v, reply metadata %v; want an error and none", tc.name, setErr, md)
			case tc.deadline && (setErr != nil || !maps.Equal(md, chanos.Metadata{"v": "5"})):
				t.Errorf("%s: SetReplyMetadata = %v, reply metadata %v; want {v: 5}", tc.name, setErr, md)
			}
		}
	})
}
