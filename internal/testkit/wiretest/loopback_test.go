package wiretest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/internal/testkit/wiretest/pingpong"
	"github.com/chanos/chanos/wire"
)

// loopback is an in-memory chanos.Transport: every Send and Call encodes a
// real frame, which the "server side" decodes with pingpong.Decode and hands
// to pingpong.Dispatch; replies and error replies travel back as frames too.
type loopback struct {
	srv    pingpong.Server
	mu     sync.Mutex
	nextID uint32
	sent   []pingpong.Msg // messages the server side received
}

func (l *loopback) Send(ctx context.Context, m wire.Message) error {
	var buf wire.Buffer
	if err := m.Encode(&buf); err != nil {
		return err
	}
	got, err := pingpong.Decode(buf.B, buf.Caps)
	if err != nil {
		return fmt.Errorf("server side: %w", err)
	}
	l.mu.Lock()
	l.sent = append(l.sent, got)
	l.mu.Unlock()
	_, err = pingpong.Dispatch(ctx, l.srv, pingpong.NewClient(l), got)
	return err
}

func (l *loopback) Call(ctx context.Context, call, reply wire.Message) error {
	if call.MsgKind() != wire.KindCall || reply.MsgKind() != wire.KindReply || call.MsgNumber() != reply.MsgNumber() {
		return fmt.Errorf("Call(%s %s, %s %s): %w", call.MsgName(), call.MsgKind(), reply.MsgName(), reply.MsgKind(), chanos.ErrProtocol)
	}
	l.mu.Lock()
	l.nextID++
	id := l.nextID
	l.mu.Unlock()

	// Client side: encode the call and patch in its id and timeout.
	var buf wire.Buffer
	if err := call.Encode(&buf); err != nil {
		return err
	}
	wire.SetCallID(buf.B, id)
	if dl, ok := ctx.Deadline(); ok {
		wire.SetTimeout(buf.B, wire.TimeoutUS(time.Until(dl)))
	}

	// Server side: decode, dispatch, encode the reply or the error reply.
	h, err := wire.ParseHeader(buf.B)
	if err != nil {
		return err
	}
	m, err := pingpong.Decode(buf.B, buf.Caps)
	if err != nil {
		return fmt.Errorf("server side: %w", err)
	}
	out, herr := pingpong.Dispatch(ctx, l.srv, pingpong.NewClient(l), m)
	var rbuf wire.Buffer
	if herr != nil {
		st := wire.Status{Code: 1, Detail: herr.Error()}
		var code interface{ Errval() wire.Errval }
		if errors.As(herr, &code) {
			st.Code = code.Errval()
		}
		if err := wire.AppendErrorReply(&rbuf, h.Msg, st); err != nil {
			return err
		}
	} else if err := out.Encode(&rbuf); err != nil {
		return fmt.Errorf("server side: %w", err)
	}
	wire.SetCallID(rbuf.B, h.CallID)

	// Client side again: match the id, then decode.
	rh, err := wire.ParseHeader(rbuf.B)
	if err != nil {
		return err
	}
	if rh.CallID != id {
		return fmt.Errorf("reply to call %d, want %d: %w", rh.CallID, id, chanos.ErrProtocol)
	}
	if rh.Flags&wire.FlagError != 0 {
		_, st, err := wire.ParseErrorReply(rbuf.B)
		if err != nil {
			return err
		}
		return &chanos.RemoteError{Msg: call.MsgName(), Code: st.Code, Detail: st.Detail}
	}
	return reply.Decode(rbuf.B, rbuf.Caps)
}

// server implements pingpong.Server for the round-trip test.
type server struct {
	pingpong.UnimplementedServer
	pings []pingpong.Ping
}

func (s *server) Ping(_ context.Context, _ *pingpong.Client, m pingpong.Ping) error {
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

type codedError struct{ code wire.Errval }

func (e codedError) Error() string       { return fmt.Sprintf("failed with code %d", e.code) }
func (e codedError) Errval() wire.Errval { return e.code }

func (s *server) Fail(_ context.Context, code uint64) error { return codedError{wire.Errval(code)} }

func TestClientServer(t *testing.T) {
	ctx := context.Background()
	srv := &server{}
	l := &loopback{srv: srv}
	c := pingpong.NewClient(l)

	if err := c.Send(ctx, &pingpong.Ping{ClientID: 7, MsgID: 258}); err != nil {
		t.Fatal(err)
	}
	if len(srv.pings) != 1 || srv.pings[0] != (pingpong.Ping{ClientID: 7, MsgID: 258}) {
		t.Errorf("server got %v", srv.pings)
	}

	value, found, err := c.Get(ctx, "k")
	if err != nil || value != "v" || !found {
		t.Errorf(`Get("k") = %q, %v, %v; want "v", true, nil`, value, found, err)
	}
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
	if err := c.Send(ctx, &pingpong.Text{Seq: 1, Body: "hi"}); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Send(text) = %v, want ErrUnsupported", err)
	}
	// Replies and nil are not for a server.
	if _, err := pingpong.Dispatch(ctx, srv, c, &pingpong.AddReply{}); !errors.Is(err, chanos.ErrProtocol) {
		t.Errorf("Dispatch(reply) = %v, want ErrProtocol", err)
	}
	if _, err := pingpong.Dispatch(ctx, srv, c, nil); !errors.Is(err, chanos.ErrProtocol) {
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
