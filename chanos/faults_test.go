package chanos_test

// End-to-end faults with a real monitor and real processes: a server or
// client killed with -9, and a monitor that goes away while domains run.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/interconnect/ump"
	"github.com/chanos/chanos/interfaces/pingpong"
	"github.com/chanos/chanos/monitor"
)

// blockForever is an echo argument on which the test server never answers.
const blockForever = 1<<40 + 7

// TestMain lets the test binary play a server or client domain in a child
// process (CHANOS_TEST_ROLE), so the faults involve real processes.
func TestMain(m *testing.M) {
	switch os.Getenv("CHANOS_TEST_ROLE") {
	case "server":
		os.Exit(roleServer())
	case "client":
		os.Exit(roleClient())
	}
	os.Exit(m.Run())
}

type childServer struct{ pingpong.UnimplementedServer }

func (childServer) Echo(ctx context.Context, v uint64) (uint64, error) {
	if v == blockForever {
		select {} // until killed
	}
	return v + 1, nil
}

func roleServer() int {
	ctx := context.Background()
	d, err := chanos.Join(ctx)
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	l, err := pingpong.Export(ctx, d, os.Getenv("CHANOS_TEST_NAME"))
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	fmt.Println("ready")
	pingpong.Serve(ctx, l, childServer{})
	return 0
}

func roleClient() int {
	ctx := context.Background()
	d, err := chanos.Join(ctx)
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	c, err := pingpong.Connect(ctx, d, os.Getenv("CHANOS_TEST_NAME"))
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	fmt.Println("calling")
	c.Echo(ctx, blockForever) // killed while waiting
	return 0
}

// child starts the test binary in role, and waits for it to print want.
func child(t *testing.T, dir, role, name, want string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "CHANOS_TEST_ROLE="+role, "CHANOS_TEST_NAME="+name, "CHANOS_DIR="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != want {
		t.Fatalf("%s printed %q (%v), want %q", role, line, err, want)
	}
	go io.Copy(io.Discard, out)
	return cmd
}

// startMonitor runs a monitor in this process, in a short private
// directory (socket paths are limited to 108 bytes).
func startMonitor(t *testing.T, dir string) (stop func()) {
	t.Helper()
	m, err := monitor.New(monitor.Config{Dir: dir, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Serve(ctx); close(done) }()
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
		}
	}
	t.Cleanup(stop)
	return stop
}

func shortDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "chf")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// within fails the test if fn does not return within d: the faults must
// be noticed promptly, and a hang must not eat the test's whole timeout.
func within(t *testing.T, d time.Duration, what string, fn func() error) error {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- fn() }()
	select {
	case err := <-errc:
		return err
	case <-time.After(d):
		t.Fatalf("%s: no result within %v", what, d)
		return nil
	}
}

