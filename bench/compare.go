package bench

// The comparison suites: chanos against the systems people would use
// instead (docs/bench-compare.md). Each suite measures chanos's own cases
// in this run — the generated pingpong stubs between this process and a
// server process over ump, joined to a private monitor, and the local
// interconnect within this process — and then runs the peers
// (bin/chanos-peers, the separate bench/peers module) with the same
// workload and merges their JSON lines, so that every ratio is between
// figures of the same run.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/interfaces/pingpong"
)

// CompareServerCommand is the hidden `chanos bench` suite name under which
// the chanos binary serves pingpong for the pingpong and stream suites:
// echo and bounce return their arguments, and data messages are counted
// and acknowledged (see CompareServer).
const CompareServerCommand = "__compare-server"

// PeersProgram is the name of the peers' binary, built by
// `make bin/chanos-peers` from the bench/peers module.
const PeersProgram = "chanos-peers"

// streamEnd is the seq of the data message that ends a stream: the server
// answers it with a data message whose seq is the number of messages
// counted since the last end and whose payload is their byte count, 8
// bytes little-endian.
const streamEnd = ^uint64(0)

// Default sizes of the comparison suites; the peers use the same ones.
var (
	PingpongSizes = []int{8, 64, 512, 4096, 65536}
	StreamSizes   = []int{64, 4096, 65536, 1 << 20}
)

// CompareConfig configures the pingpong, stream and rpc comparison suites.
type CompareConfig struct {
	Quick bool
	// Repeat runs each case, chanos's and the peers', this many times,
	// round-robin: each round runs chanos's cases and then the peers'
	// (one run of chanos-peers). The median run of each case is reported.
	// Zero means 1 with Quick, else 3.
	Repeat int
	// Progress, if not nil, receives a line per chanos case as it starts.
	// The peers show their own progress when stderr is a terminal.
	Progress io.Writer
	// Warmup and Duration are the times of each chanos measurement and are
	// passed to the peers; zero means 100 ms and 500 ms (Quick: 20 ms and
	// 80 ms), the peers' defaults.
	Warmup, Duration time.Duration
	// Sizes replaces the suite's payload sizes, for chanos and the peers.
	Sizes []int
	// Transports, if not empty, selects the peers to run (chanos-peers
	// --transports); chanos's own cases always run.
	Transports []string
	// Peers is the chanos-peers program; empty means FindPeers.
	Peers string
	// Server is the command that runs CompareServer; nil means this
	// executable with CompareServerCommand. RPCServer is the same for the
	// rpc suite's RPCServer.
	Server, RPCServer []string
	// GoPeer is passed to RunUMP for the raw ring floor (UMPConfig.GoPeer).
	GoPeer []string
	// UMPScale is passed to RunUMP (UMPConfig.Scale) for the floor; zero
	// means 0.1.
	UMPScale float64
}

func (cfg *CompareConfig) repeat() int {
	switch {
	case cfg.Repeat > 0:
		return cfg.Repeat
	case cfg.Quick:
		return 1
	}
	return 3
}

func (cfg *CompareConfig) times() (warmup, duration time.Duration) {
	warmup, duration = 100*time.Millisecond, 500*time.Millisecond
	if cfg.Quick {
		warmup, duration = 20*time.Millisecond, 80*time.Millisecond
	}
	if cfg.Warmup > 0 {
		warmup = cfg.Warmup
	}
	if cfg.Duration > 0 {
		duration = cfg.Duration
	}
	return warmup, duration
}

func (cfg *CompareConfig) progress(format string, args ...any) {
	if cfg.Progress != nil {
		fmt.Fprintf(cfg.Progress, format+"\n", args...)
	}
}

