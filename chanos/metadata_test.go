package chanos_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/chanos/genrt"
	"github.com/chanos/chanos/interfaces/pingpong"
	"github.com/chanos/chanos/internal/testkit"
	"github.com/chanos/chanos/wire"
)

// mdServer records the metadata each call's handler saw, by call value.
type mdServer struct {
	pingpong.UnimplementedServer
	mu   sync.Mutex
	seen map[uint64]chanos.Metadata
	out  map[uint64]bool // whether the handler's context had outgoing metadata
}

func (s *mdServer) Echo(ctx context.Context, v uint64) (uint64, error) {
	if v%2 == 1 {
		time.Sleep(2 * chanos.HandOffAfter) // handed off: another reader reads on
	}
	md, _ := chanos.MetadataFrom(ctx)
	_, out := chanos.OutgoingMetadata(ctx)
	s.mu.Lock()
	s.seen[v], s.out[v] = md, out
	s.mu.Unlock()
	return v, nil
}

// ran reports whether the handler of call v ran.
func (s *mdServer) ran(v uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.seen[v]
	return ok
}

// saw returns what the handler of call v saw.
func (s *mdServer) saw(v uint64) (chanos.Metadata, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[v], s.out[v]
}

func (s *mdServer) Bounce(ctx context.Context, payload []byte) ([]byte, error) {
	md, _ := chanos.MetadataFrom(ctx)
	return []byte(md["echo"]), nil
}

// Metadata travels with calls, fixed-size and not, inline and handed off,
// and reaches interceptors and handlers; calls without metadata bring
// none, and a handler does not send its call's metadata on.
func TestMetadata(t *testing.T) {
	for _, concurrent := range []bool{false, true} {
		t.Run(fmt.Sprintf("concurrent=%v", concurrent), func(t *testing.T) { metadataCase(t, concurrent) })
	}
}

func metadataCase(t *testing.T, concurrent bool) {
	{
		forEach(t, func(t *testing.T, c, s *pingpong.Conn) {
			srv := &mdServer{seen: map[uint64]chanos.Metadata{}, out: map[uint64]bool{}}
			var intercepted []string
			var mu sync.Mutex
			opts := []chanos.ServeOption{chanos.WithInterceptor(func(ctx context.Context, in *chanos.Incoming, next chanos.Handler) (wire.Message, error) {
				md, _ := chanos.MetadataFrom(ctx)
				mu.Lock()
				intercepted = append(intercepted, md["trace-id"])
				mu.Unlock()
				if md["deny"] == "yes" {
					return nil, chanos.Errorf(chanos.CodePermissionDenied, "denied by metadata")
				}
				return next(ctx, in)
			})}
			if concurrent {
				opts = append(opts, chanos.Concurrent(4))
			}
			go s.Serve(context.Background(), srv, opts...)
			ctx := testkit.Context(t)
			for v := uint64(0); v < 4; v++ {
				md := chanos.Metadata{"trace-id": strings.Repeat("t", int(v)+1), "tenant": "acme"}
				if got, err := c.Echo(chanos.WithMetadata(ctx, md), v); err != nil || got != v {
					t.Fatalf("echo %d with metadata = %d, %v", v, got, err)
				}
				if seen, out := srv.saw(v); !maps.Equal(seen, md) || out {
					t.Fatalf("call %d: the handler saw %v (outgoing %v), want %v and no outgoing", v, seen, out, md)
				}
			}
			if _, err := c.Echo(ctx, 10); err != nil {
				t.Fatalf("a call without metadata: %v", err)
			}
			if seen, _ := srv.saw(10); seen != nil {
				t.Fatalf("a call without metadata: the handler saw %v", seen)
			}
			got, err := c.Bounce(chanos.WithMetadata(ctx, chanos.Metadata{"echo": "hello"}), make([]byte, 3000))
			if err != nil || string(got) != "hello" {
				t.Fatalf("bounce with metadata = %q, %v", got, err)
			}
			_, err = c.Echo(chanos.WithMetadata(ctx, chanos.Metadata{"deny": "yes"}), 20)
			if chanos.CodeOf(err) != chanos.CodePermissionDenied {
				t.Fatalf("a call an interceptor denies by its metadata = %v", err)
			}
			mu.Lock()
			if want := "t tt ttt tttt   "; strings.Join(intercepted, " ") != want {
				t.Errorf("interceptor saw trace ids %q, want %q", strings.Join(intercepted, " "), want)
			}
			mu.Unlock()
		})
	}
}

