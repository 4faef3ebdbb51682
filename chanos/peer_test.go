package chanos_test

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/interfaces/pingpong"
	"github.com/chanos/chanos/internal/testkit"
	"github.com/chanos/chanos/internal/testkit/testmonitor"
)

// peerServer's echo reports the peer its context names.
type peerServer struct {
	pingpong.UnimplementedServer
	seen chan chanos.Peer
}

func (s *peerServer) Echo(ctx context.Context, v uint64) (uint64, error) {
	p, ok := chanos.PeerFrom(ctx)
	if !ok {
		return 0, os.ErrNotExist
	}
	s.seen <- p
	return v, nil
}

// A handler sees who calls: the client's domain id, program, pid, uid and
// machine, over ump from another domain and locally from its own.
func TestPeerFrom(t *testing.T) {
	dir := testmonitor.Start(t)
	ctx := testkit.Context(t)
	srvD, err := chanos.Join(ctx, chanos.WithDir(dir), chanos.WithProgram("peer-server"))
	if err != nil {
		t.Fatal(err)
	}
	defer srvD.Close()
	cliD, err := chanos.Join(ctx, chanos.WithDir(dir), chanos.WithProgram("peer-client"))
	if err != nil {
		t.Fatal(err)
	}
	defer cliD.Close()
	l, err := pingpong.Export(ctx, srvD, "peers")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	srv := &peerServer{seen: make(chan chanos.Peer, 1)}
	go pingpong.Serve(ctx, l, srv)
	if _, ok := chanos.PeerFrom(ctx); ok {
		t.Fatal("PeerFrom found a peer in a context that no Serve gave")
	}
	for _, tc := range []struct {
		d       *chanos.Domain
		program string
	}{{cliD, "peer-client"}, {srvD, "peer-server"}} {
		c, err := pingpong.Connect(ctx, tc.d, "peers")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Echo(ctx, 1); err != nil {
			t.Fatal(err)
		}
		want := chanos.Peer{Domain: tc.d.ID(), Program: tc.program, PID: int32(os.Getpid()), UID: uint32(os.Getuid()), Machine: tc.d.Machine()}
		if got := <-srv.seen; got != want {
			t.Errorf("over %s: PeerFrom = %+v, want %+v", c.Raw().Interconnect(), got, want)
		}
		c.Close()
	}
}

// A listener reports each client's coming and going: a close, and a
// kill -9, with the client's identity.
func TestOnConn(t *testing.T) {
	dir := testmonitor.Start(t)
	ctx := testkit.Context(t)
	d, err := chanos.Join(ctx, chanos.WithDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	events := make(chan chanos.ConnEvent, 8)
	l, err := pingpong.Export(ctx, d, "watched", chanos.OnConn(func(ev chanos.ConnEvent) { events <- ev }))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go pingpong.Serve(ctx, l, waitServer{})

	cliD, err := chanos.Join(ctx, chanos.WithDir(dir), chanos.WithProgram("watched-client"))
	if err != nil {
		t.Fatal(err)
	}
	defer cliD.Close()
	c, err := pingpong.Connect(ctx, cliD, "watched")
	if err != nil {
		t.Fatal(err)
	}
	ev := testkit.Await(t, "the connect event", events)
	if !ev.Connected || ev.Peer.Domain != cliD.ID() || ev.Peer.Program != "watched-client" || ev.Conn == nil {
		t.Fatalf("event %+v, want the client's connect", ev)
	}
	if v, err := c.Echo(ctx, 1); err != nil || v != 2 {
		t.Fatalf("echo = %d, %v", v, err)
	}
	c.Close()
	ev = testkit.Await(t, "the close event", events)
	if ev.Connected || !errors.Is(ev.Err, chanos.ErrClosed) || ev.Peer.Domain != cliD.ID() {
		t.Fatalf("event %+v, want the client's close", ev)
	}

	cli := child(t, dir, "client", "watched", "calling")
	ev = testkit.Await(t, "the second connect event", events)
	if !ev.Connected || int(ev.Peer.PID) != cli.Cmd.Process.Pid {
		t.Fatalf("event %+v, want the child's connect (pid %d)", ev, cli.Cmd.Process.Pid)
	}
	cli.Kill()
	ev = testkit.Await(t, "the kill event", events)
	if ev.Connected || !errors.Is(ev.Err, chanos.ErrPeerDied) || int(ev.Peer.PID) != cli.Cmd.Process.Pid {
		t.Fatalf("event %+v, want the child's death", ev)
	}
}

// waitServer answers echo as childServer does, but ends blockForever
// with its context.
type waitServer struct{ pingpong.UnimplementedServer }

func (waitServer) Echo(ctx context.Context, v uint64) (uint64, error) {
	if v == blockForever {
		<-ctx.Done()
		return 0, ctx.Err()
	}
	return v + 1, nil
}
