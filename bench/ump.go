package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// UMPConfig configures RunUMP.
type UMPConfig struct {
	// Quick runs fewer iterations (the whole suite in well under 40 s).
	Quick bool
	// Repeat runs every case this many times, round-robin over the cases
	// so that subjects and baselines see the same machine, and reports the
	// median run. Zero means 3. The idle case runs once.
	Repeat int
	// RTTRepeat is how many times the rtt-spin cases run (go-go, c-c,
	// go-c, c-go over ump: issue 5's Go tax; and the raw cache lines:
	// issue 3's floor), at least Repeat; the rounds past Repeat run those
	// cases only, and come first. A run takes a third of a second, and
	// the VM moves its vCPUs between placements every few seconds (a run
	// can take 1.2 or 3 times the usual round trip), so more runs buy a
	// steadier median, and more rounds a steadier paired ratio, cheaply.
	// Zero means 9 when Repeat is zero too (and not Quick), else Repeat:
	// a Repeat given is taken as it is.
	RTTRepeat int
	// Cases, if not empty, selects cases whose key (case/transport/peers/
	// size, see Result.Key) contains one of these strings.
	Cases []string
	// GoPeer is the command that runs the Go peer, followed by the peer
	// flags. Empty means this executable with `bench __ump-peer`.
	GoPeer []string
	// CBench is the C peer program (c/tools/ump_bench.c). Empty means
	// FindCTool("chanos-ump-bench").
	CBench string
	// Scale multiplies the iteration counts (zero means 1): below 1 for
	// smoke tests, above for steadier figures.
	Scale float64
	// Progress, if not nil, receives a line per case as it starts.
	Progress io.Writer
}

// umpCase is one case of the ump suite.
type umpCase struct {
	kase, transport, peers string // peers: client-server, "c" or "go"
	size, iters, warmup    int
	spinNS                 int64
	maxMsg                 int
	once                   bool // run in the last round only (it takes seconds)
}

func (c *umpCase) key() string {
	return fmt.Sprintf("%s/%s/%s/%d", c.kase, c.transport, c.peers, c.size)
}

// spinRTT reports whether c is a spinning round trip, over ump (the
// cases issue 5's Go tax is stated in) or on raw cache lines (issue 3's
// floor): these run RTTRepeat times.
func (c *umpCase) spinRTT() bool { return c.kase == "rtt-spin" }

func (c *umpCase) needsC() bool { return strings.Contains(c.peers, "c") }

// umpCases lists the suite. Spinning round trips use 8-byte messages.
func umpCases(quick bool) []umpCase {
	q := func(full, quick_ int) int {
		if quick {
			return quick_
		}
		return full
	}
	var cs []umpCase
	rtt := q(1000000, 100000)
	for _, p := range []string{"go-go", "c-c", "go-c", "c-go"} {
		cs = append(cs, umpCase{kase: "rtt-spin", transport: "ump", peers: p, size: 8, iters: rtt, warmup: rtt / 10})
	}
	for _, p := range []string{"go-go", "c-c"} {
		cs = append(cs, umpCase{kase: "path", transport: "ump", peers: p, size: 8, iters: 2 * rtt, warmup: rtt / 10})
	}
	cs = append(cs, umpCase{kase: "path-locked", transport: "ump", peers: "go-go", size: 8, iters: 2 * rtt, warmup: rtt / 10})
	cs = append(cs,
		umpCase{kase: "rtt-spin", transport: "raw-spin", peers: "c-c", size: 8, iters: rtt, warmup: rtt / 10},
		umpCase{kase: "rtt-spin", transport: "raw-pair", peers: "c-c", size: 8, iters: rtt, warmup: rtt / 10},
		umpCase{kase: "rtt-parked", transport: "ump", peers: "go-go", size: 8, iters: q(50000, 5000), warmup: q(1000, 500), spinNS: -1},
		umpCase{kase: "rtt-parked", transport: "ump", peers: "c-c", size: 8, iters: q(50000, 5000), warmup: q(1000, 500), spinNS: -1},
		umpCase{kase: "rtt-parked", transport: "uds", peers: "c-c", size: 8, iters: q(50000, 5000), warmup: q(1000, 500)},
	)
	for _, s := range []struct{ size, iters int }{{64, q(10000000, 1000000)}, {65536, q(50000, 5000)}, {1 << 20, q(3000, 300)}} {
		w := max(s.iters/20, 10)
		cs = append(cs,
			umpCase{kase: "stream", transport: "ump", peers: "go-go", size: s.size, iters: s.iters, warmup: w, maxMsg: max(s.size, 65536)},
			umpCase{kase: "stream", transport: "ump", peers: "c-c", size: s.size, iters: s.iters, warmup: w, maxMsg: max(s.size, 65536)},
			umpCase{kase: "stream", transport: "shm-memcpy", peers: "c-c", size: s.size, iters: s.iters, warmup: w},
			umpCase{kase: "stream", transport: "memcpy", peers: "go", size: s.size, iters: q(200, 50)}, // ms
		)
	}
	cs = append(cs, umpCase{kase: "idle-cpu", transport: "ump", peers: "go-go", iters: 1, once: true})
	return cs
}

