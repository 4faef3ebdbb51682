package chanos_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/interfaces/pingpong"
	"github.com/chanos/chanos/wire"
)

// codeServer fails echo with the error errs[val], or echoes val when
// there is none.
type codeServer struct {
	pingpong.UnimplementedServer
	errs map[uint64]error
}

func (s codeServer) Echo(ctx context.Context, val uint64) (uint64, error) {
	if err, ok := s.errs[val]; ok {
		return 0, err
	}
	return val, nil
}

var canonical = []chanos.Code{
	chanos.CodeCanceled, chanos.CodeUnknown, chanos.CodeInvalidArgument,
	chanos.CodeDeadlineExceeded, chanos.CodeNotFound, chanos.CodeAlreadyExists,
	chanos.CodePermissionDenied, chanos.CodeResourceExhausted,
	chanos.CodeFailedPrecondition, chanos.CodeAborted, chanos.CodeOutOfRange,
	chanos.CodeUnimplemented, chanos.CodeInternal, chanos.CodeUnavailable,
	chanos.CodeDataLoss, chanos.CodeUnauthenticated,
}

// Each canonical code and an application's own come back to the caller
// with their detail, matched by errors.Is and read by CodeOf.
func TestStatusCodes(t *testing.T) {
	codes := append(canonical, chanos.CodeApplication, chanos.CodeApplication+7, 1<<63)
	errs := map[uint64]error{}
	for _, code := range codes {
		errs[uint64(code)] = chanos.Errorf(code, "failed with %d", uint64(code))
	}
	forEach(t, func(t *testing.T, c, s *pingpong.Conn) {
		serve(t, s, codeServer{errs: errs})
		ctx := context.Background()
		for _, code := range codes {
			_, err := c.Echo(ctx, uint64(code))
			var re *chanos.RemoteError
			if !errors.As(err, &re) || re.Msg != "pingpong.echo" || re.Detail != fmt.Sprintf("failed with %d", uint64(code)) {
				t.Fatalf("echo(%d) = %#v, want a RemoteError", uint64(code), err)
			}
			if got := chanos.CodeOf(err); got != code {
				t.Errorf("CodeOf(%v) = %v, want %v", err, got, code)
			}
			if !errors.Is(err, code) {
				t.Errorf("errors.Is(%v, %v) = false", err, code)
			}
			for _, other := range codes {
				if other != code && errors.Is(err, other) {
					t.Errorf("errors.Is(%v, %v) = true", err, other)
				}
			}
			if errors.Is(fmt.Errorf("wrapped: %w", err), code) != true {
				t.Errorf("a wrapped %v does not match", code)
			}
		}
	})
}

// A handler's errors that carry no code of their own are sent with the
// code CodeOf gives them.
func TestStatusCodeOfHandlerErrors(t *testing.T) {
	cases := []struct {
		err    error
		code   chanos.Code
		detail string
	}{
		{context.Canceled, chanos.CodeCanceled, "context canceled"},
		{fmt.Errorf("lookup: %w", context.DeadlineExceeded), chanos.CodeDeadlineExceeded, "lookup: context deadline exceeded"},
		{errors.New("plain"), chanos.CodeUnknown, "plain"},
		{chanos.CodeNotFound, chanos.CodeNotFound, ""},
		{fmt.Errorf("shelf 3: %w", chanos.CodeOutOfRange), chanos.CodeOutOfRange, "shelf 3"},
		{fmt.Errorf("get: %w", chanos.Error(chanos.CodeNotFound, "no key")), chanos.CodeNotFound, "get: no key"},
		{fmt.Errorf("get: %w", chanos.Errorf(1007, "app %d", 7)), 1007, "get: app 7"},
		{chanos.Error(chanos.CodeOK, "zero"), chanos.CodeUnknown, "zero"},
		{errors.ErrUnsupported, chanos.CodeUnimplemented, "unsupported operation"},
		{chanos.ErrClosed, chanos.CodeUnavailable, chanos.ErrClosed.Error()},
	}
	errs := map[uint64]error{}
	for i, c := range cases {
		errs[uint64(i+1)] = c.err
	}
	forEach(t, func(t *testing.T, c, s *pingpong.Conn) {
		serve(t, s, codeServer{errs: errs})
		ctx := context.Background()
		for i, want := range cases {
			_, err := c.Echo(ctx, uint64(i+1))
			var re *chanos.RemoteError
			if !errors.As(err, &re) || chanos.CodeOf(err) != want.code || !errors.Is(err, want.code) || re.Detail != want.detail {
				t.Errorf("handler error %v: caller got %#v, want code %v, detail %q", want.err, err, want.code, want.detail)
			}
		}
		// An rpc the server does not implement.
		_, err := c.Bounce(ctx, []byte("x"))
		if !errors.Is(err, chanos.CodeUnimplemented) {
			t.Errorf("bounce on an UnimplementedServer = %v, want CodeUnimplemented", err)
		}
	})
}

