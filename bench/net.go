package bench

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	stdnet "net"
	"net/netip"
	"os"
	"os/exec"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/chanos/chanos/chanos"
	cnet "github.com/chanos/chanos/interconnect/net"
	"github.com/chanos/chanos/interfaces/pingpong"
	"github.com/chanos/chanos/internal/netns"
	"github.com/chanos/chanos/wire"
)

// NetServerCommand is the hidden `chanos bench` suite name under which
// the chanos binary runs the server side of the net suite (NetServer).
const NetServerCommand = "__net-server"

// NetCTool is the C program of the net suite's tcp-c baseline
// (c/tools/tcp_pingpong.c), in the C build's tools.
const NetCTool = "chanos-tcp-pingpong"

// Paths of the net suite: Result.Path.
const (
	// NetPathVeth: the server side runs in one network namespace, the
	// client side's sockets are in another, and the two are joined by
	// veths on a bridge (docs/netns.md).
	NetPathVeth = "veth"
	// NetPathLoopback: both sides on this host's loopback, where network
	// namespaces cannot be built (not root, no ip netns) or were not
	// wanted.
	NetPathLoopback = "loopback"
)

// NetConfig configures RunNet.
type NetConfig struct {
	Quick bool
	// Repeat runs each case this many times, round-robin; the median
	// run is reported (0: 3).
	Repeat int
	// Cases, if not empty, keeps the cases whose key (case/transport/size,
	// e.g. rtt/net/8) contains one of these strings.
	Cases    []string
	Progress io.Writer
	// Server is the command line of the server process; empty means this
	// executable with NetServerCommand (`chanos bench __net-server`).
	Server []string
	// Peers is chanos-peers, the client and server of the grpc-tcp
	// baseline; empty means FindPeers. Without it, the case is left out
	// and Note says so.
	Peers string
	// CTool is chanos-tcp-pingpong, the tcp-c baseline; empty means
	// FindCTool(NetCTool). Without it, the case is left out and Note says
	// so.
	CTool string
	// ServerProfile, if not empty, is the file the server process writes
	// its CPU profile to (the receiving side of the stream cases).
	ServerProfile string
	// Loopback runs over loopback even where namespaces can be built.
	Loopback bool
	// Note, if not nil, is told the path the suite runs over and the
	// baselines it leaves out, one line each.
	Note io.Writer
}

func (cfg *NetConfig) progress(format string, args ...any) {
	if cfg.Progress != nil {
		fmt.Fprintf(cfg.Progress, format+"\n", args...)
	}
}

func (cfg *NetConfig) note(format string, args ...any) {
	if cfg.Note != nil {
		fmt.Fprintf(cfg.Note, "net: "+format+"\n", args...)
	}
}

