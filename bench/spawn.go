package bench

// The spawn suite (docs/spawn.md): the time from asking a private
// monitor's spawn service to start a program to the first message the
// program sends as a domain, against fork+exec of the same program (os/exec)
// to its first write on a pipe, in interleaved runs of one process run.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"time"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/interfaces/pingpong"
	spawnif "github.com/chanos/chanos/interfaces/spawn"
)

// SpawnChildCommand is the hidden `chanos bench` suite name under which
// the chanos binary plays the spawned program: "pipe" writes a byte to
// stdout and exits; "join NAME" joins the monitor CHANOS_DIR names,
// connects to NAME and calls echo once, then exits. For the remote
// cases it also plays their driver ("remote SINK N SHIPS ARGV") and the
// TCP sink of the ship's baseline ("sink ADDR DIR").
const SpawnChildCommand = "__spawn-child"

// SpawnConfig configures RunSpawn.
type SpawnConfig struct {
	Quick    bool
	Repeat   int // spawns per case; 0: 40 (10 with Quick)
	Progress io.Writer
	// Program is the command that plays the spawned program (its mode is
	// appended); nil means this executable with SpawnChildCommand.
	Program []string
	// Machines builds two machines of a cluster for the remote cases and
	// returns them with their teardown; nil, or an error (which says why,
	// on Progress or stderr), skips those cases.
	Machines func(ctx context.Context) (*SpawnMachines, func() error, error)
	// Ships is how many times the ship cases send their file; 0: 10 (3
	// with Quick).
	Ships int
}

// SpawnChild is the spawned program of the spawn suite.
func SpawnChild(ctx context.Context, args []string) error {
	if len(args) >= 1 && args[0] == "pipe" {
		_, err := os.Stdout.Write([]byte{'!'})
		return err
	}
	if len(args) == 3 && args[0] == "sink" {
		return spawnSink(ctx, args[1], args[2])
	}
	if len(args) == 5 && args[0] == "remote" {
		n, err1 := strconv.Atoi(args[2])
		ships, err2 := strconv.Atoi(args[3])
		if err := errors.Join(err1, err2); err != nil {
			return err
		}
		var argv []string
		if err := json.Unmarshal([]byte(args[4]), &argv); err != nil || len(argv) == 0 {
			return fmt.Errorf("%s remote: the program's argv %q: %v", SpawnChildCommand, args[4], err)
		}
		return spawnRemoteDriver(ctx, args[1], n, ships, argv)
	}
	if len(args) != 2 || args[0] != "join" {
		return fmt.Errorf("%s: want pipe, or join NAME", SpawnChildCommand)
	}
	d, err := chanos.Join(ctx, chanos.WithProgram("bench-spawn-child"), chanos.WithoutRejoin())
	if err != nil {
		return err
	}
	defer d.Close()
	c, err := pingpong.Connect(ctx, d, args[1])
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.Echo(ctx, 1)
	return err
}

// firstMessage is the pingpong server of the suite: it reports each echo
// call, the spawned program's first message.
type firstMessage struct {
	pingpong.UnimplementedServer
	got chan time.Time
}

func (f firstMessage) Echo(ctx context.Context, v uint64) (uint64, error) {
	f.got <- time.Now()
	return v, nil
}

// RunSpawn runs the spawn suite.
func RunSpawn(ctx context.Context, cfg SpawnConfig, emit func(Result) error) error {
	n := cfg.Repeat
	if n <= 0 {
		n = 40
		if cfg.Quick {
			n = 10
		}
	}
	argv := cfg.Program
	if len(argv) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		argv = []string{exe, "bench", SpawnChildCommand}
	}
	dir, stop, err := privateMonitor(ctx, "chanos-bench-spawn-")
	if err != nil {
		return err
	}
	defer stop()
	d, err := chanos.Join(ctx, chanos.WithDir(dir), chanos.WithProgram("bench"))
	if err != nil {
		return err
	}
	defer d.Close()
	const name = "bench.spawn"
	l, err := pingpong.Export(ctx, d, name)
	if err != nil {
		return err
	}
	defer l.Close()
	srv := firstMessage{got: make(chan time.Time, 1)}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go pingpong.Serve(sctx, l, srv)
	sp, err := spawnif.Dial(ctx, d)
	if err != nil {
		return err
	}
	defer sp.Close()

	spawnOnce := func() (time.Duration, error) { return spawnToFirst(ctx, sp, srv, argv, name) }
	forkOnce := func() (time.Duration, error) {
		t0 := time.Now()
		cmd := exec.CommandContext(ctx, argv[0], append(argv[1:len(argv):len(argv)], "pipe")...)
		out, err := cmd.StdoutPipe()
		if err != nil {
			return 0, err
		}
		if err := cmd.Start(); err != nil {
			return 0, err
		}
		var b [1]byte
		_, err = io.ReadFull(out, b[:])
		t1 := time.Now()
		if werr := cmd.Wait(); err == nil {
			err = werr
		}
		return t1.Sub(t0), err
	}
	// One of each first, untimed: page cache, the monitor's first bind.
	if _, err := spawnOnce(); err != nil {
		return fmt.Errorf("spawn: %w", err)
	}
	if _, err := forkOnce(); err != nil {
		return fmt.Errorf("fork+exec: %w", err)
	}
	var spawned, forked []time.Duration
	for i := range n {
		if cfg.Progress != nil && i%10 == 0 {
			fmt.Fprintf(cfg.Progress, "spawn: %d/%d\n", i, n)
		}
		s, err := spawnOnce()
		if err != nil {
			return fmt.Errorf("spawn: %w", err)
		}
		f, err := forkOnce()
		if err != nil {
			return fmt.Errorf("fork+exec: %w", err)
		}
		spawned, forked = append(spawned, s), append(forked, f)
	}
	for _, c := range []struct {
		kase, transport string
		samples         []time.Duration
	}{
		{"spawn-to-first-message", "spawnd", spawned},
		{"fork-exec-to-pipe", "os-exec", forked},
	} {
		if err := emit(spawnResult(c.kase, c.transport, c.samples)); err != nil {
			return err
		}
	}
	return runSpawnMachines(ctx, cfg, argv, n, emit)
}

