package main

import (
	"cmp"
	"context"
	"debug/elf"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/chanos/chanos/bench"
	"github.com/chanos/chanos/chanos"
	spawnif "github.com/chanos/chanos/interfaces/spawn"
	"github.com/chanos/chanos/spawn"
)

const spawnUsage = `usage: chanos spawn [--on MACHINE|any] [--ship] [--name NAME] [--env K=V]... [--dir DIR]
                    [--cpus LIST] [--limit mem=SIZE,cpu=SECONDS,cpu-rate=CORES]
                    [--wait] [--json]
                    -- PROGRAM ARGS...

Starts PROGRAM through the spawn service of this user's monitor
(docs/spawn.md) and prints its id at once. The program runs under the
monitor's uid, with CHANOS_DIR set so that it joins that monitor; its
stdout and stderr go to a bounded buffer that 'chanos logs ID' reads.

  --on MACHINE  where to run it: a machine's name or id ('chanos machines'),
                or any: the least loaded (the choice is printed on stderr);
                default this machine
  --ship        send PROGRAM, a file of this machine, to the target's cache
                of shipped programs (only if the cache lacks its SHA-256)
                and run it from there: the target needs no copy of its own
  --name NAME   a label for 'chanos ps --all'
  --env K=V     add to the program's environment (repeatable)
  --dir DIR     its working directory (default: the monitor's); here --dir
                is not the monitor's directory, as in the other commands
                (that is --monitor-dir). A relative DIR, and a PROGRAM with
                a /, are taken relative to this command's working directory
                (on another machine, as the same path there)
  --cpus LIST   pin it to these CPUs (0-2,5)
  --limit L     comma-separated limits, each optional:
                  mem=SIZE       memory (K/M/G suffixes): the program's
                                 cgroup's limit where the machine offers
                                 cgroups (over it, the kernel kills the
                                 program with SIGKILL), else an
                                 address-space rlimit
                  cpu=SECONDS    CPU time: an rlimit (SIGXCPU, then SIGKILL)
                  cpu-rate=CORES CPU bandwidth, such as 0.5 or 1.5 CPUs:
                                 the cgroup's quota; refused (unavailable)
                                 where the machine offers no cgroups
  --wait        wait for its end, print how it ended, and exit with its
                status (128 plus the signal that ended it, as a shell)
  --monitor-dir DIR  the monitor's directory (default: as chanos ps)

--json prints {"id", "pid", "machine"} (and "exit_code", "signal" with --wait;
"sha256" and "uploaded" with --ship).
`

const waitUsage = `usage: chanos wait [--on MACHINE] [--timeout D] [--json] [--dir DIR] ID

Waits until the spawned program ID has ended and prints its exit status or
the signal that ended it, and "(out of memory...)" when the kernel killed
it over its --limit mem= in its cgroup. It exits with the program's status
(128 plus the signal for one that a signal ended, as a shell). --json
prints {"id", "exit_code", "signal"}, and "oom_killed": true for the
latter.
--on names the machine it was spawned on (default this one).
`

const killUsage = `usage: chanos kill [--on MACHINE] [--signal SIG] [--dir DIR] ID

Sends SIG (a name such as TERM or KILL, or a number; default TERM) to the
spawned program ID, of the machine --on names (default this one).
`

const logsUsage = `usage: chanos logs [--on MACHINE] [-f] [--from OFFSET] [--dir DIR] ID

Prints the output (stdout and stderr as written) that spawned program ID
has left in its bounded buffer. -f follows it until the program ends.
When the buffer has dropped output, a line on stderr says how much.
--on names the machine it was spawned on (default this one).
`

