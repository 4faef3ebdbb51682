package bench

// The caps suite (issue 22's figures, docs/benchmarks.md "caps suite"):
// descriptors, endpoints and events in messages between processes, each
// beside its raw baseline of the same run, and seed 002's driver
// experiment (examples/driver).

import (
	"bufio"
	"context"
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
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/examples/driver/device"
	"github.com/chanos/chanos/examples/driver/gokbd"
	"github.com/chanos/chanos/interfaces/pingpong"
	"github.com/chanos/chanos/internal/testkit/files"
)

// CapsPeerCommand is the hidden `chanos bench` name under which the chanos
// binary runs the other process of a caps case: CapsPeer.
const CapsPeerCommand = "__caps-peer"

// CapsConfig configures RunCaps.
type CapsConfig struct {
	Quick  bool
	Repeat int // runs per case, round-robin; the median is reported (0: 3)
	// Cases, if not empty, selects cases whose key contains one of these.
	Cases    []string
	Progress io.Writer
	// Peer is the command that runs CapsPeer; nil means this executable
	// with CapsPeerCommand.
	Peer []string
	// Scale multiplies the iteration counts (zero means 1): below 1 for
	// smoke tests.
	Scale float64
	// CBench is the C side of the event-wake/chanos-c and eventfd-c cases
	// (c/tools/caps_bench.c); empty means FindCTool("chanos-caps-bench").
	CBench string
	// CDriver is the C keyboard driver (examples/c/kbd_driver.c); empty
	// means FindCProgram("examples/kbd_driver").
	CDriver string
}

// capsCase is one case of the suite; base names its baseline (a key),
// against which PairedRatio is set round by round.
type capsCase struct {
	kase, transport, peers string
	base                   string
	run                    func(ctx context.Context) (Result, error)
}

func (c *capsCase) key() string { return c.kase + "/" + c.transport + "/" + c.peers + "/0" }

