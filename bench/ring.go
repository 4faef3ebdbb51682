package bench

// The ring suite: seed 000's concurrency benchmark (§4.2, Figures 4.9 to
// 4.12) with the ring's stages in separate processes. N stages form a
// ring; stage 0 sends a message whose payload is 1, every other stage
// forwards what it receives to the next one with the payload incremented,
// so the payload that comes back to stage 0 is N; stage 0 times each full
// trip. The transports:
//
//   - ump: stages 1..N-1 are processes (this executable under
//     RingStageCommand), each a chanos domain of a private monitor in this
//     process; stage i exports ring.<run>.<i> (pingpong) and connects to
//     stage i+1 by name, so every hop is a ump connection.
//   - local: the same ring of N goroutines in one domain: every hop is a
//     local connection.
//   - go-chan: the seed's original, N goroutines and unbuffered channels.
//   - pipe: stages 1..N-1 are processes, linked by pipes, forwarding an
//     8-byte integer with read(2) and write(2): the kernel baseline.
//
// Stage 0 is this process for every transport. The trip is then timed by
// the same code, with the same clock, in the same process for all four,
// and no second channel is needed to bring the samples back; it is also
// where the seed put the timing (its first goroutine). The cost is that
// this process also holds the (idle) monitor.

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/interfaces/pingpong"
)

// RingStageCommand is the hidden `chanos bench` suite name under which the
// chanos binary runs one stage of the ring suite (see RingStage).
const RingStageCommand = "__ring-stage"

// Default ring sizes and transports of the ring suite.
var (
	RingSizes      = []int{2, 4, 8}
	RingQuickSizes = []int{2, 4}
	RingTransports = []string{"ump", "local", "go-chan", "pipe"}
)

// RingConfig configures RunRing.
type RingConfig struct {
	// Quick uses RingQuickSizes, shorter measurements and one run.
	Quick bool
	// Repeat runs every case this many times, round-robin over the cases,
	// and reports the median run. Zero means 1 with Quick, else 3.
	Repeat int
	// Cases, if not empty, selects cases whose key contains one of these
	// strings. The key is case/transport/peers/size/stages, for example
	// ring/ump/go/8/4.
	Cases []string
	// Sizes are the ring sizes (stages, stage 0 included); empty means
	// RingSizes, or RingQuickSizes with Quick.
	Sizes []int
	// Transports, if not empty, replaces RingTransports.
	Transports []string
	// Warmup and Duration are the times of each run's warm-up and
	// measurement; zero means 100 ms and 500 ms (Quick: 20 ms and 80 ms).
	Warmup, Duration time.Duration
	// MinTrips is the least number of timed trips per run, however long
	// they take; zero means 100, the seed's count (Quick: 20).
	MinTrips int
	// Progress, if not nil, receives a line per run as it starts.
	Progress io.Writer
	// Stage is the command that runs RingStage; nil means this executable
	// with RingStageCommand.
	Stage []string
}

// ringCase is one case of the ring suite.
type ringCase struct {
	transport string
	stages    int
}

func (c ringCase) key() string { return fmt.Sprintf("ring/%s/go/8/%d", c.transport, c.stages) }

// ringSetupTimeout bounds the start of a ring: processes, joins, binds.
const ringSetupTimeout = 30 * time.Second

// ringRunTimeout bounds one run, so that a wedged stage cannot hang the
// suite.
const ringRunTimeout = 2 * time.Minute

// ringMaxStages bounds the ring size: every stage of a process ring is a
// process.
const ringMaxStages = 64

// ringTiming is how long a run warms up and measures.
type ringTiming struct {
	warmup, dur time.Duration
	minTrips    int
}

