package wiretest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/interconnect/ump"
	"github.com/chanos/chanos/internal/testkit/wiretest/pingpong"
	"github.com/chanos/chanos/wire"
)

// pair connects a client to srv over a real ring pair in this process,
// served inline (so a message is handled before a later call is).
func pair(t *testing.T, srv pingpong.Server) *pingpong.Conn {
	t.Helper()
	a, b, err := ump.Pipe(&ump.Options{MaxMessageSize: pingpong.MaxFrameSize})
	if err != nil {
		t.Fatal(err)
	}
	c := pingpong.NewConn(chanos.NewConn(ump.NewLink(a), pingpong.Interface))
	s := pingpong.NewConn(chanos.NewConn(ump.NewLink(b), pingpong.Interface))
	served := make(chan error, 1)
	go func() { served <- s.Serve(context.Background(), srv) }()
	t.Cleanup(func() {
		c.Close()
		if err := <-served; err != nil {
			t.Errorf("Serve = %v", err)
		}
		s.Close()
	})
	return c
}

// server implements pingpong.Server for the round-trip test.
type server struct {
	pingpong.UnimplementedServer
	mu    sync.Mutex // the race detector does not see the ring's ordering
	pings []pingpong.Ping
}

func (s *server) Ping(_ context.Context, _ *pingpong.Client, m pingpong.Ping) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pings = append(s.pings, m)
	return nil
}

func (s *server) Get(_ context.Context, key string) (string, bool, error) {
	if key == "k" {
		return "v", true, nil
	}
	return "", false, nil
}

func (s *server) Add(_ context.Context, a, b int32) (int32, error) { return a + b, nil }

func (s *server) Fail(_ context.Context, code uint64) error {
	return &chanos.RemoteError{Code: wire.Errval(code), Detail: fmt.Sprintf("failed with code %d", code)}
}

func TestClientServer(t *testing.T) {
	ctx := context.Background()
	srv := &server{}
	c := pair(t, srv)

	if err := c.Send(ctx, &pingpong.Ping{ClientID: 7, MsgID: 258}); err != nil {
		t.Fatal(err)
	}
	// The ping was served before the call that follows it.
	value, found, err := c.Get(ctx, "k")
	if err != nil || value != "v" || !found {
		t.Errorf(`Get("k") = %q, %v, %v; want "v", true, nil`, value, found, err)
	}
	srv.mu.Lock()
	if len(srv.pings) != 1 || srv.pings[0] != (pingpong.Ping{ClientID: 7, MsgID: 258}) {
		t.Errorf("server got %v", srv.pings)
	}
	srv.mu.Unlock()
	value, found, err = c.Get(ctx, "other")
	if err != nil || value != "" || found {
		t.Errorf(`Get("other") = %q, %v, %v; want "", false, nil`, value, found, err)
	}
	if sum, err := c.Add(ctx, 40, -2); err != nil || sum != 38 {
		t.Errorf("Add(40, -2) = %d, %v", sum, err)
	}

	// Encoding errors surface before anything is sent.
	if _, _, err := c.Get(ctx, strings.Repeat("x", pingpong.MaxGetKeyLen+1)); !errors.Is(err, wire.ErrBound) {
		t.Errorf("Get(too long) = %v, want ErrBound", err)
	}
	// A handler's error comes back as a RemoteError with its code.
	err = c.Fail(ctx, 42)
	var re *chanos.RemoteError
	if !errors.As(err, &re) || re.Code != 42 || re.Msg != "pingpong.fail" || !strings.Contains(re.Detail, "code 42") {
		t.Errorf("Fail(42) = %v, want a RemoteError with code 42", err)
	}
	// An unimplemented message fails with ErrUnsupported.
	if _, err := pingpong.Dispatch(ctx, srv, c.Client, &pingpong.Text{Seq: 1, Body: "hi"}); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Dispatch(text) = %v, want ErrUnsupported", err)
	}
	// Replies and nil are not for a server.
	if _, err := pingpong.Dispatch(ctx, srv, c.Client, &pingpong.AddReply{}); !errors.Is(err, chanos.ErrProtocol) {
		t.Errorf("Dispatch(reply) = %v, want ErrProtocol", err)
	}
	if _, err := pingpong.Dispatch(ctx, srv, c.Client, nil); !errors.Is(err, chanos.ErrProtocol) {
		t.Errorf("Dispatch(nil) = %v, want ErrProtocol", err)
	}
}

// TestPingExample checks the example frame of docs/wire.md.
func TestPingExample(t *testing.T) {
	const want = "180000000100000000000000000000000700000002010000"
	var buf wire.Buffer
	if err := (&pingpong.Ping{ClientID: 7, MsgID: 258}).Encode(&buf); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprintf("%x", buf.B); got != want {
		t.Errorf("ping frame %s, want %s", got, want)
	}
}
