package spawn

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	api "github.com/chanos/chanos/interfaces/spawn"
	"github.com/chanos/chanos/internal/testkit"
)

func TestRing(t *testing.T) {
	r := newRing(8)
	r.write([]byte("abc"))
	if b, s := r.read(0, 100); string(b) != "abc" || s != 0 {
		t.Fatalf("read %q at %d", b, s)
	}
	r.write([]byte("defgh")) // exactly full
	r.write([]byte("ij"))    // drops "ab"
	if b, s := r.read(0, 100); string(b) != "cdefghij" || s != 2 {
		t.Fatalf("after wrap: %q at %d, want cdefghij at 2", b, s)
	}
	if b, s := r.read(5, 2); string(b) != "fg" || s != 5 {
		t.Fatalf("read(5, 2): %q at %d", b, s)
	}
	r.write([]byte("0123456789")) // larger than the ring
	if b, s := r.read(0, 100); string(b) != "23456789" || s != 12 || r.end != 20 {
		t.Fatalf("after an oversized write: %q at %d, end %d", b, s, r.end)
	}
	if b, s := r.read(20, 100); b != nil || s != 20 {
		t.Fatalf("read at the end: %q at %d", b, s)
	}
}

func TestParseCPUs(t *testing.T) {
	set, err := ParseCPUs("0-2,5")
	if err != nil || set.Count() != 4 || !set.IsSet(5) || set.IsSet(3) {
		t.Fatalf("0-2,5: %v, %v", set, err)
	}
	for _, bad := range []string{"", "a", "2-1", "-1", "0-", "1,,2", "99999"} {
		if _, err := ParseCPUs(bad); !errors.Is(err, api.ErrInvalid) {
			t.Errorf("%q: %v, want ErrInvalid", bad, err)
		}
	}
}

func newService(t *testing.T, cfg Config) *Service {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// run spawns r, waits for its end and returns its whole output.
func run(t *testing.T, s *Service, r Request) (string, api.Exit) {
	t.Helper()
	ctx := ctxFor(t)
	st, err := s.Spawn(r, Caller{Domain: 7})
	if err != nil {
		t.Fatal(err)
	}
	e, err := s.Wait(ctx, st.ID)
	if err != nil {
		t.Fatal(err)
	}
	var out []byte
	var from uint64
	for {
		b, start, done, err := s.Logs(ctx, st.ID, from, 1<<16, true)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b...)
		from = start + uint64(len(b))
		if done {
			return string(out), e
		}
	}
}

func TestExitStatusAndOutput(t *testing.T) {
	s := newService(t, Config{})
	out, e := run(t, s, Request{Program: "/bin/sh", Args: []string{"-c", "echo hi; echo $FOO >&2; exit 3"}, Env: []string{"FOO=bar"}})
	if out != "hi\nbar\n" || e.Code != 3 || e.Signal != 0 {
		t.Fatalf("output %q, %v; want \"hi\\nbar\\n\", exit status 3", out, e)
	}
}

// The buffer keeps the newest LogBytes; Logs says where its data starts.
func TestOutputBounded(t *testing.T) {
	s := newService(t, Config{LogBytes: 4096})
	run(t, s, Request{Program: "/bin/sh", Args: []string{"-c", "head -c 100000 /dev/zero | tr '\\0' x; echo END"}})
	// All of it has been read: what is kept is the newest 4096 bytes.
	b, start, done, err := s.Logs(ctxFor(t), 1, 0, 1<<16, false)
	if err != nil || !done || start != 100004-4096 {
		t.Fatalf("logs from 0: start %d, done %v, %v", start, done, err)
	}
	out := string(b)
	if len(out) != 4096 || !strings.HasSuffix(out, "xEND\n") {
		t.Fatalf("kept %d bytes ending %q, want 4096 ending xEND", len(out), out[max(0, len(out)-8):])
	}
	p := s.List()[0]
	if p.LogBytes != 100004 || p.LogDropped != 100004-4096 {
		t.Fatalf("log bytes %d, dropped %d", p.LogBytes, p.LogDropped)
	}
}

