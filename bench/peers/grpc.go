package peers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// grpcPeer is gRPC-Go over a Unix domain socket, with insecure
// credentials, default options, and google.protobuf.BytesValue messages in
// the default protobuf codec. The service is declared below the way
// protoc-gen-go-grpc would generate it:
//
//	service Echo {
//	  rpc Unary(BytesValue) returns (BytesValue);                // rpc
//	  rpc Echo(stream BytesValue) returns (stream BytesValue);   // pingpong: echo each message
//	  rpc Sink(stream BytesValue) returns (stream BytesValue);   // stream: an empty message asks for an ack
//	}
type grpcPeer struct{}

func (grpcPeer) Transport() string { return "grpc-uds" }

func (grpcPeer) Note(suite string) string {
	switch suite {
	case SuitePingPong, SuiteClients:
		return "bidi stream, message echo"
	case SuiteStream:
		return "bidi stream"
	case SuiteRPC:
		return "unary RPC"
	}
	return ""
}

const grpcService = "chanos.bench.peers.Echo"

var grpcDesc = grpc.ServiceDesc{
	ServiceName: grpcService,
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "Unary", Handler: grpcUnary},
	},
	Streams: []grpc.StreamDesc{
		{StreamName: "Echo", Handler: grpcEcho, ServerStreams: true, ClientStreams: true},
		{StreamName: "Sink", Handler: grpcSink, ServerStreams: true, ClientStreams: true},
	},
}

// errNotUnix is what the server says to a client that did not come over a
// Unix socket; it makes a mislabelled measurement fail.
var errNotUnix = errors.New("grpc-uds: peer is not on a Unix socket")

func overUnix(ctx context.Context) bool {
	p, ok := peer.FromContext(ctx)
	return ok && p.Addr != nil && p.Addr.Network() == "unix"
}

func grpcUnary(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
	if !overUnix(ctx) {
		return nil, errNotUnix
	}
	in := new(wrapperspb.BytesValue)
	if err := dec(in); err != nil {
		return nil, err
	}
	return in, nil
}

func grpcEcho(_ any, st grpc.ServerStream) error {
	if !overUnix(st.Context()) {
		return errNotUnix
	}
	m := new(wrapperspb.BytesValue)
	for {
		if err := st.RecvMsg(m); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
		if err := st.SendMsg(m); err != nil {
			return err
		}
	}
}

func grpcSink(_ any, st grpc.ServerStream) error {
	if !overUnix(st.Context()) {
		return errNotUnix
	}
	return sinkLoop(st)
}

// sinkLoop counts the messages of st until it ends, and answers an empty
// one with the count since the last.
func sinkLoop(st grpc.ServerStream) error {
	m := new(wrapperspb.BytesValue)
	reply := &wrapperspb.BytesValue{Value: make([]byte, ackLen)}
	var ack Ack
	for {
		if err := st.RecvMsg(m); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
		if len(m.Value) > 0 {
			ack.Msgs++
			ack.Bytes += uint64(len(m.Value))
			continue
		}
		putAck(reply.Value, ack.Msgs, ack.Bytes)
		ack = Ack{}
		if err := st.SendMsg(reply); err != nil {
			return err
		}
	}
}

func serveGRPC(addr string, _ int) (string, func() error, error) {
	l, err := net.Listen("unix", addr)
	if err != nil {
		return "", nil, err
	}
	s := grpc.NewServer()
	s.RegisterService(&grpcDesc, nil)
	return addr, func() error { return s.Serve(l) }, nil
}

func (grpcPeer) Start(ctx context.Context, env Env, n int) (Server, error) {
	dir, err := os.MkdirTemp("", "chanos-peers-")
	if err != nil {
		return nil, err
	}
	ps, err := startProc(ctx, env, "grpc-uds", filepath.Join(dir, "grpc.sock"), n, nil, dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return &grpcServer{ps}, nil
}

type grpcServer struct{ *procServer }

// Dial makes a ClientConn per client: each client has its own connection,
// as separate client programs would.
func (s *grpcServer) Dial(context.Context, int) (Client, error) {
	cc, err := grpc.NewClient("unix://"+s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &grpcClient{cc: cc, ctx: ctx, cancel: cancel, reply: new(wrapperspb.BytesValue)}, nil
}

type grpcClient struct {
	cc     *grpc.ClientConn
	ctx    context.Context
	cancel context.CancelFunc

	msg, empty, reply *wrapperspb.BytesValue
	echo, sink        grpc.ClientStream
}

func (c *grpcClient) SetPayload(p []byte) error {
	c.msg = &wrapperspb.BytesValue{Value: append([]byte(nil), p...)}
	c.empty = &wrapperspb.BytesValue{}
	return nil
}

func (c *grpcClient) stream(s *grpc.ClientStream, i int) error {
	if *s != nil {
		return nil
	}
	d := &grpcDesc.Streams[i]
	st, err := c.cc.NewStream(c.ctx, d, "/"+grpcService+"/"+d.StreamName)
	if err != nil {
		return err
	}
	*s = st
	return nil
}

func (c *grpcClient) RoundTrip() error {
	if err := c.stream(&c.echo, 0); err != nil {
		return err
	}
	if err := c.echo.SendMsg(c.msg); err != nil {
		return err
	}
	if err := c.echo.RecvMsg(c.reply); err != nil {
		return err
	}
	return checkEcho(opEcho, opEcho, c.reply.Value, c.msg.Value)
}

func (c *grpcClient) Call() error {
	if err := c.cc.Invoke(c.ctx, "/"+grpcService+"/Unary", c.msg, c.reply); err != nil {
		return err
	}
	return checkEcho(opCall, opCall, c.reply.Value, c.msg.Value)
}

func (c *grpcClient) Send() error {
	if err := c.stream(&c.sink, 1); err != nil {
		return err
	}
	return c.sink.SendMsg(c.msg)
}

func (c *grpcClient) Ack() (Ack, error) {
	if err := c.stream(&c.sink, 1); err != nil {
		return Ack{}, err
	}
	if err := c.sink.SendMsg(c.empty); err != nil {
		return Ack{}, err
	}
	if err := c.sink.RecvMsg(c.reply); err != nil {
		return Ack{}, err
	}
	a, err := parseAck(c.reply.Value)
	if err != nil {
		return Ack{}, fmt.Errorf("grpc-uds: %w", err)
	}
	return a, nil
}

func (c *grpcClient) Close() error {
	for _, st := range []grpc.ClientStream{c.echo, c.sink} {
		if st != nil {
			st.CloseSend()
		}
	}
	c.cancel()
	return c.cc.Close()
}
