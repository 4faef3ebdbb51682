// Package spawn is the server side of the spawn service (docs/spawn.md):
// it starts programs as child processes of the monitor, keeps their
// output in bounded buffers, reaps them and keeps their exit status for
// a while, and enforces the spawn policy and quotas. The monitor hosts
// it as the export spawnd.<machine>; clients use the generated package
// interfaces/spawn.
package spawn

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	api "github.com/chanos/chanos/interfaces/spawn"
	"github.com/chanos/chanos/internal/ratelog"
)

// Defaults of Config's limits (docs/spawn.md#quotas).
const (
	DefaultMaxRunning          = 64
	DefaultMaxRunningPerDomain = 16
	DefaultLogBytes            = 64 << 10
	DefaultMaxKept             = 64
	DefaultKeep                = 10 * time.Minute
	DefaultGrace               = 2 * time.Second
)

// Config configures a Service. A zero field takes its default
// (WithDefaults).
type Config struct {
	// Allow lists the directories whose programs may be spawned (after
	// symbolic links are resolved, in the directory or below it); empty
	// allows any program the monitor's uid can run.
	Allow []string
	// NoRemote refuses spawn service connections from other machines of
	// the cluster (the monitor checks it at bind); by default a machine
	// admitted to the cluster may spawn here.
	NoRemote bool
	// Env is added to every program's environment after the monitor's
	// own and before the request's (the monitor sets CHANOS_DIR here).
	Env []string
	// MaxRunning caps the programs running at once, and
	// MaxRunningPerDomain those one domain started; a spawn beyond either
	// is refused with ErrExhausted.
	MaxRunning          int
	MaxRunningPerDomain int
	// LogBytes is the size of each program's output buffer: the newest
	// LogBytes of its stdout and stderr are kept. The output memory is at
	// most (MaxRunning+MaxKept)*LogBytes in all, and
	// MaxRunningPerDomain*LogBytes for the running programs of one domain.
	LogBytes int
	// MaxKept caps the ended programs kept for wait, logs and list, and
	// Keep is how long one is kept; the oldest is forgotten first.
	MaxKept int
	Keep    time.Duration
	// Grace is how long Close waits after SIGTERM before it sends SIGKILL.
	Grace time.Duration
	// Logger receives a line per request, with who asked. Nil means
	// slog.Default().
	Logger *slog.Logger

	// CacheDir is the directory of the cache of shipped programs (made
	// 0700 if missing); "" keeps none, and shipping is then unavailable.
	CacheDir string
	// CacheBytes caps the bytes of the cache's files and of the uploads
	// in progress together: the least recently used files are removed to
	// make room, and an upload that still does not fit is refused with
	// ErrExhausted. MaxShipBytes is the largest file an upload may bring.
	CacheBytes   int64
	MaxShipBytes int64
	// MaxUploads caps the uploads in progress, and MaxUploadsPerDomain
	// those of one domain; a put_begin beyond either is refused with
	// ErrExhausted. An upload that receives nothing for UploadIdle is
	// dropped, as is every upload of a connection that ends.
	MaxUploads          int
	MaxUploadsPerDomain int
	UploadIdle          time.Duration

	// CgroupName names the service's parent cgroup, made under the
	// monitor's own cgroup in each hierarchy that --limit uses (the
	// monitor derives it from its directory, so that monitors of one
	// machine do not meet); "" gives a name of this process's own.
	CgroupName string

	// noCgroups makes the service apply its limits as if the machine
	// offered no cgroups (the tests of the rlimit fallback).
	noCgroups bool
}

// WithDefaults returns c with each zero field set to its default.
func (c Config) WithDefaults() Config {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.MaxRunning, DefaultMaxRunning)
	def(&c.MaxRunningPerDomain, DefaultMaxRunningPerDomain)
	def(&c.LogBytes, DefaultLogBytes)
	def(&c.MaxKept, DefaultMaxKept)
	if c.Keep <= 0 {
		c.Keep = DefaultKeep
	}
	if c.Grace <= 0 {
		c.Grace = DefaultGrace
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.CacheBytes <= 0 {
		c.CacheBytes = DefaultCacheBytes
	}
	if c.MaxShipBytes <= 0 {
		c.MaxShipBytes = min(DefaultMaxShipBytes, c.CacheBytes)
	}
	def(&c.MaxUploads, DefaultMaxUploads)
	def(&c.MaxUploadsPerDomain, DefaultMaxUploadsPerDomain)
	if c.UploadIdle <= 0 {
		c.UploadIdle = DefaultUploadIdle
	}
	return c
}