// RunCaps runs the caps suite and calls emit with each case's median run.
func RunCaps(ctx context.Context, cfg CapsConfig, emit func(Result) error) error {
	peer := cfg.Peer
	if len(peer) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		peer = []string{exe, "bench", CapsPeerCommand}
	}
	q := func(full, quick int) int {
		if cfg.Quick {
			return quick
		}
		return full
	}
	iters, warmup := q(20000, 2000), q(2000, 200)
	epIters, epWarmup := q(2000, 300), q(200, 30)
	kbdRepeat := q(60, 12) // the device's script: 30 key events each
	if cfg.Scale > 0 {
		scale := func(n *int) { *n = max(1, int(float64(*n)*cfg.Scale)) }
		for _, n := range []*int{&iters, &warmup, &epIters, &epWarmup, &kbdRepeat} {
			scale(n)
		}
	}
	period := 500 * time.Microsecond

	var fs *filesPeer // started below if a selected case needs it
	var cases []capsCase
	add := func(c capsCase) { cases = append(cases, c) }
	add(capsCase{kase: "rtt-fd", transport: "uds-scm", peers: "go-go", run: func(ctx context.Context) (Result, error) {
		return scmRTT(ctx, peer, warmup, iters)
	}})
	add(capsCase{kase: "rtt-fd", transport: "ump", peers: "go-go", base: "rtt-fd/uds-scm/go-go/0", run: func(ctx context.Context) (Result, error) {
		return fs.dupRTT(ctx, warmup, iters)
	}})
	add(capsCase{kase: "endpoint", transport: "connect", peers: "go-go", run: func(ctx context.Context) (Result, error) {
		return fs.connectRTT(ctx, epWarmup, epIters)
	}})
	add(capsCase{kase: "endpoint", transport: "ump", peers: "go-go", base: "endpoint/connect/go-go/0", run: func(ctx context.Context) (Result, error) {
		return fs.endpointRTT(ctx, epWarmup, epIters)
	}})
	// cBench finds the C side of the event-wake cases once, when a selected
	// case first needs it.
	cBench := func() (string, error) {
		if cfg.CBench == "" {
			p, err := FindCTool("chanos-caps-bench")
			if err != nil {
				return "", fmt.Errorf("the C side: %w (or select other cases with --cases)", err)
			}
			cfg.CBench = p
		}
		return cfg.CBench, nil
	}
	for _, mode := range []string{"parked", "spin"} {
		add(capsCase{kase: "event-wake", transport: "eventfd", peers: mode, run: func(ctx context.Context) (Result, error) {
			return eventRTT(ctx, peer, "eventfd", mode, warmup, iters)
		}})
		add(capsCase{kase: "event-wake", transport: "chanos", peers: mode, base: "event-wake/eventfd/" + mode + "/0", run: func(ctx context.Context) (Result, error) {
			return eventRTT(ctx, peer, "chanos", mode, warmup, iters)
		}})
		// Two C processes, against a raw eventfd ping-pong between two C
		// processes: a C program's processes have no runtime threads that
		// keep a CPU awake between wake-ups, as Go's do.
		add(capsCase{kase: "event-wake", transport: "eventfd-c", peers: mode, run: func(ctx context.Context) (Result, error) {
			tool, err := cBench()
			if err != nil {
				return Result{}, err
			}
			return eventRTTC(ctx, tool, "eventfd", mode, warmup, iters)
		}})
		add(capsCase{kase: "event-wake", transport: "chanos-c", peers: mode, base: "event-wake/eventfd-c/" + mode + "/0", run: func(ctx context.Context) (Result, error) {
			tool, err := cBench()
			if err != nil {
				return Result{}, err
			}
			return eventRTTC(ctx, tool, "event", mode, warmup, iters)
		}})
	}
	var cDriver []string
	for _, lang := range []string{"go", "c"} {
		for _, mode := range []string{"parked", "spin"} {
			add(capsCase{kase: "driver", transport: lang, peers: mode, run: func(ctx context.Context) (Result, error) {
				drv := append(peer[:len(peer):len(peer)], "kbd-driver")
				if lang == "c" {
					if cDriver == nil {
						p, err := cfg.CDriver, error(nil)
						if p == "" {
							if p, err = FindCProgram(filepath.Join("examples", "kbd_driver")); err != nil {
								return Result{}, fmt.Errorf("the C driver: %w (or select other cases with --cases)", err)
							}
						}
						cDriver = []string{p}
					}
					drv = cDriver
				}
				return driverLatency(ctx, device.Experiment{
					Driver: drv, Device: append(peer[:len(peer):len(peer)], "kbd-device"),
					Spin: mode == "spin", Repeat: kbdRepeat, Period: period,
				})
			}})
		}
	}
	if len(cfg.Cases) > 0 {
		cases = slices.DeleteFunc(cases, func(c capsCase) bool {
			return !slices.ContainsFunc(cfg.Cases, func(s string) bool { return strings.Contains(c.key(), s) })
		})
		if len(cases) == 0 {
			return fmt.Errorf("no caps case matches %q", cfg.Cases)
		}
	}
	if slices.ContainsFunc(cases, func(c capsCase) bool { return c.kase == "rtt-fd" && c.transport == "ump" || c.kase == "endpoint" }) {
		var err error
		if fs, err = startFilesPeer(ctx, peer); err != nil {
			return err
		}
		defer fs.close()
	}
	repeat := cfg.Repeat
	if repeat <= 0 {
		repeat = 3
	}
	runs := make([][]Result, len(cases))
	for round := range repeat {
		for i, c := range cases {
			if cfg.Progress != nil {
				fmt.Fprintf(cfg.Progress, "caps: run %d/%d: %s\n", round+1, repeat, c.key())
			}
			r, err := c.run(ctx)
			if err != nil {
				return fmt.Errorf("caps case %s: %w", c.key(), err)
			}
			r.Suite, r.Case, r.Transport, r.Peers = "caps", c.kase, c.transport, c.peers
			runs[i] = append(runs[i], r)
		}
	}
	for i, c := range cases {
		r := Median(runs[i])
		if b := slices.IndexFunc(cases, func(o capsCase) bool { return o.key() == c.base }); c.base != "" && b >= 0 {
			r.PairedRatio = pairedRatio(runs[i], runs[b], p50Of)
		}
		if err := emit(r); err != nil {
			return err
		}
	}
	return nil
}

