package peers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"
)

// The suites, as named on the command line and in results.
const (
	SuitePingPong = "pingpong"
	SuiteStream   = "stream"
	SuiteRPC      = "rpc"
	SuiteClients  = "clients"
)

// Suites returns the suites that "all" runs, in order.
func Suites() []string { return []string{SuitePingPong, SuiteStream, SuiteRPC, SuiteClients} }

// caseOf is each suite's case label.
var caseOf = map[string]string{
	SuitePingPong: "rtt",
	SuiteStream:   "stream",
	SuiteRPC:      "rpc",
	SuiteClients:  "clients",
}

// peersLabel is every peer's "peers" field: a Go client and a Go server.
const peersLabel = "go-go"

// Options say what Run measures and for how long.
type Options struct {
	Suites      []string // of Suites(); empty means all
	Transports  []string // of Transports(); empty means all
	PingSizes   []int    // payload sizes of pingpong
	StreamSizes []int    // message sizes of stream
	RPCSize     int      // payload size of rpc and clients
	Clients     []int    // client counts of clients

	// Warmup is run, unmeasured, before each measurement; Duration is how
	// long each measurement runs (a clients measurement does a fixed
	// number of round trips, the number one client does in Duration).
	Warmup   time.Duration
	Duration time.Duration
	// MaxSamples bounds the round trips of one measurement.
	MaxSamples int

	// Exe is the binary that serves as peer server processes; empty means
	// this process's own executable.
	Exe string
	// Progress, if set, is called before each measurement.
	Progress func(Progress)
}

// Progress reports that measurement Done+1 of Total, described by What,
// is starting.
type Progress struct {
	Done, Total int
	What        string
}

// DefaultOptions are the full run: about a minute and a half for all
// suites on a 2-core machine.
func DefaultOptions() Options {
	return Options{
		PingSizes:   []int{8, 64, 512, 4 << 10, 64 << 10},
		StreamSizes: []int{64, 4 << 10, 64 << 10, 1 << 20},
		RPCSize:     8,
		Clients:     []int{1, 2, 3, 4},
		Warmup:      100 * time.Millisecond,
		Duration:    500 * time.Millisecond,
		MaxSamples:  4 << 20,
	}
}

// QuickOptions are DefaultOptions with short measurements: all suites in
// about fifteen seconds.
func QuickOptions() Options {
	o := DefaultOptions()
	o.Warmup = 20 * time.Millisecond
	o.Duration = 80 * time.Millisecond
	return o
}

// minSamples is the fewest round trips or messages a measurement makes,
// however long they take.
const minSamples = 20

type job struct {
	suite string
	peer  Peer
	size  int
	n     int // clients
}

func (j job) String() string {
	s := j.suite + " " + j.peer.Transport()
	if j.suite == SuiteClients {
		return fmt.Sprintf("%s clients=%d", s, j.n)
	}
	return s + " " + FormatSize(j.size)
}

// Run makes the measurements o asks for, one at a time, and passes each
// result to emit as soon as it is made. A measurement that fails is
// reported in the returned error and the others still run.
func Run(ctx context.Context, o Options, emit func(Result)) error {
	suites := o.Suites
	if len(suites) == 0 {
		suites = Suites()
	}
	names := o.Transports
	if len(names) == 0 {
		names = Transports()
	}
	var ps []Peer
	for _, name := range names {
		p, err := Lookup(name)
		if err != nil {
			return err
		}
		ps = append(ps, p)
	}
	if o.Exe == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("finding this executable to run servers: %w", err)
		}
		o.Exe = exe
	}
	if o.MaxSamples < minSamples {
		o.MaxSamples = minSamples
	}
	if o.RPCSize < 1 {
		o.RPCSize = 8
	}

	var jobs []job
	for _, s := range suites {
		if _, ok := caseOf[s]; !ok {
			return fmt.Errorf("unknown suite %q", s)
		}
		for _, p := range ps {
			switch s {
			case SuitePingPong:
				for _, size := range o.PingSizes {
					jobs = append(jobs, job{suite: s, peer: p, size: size})
				}
			case SuiteStream:
				for _, size := range o.StreamSizes {
					jobs = append(jobs, job{suite: s, peer: p, size: size})
				}
			case SuiteRPC:
				jobs = append(jobs, job{suite: s, peer: p, size: o.RPCSize})
			case SuiteClients:
				for _, n := range o.Clients {
					if n < 1 {
						return fmt.Errorf("bad client count %d", n)
					}
					jobs = append(jobs, job{suite: s, peer: p, size: o.RPCSize, n: n})
				}
			}
		}
	}

	r := &runner{o: o, env: Env{Exe: o.Exe}, fixed: map[string]int{}}
	var errs []error
	for i, j := range jobs {
		if err := ctx.Err(); err != nil {
			errs = append(errs, err)
			break
		}
		if o.Progress != nil {
			o.Progress(Progress{Done: i, Total: len(jobs), What: j.String()})
		}
		res, err := r.run(ctx, j)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", j, err))
			continue
		}
		res.Suite, res.Case, res.Transport, res.Peers = j.suite, caseOf[j.suite], j.peer.Transport(), peersLabel
		res.Size = j.size
		res.Note = noteFor(j.peer, j.suite)
		emit(res)
	}
	return errors.Join(errs...)
}