// TokenEnv names the environment variable that holds a spawned
// program's spawn token: a domain's library presents it in its hello, and
// the monitor claims it (Claim), once, for the domain the program became.
const TokenEnv = "CHANOS_SPAWN_TOKEN"

// Claim records domain as the domain that the running program whose spawn
// token is token became; a token is claimed once. It reports whether the
// token was one of a running program's.
func (s *Service) Claim(token string, domain uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.tokens[token]
	if p == nil {
		return false
	}
	delete(s.tokens, token)
	p.token = ""
	p.info.Domain = domain
	return true
}

// Caller is who asks: the domain, as the monitor knows it.
type Caller = api.Caller

// domainOf is the key of who's quota: its domain, on its machine.
func domainOf(who Caller) Caller { return Caller{Domain: who.Domain, Machine: who.Machine} }

// Request is what to spawn.
type Request = api.Request

// Service runs the spawned programs of one monitor.
type Service struct {
	cfg   Config
	log   *slog.Logger
	allow []string // Config.Allow, resolved
	cache *cache   // nil without Config.CacheDir
	cg    *cgroups // what the machine offers for --limit

	starts   chan *startReq // to the spawner thread
	wg       sync.WaitGroup // the spawner, readers and reapers
	inflight sync.WaitGroup // spawns past their reservation, which Close waits for
	refusals *ratelog.Log

	mu      sync.Mutex
	procs   map[uint64]*proc
	stuck   []*progCgroup    // program cgroups not yet empty when their program was reaped
	tokens  map[string]*proc // the running programs' unclaimed spawn tokens
	nextID  uint64
	running int
	byDom   map[Caller]int // running programs by the domain that started them (Domain and Machine only)
	closed  bool
	stopped chan struct{} // closed by Close
}

// proc is one spawned program.
type proc struct {
	info api.Proc // under Service.mu; State and the end fields change
	cmd  *exec.Cmd
	pipe *os.File // the output's read end, which read closes
	out  *ring    // under Service.mu
	// changed is closed, and replaced, whenever out, eof or exited
	// changes (under Service.mu).
	changed chan struct{}
	eof     bool // all writers of the output pipe have closed it
	exited  bool
	exit    api.Exit
	token   string        // its CHANOS_SPAWN_TOKEN, until claimed or ended
	ended   chan struct{} // closed once exited
	cg      *progCgroup   // its cgroup, or nil; removed once it is reaped

	// ending: its end has been seen and it is about to be reaped, after
	// which its pid, the id of its process group, may be another
	// process's. The group is signalled only before (signalGroupLocked).
	// Under Service.mu.
	ending bool
}

// New returns a service configured by cfg. Close ends it.
func New(cfg Config) (*Service, error) {
	cfg = cfg.WithDefaults()
	s := &Service{
		cfg:     cfg,
		log:     cfg.Logger,
		starts:  make(chan *startReq),
		procs:   map[uint64]*proc{},
		tokens:  map[string]*proc{},
		byDom:   map[Caller]int{},
		stopped: make(chan struct{}),
	}
	s.refusals = ratelog.New(s.log, refusalInterval)
	// The cache first: made if missing, it may be an allowed directory.
	if cfg.CacheDir != "" {
		c, err := openCache(cfg.CacheDir, &s.cfg)
		if err != nil {
			return nil, err
		}
		s.cache = c
	}
	for _, d := range cfg.Allow {
		abs, err := filepath.Abs(d)
		if err == nil {
			abs, err = filepath.EvalSymlinks(abs)
		}
		if err != nil {
			return nil, fmt.Errorf("spawn: allowed directory %q: %w", d, err)
		}
		s.allow = append(s.allow, abs)
	}
	if cfg.noCgroups {
		s.cg = &cgroups{why: "cgroups are turned off"}
	} else {
		name := cfg.CgroupName
		if name == "" {
			name = fmt.Sprintf("chanos-spawn-%d-%d", os.Getpid(), serviceSeq.Add(1))
		}
		s.cg = openCgroups(name)
	}
	if s.cg.version == 0 {
		s.log.Info("spawn limits: rlimits (no cgroups)", "why", s.cg.why)
	} else {
		s.log.Info("spawn limits: "+s.cg.label(), "memory", s.cg.mem, "cpu", s.cg.cpu)
	}
	ready := make(chan struct{})
	s.wg.Add(1)
	go s.spawner(ready)
	<-ready
	return s, nil
}