// Without cgroups (turned off here, as on a machine that offers none) a
// memory limit is RLIMIT_AS; CPU seconds are RLIMIT_CPU either way.
func TestCPUsAndLimits(t *testing.T) {
	s := newService(t, Config{noCgroups: true})
	out, _ := run(t, s, Request{Program: "/bin/sh", Args: []string{"-c", "grep Cpus_allowed_list /proc/self/status; ulimit -v; ulimit -t"},
		CPUs: "0", Mem: 256 << 20, CPU: 7})
	want := "Cpus_allowed_list:\t0\n262144\n7\n"
	if out != want {
		t.Fatalf("output %q, want %q", out, want)
	}
	if p := s.List()[0]; p.Limits != "rlimit" || p.MemLimit != 256<<20 || p.CPULimit != 7 {
		t.Fatalf("list: limits %q, mem_limit %d, cpu_limit %d; want rlimit, %d, 7", p.Limits, p.MemLimit, p.CPULimit, 256<<20)
	}
	// The spawner thread is back on every CPU: the next program is not
	// pinned.
	out, _ = run(t, s, Request{Program: "/bin/grep", Args: []string{"Cpus_allowed_list", "/proc/self/status"}})
	if out == "Cpus_allowed_list:\t0\n" && len(mustAffinity(t)) > 1 {
		t.Fatalf("an unpinned program is pinned: %q", out)
	}
}

func mustAffinity(t *testing.T) string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:\t"); ok {
			return v
		}
	}
	return ""
}

func TestKillAndWaitDeadline(t *testing.T) {
	s := newService(t, Config{})
	st, err := s.Spawn(Request{Program: "sleep", Args: []string{"100"}}, Caller{Domain: 7})
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := s.Wait(short, st.ID); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait past the deadline: %v", err)
	}
	if err := s.Kill(st.ID, syscall.SIGTERM, Caller{Domain: 7}); err != nil {
		t.Fatal(err)
	}
	e, err := s.Wait(ctxFor(t), st.ID)
	if err != nil || e.Signal != syscall.SIGTERM || e.Code != -1 {
		t.Fatalf("wait after SIGTERM: %v, %v", e, err)
	}
	// Killing an ended program is not an error, and signals nothing.
	if err := s.Kill(st.ID, syscall.SIGKILL, Caller{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Wait(ctxFor(t), 999); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("wait for an unknown id: %v", err)
	}
}

func TestPolicyAndQuotas(t *testing.T) {
	s := newService(t, Config{Allow: []string{"/bin", "/usr/bin"}, MaxRunningPerDomain: 2, MaxRunning: 3})
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Spawn(Request{Program: exe}, Caller{Domain: 1}); !errors.Is(err, api.ErrDenied) {
		t.Fatalf("a program outside the allowed directories: %v", err)
	}
	if _, err := s.Spawn(Request{Program: "/nonexistent/x"}, Caller{Domain: 1}); !errors.Is(err, api.ErrFailed) {
		t.Fatalf("a missing program: %v", err)
	}
	var ids []uint64
	spawn := func(dom uint64) error {
		st, err := s.Spawn(Request{Program: "sleep", Args: []string{"100"}}, Caller{Domain: dom})
		if err == nil {
			ids = append(ids, st.ID)
		}
		return err
	}
	for range 2 {
		if err := spawn(1); err != nil {
			t.Fatal(err)
		}
	}
	if err := spawn(1); !errors.Is(err, api.ErrExhausted) {
		t.Fatalf("beyond the domain's quota: %v", err)
	}
	if err := spawn(2); err != nil {
		t.Fatal(err)
	}
	if err := spawn(3); !errors.Is(err, api.ErrExhausted) {
		t.Fatalf("beyond the monitor's quota: %v", err)
	}
	for _, id := range ids {
		s.Kill(id, syscall.SIGKILL, Caller{})
		s.Wait(ctxFor(t), id)
	}
	// Ended programs give their slots back.
	if err := spawn(1); err != nil {
		t.Fatalf("after the others ended: %v", err)
	}
	s.Kill(ids[len(ids)-1], syscall.SIGKILL, Caller{})
}