// The spawn suite of chanos bench, registered beside the commands it
// measures.
func init() {
	benchSuites["spawn"] = benchSuite{
		help: "local spawn to the spawned domain's first message vs fork+exec of the same program to its first write on a pipe; " +
			"with root and etcd, on two machines in network namespaces: remote spawn vs local spawn plus a net round trip, " +
			"and --ship of 10 MB vs a raw TCP copy (docs/spawn.md)",
		run: func(ctx context.Context, o benchOptions, emit func(bench.Result) error) error {
			return bench.RunSpawn(ctx, bench.SpawnConfig{Quick: o.quick, Repeat: o.repeat, Progress: o.progress,
				Machines: spawnBenchMachines}, emit)
		},
		summary: bench.SpawnSummary,
	}
}

// spawnBenchMachines builds the two machines of the spawn suite's remote
// cases, as 'chanos demo --machines 2' does, quietly.
func spawnBenchMachines(ctx context.Context) (*bench.SpawnMachines, func() error, error) {
	d, err := startMachines(ctx, 2, true)
	if err != nil {
		return nil, nil, err
	}
	m := &bench.SpawnMachines{
		Command: func(i int, argv ...string) *exec.Cmd {
			cmd := d.net.Machines[i].Command(argv[0], argv[1:]...)
			cmd.Env = append(os.Environ(), "CHANOS_DIR="+d.dirs[i])
			return cmd
		},
	}
	for i := range m.Addrs {
		m.Addrs[i] = d.net.Machines[i].Addr.String()
	}
	return m, d.close, nil
}

// spawnFlags adds the spawn service's flags to the monitor's.
func spawnFlags(fs *flag.FlagSet, cfg *spawn.Config) {
	fs.Var((*listFlag)(&cfg.Allow), "spawn-allow", "")
	fs.Func("spawn-policy", "", func(file string) error {
		dirs, noRemote, err := readSpawnPolicy(file)
		cfg.Allow = append(cfg.Allow, dirs...)
		cfg.NoRemote = cfg.NoRemote || noRemote
		return err
	})
	fs.BoolVar(&cfg.NoRemote, "spawn-no-remote", false, "")
	fs.IntVar(&cfg.MaxRunning, "spawn-max", spawn.DefaultMaxRunning, "")
	fs.IntVar(&cfg.MaxRunningPerDomain, "spawn-max-per-domain", spawn.DefaultMaxRunningPerDomain, "")
	cfg.LogBytes = spawn.DefaultLogBytes
	fs.Var((*sizeFlag)(&cfg.LogBytes), "spawn-log-size", "")
	fs.IntVar(&cfg.MaxKept, "spawn-max-kept", spawn.DefaultMaxKept, "")
	fs.DurationVar(&cfg.Keep, "spawn-keep", spawn.DefaultKeep, "")
	cacheBytes, shipMax := sizeFlag(spawn.DefaultCacheBytes), sizeFlag(spawn.DefaultMaxShipBytes)
	fs.Func("spawn-cache-size", "", func(v string) error {
		err := cacheBytes.Set(v)
		cfg.CacheBytes = int64(cacheBytes)
		return err
	})
	fs.Func("spawn-ship-max", "", func(v string) error {
		err := shipMax.Set(v)
		cfg.MaxShipBytes = int64(shipMax)
		return err
	})
	fs.IntVar(&cfg.MaxUploads, "spawn-max-uploads", spawn.DefaultMaxUploads, "")
}

// spawnMonitorUsage is the part of the monitor's usage on the spawn
// service.
var spawnMonitorUsage = fmt.Sprintf(`
The spawn service (docs/spawn.md):

  --spawn-allow DIR            programs may be spawned only from DIR (repeatable;
                               default: any program)
  --spawn-policy FILE          a policy file: "allow DIR" lines, "remote off",
                               # comments
  --spawn-no-remote            refuse spawns from other machines of the cluster
  --spawn-max N                spawned programs running, total (default %d)
  --spawn-max-per-domain N     spawned programs running, per domain (default %d)
  --spawn-log-size SIZE        output kept per program (default %s)
  --spawn-max-kept N           ended programs kept for wait and logs (default %d)
  --spawn-keep D               how long an ended program is kept (default %v)
  --spawn-cache-size SIZE      the cache of shipped programs, files and uploads in
                               progress together (default %s)
  --spawn-ship-max SIZE        the largest program an upload may bring (default %s)
  --spawn-max-uploads N        uploads in progress, total (default %d; %d per domain)
`, spawn.DefaultMaxRunning, spawn.DefaultMaxRunningPerDomain, formatSize(spawn.DefaultLogBytes),
	spawn.DefaultMaxKept, spawn.DefaultKeep, formatSize(spawn.DefaultCacheBytes), formatSize(spawn.DefaultMaxShipBytes),
	spawn.DefaultMaxUploads, spawn.DefaultMaxUploadsPerDomain)

