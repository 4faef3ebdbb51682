// Package spawn tests the spawn service end to end: a real monitor
// process (chanos monitor), real spawned programs, and clients in this
// process, in the CLI and in C (docs/spawn.md).
package spawn

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/interfaces/nameservice"
	"github.com/chanos/chanos/interfaces/pingpong"
	spawnif "github.com/chanos/chanos/interfaces/spawn"
	"github.com/chanos/chanos/internal/testkit"
	"github.com/chanos/chanos/monitor"
	"github.com/chanos/chanos/names"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testkit.CleanPrograms()
	os.Exit(code)
}

// env is a monitor with a spawn policy, a domain of it in this process
// and that domain's spawn connection.
type env struct {
	dir string
	mon *testkit.Child
	d   *chanos.Domain
	c   *spawnif.Conn
}

// server is the Go server the tests spawn.
const serverPkg = "github.com/chanos/chanos/examples/pingpong/server"

func setup(t *testing.T, flags ...string) *env {
	t.Helper()
	srv := testkit.GoProgram(t, serverPkg)
	flags = append([]string{"--spawn-allow", "/bin", "--spawn-allow", "/usr/bin", "--spawn-allow", filepath.Dir(srv)}, flags...)
	dir, mon := testkit.StartMonitor(t, flags...)
	return joined(t, dir, mon, "spawn-test")
}

// joined is the env of the monitor mon running in dir: a domain of it in
// this process, called program, and that domain's spawn connection.
func joined(t *testing.T, dir string, mon *testkit.Child, program string) *env {
	t.Helper()
	ctx := testkit.Context(t)
	d, err := chanos.Join(ctx, chanos.WithDir(dir), chanos.WithProgram(program), chanos.WithoutRejoin())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	c, err := spawnif.Dial(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &env{dir: dir, mon: mon, d: d, c: c}
}

// start spawns r; the program is killed at the test's end if it still
// runs.
func (e *env) start(t *testing.T, r spawnif.Request) spawnif.Started {
	t.Helper()
	st, err := e.c.Start(testkit.Context(t), r)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(st.PID, syscall.SIGKILL) })
	return st
}

// output reads everything id wrote, following it to its end.
func (e *env) output(t *testing.T, id uint64) string {
	t.Helper()
	ctx := testkit.Context(t)
	var out []byte
	var from uint64
	for {
		b, start, done, err := e.c.Output(ctx, id, from, true)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b...)
		from = start + uint64(len(b))
		if done {
			return string(out)
		}
	}
}

func TestExitCodeAndLogs(t *testing.T) {
	e := setup(t)
	ctx := testkit.Context(t)
	st := e.start(t, spawnif.Request{Program: "/bin/sh", Args: []string{"-c", "echo hi; exit 3"}})
	ex, err := e.c.WaitExit(ctx, st.ID)
	if err != nil || ex.Code != 3 || ex.Signal != 0 {
		t.Fatalf("wait: %v, %v; want exit status 3", ex, err)
	}
	if out := e.output(t, st.ID); out != "hi\n" {
		t.Fatalf("logs: %q, want \"hi\\n\"", out)
	}
	// The spawn services are counted as the nameservice counts a class.
	ns, err := nameservice.Connect(ctx, e.d, nameservice.ServiceName)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	if n, err := ns.GetCount(ctx, spawnif.ServicePrefix); err != nil || n != 1 {
		t.Fatalf("get_count(spawnd): %d, %v; want 1", n, err)
	}
}

