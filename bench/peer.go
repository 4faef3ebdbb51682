package bench

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"time"

	"github.com/chanos/chanos/interconnect/ump"
)

// PeerCommand is the hidden `chanos bench` suite name under which the
// chanos binary runs the Go side of a ump benchmark case.
const PeerCommand = "__ump-peer"

// peerSocketFD is the descriptor on which a peer finds its socket.
const peerSocketFD = 3

// peerArgs are the flags shared by the Go peer and the C peer
// (c/tools/ump_bench.c).
type peerArgs struct {
	role, kase, transport string
	size, iters, warmup   int
	spinNS                int64
	maxMsg                int
	idleMS                int
}

func (a *peerArgs) flags() []string {
	return []string{"--case", a.kase, "--transport", a.transport,
		"--size", fmt.Sprint(a.size), "--iters", fmt.Sprint(a.iters), "--warmup", fmt.Sprint(a.warmup),
		"--spin-ns", fmt.Sprint(a.spinNS), "--max-msg", fmt.Sprint(a.maxMsg)}
}

func parsePeerArgs(args []string) (*peerArgs, error) {
	var a peerArgs
	fs := flag.NewFlagSet(PeerCommand, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&a.role, "role", "", "client or server")
	fs.StringVar(&a.kase, "case", "rtt", "rtt, stream, idle, path or path-locked")
	fs.StringVar(&a.transport, "transport", "ump", "ump")
	fs.IntVar(&a.size, "size", 8, "message size")
	fs.IntVar(&a.iters, "iters", 100000, "measured iterations")
	fs.IntVar(&a.warmup, "warmup", 1000, "warm-up iterations")
	fs.Int64Var(&a.spinNS, "spin-ns", 0, "spin window in ns; 0 default, <0 none")
	fs.IntVar(&a.maxMsg, "max-msg", 0, "maximum message size")
	fs.IntVar(&a.idleMS, "idle-ms", 5000, "idle case: how long the receiver stays parked")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if a.role != "client" && a.role != "server" || a.transport != "ump" || a.iters <= 0 {
		return nil, fmt.Errorf("bad peer arguments %q", args)
	}
	return &a, nil
}

// Peer runs the Go side of one ump benchmark case, as started by RunUMP:
// its socket is descriptor 3, and a client writes its result as one JSON
// object on out.
func Peer(ctx context.Context, args []string, out io.Writer) error {
	a, err := parsePeerArgs(args)
	if err != nil {
		return err
	}
	if a.kase == "path" || a.kase == "path-locked" {
		r, err := pathClient(ctx, a)
		if err != nil {
			return err
		}
		return WriteJSON(out, r)
	}
	sock, err := ump.FileConn(os.NewFile(peerSocketFD, "bench-socket"))
	if err != nil {
		return err
	}
	o := &ump.Options{MaxMessageSize: a.maxMsg, SpinWindow: time.Duration(a.spinNS)}
	hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var c *ump.Conn
	if a.role == "client" {
		c, err = ump.Create(hctx, sock, o)
	} else {
		c, err = ump.Attach(hctx, sock, o)
	}
	if err != nil {
		return err
	}
	defer c.Close()
	if a.role == "server" {
		return serve(ctx, a, c)
	}
	var r Result
	switch a.kase {
	case "rtt":
		r, err = rttClient(ctx, a, c)
	case "stream":
		r, err = streamClient(ctx, a, c)
	case "idle":
		r, err = idleClient(ctx, a, c)
	default:
		err = fmt.Errorf("unknown case %q", a.kase)
	}
	if err != nil {
		return err
	}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "%s\n", b)
	return err
}