// readSpawnPolicy reads a spawn policy file: "allow DIR" lines, and
// "remote off" (refuse spawns from other machines) or "remote on";
// blank lines and lines starting with # ignored.
func readSpawnPolicy(file string) (dirs []string, noRemote bool, err error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, false, fmt.Errorf("spawn policy: %w", err)
	}
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		verb, arg, _ := strings.Cut(line, " ")
		arg = strings.TrimSpace(arg)
		switch {
		case verb == "allow" && arg != "":
			dirs = append(dirs, arg)
		case verb == "remote" && (arg == "off" || arg == "on"):
			noRemote = arg == "off"
		default:
			return nil, false, fmt.Errorf("spawn policy %s:%d: want \"allow DIR\" or \"remote off|on\", got %q", file, i+1, line)
		}
	}
	return dirs, noRemote, nil
}

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// dialSpawn joins the monitor and connects to the spawn service of the
// machine on names (see placeOn).
func dialSpawn(ctx context.Context, dir, program, on string) (*chanos.Domain, *spawnif.Conn, chanos.MachineInfo, error) {
	d, err := dialMonitor(ctx, dir, program)
	if err != nil {
		return nil, nil, chanos.MachineInfo{}, err
	}
	m, err := placeOn(ctx, d, on)
	if err != nil {
		d.Close()
		return nil, nil, m, err
	}
	id, _ := strconv.ParseUint(m.ID, 16, 64)
	c, err := spawnif.DialMachine(ctx, d, id)
	if err != nil {
		d.Close()
		return nil, nil, m, fmt.Errorf("connect to the spawn service of machine %s: %w", machineLabel(m), err)
	}
	return d, c, m, nil
}

// placeOn finds the machine that on names among the cluster's: "" is
// this one; "any" the least loaded; otherwise a machine's id (16 hex
// digits) or name. The least loaded is the one whose spawn service runs
// the fewest programs (asked now, so that spawns in a row spread), then
// whose published CPU use is lowest, then with the fewest domains; a
// machine whose spawn service does not answer is passed over.
func placeOn(ctx context.Context, d *chanos.Domain, on string) (chanos.MachineInfo, error) {
	list, err := d.Machines(ctx)
	if err != nil {
		return chanos.MachineInfo{}, err
	}
	var (
		best        *chanos.MachineInfo
		bestRunning int
	)
	for i := range list.Machines {
		m := &list.Machines[i]
		switch {
		case on == "" && m.Self, on != "" && on != "any" && (m.ID == on || m.Name == on):
			return *m, nil
		case on == "any" && m.State == "up":
			running, err := runningOn(ctx, d, m)
			if err != nil {
				fmt.Fprintf(os.Stderr, "spawn --on any: machine %s passed over: %v\n", machineLabel(*m), err)
				continue
			}
			if best == nil || cmp.Or(cmp.Compare(running, bestRunning), cmp.Compare(m.CPU, best.CPU), cmp.Compare(m.Domains, best.Domains)) < 0 {
				best, bestRunning = m, running
			}
		}
	}
	if best != nil {
		return *best, nil
	}
	if on == "any" {
		return chanos.MachineInfo{}, errors.New("no machine of the cluster has a spawn service that answers (each is named above)")
	}
	if on == "" {
		return chanos.MachineInfo{}, errors.New("the monitor does not list this machine")
	}
	names := make([]string, 0, len(list.Machines))
	for _, m := range list.Machines {
		names = append(names, machineLabel(m))
	}
	return chanos.MachineInfo{}, fmt.Errorf("no machine %q in the cluster (machines: %s)", on, strings.Join(names, ", "))
}