func TestKillReportsSignal(t *testing.T) {
	e := setup(t)
	ctx := testkit.Context(t)
	st := e.start(t, spawnif.Request{Program: "sleep", Args: []string{"100"}})
	if err := e.c.Signal(ctx, st.ID, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	ex, err := e.c.WaitExit(ctx, st.ID)
	if err != nil || ex.Signal != syscall.SIGTERM {
		t.Fatalf("wait: %v, %v; want signal SIGTERM", ex, err)
	}
}

// A spawned Go server joins the monitor without configuration, exports a
// name, and a client here connects to it; list shows the domain it
// became; its name goes with it.
func TestSpawnedServer(t *testing.T) {
	e := setup(t)
	ctx := testkit.Context(t)
	st := e.start(t, spawnif.Request{Program: testkit.GoProgram(t, serverPkg), Args: []string{"-name", "spawned.svc"}, Name: "pingsrv"})
	c, err := pingpong.Connect(ctx, e.d, "spawned.svc")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if v, err := c.Echo(ctx, 41); err != nil || v != 41 {
		t.Fatalf("echo: %d, %v", v, err)
	}
	var dom uint64
	testkit.Eventually(t, "list to show the domain the server became", func() bool {
		procs, err := e.c.Procs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range procs {
			if p.ID == st.ID && p.State == "running" && p.Name == "pingsrv" && p.StartedBy.Domain == e.d.ID() {
				dom = p.Domain
			}
		}
		return dom != 0
	})
	if err := e.c.Signal(ctx, st.ID, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if ex, err := e.c.WaitExit(ctx, st.ID); err != nil || ex.Code != 0 {
		t.Fatalf("the server's end: %v, %v; want exit status 0", ex, err)
	}
	ns, err := nameservice.Connect(ctx, e.d, nameservice.ServiceName)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	testkit.Eventually(t, "the server's name to go", func() bool {
		_, code, err := ns.Get(ctx, "spawned.svc")
		return err == nil && errors.Is(monitor.NSError(code), names.ErrNotFound)
	})
}

func TestPolicyAndQuota(t *testing.T) {
	e := setup(t, "--spawn-max-per-domain", "2")
	ctx := testkit.Context(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Start(ctx, spawnif.Request{Program: self}); !errors.Is(err, spawnif.ErrDenied) {
		t.Fatalf("a program outside the allowed directories: %v, want ErrDenied", err)
	}
	for range 2 {
		e.start(t, spawnif.Request{Program: "sleep", Args: []string{"100"}})
	}
	_, err = e.c.Start(ctx, spawnif.Request{Program: "sleep", Args: []string{"100"}})
	if !errors.Is(err, spawnif.ErrExhausted) || !strings.Contains(err.Error(), "resource exhausted") {
		t.Fatalf("beyond the domain's quota: %v, want ErrExhausted", err)
	}
}

// Kill -9 the monitor while a program runs: the caller's wait returns a
// clear error, and the program is told (SIGTERM, its parent-death
// signal), so it ends.
func TestMonitorKilled(t *testing.T) {
	e := setup(t)
	ctx := testkit.Context(t)
	st := e.start(t, spawnif.Request{Program: "sleep", Args: []string{"100"}})
	errc := make(chan error, 1)
	go func() {
		_, err := e.c.WaitExit(ctx, st.ID)
		errc <- err
	}()
	e.mon.Cmd.Process.Kill()
	err := testkit.Await(t, "wait to return", errc)
	if !errors.Is(err, chanos.ErrPeerDied) && !errors.Is(err, chanos.ErrClosed) {
		t.Fatalf("wait across the monitor's death: %v, want the connection's end", err)
	}
	testkit.Eventually(t, "the program to end", func() bool { return gone(st.PID) })
}

// gone reports whether pid has ended: no such process, or a zombie not
// yet reaped by its new parent.
func gone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && len(s) > i+2 && s[i+2] == 'Z'
}

// Nothing leaks: after programs have run and ended, the monitor holds
// the descriptors it held before, and has no child left unreaped.
func TestNoLeaks(t *testing.T) {
	e := setup(t)
	ctx := testkit.Context(t)
	mpid := e.mon.Cmd.Process.Pid
	before := fdCount(t, mpid)
	for range 5 {
		st := e.start(t, spawnif.Request{Program: "/bin/sh", Args: []string{"-c", "echo out; echo err >&2"}})
		if _, err := e.c.WaitExit(ctx, st.ID); err != nil {
			t.Fatal(err)
		}
		if out := e.output(t, st.ID); out != "out\nerr\n" {
			t.Fatalf("output %q", out)
		}
	}
	testkit.Eventually(t, "the monitor's descriptors to be back to "+strconv.Itoa(before), func() bool {
		return fdCount(t, mpid) <= before
	})
	if kids := children(t, mpid); len(kids) != 0 {
		t.Fatalf("the monitor has children left: %v", kids)
	}
}

func fdCount(t *testing.T, pid int) int {
	ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// children lists the processes whose parent is pid.
func children(t *testing.T, pid int) []string {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if f := strings.Fields(s[i+1:]); i > 0 && len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, e.Name()+":"+s[:i+1])
		}
	}
	return out
}