// Ended programs are kept for wait up to MaxKept, the oldest forgotten
// first.
func TestKeptBounded(t *testing.T) {
	s := newService(t, Config{MaxKept: 2})
	var ids []uint64
	for range 3 {
		st, err := s.Spawn(Request{Program: "/bin/true"}, Caller{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Wait(ctxFor(t), st.ID); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, st.ID)
	}
	if _, err := s.Wait(ctxFor(t), ids[0]); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("the oldest of 3 ended programs, 2 kept: %v", err)
	}
	if n := len(s.List()); n != 2 {
		t.Fatalf("list: %d programs, want 2", n)
	}
}

// Close ends the programs still running: SIGTERM, then SIGKILL for one
// that ignores it.
func TestCloseEndsPrograms(t *testing.T) {
	s, err := New(Config{Grace: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.Spawn(Request{Program: "sleep", Args: []string{"100"}}, Caller{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Spawn(Request{Program: "/bin/sh", Args: []string{"-c", "trap '' TERM; echo ready; sleep 100 & wait"}}, Caller{})
	if err != nil {
		t.Fatal(err)
	}
	// The trap is set once it has said so.
	if _, _, _, err := s.Logs(ctxFor(t), b.ID, 0, 100, true); err != nil {
		t.Fatal(err)
	}
	s.Close()
	for _, st := range []api.Started{a, b} {
		if err := syscall.Kill(st.PID, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("pid %d still exists after Close: %v", st.PID, err)
		}
	}
	if _, err := s.Spawn(Request{Program: "/bin/true"}, Caller{}); !errors.Is(err, api.ErrUnavailable) {
		t.Fatalf("spawn after Close: %v", err)
	}
}

// A spawned program finds its token in CHANOS_SPAWN_TOKEN, which the
// request's environment cannot replace; Claim takes it once, for a running
// program only, and list then shows the domain.
func TestSpawnToken(t *testing.T) {
	s := newService(t, Config{})
	ctx := ctxFor(t)
	out, _ := run(t, s, Request{Program: "/bin/sh", Args: []string{"-c", "echo $" + TokenEnv}, Env: []string{TokenEnv + "=forged"}})
	tok := strings.TrimSpace(out)
	if len(tok) != 32 || tok == "forged" {
		t.Fatalf("the program's token: %q, want 32 hex digits of the service's", tok)
	}
	if s.Claim(tok, 5) {
		t.Error("the token of a program that has ended was claimed")
	}
	st, err := s.Spawn(Request{Program: "/bin/sh", Args: []string{"-c", "echo $" + TokenEnv + "; sleep 100"}}, Caller{Domain: 7})
	if err != nil {
		t.Fatal(err)
	}
	var live string
	testkit.Eventually(t, "the token printed", func() bool {
		data, _, _, _ := s.Logs(ctx, st.ID, 0, 1024, false)
		live = strings.TrimSpace(string(data))
		return len(live) == 32
	})
	if s.Claim("0123456789abcdef0123456789abcdef", 9) {
		t.Error("a token never given was claimed")
	}
	if !s.Claim(live, 9) {
		t.Fatal("the running program's token was not claimed")
	}
	if s.Claim(live, 10) {
		t.Error("a token was claimed twice")
	}
	for _, p := range s.List() {
		if p.ID == st.ID && p.Domain != 9 {
			t.Errorf("list: domain %d, want 9", p.Domain)
		}
	}
	s.Kill(st.ID, syscall.SIGKILL, Caller{Domain: 7})
}

// alive reports whether pid is a process that has not ended.
func alive(pid int) bool {
	return syscall.Kill(pid, 0) == nil && processState(pid) != "Z"
}

// leftover spawns a shell that starts `sleep 15` holding the program's
// output, in the program's process group or (detach) once it has left it
// for a session of its own, prints its pid and exits. It returns the
// program's id, once it has ended, and the sleep's pid, which is killed
// when the test ends if it is still that sleep.
func leftover(t *testing.T, s *Service, detach bool) (uint64, int) {
	t.Helper()
	ctx := ctxFor(t)
	script := "sleep 15 & echo $!"
	if detach {
		// The sixth field of stat is the session: its own, once setsid
		// has made it.
		script = `setsid sleep 15 & p=$!; until [ "$(cut -d' ' -f6 /proc/$p/stat)" = $p ]; do sleep 0.01; done; echo $p`
	}
	st, err := s.Spawn(Request{Program: "/bin/sh", Args: []string{"-c", script}}, Caller{Domain: 7})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Wait(ctx, st.ID); err != nil {
		t.Fatal(err)
	}
	var out []byte
	for !strings.Contains(string(out), "\n") {
		b, _, _, err := s.Logs(ctx, st.ID, uint64(len(out)), 1<<16, true)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b...)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("the leftover's pid: %q", out)
	}
	t.Cleanup(func() {
		if b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline"); string(b) == "sleep\x0015\x00" {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return st.ID, pid
}

// When a program ends, what it left in its process group is killed, so
// that its output is done at once and the quota of running programs
// bounds the processes a domain can have.
func TestProgramEndKillsItsProcessGroup(t *testing.T) {
	s := newService(t, Config{noCgroups: true})
	id, pid := leftover(t, s, false)
	// Well short of the sleep's 15 s: done comes with the end of the
	// pipe's last writer, the sleep, which is killed with the program.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for from := uint64(0); ; {
		b, start, done, err := s.Logs(ctx, id, from, 1<<16, true)
		if err != nil {
			t.Fatalf("the output of an ended program whose process group still runs is not done: %v", err)
		}
		from = start + uint64(len(b))
		if done {
			break
		}
	}
	// Its descriptors closed, it may take a moment more to end.
	for alive(pid) {
		if ctx.Err() != nil {
			t.Fatalf("pid %d, left in the program's process group, still runs after the program ended", pid)
		}
		time.Sleep(time.Millisecond)
	}
}

// A program that leaves a process holding its output, out of its process
// group, costs a reader and a descriptor only while it is kept: once it
// is forgotten its output is no longer read, and Close does not wait for
// such processes.
func TestForgottenProgramStopsReading(t *testing.T) {
	s, err := New(Config{MaxKept: 1, MaxRunning: 2, MaxRunningPerDomain: 2, Logger: slog.New(slog.DiscardHandler), noCgroups: true})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			s.Close()
		}
	})
	base := testkit.OpenFDs(t)
	var pids []int
	for range 8 {
		_, pid := leftover(t, s, true)
		pids = append(pids, pid)
	}
	if extra := testkit.OpenFDs(t) - base; extra > 2*(1+2) {
		t.Errorf("%d descriptors held for 1 program kept; the bound is 2 per program running or kept, 3 of them", extra)
	}
	s.mu.Lock()
	kept := len(s.procs)
	s.mu.Unlock()
	if kept != 1 {
		t.Errorf("%d programs kept, want 1", kept)
	}
	s.Close()
	closed = true
	// They outlive Close: it stopped reading the output they hold rather
	// than wait for them (they left the program's group: nothing kills
	// them without cgroups).
	for _, pid := range pids {
		if !alive(pid) {
			t.Fatalf("Close returned only after pid %d, which holds a program's output, ended", pid)
		}
	}
}

// Close's SIGKILL after the grace period goes to the groups of the
// programs not yet reaped only: the pid of one reaped meanwhile may lead
// another process group by then.
func TestCloseSignalsOnlyUnreapedGroups(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root, to choose the next pid (ns_last_pid)")
	}
	s, err := New(Config{Grace: 1500 * time.Millisecond, Logger: slog.New(slog.DiscardHandler), noCgroups: true})
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.Spawn(Request{Program: "sleep", Args: []string{"15"}}, Caller{})
	if err != nil {
		t.Fatal(err)
	}
	// b ignores SIGTERM, so that Close sends SIGKILL after its grace.
	b, err := s.Spawn(Request{Program: "/bin/sh", Args: []string{"-c", "trap '' TERM; echo ready; sleep 15 & wait"}}, Caller{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := s.Logs(ctxFor(t), b.ID, 0, 100, true); err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	go func() { s.Close(); close(closed) }()
	// a ends at the SIGTERM and is reaped; its pid goes to a process that
	// leads a group of its own, during the grace period.
	if _, err := s.Wait(ctxFor(t), a.ID); err != nil {
		t.Fatal(err)
	}
	var victim *exec.Cmd
	for try := 0; try < 100 && victim == nil; try++ {
		if err := os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(a.PID-1)), 0); err != nil {
			<-closed
			t.Skipf("cannot choose the next pid: %v", err)
		}
		c := exec.Command("sleep", "15")
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		if c.Process.Pid == a.PID {
			victim = c
		} else {
			c.Process.Kill()
			c.Wait()
		}
	}
	if victim == nil {
		<-closed
		t.Skip("could not get the pid reused")
	}
	<-closed
	victim.Process.Signal(syscall.SIGTERM)
	victim.Wait()
	if ws := victim.ProcessState.Sys().(syscall.WaitStatus); ws.Signaled() && ws.Signal() == syscall.SIGKILL {
		t.Fatalf("Close sent SIGKILL to process group %d, which a reaped program had led, and an unrelated process led by then", a.PID)
	}
}