// probeTimeout bounds what a command that asks every machine's spawn
// service (spawn --on any, ps --all) waits for each: one whose service is
// missing (its name not set again yet, after its lease expired) or slow
// must not use up the time the others need.
const probeTimeout = 3 * time.Second

// procsOf lists the programs m's spawn service runs, within probeTimeout.
func procsOf(ctx context.Context, d *chanos.Domain, m *chanos.MachineInfo) ([]spawnif.Proc, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	id, _ := strconv.ParseUint(m.ID, 16, 64)
	c, err := spawnif.DialMachine(ctx, d, id)
	if err != nil {
		return nil, fmt.Errorf("connect to its spawn service: %w", err)
	}
	defer c.Close()
	return c.Procs(ctx)
}

// runningOn counts the programs m's spawn service runs.
func runningOn(ctx context.Context, d *chanos.Domain, m *chanos.MachineInfo) (int, error) {
	procs, err := procsOf(ctx, d, m)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, p := range procs {
		if p.State == "running" {
			n++
		}
	}
	return n, nil
}

// machineLabel names a machine for people: "name (id)".
func machineLabel(m chanos.MachineInfo) string {
	if m.Name == "" {
		return m.ID
	}
	return m.Name + " (" + m.ID + ")"
}

// limits is what --limit asks for.
type limits struct {
	mem  uint64 // bytes
	cpu  uint64 // CPU seconds
	rate uint32 // thousandths of a CPU
}

// parseLimit parses --limit's mem=SIZE,cpu=SECONDS,cpu-rate=CORES.
func parseLimit(v string) (limits, error) {
	var l limits
	for part := range strings.SplitSeq(v, ",") {
		k, val, ok := strings.Cut(part, "=")
		switch {
		case !ok:
			return limits{}, fmt.Errorf("--limit %q: want mem=SIZE,cpu=SECONDS,cpu-rate=CORES", v)
		case k == "mem":
			n, err := parseSize(val)
			if err != nil {
				return limits{}, fmt.Errorf("--limit mem: %w", err)
			}
			l.mem = uint64(n)
		case k == "cpu":
			d, err := strconv.ParseUint(strings.TrimSuffix(val, "s"), 10, 64)
			if err != nil || d == 0 {
				return limits{}, fmt.Errorf("--limit cpu=%q: want a positive number of seconds", val)
			}
			l.cpu = d
		case k == "cpu-rate":
			f, err := strconv.ParseFloat(val, 64)
			milli := math.Round(f * 1000)
			if err != nil || milli < spawn.MinCPURate || milli > math.MaxUint32 {
				return limits{}, fmt.Errorf("--limit cpu-rate=%q: want a number of CPUs, at least %g (0.5 for half of one)", val, float64(spawn.MinCPURate)/1000)
			}
			l.rate = uint32(milli)
		default:
			return limits{}, fmt.Errorf("--limit %q: unknown limit %q (mem, cpu, cpu-rate)", v, k)
		}
	}
	return l, nil
}

// parseID parses a spawn id argument.
func parseID(cmd string, fs *flag.FlagSet) (uint64, error) {
	if fs.NArg() != 1 {
		return 0, usagef(cmd, "want one ID")
	}
	id, err := strconv.ParseUint(fs.Arg(0), 10, 64)
	if err != nil || id == 0 {
		return 0, usagef(cmd, "%q is not a spawn id", fs.Arg(0))
	}
	return id, nil
}