// FindPeers returns the path of chanos-peers: $CHANOS_PEERS if set, else
// beside this executable, else in bin/ of the repository that holds this
// executable or the working directory.
func FindPeers() (string, error) {
	if p := os.Getenv("CHANOS_PEERS"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("CHANOS_PEERS: %w", err)
		}
		return p, nil
	}
	var tried []string
	try := func(p string) bool {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return true
		}
		tried = append(tried, p)
		return false
	}
	var starts []string
	if exe, err := os.Executable(); err == nil {
		if p := filepath.Join(filepath.Dir(exe), PeersProgram); try(p) {
			return p, nil
		}
		starts = append(starts, filepath.Dir(exe))
	}
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	for _, s := range starts {
		for d := s; ; d = filepath.Dir(d) {
			if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil && !strings.HasSuffix(d, filepath.Join("bench", "peers")) {
				if p := filepath.Join(d, "bin", PeersProgram); try(p) {
					return p, nil
				}
				break
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	return "", fmt.Errorf("%s not found (tried %s): build it with make bin/chanos-peers, or set CHANOS_PEERS",
		PeersProgram, strings.Join(tried, ", "))
}

// RunPeerSuite runs `chanos-peers SUITE --json` with the config's quick,
// sizes, transports and times, and emits each result line it prints. It
// emits every line even when chanos-peers fails (exit status 1: some
// measurement failed) and then returns the error.
func RunPeerSuite(ctx context.Context, cfg CompareConfig, suite string, emit func(Result) error) error {
	prog := cfg.Peers
	if prog == "" {
		p, err := FindPeers()
		if err != nil {
			return err
		}
		prog = p
	}
	args := []string{suite, "--json"}
	if cfg.Quick {
		args = append(args, "--quick")
	}
	if len(cfg.Sizes) > 0 && suite != "rpc" {
		var s []string
		for _, n := range cfg.Sizes {
			s = append(s, strconv.Itoa(n))
		}
		args = append(args, "--sizes", strings.Join(s, ","))
	}
	if len(cfg.Transports) > 0 {
		args = append(args, "--transports", strings.Join(cfg.Transports, ","))
	}
	if cfg.Warmup > 0 {
		args = append(args, "--warmup", cfg.Warmup.String())
	}
	if cfg.Duration > 0 {
		args = append(args, "--duration", cfg.Duration.String())
	}
	cfg.progress("%s: peers: %s %s", suite, prog, strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return fmt.Errorf("%s: %w", PeersProgram, err)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s: %w", PeersProgram, err)
	}
	var emitErr error
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 || emitErr != nil {
			continue
		}
		var r Result
		if err := json.Unmarshal(line, &r); err != nil {
			emitErr = fmt.Errorf("%s %s: bad result line %q: %w", PeersProgram, suite, line, err)
			continue
		}
		emitErr = emit(r)
	}
	werr := cmd.Wait()
	switch {
	case emitErr != nil:
		return emitErr
	case sc.Err() != nil:
		return fmt.Errorf("%s %s: reading its output: %w", PeersProgram, suite, sc.Err())
	case werr != nil:
		return fmt.Errorf("%s %s: %w (its errors are above; the results it printed are kept)", PeersProgram, suite, werr)
	}
	return nil
}

// CompareServer serves pingpong for the comparison suites under --name,
// joining the monitor in --dir, until its standard input closes or ctx
// ends. It prints "ready" once exported.
func CompareServer(ctx context.Context, args []string) error {
	var dir, name string
	for i := 0; i+1 < len(args); i += 2 {
		switch args[i] {
		case "--dir":
			dir = args[i+1]
		case "--name":
			name = args[i+1]
		}
	}
	if dir == "" || name == "" {
		return fmt.Errorf("%s needs --dir and --name", CompareServerCommand)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { io.Copy(io.Discard, os.Stdin); cancel() }()
	d, err := chanos.Join(ctx, chanos.WithDir(dir), chanos.WithProgram("bench-compare-server"))
	if err != nil {
		return fmt.Errorf("%s: join: %w", CompareServerCommand, err)
	}
	defer d.Close()
	l, err := pingpong.Export(ctx, d, name)
	if err != nil {
		return fmt.Errorf("%s: export %s: %w", CompareServerCommand, name, err)
	}
	defer l.Close()
	fmt.Println("ready")
	return pingpong.Serve(ctx, l, &compareServer{})
}

// compareServer echoes rpcs and counts data messages, acknowledging each
// stream's end. A stream's counts are those of its connection.
type compareServer struct {
	pingpong.UnimplementedServer
	mu     sync.Mutex
	counts map[*pingpong.Client]*[2]uint64 // messages, bytes
}

func (*compareServer) Echo(ctx context.Context, v uint64) (uint64, error) { return v, nil }

func (*compareServer) Bounce(ctx context.Context, p []byte) ([]byte, error) { return p, nil }

func (s *compareServer) Data(ctx context.Context, from *pingpong.Client, m pingpong.Data) error {
	s.mu.Lock()
	if s.counts == nil {
		s.counts = make(map[*pingpong.Client]*[2]uint64)
	}
	c := s.counts[from]
	if c == nil {
		c = new([2]uint64)
		s.counts[from] = c
	}
	if m.Seq != streamEnd {
		c[0]++
		c[1] += uint64(len(m.Payload))
		s.mu.Unlock()
		return nil
	}
	n, b := c[0], c[1]
	delete(s.counts, from)
	s.mu.Unlock()
	return from.Send(ctx, &pingpong.Data{Seq: n, Payload: binary.LittleEndian.AppendUint64(nil, b)})
}

// compareWorld is a world (a private monitor, this domain joined to it and
// a server process) serving CompareServer, and the same server on the
// local interconnect within this process.
type compareWorld struct {
	*world
	localName string
	stopLocal func()
}

func newCompareWorld(ctx context.Context, cfg *CompareConfig) (*compareWorld, error) {
	argv := cfg.Server
	if len(argv) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		argv = []string{exe, "bench", CompareServerCommand}
	}
	w, err := newWorld(ctx, &DomainConfig{Server: argv}, false)
	if err != nil {
		return nil, fmt.Errorf("starting the chanos server: %w", err)
	}
	cw := &compareWorld{world: w, localName: benchName + ".local", stopLocal: func() {}}
	l, err := pingpong.Export(ctx, w.d, cw.localName)
	if err != nil {
		w.close()
		return nil, fmt.Errorf("export %s: %w", cw.localName, err)
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { pingpong.Serve(sctx, l, &compareServer{}); close(done) }()
	cw.stopLocal = func() { cancel(); l.Close(); <-done }
	return cw, nil
}

func (cw *compareWorld) close() {
	cw.stopLocal()
	cw.world.close()
}

// connect binds to the ump server process ("ump") or the in-process
// server ("local") and checks the interconnect.
func (cw *compareWorld) connect(ctx context.Context, transport string) (*pingpong.Conn, error) {
	name := benchName
	if transport == "local" {
		name = cw.localName
	}
	c, err := pingpong.Connect(ctx, cw.d, name)
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", name, err)
	}
	if got := c.Raw().Interconnect(); got != transport {
		c.Close()
		return nil, fmt.Errorf("bound to %s over %s, want %s", name, got, transport)
	}
	return c, nil
}

// compareCase is one chanos case of a comparison suite.
type compareCase struct {
	kase, transport, peers string
	size                   int
}

func (c compareCase) key() string {
	return fmt.Sprintf("%s/%s/%s/%d", c.kase, c.transport, c.peers, c.size)
}

func chanosCases(kase string, sizes []int) []compareCase {
	var cs []compareCase
	for _, s := range sizes {
		cs = append(cs, compareCase{kase, "ump", "go-go", s}, compareCase{kase, "local", "go", s})
	}
	return cs
}

// peerRounds runs a suite's peers once a round, so that they get the
// sampling chanos's cases get: as many runs, interleaved with chanos's in
// the same rounds, and the median run reported.
type peerRounds struct {
	cfg   CompareConfig
	suite string
	keys  []string // the peers' cases, in the order they first came
	runs  map[string][]Result
	errs  []error
}

// newPeerRounds finds chanos-peers before anything is measured, so that a
// missing one fails the suite at once.
func newPeerRounds(cfg CompareConfig, suite string) (*peerRounds, error) {
	if cfg.Peers == "" {
		p, err := FindPeers()
		if err != nil {
			return nil, err
		}
		cfg.Peers = p
	}
	return &peerRounds{cfg: cfg, suite: suite, runs: map[string][]Result{}}, nil
}

// round runs the peers once and keeps their results. A round in which
// some peer failed keeps the results it has and the error, and the
// rounds go on; only the end of ctx ends them.
func (p *peerRounds) round(ctx context.Context, n int) error {
	p.cfg.progress("%s: run %d/%d: the peers", p.suite, n+1, p.cfg.repeat())
	err := RunPeerSuite(ctx, p.cfg, p.suite, func(r Result) error {
		k := r.Key()
		if _, ok := p.runs[k]; !ok {
			p.keys = append(p.keys, k)
		}
		p.runs[k] = append(p.runs[k], r)
		return nil
	})
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		p.errs = append(p.errs, fmt.Errorf("run %d: %w", n+1, err))
	}
	return nil
}