// A spawn that races Close is either refused or ended by it: nothing it
// started outlives Close.
func TestSpawnRacingClose(t *testing.T) {
	for range 20 {
		s, err := New(Config{Grace: 100 * time.Millisecond, Logger: slog.New(slog.DiscardHandler), noCgroups: true})
		if err != nil {
			t.Fatal(err)
		}
		var pids []int
		done := make(chan struct{})
		go func() {
			defer close(done)
			for dom := uint64(1); ; dom++ {
				st, err := s.Spawn(Request{Program: "sleep", Args: []string{"15"}}, Caller{Domain: dom})
				if err != nil {
					if !errors.Is(err, api.ErrUnavailable) && !errors.Is(err, api.ErrExhausted) {
						t.Errorf("spawn: %v", err)
					}
					return
				}
				pids = append(pids, st.PID)
			}
		}()
		time.Sleep(5 * time.Millisecond)
		s.Close()
		<-done
		if _, err := s.Spawn(Request{Program: "/bin/true"}, Caller{}); !errors.Is(err, api.ErrUnavailable) {
			t.Fatalf("spawn after Close: %v", err)
		}
		for _, pid := range pids {
			// Reaped, not only signalled: a zombie would still answer.
			if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
				t.Fatalf("pid %d, spawned while Close ran, is still there after Close: %v (state %q)", pid, err, processState(pid))
			}
		}
	}
}