// p50Of is a result's p50 for pairedRatio (0 when there is none).
func p50Of(r *Result) float64 {
	if r.RTTp50 == nil {
		return 0
	}
	return *r.RTTp50
}

// CapsSummary prints the ratios of issue 22's goals, from one run.
func CapsSummary(w io.Writer, results []Result) {
	find := func(kase, transport, peers string) *Result {
		for i := range results {
			r := &results[i]
			if r.Case == kase && r.Transport == transport && r.Peers == peers {
				return r
			}
		}
		return nil
	}
	line := func(name string, a, b *Result, goal float64) {
		if a == nil || b == nil || a.RTTp50 == nil || b.RTTp50 == nil || *b.RTTp50 == 0 {
			return
		}
		v := *a.RTTp50 / *b.RTTp50
		if goal == 0 {
			fmt.Fprintf(w, "%s (p50): %.2f (no goal)\n", name, v)
			return
		}
		fmt.Fprintf(w, "%s (p50): %.2f (goal <= %.1f: %s)", name, v, goal, verdict(v <= goal))
		if a.PairedRatio != nil {
			fmt.Fprintf(w, "; paired by round: %.2f (%s)", *a.PairedRatio, verdict(*a.PairedRatio <= goal))
		}
		fmt.Fprintln(w)
	}
	line("rtt-fd ump / uds-scm", find("rtt-fd", "ump", "go-go"), find("rtt-fd", "uds-scm", "go-go"), 1.2)
	line("endpoint ump / connect", find("endpoint", "ump", "go-go"), find("endpoint", "connect", "go-go"), 0.5)
	line("event-wake chanos / eventfd, parked", find("event-wake", "chanos", "parked"), find("event-wake", "eventfd", "parked"), 1.1)
	line("event-wake chanos / eventfd, spin", find("event-wake", "chanos", "spin"), find("event-wake", "eventfd", "spin"), 0)
	line("event-wake chanos-c / eventfd-c, parked", find("event-wake", "chanos-c", "parked"), find("event-wake", "eventfd-c", "parked"), 0)
	line("event-wake chanos-c / eventfd-c, spin", find("event-wake", "chanos-c", "spin"), find("event-wake", "eventfd-c", "spin"), 0)
	for _, mode := range []string{"parked", "spin"} {
		line("driver go / c, "+mode, find("driver", "go", mode), find("driver", "c", mode), 0)
	}
}

// filesPeer is a peer process that serves files (testdata/caps/files.if)
// on a connection made with an endpoint, and pingpong under a name on a
// private monitor, which this process has joined.
type filesPeer struct {
	stopMonitor func()
	d           *chanos.Domain
	c           *files.Conn
	cmd         *exec.Cmd
	stdin       io.Closer
}

const capsPingName = "bench.caps.pingpong"

func startFilesPeer(ctx context.Context, peer []string) (*filesPeer, error) {
	dir, stop, err := privateMonitor(ctx, "chanos-bench-caps-")
	if err != nil {
		return nil, err
	}
	p := &filesPeer{stopMonitor: stop}
	raw, ep, err := chanos.NewEndpoint(files.Interface)
	if err != nil {
		p.close()
		return nil, err
	}
	p.c = files.NewConn(raw)
	epFile, err := dupOf(ep)
	ep.Close()
	if err != nil {
		p.close()
		return nil, err
	}
	defer epFile.Close()
	p.cmd = exec.Command(peer[0], append(peer[1:len(peer):len(peer)], "files", dir, capsPingName)...)
	p.cmd.ExtraFiles, p.cmd.Stderr = []*os.File{epFile}, os.Stderr
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		p.close()
		return nil, err
	}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		p.close()
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		p.cmd = nil
		p.close()
		return nil, err
	}
	if line, err := bufio.NewReader(out).ReadString('\n'); strings.TrimSpace(line) != "ready" {
		p.close()
		return nil, fmt.Errorf("caps peer did not start: %q %v", line, err)
	}
	if p.d, err = chanos.Join(ctx, chanos.WithDir(dir), chanos.WithProgram("bench-caps")); err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