// cli returns a runner of the chanos command against e's monitor: its
// standard output, and its standard error too when it fails.
func (e *env) cli(t *testing.T) func(args ...string) (string, error) {
	bin := testkit.GoProgram(t, "github.com/chanos/chanos/cmd/chanos")
	return func(args ...string) (string, error) {
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "CHANOS_DIR="+e.dir)
		out, err := cmd.Output()
		if ee, ok := err.(*exec.ExitError); ok {
			return string(out) + string(ee.Stderr), err
		}
		return string(out), err
	}
}

// The CLI: spawn prints the id at once, wait prints how it ended, logs
// its output; --on another machine fails with a clear error.
func TestCLI(t *testing.T) {
	e := setup(t)
	cli := e.cli(t)
	out, err := cli("spawn", "--name", "cli", "--", "/bin/sh", "-c", "echo from-cli; exit 4")
	if err != nil {
		t.Fatalf("spawn: %v: %s", err, out)
	}
	id := strings.TrimSpace(out)
	// wait exits with the program's status.
	if out, err := cli("wait", id); exitStatus(err) != 4 || out != "exit status 4\n" {
		t.Fatalf("wait: %q, %v; want exit status 4, and the command's too", out, err)
	}
	if out, err := cli("logs", id); err != nil || out != "from-cli\n" {
		t.Fatalf("logs: %q, %v", out, err)
	}
	if out, err := cli("ps", "--all"); err != nil || !strings.Contains(out, "exited 4") {
		t.Fatalf("ps --all: %q, %v", out, err)
	}
	// logs -f follows the output as it is written, to the program's end.
	out, err = cli("spawn", "--", "/bin/sh", "-c", "echo a; sleep 0.2; echo b")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := cli("logs", "-f", strings.TrimSpace(out)); err != nil || out != "a\nb\n" {
		t.Fatalf("logs -f: %q, %v", out, err)
	}
	out, err = cli("spawn", "--on", "12345", "--", "/bin/true")
	if err == nil || !strings.Contains(out, `no machine "12345" in the cluster`) {
		t.Fatalf("spawn --on a machine that is not there: %q, %v", out, err)
	}
	out, err = cli("spawn", "--", "sleep", "100")
	if err != nil {
		t.Fatal(err)
	}
	id = strings.TrimSpace(out)
	if out, err := cli("kill", "--signal", "KILL", id); err != nil {
		t.Fatalf("kill: %q, %v", out, err)
	}
	if out, err := cli("wait", "--json", id); exitStatus(err) != 128+9 || !strings.Contains(out, `"signal":9`) {
		t.Fatalf("wait --json: %q, %v; want signal 9, and the command's status 137", out, err)
	}
	out, err = cli("spawn", "--wait", "--", "/bin/sh", "-c", "exit 7")
	if exitStatus(err) != 7 || !strings.HasSuffix(out, "exit status 7\n") {
		t.Fatalf("spawn --wait of a program that exits 7: %q, %v; want its status", out, err)
	}
}

// exitStatus is the exit status of a command whose Output gave err.
func exitStatus(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// The spawn service from C: examples/c/spawn_test spawns /bin/echo,
// waits for it, reads its output, and kills a sleep, through the C code
// chanosc generates for spawn.if (under the sanitizers when
// CHANOS_C_BUILD is a sanitizer build).
func TestFromC(t *testing.T) {
	prog := filepath.Join(testkit.CBuild(t, "examples/spawn_test"), "examples/spawn_test")
	e := setup(t)
	cmd := exec.Command(prog, "from-c")
	cmd.Env = append(os.Environ(), "CHANOS_DIR="+e.dir,
		"ASAN_OPTIONS=exitcode=23:abort_on_error=0:detect_leaks=1",
		"UBSAN_OPTIONS=halt_on_error=1:exitcode=23:abort_on_error=0:print_stacktrace=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("spawn_test: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	want := []string{"exit 0", "output from-c", "killed by 15", "ok"}
	if len(lines) != 5 || !strings.HasPrefix(lines[0], "spawned ") || strings.Join(lines[1:], "|") != strings.Join(want, "|") {
		t.Fatalf("spawn_test printed:\n%s\nwant spawned ID, then %q", out, want)
	}
}
