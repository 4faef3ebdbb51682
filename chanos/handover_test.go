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
	"github.com/chanos/chanos/internal/testkit/testmonitor"
)

// A Listener handed over is served by its adopter: a bind made while it
// is in transit waits for the adoption, the name is the adopter's (it
// outlives the domain that handed it over), and the grant works once,
// for the right interface only.
func TestHandOver(t *testing.T) {
	dir := testmonitor.Start(t)
	ctx := testkit.Context(t)
	join := func(program string) *chanos.Domain {
		d, err := chanos.Join(ctx, chanos.WithDir(dir), chanos.WithProgram(program))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	}
	first, second, client := join("first"), join("second"), join("client")
	l, err := chanos.Export(ctx, first, "gate", pingpong.Interface)
	if err != nil {
		t.Fatal(err)
	}
	grant, err := l.HandOver(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Accept(ctx); !errors.Is(err, chanos.ErrHandedOver) {
		t.Errorf("Accept after HandOver: %v, want ErrHandedOver", err)
	}
	if grant.Token == l.Ref().Token {
		t.Error("the grant's token is the export's: it would let its holder bind")
	}
	// A bind in transit waits for the adopter.
	bound := make(chan error, 1)
	go func() {
		c, err := pingpong.Connect(ctx, client, "gate")
		if err == nil {
			_, err = c.Echo(ctx, 7)
			c.Close()
		}
		bound <- err
	}()
	time.Sleep(50 * time.Millisecond)
	if _, err := chanos.Adopt(ctx, second, grant, kv.Interface); !errors.Is(err, chanos.ErrInterfaceMismatch) {
		t.Errorf("adopt as another interface: %v, want ErrInterfaceMismatch", err)
	}
	forged := grant
	forged.Token[0] ^= 1
	if _, err := chanos.Adopt(ctx, second, forged, pingpong.Interface); !errors.Is(err, chanos.ErrDenied) {
		t.Errorf("adopt with a forged grant: %v, want ErrDenied", err)
	}
	adopted, err := chanos.Adopt(ctx, second, grant, pingpong.Interface)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := chanos.Adopt(ctx, second, grant, pingpong.Interface); !errors.Is(err, chanos.ErrNotFound) {
		t.Errorf("a second adopt with the same grant: %v, want ErrNotFound", err)
	}
	go adopted.Serve(ctx, func(ctx context.Context, c *chanos.Conn) error {
		return pingpong.NewConn(c).Serve(ctx, &server{})
	})
	if err := testkit.Await(t, "the bind made in transit", bound); err != nil {
		t.Fatalf("bind made in transit: %v", err)
	}
	// The name is the adopter's now: it outlives the first domain.
	first.Close()
	c, err := pingpong.Connect(ctx, client, "gate")
	if err != nil {
		t.Fatalf("connect after the first domain left: %v", err)
	}
	if v, err := c.Echo(ctx, 9); err != nil || v != 10 { // server answers v+1
		t.Fatalf("echo through the adopted export: %d, %v", v, err)
	}
	c.Close()
	if adopted.Name() != "gate" || adopted.Ref() != l.Ref() {
		t.Errorf("adopted %q %v, want gate %v", adopted.Name(), adopted.Ref(), l.Ref())
	}
}