// RunUMP runs the ump suite and calls emit with each case's result, in
// the order of the suite, once all its runs are done.
func RunUMP(ctx context.Context, cfg UMPConfig, emit func(Result) error) error {
	cases := umpCases(cfg.Quick)
	if cfg.Scale > 0 {
		for i := range cases {
			c := &cases[i]
			if c.iters > 1 {
				c.iters = max(1, int(float64(c.iters)*cfg.Scale))
				c.warmup = max(1, int(float64(c.warmup)*cfg.Scale))
			}
		}
	}
	if len(cfg.Cases) > 0 {
		var sel []umpCase
		for _, c := range cases {
			for _, want := range cfg.Cases {
				if strings.Contains(c.key(), want) {
					sel = append(sel, c)
					break
				}
			}
		}
		if len(sel) == 0 {
			return fmt.Errorf("no ump case matches %q", cfg.Cases)
		}
		cases = sel
	}
	goPeer := cfg.GoPeer
	if len(goPeer) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		goPeer = []string{exe, "bench", PeerCommand}
	}
	cBench := cfg.CBench
	for _, c := range cases {
		if c.needsC() && cBench == "" {
			p, err := FindCTool("chanos-ump-bench")
			if err != nil {
				return fmt.Errorf("case %s needs the C peer: %w (or select Go-only cases with --cases)", c.key(), err)
			}
			cBench = p
		}
	}
	repeat := cfg.Repeat
	if repeat <= 0 {
		repeat = 3
	}
	rounds := moreRounds(repeat, cfg.RTTRepeat, 9, cfg.Repeat > 0 || cfg.Quick)
	runs := make([][]Result, len(cases))
	for round := range rounds {
		for i, c := range cases {
			switch {
			case c.once && round < rounds-1:
				continue
			case round < rounds-repeat && !c.spinRTT():
				continue // the rounds of the spinning round trips alone come first
			}
			if cfg.Progress != nil {
				fmt.Fprintf(cfg.Progress, "ump: run %d/%d case %d/%d: %s\n", round+1, rounds, i+1, len(cases), c.key())
			}
			r, err := runUMPCase(ctx, &c, goPeer, cBench)
			if err != nil {
				return fmt.Errorf("ump case %s: %w", c.key(), err)
			}
			runs[i] = append(runs[i], r)
		}
	}
	// Paired by round: a Go side against C/C (the Go tax), and C/C against
	// the raw line (issue 3's floor).
	find := func(transport, peers string) int {
		return slices.IndexFunc(cases, func(c umpCase) bool {
			return c.kase == "rtt-spin" && c.transport == transport && c.peers == peers
		})
	}
	cc, raw := find("ump", "c-c"), find("raw-spin", "c-c")
	for i, c := range cases {
		r := Median(runs[i])
		switch {
		case c.kase != "rtt-spin" || c.transport != "ump":
		case c.peers != "c-c" && cc >= 0:
			r.PairedRatio = pairedRatio(runs[i], runs[cc], windowOf)
		case c.peers == "c-c" && raw >= 0:
			r.PairedRatio = pairedRatio(runs[i], runs[raw], windowOf)
		}
		if err := emit(r); err != nil {
			return err
		}
	}
	return nil
}

func runUMPCase(ctx context.Context, c *umpCase, goPeer []string, cBench string) (Result, error) {
	var r Result
	var err error
	switch {
	case c.transport == "memcpy":
		cpu, t0 := startCPU(), nanotime()
		r = memcpyRate(c.size, time.Duration(c.iters)*time.Millisecond)
		r.CPUPercent = cpu.percent(nanotime() - t0)
	default:
		r, err = runPeers(ctx, c, goPeer, cBench)
	}
	if err != nil {
		return Result{}, err
	}
	r.Suite, r.Case, r.Transport, r.Peers, r.Size = "ump", c.kase, c.transport, c.peers, c.size
	r.InProcess = c.transport == "memcpy" || strings.HasPrefix(c.kase, "path")
	return r, nil
}

