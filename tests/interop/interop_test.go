// Package interop tests the C pingpong examples (examples/c) against
// each other and against the Go examples, over a real monitor
// (`chanos monitor --dir DIR`), with real processes and sockets; it also
// kills C domains with -9, calls the nameservice from C
// (examples/c/nameservice_test.c), passes status codes both ways
// (examples/c/status_test.c), asks a C domain's health statuses with
// `chanos health` (examples/c/health_server.c) and installs libchanos
// with its pkg-config file. It holds tests only, so that examples/ keeps only
// programs to copy.
//
// The C programs come from the C build directory named by CHANOS_C_BUILD
// (the Makefile sets it to build/c, and to build/c-san for the
// sanitizers). Without it the tests skip, unless CI is set, in which case
// they fail.
package interop

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/interfaces/nameservice"
	"github.com/chanos/chanos/interfaces/pingpong"
	"github.com/chanos/chanos/internal/testkit"
	"github.com/chanos/chanos/monitor"
	"github.com/chanos/chanos/wire"
)

// cBuild returns the C build directory, skipping (or, under CI, failing)
// the test if the C examples are not built.
func cBuild(t *testing.T) string {
	t.Helper()
	return testkit.CBuild(t, filepath.Join("examples", "pingpong_server"))
}

func cProg(t *testing.T, name string) string {
	return filepath.Join(cBuild(t), "examples", name)
}

// goBin builds bin/chanos, chanosc or a Go pingpong example once per test
// run and returns its path.
func goBin(t *testing.T, name string) string {
	t.Helper()
	pkg := map[string]string{
		"chanos":          "github.com/chanos/chanos/cmd/chanos",
		"chanosc":         "github.com/chanos/chanos/cmd/chanosc",
		"pingpong-server": "github.com/chanos/chanos/examples/pingpong/server",
		"pingpong-client": "github.com/chanos/chanos/examples/pingpong/client",
	}[name]
	if pkg == "" {
		t.Fatalf("no Go program %q", name)
	}
	return testkit.GoProgram(t, pkg)
}

func TestMain(m *testing.M) {
	code := m.Run()
	testkit.CleanPrograms()
	os.Exit(code)
}

// startMonitor runs `chanos monitor --dir DIR`, with flags if any, in a
// new private directory and returns DIR once the monitor's socket is
// there. At the test's end it stops the monitor with SIGTERM, and shows
// its log if the test failed.
func startMonitor(t *testing.T, flags ...string) string {
	t.Helper()
	dir, _ := testkit.StartMonitor(t, flags...)
	return dir
}

func checkClientOutput(t *testing.T, out string) {
	t.Helper()
	for _, want := range []string{"ping/pong messages: 1000 ", "echo rpcs: 1000 ", "bounce: 64 KiB payload returned intact"} {
		if !strings.Contains(out, want) {
			t.Errorf("client output lacks %q", want)
		}
	}
}

func TestCClientCServer(t *testing.T) {
	srv, cli := cProg(t, "pingpong_server"), cProg(t, "pingpong_client")
	dir := startMonitor(t)
	start(t, dir, "serving", srv, "-name", "csvc")
	checkClientOutput(t, run(t, dir, cli, "-name", "csvc", "-n", "1000"))
	// A second client is served by the same server.
	checkClientOutput(t, run(t, dir, cli, "-name", "csvc", "-n", "1000"))
}

func TestCClientGoServer(t *testing.T) {
	cli := cProg(t, "pingpong_client")
	dir := startMonitor(t)
	// the Go server logs "serving" on stderr; wait for the name instead
	srv := exec.Command(goBin(t, "pingpong-server"), "-name", "gosvc")
	srv.Env = append(os.Environ(), "CHANOS_DIR="+dir)
	testkit.Start(t, srv)
	// the C client waits for the name to appear (-wait)
	checkClientOutput(t, run(t, dir, cli, "-name", "gosvc", "-n", "1000", "-wait", "20000"))
}

func TestGoClientCServer(t *testing.T) {
	srv := cProg(t, "pingpong_server")
	dir := startMonitor(t)
	start(t, dir, "serving", srv, "-name", "csvc")
	out := run(t, dir, goBin(t, "pingpong-client"), "-name", "csvc", "-n", "1000")
	for _, want := range []string{`connected to "csvc" over ump`, "ping/pong messages: 1000 round trips", "echo rpcs: 1000 round trips", "bounce: 64 KiB payload returned intact"} {
		if !strings.Contains(out, want) {
			t.Errorf("Go client output lacks %q", want)
		}
	}
}