func (p *filesPeer) close() {
	if p.c != nil {
		p.c.Close()
	}
	if p.d != nil {
		p.d.Close()
	}
	if p.cmd != nil {
		endByStdin(p.cmd, p.stdin)
	}
	p.stopMonitor()
}

// dupRTT times dup rpcs: a cap to the peer, which hands it back, given
// away: one descriptor each way.
func (p *filesPeer) dupRTT(ctx context.Context, warmup, iters int) (Result, error) {
	f, err := os.Open(os.DevNull)
	if err != nil {
		return Result{}, err
	}
	defer f.Close()
	return timeRTT(warmup, iters, p.cmd.Process.Pid, func(int) error {
		back, err := p.c.Dup(ctx, f)
		if err != nil {
			return err
		}
		if back == nil {
			return errors.New("dup handed back no descriptor")
		}
		return back.Close()
	})
}

// endpointRTT times a fresh pingpong endpoint handed to the peer and the
// first call on it, and its close.
func (p *filesPeer) endpointRTT(ctx context.Context, warmup, iters int) (Result, error) {
	return timeRTT(warmup, iters, p.cmd.Process.Pid, func(i int) error {
		raw, ep, err := chanos.NewEndpoint(pingpong.Interface)
		if err != nil {
			return err
		}
		c := pingpong.NewConn(raw)
		defer c.Close()
		if err := p.c.Send(ctx, &files.Hand{Endpoint: ep, Iface: pingpong.InterfaceName}); err != nil {
			return err
		}
		return echoOnce(ctx, c, i)
	})
}

// connectRTT times Connect by name through the monitor, the first call,
// and the close.
func (p *filesPeer) connectRTT(ctx context.Context, warmup, iters int) (Result, error) {
	return timeRTT(warmup, iters, p.cmd.Process.Pid, func(i int) error {
		c, err := pingpong.Connect(ctx, p.d, capsPingName)
		if err != nil {
			return err
		}
		defer c.Close()
		return echoOnce(ctx, c, i)
	})
}

func echoOnce(ctx context.Context, c *pingpong.Conn, i int) error {
	v, err := c.Echo(ctx, uint64(i))
	if err == nil && v != uint64(i) {
		err = fmt.Errorf("echo %d returned %d", i, v)
	}
	return err
}

// dupOf returns a duplicate of c's descriptor, for a child's ExtraFiles.
func dupOf(c interface {
	SyscallConn() (syscall.RawConn, error)
}) (*os.File, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	nfd, derr := -1, error(nil)
	if err := rc.Control(func(fd uintptr) { nfd, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, os.NewSyscallError("fcntl", derr)
	}
	return os.NewFile(uintptr(nfd), "cap"), nil
}

// rttTrips is how many round trips timeRTT makes: what a peer that stops
// by count must answer.
func rttTrips(warmup, iters int) int { return warmup + iters + max(1, iters/RTTWindow)*RTTWindow }

// runPeerCase starts the peer with args and the descriptors extra, runs
// measure, and waits for the peer, which ends once it has answered its
// count.
func runPeerCase(ctx context.Context, peer []string, args []string, extra []*os.File, measure func(pid int) (Result, error)) (Result, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, peer[0], append(peer[1:len(peer):len(peer)], args...)...)
	cmd.ExtraFiles, cmd.Stderr = extra, os.Stderr
	if err := cmd.Start(); err != nil {
		return Result{}, err
	}
	r, err := measure(cmd.Process.Pid)
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return Result{}, err
	}
	if err := cmd.Wait(); err != nil {
		return Result{}, fmt.Errorf("peer: %w", err)
	}
	return r, nil
}