// emit emits the median run of each peer case, then the rounds' errors.
func (p *peerRounds) emit(emit func(Result) error) error {
	for _, k := range p.keys {
		if err := emit(Median(p.runs[k])); err != nil {
			return err
		}
	}
	return errors.Join(p.errs...)
}

// runChanosCases runs cases round-robin cfg.repeat() times, each on a
// fresh connection, with a round of the peers after chanos's cases in
// every round; then it emits the median run of each chanos case, then of
// each peer case.
func runChanosCases(ctx context.Context, cfg *CompareConfig, suite string, cases []compareCase, peers *peerRounds, emit func(Result) error) error {
	cw, err := newCompareWorld(ctx, cfg)
	if err != nil {
		return err
	}
	defer cw.close()
	warmup, dur := cfg.times()
	runs := make([][]Result, len(cases))
	for round := range cfg.repeat() {
		for i, c := range cases {
			cfg.progress("%s: run %d/%d case %d/%d: %s", suite, round+1, cfg.repeat(), i+1, len(cases), c.key())
			r, err := runChanosCase(ctx, cw, c, warmup, dur)
			if err != nil {
				return fmt.Errorf("%s case %s: %w", suite, c.key(), err)
			}
			r.Suite, r.Case, r.Transport, r.Peers, r.Size = suite, c.kase, c.transport, c.peers, c.size
			r.InProcess = c.transport == "local"
			runs[i] = append(runs[i], r)
		}
		if err := peers.round(ctx, round); err != nil {
			return err
		}
	}
	for i := range cases {
		if err := emit(Median(runs[i])); err != nil {
			return err
		}
	}
	return peers.emit(emit)
}