// serviceSeq numbers the services of this process, for their default
// cgroup names.
var serviceSeq atomic.Uint64

// Close refuses new spawns, sends SIGTERM to the running programs, and
// SIGKILL to those still running after Config.Grace, and waits until
// they are reaped.
func (s *Service) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.wg.Wait()
		return
	}
	s.closed = true
	close(s.stopped)
	if s.cache != nil {
		s.cache.close()
	}
	s.mu.Unlock()
	// The spawns already past their reservation end first (the spawner
	// has stopped, so they are quick), so that every program they started
	// is in s.procs below and its reader and reaper counted in s.wg.
	s.inflight.Wait()
	s.mu.Lock()
	var live []*proc
	for _, p := range s.procs {
		if !p.exited {
			live = append(live, p)
			// Each program leads its own process group (Setpgid): the
			// signals go to the group, so that what a program started ends
			// with it.
			p.signalGroupLocked(syscall.SIGTERM)
		}
	}
	s.mu.Unlock()
	t := time.NewTimer(s.cfg.Grace)
	defer t.Stop()
	killed := false
	for _, p := range live {
		select {
		case <-p.ended:
		case <-t.C:
			killed = true
		}
		if killed {
			break
		}
	}
	if killed {
		s.mu.Lock()
		for _, p := range live {
			p.signalGroupLocked(syscall.SIGKILL)
		}
		s.mu.Unlock()
	}
	for _, p := range live {
		<-p.ended
	}
	// A process that left the group may still hold an output pipe: stop
	// reading them, rather than wait for it.
	s.mu.Lock()
	for _, p := range s.procs {
		if !p.eof {
			p.pipe.Close()
		}
	}
	s.mu.Unlock()
	s.wg.Wait()
	s.removeCgroups()
	s.refusals.Close()
}

// signalGroupLocked sends sig to p's process group, unless p's end has
// been seen: the group's id is the program's pid, which the kernel may
// give to another process once the program is reaped. Until reap sets
// p.ending, under Service.mu, the program is at worst a zombie, which
// keeps its pid, and with it the group's id.
func (p *proc) signalGroupLocked(sig syscall.Signal) {
	if !p.ending {
		syscall.Kill(-p.info.PID, sig)
	}
}

