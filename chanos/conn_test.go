package chanos_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/interfaces/pingpong"
	"github.com/chanos/chanos/wire"
)

// pairs are the interconnects every test runs over.
var pairs = map[string]func(t *testing.T) (client, server *pingpong.Conn){
	"local": func(t *testing.T) (*pingpong.Conn, *pingpong.Conn) {
		a, b := chanos.LocalPair(pingpong.Interface)
		return pingpong.NewConn(a), pingpong.NewConn(b)
	},
	"ump": func(t *testing.T) (*pingpong.Conn, *pingpong.Conn) {
		a, b, err := chanos.UMPPair(pingpong.Interface)
		if err != nil {
			t.Fatal(err)
		}
		return pingpong.NewConn(a), pingpong.NewConn(b)
	},
}

func forEach(t *testing.T, fn func(t *testing.T, c, s *pingpong.Conn)) {
	for name, mk := range pairs {
		t.Run(name, func(t *testing.T) {
			before := runtime.NumGoroutine()
			c, s := mk(t)
			fn(t, c, s)
			c.Close()
			s.Close()
			waitGoroutines(t, before)
		})
	}
}

func waitGoroutines(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<16)
		t.Fatalf("goroutines leaked: %d before, %d after\n%s", before, n, buf[:runtime.Stack(buf, true)])
	}
}

// server answers pings with pongs, echoes, and fails bounce on request.
type server struct {
	pingpong.UnimplementedServer
	deadline chan time.Duration
}

func (s *server) Ping(ctx context.Context, from *pingpong.Client, m pingpong.Ping) error {
	return from.Send(ctx, &pingpong.Pong{ClientID: m.ClientID, MsgID: m.MsgID})
}

func (s *server) Echo(ctx context.Context, val uint64) (uint64, error) {
	if s.deadline != nil {
		dl, ok := ctx.Deadline()
		if !ok {
			s.deadline <- -1
		} else {
			s.deadline <- time.Until(dl)
		}
	}
	if val == 1<<40+13 {
		return 0, &chanos.RemoteError{Code: 0x13, Detail: "unlucky"}
	}
	if val == 1<<40+14 {
		return 0, errors.New("plain failure")
	}
	if val == 1<<40+99 {
		time.Sleep(50 * time.Millisecond)
	}
	return val + 1, nil
}

func (s *server) Bounce(ctx context.Context, p []byte) ([]byte, error) {
	if string(p) == "fail" {
		return nil, &chanos.RemoteError{Code: 0x21, Detail: "bounced"}
	}
	return p, nil
}

func serve(t *testing.T, s *pingpong.Conn, srv pingpong.Server) (wait func() error) {
	errc := make(chan error, 1)
	go func() { errc <- s.Serve(context.Background(), srv) }()
	return func() error { return <-errc }
}