func runChanosCase(ctx context.Context, cw *compareWorld, c compareCase, warmup, dur time.Duration) (Result, error) {
	conn, err := cw.connect(ctx, c.transport)
	if err != nil {
		return Result{}, err
	}
	defer conn.Close()
	// The CPU of both sides: this process, and the server process when
	// the case crosses to it.
	var server int
	if c.transport == "ump" {
		server = cw.server.Process.Pid
	}
	switch c.kase {
	case "rtt":
		return bounceRTT(ctx, conn, c.size, warmup, dur, server)
	case "stream":
		return dataStream(ctx, conn, c.size, warmup, dur, server)
	}
	return Result{}, fmt.Errorf("unknown case %q", c.kase)
}

// bounceRTT times round trips of the bounce rpc with a payload of size
// bytes (at most 64 KiB, the IDL's bound): warmup, then dur of measured
// round trips, each timed, with the CPU of this process and of process
// server (if not 0) over them.
func bounceRTT(ctx context.Context, c *pingpong.Conn, size int, warmup, dur time.Duration, server int) (Result, error) {
	if size > pingpong.MaxBouncePayloadLen {
		return Result{}, fmt.Errorf("bounce payload of %d bytes: the IDL allows %d", size, pingpong.MaxBouncePayloadLen)
	}
	payload := make([]byte, size)
	// The reply lands in one slice, reused: BounceAppend, as a caller that
	// cares for allocations would make the call (the peers reuse their
	// buffers too).
	var reply []byte
	op := func(i int) error {
		if size >= 8 {
			binary.LittleEndian.PutUint64(payload, uint64(i))
		}
		var err error
		if reply, err = c.BounceAppend(ctx, payload, reply[:0]); err != nil {
			return err
		}
		if len(reply) != size || size >= 8 && binary.LittleEndian.Uint64(reply) != uint64(i) {
			return fmt.Errorf("bounce %d: the reply differs (%d bytes)", i, len(reply))
		}
		return nil
	}
	end := nanotime() + int64(warmup)
	for i := 0; i < 20 || nanotime() < end; i++ {
		if err := op(i); err != nil {
			return Result{}, err
		}
	}
	samples := make([]int64, 0, 1<<16)
	cpu := startCPU(server)
	t0 := nanotime()
	prev, end := t0, t0+int64(dur)
	for i := 0; prev < end || len(samples) < 20; i++ {
		if err := op(i); err != nil {
			return Result{}, err
		}
		t := nanotime()
		samples = append(samples, t-prev)
		prev = t
	}
	r := rttResult(samples, prev-t0, nil)
	r.CPUPercent = cpu.percent(prev - t0)
	return r, nil
}