func TestCNameErrors(t *testing.T) {
	srv, cli := cProg(t, "pingpong_server"), cProg(t, "pingpong_client")
	dir := startMonitor(t)
	start(t, dir, "serving", srv, "-name", "taken")
	// Each error ends the program with status 1 and names the error.
	for _, c := range []struct {
		what, dir, prog string
		args            []string
		want            string
	}{
		// A second export of the name is refused with the monitor's "exists".
		{"second export", dir, srv, []string{"-name", "taken"}, "pingpong_server: export taken: monitor: name already registered"},
		// A missing name: not found once the wait is over.
		{"connect to a missing name", dir, cli, []string{"-name", "missing", "-wait", "200"}, "pingpong_client: connect missing: monitor: name not found"},
		// No monitor at all.
		{"join without a monitor", filepath.Join(t.TempDir(), "none"), cli, nil, "pingpong_client: join: no monitor running"},
	} {
		if out := runExit(t, c.dir, 1, c.prog, c.args...); !strings.Contains(out, c.want) {
			t.Errorf("%s: the output lacks %q:\n%s", c.what, c.want, out)
		}
	}
}

// heldServer answers pings; it says that an echo call has reached it,
// then answers once the test lets it go.
type heldServer struct {
	pingpong.UnimplementedServer
	called, release chan struct{}
}

func (s heldServer) Ping(ctx context.Context, from *pingpong.Client, m pingpong.Ping) error {
	return from.Send(ctx, &pingpong.Pong{ClientID: m.ClientID, MsgID: m.MsgID})
}

func (s heldServer) Echo(ctx context.Context, v uint64) (uint64, error) {
	s.called <- struct{}{}
	<-s.release
	return v, nil
}

// A C client killed with -9 in the middle of an rpc: the Go server's
// connection ends with ErrPeerDied.
func TestCClientKilledMidCall(t *testing.T) {
	cli := cProg(t, "pingpong_client")
	dir := startMonitor(t)
	ctx := context.Background()
	d := join(t, dir)
	l, err := pingpong.Export(ctx, d, "patient")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	client := spawn(t, dir, cli, "-name", "patient", "-n", "1")
	if line := client.Line(t); !strings.HasPrefix(line, "connected") {
		t.Fatalf("the C client printed %q, want connected...", line)
	}
	c, err := l.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	srv := heldServer{called: make(chan struct{}, 1), release: make(chan struct{})}
	served := make(chan error, 1)
	go func() { served <- c.Serve(ctx, srv) }()
	testkit.Await(t, "the C client's echo call", srv.called)
	client.kill(t)
	close(srv.release) // its answer goes to a dead peer
	err = testkit.Within(t, 10*time.Second, "server after the C client's kill -9", func() error { return <-served })
	if !errors.Is(err, chanos.ErrPeerDied) {
		t.Fatalf("Serve = %v, want ErrPeerDied", err)
	}
}

// blockForever is an echo argument the C server is told never to answer.
const blockForever = 1<<40 + 7

// A C server killed with -9 while a Go client's call is pending: the call
// fails with ErrPeerDied and the server's name disappears.
func TestCServerKilled(t *testing.T) {
	srvProg := cProg(t, "pingpong_server")
	dir := startMonitor(t)
	srv := start(t, dir, "serving", srvProg, "-name", "victim", "-no-reply-to", fmt.Sprint(uint64(blockForever)))
	ctx := context.Background()
	d := join(t, dir)
	c, err := pingpong.Connect(ctx, d, "victim")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if v, err := c.Echo(ctx, 41); err != nil || v != 41 {
		t.Fatalf("echo = %d, %v", v, err)
	}
	pending := make(chan error, 1)
	go func() { _, err := c.Echo(ctx, blockForever); pending <- err }()
	if l, want := srv.Line(t), fmt.Sprint("unanswered echo ", uint64(blockForever)); l != want {
		t.Fatalf("the C server printed %q, want %q", l, want)
	}
	srv.kill(t) // the call has reached it
	err = testkit.Within(t, 10*time.Second, "pending call after kill -9", func() error { return <-pending })
	if !errors.Is(err, chanos.ErrPeerDied) {
		t.Fatalf("pending call = %v, want ErrPeerDied", err)
	}
	testkit.Eventually(t, "name removal", func() bool {
		cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		_, err := pingpong.Connect(cctx, d, "victim")
		return errors.Is(err, chanos.ErrNotFound)
	})
}