// removeCgroups removes, once every program has been reaped, the
// program cgroups that still held processes at their program's end (what
// a program started and left running: they are killed now, as Close's
// signals to the process groups would have, had they stayed in them),
// then the service's parent cgroups.
func (s *Service) removeCgroups() {
	s.mu.Lock()
	stuck := s.stuck
	s.stuck = nil
	s.mu.Unlock()
	for _, pc := range stuck {
		pc.killAll()
		var err error
		for try := 0; try < 50; try++ {
			if err = pc.remove(); err == nil {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err != nil {
			s.log.Warn("spawn: a program's cgroup stays", "err", err)
		}
	}
	if err := s.cg.close(); err != nil {
		s.log.Warn("spawn: the service's cgroup stays", "err", err)
	}
}

// startReq is a start for the spawner thread.
type startReq struct {
	cmd  *exec.Cmd
	cpus *CPUSet // nil: no pinning
	err  chan error
}

// spawner starts every program, on one OS thread that it never leaves,
// for two reasons: a child inherits the affinity of the thread that forks
// it, so pinning that thread for the fork pins the program from its
// first instruction, without a helper process; and Pdeathsig fires when
// the thread that forked the child exits, so that thread must live as
// long as the monitor.
func (s *Service) spawner(ready chan<- struct{}) {
	defer s.wg.Done()
	runtime.LockOSThread()
	// Never unlocked: when the goroutine returns, its thread exits with
	// it, and the programs still running get their Pdeathsig, which is
	// right then (Close has already stopped them).
	var all CPUSet
	haveAll := schedAffinity(false, &all) == nil
	close(ready)
	for {
		select {
		case r := <-s.starts:
			if r.cpus != nil {
				if !haveAll {
					r.err <- errors.New("the monitor cannot read its own CPU affinity")
					continue
				}
				if err := schedAffinity(true, r.cpus); err != nil {
					r.err <- fmt.Errorf("%w: set the CPU affinity: %v", api.ErrInvalid, err)
					continue
				}
			}
			err := r.cmd.Start()
			if r.cpus != nil {
				if rerr := schedAffinity(true, &all); rerr != nil {
					s.log.Error("spawn: restore the spawner thread's CPU affinity", "err", rerr)
				}
			}
			r.err <- err
		case <-s.stopped:
			return
		}
	}
}

// Spawn starts r for who and returns its id and pid.
func (s *Service) Spawn(r Request, who Caller) (api.Started, error) {
	log := s.log.With("call", "spawn.spawn", "domain", who.Domain, "pid", who.PID, "uid", who.UID, "by", who.Program,
		"program", r.Program, "args", r.Args)
	if who.Machine != "" {
		log = log.With("from_machine", who.Machine)
	}
	st, err := s.spawn(r, who, "")
	if err != nil {
		s.refused(log, "spawn.spawn", "spawn refused", err)
		return st, err
	}
	log.Info("spawned", "id", st.ID, "child_pid", st.PID, "cpus", r.CPUs, "mem_limit", r.Mem, "cpu_limit", r.CPU, "cpu_rate_milli", r.CPURate)
	return st, nil
}

// spawn starts r for who: the file shipped (a verified path of the
// cache) if not "", else r.Program as resolve finds it.
func (s *Service) spawn(r Request, who Caller, shipped string) (api.Started, error) {
	if r.Program == "" {
		return api.Started{}, fmt.Errorf("%w: no program", api.ErrInvalid)
	}
	for _, e := range r.Env {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			return api.Started{}, fmt.Errorf("%w: environment entry %q is not K=V", api.ErrInvalid, e)
		}
	}
	var cpus *CPUSet
	if r.CPUs != "" {
		set, err := ParseCPUs(r.CPUs)
		if err != nil {
			return api.Started{}, err
		}
		cpus = set
	}
	path := shipped
	if path == "" {
		var err error
		if path, err = s.resolve(r.Program); err != nil {
			return api.Started{}, err
		}
	}
	if r.Dir != "" {
		if fi, err := os.Stat(r.Dir); err != nil || !fi.IsDir() {
			return api.Started{}, fmt.Errorf("%w: directory %q: not a directory", api.ErrInvalid, r.Dir)
		}
	}
	if r.CPURate > 0 {
		if r.CPURate < MinCPURate {
			return api.Started{}, fmt.Errorf("%w: CPU rate %d thousandths of a CPU: the least is %d", api.ErrInvalid, r.CPURate, MinCPURate)
		}
		if s.cg.version == 0 {
			return api.Started{}, fmt.Errorf("%w: a CPU-rate limit needs cgroups, which this machine does not offer the monitor (%s)",
				api.ErrUnavailable, s.cg.why)
		}
	}
	// Memory and CPU rate go to a cgroup where there are cgroups; CPU
	// seconds, and memory without cgroups, to rlimits.
	useCgroup := s.cg.version != 0 && (r.Mem > 0 || r.CPURate > 0)
	rlimMem := r.Mem
	var limits []string
	if useCgroup {
		rlimMem = 0
		limits = append(limits, s.cg.label())
	}
	if rlimMem > 0 || r.CPU > 0 {
		limits = append(limits, "rlimit")
	}

	// The reservation: a running slot, of the monitor and of the domain,
	// before anything is made.
	s.mu.Lock()
	switch {
	case s.closed:
		s.mu.Unlock()
		return api.Started{}, fmt.Errorf("%w: the monitor is shutting down", api.ErrUnavailable)
	case s.running >= s.cfg.MaxRunning:
		s.mu.Unlock()
		return api.Started{}, fmt.Errorf("%w: %d programs are running, the monitor's quota (--spawn-max)", api.ErrExhausted, s.running)
	case s.byDom[domainOf(who)] >= s.cfg.MaxRunningPerDomain:
		s.mu.Unlock()
		return api.Started{}, fmt.Errorf("%w: domain %d has %d programs running, its quota (--spawn-max-per-domain)", api.ErrExhausted, who.Domain, s.byDom[domainOf(who)])
	}
	s.running++
	s.byDom[domainOf(who)]++
	s.nextID++
	id := s.nextID
	s.inflight.Add(1)
	s.mu.Unlock()
	defer s.inflight.Done()
	release := func() {
		s.mu.Lock()
		s.releaseLocked(domainOf(who))
		s.mu.Unlock()
	}

	pr, pw, err := os.Pipe()
	if err != nil {
		release()
		return api.Started{}, fmt.Errorf("%w: output pipe: %v", api.ErrFailed, err)
	}
	var tok [16]byte
	if _, err := rand.Read(tok[:]); err != nil {
		pr.Close()
		pw.Close()
		release()
		return api.Started{}, fmt.Errorf("%w: spawn token: %v", api.ErrFailed, err)
	}
	token := hex.EncodeToString(tok[:])
	var pcg *progCgroup
	if useCgroup {
		if pcg, err = s.cg.make(id, r.Mem, r.CPURate); err != nil {
			pr.Close()
			pw.Close()
			release()
			if errors.Is(err, errCgroupsClosed) {
				return api.Started{}, fmt.Errorf("%w: the monitor is shutting down", api.ErrUnavailable)
			}
			return api.Started{}, fmt.Errorf("%w: limits: %v", api.ErrFailed, err)
		}
	}
	cmd := &exec.Cmd{
		Path: path,
		Args: append([]string{r.Program}, r.Args...),
		// The token last: the request's own environment cannot replace it.
		Env: append(append(append(append(os.Environ(), s.cfg.Env...), "CHANOS_SPAWN_ID="+strconv.FormatUint(id, 10)), r.Env...),
			TokenEnv+"="+token),
		Dir:    r.Dir,
		Stdout: pw, // one pipe for both: the output interleaved as written
		Stderr: pw,
		SysProcAttr: &syscall.SysProcAttr{
			// Its own process group: a terminal's ^C to the monitor is not
			// sent to the programs too.
			Setpgid: true,
			// The program is told when the monitor dies (see spawner).
			Pdeathsig: syscall.SIGTERM,
		},
	}
	// With limits, the program starts behind a gate: /bin/sh waits for a
	// line on descriptor 3, which comes once its process is in the
	// program's cgroup and has its rlimits, and then becomes the program
	// (exec keeps both). os/exec cannot run code between fork and exec,
	// so without the gate the program would run unlimited until
	// prlimit(2) or the write to cgroup.procs reached it.
	var gate *os.File
	if len(limits) > 0 {
		gr, gw, err := os.Pipe()
		if err != nil {
			pr.Close()
			pw.Close()
			if pcg != nil {
				pcg.remove()
			}
			release()
			return api.Started{}, fmt.Errorf("%w: limit gate: %v", api.ErrFailed, err)
		}
		defer gr.Close()
		gate = gw
		cmd.Path = "/bin/sh"
		cmd.Args = append([]string{"sh", "-c", `read -r _ <&3 || exit 125; exec 3<&-; exec "$0" "$@"`, path}, r.Args...)
		cmd.ExtraFiles = []*os.File{gr}
	}
	// A file just shipped may still be open for writing in a child that
	// another goroutine forked while the upload wrote it, until that child
	// execs: the kernel then refuses to run it for a moment (ETXTBSY).
	// Behind the gate, that refusal would come to the shell's own exec,
	// after the start, too late to try again: so wait for the writers to
	// go first. The retry of the start stays, for a kernel that cannot
	// tell (writersGone).
	if shipped != "" {
		err = s.writersGone(shipped)
	}
	textBusy := time.Now().Add(textBusyWait)
	for err == nil {
		req := &startReq{cmd: cmd, cpus: cpus, err: make(chan error, 1)}
		select {
		case s.starts <- req:
			err = <-req.err
		case <-s.stopped:
			err = fmt.Errorf("%w: the monitor is shutting down", api.ErrUnavailable)
		}
		if !errors.Is(err, syscall.ETXTBSY) || shipped == "" || time.Now().After(textBusy) {
			break
		}
		time.Sleep(5 * time.Millisecond)
		err = nil
		cmd = &exec.Cmd{Path: cmd.Path, Args: cmd.Args, Env: cmd.Env, Dir: cmd.Dir, Stdout: cmd.Stdout, Stderr: cmd.Stderr,
			SysProcAttr: cmd.SysProcAttr, ExtraFiles: cmd.ExtraFiles}
	}
	pw.Close() // the child holds its copy
	if err != nil {
		if gate != nil {
			gate.Close()
		}
		if pcg != nil {
			pcg.remove()
		}
		pr.Close()
		release()
		if errors.Is(err, api.ErrUnavailable) || errors.Is(err, api.ErrInvalid) || errors.Is(err, api.ErrFailed) {
			return api.Started{}, err
		}
		return api.Started{}, fmt.Errorf("%w: %v", api.ErrFailed, err)
	}
	pid := cmd.Process.Pid
	if gate != nil {
		// The limits, on the gate's process, before the program runs.
		var lerr error
		if pcg != nil {
			lerr = pcg.enter(pid)
		}
		if lerr == nil {
			lerr = setLimits(pid, rlimMem, r.CPU)
		}
		if lerr == nil {
			_, lerr = gate.Write([]byte("\n"))
		}
		gate.Close()
		if lerr != nil {
			cmd.Process.Kill()
			cmd.Wait()
			if pcg != nil {
				pcg.remove()
			}
			pr.Close()
			release()
			return api.Started{}, fmt.Errorf("%w: limits: %v", api.ErrFailed, lerr)
		}
	}
	p := &proc{
		info: api.Proc{
			ID: id, PID: pid, Name: r.Name, Program: path, Args: r.Args, State: "running",
			StartedBy: who, Started: time.Now(), CPUs: r.CPUs, MemLimit: r.Mem, CPULimit: r.CPU,
			CPURate: float64(r.CPURate) / 1000, Limits: strings.Join(limits, ", "),
		},
		cg:      pcg,
		cmd:     cmd,
		pipe:    pr,
		out:     newRing(s.cfg.LogBytes),
		changed: make(chan struct{}),
		ended:   make(chan struct{}),
		token:   token,
	}
	// Close, if it has begun, waits for this spawn (s.inflight) before it
	// looks for the programs to end: it ends this one too.
	s.mu.Lock()
	s.procs[id] = p
	s.tokens[token] = p
	s.wg.Add(2)
	s.mu.Unlock()
	go s.read(p)
	go s.reap(p)
	return api.Started{ID: id, PID: pid}, nil
}

// textBusyWait bounds the wait of the spawn of a shipped program for the
// writers of its file to go (ETXTBSY).
const textBusyWait = time.Second

// writersGone waits, up to textBusyWait, until no process holds path open
// for writing. Where the kernel cannot tell (no leases on the file's
// filesystem), it returns at once: the start's own ETXTBSY is then tried
// again.
func (s *Service) writersGone(path string) error {
	deadline := time.Now().Add(textBusyWait)
	for {
		busy, err := openForWriting(path)
		if err != nil || !busy {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: %s is held open for writing: %v", api.ErrFailed, path, syscall.ETXTBSY)
		}
		select {
		case <-time.After(5 * time.Millisecond):
		case <-s.stopped:
			return fmt.Errorf("%w: the monitor is shutting down", api.ErrUnavailable)
		}
	}
}

func (s *Service) releaseLocked(dom Caller) {
	s.running--
	if s.byDom[dom]--; s.byDom[dom] <= 0 {
		delete(s.byDom, dom)
	}
}

// resolve finds program and checks it against the policy.
func (s *Service) resolve(program string) (string, error) {
	path, err := exec.LookPath(program)
	if err != nil {
		return "", fmt.Errorf("%w: %v", api.ErrFailed, err)
	}
	if path, err = filepath.Abs(path); err != nil {
		return "", fmt.Errorf("%w: %v", api.ErrFailed, err)
	}
	if len(s.allow) == 0 {
		return path, nil
	}
	// The check is on the file the path resolves to, and the program run
	// is that file: a symbolic link in an allowed directory does not let
	// a program from elsewhere in.
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", fmt.Errorf("%w: %v", api.ErrFailed, err)
	}
	for _, d := range s.allow {
		if rel, err := filepath.Rel(d, real); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
			return real, nil
		}
	}
	return "", fmt.Errorf("%w: %s (%s) is outside the allowed directories %v", api.ErrDenied, program, real, s.cfg.Allow)
}