// dataStream sends data messages of size bytes one way for warmup and
// then for dur, each phase ended by an acknowledgement that must count
// every message and byte sent; the figures are from the first measured
// send to the acknowledgement, the CPU that of this process and of
// process server (if not 0).
func dataStream(ctx context.Context, c *pingpong.Conn, size int, warmup, dur time.Duration, server int) (Result, error) {
	if size > pingpong.MaxDataPayloadLen {
		return Result{}, fmt.Errorf("data payload of %d bytes: the IDL allows %d", size, pingpong.MaxDataPayloadLen)
	}
	m := &pingpong.Data{Payload: make([]byte, size)}
	phase := func(d time.Duration) (n uint64, ns int64, err error) {
		t0 := nanotime()
		for end := t0 + int64(d); n < 20 || nanotime() < end; n++ {
			m.Seq = n
			if err := c.Send(ctx, m); err != nil {
				return 0, 0, fmt.Errorf("send %d: %w", n, err)
			}
		}
		if err := c.Send(ctx, &pingpong.Data{Seq: streamEnd}); err != nil {
			return 0, 0, fmt.Errorf("send the end: %w", err)
		}
		ack, err := c.Receive(ctx)
		if err != nil {
			return 0, 0, fmt.Errorf("receive the ack: %w", err)
		}
		ns = nanotime() - t0
		a, ok := ack.(*pingpong.Data)
		if !ok || len(a.Payload) != 8 {
			return 0, 0, fmt.Errorf("the ack is a %T, not a data message of 8 bytes", ack)
		}
		if a.Seq != n || binary.LittleEndian.Uint64(a.Payload) != n*uint64(size) {
			return 0, 0, fmt.Errorf("sent %d messages, %d bytes; the server counted %d, %d",
				n, n*uint64(size), a.Seq, binary.LittleEndian.Uint64(a.Payload))
		}
		return n, ns, nil
	}
	if _, _, err := phase(warmup); err != nil {
		return Result{}, fmt.Errorf("warm-up: %w", err)
	}
	cpu := startCPU(server)
	n, ns, err := phase(dur)
	if err != nil {
		return Result{}, err
	}
	secs := float64(ns) / 1e9
	return Result{
		Iters:      int(n),
		MsgsPerS:   f64(float64(n) / secs),
		BytesPerS:  f64(float64(n) * float64(size) / secs),
		CPUPercent: cpu.percent(ns),
	}, nil
}

// RunPingpong runs the pingpong suite (case rtt): round trips of a payload
// of 8 B to 64 KiB through the generated bounce rpc, over ump to a server
// process and on the local interconnect, in rounds with the peers'. The raw ring's
// 8-byte round trip of the ump suite (rtt-spin, Go to Go, a tenth of that
// suite's count unless UMPScale says otherwise) comes first, as the floor;
// the C spin floor (raw-spin) is in the ump suite, as its fixed count of
// spinning round trips takes minutes on a loaded machine.
func RunPingpong(ctx context.Context, cfg CompareConfig, emit func(Result) error) error {
	peers, err := newPeerRounds(cfg, "pingpong")
	if err != nil {
		return err
	}
	floor := []string{"rtt-spin/ump/go-go/8"}
	scale := cfg.UMPScale
	if scale == 0 {
		scale = 0.1
	}
	cfg.progress("pingpong: the raw ring's floor (ump suite: %s)", strings.Join(floor, ", "))
	err = RunUMP(ctx, UMPConfig{Quick: cfg.Quick, Repeat: cfg.repeat(), Cases: floor, GoPeer: cfg.GoPeer, Scale: scale},
		func(r Result) error {
			r.Suite = "pingpong"
			return emit(r)
		})
	if err != nil {
		return fmt.Errorf("pingpong: raw ring floor: %w", err)
	}
	sizes := cfg.Sizes
	if len(sizes) == 0 {
		sizes = PingpongSizes
	}
	return runChanosCases(ctx, &cfg, "pingpong", chanosCases("rtt", sizes), peers, emit)
}