// runSpawn runs 'chanos spawn'.
func runSpawn(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("spawn", flag.ContinueOnError)
	dir := fs.String("monitor-dir", "", "")
	on := fs.String("on", "", "")
	name := fs.String("name", "", "")
	var env listFlag
	fs.Var(&env, "env", "")
	workDir := fs.String("dir", "", "")
	cpus := fs.String("cpus", "", "")
	limit := fs.String("limit", "", "")
	wait := fs.Bool("wait", false, "")
	ship := fs.Bool("ship", false, "")
	asJSON := fs.Bool("json", false, "")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return usagef("spawn", "no program: chanos spawn [FLAGS] -- PROGRAM ARGS...")
	}
	var local string // the file --ship sends
	if *ship {
		var err error
		if local, err = exec.LookPath(fs.Arg(0)); err != nil {
			return fmt.Errorf("spawn --ship: %w", err)
		}
		if local, err = filepath.Abs(local); err != nil {
			return err
		}
	}
	var lim limits
	if *limit != "" {
		var err error
		if lim, err = parseLimit(*limit); err != nil {
			return usagef("spawn", "%v", err)
		}
	}
	callCtx, cancel := context.WithTimeout(ctx, cliTimeout)
	defer cancel()
	d, c, m, err := dialSpawn(callCtx, *dir, "chanos spawn", *on)
	if err != nil {
		return err // it names the machine --on named if it is not one
	}
	defer d.Close()
	defer c.Close()
	machine := m.ID
	if *on == "any" {
		fmt.Fprintf(os.Stderr, "placed on machine %s, the least loaded (CPU %.0f%%, %d domains)\n", machineLabel(m), 100*m.CPU, m.Domains)
	}
	// Paths relative to this command's directory mean the same to the
	// monitor when it runs on this machine; on another, they name that
	// machine's files.
	program, wd := fs.Arg(0), *workDir
	if strings.Contains(program, "/") {
		if program, err = filepath.Abs(program); err != nil {
			return err
		}
	}
	if wd != "" {
		if wd, err = filepath.Abs(wd); err != nil {
			return err
		}
	}
	req := spawnif.Request{
		Program: program, Args: fs.Args()[1:], Env: env, Dir: wd, CPUs: *cpus, Mem: lim.mem, CPU: lim.cpu, CPURate: lim.rate, Name: *name,
	}
	out := map[string]any{"machine": machine}
	if *ship {
		// The upload is bounded by the caller's ^C only: a large program
		// on a slow network takes longer than a call's timeout.
		sh, err := c.Ship(ctx, local)
		if err != nil {
			return fmt.Errorf("spawn --ship: %w", err)
		}
		if sh.Uploaded {
			fmt.Fprintf(os.Stderr, "shipped %s (%d bytes, sha256 %s) to machine %s\n", local, sh.Size, sh.Hash, machineLabel(m))
		} else {
			fmt.Fprintf(os.Stderr, "machine %s has %s in its cache (sha256 %s): not uploaded\n", machineLabel(m), local, sh.Hash)
		}
		if needs := shipNeeds(local); len(needs) > 0 && !m.Self {
			them := "them"
			if len(needs) == 1 {
				them = "it"
			}
			fmt.Fprintf(os.Stderr, "note: %s needs %s, which --ship does not send: machine %s must have %s\n",
				local, strings.Join(needs, ", "), machineLabel(m), them)
			out["needs"] = needs
		}
		req.Hash, req.Program = sh.Hash, fs.Arg(0)
		out["sha256"], out["uploaded"] = sh.Hash, sh.Uploaded
		callCtx, cancel = context.WithTimeout(ctx, cliTimeout)
		defer cancel()
	}
	st, err := c.Start(callCtx, req)
	if *ship && errors.Is(err, spawnif.ErrNotFound) {
		// The target's cache evicted the file between the ship and the
		// spawn (other uploads needed the room): once more.
		if _, err = c.Ship(ctx, local); err == nil {
			st, err = c.Start(callCtx, req)
		}
	}
	if err != nil {
		return err
	}
	out["id"], out["pid"] = st.ID, st.PID
	if !*asJSON {
		fmt.Println(st.ID)
	}
	if *wait {
		e, err := c.WaitExit(ctx, st.ID)
		if err != nil {
			return err
		}
		out["exit_code"], out["signal"] = e.Code, int(e.Signal)
		oom := oomKilled(ctx, c, st.ID, e)
		if oom {
			out["oom_killed"] = true
		}
		if *asJSON {
			if err := writeJSON(os.Stdout, out); err != nil {
				return err
			}
		} else {
			fmt.Println(exitLine(e, oom))
		}
		return exitOf(e)
	}
	if *asJSON {
		return writeJSON(os.Stdout, out)
	}
	return nil
}