func TestMessagesAndCalls(t *testing.T) {
	forEach(t, func(t *testing.T, c, s *pingpong.Conn) {
		ctx := context.Background()
		wait := serve(t, s, &server{})
		for i := uint32(0); i < 100; i++ {
			if err := c.Send(ctx, &pingpong.Ping{ClientID: 7, MsgID: i}); err != nil {
				t.Fatal(err)
			}
			m, err := c.Receive(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if p, ok := m.(*pingpong.Pong); !ok || p.MsgID != i || p.ClientID != 7 {
				t.Fatalf("got %#v", m)
			}
			got, err := c.Echo(ctx, uint64(i))
			if err != nil || got != uint64(i)+1 {
				t.Fatalf("echo %d = %d, %v", i, got, err)
			}
		}
		payload := bytes.Repeat([]byte("0123456789abcdef"), 4096)
		out, err := c.Bounce(ctx, payload)
		if err != nil || !bytes.Equal(out, payload) {
			t.Fatalf("bounce: %d bytes, %v", len(out), err)
		}
		c.Close()
		if err := wait(); err != nil {
			t.Fatalf("Serve after client close = %v, want nil", err)
		}
	})
}

func TestRemoteErrors(t *testing.T) {
	forEach(t, func(t *testing.T, c, s *pingpong.Conn) {
		ctx := context.Background()
		serve(t, s, &server{})
		_, err := c.Echo(ctx, 1<<40+13)
		var re *chanos.RemoteError
		if !errors.As(err, &re) || re.Code != 0x13 || re.Detail != "unlucky" || re.Msg != "pingpong.echo" {
			t.Fatalf("err = %#v", err)
		}
		_, err = c.Echo(ctx, 1<<40+14)
		if !errors.As(err, &re) || chanos.CodeOf(err) != chanos.CodeUnknown || re.Detail != "plain failure" {
			t.Fatalf("err = %#v", err)
		}
		// An rpc of no fixed size (another path in the stubs).
		_, err = c.Bounce(ctx, []byte("fail"))
		if !errors.As(err, &re) || re.Code != 0x21 || re.Detail != "bounced" || re.Msg != "pingpong.bounce" {
			t.Fatalf("err = %#v", err)
		}
		// The connection is still fine.
		if v, err := c.Echo(ctx, 1); err != nil || v != 2 {
			t.Fatalf("echo after errors = %d, %v", v, err)
		}
		if p, err := c.Bounce(ctx, []byte("ok")); err != nil || string(p) != "ok" {
			t.Fatalf("bounce after errors = %q, %v", p, err)
		}
	})
}

func TestDeadlineReachesServer(t *testing.T) {
	forEach(t, func(t *testing.T, c, s *pingpong.Conn) {
		srv := &server{deadline: make(chan time.Duration, 2)}
		serve(t, s, srv)
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		if _, err := c.Echo(ctx, 1); err != nil {
			t.Fatal(err)
		}
		if d := <-srv.deadline; d <= 59*time.Minute || d > time.Hour {
			t.Fatalf("server saw deadline in %v, want about 1h", d)
		}
		if _, err := c.Echo(context.Background(), 1); err != nil {
			t.Fatal(err)
		}
		if d := <-srv.deadline; d != -1 {
			t.Fatalf("server saw a deadline (%v) for a call without one", d)
		}
	})
}

func TestCallCanceled(t *testing.T) {
	forEach(t, func(t *testing.T, c, s *pingpong.Conn) {
		serve(t, s, &server{})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
		defer cancel()
		if _, err := c.Echo(ctx, 1<<40+99); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("slow echo = %v", err)
		}
		// The late reply is dropped; later calls get their own replies.
		for i := uint64(0); i < 10; i++ {
			if v, err := c.Echo(context.Background(), i); err != nil || v != i+1 {
				t.Fatalf("echo %d after cancel = %d, %v", i, v, err)
			}
		}
	})
}

func TestConcurrentCalls(t *testing.T) {
	forEach(t, func(t *testing.T, c, s *pingpong.Conn) {
		serve(t, s, &server{})
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				for i := 0; i < 200; i++ {
					v := uint64(g*1000 + i)
					got, err := c.Echo(context.Background(), v)
					if err != nil || got != v+1 {
						errs <- fmt.Errorf("echo %d = %d, %v", v, got, err)
						return
					}
				}
			}(g)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})
}

// Messages that arrive while a Call reads for its reply wait for Receive.
func TestMessagesDuringCall(t *testing.T) {
	forEach(t, func(t *testing.T, c, s *pingpong.Conn) {
		ctx := context.Background()
		go func() {
			for {
				m, err := s.Receive(ctx)
				if err != nil {
					return
				}
				call, ok := m.(*pingpong.EchoCall)
				if !ok {
					continue
				}
				// Three messages, then the reply.
				for i := uint32(0); i < 3; i++ {
					s.Send(ctx, &pingpong.Pong{MsgID: i})
				}
				_ = call
				s.Raw().Close()
				return
			}
		}()
		_, err := c.Echo(ctx, 5)
		if !errors.Is(err, chanos.ErrClosed) {
			t.Fatalf("echo = %v, want ErrClosed", err)
		}
		for i := uint32(0); i < 3; i++ {
			m, err := c.Receive(ctx)
			if err != nil {
				t.Fatalf("message %d: %v", i, err)
			}
			if p := m.(*pingpong.Pong); p.MsgID != i {
				t.Fatalf("message %d = %d", i, p.MsgID)
			}
		}
		if _, err := c.Receive(ctx); !errors.Is(err, chanos.ErrClosed) {
			t.Fatalf("after drain: %v", err)
		}
	})
}

