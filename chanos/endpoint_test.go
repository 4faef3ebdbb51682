package chanos_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/interfaces/kv"
	"github.com/chanos/chanos/interfaces/pingpong"
	"github.com/chanos/chanos/internal/testkit"
	files "github.com/chanos/chanos/internal/testkit/files"
)

// handServer opens the endpoints it is handed, of the interface named,
// and serves pingpong on those of pingpong; opened reports each.
type handServer struct {
	files.UnimplementedServer
	opened chan error
}

func (h handServer) Hand(ctx context.Context, from *files.Client, m files.Hand) error {
	iface := pingpong.Interface
	if m.Iface == "kv" {
		iface = kv.Interface
	}
	c, err := chanos.OpenEndpoint(m.Endpoint, iface)
	h.opened <- err
	if err != nil {
		return nil // refused: the maker sees its peer go
	}
	p := pingpong.NewConn(c)
	go func() {
		defer p.Close()
		p.Serve(context.Background(), &server{})
	}()
	return nil
}

// A fresh connection's endpoint travels in a message: the receiver opens
// it and serves on it, with no monitor; one of another interface is
// refused, and its maker learns that its peer went.
func TestEndpointInMessages(t *testing.T) {
	for name, mk := range map[string]func() (*chanos.Conn, *chanos.Conn, error){
		"local": func() (*chanos.Conn, *chanos.Conn, error) {
			a, b := chanos.LocalPair(files.Interface)
			return a, b, nil
		},
		"ump": func() (*chanos.Conn, *chanos.Conn, error) { return chanos.UMPPair(files.Interface) },
	} {
		t.Run(name, func(t *testing.T) {
			before := testkit.OpenFDs(t)
			a, b, err := mk()
			if err != nil {
				t.Fatal(err)
			}
			c, s := files.NewConn(a), files.NewConn(b)
			h := handServer{opened: make(chan error, 2)}
			go s.Serve(context.Background(), h)
			ctx := testkit.Context(t)

			mine, ep, err := chanos.NewEndpoint(pingpong.Interface)
			if err != nil {
				t.Fatal(err)
			}
			pc := pingpong.NewConn(mine)
			// Sent before the other side opens: it waits in the ring.
			if err := pc.Send(ctx, &pingpong.Ping{ClientID: 1, MsgID: 2}); err != nil {
				t.Fatal(err)
			}
			if err := c.Send(ctx, &files.Hand{Endpoint: ep, Iface: "pingpong"}); err != nil {
				t.Fatal(err)
			}
			if err := testkit.Await(t, "the endpoint opened", h.opened); err != nil {
				t.Fatalf("OpenEndpoint: %v", err)
			}
			if m, err := pc.Receive(ctx); err != nil || m.(*pingpong.Pong).MsgID != 2 {
				t.Fatalf("the pong to the ping sent before the endpoint opened: %v, %v", m, err)
			}
			if v, err := pc.Echo(ctx, 41); err != nil || v != 42 {
				t.Fatalf("echo over the handed connection = %d, %v", v, err)
			}
			pc.Close()

			wrong, ep2, err := chanos.NewEndpoint(pingpong.Interface)
			if err != nil {
				t.Fatal(err)
			}
			defer wrong.Close()
			if err := c.Send(ctx, &files.Hand{Endpoint: ep2, Iface: "kv"}); err != nil {
				t.Fatal(err)
			}
			if err := testkit.Await(t, "the endpoint refused", h.opened); !errors.Is(err, chanos.ErrEndpoint) {
				t.Fatalf("OpenEndpoint as kv = %v, want ErrEndpoint", err)
			}
			ectx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if _, err := pingpong.NewConn(wrong).Echo(ectx, 1); !errors.Is(err, chanos.ErrPeerDied) && !errors.Is(err, chanos.ErrClosed) {
				t.Fatalf("echo on a connection whose endpoint was refused = %v", err)
			}
			wrong.Close()
			c.Close()
			s.Close()
			waitFDs(t, before)
		})
	}
}

// waitFDs waits for this process's descriptors to come back to before:
// closing goroutines may still be at work.
func waitFDs(t *testing.T, before int) {
	t.Helper()
	n := testkit.OpenFDs(t)
	for deadline := time.Now().Add(5 * time.Second); n > before && time.Now().Before(deadline); n = testkit.OpenFDs(t) {
		time.Sleep(10 * time.Millisecond)
	}
	if n > before {
		t.Errorf("descriptors leaked: %d before, %d after", before, n)
	}
}
