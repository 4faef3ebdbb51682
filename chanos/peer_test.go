package chanos_test

import (
	"context"
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