// RunStream runs the stream suite: data messages of 64 B to 1 MiB sent
// one way, over ump to a server process and on the local interconnect,
// with the receiver acknowledging the end; in rounds with the peers'.
func RunStream(ctx context.Context, cfg CompareConfig, emit func(Result) error) error {
	peers, err := newPeerRounds(cfg, "stream")
	if err != nil {
		return err
	}
	sizes := cfg.Sizes
	if len(sizes) == 0 {
		sizes = StreamSizes
	}
	return runChanosCases(ctx, &cfg, "stream", chanosCases("stream", sizes), peers, emit)
}

// RunRPCCompare runs the rpc suite (RunRPC: generated stubs over ump and
// local beside the raw ring) in rounds with the peers' rpc: gRPC's unary
// call, net/rpc's Call, and request/response over the byte streams.
func RunRPCCompare(ctx context.Context, cfg CompareConfig, emit func(Result) error) error {
	peers, err := newPeerRounds(cfg, "rpc")
	if err != nil {
		return err
	}
	dcfg := DomainConfig{Quick: cfg.Quick, Repeat: cfg.repeat(), Progress: cfg.Progress, Server: cfg.RPCServer}
	if err := runRPC(ctx, dcfg, peers.round, emit); err != nil {
		return err
	}
	return peers.emit(emit)
}

