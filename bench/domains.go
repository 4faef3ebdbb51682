package bench

// The suites that measure chanos above the ring: rpcs through generated
// stubs, the local interconnect, binding by name and the nameservice. They
// run a private monitor in this process and the server in another process
// (the chanos binary, re-executed under RPCServerCommand).

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/interconnect/ump"
	"github.com/chanos/chanos/interfaces/nameservice"
	"github.com/chanos/chanos/interfaces/pingpong"
)

// RPCServerCommand is the hidden `chanos bench` suite name under which the
// chanos binary serves pingpong for the rpc and bind suites.
const RPCServerCommand = "__rpc-server"

// DomainConfig configures the rpc and bind suites.
type DomainConfig struct {
	Quick    bool
	Repeat   int       // runs per case; the median is reported
	Progress io.Writer // progress lines, or nil
	// Server is the command that serves pingpong; nil means this
	// executable with RPCServerCommand.
	Server []string
}

func (cfg *DomainConfig) repeat() int {
	switch {
	case cfg.Repeat > 0:
		return cfg.Repeat
	case cfg.Quick:
		return 1
	}
	return 3
}

func (cfg *DomainConfig) progress(format string, args ...any) {
	if cfg.Progress != nil {
		fmt.Fprintf(cfg.Progress, format+"\n", args...)
	}
}

