package peers

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// NetRTTCommand and NetStreamCommand, as the first argument of
// chanos-peers, run the clients of the gRPC baselines of `chanos bench
// net` (see NetRTTMain and NetStreamMain).
const (
	NetRTTCommand    = "net-rtt"
	NetStreamCommand = "net-stream"
)

// grpcTCPDesc is the Echo service of grpcPeer with its unary method and
// its sink, served over TCP: the gRPC-Go baseline of `chanos bench net`,
// whose server runs on another machine (a network namespace) than its
// client.
var grpcTCPDesc = grpc.ServiceDesc{
	ServiceName: grpcService,
	HandlerType: (*any)(nil),
	Methods:     []grpc.MethodDesc{{MethodName: "Unary", Handler: grpcUnaryTCP}},
	Streams:     []grpc.StreamDesc{{StreamName: "Sink", Handler: grpcSinkTCP, ServerStreams: true, ClientStreams: true}},
}

func overTCP(ctx context.Context) bool {
	p, ok := peer.FromContext(ctx)
	return ok && p.Addr != nil && p.Addr.Network() == "tcp"
}

func grpcSinkTCP(_ any, st grpc.ServerStream) error {
	if !overTCP(st.Context()) {
		return errNotTCP
	}
	return sinkLoop(st)
}

// errNotTCP is what the TCP server says to a client that did not come
// over TCP; it makes a mislabelled measurement fail.
var errNotTCP = errors.New("grpc-tcp: peer is not on a TCP connection")

func grpcUnaryTCP(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
	if !overTCP(ctx) {
		return nil, errNotTCP
	}
	in := new(wrapperspb.BytesValue)
	if err := dec(in); err != nil {
		return nil, err
	}
	return in, nil
}

// serveGRPCTCP listens on the TCP address addr (port 0 picks one) and
// serves grpcTCPDesc there with insecure credentials and default options.
func serveGRPCTCP(addr string, _ int) (string, func() error, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("grpc-tcp: listen: %w", err)
	}
	s := grpc.NewServer()
	s.RegisterService(&grpcTCPDesc, nil)
	return l.Addr().String(), func() error { return s.Serve(l) }, nil
}

// NetRTT is what NetRTTMain prints: the figures of a run of round trips,
// in the field names of chanos bench's JSON.
type NetRTT struct {
	Iters   int     `json:"iters"`
	P50     int64   `json:"rtt_ns_p50"`
	P99     int64   `json:"rtt_ns_p99"`
	Mean    float64 `json:"rtt_ns_mean"`
	TotalNS int64   `json:"total_ns"`
}

// NetRTTMain is `chanos-peers net-rtt grpc-tcp ADDR ITERS`: it makes
// ITERS unary calls of an 8-byte BytesValue, one after another, to the
// gRPC server at the TCP address ADDR (started with ServeCommand and
// the transport grpc-tcp), timing each, after as many untimed calls to warm the
// connection up. It prints one JSON object (NetRTT) on stdout and
// returns the exit status.
func NetRTTMain(args []string, stdout io.Writer) int {
	if len(args) != 3 || args[0] != "grpc-tcp" {
		fmt.Fprintln(os.Stderr, "usage: chanos-peers net-rtt grpc-tcp ADDR ITERS")
		return 2
	}
	iters, err := strconv.Atoi(args[2])
	if err != nil || iters < 1 {
		fmt.Fprintf(os.Stderr, "chanos-peers net-rtt: bad iterations %q\n", args[2])
		return 2
	}
	r, err := netRTT(args[1], iters)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chanos-peers net-rtt:", err)
		return 1
	}
	if err := json.NewEncoder(stdout).Encode(r); err != nil {
		fmt.Fprintln(os.Stderr, "chanos-peers net-rtt:", err)
		return 1
	}
	return 0
}