// join makes this test a domain of the monitor in dir, until its end.
func join(t *testing.T, dir string) *chanos.Domain {
	t.Helper()
	d, err := chanos.Join(context.Background(), chanos.WithDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// nsClient binds the monitor's nameservice from Go, to look at what the C
// domains did.
func nsClient(t *testing.T, dir string) *nameservice.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := chanos.Join(ctx, chanos.WithDir(dir), chanos.WithProgram("interop test"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	ns, err := nameservice.Connect(ctx, d, nameservice.ServiceName)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	return ns
}

// refString formats an iref as nameservice_test prints it.
func refString(r wire.Iref) string {
	return fmt.Sprintf("%016x:%016x:%x", r.Machine, r.Export, r.Token[:])
}

// withoutToken returns the text of an iref (as refString writes it) with
// its token zeroed, as the nameservice gives it.
func withoutToken(ref string) string {
	i := strings.LastIndexByte(ref, ':')
	return ref[:i+1] + strings.Repeat("0", len(ref)-i-1)
}

// waitNames waits until the names starting with prefix are want.
func waitNames(t *testing.T, ns *nameservice.Conn, prefix string, want []string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		got, err := ns.Names(ctx, prefix)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("names %q = %q, want %q", prefix, got, want)
		}
	}
}

// The nameservice from C: set, get, list, get_count, remove, watch and
// their errors, and a wait_for that times out, all in one C domain; its
// names go with its session.
func TestCNameservice(t *testing.T) {
	prog := cProg(t, "nameservice_test")
	dir := startMonitor(t)
	out := run(t, dir, prog, "check", "cns")
	for _, want := range []string{
		"set: cns.svc.0 cns.svc.1 cns.other\n",
		"list cns.: cns.other,cns.svc.0,cns.svc.1\n",
		"get_count cns.svc: 2\n",
		"remove cns.svc.0: count now 1\n",
		"watch cns.: changed cns.watched\n",
		"wait_for cns.missing: timed out after ",
		"private cns.private: by name denied, by the nameservice's iref denied, by the listener's iref connected, another machine's: no route\n",
		"\nok\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("nameservice_test output lacks %q", want)
		}
	}
	ns := nsClient(t, dir)
	waitNames(t, ns, "cns.", nil)

	// A wait_for whose deadline passes, as a program sees it: status 1.
	if out := runExit(t, dir, 1, prog, "wait", "cns.never", "200"); !strings.Contains(out, "nameservice_test: wait_for: timed out") {
		t.Errorf("wait_for a name nobody sets: the output names no timeout:\n%s", out)
	}
}