// programExit is the end of a program that a command waited for: the
// command exits with its status, as a shell gives it (128 plus the signal
// for one that a signal ended), having said how it ended already.
type programExit struct{ status int }

func (e *programExit) Error() string {
	return fmt.Sprintf("the program ended with status %d", e.status)
}

// exitOf returns nil for a program that exited 0, else its programExit.
func exitOf(e spawnif.Exit) error {
	switch {
	case e.Signal != 0:
		return &programExit{128 + int(e.Signal)}
	case e.Code != 0:
		return &programExit{e.Code & 0xff}
	}
	return nil
}

// runWait runs 'chanos wait'.
func runWait(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("wait", flag.ContinueOnError)
	dir := fs.String("dir", "", "")
	on := fs.String("on", "", "")
	timeout := fs.Duration("timeout", 0, "")
	asJSON := fs.Bool("json", false, "")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	id, err := parseID("wait", fs)
	if err != nil {
		return err
	}
	dialCtx, cancel := context.WithTimeout(ctx, cliTimeout)
	defer cancel()
	d, c, _, err := dialSpawn(dialCtx, *dir, "chanos wait", *on)
	if err != nil {
		return err
	}
	defer d.Close()
	defer c.Close()
	if *timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *timeout)
		defer cancel()
	}
	e, err := c.WaitExit(ctx, id)
	if err != nil {
		if errors.Is(err, chanos.ErrPeerDied) || errors.Is(err, chanos.ErrClosed) || d.Err() != nil {
			return fmt.Errorf("wait %d: the monitor went away before the program ended; its exit status is lost: %w", id, err)
		}
		return err
	}
	oom := oomKilled(ctx, c, id, e)
	if *asJSON {
		out := map[string]any{"id": id, "exit_code": e.Code, "signal": int(e.Signal)}
		if oom {
			out["oom_killed"] = true
		}
		err = writeJSON(os.Stdout, out)
	} else {
		_, err = fmt.Println(exitLine(e, oom))
	}
	if err != nil {
		return err
	}
	return exitOf(e)
}

// oomKilled reports whether the kernel's OOM killer ended program id, over
// its cgroup's memory limit: a SIGKILL that list marks so. wait's reply
// does not say it; list, asked once, does while the program is kept.
func oomKilled(ctx context.Context, c *spawnif.Conn, id uint64, e spawnif.Exit) bool {
	if e.Signal != syscall.SIGKILL {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, cliTimeout)
	defer cancel()
	procs, err := c.Procs(ctx)
	if err != nil {
		return false
	}
	for _, p := range procs {
		if p.ID == id {
			return p.OOMKilled
		}
	}
	return false
}

// exitLine says how a program ended, as wait prints it.
func exitLine(e spawnif.Exit, oom bool) string {
	if oom {
		return e.String() + " (out of memory: over its memory limit)"
	}
	return e.String()
}

// parseSignal parses a signal name (TERM, SIGTERM) or number.
func parseSignal(v string) (syscall.Signal, error) {
	if n, err := strconv.Atoi(v); err == nil && n > 0 && n < 65 {
		return syscall.Signal(n), nil
	}
	name := strings.TrimPrefix(strings.ToUpper(v), "SIG")
	for n := syscall.Signal(1); n < 32; n++ {
		if strings.EqualFold(strings.ReplaceAll(unixSignalName(n), "SIG", ""), name) {
			return n, nil
		}
	}
	return 0, fmt.Errorf("%q is not a signal", v)
}