type runner struct {
	o   Options
	env Env
	// fixed is, per transport, the number of round trips the clients
	// measurements split among their clients.
	fixed map[string]int
}

func (r *runner) run(ctx context.Context, j job) (Result, error) {
	switch j.suite {
	case SuitePingPong:
		return r.roundTrips(ctx, j.peer, j.size, Client.RoundTrip)
	case SuiteRPC:
		return r.roundTrips(ctx, j.peer, j.size, Client.Call)
	case SuiteStream:
		return r.stream(ctx, j.peer, j.size)
	case SuiteClients:
		return r.clients(ctx, j.peer, j.size, j.n)
	}
	return Result{}, fmt.Errorf("unknown suite %q", j.suite)
}

// session is a started server and its connected clients, with a watchdog
// that kills a server process whose measurement hangs.
type session struct {
	srv      Server
	clients  []Client
	watchdog *time.Timer
	timedOut chan struct{}
}

func (r *runner) open(ctx context.Context, p Peer, n, size int) (*session, error) {
	srv, err := p.Start(ctx, r.env, n)
	if err != nil {
		return nil, err
	}
	s := &session{srv: srv, timedOut: make(chan struct{})}
	limit := 10*(r.o.Warmup+r.o.Duration) + 30*time.Second
	s.watchdog = time.AfterFunc(limit, func() {
		close(s.timedOut)
		if k, ok := srv.(interface{ kill() }); ok {
			k.kill()
		}
	})
	payload := makePayload(size)
	for i := range n {
		c, err := srv.Dial(ctx, i)
		if err == nil {
			err = c.SetPayload(payload)
			s.clients = append(s.clients, c)
		}
		if err != nil {
			s.close()
			return nil, fmt.Errorf("client %d: %w", i, err)
		}
	}
	return s, nil
}

// close verifies the clients' paths, ends the server, then closes the
// clients, and reports what went wrong.
func (s *session) close() error {
	var errs []error
	for _, c := range s.clients {
		if v, ok := c.(verifier); ok {
			errs = append(errs, v.Verify())
		}
		if q, ok := c.(quiescer); ok {
			q.quiesce()
		}
	}
	errs = append(errs, s.srv.Close())
	for _, c := range s.clients {
		errs = append(errs, c.Close())
	}
	s.watchdog.Stop()
	select {
	case <-s.timedOut:
		return errors.New("measurement hung: server killed")
	default:
	}
	return errors.Join(errs...)
}

// finish closes s and folds its error into err.
func (s *session) finish(err error) error {
	if cerr := s.close(); err == nil {
		err = cerr
	}
	return err
}

func makePayload(n int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(i*7 + 1)
	}
	return p
}

// warm runs op for the warm-up time (and at least minSamples times) and
// returns how many it ran and how long that took.
func (r *runner) warm(op func() error) (int, time.Duration, error) {
	start := time.Now()
	n := 0
	for n < minSamples || time.Since(start) < r.o.Warmup {
		if err := op(); err != nil {
			return n, 0, fmt.Errorf("warm-up: %w", err)
		}
		n++
	}
	return n, time.Since(start), nil
}

// expect is how many operations, at the warm-up's rate, fit in d, with a
// margin.
func expect(n int, took, d time.Duration) int {
	if took <= 0 {
		return minSamples
	}
	return int(float64(n)*float64(d)/float64(took)*1.25) + minSamples
}

// roundTrips measures op (RoundTrip or Call) on one client for Duration,
// timing each call.
func (r *runner) roundTrips(ctx context.Context, p Peer, size int, op func(Client) error) (res Result, err error) {
	s, err := r.open(ctx, p, 1, size)
	if err != nil {
		return res, err
	}
	defer func() { err = s.finish(err) }()
	c := s.clients[0]
	do := func() error { return op(c) }
	n, took, err := r.warm(do)
	if err != nil {
		return res, err
	}
	cpu := startCPU(s.srv.PID())
	res.InProcess = s.srv.PID() == 0
	samples, elapsed, err := r.timeOps(do, expect(n, took, r.o.Duration), 0)
	if err != nil {
		return res, err
	}
	res.CPUPercent = cpu.percent(elapsed)
	res.Iters = int64(len(samples))
	res.RTTNsP50, res.RTTNsP99 = latencies(samples)
	return res, nil
}

// timeOps runs do, timing each call: count calls or, with count 0, until
// d has passed (and at least minSamples calls are done, and at most
// MaxSamples). hint is how many calls to make room for. It returns each
// call's duration and the total time.
func (r *runner) timeOps(do func() error, hint, count int) ([]int64, time.Duration, error) {
	limit := r.o.MaxSamples
	if count > 0 {
		limit, hint = count, count
	}
	samples := make([]int64, 0, min(hint, limit))
	start := time.Now()
	t0 := start
	for len(samples) < limit {
		if err := do(); err != nil {
			return nil, 0, err
		}
		t1 := time.Now()
		samples = append(samples, int64(t1.Sub(t0)))
		t0 = t1
		if count == 0 && len(samples) >= minSamples && t1.Sub(start) >= r.o.Duration {
			break
		}
	}
	return samples, t0.Sub(start), nil
}