// scmRTT times the raw baseline of rtt-fd: a descriptor sent with
// SCM_RIGHTS on a Unix seqpacket socket, which the peer sends back, with
// blocking system calls on both sides.
func scmRTT(ctx context.Context, peer []string, warmup, iters int) (Result, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return Result{}, os.NewSyscallError("socketpair", err)
	}
	mine, theirs := fds[0], os.NewFile(uintptr(fds[1]), "scm")
	defer syscall.Close(mine)
	f, err := os.Open(os.DevNull)
	if err != nil {
		theirs.Close()
		return Result{}, err
	}
	defer f.Close()
	args := []string{"scm", strconv.Itoa(rttTrips(warmup, iters))}
	return runPeerCase(ctx, peer, args, []*os.File{theirs}, func(pid int) (Result, error) {
		theirs.Close()
		msg, buf, oob := make([]byte, 8), make([]byte, 8), make([]byte, syscall.CmsgSpace(4))
		rights := syscall.UnixRights(int(f.Fd()))
		return timeRTT(warmup, iters, pid, func(int) error {
			if err := syscall.Sendmsg(mine, msg, rights, nil, 0); err != nil {
				return os.NewSyscallError("sendmsg", err)
			}
			fd, err := recvFD(mine, buf, oob)
			if err != nil {
				return err
			}
			return syscall.Close(fd)
		})
	})
}

// recvFD receives one message and the one descriptor it carries.
func recvFD(sock int, buf, oob []byte) (int, error) {
	_, oobn, _, _, err := syscall.Recvmsg(sock, buf, oob, syscall.MSG_CMSG_CLOEXEC)
	if err != nil {
		return -1, os.NewSyscallError("recvmsg", err)
	}
	cms, err := syscall.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(cms) != 1 {
		return -1, fmt.Errorf("no descriptor came (%d control messages): %w", len(cms), io.ErrUnexpectedEOF)
	}
	got, err := syscall.ParseUnixRights(&cms[0])
	if err != nil || len(got) != 1 {
		return -1, fmt.Errorf("%d descriptors came, want 1", len(got))
	}
	return got[0], nil
}

// eventRTT times an event ping-pong between processes: this side signals
// ping and waits for pong, the peer the other way round. Each round trip
// is two signal-to-wakes. transport "chanos" uses chanos.Event, "eventfd"
// read(2) and write(2) on the eventfds; mode "parked" sleeps in the
// kernel (the netpoller for an Event), "spin" polls.
func eventRTT(ctx context.Context, peer []string, transport, mode string, warmup, iters int) (Result, error) {
	var evs [2]*os.File
	for i := range evs {
		f, err := eventfdFile(transport == "chanos" || mode == "spin")
		if err != nil {
			return Result{}, err
		}
		evs[i] = f
		defer evs[i].Close()
	}
	ping, pong, err := eventSides(transport, mode, evs[0], evs[1], true)
	if err != nil {
		return Result{}, err
	}
	args := []string{"event", transport, mode, strconv.Itoa(rttTrips(warmup, iters))}
	return runPeerCase(ctx, peer, args, evs[:], func(pid int) (Result, error) {
		return timeRTT(warmup, iters, pid, func(int) error {
			if err := ping(); err != nil {
				return err
			}
			return pong()
		})
	})
}

// eventfdFile returns a new eventfd as a file to pass to the peer,
// non-blocking if nonblock is set. The file is made while the descriptor
// is blocking, so that this process's netpoller does not take it: the
// runtime registers a non-blocking descriptor's file with epoll, which
// then wakes a thread of this process at every signal of the object,
// by either side. The measured sides work on objects of their own
// (chanos Events, which keep their descriptors out of the netpoller, or
// raw descriptors), as a program would; the files only carry the
// objects to the peer.
func eventfdFile(nonblock bool) (*os.File, error) {
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("eventfd", err)
	}
	f := os.NewFile(uintptr(fd), "event")
	if nonblock {
		if err := unix.SetNonblock(fd, true); err != nil {
			f.Close()
			return nil, os.NewSyscallError("fcntl", err)
		}
	}
	return f, nil
}