// RunNet runs the net suite (docs/net.md, docs/benchmarks.md). Its server
// side is processes of their own (cfg.Server, the C and gRPC servers) in
// one network namespace, its
// client side, this process's sockets and the C and gRPC clients, in
// another, the two joined by veths on a bridge (internal/netns); where no
// namespace can be built, both run on loopback, and every Result's Path
// says which. The cases:
//
//   - rtt, size 8: the echo rpc of pingpong over net with TLS ("net"),
//     with TLS's authentication and no encryption ("net-auth"), in plain
//     mode ("net-plain"); 8 bytes each way over a bare TCP connection in
//     Go ("tcp", the baseline) and in C ("tcp-c"); gRPC-Go's unary call
//     ("grpc-tcp");
//   - stream, sizes 64 and 65536: one-way data messages of that many
//     bytes (frame included) through the generated client, the last one
//     followed by an echo call; over bare TCP, as many bytes in writes of
//     that size, acknowledged at the end; over gRPC-Go, messages of that
//     many bytes on a client stream, counted at the end;
//   - resume, net: the time from a reset of the TCP connection to the
//     completion of an echo call across it.
//
// The namespaces and every process are removed before RunNet returns, on
// failure and on ctx's cancellation too.
func RunNet(ctx context.Context, cfg NetConfig, emit func(Result) error) (err error) {
	iters, streamN, bigN, resumes := 20000, 200000, 20000, 200
	if cfg.Quick {
		iters, streamN, bigN, resumes = 2000, 20000, 2000, 20
	}
	repeat := cfg.Repeat
	if repeat <= 0 {
		repeat = 3
	}
	env, err := newNetEnv(ctx, &cfg)
	if err != nil {
		return err
	}
	defer func() {
		cerr := env.close()
		if ctx.Err() == nil {
			err = errors.Join(err, cerr)
		}
	}()

	type netCase struct {
		key, base string // case/transport/size; base: the key of its baseline
		run       func() (Result, error)
	}
	var cases []netCase
	add := func(kase, tr string, size int, base string, run func() (Result, error)) {
		key := fmt.Sprintf("%s/%s/%d", kase, tr, size)
		if len(cfg.Cases) > 0 && !slices.ContainsFunc(cfg.Cases, func(c string) bool { return strings.Contains(key, c) }) {
			return
		}
		cases = append(cases, netCase{key, base, run})
	}
	for _, tr := range []string{"tcp", "tcp-c", "grpc-tcp", "net-plain", "net-auth", "net"} {
		run := func() (Result, error) { return env.netRTT(ctx, tr, iters) }
		switch tr {
		case "tcp":
			run = func() (Result, error) { return env.tcpRTT(ctx, iters) }
		case "tcp-c":
			run = func() (Result, error) { return env.cRTT(ctx, &cfg, iters) }
		case "grpc-tcp":
			run = func() (Result, error) { return env.grpcRTT(ctx, &cfg, iters) }
		}
		add("rtt", tr, 8, "rtt/tcp/8", run)
	}
	for _, size := range []int{64, 65536} {
		n := streamN
		if size > 64 {
			n = bigN
		}
		for _, tr := range []string{"tcp", "grpc-tcp", "net-plain", "net-auth", "net"} {
			run := func() (Result, error) { return env.stream(ctx, tr, n, size) }
			if tr == "grpc-tcp" {
				run = func() (Result, error) { return env.grpcStream(ctx, &cfg, n, size) }
			}
			add("stream", tr, size, fmt.Sprintf("stream/tcp/%d", size), run)
		}
	}
	add("resume", "net", 0, "", func() (Result, error) { return env.resume(ctx, resumes) })

	// Round-robin, so that a change in the machine's load falls on every
	// case alike; each case's median run is reported, with the median of
	// its ratios to its baseline's run of the same round.
	runs := make([][]Result, len(cases))
	left := make([]bool, len(cases))
	for round := range repeat {
		for i, c := range cases {
			if left[i] {
				continue
			}
			cfg.progress("net: run %d/%d: %s", round+1, repeat, c.key)
			r, err := c.run()
			if errors.Is(err, errLeftOut) {
				left[i] = true
				continue
			}
			if err != nil {
				if ctx.Err() != nil {
					// The processes were killed for it: their errors
					// say nothing more.
					err = ctx.Err()
				}
				return fmt.Errorf("net %s: %w", c.key, err)
			}
			r.Path = env.path
			runs[i] = append(runs[i], r)
		}
	}
	for i, c := range cases {
		if left[i] {
			continue
		}
		r := Median(runs[i])
		if b := slices.IndexFunc(cases, func(o netCase) bool { return o.key == c.base }); b >= 0 && b != i && !left[b] {
			get := p50Of
			if r.Case == "stream" {
				get = func(r *Result) float64 { return *r.BytesPerS }
			}
			r.PairedRatio = pairedRatio(runs[i], runs[b], get)
		}
		if err := emit(r); err != nil {
			return err
		}
	}
	return nil
}

// errLeftOut is a baseline whose program is not built: the case is left
// out, and the note says why.
var errLeftOut = errors.New("left out")

// netEnv is where the net suite runs: the server process, the
// addresses of its listeners, and the way to make the client side's
// sockets and processes.
type netEnv struct {
	path    string
	cluster *netns.Cluster // nil on loopback
	host    string         // the server's address
	// clientCmd and serverCmd make commands in the client's and the
	// server's machines.
	clientCmd, serverCmd func(ctx context.Context, name string, args ...string) *exec.Cmd
	dial                 func(ctx context.Context, addr string) (stdnet.Conn, error)

	cli   *cnet.Identity
	srvFP [32]byte
	ports map[string]string // tcp, net-plain, net-auth, net
	// cPort and grpcAddr are those of the tcp-c and grpc-tcp servers,
	// started at their cases' first runs.
	cPort, grpcAddr string

	procs []*netProc
}