// A wait_for in one C domain returns once another C domain sets the name;
// a Go client sees the name, which goes when its C owner leaves.
func TestCNameserviceWaitFor(t *testing.T) {
	prog := cProg(t, "nameservice_test")
	dir := startMonitor(t)
	ns := nsClient(t, dir)
	waiter := spawn(t, dir, prog, "wait", "late.1", "20000")
	if l := waiter.Line(t); l != "waiting for late.1" {
		t.Fatalf("waiter printed %q", l)
	}
	setter := spawn(t, dir, prog, "set", "late.1")
	l := setter.Line(t)
	ref, ok := strings.CutPrefix(l, "set late.1 ")
	if !ok {
		t.Fatalf("setter printed %q", l)
	}
	// The waiter's answer names the iref the setter was given, without
	// its token: it can only have come after the set.
	ref = withoutToken(ref)
	l = waiter.Line(t)
	if !strings.HasPrefix(l, "found late.1 "+ref+" after ") {
		t.Fatalf("waiter printed %q, want found late.1 %s", l, ref)
	}
	if !waiter.wait(t, 0) {
		t.FailNow()
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, code, err := ns.Get(ctx, "late.1")
	if err != nil || code != monitor.NSOK || refString(r) != ref {
		t.Fatalf("Go get late.1 = %s, %d, %v; want %s", refString(r), code, err, ref)
	}
	// The setter leaves once its stdin closes: the name was its lease.
	setter.stdin.Close()
	if !setter.wait(t, 0) {
		t.FailNow()
	}
	waitNames(t, ns, "late.", nil)
}

// TestInstall installs libchanos (cmake --install of the C build), chanosc
// and chanos into a temporary prefix, as make install does, then builds an
// out-of-tree program with nothing but the installed files and pkg-config,
// and runs it against the C server, under the installed chanos's monitor.
func TestInstall(t *testing.T) {
	build := cBuild(t)
	for _, tool := range []string{"cmake", "pkg-config", "cc"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s not found", tool)
			}
			t.Skipf("%s not found", tool)
		}
	}
	prefix := t.TempDir()
	sh := func(dir string, env []string, name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	sh("", nil, "cmake", "--install", build, "--prefix", prefix)
	if err := os.MkdirAll(filepath.Join(prefix, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"chanosc", "chanos"} {
		data, err := os.ReadFile(goBin(t, cmd))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(prefix, "bin", cmd), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"include/chanos.h", "include/chanos/nameservice.h", "include/chanos/health.h", "include/chanos/reflection.h", "lib/libchanos.a", "lib/pkgconfig/chanos.pc", "share/chanos/interfaces/pingpong.if"} {
		if _, err := os.Stat(filepath.Join(prefix, f)); err != nil {
			t.Fatalf("not installed: %v", err)
		}
	}

	// The out-of-tree project: the example client, its interface compiled
	// by the installed chanosc, built with the flags pkg-config gives.
	proj := t.TempDir()
	src, err := os.ReadFile(filepath.Join("..", "..", "examples", "c", "pingpong_client.c"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(proj, "client.c"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	sh(proj, nil, filepath.Join(prefix, "bin", "chanosc"), "-lang", "c", "-o", proj, filepath.Join(prefix, "share", "chanos", "interfaces", "pingpong.if"))
	pc := []string{"PKG_CONFIG_PATH=" + filepath.Join(prefix, "lib", "pkgconfig")}
	flags := strings.Fields(sh(proj, pc, "pkg-config", "--cflags", "--libs", "chanos"))
	// A library built with the sanitizers (make test-c's build/c-san)
	// links only into programs built with them.
	if cache, err := os.ReadFile(filepath.Join(build, "CMakeCache.txt")); err == nil && strings.Contains(string(cache), "CHANOS_SANITIZE:BOOL=ON") {
		flags = append(flags, "-fsanitize=address,undefined")
	}
	args := append([]string{"-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-D_GNU_SOURCE", "-o", "client", "client.c", "pingpong.c", "-I."}, flags...)
	sh(proj, nil, "cc", args...)

	// The nameservice test needs no generated code: <chanos/nameservice.h>
	// is installed and its code is in libchanos.
	src, err = os.ReadFile(filepath.Join("..", "..", "examples", "c", "nameservice_test.c"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(proj, "nstest.c"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	args = append([]string{"-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-D_GNU_SOURCE", "-o", "nstest", "nstest.c"}, flags...)
	sh(proj, nil, "cc", args...)

	// The installed chanos runs the monitor.
	dir := testkit.ShortDir(t)
	mon := exec.Command(filepath.Join(prefix, "bin", "chanos"), "monitor", "--dir", dir)
	m := testkit.Start(t, mon)
	t.Cleanup(func() {
		m.Cmd.Process.Signal(syscall.SIGTERM)
		m.Wait(t)
	})
	testkit.Eventually(t, "the installed chanos's monitor", func() bool {
		_, err := os.Stat(filepath.Join(dir, "monitor.sock"))
		return err == nil
	})
	start(t, dir, "serving", cProg(t, "pingpong_server"), "-name", "installed")
	checkClientOutput(t, run(t, dir, filepath.Join(proj, "client"), "-name", "installed", "-n", "1000"))
	if out := run(t, dir, filepath.Join(proj, "nstest"), "check", "inst"); !strings.HasSuffix(out, "\nok\n") {
		t.Errorf("installed nameservice_test did not print ok")
	}
}

// A monitor killed with SIGKILL and started again in its directory: the
// C server notices the loss at once (its on_monitor), the C and Go
// servers rejoin the new monitor and export their names again by
// themselves, and new clients, C and Go, reach them by name within a few
// seconds.
func TestMonitorRestart(t *testing.T) {
	srv, cli := cProg(t, "pingpong_server"), cProg(t, "pingpong_client")
	dir, mon := testkit.StartMonitor(t)
	csrv := start(t, dir, "serving", srv, "-name", "csvc")
	gosrv := exec.Command(goBin(t, "pingpong-server"), "-name", "gosvc")
	gosrv.Env = append(os.Environ(), "CHANOS_DIR="+dir)
	testkit.Start(t, gosrv)
	checkClientOutput(t, run(t, dir, cli, "-name", "gosvc", "-n", "1000", "-wait", "20000"))

	mon.Kill()
	if line := csrv.Line(t); line != "lost the monitor; waiting for a new one" {
		t.Fatalf("the C server said %q after the monitor's death", line)
	}
	testkit.StartMonitorIn(t, dir)
	began := time.Now()
	// The clients wait up to 5 s for the names (-wait).
	checkClientOutput(t, run(t, dir, cli, "-name", "gosvc", "-n", "1000", "-wait", "5000"))
	checkClientOutput(t, run(t, dir, cli, "-name", "csvc", "-n", "1000", "-wait", "5000"))
	out := run(t, dir, goBin(t, "pingpong-client"), "-name", "csvc", "-n", "1000", "-wait", "5s")
	if !strings.Contains(out, "echo rpcs: 1000 round trips") {
		t.Errorf("Go client output lacks the echo rpcs")
	}
	t.Logf("the new clients reached the old servers within %v of the new monitor", time.Since(began))
	if line := csrv.Line(t); !strings.HasPrefix(line, "rejoined the monitor (domain ") || strings.Contains(line, "but") {
		t.Fatalf("the C server said %q after the restart", line)
	}
}