func TestCodeOf(t *testing.T) {
	for _, c := range []struct {
		err  error
		want chanos.Code
	}{
		{nil, chanos.CodeOK},
		{errors.New("x"), chanos.CodeUnknown},
		{context.Canceled, chanos.CodeCanceled},
		{fmt.Errorf("call: %w", context.DeadlineExceeded), chanos.CodeDeadlineExceeded},
		{chanos.ErrPeerDied, chanos.CodeUnavailable},
		{chanos.ErrProtocol, chanos.CodeInternal},
		{fmt.Errorf("x: %w", &wire.Error{Err: wire.ErrBound, Encoding: true}), chanos.CodeInvalidArgument},
		{&wire.Error{Err: wire.ErrBound}, chanos.CodeInternal},
		{chanos.CodeAborted, chanos.CodeAborted},
		{chanos.Errorf(1234, "mine"), 1234},
		// A failure is never CodeOK, whoever looks at it: an interceptor
		// on the serving side sees what the caller will.
		{chanos.Error(chanos.CodeOK, "zero"), chanos.CodeUnknown},
		{&chanos.RemoteError{Detail: "made by hand"}, chanos.CodeUnknown},
	} {
		if got := chanos.CodeOf(c.err); got != c.want {
			t.Errorf("CodeOf(%v) = %v, want %v", c.err, got, c.want)
		}
	}
	for code, want := range map[chanos.Code]string{
		chanos.CodeOK: "ok", chanos.CodeNotFound: "not found", chanos.CodeUnauthenticated: "unauthenticated",
		17: "code 17", chanos.CodeApplication: "code 1000",
	} {
		if code.String() != want || code.Error() != want {
			t.Errorf("Code(%d).String() = %q, want %q", uint64(code), code.String(), want)
		}
	}
	if got := chanos.Errorf(chanos.CodeNotFound, "no key %q", "k").Error(); got != `not found: no key "k"` {
		t.Errorf("Errorf(...).Error() = %q", got)
	}
	if errors.Is(chanos.Error(chanos.CodeOK, "x"), chanos.CodeOK) {
		t.Error("an error matches CodeOK")
	}
	if err := chanos.Error(chanos.CodeOK, "zero"); err.Error() != "unknown: zero" || !errors.Is(err, chanos.CodeUnknown) {
		t.Errorf("Error(CodeOK, ...) = %q, matching CodeUnknown %v; want it as the caller gets it, unknown", err, errors.Is(err, chanos.CodeUnknown))
	}
}

// overServer answers bounce with a reply one byte over its bound.
type overServer struct{ pingpong.UnimplementedServer }

func (overServer) Bounce(ctx context.Context, payload []byte) ([]byte, error) {
	return make([]byte, pingpong.MaxBounceReplyLen+1), nil
}

// A value refused on its way into a frame is the sender's mistake, coded
// invalid_argument, and still matches its wire code; a reply the server
// cannot encode reaches the caller as internal, whichever way the server
// runs the call.
func TestCodeOfRefusedValues(t *testing.T) {
	for _, opts := range [][]chanos.ServeOption{nil, {chanos.Concurrent(4)}} {
		forEach(t, func(t *testing.T, c, s *pingpong.Conn) {
			errc := make(chan error, 1)
			go func() { errc <- s.Serve(context.Background(), overServer{}, opts...) }()
			ctx := context.Background()
			_, err := c.Bounce(ctx, make([]byte, pingpong.MaxBouncePayloadLen+1))
			if chanos.CodeOf(err) != chanos.CodeInvalidArgument || !errors.Is(err, wire.ErrBound) {
				t.Errorf("bounce over its bound: %v, code %v; want invalid argument and wire.ErrBound", err, chanos.CodeOf(err))
			}
			err = c.Send(ctx, &pingpong.Data{Payload: make([]byte, pingpong.MaxDataPayloadLen+1)})
			if chanos.CodeOf(err) != chanos.CodeInvalidArgument || !errors.Is(err, wire.ErrBound) {
				t.Errorf("data over its bound: %v, code %v; want invalid argument and wire.ErrBound", err, chanos.CodeOf(err))
			}
			_, err = c.Echo(chanos.WithMetadata(ctx, chanos.Metadata{"bad key": "v"}), 1)
			if chanos.CodeOf(err) != chanos.CodeInvalidArgument || !errors.Is(err, wire.ErrHeader) {
				t.Errorf("echo with a bad metadata key: %v, code %v; want invalid argument and wire.ErrHeader", err, chanos.CodeOf(err))
			}
			_, err = c.Bounce(ctx, []byte("x"))
			var re *chanos.RemoteError
			if !errors.As(err, &re) || chanos.CodeOf(err) != chanos.CodeInternal || !strings.Contains(re.Detail, "exceeds bound") {
				t.Errorf("a reply over its bound: %#v, want an internal error reply that says why", err)
			}
			s.Close()
			<-errc
		})
	}
}