func newNetEnv(ctx context.Context, cfg *NetConfig) (_ *netEnv, err error) {
	e := &netEnv{path: NetPathLoopback, host: "127.0.0.1"}
	local := func(ctx context.Context, name string, args ...string) *exec.Cmd {
		return exec.CommandContext(ctx, name, args...)
	}
	e.clientCmd, e.serverCmd = local, local
	e.dial = func(ctx context.Context, addr string) (stdnet.Conn, error) {
		var d stdnet.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
	if cfg.Loopback {
		cfg.note("path: loopback (asked for)")
	} else if c, err := netns.New(ctx, netns.Options{Machines: 2}); err != nil {
		if !errors.Is(err, netns.ErrUnavailable) {
			return nil, fmt.Errorf("net: network namespaces: %w", err)
		}
		cfg.note("path: loopback (%v)", err)
	} else {
		srv, cli := c.Machines[0], c.Machines[1]
		e.path, e.cluster, e.host = NetPathVeth, c, srv.Addr.String()
		e.serverCmd = srv.CommandContext
		e.clientCmd = cli.CommandContext
		e.dial = func(ctx context.Context, addr string) (stdnet.Conn, error) {
			return cli.Dial(ctx, "tcp", addr)
		}
		cfg.note("path: veth, server in %s (%s), client in %s (%s), through the bridge of %s",
			srv.NS, srv.Addr, cli.NS, cli.Addr, c.SwitchNS())
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, e.close())
		}
	}()
	if e.cli, err = cnet.NewIdentity(); err != nil {
		return nil, fmt.Errorf("net: client identity: %w", err)
	}
	argv := cfg.Server
	if len(argv) == 0 {
		self, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("net: the server's executable: %w", err)
		}
		argv = []string{self, "bench", NetServerCommand}
	}
	argv = append(argv[:len(argv):len(argv)], "--addr", e.host, "--admit", hex.EncodeToString(e.cli.Fingerprint[:]))
	if cfg.ServerProfile != "" {
		argv = append(argv, "--cpuprofile", cfg.ServerProfile)
	}
	p, err := e.start(ctx, e.serverCmd(ctx, argv[0], argv[1:]...))
	if err != nil {
		return nil, fmt.Errorf("net: server: %w", err)
	}
	e.ports = map[string]string{}
	for _, f := range strings.Fields(p.ready) {
		k, v, _ := strings.Cut(f, "=")
		if k == "fp" {
			b, err := hex.DecodeString(v)
			if err != nil || len(b) != 32 {
				return nil, fmt.Errorf("net: server: bad fingerprint %q", v)
			}
			copy(e.srvFP[:], b)
			continue
		}
		e.ports[k] = stdnet.JoinHostPort(e.host, v)
	}
	for _, k := range []string{"tcp", "net-plain", "net-auth", "net"} {
		if e.ports[k] == "" {
			return nil, fmt.Errorf("net: server: no %s port in %q", k, p.ready)
		}
	}
	return e, nil
}

// close stops the processes and removes the namespaces.
func (e *netEnv) close() error {
	var errs []error
	for i := len(e.procs) - 1; i >= 0; i-- {
		errs = append(errs, e.procs[i].stop())
	}
	e.procs = nil
	if e.cluster != nil {
		errs = append(errs, e.cluster.Close())
	}
	return errors.Join(errs...)
}

// netProc is a server process: it prints a line that begins with
// "ready" and serves until its standard input closes.
type netProc struct {
	cmd    *exec.Cmd
	stdin  io.Closer
	ready  string // the ready line, less "ready "
	stderr *tailBuffer
	done   chan error
}