// Refusals are logged at most a line a second per kind, with the count of
// those left out, which a later line carries or a line of its own
// flushes: a flood of refused requests costs a line a second.
func TestRefusalsRateLimited(t *testing.T) {
	var logs testkit.Output
	s := newService(t, Config{CacheDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(&logs, nil)), noCgroups: true})
	const n = 1000
	begin := time.Now()
	for range n {
		if _, err := s.Spawn(Request{Program: "/bin/true", Env: []string{"bad"}}, Caller{Domain: 7}); !errors.Is(err, api.ErrInvalid) {
			t.Fatalf("an invalid environment: %v", err)
		}
	}
	took := time.Since(begin)
	// Another kind has its own allowance.
	if _, _, err := s.PutBegin("nothex", 1, 1, Caller{Domain: 7}); !errors.Is(err, api.ErrInvalid) {
		t.Fatalf("put_begin of a bad hash: %v", err)
	}
	if !strings.Contains(logs.String(), "upload refused") {
		t.Errorf("a refusal of another kind, after a flood of refused spawns, was not logged:\n%s", logs.String())
	}
	// The refusals logged, and the count of those left out.
	lines := func() (n, suppressed int) {
		for line := range strings.SplitSeq(logs.String(), "\n") {
			if !strings.Contains(line, "spawn refused") {
				continue
			}
			if !strings.Contains(line, "(more of the same)") {
				n++
			}
			if _, v, ok := strings.Cut(line, " suppressed="); ok {
				k, _ := strconv.Atoi(strings.Fields(v)[0])
				suppressed += k
			}
		}
		return
	}
	if got, _ := lines(); got > 2+int(took/time.Second) {
		t.Fatalf("%d lines for %d refused spawns in %v", got, n, took)
	}
	// Those left out are counted, in a line of their own once no refusal
	// comes to carry them.
	testkit.Eventually(t, "the count of the refusals left out", func() bool {
		got, suppressed := lines()
		return got+suppressed == n
	})
	if !strings.Contains(logs.String(), "(more of the same)") {
		t.Errorf("no line of its own for the refusals left out:\n%s", logs.String())
	}
}