func TestServerKilled(t *testing.T) {
	dir := shortDir(t)
	startMonitor(t, dir)
	srv := child(t, dir, "server", "victim", "ready")
	ctx := context.Background()
	d, err := chanos.Join(ctx, chanos.WithDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	c, err := pingpong.Connect(ctx, d, "victim")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Raw().Interconnect() != "ump" {
		t.Fatalf("interconnect %s, want ump", c.Raw().Interconnect())
	}
	if v, err := c.Echo(ctx, 1); err != nil || v != 2 {
		t.Fatalf("echo = %d, %v", v, err)
	}
	pending := make(chan error, 1)
	go func() { _, err := c.Echo(ctx, blockForever); pending <- err }()
	time.Sleep(20 * time.Millisecond) // let the call reach the server; not a pass condition
	srv.Process.Signal(syscall.SIGKILL)
	err = within(t, 10*time.Second, "pending call after kill -9", func() error { return <-pending })
	if !errors.Is(err, chanos.ErrPeerDied) {
		t.Fatalf("pending call = %v, want ErrPeerDied", err)
	}
	// The name goes with the server's session.
	within(t, 10*time.Second, "name removal", func() error {
		for {
			cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			_, err := pingpong.Connect(cctx, d, "victim")
			cancel()
			if errors.Is(err, chanos.ErrNotFound) {
				return nil
			}
		}
	})
	// A new server takes the name, and new clients reach it.
	child(t, dir, "server", "victim", "ready")
	c2, err := pingpong.Connect(ctx, d, "victim")
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if v, err := c2.Echo(ctx, 41); err != nil || v != 42 {
		t.Fatalf("echo on the new server = %d, %v", v, err)
	}
}

type slowServer struct{ pingpong.UnimplementedServer }

func (slowServer) Echo(ctx context.Context, v uint64) (uint64, error) {
	time.Sleep(100 * time.Millisecond)
	return v, nil
}

func TestClientKilledMidCall(t *testing.T) {
	dir := shortDir(t)
	startMonitor(t, dir)
	ctx := context.Background()
	d, err := chanos.Join(ctx, chanos.WithDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	l, err := pingpong.Export(ctx, d, "patient")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cli := child(t, dir, "client", "patient", "calling")
	c, err := l.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- c.Serve(ctx, slowServer{}) }()
	time.Sleep(20 * time.Millisecond) // the call is being served; not a pass condition
	cli.Process.Signal(syscall.SIGKILL)
	err = within(t, 10*time.Second, "server after client kill -9", func() error { return <-served })
	if !errors.Is(err, chanos.ErrPeerDied) {
		t.Fatalf("Serve = %v, want ErrPeerDied", err)
	}
	if !errors.Is(c.Err(), chanos.ErrPeerDied) {
		t.Fatalf("Err = %v", c.Err())
	}
	c.Close()
}

func TestMonitorGoesAway(t *testing.T) {
	dir := shortDir(t)
	stop := startMonitor(t, dir)
	child(t, dir, "server", "steady", "ready")
	ctx := context.Background()
	d, err := chanos.Join(ctx, chanos.WithDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	c, err := pingpong.Connect(ctx, d, "steady")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Connect returns once this side has its end; the server gets its own
	// through the monitor a moment later. An answered call says it has.
	if v, err := c.Echo(ctx, 4); err != nil || v != 5 {
		t.Fatalf("echo = %d, %v", v, err)
	}
	stop()
	within(t, 10*time.Second, "domain noticing the monitor's end", func() error { <-d.Done(); return nil })
	if !errors.Is(d.Err(), chanos.ErrMonitorLost) {
		t.Fatalf("domain Err = %v, want ErrMonitorLost", d.Err())
	}
	// The data path never went through the monitor.
	if v, err := c.Echo(ctx, 5); err != nil || v != 6 {
		t.Fatalf("echo after the monitor left = %d, %v", v, err)
	}
	if _, err := pingpong.Connect(ctx, d, "steady"); !errors.Is(err, chanos.ErrMonitorLost) {
		t.Fatalf("connect after the monitor left = %v", err)
	}
	// No monitor: Join says how to start one.
	_, err = chanos.Join(ctx, chanos.WithDir(dir))
	if !errors.Is(err, chanos.ErrNoMonitor) || !strings.Contains(err.Error(), "chanos monitor") {
		t.Fatalf("join without a monitor = %v", err)
	}
	// A new monitor: domains join again.
	startMonitor(t, dir)
	d2, err := chanos.Join(ctx, chanos.WithDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	d2.Close()
}

// TestSpinWindowOption checks that WithSpinWindow reaches both ends of the
// domain's ump connections, and that a domain without it keeps ump's
// default.
func TestSpinWindowOption(t *testing.T) {
	dir := shortDir(t)
	startMonitor(t, dir)
	ctx := context.Background()
	const window = 75 * time.Microsecond
	for _, tc := range []struct {
		opts []chanos.Option
		env  string // CHANOS_SPIN_WINDOW
		want time.Duration
	}{
		{[]chanos.Option{chanos.WithSpinWindow(window)}, "", window},
		{[]chanos.Option{chanos.WithSpinWindow(-1)}, "", 0},
		{nil, "", ump.DefaultSpinWindow},
		{nil, "160us", 160 * time.Microsecond},
		{nil, "-1", 0},
		{[]chanos.Option{chanos.WithSpinWindow(window)}, "160us", window}, // the option wins
	} {
		t.Setenv(chanos.SpinWindowEnv, tc.env)
		srv, err := chanos.Join(ctx, append(tc.opts, chanos.WithDir(dir))...)
		if err != nil {
			t.Fatal(err)
		}
		cli, err := chanos.Join(ctx, append(tc.opts, chanos.WithDir(dir))...)
		if err != nil {
			t.Fatal(err)
		}
		l, err := pingpong.Export(ctx, srv, "spin")
		if err != nil {
			t.Fatal(err)
		}
		c, err := pingpong.Connect(ctx, cli, "spin")
		if err != nil {
			t.Fatal(err)
		}
		s, err := l.Accept(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := chanos.SpinWindowOf(c.Raw()); got != tc.want {
			t.Errorf("client's spin window = %v, want %v", got, tc.want)
		}
		if got := chanos.SpinWindowOf(s.Raw()); got != tc.want {
			t.Errorf("server's spin window = %v, want %v", got, tc.want)
		}
		c.Close()
		s.Close()
		l.Close()
		cli.Close()
		srv.Close()
	}
	t.Setenv(chanos.SpinWindowEnv, "fast")
	if d, err := chanos.Join(ctx, chanos.WithDir(dir)); err == nil || !strings.Contains(err.Error(), chanos.SpinWindowEnv) {
		if d != nil {
			d.Close()
		}
		t.Fatalf("Join with %s=fast = %v, want an error naming the variable", chanos.SpinWindowEnv, err)
	}
}