// eventSides returns the signal of out and the wait on in, as transport
// and mode say. With dup, the Events are made over duplicates of the
// descriptors, so that the files stay the caller's to pass on.
func eventSides(transport, mode string, out, in *os.File, dup bool) (signal, wait func() error, err error) {
	one := []byte{1, 0, 0, 0, 0, 0, 0, 0}
	if transport == "eventfd" {
		ofd, ifd := int(out.Fd()), int(in.Fd())
		if mode == "spin" {
			unix.SetNonblock(ofd, true)
			unix.SetNonblock(ifd, true)
		}
		var b [8]byte
		signal = func() error {
			_, err := syscall.Write(ofd, one)
			return err
		}
		wait = func() error {
			for {
				_, err := syscall.Read(ifd, b[:])
				if err != syscall.EAGAIN {
					return err
				}
			}
		}
		return signal, wait, nil
	}
	ev := func(f *os.File) (*chanos.Event, error) {
		if dup {
			d, err := dupOf(f)
			if err != nil {
				return nil, err
			}
			f = d
		}
		return chanos.EventFromCap(f)
	}
	o, err := ev(out)
	if err != nil {
		return nil, nil, err
	}
	i, err := ev(in)
	if err != nil {
		return nil, nil, err
	}
	ctx := context.Background()
	signal = o.Signal
	wait = func() error {
		_, err := i.Wait(ctx)
		return err
	}
	if mode == "spin" {
		wait = func() error {
			for {
				if _, ok, err := i.TryWait(); ok || err != nil {
					return err
				}
			}
		}
	}
	return signal, wait, nil
}

// eventRTTC is eventRTT between two C processes (c/tools/caps_bench.c),
// on chanos's C event objects (kind "event") or on the bare eventfds
// (kind "eventfd"): the same ping-pong, timed by the C client.
func eventRTTC(ctx context.Context, tool, kind, mode string, warmup, iters int) (Result, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	var evs []*os.File
	defer func() {
		for _, f := range evs {
			f.Close()
		}
	}()
	for range 2 {
		f, err := eventfdFile(true)
		if err != nil {
			return Result{}, err
		}
		evs = append(evs, f)
	}
	var out strings.Builder
	peer := exec.CommandContext(ctx, tool, kind+"-peer", mode, strconv.Itoa(warmup+iters))
	client := exec.CommandContext(ctx, tool, kind+"-client", mode, strconv.Itoa(warmup), strconv.Itoa(iters))
	for _, c := range []*exec.Cmd{peer, client} {
		c.ExtraFiles, c.Stderr = evs, os.Stderr
	}
	client.Stdout = &out
	if err := peer.Start(); err != nil {
		return Result{}, err
	}
	defer stopCmd(peer)
	if err := client.Run(); err != nil {
		return Result{}, fmt.Errorf("the C client: %w", err)
	}
	if err := peer.Wait(); err != nil {
		return Result{}, fmt.Errorf("the C peer: %w", err)
	}
	var r Result
	if err := json.Unmarshal([]byte(out.String()), &r); err != nil {
		return Result{}, fmt.Errorf("the C client's output %q: %w", out.String(), err)
	}
	return r, nil
}

// stopCmd kills c if it has not been waited for, and waits for it.
func stopCmd(c *exec.Cmd) {
	if c.ProcessState == nil {
		c.Process.Kill()
		c.Wait()
	}
}

// driverLatency runs the driver experiment and reports the latency from
// each interrupt to the client's receipt of the key event it completed.
func driverLatency(ctx context.Context, x device.Experiment) (Result, error) {
	events, err := x.Run(ctx)
	if err != nil {
		return Result{}, err
	}
	if len(events) != x.Repeat*len(device.ScriptKeys) {
		return Result{}, fmt.Errorf("%d key events of %d", len(events), x.Repeat*len(device.ScriptKeys))
	}
	lat := make([]int64, len(events))
	var sum int64
	for i, e := range events {
		lat[i] = int64(e.Latency)
		sum += lat[i]
	}
	slices.Sort(lat)
	n := len(lat)
	return Result{
		Iters:   n,
		RTTp50:  f64(float64(lat[n/2])),
		RTTp99:  f64(float64(lat[n*99/100])),
		RTTMean: f64(float64(sum) / float64(n)),
	}, nil
}