func TestRecvChannel(t *testing.T) {
	forEach(t, func(t *testing.T, c, s *pingpong.Conn) {
		ctx := context.Background()
		for i := uint32(0); i < 5; i++ {
			s.Send(ctx, &pingpong.Pong{MsgID: i})
		}
		s.Close()
		var got []uint32
		for m := range c.Recv() {
			got = append(got, m.(*pingpong.Pong).MsgID)
		}
		if fmt.Sprint(got) != "[0 1 2 3 4]" || !errors.Is(c.Err(), chanos.ErrClosed) {
			t.Fatalf("got %v, err %v", got, c.Err())
		}
	})
}

func TestLocalCopiesSlices(t *testing.T) {
	a, b := chanos.LocalPair(pingpong.Interface)
	c, s := pingpong.NewConn(a), pingpong.NewConn(b)
	defer c.Close()
	defer s.Close()
	buf := []byte("original")
	if err := c.Send(context.Background(), &pingpong.Data{Seq: 1, Payload: buf}); err != nil {
		t.Fatal(err)
	}
	copy(buf, "mutated!")
	m, err := s.Receive(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := string(m.(*pingpong.Data).Payload); got != "original" {
		t.Fatalf("receiver saw %q: the sender's slice leaked through", got)
	}
}

func TestSendErrors(t *testing.T) {
	forEach(t, func(t *testing.T, c, s *pingpong.Conn) {
		ctx := context.Background()
		big := make([]byte, pingpong.MaxDataPayloadLen+1)
		if err := c.Send(ctx, &pingpong.Data{Payload: big}); !errors.Is(err, wire.ErrBound) {
			t.Fatalf("oversized payload: %v", err)
		}
		if err := c.Raw().Send(ctx, &pingpong.EchoCall{}); err == nil {
			t.Fatal("Send of a call accepted")
		}
		if err := c.Send(ctx, &pingpong.EchoReply{}); err == nil || !strings.Contains(err.Error(), "use Client.Echo") {
			t.Fatalf("generated Send of a reply = %v, want the stub to use", err)
		}
		s.Close()
		deadline, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		for {
			err := c.Send(deadline, &pingpong.Ping{})
			if errors.Is(err, chanos.ErrClosed) {
				break
			}
			if err != nil {
				t.Fatalf("send after peer close: %v", err)
			}
		}
	})
}

// A send that waits for room until its context ends says why the room
// did not come, a one-way message's and a call's alike, and still
// matches the context's error; a call that went out and whose reply did
// not come in time says nothing of the kind.
func TestSendFullSaysWhy(t *testing.T) {
	forEach(t, func(t *testing.T, c, s *pingpong.Conn) {
		ctx := context.Background()
		const why = "the peer took no frame while this one waited for room"
		short := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 50*time.Millisecond) }
		// Nobody serves s: the call goes out, its reply never comes.
		cctx, cancel := short()
		_, err := c.Echo(cctx, 1)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), why) {
			t.Fatalf("a call sent and not answered = %v, want DeadlineExceeded alone", err)
		}
		for i := 0; ; i++ {
			sctx, cancel := short()
			err = c.Send(sctx, &pingpong.Ping{MsgID: uint32(i)})
			cancel()
			if err != nil {
				break
			}
		}
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), why) {
			t.Fatalf("a send that found no room = %v, want DeadlineExceeded and why", err)
		}
		cctx, cancel = short()
		_, err = c.Echo(cctx, 2)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || chanos.CodeOf(err) != chanos.CodeDeadlineExceeded || !strings.Contains(err.Error(), why) {
			t.Fatalf("a call that found no room = %v, want DeadlineExceeded and why", err)
		}
	})
}

// blockingServer's echo waits for its context: only a cancel or deadline
// ends it.
type blockingServer struct {
	pingpong.UnimplementedServer
	ended chan error
}

func (s *blockingServer) Echo(ctx context.Context, v uint64) (uint64, error) {
	if v == 0 {
		<-ctx.Done()
		s.ended <- ctx.Err()
		return 0, ctx.Err()
	}
	return v, nil
}

func TestConcurrentServeCancel(t *testing.T) {
	forEach(t, func(t *testing.T, c, s *pingpong.Conn) {
		srv := &blockingServer{ended: make(chan error, 1)}
		go s.Serve(context.Background(), srv, chanos.Concurrent(4))
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { _, err := c.Echo(ctx, 0); errc <- err }()
		// Other calls proceed while the first blocks.
		for i := uint64(1); i < 20; i++ {
			if v, err := c.Echo(context.Background(), i); err != nil || v != i {
				t.Fatalf("echo %d = %d, %v", i, v, err)
			}
		}
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("canceled call = %v", err)
		}
		select {
		case err := <-srv.ended:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("server handler ended with %v, want context.Canceled", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the caller's cancel did not reach the server's handler")
		}
	})
}