func netRTT(addr string, iters int) (NetRTT, error) {
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return NetRTT{}, fmt.Errorf("grpc-tcp: client: %w", err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	msg := &wrapperspb.BytesValue{Value: make([]byte, 8)}
	reply := new(wrapperspb.BytesValue)
	call := func(i int) error {
		binary.LittleEndian.PutUint64(msg.Value, uint64(i))
		if err := cc.Invoke(ctx, "/"+grpcService+"/Unary", msg, reply); err != nil {
			return fmt.Errorf("grpc-tcp: call %d: %w", i, err)
		}
		if len(reply.Value) != 8 || binary.LittleEndian.Uint64(reply.Value) != uint64(i) {
			return fmt.Errorf("grpc-tcp: call %d: echo %x", i, reply.Value)
		}
		return nil
	}
	for i := range min(iters, 1000) {
		if err := call(i); err != nil {
			return NetRTT{}, err
		}
	}
	samples := make([]int64, iters)
	t0 := time.Now()
	for i := range samples {
		t := time.Now()
		if err := call(i); err != nil {
			return NetRTT{}, err
		}
		samples[i] = int64(time.Since(t))
	}
	total := int64(time.Since(t0))
	slices.Sort(samples)
	return NetRTT{Iters: iters, P50: samples[iters/2], P99: samples[iters*99/100],
		Mean: float64(total) / float64(iters), TotalNS: total}, nil
}

// NetStream is what NetStreamMain prints, in the field names of chanos
// bench's JSON.
type NetStream struct {
	Iters     int     `json:"iters"`
	TotalNS   int64   `json:"total_ns"`
	MsgsPerS  float64 `json:"msgs_per_s"`
	BytesPerS float64 `json:"bytes_per_s"`
}

// NetStreamMain is `chanos-peers net-stream grpc-tcp ADDR N SIZE`: on a
// client stream of the sink of the gRPC server at ADDR, it sends N
// BytesValue messages of SIZE bytes, then an empty one, and waits for the
// server's count (which must be N), timing the whole after a warm-up of
// N/10 messages. It prints one JSON object (NetStream) on stdout, bytes
// counted as N times SIZE, and returns the exit status.
func NetStreamMain(args []string, stdout io.Writer) int {
	if len(args) != 4 || args[0] != "grpc-tcp" {
		fmt.Fprintln(os.Stderr, "usage: chanos-peers net-stream grpc-tcp ADDR N SIZE")
		return 2
	}
	n, err1 := strconv.Atoi(args[2])
	size, err2 := strconv.Atoi(args[3])
	if err1 != nil || err2 != nil || n < 1 || size < 1 {
		fmt.Fprintf(os.Stderr, "chanos-peers net-stream: bad count %q or size %q\n", args[2], args[3])
		return 2
	}
	r, err := netStream(args[1], n, size)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chanos-peers net-stream:", err)
		return 1
	}
	if err := json.NewEncoder(stdout).Encode(r); err != nil {
		fmt.Fprintln(os.Stderr, "chanos-peers net-stream:", err)
		return 1
	}
	return 0
}

func netStream(addr string, n, size int) (NetStream, error) {
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return NetStream{}, fmt.Errorf("grpc-tcp: client: %w", err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	d := &grpcTCPDesc.Streams[0]
	st, err := cc.NewStream(ctx, d, "/"+grpcService+"/"+d.StreamName)
	if err != nil {
		return NetStream{}, fmt.Errorf("grpc-tcp: stream: %w", err)
	}
	msg := &wrapperspb.BytesValue{Value: make([]byte, size)}
	empty, reply := &wrapperspb.BytesValue{}, new(wrapperspb.BytesValue)
	send := func(k int) error {
		for i := range k {
			if err := st.SendMsg(msg); err != nil {
				return fmt.Errorf("grpc-tcp: message %d: %w", i, err)
			}
		}
		if err := st.SendMsg(empty); err != nil {
			return fmt.Errorf("grpc-tcp: the end: %w", err)
		}
		if err := st.RecvMsg(reply); err != nil {
			return fmt.Errorf("grpc-tcp: the count: %w", err)
		}
		a, err := parseAck(reply.Value)
		if err != nil {
			return fmt.Errorf("grpc-tcp: %w", err)
		}
		if a.Msgs != uint64(k) {
			return fmt.Errorf("grpc-tcp: the server counted %d messages of %d", a.Msgs, k)
		}
		return nil
	}
	if err := send(max(1, n/10)); err != nil {
		return NetStream{}, err
	}
	t0 := time.Now()
	if err := send(n); err != nil {
		return NetStream{}, err
	}
	total := time.Since(t0)
	st.CloseSend()
	secs := total.Seconds()
	return NetStream{Iters: n, TotalNS: int64(total), MsgsPerS: float64(n) / secs, BytesPerS: float64(n) * float64(size) / secs}, nil
}