// unixSignalName returns the SIGXXX name of sig.
func unixSignalName(sig syscall.Signal) string {
	names := map[syscall.Signal]string{
		syscall.SIGHUP: "SIGHUP", syscall.SIGINT: "SIGINT", syscall.SIGQUIT: "SIGQUIT", syscall.SIGKILL: "SIGKILL",
		syscall.SIGUSR1: "SIGUSR1", syscall.SIGUSR2: "SIGUSR2", syscall.SIGTERM: "SIGTERM", syscall.SIGSTOP: "SIGSTOP",
		syscall.SIGCONT: "SIGCONT", syscall.SIGALRM: "SIGALRM", syscall.SIGPIPE: "SIGPIPE", syscall.SIGABRT: "SIGABRT",
	}
	return names[sig]
}

// runKill runs 'chanos kill'.
func runKill(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("kill", flag.ContinueOnError)
	on := fs.String("on", "", "")
	dir := fs.String("dir", "", "")
	sigName := fs.String("signal", "TERM", "")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	id, err := parseID("kill", fs)
	if err != nil {
		return err
	}
	sig, err := parseSignal(*sigName)
	if err != nil {
		return usagef("kill", "--signal: %v", err)
	}
	ctx, cancel := context.WithTimeout(ctx, cliTimeout)
	defer cancel()
	d, c, _, err := dialSpawn(ctx, *dir, "chanos kill", *on)
	if err != nil {
		return err
	}
	defer d.Close()
	defer c.Close()
	return c.Signal(ctx, id, sig)
}

// runLogs runs 'chanos logs'.
func runLogs(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("logs", flag.ContinueOnError)
	on := fs.String("on", "", "")
	dir := fs.String("dir", "", "")
	follow := fs.Bool("f", false, "")
	from := fs.Uint64("from", 0, "")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	id, err := parseID("logs", fs)
	if err != nil {
		return err
	}
	dialCtx, cancel := context.WithTimeout(ctx, cliTimeout)
	defer cancel()
	d, c, _, err := dialSpawn(dialCtx, *dir, "chanos logs", *on)
	if err != nil {
		return err
	}
	defer d.Close()
	defer c.Close()
	return copyLogs(ctx, c, id, *from, *follow, os.Stdout, os.Stderr)
}

// copyLogs writes program id's output from offset from to w, until it
// has all there is, or, with follow, until the program has ended.
func copyLogs(ctx context.Context, c *spawnif.Conn, id, from uint64, follow bool, w, notes io.Writer) error {
	for {
		// Each call is bounded, so that a follow outlives no monitor.
		callCtx, cancel := context.WithTimeout(ctx, cliTimeout)
		data, start, done, err := c.Output(callCtx, id, from, follow)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) && follow && ctx.Err() == nil {
			continue
		}
		if err != nil {
			return err
		}
		if start > from {
			fmt.Fprintf(notes, "[%d bytes of output dropped: the buffer keeps the newest]\n", start-from)
		}
		if _, err := w.Write(data); err != nil {
			return err
		}
		from = start + uint64(len(data))
		if done || (!follow && len(data) == 0) {
			return nil
		}
	}
}

// printSpawned prints the spawned programs as a table.
func printSpawned(w io.Writer, procs []spawnif.Proc, names map[string]string) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "MACHINE\tSPAWNED\tPID\tSTATE\tDOMAIN\tCPU\tMEM\tBY\tNAME\tPROGRAM")
	for _, p := range procs {
		state := p.State
		switch p.State {
		case "exited":
			state = fmt.Sprintf("exited %d", p.ExitCode)
		case "signalled":
			state = "signal " + syscall.Signal(p.Signal).String()
		}
		if p.OOMKilled {
			state += " (out of memory)"
		}
		dom := "-"
		if p.Domain != 0 {
			dom = strconv.FormatUint(p.Domain, 10)
		}
		by := strconv.FormatUint(p.StartedBy.Domain, 10)
		if p.StartedBy.Machine != "" {
			by += "@" + cmp.Or(names[p.StartedBy.Machine], p.StartedBy.Machine)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%.2fs\t%s\t%s\t%s\t%s\n", cmp.Or(names[p.Machine], p.Machine), p.ID, p.PID, state, dom, p.CPUSeconds,
			formatSize(int(p.MemBytes)), by, p.Name, strings.Join(append([]string{p.Program}, p.Args...), " "))
	}
	return tw.Flush()
}