// A call made while the inbox is full of messages nobody receives, and
// nobody reads the connection, waits for a Receive or its context: it
// returns at its deadline, and after a Receive makes room it reads its
// reply.
func TestCallWithFullInbox(t *testing.T) {
	forEach(t, func(t *testing.T, c, s *pingpong.Conn) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		sent := make(chan struct{})
		go func() { // more messages than the inbox holds
			defer close(sent)
			for i := range 1100 {
				if s.Send(ctx, &pingpong.Ping{MsgID: uint32(i)}) != nil {
					return
				}
			}
		}()
		// The first call, which nobody serves yet, reads past the
		// messages until the inbox is full, and gives up.
		first, stop := context.WithTimeout(ctx, 200*time.Millisecond)
		_, err := c.Echo(first, 1)
		stop()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("the first call = %v, want DeadlineExceeded", err)
		}
		second, stop := context.WithTimeout(ctx, 300*time.Millisecond)
		defer stop()
		done := make(chan error, 1)
		go func() { _, err := c.Echo(second, 2); done <- err }()
		select {
		case err := <-done:
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("the second call = %v, want DeadlineExceeded", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a call on a full inbox outlived its deadline by 10 s")
		}
		// Receives make room: a call then gets its answer.
		go s.Serve(ctx, &server{})
		go func() {
			for {
				if _, err := c.Receive(ctx); err != nil {
					return
				}
			}
		}()
		if v, err := c.Echo(ctx, 3); err != nil || v != 4 {
			t.Fatalf("a call once the inbox drains = %d, %v", v, err)
		}
		cancel()
		c.Close()
		<-sent
	})
}

// callbackServer answers a ping by calling the peer's echo back on the
// connection the ping came on.
type callbackServer struct {
	pingpong.UnimplementedServer
	got chan error
}

func (s *callbackServer) Ping(ctx context.Context, from *pingpong.Client, m pingpong.Ping) error {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	v, err := from.Echo(cctx, uint64(m.MsgID))
	if err == nil && v != uint64(m.MsgID)+1 {
		err = fmt.Errorf("echo of %d = %d", m.MsgID, v)
	}
	s.got <- err
	return nil
}

// A message handler served in the default way may call its peer back on
// the same connection: the reply is read while the handler waits.
func TestMessageHandlerCallsBack(t *testing.T) {
	forEach(t, func(t *testing.T, c, s *pingpong.Conn) {
		srv := &callbackServer{got: make(chan error, 1)}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go s.Serve(ctx, srv)
		go c.Serve(ctx, &server{}) // the client answers the callback
		for i := range 3 {
			if err := c.Send(ctx, &pingpong.Ping{ClientID: 1, MsgID: uint32(i)}); err != nil {
				t.Fatal(err)
			}
			if err := <-srv.got; err != nil {
				t.Fatalf("the callback from the ping handler: %v", err)
			}
		}
		cancel()
	})
}

// The inbox is bounded by its frames' bytes as well as their count: a call
// reading past large messages nobody receives stops reading once they
// hold inboxBytes (4 MiB), rather than at 1024 of them.
func TestInboxBoundedByBytes(t *testing.T) {
	a, b, err := chanos.UMPPair(pingpong.Interface)
	if err != nil {
		t.Fatal(err)
	}
	c, s := pingpong.NewConn(a), pingpong.NewConn(b)
	defer c.Close()
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	payload := make([]byte, 900<<10)
	go func() {
		for i := range 12 {
			if s.Send(ctx, &pingpong.Data{Seq: uint64(i), Payload: payload}) != nil {
				return
			}
		}
	}()
	call, stop := context.WithTimeout(ctx, 300*time.Millisecond)
	defer stop()
	if _, err := c.Echo(call, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a call nobody serves = %v", err)
	}
	if n := chanos.InboxLen(a); n > 5 {
		t.Fatalf("%d messages of 900 KiB in the inbox, want at most 5 (4 MiB)", n)
	}
	for i := range 12 { // all of them arrive once received
		m, err := c.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if d, ok := m.(*pingpong.Data); !ok || d.Seq != uint64(i) {
			t.Fatalf("message %d = %v", i, m)
		}
	}
}