// CompareSummary prints, for the pingpong, stream and rpc suites' results
// among results, how many times faster chanos is than each peer, with the
// goals of issue 6 marked met or NOT met. Like is compared with like:
// chanos over ump, between two processes, with the peers that cross
// processes too; chanos's local interconnect, within one process, with the
// in-process peer (the Go channel) only (Result.InProcess).
func CompareSummary(w io.Writer, results []Result) {
	find := func(suite, kase, transport string, size int) *Result {
		for i := range results {
			r := &results[i]
			if r.Suite == suite && r.Case == kase && r.Transport == transport && r.Size == size {
				return r
			}
		}
		return nil
	}
	// The peers seen, by where they run: a peer's results are all in one
	// process or all across two.
	var crossPeers, inPeers []string
	for _, r := range results {
		if isChanos(r.Transport) || r.Case == "rtt-spin" ||
			!(r.Suite == "pingpong" || r.Suite == "stream" || r.Suite == "rpc" && r.Case == "rpc") {
			continue
		}
		list := &crossPeers
		if r.InProcess {
			list = &inPeers
		}
		if !slices.Contains(*list, r.Transport) {
			*list = append(*list, r.Transport)
		}
	}
	subjects := []struct {
		transport, where string
		peers            []string
	}{
		{"ump", "between processes", crossPeers},
		{"local", "in one process", inPeers},
	}
	goals := map[string]float64{"shmipc-go": 20, "grpc-uds": 100, "uds": 50}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	printed := false
	header := func(s string) {
		if printed {
			fmt.Fprintln(tw, "\t\t\t")
		}
		fmt.Fprintln(tw, s)
		printed = true
	}
	p50 := func(r *Result) (float64, bool) {
		if r == nil || r.RTTp50 == nil || *r.RTTp50 <= 0 {
			return 0, false
		}
		return *r.RTTp50, true
	}

	// Round trips: peer time / chanos time, at each size.
	for _, sub := range subjects {
		var sizes []int
		for _, r := range results {
			if r.Suite == "pingpong" && r.Case == "rtt" && r.Transport == sub.transport && !slices.Contains(sizes, r.Size) {
				sizes = append(sizes, r.Size)
			}
		}
		if len(sizes) == 0 || len(sub.peers) == 0 {
			continue
		}
		slices.Sort(sizes)
		head := "pingpong, " + sub.where + ": peer rtt p50 / chanos " + sub.transport + " rtt p50 (x faster)"
		for _, s := range sizes {
			head += "\t" + sizeName(s)
		}
		if sub.transport == "ump" {
			head += "\tgoal at 8 B"
		}
		header(head + "\t")
		for _, p := range sub.peers {
			line := p
			some := false
			for _, s := range sizes {
				c, ok1 := p50(find("pingpong", "rtt", sub.transport, s))
				o, ok2 := p50(find("pingpong", "rtt", p, s))
				if ok1 && ok2 {
					line += "\t" + ratioString(o/c)
					some = true
				} else {
					line += "\t-"
				}
			}
			if !some {
				continue
			}
			goal := ""
			if g, ok := goals[p]; ok && sub.transport == "ump" {
				c, ok1 := p50(find("pingpong", "rtt", sub.transport, 8))
				o, ok2 := p50(find("pingpong", "rtt", p, 8))
				switch {
				case ok1 && ok2:
					goal = fmt.Sprintf(">= %.0f (%s)", g, verdict(o/c >= g))
				default:
					goal = fmt.Sprintf(">= %.0f (no 8 B figures)", g)
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t\n", line, goal)
		}
	}

	// Streaming: chanos bytes/s / peer bytes/s, at each size.
	for _, sub := range subjects {
		var sizes []int
		for _, r := range results {
			if r.Suite == "stream" && r.Case == "stream" && r.Transport == sub.transport && r.BytesPerS != nil && !slices.Contains(sizes, r.Size) {
				sizes = append(sizes, r.Size)
			}
		}
		if len(sizes) == 0 || len(sub.peers) == 0 {
			continue
		}
		slices.Sort(sizes)
		head := "stream, " + sub.where + ": chanos " + sub.transport + " bytes/s / peer bytes/s (x faster)"
		for _, s := range sizes {
			head += "\t" + sizeName(s)
		}
		header(head + "\t")
		for _, p := range sub.peers {
			line := p
			some := false
			for _, s := range sizes {
				c, o := find("stream", "stream", sub.transport, s), find("stream", "stream", p, s)
				if c != nil && o != nil && c.BytesPerS != nil && o.BytesPerS != nil && *o.BytesPerS > 0 {
					line += "\t" + ratioString(*c.BytesPerS / *o.BytesPerS)
					some = true
				} else {
					line += "\t-"
				}
			}
			if some {
				fmt.Fprintf(tw, "%s\t\n", line)
			}
		}
	}

	// Rpc: peer call p50 / chanos rpc p50.
	for _, sub := range subjects {
		c, ok := p50(find("rpc", "rpc", sub.transport, 8))
		if !ok {
			continue
		}
		var lines []string
		for _, p := range sub.peers {
			if o, ok := p50(find("rpc", "rpc", p, 8)); ok {
				lines = append(lines, fmt.Sprintf("%s\t%s\t", p, ratioString(o/c)))
			}
		}
		if len(lines) == 0 {
			continue
		}
		header("rpc, " + sub.where + ": peer call p50 / chanos rpc over " + sub.transport + " p50 (x faster)\t8 B\t")
		for _, l := range lines {
			fmt.Fprintln(tw, l)
		}
	}
	tw.Flush()
}

// isChanos reports whether transport is one of chanos's interconnects.
func isChanos(transport string) bool { return transport == "ump" || transport == "local" }

// ratioString formats a ratio with three significant digits or so.
func ratioString(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	case v >= 0.1:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.3f", v)
}

func sizeName(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

// RPCCompareSummary prints the rpc suite's own ratios (DomainSummary) and
// chanos's against the peers (CompareSummary).
func RPCCompareSummary(w io.Writer, results []Result) {
	DomainSummary(w, results)
	fmt.Fprintln(w)
	CompareSummary(w, results)
}

// Plot writes a chart of results to file (PNG or SVG, by its extension)
// by piping them as JSON lines to `chanos-peers plot --out FILE`: the
// plotting library lives in the peers module, not in chanos's.
func Plot(ctx context.Context, peers string, results []Result, file string) error {
	if peers == "" {
		p, err := FindPeers()
		if err != nil {
			return fmt.Errorf("plot: %w", err)
		}
		peers = p
	}
	var in bytes.Buffer
	for _, r := range results {
		if err := WriteJSON(&in, r); err != nil {
			return fmt.Errorf("plot: %w", err)
		}
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, peers, "plot", "--out", file)
	cmd.Stdin, cmd.Stderr = &in, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = err.Error()
		}
		return fmt.Errorf("plot %s: %s", file, msg)
	}
	return nil
}