// RPCServer serves pingpong under --name, joining the monitor in --dir,
// until its standard input closes (the bench process ended) or ctx ends.
// It prints "ready" once exported.
func RPCServer(ctx context.Context, args []string) error {
	var dir, name string
	rawRing := false
	for i := 0; i < len(args); i++ {
		switch {
		case args[i] == "--raw-ring":
			rawRing = true
		case args[i] == "--dir" && i+1 < len(args):
			i++
			dir = args[i]
		case args[i] == "--name" && i+1 < len(args):
			i++
			name = args[i]
		}
	}
	if dir == "" || name == "" {
		return fmt.Errorf("%s needs --dir and --name", RPCServerCommand)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { io.Copy(io.Discard, os.Stdin); cancel() }()
	if path := os.Getenv("CHANOS_SERVER_CPUPROFILE"); path != "" {
		// The serving side of the rpc suite, for `chanos bench rpc
		// --cpuprofile`'s other half.
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if rawRing {
		// The bare ring the rpc suite's baseline is measured on, between
		// the same two processes: the bench process creates it over
		// descriptor 3.
		sock, err := ump.FileConn(os.NewFile(peerSocketFD, "raw-ring-socket"))
		if err != nil {
			return fmt.Errorf("raw ring socket: %w", err)
		}
		raw, err := ump.Attach(ctx, sock, &ump.Options{MaxMessageSize: rawRingMax})
		if err != nil {
			return fmt.Errorf("raw ring: %w", err)
		}
		defer raw.Close()
		go echo(ctx, raw)
	}
	d, err := chanos.Join(ctx, chanos.WithDir(dir), chanos.WithProgram("bench-rpc-server"))
	if err != nil {
		return err
	}
	defer d.Close()
	l, err := pingpong.Export(ctx, d, name)
	if err != nil {
		return err
	}
	defer l.Close()
	fmt.Println("ready")
	return pingpong.Serve(ctx, l, echoServer{})
}

// rawRingMax is the maximum message size of the rpc suite's raw ring.
const rawRingMax = 64

// echo sends back every message received on c until it ends.
func echo(ctx context.Context, c *ump.Conn) {
	for {
		m, err := c.Receive(ctx)
		if err != nil || c.Send(ctx, m) != nil {
			return
		}
	}
}

type echoServer struct{ pingpong.UnimplementedServer }

func (echoServer) Echo(ctx context.Context, v uint64) (uint64, error) { return v, nil }

func (echoServer) Ping(ctx context.Context, from *pingpong.Client, m pingpong.Ping) error {
	return nil
}

// world is a private monitor in this process, a joined domain, and a
// pingpong server process.
type world struct {
	dir    string
	d      *chanos.Domain
	server *exec.Cmd
	stdin  io.Closer
	raw    *ump.Conn // a bare ring pair to the server process, which echoes
	stop   func()
}

const benchName = "bench.pingpong"

// newWorld starts the world; with rawRing, the server process also echoes
// on a bare ring pair, w.raw.
func newWorld(ctx context.Context, cfg *DomainConfig, rawRing bool) (*world, error) {
	dir, stop, err := privateMonitor(ctx, "chanos-bench-")
	if err != nil {
		return nil, err
	}
	w := &world{dir: dir, stop: stop}

	argv := cfg.Server
	if len(argv) == 0 {
		exe, err := os.Executable()
		if err != nil {
			w.close()
			return nil, err
		}
		argv = []string{exe, "bench", RPCServerCommand}
	}
	args := append(argv[1:len(argv):len(argv)], "--dir", dir, "--name", benchName)
	// With rawRing, one end of a socket pair goes to the server as
	// descriptor 3, and the ring pair is made over it once it runs.
	var mine *net.UnixConn
	var extra []*os.File
	if rawRing {
		var theirs *net.UnixConn
		if mine, theirs, err = ump.SocketPair(); err != nil {
			w.close()
			return nil, err
		}
		defer func() {
			if w.raw == nil { // else the ring pair owns it
				mine.Close()
			}
		}()
		f, err := theirs.File()
		theirs.Close()
		if err != nil {
			w.close()
			return nil, err
		}
		defer f.Close()
		extra, args = []*os.File{f}, append(args, "--raw-ring")
	}
	cmd := exec.Command(argv[0], args...)
	cmd.Stderr = os.Stderr
	cmd.ExtraFiles = extra
	stdin, err := cmd.StdinPipe()
	if err != nil {
		w.close()
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		w.close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		w.close()
		return nil, err
	}
	w.server, w.stdin = cmd, stdin
	if rawRing {
		if w.raw, err = ump.Create(ctx, mine, &ump.Options{MaxMessageSize: rawRingMax}); err != nil {
			w.close()
			return nil, fmt.Errorf("raw ring to the bench server: %w", err)
		}
	}
	if line, err := bufio.NewReader(out).ReadString('\n'); strings.TrimSpace(line) != "ready" {
		w.close()
		return nil, fmt.Errorf("bench server did not start: %q %v", line, err)
	}
	if w.d, err = chanos.Join(ctx, chanos.WithDir(dir), chanos.WithProgram("bench")); err != nil {
		w.close()
		return nil, err
	}
	return w, nil
}

func (w *world) close() {
	if w.raw != nil {
		w.raw.Close()
	}
	if w.d != nil {
		w.d.Close()
	}
	if w.server != nil {
		endByStdin(w.server, w.stdin)
	}
	w.stop()
}

// endByStdin ends a child that stops when its standard input closes:
// closes stdin, then kills it if it has not exited within 5 s, and waits.
func endByStdin(cmd *exec.Cmd, stdin io.Closer) {
	stdin.Close()
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		cmd.Process.Kill()
		<-done
	}
}

// timeRTT runs op warmup times, then iters times, timing each, then iters
// times more in windows of RTTWindow timed whole (see Result.RTTWindow).
// The CPU is that of this process and of process server (if not 0) over
// the timed calls.
func timeRTT(warmup, iters int, server int, op func(i int) error) (Result, error) {
	for i := range warmup {
		if err := op(i); err != nil {
			return Result{}, err
		}
	}
	samples := make([]int64, iters)
	cpu := startCPU(server)
	t0 := nanotime()
	prev := t0
	for i := range samples {
		if err := op(i); err != nil {
			return Result{}, err
		}
		t := nanotime()
		samples[i] = t - prev
		prev = t
	}
	windows := make([]int64, max(1, iters/RTTWindow))
	if _, err := timeWindows(windows, op); err != nil {
		return Result{}, err
	}
	r := rttResult(samples, prev-t0, windows)
	r.CPUPercent = cpu.percent(nanotime() - t0)
	return r, nil
}

// RunRPC runs the rpc suite: an rpc round trip through the generated stubs
// over ump between processes, beside the raw ring's round trip between
// the same two processes (a bare ring pair to the server process, which
// echoes), in interleaved runs, so that both see the same placement of the
// processes on the CPUs; the same rpc on the local interconnect; and
// one-way messages on the local interconnect against a plain Go channel.
func RunRPC(ctx context.Context, cfg DomainConfig, emit func(Result) error) error {
	return runRPC(ctx, cfg, nil, emit)
}

// runRPC is RunRPC, calling eachRound, if not nil, at the end of every
// round (the comparison's peers run there).
func runRPC(ctx context.Context, cfg DomainConfig, eachRound func(ctx context.Context, round int) error, emit func(Result) error) error {
	iters, warmup := 200000, 20000
	if cfg.Quick {
		iters, warmup = 20000, 2000
	}
	w, err := newWorld(ctx, &cfg, true)
	if err != nil {
		return err
	}
	defer w.close()

	type rcase struct {
		name string
		run  func() (Result, error)
	}
	cases := []rcase{
		{"rtt-spin/ump/go-go", func() (Result, error) { return rawRTT(ctx, w.raw, warmup, iters, w.server.Process.Pid) }},
		{"rpc/ump/go-go", func() (Result, error) { return rpcOverName(ctx, w.d, benchName, warmup, iters, w.server.Process.Pid) }},
		{"rpc/local/go", func() (Result, error) { return rpcLocal(ctx, w.d, warmup, iters) }},
		{"send-receive/local/go", func() (Result, error) { return localStream(ctx, iters*5, false) }},
		{"send-receive/go-chan/go", func() (Result, error) { return localStream(ctx, iters*5, true) }},
	}
	runs := make([][]Result, len(cases))
	for round := range cfg.repeat() {
		for i, c := range cases {
			cfg.progress("rpc: run %d/%d: %s", round+1, cfg.repeat(), c.name)
			r, err := c.run()
			if err != nil {
				return fmt.Errorf("rpc case %s: %w", c.name, err)
			}
			parts := strings.Split(c.name, "/")
			r.Suite, r.Case, r.Transport, r.Peers, r.Size = "rpc", parts[0], parts[1], parts[2], 8
			r.InProcess = parts[2] == "go" // the local interconnect and the Go channel
			runs[i] = append(runs[i], r)
		}
		if eachRound != nil {
			if err := eachRound(ctx, round); err != nil {
				return err
			}
		}
	}
	raw := slices.IndexFunc(cases, func(c rcase) bool { return c.name == "rtt-spin/ump/go-go" })
	for i, c := range cases {
		r := Median(runs[i])
		if c.name == "rpc/ump/go-go" && raw >= 0 { // against the raw ring's run of the same round
			r.PairedRatio = pairedRatio(runs[i], runs[raw], windowOf)
		}
		if err := emit(r); err != nil {
			return err
		}
	}
	return nil
}

// rawRTT times round trips of 8-byte messages on a bare ring pair whose
// peer, process server, echoes, as the ump suite's Go peers do.
func rawRTT(ctx context.Context, c *ump.Conn, warmup, iters, server int) (Result, error) {
	msg := make([]byte, 8)
	return timeRTT(warmup, iters, server, func(i int) error {
		binary.LittleEndian.PutUint64(msg, uint64(i))
		if err := c.Send(ctx, msg); err != nil {
			return err
		}
		m, err := c.Receive(ctx)
		if err == nil && (len(m) != 8 || binary.LittleEndian.Uint64(m) != uint64(i)) {
			err = fmt.Errorf("raw round trip %d: the echo differs", i)
		}
		return err
	})
}

// rpcOverName times echo rpcs to name, served by process server over ump.
func rpcOverName(ctx context.Context, d *chanos.Domain, name string, warmup, iters, server int) (Result, error) {
	c, err := pingpong.Connect(ctx, d, name)
	if err != nil {
		return Result{}, err
	}
	defer c.Close()
	if got := c.Raw().Interconnect(); got != "ump" {
		return Result{}, fmt.Errorf("bound over %s, want ump", got)
	}
	return timeRTT(warmup, iters, server, func(i int) error {
		v, err := c.Echo(ctx, uint64(i))
		if err == nil && v != uint64(i) {
			err = fmt.Errorf("echo %d returned %d", i, v)
		}
		return err
	})
}

func rpcLocal(ctx context.Context, d *chanos.Domain, warmup, iters int) (Result, error) {
	l, err := pingpong.Export(ctx, d, "bench.local")
	if err != nil {
		return Result{}, err
	}
	defer l.Close()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go pingpong.Serve(sctx, l, echoServer{})
	c, err := pingpong.Connect(ctx, d, "bench.local")
	if err != nil {
		return Result{}, err
	}
	defer c.Close()
	if got := c.Raw().Interconnect(); got != "local" {
		return Result{}, fmt.Errorf("bound over %s, want local", got)
	}
	return timeRTT(warmup, iters, 0, func(i int) error {
		_, err := c.Echo(ctx, uint64(i))
		return err
	})
}

// localStream sends n pings one way within this process, on a local chanos
// connection or (goChan) on a plain Go channel of the same capacity, and
// reports messages per second. The time is the messages' alone: the local
// connection is bound before the clock starts, as the channel is made.
func localStream(ctx context.Context, n int, goChan bool) (Result, error) {
	var a, b *pingpong.Conn
	if !goChan {
		var err error
		if a, b, err = localConnPair(ctx); err != nil {
			return Result{}, err
		}
		defer a.Close()
		defer b.Close()
	}
	cpu := startCPU()
	start := nanotime()
	if goChan {
		ch := make(chan *pingpong.Ping, 64)
		done := make(chan struct{})
		go func() {
			for range n {
				<-ch
			}
			close(done)
		}()
		for i := range n {
			ch <- &pingpong.Ping{MsgID: uint32(i)}
		}
		<-done
	} else {
		errc := make(chan error, 1)
		go func() {
			for range n {
				if _, err := b.Receive(ctx); err != nil {
					errc <- err
					return
				}
			}
			errc <- nil
		}()
		m := &pingpong.Ping{}
		for i := range n {
			m.MsgID = uint32(i)
			if err := a.Send(ctx, m); err != nil {
				return Result{}, err
			}
		}
		if err := <-errc; err != nil {
			return Result{}, err
		}
	}
	ns := nanotime() - start
	return Result{Iters: n, MsgsPerS: f64(float64(n) / (float64(ns) / 1e9)), CPUPercent: cpu.percent(ns)}, nil
}

// localConnPair returns the two ends of a local connection, bound as a
// program would bind one: an export and a connect in one domain, on a
// private monitor that is gone again once they are bound.
func localConnPair(ctx context.Context) (*pingpong.Conn, *pingpong.Conn, error) {
	dir, stop, err := privateMonitor(ctx, "chanos-bench-local-")
	if err != nil {
		return nil, nil, err
	}
	defer stop()
	d, err := chanos.Join(ctx, chanos.WithDir(dir))
	if err != nil {
		return nil, nil, err
	}
	defer d.Close()
	l, err := pingpong.Export(ctx, d, "local")
	if err != nil {
		return nil, nil, err
	}
	defer l.Close()
	c, err := pingpong.Connect(ctx, d, "local")
	if err != nil {
		return nil, nil, err
	}
	s, err := l.Accept(ctx)
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	return c, s, nil
}

// RunBind runs the bind suite: connect-by-name latency (nameservice
// lookup, bind, ring setup and the close) and the nameservice's get.
func RunBind(ctx context.Context, cfg DomainConfig, emit func(Result) error) error {
	iters, warmup := 2000, 200
	if cfg.Quick {
		iters, warmup = 300, 30
	}
	w, err := newWorld(ctx, &cfg, false)
	if err != nil {
		return err
	}
	defer w.close()
	ns, err := nameservice.Connect(ctx, w.d, nameservice.ServiceName)
	if err != nil {
		return err
	}
	defer ns.Close()
	cases := []struct {
		name string
		run  func() (Result, error)
	}{
		{"connect/ump/go-go", func() (Result, error) {
			return timeRTT(warmup, iters, w.server.Process.Pid, func(int) error {
				c, err := pingpong.Connect(ctx, w.d, benchName)
				if err != nil {
					return err
				}
				return c.Close()
			})
		}},
		{"ns-get/ump/go-go", func() (Result, error) {
			return timeRTT(warmup*10, iters*10, w.server.Process.Pid, func(int) error {
				_, code, err := ns.Get(ctx, benchName)
				if err == nil && code != 0 {
					err = fmt.Errorf("get: code %d", code)
				}
				return err
			})
		}},
	}
	runs := make([][]Result, len(cases))
	for round := range cfg.repeat() {
		for i, c := range cases {
			cfg.progress("bind: run %d/%d: %s", round+1, cfg.repeat(), c.name)
			r, err := c.run()
			if err != nil {
				return fmt.Errorf("bind case %s: %w", c.name, err)
			}
			parts := strings.Split(c.name, "/")
			r.Suite, r.Case, r.Transport, r.Peers = "bind", parts[0], parts[1], parts[2]
			runs[i] = append(runs[i], r)
		}
	}
	for i := range cases {
		if err := emit(Median(runs[i])); err != nil {
			return err
		}
	}
	return nil
}

// DomainSummary prints the ratios the rpc suite's goals are stated in.
func DomainSummary(w io.Writer, results []Result) {
	find := func(kase, transport string) *Result {
		for i := range results {
			if results[i].Case == kase && results[i].Transport == transport {
				return &results[i]
			}
		}
		return nil
	}
	if rpc, raw := find("rpc", "ump"), find("rtt-spin", "ump"); rpc != nil && raw != nil && rpc.RTTp50 != nil && raw.RTTp50 != nil {
		r := *rpc.RTTp50 / *raw.RTTp50
		fmt.Fprintf(w, "rpc over ump / raw ring rtt-spin (p50): %.2f (goal <= 1.3: %s)\n", r, verdict(r <= 1.3))
		if rpc.RTTWindow != nil && raw.RTTWindow != nil {
			r := *rpc.RTTWindow / *raw.RTTWindow
			fmt.Fprintf(w, "rpc over ump / raw ring rtt-spin (window): %.2f (goal <= 1.3: %s)\n", r, verdict(r <= 1.3))
		}
		if r := rpc.PairedRatio; r != nil {
			fmt.Fprintf(w, "rpc over ump / raw ring rtt-spin (window, paired by round): %.2f%s (goal <= 1.3: %s)\n", *r, roundSpread(rpc, raw), verdict(*r <= 1.3))
		}
	}
	if loc, ch := find("send-receive", "local"), find("send-receive", "go-chan"); loc != nil && ch != nil && loc.MsgsPerS != nil && ch.MsgsPerS != nil {
		r := *ch.MsgsPerS / *loc.MsgsPerS
		fmt.Fprintf(w, "local send+receive time / Go channel: %.2f (goal <= 2: %s)\n", r, verdict(r <= 2))
	}
}

// roundSpread says, when both results kept their runs' figures, how far
// apart the rounds' ratios of subject to base came out: " (rounds
// LOW-HIGH)", the ratio of each run to its baseline's of the same round.
func roundSpread(subject, base *Result) string {
	if len(subject.RunFigures) < 2 || len(subject.RunFigures) != len(base.RunFigures) {
		return ""
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for i, f := range subject.RunFigures {
		if b := base.RunFigures[i]; b > 0 {
			lo, hi = min(lo, f/b), max(hi, f/b)
		}
	}
	if lo > hi {
		return ""
	}
	return fmt.Sprintf(" (rounds %.2f-%.2f)", lo, hi)
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}
