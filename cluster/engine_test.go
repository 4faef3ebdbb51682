package cluster

import (
	"bytes"
	"context"
	"testing"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/interfaces/pingpong"
	"github.com/chanos/chanos/internal/testkit"
)

type echoServer struct{ pingpong.UnimplementedServer }

func (echoServer) Echo(_ context.Context, v uint64) (uint64, error) { return v + 1, nil }

func (echoServer) Bounce(_ context.Context, p []byte) ([]byte, error) { return bytes.Clone(p), nil }

// TestEngineOverLink: the connection engine serves a generated interface
// over a control link, rpcs and all, as the bind routing between machines
// will.
func TestEngineOverLink(t *testing.T) {
	root := newRoot(t, "lab")
	a, b := newMachine(t, root, "alpha"), newMachine(t, root, "beta")
	ln := b.listen(t)
	d, acc := pair(t, a, b, ln)
	c := pingpong.NewConn(chanos.NewConn(d, pingpong.Interface))
	s := pingpong.NewConn(chanos.NewConn(acc, pingpong.Interface))
	defer c.Close()
	defer s.Close()
	ctx := testkit.Context(t)
	go s.Serve(ctx, echoServer{})
	for i := range uint64(100) {
		got, err := c.Echo(ctx, i)
		if err != nil || got != i+1 {
			t.Fatalf("echo %d: %d, %v", i, got, err)
		}
	}
	payload := bytes.Repeat([]byte("chanos"), 10000)
	got, err := c.Bounce(ctx, payload)
	if err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("bounce of %d bytes: %d bytes back, %v", len(payload), len(got), err)
	}
}
