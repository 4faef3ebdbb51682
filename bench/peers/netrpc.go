package peers

import (
	"context"
	"fmt"
	"net"
	"net/rpc"
	"os"
	"path/filepath"
	"sync/atomic"
)

// netrpcWindow is how many one-way calls the stream workload keeps in
// flight over net/rpc, which has no one-way messages.
const netrpcWindow = 64

// netrpcPeer is Go's net/rpc (gob encoding) over a Unix domain socket. A
// round trip and a call are both a Call of Peer.Echo; the stream workload
// pipelines asynchronous calls (Client.Go) of Peer.Sink, netrpcWindow at a
// time, and Peer.Ack ends a batch.
type netrpcPeer struct{}

func (netrpcPeer) Transport() string { return "netrpc-uds" }

func (netrpcPeer) Note(suite string) string {
	if suite == SuiteStream {
		return fmt.Sprintf("pipelined calls, %d in flight", netrpcWindow)
	}
	return "Client.Call"
}

// rpcService is the net/rpc service; each connection has its own, so that
// its counts are that connection's.
type rpcService struct {
	msgs, bytes atomic.Uint64
}

// Echo returns its argument.
func (s *rpcService) Echo(arg []byte, reply *[]byte) error {
	*reply = arg
	return nil
}

// Sink counts its argument.
func (s *rpcService) Sink(arg []byte, reply *bool) error {
	s.msgs.Add(1)
	s.bytes.Add(uint64(len(arg)))
	*reply = true
	return nil
}

// Ack returns the counts since the previous Ack. The client calls it only
// when no Sink call is in flight (net/rpc runs calls concurrently).
func (s *rpcService) Ack(_ int, reply *Ack) error {
	*reply = Ack{Msgs: s.msgs.Swap(0), Bytes: s.bytes.Swap(0)}
	return nil
}

func serveNetRPC(addr string, _ int) (string, func() error, error) {
	l, err := net.Listen("unix", addr)
	if err != nil {
		return "", nil, err
	}
	return addr, func() error {
		return acceptLoop(l, func(c net.Conn) error {
			s := rpc.NewServer()
			if err := s.RegisterName("Peer", new(rpcService)); err != nil {
				return err
			}
			s.ServeConn(c)
			return nil
		})
	}, nil
}

func (netrpcPeer) Start(ctx context.Context, env Env, n int) (Server, error) {
	dir, err := os.MkdirTemp("", "chanos-peers-")
	if err != nil {
		return nil, err
	}
	ps, err := startProc(ctx, env, "netrpc-uds", filepath.Join(dir, "netrpc.sock"), n, nil, dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return &netrpcServer{ps}, nil
}

type netrpcServer struct{ *procServer }

func (s *netrpcServer) Dial(ctx context.Context, _ int) (Client, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", s.addr)
	if err != nil {
		return nil, err
	}
	return &netrpcClient{c: rpc.NewClient(c), done: make(chan *rpc.Call, netrpcWindow)}, nil
}

type netrpcClient struct {
	c        *rpc.Client
	payload  []byte
	reply    []byte
	done     chan *rpc.Call
	inFlight int
}

func (c *netrpcClient) SetPayload(p []byte) error {
	c.payload = append([]byte(nil), p...)
	return nil
}

func (c *netrpcClient) RoundTrip() error {
	if err := c.c.Call("Peer.Echo", c.payload, &c.reply); err != nil {
		return err
	}
	return checkEcho(opEcho, opEcho, c.reply, c.payload)
}

func (c *netrpcClient) Call() error { return c.RoundTrip() }

func (c *netrpcClient) Send() error {
	if c.inFlight == netrpcWindow {
		if err := c.wait(); err != nil {
			return err
		}
	}
	c.c.Go("Peer.Sink", c.payload, new(bool), c.done)
	c.inFlight++
	return nil
}

func (c *netrpcClient) wait() error {
	call := <-c.done
	c.inFlight--
	return call.Error
}

func (c *netrpcClient) Ack() (Ack, error) {
	var first error
	for c.inFlight > 0 {
		if err := c.wait(); err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		return Ack{}, first
	}
	var a Ack
	err := c.c.Call("Peer.Ack", 0, &a)
	return a, err
}

func (c *netrpcClient) Close() error { return c.c.Close() }