// CapsPeer runs the other process of a caps case; args[0] says which:
//
//	files DIR NAME        serves files on the endpoint at descriptor 3
//	                      and pingpong under NAME on the monitor in DIR;
//	                      prints "ready", ends when standard input closes
//	scm N                 sends back each descriptor received on the
//	                      socket at descriptor 3, N times
//	event TRANSPORT MODE N  waits on the event at descriptor 3 and
//	                      signals the one at 4, N times
//	kbd-driver            the Go keyboard driver (gokbd.Main)
//	kbd-device R P        the keyboard (device.Main)
func CapsPeer(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("%s: no role", CapsPeerCommand)
	}
	count := func(s string) (int, error) {
		n, err := strconv.Atoi(s)
		if err != nil {
			return 0, fmt.Errorf("%s: count: %w", CapsPeerCommand, err)
		}
		return n, nil
	}
	switch role := args[0]; {
	case role == "files" && len(args) == 3:
		return filesPeerMain(ctx, args[1], args[2])
	case role == "scm" && len(args) == 2:
		n, err := count(args[1])
		if err != nil {
			return err
		}
		sock := os.NewFile(3, "scm")
		defer sock.Close()
		fd := int(sock.Fd())
		buf, oob := make([]byte, 8), make([]byte, syscall.CmsgSpace(4))
		for range n {
			got, err := recvFD(fd, buf, oob)
			if err != nil {
				return err
			}
			err = syscall.Sendmsg(fd, buf, syscall.UnixRights(got), nil, 0)
			syscall.Close(got)
			if err != nil {
				return os.NewSyscallError("sendmsg", err)
			}
		}
		return nil
	case role == "event" && len(args) == 4:
		n, err := count(args[3])
		if err != nil {
			return err
		}
		signal, wait, err := eventSides(args[1], args[2], os.NewFile(4, "pong"), os.NewFile(3, "ping"), false)
		if err != nil {
			return err
		}
		for range n {
			if err := wait(); err != nil {
				return err
			}
			if err := signal(); err != nil {
				return err
			}
		}
		return nil
	case role == "kbd-driver":
		return gokbd.Main(ctx)
	case role == "kbd-device":
		return device.Main(args[1:])
	}
	return fmt.Errorf("%s: unknown role %q", CapsPeerCommand, args)
}

// filesPeerMain is CapsPeer's files role.
func filesPeerMain(ctx context.Context, dir, name string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { io.Copy(io.Discard, os.Stdin); cancel() }()
	raw, err := chanos.OpenEndpoint(os.NewFile(3, "files-endpoint"), files.Interface)
	if err != nil {
		return err
	}
	c := files.NewConn(raw)
	defer c.Close()
	d, err := chanos.Join(ctx, chanos.WithDir(dir), chanos.WithProgram("bench-caps-peer"))
	if err != nil {
		return err
	}
	defer d.Close()
	l, err := pingpong.Export(ctx, d, name)
	if err != nil {
		return err
	}
	defer l.Close()
	go pingpong.Serve(ctx, l, echoServer{})
	fmt.Println("ready")
	err = c.Serve(ctx, filesServer{ctx: ctx})
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// filesServer is the files peer's server: dup hands the descriptor back,
// hand opens and serves the pingpong endpoint it carries.
type filesServer struct {
	files.UnimplementedServer
	ctx context.Context // the peer's, for the connections hand opens
}

func (filesServer) Dup(ctx context.Context, fd *os.File) (*os.File, error) { return fd, nil }

func (s filesServer) Hand(ctx context.Context, from *files.Client, m files.Hand) error {
	raw, err := chanos.OpenEndpoint(m.Endpoint, pingpong.Interface)
	if err != nil {
		return err
	}
	c := pingpong.NewConn(raw)
	go func() {
		defer c.Close()
		c.Serve(s.ctx, echoServer{})
	}()
	return nil
}