// setLimits applies rlimits to pid: RLIMIT_AS of mem bytes, RLIMIT_CPU
// of cpu seconds (0: none).
func setLimits(pid int, mem, cpu uint64) error {
	if mem > 0 {
		if err := prlimit(pid, syscall.RLIMIT_AS, &syscall.Rlimit{Cur: mem, Max: mem}); err != nil {
			return fmt.Errorf("RLIMIT_AS: %w", err)
		}
	}
	if cpu > 0 {
		// The soft limit sends SIGXCPU, the hard one a second later SIGKILL.
		if err := prlimit(pid, syscall.RLIMIT_CPU, &syscall.Rlimit{Cur: cpu, Max: cpu + 1}); err != nil {
			return fmt.Errorf("RLIMIT_CPU: %w", err)
		}
	}
	return nil
}

// notifyLocked wakes those waiting for p to change.
func (p *proc) notifyLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// read copies p's output into its ring until every writer has closed
// the pipe.
func (s *Service) read(p *proc) {
	defer s.wg.Done()
	r := p.pipe
	defer r.Close()
	buf := make([]byte, 16<<10)
	for {
		n, err := r.Read(buf)
		s.mu.Lock()
		if n > 0 {
			p.out.write(buf[:n])
		}
		if err != nil {
			p.eof = true
		}
		p.notifyLocked()
		s.mu.Unlock()
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrClosed) {
				s.log.Warn("spawn: read the output", "id", p.info.ID, "err", err)
			}
			return
		}
	}
}