// AppendMetadata adds to the metadata a call carries, where WithMetadata
// replaces it: a key of both takes the added value, the others stay, keys
// are lowered, and neither map given is changed.
func TestAppendMetadata(t *testing.T) {
	forEach(t, func(t *testing.T, c, s *pingpong.Conn) {
		srv := &mdServer{seen: map[uint64]chanos.Metadata{}, out: map[uint64]bool{}}
		go s.Serve(context.Background(), srv)
		ctx := testkit.Context(t)
		caller := chanos.Metadata{"tenant": "acme", "trace-id": "old"}
		added := chanos.Metadata{"Trace-ID": "new", "span": "1"}
		for v, tc := range []struct {
			ctx  context.Context
			want chanos.Metadata
		}{
			{chanos.AppendMetadata(chanos.WithMetadata(ctx, caller), added), chanos.Metadata{"tenant": "acme", "trace-id": "new", "span": "1"}},
			{chanos.AppendMetadata(ctx, added), chanos.Metadata{"trace-id": "new", "span": "1"}},
			{chanos.AppendMetadata(chanos.WithMetadata(ctx, caller), nil), caller},
		} {
			if got, err := c.Echo(tc.ctx, uint64(v)); err != nil || got != uint64(v) {
				t.Fatalf("echo %d = %d, %v", v, got, err)
			}
			if seen, _ := srv.saw(uint64(v)); !maps.Equal(seen, tc.want) {
				t.Errorf("call %d: the handler saw %v, want %v", v, seen, tc.want)
			}
		}
		if want := (chanos.Metadata{"tenant": "acme", "trace-id": "old"}); !maps.Equal(caller, want) {
			t.Errorf("the caller's metadata became %v", caller)
		}
		if want := (chanos.Metadata{"Trace-ID": "new", "span": "1"}); !maps.Equal(added, want) {
			t.Errorf("the added metadata became %v", added)
		}
	})
}

// Metadata that breaks a bound fails the call before it is sent, and the
// connection goes on.
func TestMetadataBounds(t *testing.T) {
	forEach(t, func(t *testing.T, c, s *pingpong.Conn) {
		srv := &mdServer{seen: map[uint64]chanos.Metadata{}, out: map[uint64]bool{}}
		go s.Serve(context.Background(), srv)
		ctx := testkit.Context(t)
		many := chanos.Metadata{}
		for i := range wire.MaxMetadataKeys + 1 {
			many[strings.Repeat("k", i+1)] = "v"
		}
		// A key with upper-case letters is lowered, as gRPC does.
		upper := chanos.Metadata{"Trace-ID": "x"}
		if _, err := c.Echo(chanos.WithMetadata(ctx, upper), 6); err != nil {
			t.Fatalf("echo with an upper-case key: %v", err)
		}
		if seen, _ := srv.saw(6); !maps.Equal(seen, chanos.Metadata{"trace-id": "x"}) || upper["Trace-ID"] != "x" || len(upper) != 1 {
			t.Fatalf("an upper-case key: the handler saw %v, the caller's map is %v; want trace-id, and the map untouched", seen, upper)
		}
		for name, md := range map[string]chanos.Metadata{
			"long value": {"k": strings.Repeat("x", wire.MaxMetadataValueLen+1)},
			"bad key":    {"trace id": "x"},
			"empty key":  {"": "x"},
			"NUL":        {"k": "a\x00b"},
			"many keys":  many,
		} {
			if _, err := c.Echo(chanos.WithMetadata(ctx, md), 2); !errors.Is(err, wire.ErrMalformed) {
				t.Errorf("%s: echo = %v, want a wire.ErrMalformed error", name, err)
			}
			if _, err := c.Bounce(chanos.WithMetadata(ctx, md), []byte{1}); !errors.Is(err, wire.ErrMalformed) {
				t.Errorf("%s: bounce = %v, want a wire.ErrMalformed error", name, err)
			}
		}
		if v, err := c.Echo(ctx, 4); err != nil || v != 4 {
			t.Fatalf("echo after refused metadata = %d, %v", v, err)
		}
	})
}

// A call whose metadata trailer is malformed is the peer's protocol
// violation: the server ends the connection, and nothing reaches the
// handler.
func TestMetadataMalformed(t *testing.T) {
	for name, mangle := range map[string]func(f []byte) []byte{
		"trailer longer than the frame": func(f []byte) []byte { f[len(f)-2], f[len(f)-1] = 0xff, 0x00; return f },
		"key cut short":                 func(f []byte) []byte { f[wire.HeaderSize+8] = 200; return f },
		"upper-case key":                func(f []byte) []byte { f[wire.HeaderSize+9] = 'K'; return f },
	} {
		t.Run(name, func(t *testing.T) {
			x, y, err := chanos.UMPPair(pingpong.Interface)
			if err != nil {
				t.Fatal(err)
			}
			defer x.Close()
			defer y.Close()
			srv := &mdServer{seen: map[uint64]chanos.Metadata{}, out: map[uint64]bool{}}
			ctx := testkit.Context(t)
			served := make(chan error, 1)
			go func() { served <- pingpong.NewConn(y).Serve(ctx, srv) }()
			var b wire.Buffer
			if err := (&pingpong.EchoCall{Val: 7}).Encode(&b); err != nil {
				t.Fatal(err)
			}
			frame, err := wire.AppendMetadata(b.B, chanos.Metadata{"key": "value"})
			if err != nil {
				t.Fatal(err)
			}
			wire.SetCallID(frame, 1)
			if err := genrt.Engine(x).SendFrame(ctx, mangle(frame)); err != nil {
				t.Fatal(err)
			}
			if err := testkit.Await(t, "the server's end", served); !errors.Is(err, chanos.ErrProtocol) {
				t.Fatalf("Serve = %v, want ErrProtocol", err)
			}
			if srv.ran(7) {
				t.Fatal("the handler ran")
			}
		})
	}
}