// runPeers runs a case's client and server processes on the two ends of
// a socket pair and returns what the client reported. The path case has
// a client only: both ends of its ring pair are in that process. The CPU
// is the processes' own, from the rusage of each at its exit, over the
// wall time from the first start to the last exit: their whole lives,
// start-up and warm-up included: a peer, Go or C, reports neither its CPU
// nor when its measured phase starts. The idle case keeps the CPU its
// client reports: the parked side's, its figure.
func runPeers(ctx context.Context, c *umpCase, goPeer []string, cBench string) (Result, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	a := peerArgs{kase: c.kase, transport: c.transport, size: c.size, iters: c.iters, warmup: c.warmup,
		spinNS: c.spinNS, maxMsg: c.maxMsg}
	switch c.kase {
	case "rtt-spin", "rtt-parked":
		a.kase = "rtt"
	case "idle-cpu":
		a.kase = "idle"
	}
	clientLang, serverLang, _ := strings.Cut(c.peers, "-")
	command := func(lang, role string, sock *os.File) *exec.Cmd {
		args := append([]string{"--role", role}, a.flags()...)
		var cmd *exec.Cmd
		if lang == "c" {
			cmd = exec.CommandContext(ctx, cBench, args...)
		} else {
			cmd = exec.CommandContext(ctx, goPeer[0], append(append([]string{}, goPeer[1:]...), args...)...)
		}
		if sock != nil {
			cmd.ExtraFiles = []*os.File{sock}
		}
		cmd.Stderr = os.Stderr
		return cmd
	}
	var out bytes.Buffer
	result := func(t0 int64, procs ...*exec.Cmd) (Result, error) {
		wall := nanotime() - t0
		r, err := parsePeerResult(&out)
		if err == nil && r.CPUPercent == nil {
			var states []*os.ProcessState
			for _, p := range procs {
				states = append(states, p.ProcessState)
			}
			r.CPUPercent = cpuPercent(childrenCPU(states...), wall)
		}
		return r, err
	}
	if strings.HasPrefix(c.kase, "path") {
		client := command(clientLang, "client", nil)
		client.Stdout = &out
		t0 := nanotime()
		if err := client.Run(); err != nil {
			return Result{}, fmt.Errorf("client: %w", err)
		}
		return result(t0, client)
	}
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return Result{}, os.NewSyscallError("socketpair", err)
	}
	clientSock, serverSock := os.NewFile(uintptr(fds[0]), "client"), os.NewFile(uintptr(fds[1]), "server")
	defer clientSock.Close()
	defer serverSock.Close()
	server := command(serverLang, "server", serverSock)
	client := command(clientLang, "client", clientSock)
	client.Stdout = &out
	t0 := nanotime()
	if err := server.Start(); err != nil {
		return Result{}, err
	}
	if err := client.Start(); err != nil {
		server.Process.Kill()
		server.Wait()
		return Result{}, err
	}
	clientSock.Close()
	serverSock.Close()
	cerr := client.Wait()
	if cerr != nil {
		server.Process.Kill()
	}
	serr := server.Wait()
	if cerr != nil {
		return Result{}, fmt.Errorf("client: %w", cerr)
	}
	if serr != nil {
		return Result{}, fmt.Errorf("server: %w", serr)
	}
	return result(t0, client, server)
}

// parsePeerResult reads the JSON object a client peer printed.
func parsePeerResult(out *bytes.Buffer) (Result, error) {
	var r Result
	if err := json.Unmarshal(bytes.TrimSpace(out.Bytes()), &r); err != nil {
		return Result{}, fmt.Errorf("client output %q: %w", out.String(), err)
	}
	return r, nil
}

// memcpyRate measures copying size bytes between two buffers in this
// process for about dur: the bandwidth baseline of the stream cases.
func memcpyRate(size int, dur time.Duration) Result {
	// Buffers of whole pages: some CPUs copy far slower when source and
	// destination differ by a few bytes modulo the page size.
	src := make([]byte, size+8192)
	dst := make([]byte, size+8192)
	s, d := src[pageOffset(src):][:size], dst[pageOffset(dst):][:size]
	for i := range s {
		s[i] = byte(i)
	}
	n := 0
	t0 := nanotime()
	var el int64
	for el < int64(dur) {
		for range 64 {
			copy(d, s)
		}
		n += 64
		el = nanotime() - t0
	}
	secs := float64(el) / 1e9
	return Result{Iters: n, MsgsPerS: f64(float64(n) / secs), BytesPerS: f64(float64(n) * float64(size) / secs)}
}

// FindCTool returns the path of a helper program of the C build: in
// $CHANOS_C_BUILD/tools, else in build/c/tools of the repository that
// holds this executable or the working directory.
func FindCTool(name string) (string, error) { return FindCProgram(filepath.Join("tools", name)) }

// FindCProgram is FindCTool for a program at rel in the C build
// directory (tasks/bench/tasks_bench, say).
func FindCProgram(rel string) (string, error) {
	name := rel
	var dirs []string
	if d := os.Getenv("CHANOS_C_BUILD"); d != "" {
		dirs = append(dirs, d)
	} else {
		var starts []string
		if exe, err := os.Executable(); err == nil {
			starts = append(starts, filepath.Dir(exe))
		}
		if wd, err := os.Getwd(); err == nil {
			starts = append(starts, wd)
		}
		for _, s := range starts {
			for d := s; ; d = filepath.Dir(d) {
				if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
					dirs = append(dirs, filepath.Join(d, "build", "c"))
					break
				}
				if filepath.Dir(d) == d {
					break
				}
			}
		}
	}
	var tried []string
	for _, d := range dirs {
		p := filepath.Join(d, rel)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p, nil
		}
		tried = append(tried, p)
	}
	if len(tried) == 0 {
		return "", errors.New("no C build directory found: set CHANOS_C_BUILD")
	}
	return "", fmt.Errorf("%s not found (tried %s): run 'make c' or set CHANOS_C_BUILD", name, strings.Join(tried, ", "))
}