// reap waits for p's end and records it.
func (s *Service) reap(p *proc) {
	defer s.wg.Done()
	// The end, seen before the program is reaped: until then it is a
	// zombie, which keeps its pid, so its process group can still be told
	// from any other. What the program left running in it is killed now,
	// with the program: the quotas of running programs then bound the
	// processes too, and the output pipe is not held open by what nobody
	// watches any more. (A process that left the group, with setsid, runs
	// on; with a cgroup, Close kills it.)
	seen := waitExited(p.info.PID) == nil
	s.mu.Lock()
	if seen {
		p.signalGroupLocked(syscall.SIGKILL)
	}
	p.ending = true
	s.mu.Unlock()
	err := p.cmd.Wait()
	st := p.cmd.ProcessState
	var exit api.Exit
	state := "exited"
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		exit = api.Exit{Code: -1, Signal: ws.Signal()}
		state = "signalled"
	} else {
		exit = api.Exit{Code: st.ExitCode()}
	}
	if err != nil && st == nil {
		s.log.Warn("spawn: wait", "id", p.info.ID, "err", err)
	}
	var oom bool
	if p.cg != nil {
		// Read before the cgroup goes. A cgroup that still holds what the
		// program started stays until Close.
		oom = p.cg.oomKills() > 0
		cerr := p.cg.remove()
		// What was killed with the program may take a moment to leave.
		for try := 0; cerr != nil && seen && try < 20; try++ {
			time.Sleep(5 * time.Millisecond)
			cerr = p.cg.remove()
		}
		if cerr != nil {
			s.log.Info("spawn: the program's cgroup is not empty at its end; it goes when the service closes", "id", p.info.ID, "err", cerr)
			s.mu.Lock()
			s.stuck = append(s.stuck, p.cg)
			s.mu.Unlock()
		}
	}
	s.mu.Lock()
	p.info.OOMKilled = oom
	p.exited, p.exit = true, exit
	if p.token != "" {
		delete(s.tokens, p.token)
		p.token = ""
	}
	p.info.State, p.info.ExitCode, p.info.Signal = state, exit.Code, int(exit.Signal)
	p.info.Ended = time.Now()
	p.info.CPUSeconds = (st.UserTime() + st.SystemTime()).Seconds()
	if ru, ok := st.SysUsage().(*syscall.Rusage); ok {
		p.info.MemBytes = uint64(ru.Maxrss) * 1024
	}
	s.releaseLocked(domainOf(p.info.StartedBy))
	p.notifyLocked()
	close(p.ended)
	s.forgetLocked(time.Now())
	s.mu.Unlock()
	s.log.Info("spawned program ended", "id", p.info.ID, "child_pid", p.info.PID, "program", p.info.Program, "how", exit.String())
}