// rttClient times round trips of a.size bytes (the server echoes): a.iters
// one by one, for p50, p99 and the mean, then a.iters more in windows of
// RTTWindow, for the window figure, with one clock read per window.
// ump_bench.c's ump_rtt_client is its C twin. (It is timeRTT written out,
// timeWindows included: their trip is an indirect call, which the C
// twin's round trip is not; trip here is inlined.)
func rttClient(ctx context.Context, a *peerArgs, c *ump.Conn) (Result, error) {
	msg := make([]byte, a.size)
	trip := func(i int) error {
		if len(msg) >= 8 {
			binary.LittleEndian.PutUint64(msg, uint64(i))
		}
		if err := c.SendExclusive(ctx, msg); err != nil {
			return err
		}
		m, err := c.ReceiveExclusive(ctx)
		if err != nil {
			return err
		}
		if len(m) != len(msg) || len(m) >= 8 && binary.LittleEndian.Uint64(m) != uint64(i) {
			return fmt.Errorf("round trip %d: the echo differs", i)
		}
		return nil
	}
	for i := range a.warmup {
		if err := trip(i); err != nil {
			return Result{}, err
		}
	}
	samples := make([]int64, a.iters)
	t0 := nanotime()
	prev := t0
	for i := range samples {
		if err := trip(i); err != nil {
			return Result{}, err
		}
		t := nanotime()
		samples[i] = t - prev
		prev = t
	}
	total := prev - t0
	windows := make([]int64, max(1, a.iters/RTTWindow))
	prev = nanotime()
	for w := range windows {
		for i := range RTTWindow {
			if err := trip(w*RTTWindow + i); err != nil {
				return Result{}, err
			}
		}
		t := nanotime()
		windows[w], prev = t-prev, t
	}
	return rttResult(samples, total, windows), nil
}

// pathClient is the path case, alone in its process: one goroutine holds
// both ends of a ring pair and bounces a message (send, receive, send
// back, receive), so what it times is the code of a round trip, with
// nothing to wait for and no cache line leaving the core. It times
// windows of RTTWindow bounces, not each: a clock read would cost about
// as much as a bounce. c/tools/ump_bench.c's run_path is its C twin. Like
// every case of this peer it calls SendExclusive and ReceiveExclusive,
// whose contract is the C calls' (the caller serializes); path-locked
// calls Send and Receive, which any number of goroutines may call at
// once, to show what that costs.
func pathClient(ctx context.Context, a *peerArgs) (Result, error) {
	x, y, err := ump.Pipe(&ump.Options{MaxMessageSize: a.maxMsg, SpinWindow: time.Duration(a.spinNS)})
	if err != nil {
		return Result{}, err
	}
	defer x.Close()
	defer y.Close()
	msg := make([]byte, a.size)
	check := func(m []byte, err error) error {
		if err == nil && len(m) != len(msg) {
			err = fmt.Errorf("bounce: %d bytes came back of %d", len(m), len(msg))
		}
		return err
	}
	bounce := func(int) error { // C's contract: one goroutine per direction
		if err := x.SendExclusive(ctx, msg); err != nil {
			return err
		}
		m, err := y.ReceiveExclusive(ctx)
		if err == nil {
			err = y.SendExclusive(ctx, m)
		}
		if err != nil {
			return err
		}
		return check(x.ReceiveExclusive(ctx))
	}
	if a.kase == "path-locked" {
		bounce = func(int) error {
			if err := x.Send(ctx, msg); err != nil {
				return err
			}
			m, err := y.Receive(ctx)
			if err == nil {
				err = y.Send(ctx, m)
			}
			if err != nil {
				return err
			}
			return check(x.Receive(ctx))
		}
	}
	for i := range a.warmup {
		if err := bounce(i); err != nil {
			return Result{}, err
		}
	}
	windows := make([]int64, max(1, a.iters/RTTWindow))
	total, err := timeWindows(windows, bounce)
	if err != nil {
		return Result{}, err
	}
	n := len(windows) * RTTWindow
	return Result{
		Iters:     n,
		RTTMean:   f64(float64(total) / float64(n)),
		RTTWindow: f64(windowMedian(windows, 1) / RTTWindow),
	}, nil
}

// timeWindows runs trip len(windows) times RTTWindow times, i counting
// from 0, and stores the time each window of RTTWindow took in windows:
// one clock read per window. It returns the time of all of them.
func timeWindows(windows []int64, trip func(i int) error) (int64, error) {
	t0 := nanotime()
	prev := t0
	for w := range windows {
		for i := range RTTWindow {
			if err := trip(w*RTTWindow + i); err != nil {
				return 0, err
			}
		}
		t := nanotime()
		windows[w], prev = t-prev, t
	}
	return prev - t0, nil
}