// stream measures one-way messages: the client sends for Duration, then
// asks for an ack that says the server received them all.
func (r *runner) stream(ctx context.Context, p Peer, size int) (res Result, err error) {
	s, err := r.open(ctx, p, 1, size)
	if err != nil {
		return res, err
	}
	defer func() { err = s.finish(err) }()
	c := s.clients[0]
	n, _, err := r.warm(c.Send)
	if err != nil {
		return res, err
	}
	if err := checkAck(c, n, size); err != nil {
		return res, fmt.Errorf("warm-up: %w", err)
	}

	// Reading the clock costs as much as sending a small message on the
	// fastest peers, so small messages look at it every 16 sends.
	every := 16
	if size >= 4<<10 {
		every = 1
	}
	cpu := startCPU(s.srv.PID())
	res.InProcess = s.srv.PID() == 0
	start := time.Now()
	n = 0
	for {
		if err := c.Send(); err != nil {
			return res, err
		}
		n++
		if n%every == 0 && n >= minSamples && time.Since(start) >= r.o.Duration {
			break
		}
	}
	if err := checkAck(c, n, size); err != nil {
		return res, err
	}
	elapsed := time.Since(start)
	res.CPUPercent = cpu.percent(elapsed)
	res.Iters = int64(n)
	res.MsgsPerS = round1(float64(n) / elapsed.Seconds())
	res.BytesPerS = round1(float64(n) * float64(size) / elapsed.Seconds())
	res.TotalNs = int64(elapsed)
	return res, nil
}

func checkAck(c Client, n, size int) error {
	a, err := c.Ack()
	if err != nil {
		return fmt.Errorf("ack: %w", err)
	}
	if a.Msgs != uint64(n) || a.Bytes != uint64(n)*uint64(size) {
		return fmt.Errorf("server received %d messages (%d bytes), sent %d (%d bytes)",
			a.Msgs, a.Bytes, n, n*size)
	}
	return nil
}

// clients measures seed 000's Figure 4.18: one server, n clients (each on
// its own connection, on its own goroutine in this process) splitting a
// fixed number of round trips. The fixed number is what one client does
// in Duration, measured by the first clients run of each transport.
func (r *runner) clients(ctx context.Context, p Peer, size, n int) (Result, error) {
	total := r.fixed[p.Transport()]
	if total == 0 && n != 1 {
		// Calibrate with one client, unreported.
		one, err := r.clientsRun(ctx, p, size, 1, 0)
		if err != nil {
			return one, fmt.Errorf("calibration: %w", err)
		}
		total = int(one.Iters)
		r.fixed[p.Transport()] = total
	}
	res, err := r.clientsRun(ctx, p, size, n, total)
	if err == nil && total == 0 {
		r.fixed[p.Transport()] = int(res.Iters)
	}
	return res, err
}

// clientsRun runs n clients splitting total round trips; with total 0, it
// runs one client for Duration.
func (r *runner) clientsRun(ctx context.Context, p Peer, size, n, total int) (res Result, err error) {
	s, err := r.open(ctx, p, n, size)
	if err != nil {
		return res, err
	}
	defer func() { err = s.finish(err) }()

	type outcome struct {
		samples []int64
		err     error
	}
	out := make([]outcome, n)
	var warmed, finished sync.WaitGroup
	begin := make(chan struct{})
	warmed.Add(n)
	for i, c := range s.clients {
		share := total / n
		if i < total%n {
			share++
		}
		finished.Go(func() {
			nw, took, err := r.warm(c.RoundTrip)
			warmed.Done()
			<-begin
			if err != nil {
				out[i].err = err
				return
			}
			out[i].samples, _, out[i].err = r.timeOps(c.RoundTrip, expect(nw, took, r.o.Duration), share)
		})
	}
	warmed.Wait()
	cpu := startCPU(s.srv.PID())
	res.InProcess = s.srv.PID() == 0
	start := time.Now()
	close(begin)
	finished.Wait()
	elapsed := time.Since(start)
	res.CPUPercent = cpu.percent(elapsed)

	var all []int64
	for i, o := range out {
		if o.err != nil {
			return res, fmt.Errorf("client %d: %w", i, o.err)
		}
		all = append(all, o.samples...)
	}
	if total > 0 && len(all) != total {
		return res, fmt.Errorf("%d round trips done, want %d", len(all), total)
	}
	res.Clients = n
	res.Iters = int64(len(all))
	res.TotalNs = int64(elapsed)
	res.MsgsPerS = round1(float64(len(all)) / elapsed.Seconds())
	res.RTTNsP50, res.RTTNsP99 = latencies(all)
	return res, nil
}

// KnownSuite reports whether s names a suite or "all".
func KnownSuite(s string) bool {
	return s == "all" || slices.Contains(Suites(), s)
}