// RunRing runs the ring suite and calls emit with each case's result,
// transport by transport, once all runs are done. A trip whose payload
// does not come back as the ring size fails the suite.
func RunRing(ctx context.Context, cfg RingConfig, emit func(Result) error) error {
	sizes := cfg.Sizes
	if len(sizes) == 0 {
		sizes = RingSizes
		if cfg.Quick {
			sizes = RingQuickSizes
		}
	}
	transports := cfg.Transports
	if len(transports) == 0 {
		transports = RingTransports
	}
	var cases []ringCase
	for _, t := range transports {
		if !slices.Contains(RingTransports, t) {
			return fmt.Errorf("ring: unknown transport %q (have %s)", t, strings.Join(RingTransports, ", "))
		}
		for _, n := range sizes {
			if n < 2 || n > ringMaxStages {
				return fmt.Errorf("ring: a ring has 2 to %d stages, not %d", ringMaxStages, n)
			}
			c := ringCase{t, n}
			if len(cfg.Cases) == 0 || slices.ContainsFunc(cfg.Cases, func(s string) bool { return strings.Contains(c.key(), s) }) {
				cases = append(cases, c)
			}
		}
	}
	if len(cases) == 0 {
		return fmt.Errorf("no ring case matches %q", cfg.Cases)
	}
	repeat := cfg.Repeat
	if repeat <= 0 {
		repeat = 3
		if cfg.Quick {
			repeat = 1
		}
	}
	timing := ringTiming{warmup: 100 * time.Millisecond, dur: 500 * time.Millisecond, minTrips: 100}
	if cfg.Quick {
		timing = ringTiming{warmup: 20 * time.Millisecond, dur: 80 * time.Millisecond, minTrips: 20}
	}
	if cfg.Warmup > 0 {
		timing.warmup = cfg.Warmup
	}
	if cfg.Duration > 0 {
		timing.dur = cfg.Duration
	}
	if cfg.MinTrips > 0 {
		timing.minTrips = cfg.MinTrips
	}

	env := &ringEnv{stage: cfg.Stage, timing: timing}
	if len(env.stage) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("ring: finding this executable for the stages: %w", err)
		}
		env.stage = []string{exe, "bench", RingStageCommand}
	}
	if slices.ContainsFunc(cases, func(c ringCase) bool { return c.transport == "ump" || c.transport == "local" }) {
		if err := env.start(ctx); err != nil {
			return fmt.Errorf("ring: %w", err)
		}
		defer env.close()
	}

	runs := make([][]Result, len(cases))
	for round := range repeat {
		for i, c := range cases {
			if cfg.Progress != nil {
				fmt.Fprintf(cfg.Progress, "ring: run %d/%d case %d/%d: %s\n", round+1, repeat, i+1, len(cases), c.key())
			}
			r, err := env.run(ctx, c)
			if err != nil {
				return fmt.Errorf("ring case %s: %w", c.key(), err)
			}
			r.Suite, r.Case, r.Transport, r.Peers, r.Size, r.Stages = "ring", "ring", c.transport, "go", 8, c.stages
			r.InProcess = c.transport == "local" || c.transport == "go-chan"
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

// ringEnv is what the runs of a ring suite share: a private monitor in
// this process and a domain joined to it (for ump and local), and the
// stage command.
type ringEnv struct {
	dir    string
	d      *chanos.Domain
	stop   func()
	stage  []string
	timing ringTiming
	seq    int // numbers the runs, for unique export names
}

func (e *ringEnv) start(ctx context.Context) error {
	dir, stop, err := privateMonitor(ctx, "chanos-bench-ring-")
	if err != nil {
		return err
	}
	e.dir, e.stop = dir, stop
	if e.d, err = chanos.Join(ctx, chanos.WithDir(dir), chanos.WithProgram("bench-ring")); err != nil {
		e.stop()
		return fmt.Errorf("joining the private monitor: %w", err)
	}
	return nil
}

func (e *ringEnv) close() {
	if e.d != nil {
		e.d.Close()
	}
	if e.stop != nil {
		e.stop()
	}
}

// names returns the export name of each stage of a new run: the run's
// number keeps a run's names apart from those of the run before, whose
// stages may not have been removed from the nameservice yet.
func (e *ringEnv) names(n int) []string {
	e.seq++
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("ring.%d.%d", e.seq, i)
	}
	return names
}

// run runs one case once.
func (e *ringEnv) run(ctx context.Context, c ringCase) (Result, error) {
	ctx, cancel := context.WithTimeout(ctx, ringRunTimeout)
	defer cancel()
	switch c.transport {
	case "ump":
		return e.runUMP(ctx, c.stages)
	case "local":
		return e.runLocal(ctx, c.stages)
	case "go-chan":
		return runGoChanRing(ctx, c.stages, e.timing)
	case "pipe":
		return e.runPipe(ctx, c.stages)
	}
	return Result{}, fmt.Errorf("unknown transport %q", c.transport)
}

// measureRing times trips around a ring of n stages: trip(k) starts the
// k-th trip (k from 1) and returns the payload that came back. It warms up
// for the warm-up time (at least 10 trips, so that every stage has run),
// then times trips one by one for the measurement time and at least
// minTrips trips. A slow configuration thus gets fewer trips, never none:
// past ten times the measurement time it stops at 10. The CPU is that of
// this process and of the stage processes stages over the timed trips.
func measureRing(ctx context.Context, n int, t ringTiming, stages []*ringProc, trip func(k uint32) (uint64, error)) (Result, error) {
	var k uint32
	one := func() error {
		k++
		if k%64 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		v, err := trip(k)
		if err != nil {
			return fmt.Errorf("trip %d: %w", k, err)
		}
		if v != uint64(n) {
			return fmt.Errorf("trip %d: the payload came back as %d, want the ring size %d", k, v, n)
		}
		return nil
	}
	start := nanotime()
	for i := 0; i < 10 || nanotime()-start < int64(t.warmup); i++ {
		if err := one(); err != nil {
			return Result{}, fmt.Errorf("warm-up: %w", err)
		}
	}
	samples := make([]int64, 0, 4096)
	var pids []int
	for _, p := range stages {
		pids = append(pids, p.cmd.Process.Pid)
	}
	cpu := startCPU(pids...)
	t0 := nanotime()
	prev := t0
	for {
		if err := one(); err != nil {
			return Result{}, err
		}
		now := nanotime()
		samples = append(samples, now-prev)
		prev = now
		el := now - t0
		if len(samples) >= t.minTrips && el >= int64(t.dur) || len(samples) >= 10 && el >= 10*int64(t.dur) {
			break
		}
	}
	r := rttResult(samples, prev-t0, nil)
	r.TotalNS = prev - t0
	r.CPUPercent = cpu.percent(prev - t0)
	return r, nil
}

// forwardRing is a stage of a chanos ring: it forwards every ping that
// arrives on in to out with its payload (msg_id) incremented, until in
// ends, which is how a ring is taken down (stage 0 closes its side, and
// the close goes round), or ctx ends.
func forwardRing(ctx context.Context, in, out *pingpong.Conn) error {
	ended := func(err error) bool {
		return ctx.Err() != nil || errors.Is(err, chanos.ErrClosed) || errors.Is(err, chanos.ErrPeerDied)
	}
	for {
		m, err := in.Receive(ctx)
		if err != nil {
			if ended(err) {
				return nil
			}
			return fmt.Errorf("ring stage: receive: %w", err)
		}
		p, ok := m.(*pingpong.Ping)
		if !ok {
			return fmt.Errorf("ring stage: received a %s, want a ping", m.MsgName())
		}
		p.MsgID++
		if err := out.Send(ctx, p); err != nil {
			if ended(err) {
				return nil
			}
			return fmt.Errorf("ring stage: send: %w", err)
		}
	}
}

// ringTrip returns the trip function of stage 0 on a chanos ring: a ping
// carrying the trip number (client_id) and the payload 1 (msg_id) goes
// out, and the payload of the ping that comes back is the result.
func ringTrip(ctx context.Context, in, out *pingpong.Conn) func(k uint32) (uint64, error) {
	msg := &pingpong.Ping{}
	return func(k uint32) (uint64, error) {
		msg.ClientID, msg.MsgID = k, 1
		if err := out.Send(ctx, msg); err != nil {
			return 0, fmt.Errorf("send: %w", err)
		}
		m, err := in.Receive(ctx)
		if err != nil {
			return 0, fmt.Errorf("receive: %w", err)
		}
		p, ok := m.(*pingpong.Ping)
		switch {
		case !ok:
			return 0, fmt.Errorf("received a %s, want a ping", m.MsgName())
		case p.ClientID != k:
			return 0, fmt.Errorf("received the ping of trip %d", p.ClientID)
		}
		return uint64(p.MsgID), nil
	}
}

// runUMP runs a ring whose stages 1..n-1 are processes.
func (e *ringEnv) runUMP(ctx context.Context, n int) (res Result, err error) {
	names := e.names(n)
	l, err := pingpong.Export(ctx, e.d, names[0])
	if err != nil {
		return Result{}, fmt.Errorf("stage 0: %w", err)
	}
	defer l.Close()
	procs, err := e.startStages(ctx, n, func(i int) ([]string, []*os.File) {
		return []string{"--mode", "ump", "--dir", e.dir, "--name", names[i], "--next", names[(i+1)%n]}, nil
	})
	defer func() { err = errors.Join(err, stopStages(procs)) }()
	if err != nil {
		return Result{}, err
	}
	sctx, cancel := context.WithTimeout(ctx, ringSetupTimeout)
	defer cancel()
	out, err := pingpong.Connect(sctx, e.d, names[1])
	if err != nil {
		return Result{}, fmt.Errorf("stage 0: %w", err)
	}
	defer out.Close()
	in, err := l.Accept(sctx)
	if err != nil {
		return Result{}, fmt.Errorf("stage 0: accepting stage %d: %w", n-1, err)
	}
	defer in.Close()
	for _, c := range []*pingpong.Conn{out, in} {
		if got := c.Raw().Interconnect(); got != "ump" {
			return Result{}, fmt.Errorf("stage 0 bound over %s, want ump", got)
		}
	}
	res, err = measureRing(ctx, n, e.timing, procs, ringTrip(ctx, in, out))
	// Closing stage 0's side lets the close go round the ring before the
	// stages' standard input closes.
	out.Close()
	return res, err
}

// runLocal runs a ring of n goroutines in this process, on local
// connections of one domain: stage i exports its name and connects to
// stage i+1's.
func (e *ringEnv) runLocal(ctx context.Context, n int) (Result, error) {
	names := e.names(n)
	ls := make([]*pingpong.Listener, n)
	ins := make([]*pingpong.Conn, n)  // ins[i]: stage i receives from i-1
	outs := make([]*pingpong.Conn, n) // outs[i]: stage i sends to i+1
	defer func() {
		for _, c := range slices.Concat(outs, ins) {
			if c != nil {
				c.Close()
			}
		}
		for _, l := range ls {
			if l != nil {
				l.Close()
			}
		}
	}()
	for i := range n {
		l, err := pingpong.Export(ctx, e.d, names[i])
		if err != nil {
			return Result{}, fmt.Errorf("stage %d: %w", i, err)
		}
		ls[i] = l
	}
	sctx, cancel := context.WithTimeout(ctx, ringSetupTimeout)
	defer cancel()
	for i := range n {
		next := (i + 1) % n
		c, err := pingpong.Connect(sctx, e.d, names[next])
		if err != nil {
			return Result{}, fmt.Errorf("stage %d: %w", i, err)
		}
		outs[i] = c
		if got := c.Raw().Interconnect(); got != "local" {
			return Result{}, fmt.Errorf("stage %d bound over %s, want local", i, got)
		}
		if ins[next], err = ls[next].Accept(sctx); err != nil {
			return Result{}, fmt.Errorf("stage %d: accept: %w", next, err)
		}
	}
	fctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := 1; i < n; i++ {
		wg.Go(func() {
			errs[i] = forwardRing(fctx, ins[i], outs[i])
			// Pass the end on, as a stage process does by exiting.
			outs[i].Close()
		})
	}
	res, err := measureRing(ctx, n, e.timing, nil, ringTrip(ctx, ins[0], outs[0]))
	outs[0].Close()
	stop()
	wg.Wait()
	if err != nil {
		return Result{}, err
	}
	if err := errors.Join(errs...); err != nil {
		return Result{}, err
	}
	return res, nil
}

// runGoChanRing runs the seed's ring: n goroutines (stage 0 is the calling
// one) and unbuffered channels carrying an integer.
func runGoChanRing(ctx context.Context, n int, t ringTiming) (Result, error) {
	chans := make([]chan uint64, n) // chans[i]: into stage i
	for i := range chans {
		chans[i] = make(chan uint64)
	}
	for i := 1; i < n; i++ {
		go func(in <-chan uint64, out chan<- uint64) {
			for v := range in {
				out <- v + 1
			}
			close(out)
		}(chans[i], chans[(i+1)%n])
	}
	res, err := measureRing(ctx, n, t, nil, func(uint32) (uint64, error) {
		chans[1] <- 1
		return <-chans[0], nil
	})
	// The close goes round; once it is back every stage has returned.
	close(chans[1])
	for range chans[0] {
	}
	return res, err
}

// runPipe runs a ring whose stages 1..n-1 are processes linked by pipes:
// pipe i carries stage i's output to stage i+1.
func (e *ringEnv) runPipe(ctx context.Context, n int) (res Result, err error) {
	rs := make([]*os.File, n)
	ws := make([]*os.File, n)
	defer func() {
		for _, f := range slices.Concat(rs, ws) {
			if f != nil {
				f.Close()
			}
		}
	}()
	for i := range n {
		// Blocking descriptors, not os.Pipe's: each stage then makes a
		// plain read(2) or write(2) per message, not the netpoller's
		// dance, as a C program would.
		var fd [2]int
		if err := syscall.Pipe2(fd[:], syscall.O_CLOEXEC); err != nil {
			return Result{}, os.NewSyscallError("pipe2", err)
		}
		rs[i], ws[i] = os.NewFile(uintptr(fd[0]), fmt.Sprintf("ring-pipe-%d-r", i)), os.NewFile(uintptr(fd[1]), fmt.Sprintf("ring-pipe-%d-w", i))
	}
	procs, err := e.startStages(ctx, n, func(i int) ([]string, []*os.File) {
		return []string{"--mode", "pipe"}, []*os.File{rs[i-1], ws[i]}
	})
	defer func() { err = errors.Join(err, stopStages(procs)) }()
	if err != nil {
		return Result{}, err
	}
	// Only the stages may hold their ends: a copy here would keep a stage
	// from seeing the end of its input when the ring is taken down.
	for i := 1; i < n; i++ {
		rs[i-1].Close()
		ws[i].Close()
		rs[i-1], ws[i] = nil, nil
	}
	in, out := rs[n-1], ws[0]
	var buf [8]byte
	res, err = measureRing(ctx, n, e.timing, procs, func(uint32) (uint64, error) {
		binary.LittleEndian.PutUint64(buf[:], 1)
		if _, err := out.Write(buf[:]); err != nil {
			return 0, fmt.Errorf("write: %w", err)
		}
		if _, err := io.ReadFull(in, buf[:]); err != nil {
			return 0, fmt.Errorf("read: %w", err)
		}
		return binary.LittleEndian.Uint64(buf[:]), nil
	})
	// Stage 1 sees the end of its input and exits, closing its output:
	// the end goes round.
	out.Close()
	ws[0] = nil
	return res, err
}

// ringProc is a running stage process.
type ringProc struct {
	stage int
	cmd   *exec.Cmd
	stdin io.Closer
	ready chan error    // the stage's first line, checked
	done  chan struct{} // closed once it has exited
	err   error         // Wait's result, once done
}

// startStages starts stages 1..n-1 with the stage command, the arguments
// and extra files (descriptors 3, 4, ...) that args returns for each, and
// waits until each has printed "ready". It returns the processes started,
// even with an error, for stopStages.
func (e *ringEnv) startStages(ctx context.Context, n int, args func(i int) ([]string, []*os.File)) ([]*ringProc, error) {
	var procs []*ringProc
	for i := 1; i < n; i++ {
		a, files := args(i)
		argv := slices.Concat(e.stage, a)
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Stderr = os.Stderr
		cmd.ExtraFiles = files
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return procs, fmt.Errorf("stage %d: %w", i, err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			stdin.Close()
			return procs, fmt.Errorf("stage %d: %w", i, err)
		}
		if err := cmd.Start(); err != nil {
			stdin.Close()
			stdout.Close()
			return procs, fmt.Errorf("stage %d: starting %s: %w", i, argv[0], err)
		}
		p := &ringProc{stage: i, cmd: cmd, stdin: stdin, ready: make(chan error, 1), done: make(chan struct{})}
		procs = append(procs, p)
		go func() {
			line, err := bufio.NewReader(stdout).ReadString('\n')
			if strings.TrimSpace(line) != "ready" {
				p.ready <- fmt.Errorf("stage %d did not start: %q %v", p.stage, line, err)
			} else {
				p.ready <- nil
			}
			// Wait only now: it closes stdout, which must not happen
			// while the line is being read.
			p.err = cmd.Wait()
			close(p.done)
		}()
	}
	timeout := time.NewTimer(ringSetupTimeout)
	defer timeout.Stop()
	for _, p := range procs {
		select {
		case err := <-p.ready:
			if err != nil {
				return procs, err
			}
		case <-timeout.C:
			return procs, fmt.Errorf("stage %d did not start within %v", p.stage, ringSetupTimeout)
		case <-ctx.Done():
			return procs, ctx.Err()
		}
	}
	return procs, nil
}

// stopStages closes the stages' standard input, which ends them, waits
// for them (killing those that outlast a few seconds) and returns their
// failures.
func stopStages(procs []*ringProc) error {
	for _, p := range procs {
		p.stdin.Close()
	}
	deadline := time.NewTimer(5 * time.Second)
	defer deadline.Stop()
	var errs []error
	for _, p := range procs {
		select {
		case <-p.done:
		case <-deadline.C:
			// Killed, any that remain: the deadline has fired for all.
			for _, q := range procs {
				q.cmd.Process.Kill()
			}
			<-p.done
			errs = append(errs, fmt.Errorf("stage %d did not exit after its input closed; killed", p.stage))
			continue
		}
		if p.err != nil {
			errs = append(errs, fmt.Errorf("stage %d: %w", p.stage, p.err))
		}
	}
	return errors.Join(errs...)
}

// RingStage runs one stage of the ring suite (RingStageCommand) until its
// ring is taken down or its standard input closes (the bench process
// ended). It prints "ready" once it can be connected to.
//
// With --mode ump it joins the monitor in --dir, exports pingpong under
// --name, connects to --next and forwards every ping that arrives with its
// msg_id incremented. With --mode pipe it reads 8-byte little-endian
// integers from descriptor 3 and writes each, incremented, to
// descriptor 4.
func RingStage(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet(RingStageCommand, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	mode := fs.String("mode", "", "ump or pipe")
	dir := fs.String("dir", "", "the monitor's directory (ump)")
	name := fs.String("name", "", "this stage's export name (ump)")
	next := fs.String("next", "", "the next stage's export name (ump)")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%s: %w", RingStageCommand, err)
	}
	switch {
	case *mode == "ump" && (*dir == "" || *name == "" || *next == ""):
		return fmt.Errorf("%s --mode ump needs --dir, --name and --next", RingStageCommand)
	case *mode != "ump" && *mode != "pipe":
		return fmt.Errorf("%s: --mode must be ump or pipe, not %q", RingStageCommand, *mode)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { io.Copy(io.Discard, os.Stdin); cancel() }()
	if *mode == "ump" {
		return ringStageUMP(ctx, *dir, *name, *next)
	}
	// A blocked read(2) does not see ctx: the loop runs aside, and the
	// process ends with this function when stdin closes.
	errc := make(chan error, 1)
	go func() { errc <- ringStagePipe(os.NewFile(3, "ring-in"), os.NewFile(4, "ring-out")) }()
	fmt.Println("ready")
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		return nil
	}
}

func ringStageUMP(ctx context.Context, dir, name, next string) error {
	d, err := chanos.Join(ctx, chanos.WithDir(dir), chanos.WithProgram("bench-ring-stage"))
	if err != nil {
		return fmt.Errorf("ring stage %s: %w", name, err)
	}
	defer d.Close()
	l, err := pingpong.Export(ctx, d, name)
	if err != nil {
		return fmt.Errorf("ring stage %s: %w", name, err)
	}
	defer l.Close()
	fmt.Println("ready")
	// Accept aside: in a ring every stage connects before it is connected
	// to, and the previous stage may bind before or after this one does.
	actx, stop := context.WithCancel(ctx)
	type accepted struct {
		c   *pingpong.Conn
		err error
	}
	acc := make(chan accepted, 1)
	go func() {
		c, err := l.Accept(actx)
		acc <- accepted{c, err}
	}()
	out, err := pingpong.Connect(ctx, d, next)
	if err != nil {
		stop()
		if a := <-acc; a.c != nil {
			a.c.Close()
		}
		if ctx.Err() != nil {
			return nil // taken down before the ring formed
		}
		return fmt.Errorf("ring stage %s: %w", name, err)
	}
	defer out.Close()
	a := <-acc
	stop()
	if a.err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("ring stage %s: accept: %w", name, a.err)
	}
	defer a.c.Close()
	if err := forwardRing(ctx, a.c, out); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// ringStagePipe forwards 8-byte integers from in to out, incremented,
// until in ends.
func ringStagePipe(in, out *os.File) error {
	defer out.Close()
	var buf [8]byte
	for {
		if _, err := io.ReadFull(in, buf[:]); err != nil {
			if err == io.EOF {
				return nil
			}
			return fmt.Errorf("ring stage: read: %w", err)
		}
		binary.LittleEndian.PutUint64(buf[:], binary.LittleEndian.Uint64(buf[:])+1)
		if _, err := out.Write(buf[:]); err != nil {
			if errors.Is(err, syscall.EPIPE) {
				return nil // the next stage is gone: the ring is coming down
			}
			return fmt.Errorf("ring stage: write: %w", err)
		}
	}
}

// RingSummary prints the ring results as seed 000's Figures 4.11 and 4.12
// read: trip time by ring size, per hop (trip / stages), and each
// transport's per-hop time against its like with as many stages, in the
// same run: a Go channel's for the rings in one process (local), a pipe's
// for the rings of processes (ump).
func RingSummary(w io.Writer, results []Result) {
	var rs []Result
	for _, r := range results {
		if r.Suite == "ring" && r.Stages > 0 && r.RTTp50 != nil {
			rs = append(rs, r)
		}
	}
	if len(rs) == 0 {
		return
	}
	hop := func(transport string, inProcess bool, n int) float64 {
		for _, r := range rs {
			if r.Transport == transport && r.InProcess == inProcess && r.Stages == n {
				return *r.RTTp50 / float64(n)
			}
		}
		return 0
	}
	vs := func(v, base float64) string {
		if base <= 0 {
			return "-"
		}
		return ratioString(v/base) + "x"
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "transport\tstages\ttrips\ttrip p50\ttrip p99\tper hop p50\thop / go-chan\thop / pipe\t")
	for _, r := range rs {
		h := *r.RTTp50 / float64(r.Stages)
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t\n", r.Transport, r.Stages, r.Iters,
			ns(r.RTTp50), ns(r.RTTp99), ns(&h), vs(h, hop("go-chan", r.InProcess, r.Stages)), vs(h, hop("pipe", r.InProcess, r.Stages)))
	}
	tw.Flush()
	fmt.Fprintln(w, "\nper hop p50 = trip p50 / stages; above 1x the transport is slower than go-chan (rings in one process)",
		"or pipe (rings of processes).")
	fmt.Fprintln(w, "seed 000, §4.2 (Figures 4.11, 4.12; goroutines and unbuffered channels, 100 runs per size):",
		"latency grew linearly with the ring size, lower on Linux than on Barrelfish; GC pauses caused its standard-deviation spikes.")
}