// runSpawnMachines runs the remote cases, or says why not.
func runSpawnMachines(ctx context.Context, cfg SpawnConfig, argv []string, n int, emit func(Result) error) error {
	notes := cfg.Progress
	if notes == nil {
		notes = os.Stderr
	}
	if cfg.Machines == nil {
		fmt.Fprintln(notes, "spawn: the remote cases (remote spawn, --ship) are skipped: no machines to run them on")
		return nil
	}
	m, teardown, err := cfg.Machines(ctx)
	if err != nil {
		fmt.Fprintf(notes, "spawn: the remote cases (remote spawn, --ship) are skipped: %v\n", err)
		return nil
	}
	ships := cfg.Ships
	if ships <= 0 {
		ships = 10
		if cfg.Quick {
			ships = 3
		}
	}
	err = runSpawnRemote(ctx, cfg, m, argv, n, ships, emit)
	if terr := teardown(); err == nil {
		err = terr
	}
	return err
}

// spawnResult is a case's Result: its p50, p99 and mean in the rtt
// fields (the time from the start to the first word from the program).
func spawnResult(kase, transport string, samples []time.Duration) Result {
	s := slices.Clone(samples)
	slices.Sort(s)
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	p50 := float64(s[(len(s)-1)/2])
	p99 := float64(s[min(len(s)-1, len(s)*99/100)])
	mean := float64(sum) / float64(len(s))
	return Result{Suite: "spawn", Case: kase, Transport: transport, Peers: "go", Iters: len(s), TotalNS: int64(sum),
		RTTp50: &p50, RTTp99: &p99, RTTMean: &mean}
}

// SpawnSummary prints the ratio the spawn suite's goal is stated in.
func SpawnSummary(w io.Writer, results []Result) {
	var sp, fk *Result
	for i := range results {
		switch results[i].Case {
		case "spawn-to-first-message":
			sp = &results[i]
		case "fork-exec-to-pipe":
			fk = &results[i]
		}
	}
	if sp != nil && fk != nil && sp.RTTp50 != nil && fk.RTTp50 != nil {
		r := *sp.RTTp50 / *fk.RTTp50
		fmt.Fprintf(w, "spawn to first message / fork+exec to first write (p50): %.2f (goal <= 1.5: %s)\n", r, verdict(r <= 1.5))
	}
	spawnRemoteSummary(w, results)
}

// spawnToFirst spawns argv (a peer that joins and sends name's server one
// message) through c and returns the time from the spawn call to that
// message, once the program has ended well.
func spawnToFirst(ctx context.Context, c *spawnif.Conn, srv firstMessage, argv []string, name string) (time.Duration, error) {
	t0 := time.Now()
	st, err := c.Start(ctx, spawnif.Request{Program: argv[0], Args: append(argv[1:len(argv):len(argv)], "join", name)})
	if err != nil {
		return 0, err
	}
	var t1 time.Time
	select {
	case t1 = <-srv.got:
	case <-time.After(30 * time.Second):
		return 0, errors.New("the spawned program sent nothing within 30s")
	}
	e, err := c.WaitExit(ctx, st.ID)
	if err == nil && (e.Code != 0 || e.Signal != 0) {
		out, _, _, _ := c.Output(ctx, st.ID, 0, false)
		err = fmt.Errorf("the spawned program ended with %v: %s", e, out)
	}
	return t1.Sub(t0), err
}