// forgetLocked forgets the ended programs kept past Config.Keep, and the
// oldest beyond Config.MaxKept.
func (s *Service) forgetLocked(now time.Time) {
	var ended []*proc
	for _, p := range s.procs {
		if !p.exited {
			continue
		}
		if now.Sub(p.info.Ended) > s.cfg.Keep {
			s.forgetOneLocked(p)
			continue
		}
		ended = append(ended, p)
	}
	if n := len(ended) - s.cfg.MaxKept; n > 0 {
		slices.SortFunc(ended, func(a, b *proc) int { return a.info.Ended.Compare(b.info.Ended) })
		for _, p := range ended[:n] {
			s.forgetOneLocked(p)
		}
	}
}

// forgetOneLocked forgets p, which has ended. If a process that left its
// group still holds its output, its reader stops: nobody can ask for that
// output any more, and the readers, their buffers and descriptors stay
// bounded by the programs running and kept. (The pipe's Close waits for
// the reader's Read in progress, which returns at once, and takes
// Service.mu only after.)
func (s *Service) forgetOneLocked(p *proc) {
	delete(s.procs, p.info.ID)
	if !p.eof {
		p.pipe.Close()
	}
}

func (s *Service) get(id uint64) (*proc, error) {
	p := s.procs[id]
	if p == nil {
		return nil, fmt.Errorf("%w: %d (never spawned here, or forgotten after its end)", api.ErrNotFound, id)
	}
	return p, nil
}