// rttResult summarizes round-trip samples in ns, given in the order they
// were taken and taking total ns in all, and windows, the times of runs of
// RTTWindow round trips timed whole (see Result.RTTWindow). Without
// windows, the samples' own windows make the window figure.
func rttResult(samples []int64, total int64, windows []int64) Result {
	var w float64
	if len(windows) > 0 {
		w = windowMedian(windows, 1) / RTTWindow
	} else {
		w = windowMedian(samples, RTTWindow)
	}
	slices.Sort(samples)
	n := len(samples)
	return Result{
		Iters:     n,
		RTTp50:    f64(float64(samples[n/2])),
		RTTp99:    f64(float64(samples[n*99/100])),
		RTTMean:   f64(float64(total) / float64(n)),
		RTTWindow: f64(w),
	}
}

// RTTWindow is the number of consecutive round trips whose mean is one
// sample of Result.RTTWindow.
const RTTWindow = 100

// windowMedian returns the median, over the windows of size consecutive
// samples (fewer when there are less than ten windows' worth, so that
// there are ten), of each window's mean. The last partial window is left
// out.
func windowMedian(samples []int64, size int) float64 {
	size = max(1, min(size, len(samples)/10))
	means := make([]float64, 0, len(samples)/size)
	for i := 0; i+size <= len(samples); i += size {
		var sum int64
		for _, s := range samples[i : i+size] {
			sum += s
		}
		means = append(means, float64(sum)/float64(size))
	}
	if len(means) == 0 {
		return 0
	}
	slices.Sort(means)
	return means[len(means)/2]
}

func streamClient(ctx context.Context, a *peerArgs, c *ump.Conn) (Result, error) {
	msg := make([]byte, a.size)
	var t0 int64
	for _, count := range []int{a.warmup, a.iters} {
		t0 = nanotime()
		for range count {
			if err := c.SendExclusive(ctx, msg); err != nil {
				return Result{}, err
			}
		}
		if _, err := c.ReceiveExclusive(ctx); err != nil { // the acknowledgement
			return Result{}, err
		}
	}
	secs := float64(nanotime()-t0) / 1e9
	return Result{
		Iters:     a.iters,
		MsgsPerS:  f64(float64(a.iters) / secs),
		BytesPerS: f64(float64(a.iters) * float64(a.size) / secs),
	}, nil
}

func idleClient(ctx context.Context, a *peerArgs, c *ump.Conn) (Result, error) {
	select {
	case <-time.After(time.Duration(a.idleMS) * time.Millisecond):
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
	if err := c.SendExclusive(ctx, []byte("report")); err != nil {
		return Result{}, err
	}
	m, err := c.ReceiveExclusive(ctx)
	if err != nil {
		return Result{}, err
	}
	if len(m) != 8 {
		return Result{}, fmt.Errorf("idle report of %d bytes", len(m))
	}
	return Result{Iters: 1, CPUPercent: f64(math.Float64frombits(binary.LittleEndian.Uint64(m)))}, nil
}

// serve is the server side of every case: for stream it counts and
// acknowledges, for idle it measures the CPU it uses while parked, and
// then it echoes until the client closes.
func serve(ctx context.Context, a *peerArgs, c *ump.Conn) error {
	switch a.kase {
	case "stream":
		for _, count := range []int{a.warmup, a.iters} {
			for range count {
				if _, err := c.ReceiveExclusive(ctx); err != nil {
					return err
				}
			}
			if err := c.SendExclusive(ctx, []byte("ack")); err != nil {
				return err
			}
		}
	case "idle":
		cpu0, t0 := cpuTime(), nanotime()
		if _, err := c.ReceiveExclusive(ctx); err != nil {
			return err
		}
		pct := 100 * float64(cpuTime()-cpu0) / float64(nanotime()-t0)
		if err := c.SendExclusive(ctx, binary.LittleEndian.AppendUint64(nil, math.Float64bits(pct))); err != nil {
			return err
		}
	}
	for {
		m, err := c.ReceiveExclusive(ctx)
		if errors.Is(err, ump.ErrClosed) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := c.SendExclusive(ctx, m); err != nil {
			return err
		}
	}
}