// start starts cmd, a server, and waits for its ready line.
func (e *netEnv) start(ctx context.Context, cmd *exec.Cmd) (*netProc, error) {
	p := &netProc{cmd: cmd, stderr: &tailBuffer{}, done: make(chan error, 1)}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = p.stderr
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	p.stdin = in
	e.procs = append(e.procs, p)
	line := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(out)
		if s.Scan() {
			line <- s.Text()
		}
		close(line)
		io.Copy(io.Discard, out)
		p.done <- cmd.Wait()
	}()
	select {
	case l, ok := <-line:
		ready, found := strings.CutPrefix(l, "ready ")
		if !ok || !found {
			return nil, fmt.Errorf("%s: no ready line (%q): %s", cmd.Args, l, p.stderr)
		}
		p.ready = ready
		return p, nil
	case <-time.After(30 * time.Second):
		return nil, fmt.Errorf("%s: no ready line in 30 s: %s", cmd.Args, p.stderr)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// stop closes the process's standard input and waits for it to exit,
// killing it after a grace period.
func (p *netProc) stop() error {
	p.stdin.Close()
	select {
	case err := <-p.done:
		if err != nil {
			return fmt.Errorf("%s: %w: %s", p.cmd.Args[0], err, p.stderr)
		}
		return nil
	case <-time.After(5 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s: killed after 5 s: %s", p.cmd.Args[0], p.stderr)
	}
}

// tailBuffer keeps the last KiB written to it: a process's standard
// error, for the error that reports its failure.
type tailBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > 1024 {
		t.b = append(t.b[:0], t.b[len(t.b)-1024:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.b))
}

// Modes of the server's raw TCP connections: the first byte the client
// sends.
const (
	netRawEcho = 'e' // echo 8-byte messages until the connection ends
	netRawSink = 's' // read a length (8 bytes, little-endian), as many bytes, answer 1 byte
)

// rawConn dials the server's raw TCP port in mode.
func (e *netEnv) rawConn(ctx context.Context, mode byte) (stdnet.Conn, error) {
	c, err := e.dial(ctx, e.ports["tcp"])
	if err != nil {
		return nil, err
	}
	if _, err := c.Write([]byte{mode}); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (e *netEnv) tcpRTT(ctx context.Context, iters int) (Result, error) {
	c, err := e.rawConn(ctx, netRawEcho)
	if err != nil {
		return Result{}, err
	}
	defer c.Close()
	var b [8]byte
	rt := func(i int) error {
		binary.LittleEndian.PutUint64(b[:], uint64(i))
		if _, err := c.Write(b[:]); err != nil {
			return err
		}
		if _, err := io.ReadFull(c, b[:]); err != nil {
			return err
		}
		if binary.LittleEndian.Uint64(b[:]) != uint64(i) {
			return fmt.Errorf("echo %x, sent %d", b, i)
		}
		return nil
	}
	samples, total, err := timeRounds(iters, rt)
	if err != nil {
		return Result{}, err
	}
	r := rttResult(samples, total, nil)
	r.Suite, r.Case, r.Transport, r.Peers, r.Size, r.TotalNS = "net", "rtt", "tcp", "Go/Go", 8, total
	return r, nil
}

// timeRounds makes min(iters, 1000) untimed round trips, then iters timed
// one by one; it returns the samples and the total time.
func timeRounds(iters int, rt func(i int) error) ([]int64, int64, error) {
	for i := range min(iters, 1000) {
		if err := rt(i); err != nil {
			return nil, 0, err
		}
	}
	samples := make([]int64, iters)
	t0 := nanotime()
	for i := range samples {
		t := nanotime()
		if err := rt(i); err != nil {
			return nil, 0, err
		}
		samples[i] = nanotime() - t
	}
	return samples, nanotime() - t0, nil
}

// runClient runs a client program that prints one JSON object of
// figures (the fields of Result, round trips or a stream's rate), and
// returns them.
func (e *netEnv) runClient(ctx context.Context, name string, args ...string) (Result, error) {
	cmd := e.clientCmd(ctx, name, args...)
	var stderr tailBuffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return Result{}, fmt.Errorf("%s: %w: %s", name, err, stderr.String())
	}
	var r Result
	if err := json.Unmarshal(out, &r); err != nil || r.Iters == 0 || (r.RTTp50 == nil) == (r.BytesPerS == nil) {
		return Result{}, fmt.Errorf("%s: bad output %q: %v", name, out, err)
	}
	return r, nil
}

func (e *netEnv) cRTT(ctx context.Context, cfg *NetConfig, iters int) (Result, error) {
	tool := cfg.CTool
	if tool == "" {
		var err error
		if tool, err = FindCTool(NetCTool); err != nil {
			cfg.note("rtt tcp-c left out: %v (make c builds it)", err)
			return Result{}, errLeftOut
		}
	}
	if e.cPort == "" {
		p, err := e.start(ctx, e.serverCmd(ctx, tool, "serve", e.host))
		if err != nil {
			return Result{}, err
		}
		e.cPort = p.ready
	}
	r, err := e.runClient(ctx, tool, "client", e.host, e.cPort, strconv.Itoa(iters))
	if err != nil {
		return Result{}, err
	}
	r.Suite, r.Case, r.Transport, r.Peers, r.Size = "net", "rtt", "tcp-c", "C/C", 8
	return r, nil
}

// grpcServer returns chanos-peers and the address of its gRPC server
// for the grpc-tcp cases, started at the first.
func (e *netEnv) grpcServer(ctx context.Context, cfg *NetConfig, kase string) (string, error) {
	peers := cfg.Peers
	if peers == "" {
		var err error
		if peers, err = FindPeers(); err != nil {
			cfg.note("%s grpc-tcp left out: %v", kase, err)
			return "", errLeftOut
		}
	}
	if e.grpcAddr == "" {
		p, err := e.start(ctx, e.serverCmd(ctx, peers, NetPeersServeCommand, "grpc-tcp", stdnet.JoinHostPort(e.host, "0"), "1"))
		if err != nil {
			return "", err
		}
		e.grpcAddr = p.ready
	}
	return peers, nil
}

func (e *netEnv) grpcStream(ctx context.Context, cfg *NetConfig, n, size int) (Result, error) {
	peers, err := e.grpcServer(ctx, cfg, "stream")
	if err != nil {
		return Result{}, err
	}
	r, err := e.runClient(ctx, peers, "net-stream", "grpc-tcp", e.grpcAddr, strconv.Itoa(n), strconv.Itoa(size))
	if err != nil {
		return Result{}, err
	}
	r.Suite, r.Case, r.Transport, r.Peers, r.Size = "net", "stream", "grpc-tcp", "Go/Go", size
	return r, nil
}

func (e *netEnv) grpcRTT(ctx context.Context, cfg *NetConfig, iters int) (Result, error) {
	peers, err := e.grpcServer(ctx, cfg, "rtt")
	if err != nil {
		return Result{}, err
	}
	r, err := e.runClient(ctx, peers, "net-rtt", "grpc-tcp", e.grpcAddr, strconv.Itoa(iters))
	if err != nil {
		return Result{}, err
	}
	r.Suite, r.Case, r.Transport, r.Peers, r.Size = "net", "rtt", "grpc-tcp", "Go/Go", 8
	return r, nil
}

// netDial opens a net connection to the server's listener for tr;
// onConn, if not nil, is told each TCP connection the link dials.
func (e *netEnv) netDial(ctx context.Context, tr string, onConn func(stdnet.Conn)) (*cnet.Link, error) {
	o := &cnet.Options{}
	if tr == "net" || tr == "net-auth" {
		o.TLS = &cnet.TLS{Identity: e.cli, Peer: e.srvFP, AuthOnly: tr == "net-auth"}
	}
	o.Dial = func(ctx context.Context, addr string) (stdnet.Conn, error) {
		c, err := e.dial(ctx, addr)
		if err == nil && onConn != nil {
			onConn(c)
		}
		return c, err
	}
	return cnet.Dial(ctx, e.ports[tr], o)
}

// closeLink closes l in order, or, once ctx has ended (the run was
// interrupted), ends it at once: the processes at the other end die with
// ctx (exec.CommandContext), and an orderly close would wait the whole
// Options.Linger (10 s) for an acknowledgement that cannot come.
func closeLink(ctx context.Context, l *cnet.Link) {
	if ctx.Err() != nil {
		l.End(ctx.Err())
	}
	l.Close()
}

func (e *netEnv) netRTT(ctx context.Context, tr string, iters int) (Result, error) {
	l, err := e.netDial(ctx, tr, nil)
	if err != nil {
		return Result{}, err
	}
	defer closeLink(ctx, l)
	c := pingpong.NewConn(chanos.NewConn(l, pingpong.Interface))
	samples, total, err := timeRounds(iters, func(i int) error {
		v, err := c.Echo(ctx, uint64(i))
		if err == nil && v != uint64(i) {
			err = fmt.Errorf("echo %d, sent %d", v, i)
		}
		return err
	})
	if err != nil {
		return Result{}, err
	}
	r := rttResult(samples, total, nil)
	r.Suite, r.Case, r.Transport, r.Peers, r.Size, r.TotalNS = "net", "rtt", tr, "Go/Go", 8, total
	return r, nil
}

func (e *netEnv) stream(ctx context.Context, tr string, n, size int) (Result, error) {
	var total int64
	if tr == "tcp" {
		c, err := e.rawConn(ctx, netRawSink)
		if err != nil {
			return Result{}, err
		}
		defer c.Close()
		var hdr [8]byte
		binary.LittleEndian.PutUint64(hdr[:], uint64(n)*uint64(size))
		if _, err := c.Write(hdr[:]); err != nil {
			return Result{}, err
		}
		b := make([]byte, size)
		t0 := nanotime()
		for range n {
			if _, err := c.Write(b); err != nil {
				return Result{}, err
			}
		}
		if _, err := io.ReadFull(c, hdr[:1]); err != nil {
			return Result{}, fmt.Errorf("the acknowledgement: %w", err)
		}
		total = nanotime() - t0
	} else {
		l, err := e.netDial(ctx, tr, nil)
		if err != nil {
			return Result{}, err
		}
		defer closeLink(ctx, l)
		c := pingpong.NewConn(chanos.NewConn(l, pingpong.Interface))
		m := &pingpong.Data{Payload: make([]byte, size-28)}
		if f, err := encodeFrame(m); err != nil || len(f) != size {
			return Result{}, fmt.Errorf("a frame of %d bytes, want %d: %v", len(f), size, err)
		}
		t0 := nanotime()
		for range n {
			if err := c.Send(ctx, m); err != nil {
				return Result{}, err
			}
		}
		// Delivered in order: the echo's reply comes after the server
		// has received every data message.
		if _, err := c.Echo(ctx, 0); err != nil {
			return Result{}, err
		}
		total = nanotime() - t0
	}
	secs := float64(total) / 1e9
	return Result{Suite: "net", Case: "stream", Transport: tr, Peers: "Go/Go", Size: size, Iters: n, TotalNS: total,
		MsgsPerS: f64(float64(n) / secs), BytesPerS: f64(float64(n) * float64(size) / secs)}, nil
}

// resume resets the TCP connection under a net connection n times and
// times, each time, the echo call that the reset interrupts: the time to
// notice the reset, redial, exchange hellos and retransmit.
func (e *netEnv) resume(ctx context.Context, n int) (Result, error) {
	var mu sync.Mutex
	var last stdnet.Conn
	l, err := e.netDial(ctx, "net", func(c stdnet.Conn) {
		mu.Lock()
		last = c
		mu.Unlock()
	})
	if err != nil {
		return Result{}, err
	}
	defer closeLink(ctx, l)
	c := pingpong.NewConn(chanos.NewConn(l, pingpong.Interface))
	if _, err := c.Echo(ctx, 0); err != nil {
		return Result{}, err
	}
	samples := make([]int64, n)
	var total int64
	for i := range samples {
		mu.Lock()
		tc, _ := last.(*stdnet.TCPConn)
		mu.Unlock()
		t := nanotime()
		if tc != nil {
			tc.SetLinger(0)
			tc.Close()
		}
		if _, err := c.Echo(ctx, uint64(i)); err != nil {
			return Result{}, err
		}
		samples[i] = nanotime() - t
		total += samples[i]
	}
	if got := l.Resumes(); got < uint64(n) {
		return Result{}, fmt.Errorf("%d resets but %d resumes", n, got)
	}
	r := rttResult(samples, total, nil)
	r.Suite, r.Case, r.Transport, r.Peers, r.TotalNS = "net", "resume", "net", "Go/Go", total
	return r, nil
}

// NetServer is the server process of the net suite (NetServerCommand):
// with --addr IP and --admit HEX (the client's fingerprint), it listens
// on IP for raw TCP (the modes netRawEcho and netRawSink) and for net in
// plain mode, authenticated-only and with TLS, with an identity of its
// own; serves pingpong on every net connection (echo returns its
// argument, data messages are taken and dropped); prints "ready tcp=PORT
// net-plain=PORT net-auth=PORT net=PORT fp=HEX"; and serves until its
// standard input closes or ctx ends.
func NetServer(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet(NetServerCommand, flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1", "the address to listen on")
	admit := fs.String("admit", "", "the client's certificate fingerprint, hex")
	profile := fs.String("cpuprofile", "", "write a CPU profile of this process to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *profile != "" {
		f, err := os.Create(*profile)
		if err != nil {
			return fmt.Errorf("net server: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("net server: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	ip, err := netip.ParseAddr(*addr)
	if err != nil {
		return fmt.Errorf("net server: --addr: %w", err)
	}
	var cliFP [32]byte
	b, err := hex.DecodeString(*admit)
	if err != nil || len(b) != 32 {
		return fmt.Errorf("net server: --admit %q: not a fingerprint", *admit)
	}
	copy(cliFP[:], b)
	id, err := cnet.NewIdentity()
	if err != nil {
		return fmt.Errorf("net server: identity: %w", err)
	}
	// Deferred first, run last: every goroutine is told to stop first.
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	listen := func() (stdnet.Listener, error) {
		ln, err := stdnet.Listen("tcp", netip.AddrPortFrom(ip, 0).String())
		if err != nil {
			return nil, fmt.Errorf("net server: %w", err)
		}
		context.AfterFunc(ctx, func() { ln.Close() })
		return ln, nil
	}
	raw, err := listen()
	if err != nil {
		return err
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		serveRaw(ctx, raw)
	}()
	ready := []string{"tcp=" + portOf(raw)}
	for _, tr := range []string{"net-plain", "net-auth", "net"} {
		ln, err := listen()
		if err != nil {
			return err
		}
		o := &cnet.Options{}
		if tr != "net-plain" {
			o.TLS = &cnet.TLS{Identity: id, AuthOnly: tr == "net-auth",
				Admit: func(_ string, fp [32]byte) bool { return fp == cliFP }}
		}
		L := cnet.Listen(ln, o)
		context.AfterFunc(ctx, func() { L.Close() })
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				l, err := L.Accept(ctx)
				if err != nil {
					return
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer closeLink(ctx, l)
					pingpong.NewConn(chanos.NewConn(l, pingpong.Interface)).Serve(ctx, netSink{})
				}()
			}
		}()
		ready = append(ready, tr+"="+portOf(ln))
	}
	fmt.Printf("ready %s fp=%s\n", strings.Join(ready, " "), hex.EncodeToString(id.Fingerprint[:]))
	<-ctx.Done()
	return nil
}

func portOf(ln stdnet.Listener) string {
	_, p, _ := stdnet.SplitHostPort(ln.Addr().String())
	return p
}

// netSink is the net server's pingpong: echo returns its argument, data
// messages are dropped.
type netSink struct{ echoServer }

func (netSink) Data(context.Context, *pingpong.Client, pingpong.Data) error { return nil }

// serveRaw serves the raw TCP connections that ln accepts until ctx ends.
func serveRaw(ctx context.Context, ln stdnet.Listener) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		stop := context.AfterFunc(ctx, func() { c.Close() })
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer stop()
			defer c.Close()
			var b [8]byte
			if _, err := io.ReadFull(c, b[:1]); err != nil {
				return
			}
			switch b[0] {
			case netRawEcho:
				for {
					if _, err := io.ReadFull(c, b[:]); err != nil {
						return
					}
					if _, err := c.Write(b[:]); err != nil {
						return
					}
				}
			case netRawSink:
				if _, err := io.ReadFull(c, b[:]); err != nil {
					return
				}
				// Read as the net link reads a large frame: into a buffer
				// of 64 KiB (io.Discard would read 8 KiB at a time).
				buf := make([]byte, 64<<10)
				for left := int64(binary.LittleEndian.Uint64(b[:])); left > 0; {
					k, err := c.Read(buf[:min(int64(len(buf)), left)])
					if err != nil {
						return
					}
					left -= int64(k)
				}
				c.Write(b[:1])
			}
		}()
	}
}

func encodeFrame(m interface{ Encode(*wire.Buffer) error }) ([]byte, error) {
	var b wire.Buffer
	if err := m.Encode(&b); err != nil {
		return nil, err
	}
	return b.B, nil
}

// NetPeersServeCommand is chanos-peers' argument that runs one of its
// servers (peers.ServeCommand, which this module cannot import: gRPC stays
// in the peers' module).
const NetPeersServeCommand = "__peer-server"