// Wait waits until program id has ended, or ctx ends.
func (s *Service) Wait(ctx context.Context, id uint64) (api.Exit, error) {
	s.mu.Lock()
	s.forgetLocked(time.Now())
	p, err := s.get(id)
	s.mu.Unlock()
	if err != nil {
		return api.Exit{}, err
	}
	select {
	case <-p.ended:
		s.mu.Lock()
		defer s.mu.Unlock()
		return p.exit, nil
	case <-ctx.Done():
		return api.Exit{}, ctx.Err()
	case <-s.stopped:
		// Close ends the programs; wait for that rather than answer
		// "unavailable" for a program that is about to end anyway.
		select {
		case <-p.ended:
			return p.exit, nil
		case <-ctx.Done():
			return api.Exit{}, ctx.Err()
		}
	}
}

// Kill sends sig to program id, who asking. A program that has ended is
// not signalled (its pid may be another process's by now).
func (s *Service) Kill(id uint64, sig syscall.Signal, who Caller) error {
	if sig < 0 || sig > 64 {
		return fmt.Errorf("%w: signal %d", api.ErrInvalid, sig)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p, err := s.get(id)
	if err != nil {
		return err
	}
	s.log.Info("spawn: kill", "call", "spawn.kill", "id", id, "signal", sig, "domain", who.Domain, "pid", who.PID, "by", who.Program, "from_machine", who.Machine)
	if p.exited {
		return nil
	}
	// os.Process signals through a pidfd, and refuses once the process
	// has been waited for, so a pid reused since is never signalled.
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("%w: kill %d: %v", api.ErrFailed, id, err)
	}
	return nil
}

// Logs returns at most max bytes of program id's output from offset
// from; see the logs rpc. With follow and nothing new, it waits for
// output, the program's end or ctx.
func (s *Service) Logs(ctx context.Context, id, from uint64, max int, follow bool) (data []byte, start uint64, done bool, err error) {
	for {
		s.mu.Lock()
		p, err := s.get(id)
		if err != nil {
			s.mu.Unlock()
			return nil, 0, false, err
		}
		data, start = p.out.read(from, max)
		over := p.eof && p.exited
		done = over && start+uint64(len(data)) == p.out.end
		changed := p.changed
		s.mu.Unlock()
		if len(data) > 0 || done || !follow {
			return data, start, done, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, start, false, ctx.Err()
		}
	}
}

// List describes the programs, newest first.
func (s *Service) List() []api.Proc {
	s.mu.Lock()
	s.forgetLocked(time.Now())
	out := make([]api.Proc, 0, len(s.procs))
	var running []int
	for _, p := range s.procs {
		p.info.LogBytes = p.out.end
		p.info.LogDropped = p.out.start()
		if !p.exited {
			running = append(running, len(out))
		}
		out = append(out, p.info)
	}
	s.mu.Unlock()
	for _, i := range running {
		out[i].CPUSeconds, out[i].MemBytes = procUsage(out[i].PID)
	}
	slices.SortFunc(out, func(a, b api.Proc) int { return int(b.ID) - int(a.ID) })
	return out
}

// procUsage reads a running process's CPU seconds and resident set from
// /proc; zeros if it has gone.
func procUsage(pid int) (cpu float64, rss uint64) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0
	}
	// Fields after the command, which is in parentheses and may hold
	// spaces: utime and stime are fields 14 and 15, rss 24 (in pages).
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 22 {
		return 0, 0
	}
	ut, _ := strconv.ParseUint(f[11], 10, 64)
	st, _ := strconv.ParseUint(f[12], 10, 64)
	pages, _ := strconv.ParseUint(f[21], 10, 64)
	// USER_HZ is 100 on every Linux ABI Go supports.
	return float64(ut+st) / 100, pages * uint64(os.Getpagesize())
}

// ParseCPUs parses a CPU list ("0-2,5") into a set.
func ParseCPUs(list string) (*CPUSet, error) {
	var set CPUSet
	bad := func() (*CPUSet, error) {
		return nil, fmt.Errorf("%w: CPU list %q (want a list such as 0-2,5)", api.ErrInvalid, list)
	}
	max := len(set) * 64
	for part := range strings.SplitSeq(list, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return bad()
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				return bad()
			}
		}
		if a < 0 || b < a || b >= max {
			return bad()
		}
		for c := a; c <= b; c++ {
			set.Set(c)
		}
	}
	return &set, nil
}