// psAll prints, after ps's own table or in its JSON document as
// "spawned", the programs the spawn services of the cluster's machines
// started, each machine's newest first. A machine whose spawn service
// cannot be reached is said on stderr and left out.
func psAll(ctx context.Context, d *chanos.Domain, snap *chanos.Snapshot, asJSON bool) error {
	list, err := d.Machines(ctx)
	if err != nil {
		return fmt.Errorf("ps --all: %w", err)
	}
	names := map[string]string{}
	procs := []spawnif.Proc{}
	for _, m := range list.Machines {
		names[m.ID] = m.Name
		if m.State != "up" {
			fmt.Fprintf(os.Stderr, "ps --all: machine %s: left out, %s\n", machineLabel(m), m.State)
			continue
		}
		ps, err := procsOf(ctx, d, &m)
		if err != nil {
			fmt.Fprintf(os.Stderr, "ps --all: machine %s: %v\n", machineLabel(m), err)
			continue
		}
		for i := range ps {
			ps[i].Machine = m.ID
		}
		procs = append(procs, ps...)
	}
	if asJSON {
		return writeJSON(os.Stdout, map[string]any{"ps": snap, "spawned": procs})
	}
	if err := printPs(os.Stdout, snap, d.ID()); err != nil {
		return err
	}
	fmt.Println()
	return printSpawned(os.Stdout, procs, names)
}

// shipNeeds returns what the program at path needs on the machine it is
// shipped to besides itself: a script's interpreter (and the program
// that /usr/bin/env is to find), or an ELF program's shared libraries
// beyond the C library's.
func shipNeeds(path string) []string {
	if interp := scriptInterpreter(path); interp != nil {
		return interp
	}
	return sharedLibraries(path)
}

// scriptInterpreter returns the interpreter that the "#!" line of the
// script at path names, and the program it runs when that is env; nil
// for a file that is not such a script.
func scriptInterpreter(path string) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var head [256]byte
	n, _ := io.ReadFull(f, head[:])
	line, _, _ := strings.Cut(string(head[:n]), "\n")
	rest, ok := strings.CutPrefix(line, "#!")
	if !ok {
		return nil
	}
	words := strings.Fields(rest)
	switch {
	case len(words) == 0:
		return nil
	case filepath.Base(words[0]) == "env" && len(words) > 1 && !strings.HasPrefix(words[1], "-"):
		return []string{words[0], words[1]}
	}
	return words[:1]
}

// sharedLibraries returns the shared libraries that the ELF program at
// path names (DT_NEEDED), less the C library's own, which every Linux
// machine has: the files --ship does not send, that the target must hold.
// A file that is not a dynamically linked ELF program needs none.
func sharedLibraries(path string) []string {
	f, err := elf.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	needed, err := f.ImportedLibraries()
	if err != nil {
		return nil
	}
	var libs []string
	for _, lib := range needed {
		if !systemLibrary(lib) {
			libs = append(libs, lib)
		}
	}
	return libs
}

// systemLibrary reports whether lib, a DT_NEEDED name, is one of the GNU
// C library's: the loader, libc and the libraries split from it.
func systemLibrary(lib string) bool {
	if strings.HasPrefix(lib, "ld-linux") {
		return true
	}
	name, _, _ := strings.Cut(lib, ".so")
	switch name {
	case "libc", "libm", "libpthread", "libdl", "librt", "libresolv", "libutil", "libanl", "libcrypt":
		return true
	}
	return false
}
