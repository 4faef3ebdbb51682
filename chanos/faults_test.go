package chanos_test

// End-to-end faults with a real monitor and real processes: a server or
// client killed with -9, and a monitor that goes away while domains run.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/chanos/genrt"
	"github.com/chanos/chanos/interconnect/seqpacket"
	"github.com/chanos/chanos/interconnect/ump"
	"github.com/chanos/chanos/interfaces/pingpong"
	"github.com/chanos/chanos/internal/rundir"
	"github.com/chanos/chanos/internal/testkit"
	"github.com/chanos/chanos/internal/testkit/testmonitor"
	"github.com/chanos/chanos/monitor"
	"github.com/chanos/chanos/wire"
)

// blockForever is an echo argument on which the test server never answers.
const blockForever = 1<<40 + 7

func TestMain(m *testing.M) {
	testkit.Main(m, testkit.Roles{"server": roleServer, "client": roleClient, "caller": roleCaller, "monitor": roleMonitor, "listen-as-nobody": roleListenAsNobody})
}

// childServer answers echo, except blockForever: it says that the call
// has reached it, then never answers.
type childServer struct{ pingpong.UnimplementedServer }

func (childServer) Echo(ctx context.Context, v uint64) (uint64, error) {
	if v == panicNow {
		panic("echo of panicNow")
	}
	if v == blockForever {
		fmt.Println("called")
		select {} // until killed
	}
	return v + 1, nil
}

// roleServer, in a child process, exports pingpong under the name args[0]
// in the monitor of CHANOS_DIR, says "ready" and serves childServer.
func roleServer(args []string) error {
	ctx := context.Background()
	d, err := chanos.Join(ctx)
	if err != nil {
		return err
	}
	l, err := pingpong.Export(ctx, d, args[0])
	if err != nil {
		return err
	}
	fmt.Println("ready")
	return pingpong.Serve(ctx, l, childServer{})
}

// roleClient, in a child process, connects to the name args[0], says
// "calling" and calls echo with blockForever, until killed.
func roleClient(args []string) error {
	ctx := context.Background()
	d, err := chanos.Join(ctx)
	if err != nil {
		return err
	}
	c, err := pingpong.Connect(ctx, d, args[0])
	if err != nil {
		return err
	}
	fmt.Println("calling")
	_, err = c.Echo(ctx, blockForever)
	return fmt.Errorf("echo returned: %w", err)
}

// child starts the test binary in role as a domain of the monitor in dir,
// with the name, and waits for it to say want.
func child(t *testing.T, dir, role, name, want string) *testkit.Child {
	t.Helper()
	cmd := testkit.Self(role, name)
	cmd.Env = append(cmd.Env, "CHANOS_DIR="+dir)
	c := testkit.Start(t, cmd)
	c.Expect(t, want)
	return c
}

func TestServerKilled(t *testing.T) {
	dir := testmonitor.Start(t)
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
	srv.Expect(t, "called") // the call is in the server's handler
	srv.Kill()
	err = testkit.Within(t, 10*time.Second, "pending call after kill -9", func() error { return <-pending })
	if !errors.Is(err, chanos.ErrPeerDied) {
		t.Fatalf("pending call = %v, want ErrPeerDied", err)
	}
	// The name goes with the server's session.
	testkit.Eventually(t, "name removal", func() bool {
		cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		_, err := pingpong.Connect(cctx, d, "victim")
		return errors.Is(err, chanos.ErrNotFound)
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

// panicNow makes childServer's echo panic, with no Recover: the server
// process dies of it.
const panicNow = 0xdead

// A server whose handler panics dies: its client sees its peer die, as
// after a kill -9, not an orderly close.
func TestServerPanics(t *testing.T) {
	dir := testmonitor.Start(t)
	srv := child(t, dir, "server", "panicky", "ready")
	ctx := context.Background()
	d, err := chanos.Join(ctx, chanos.WithDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	c, err := pingpong.Connect(ctx, d, "panicky")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	err = testkit.Within(t, 10*time.Second, "a call whose handler panics", func() error { _, err := c.Echo(ctx, panicNow); return err })
	if !errors.Is(err, chanos.ErrPeerDied) || errors.Is(err, chanos.ErrClosed) {
		t.Fatalf("a call whose handler panicked = %v, want ErrPeerDied", err)
	}
	srv.Wait(t)
}

// heldServer says that an echo call has reached it, then answers once
// the test lets it go.
type heldServer struct {
	pingpong.UnimplementedServer
	called, release chan struct{}
}

func (s heldServer) Echo(ctx context.Context, v uint64) (uint64, error) {
	s.called <- struct{}{}
	<-s.release
	return v, nil
}

func TestClientKilledMidCall(t *testing.T) {
	dir := testmonitor.Start(t)
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
	srv := heldServer{called: make(chan struct{}, 1), release: make(chan struct{})}
	served := make(chan error, 1)
	go func() { served <- c.Serve(ctx, srv) }()
	testkit.Await(t, "the client's echo call", srv.called)
	cli.Kill()
	close(srv.release) // its answer goes to a dead peer
	err = testkit.Within(t, 10*time.Second, "server after client kill -9", func() error { return <-served })
	if !errors.Is(err, chanos.ErrPeerDied) {
		t.Fatalf("Serve = %v, want ErrPeerDied", err)
	}
	if !errors.Is(c.Err(), chanos.ErrPeerDied) {
		t.Fatalf("Err = %v", c.Err())
	}
	c.Close()
}

// Under WithoutRejoin, a domain ends with its monitor: Done, Err.
func TestMonitorGoesAway(t *testing.T) {
	dir := testkit.ShortDir(t)
	stop := testmonitor.Serve(t, dir)
	child(t, dir, "server", "steady", "ready")
	ctx := context.Background()
	d, err := chanos.Join(ctx, chanos.WithDir(dir), chanos.WithoutRejoin())
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
	testkit.Within(t, 10*time.Second, "domain noticing the monitor's end", func() error { <-d.Done(); return nil })
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
	testmonitor.Serve(t, dir)
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
	dir := testmonitor.Start(t)
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

// A monitor that accepts but never answers (stopped, or wedged) makes
// Join fail once the call timeout has passed, with ErrMonitorTimeout,
// rather than hang: the hello has no deadline of its own.
func TestJoinWedgedMonitor(t *testing.T) {
	dir := testkit.ShortDir(t)
	accepted := listenAsMonitor(t, dir)
	err := testkit.Within(t, 10*time.Second, "Join with a wedged monitor", func() error {
		_, err := chanos.Join(context.Background(), chanos.WithDir(dir), chanos.WithCallTimeout(100*time.Millisecond))
		return err
	})
	if !errors.Is(err, chanos.ErrMonitorTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Join = %v, want ErrMonitorTimeout", err)
	}
	(<-accepted).Close()
}

// joinHearing joins the monitor in dir and returns the domain, closed
// when the test ends, and what its OnMonitor hears.
func joinHearing(t *testing.T, ctx context.Context, dir string) (*chanos.Domain, <-chan chanos.MonitorEvent) {
	t.Helper()
	events := make(chan chanos.MonitorEvent, 4)
	d, err := chanos.Join(ctx, chanos.WithDir(dir), chanos.OnMonitor(func(ev chanos.MonitorEvent) { events <- ev }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d, events
}

// listenAsMonitor listens on the socket of a monitor in dir, as one that
// never answers, until the test ends, and returns the first connection it
// accepts, held open and never read.
func listenAsMonitor(t *testing.T, dir string) <-chan *seqpacket.Conn {
	ln, err := seqpacket.Listen(rundir.Socket(dir), 4096)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	accepted := make(chan *seqpacket.Conn, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- c
		}
	}()
	return accepted
}

// roleMonitor, in a child process, serves a monitor in the directory
// args[0] and says "ready" once it listens, until killed: a monitor the
// test can stop (SIGSTOP).
func roleMonitor(args []string) error {
	m, err := monitor.New(monitor.Config{Dir: args[0], Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return err
	}
	fmt.Println("ready")
	return m.Serve(context.Background())
}

// A stopped monitor (SIGSTOP) makes Connect fail once the call timeout
// and the bind's grace have passed, with ErrMonitorTimeout, rather than
// hang, though the bind waits for its name: a bind whose context has no
// deadline is bounded by the call timeout. Export fails the same way. A
// monitor that runs answers a bind for a name nobody exports with
// ErrNotFound at the call timeout: the two are told apart.
func TestConnectStoppedMonitor(t *testing.T) {
	dir := testkit.ShortDir(t)
	mon := testkit.Start(t, testkit.Self("monitor", dir))
	mon.Expect(t, "ready")
	const timeout = 200 * time.Millisecond
	ctx := context.Background() // no deadline: the call timeout bounds each call
	d, err := chanos.Join(ctx, chanos.WithDir(dir), chanos.WithCallTimeout(timeout))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()

	// Running: a name nobody exports is not found, at the call timeout.
	start := time.Now()
	_, err = pingpong.Connect(ctx, d, "nobody")
	if took := time.Since(start); !errors.Is(err, chanos.ErrNotFound) || errors.Is(err, chanos.ErrMonitorTimeout) || !strings.Contains(err.Error(), "not exported within") || took < timeout || took > timeout+time.Second {
		t.Fatalf("Connect to a name nobody exports = %v after %v, want ErrNotFound after %v", err, took, timeout)
	}
	// A name exported while the bind waits is bound.
	srv, err := chanos.Join(ctx, chanos.WithDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	go func() {
		time.Sleep(timeout / 4)
		if l, err := pingpong.Export(ctx, srv, "late"); err == nil {
			t.Cleanup(func() { l.Close() })
		}
	}()
	c, err := pingpong.Connect(ctx, d, "late")
	if err != nil {
		t.Fatalf("Connect to a name exported while it waits = %v", err)
	}
	c.Close()

	if err := mon.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer mon.Cmd.Process.Signal(syscall.SIGCONT)
	awaitStopped(t, mon.Cmd.Process.Pid)
	start = time.Now()
	err = testkit.Within(t, 10*time.Second, "Connect with a stopped monitor", func() error {
		_, err := pingpong.Connect(ctx, d, "late")
		return err
	})
	if took := time.Since(start); !errors.Is(err, chanos.ErrMonitorTimeout) || !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, chanos.ErrNotFound) || took < timeout {
		t.Fatalf("Connect with a stopped monitor = %v after %v, want ErrMonitorTimeout", err, took)
	}
	t.Logf("Connect with a stopped monitor: %v after %v", err, time.Since(start).Round(time.Millisecond))
	err = testkit.Within(t, 10*time.Second, "Export with a stopped monitor", func() error {
		_, err := pingpong.Export(ctx, d, "frozen")
		return err
	})
	if !errors.Is(err, chanos.ErrMonitorTimeout) {
		t.Fatalf("Export with a stopped monitor = %v, want ErrMonitorTimeout", err)
	}
	// A deadline of the caller's own is the bound: the error says that
	// the name did not come (the monitor's silence and its "not found"
	// come together then).
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if _, err := pingpong.Connect(cctx, d, "late"); !errors.Is(err, chanos.ErrNotFound) {
		t.Fatalf("Connect with a deadline and a stopped monitor = %v, want ErrNotFound", err)
	}
}

// awaitStopped waits until every thread of process pid has stopped: a
// stop signal is delivered to each in its time, after kill returns.
func awaitStopped(t *testing.T, pid int) {
	t.Helper()
	testkit.Eventually(t, "the monitor stopped", func() bool {
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			t.Fatal(err)
		}
		for _, task := range tasks {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
			if err != nil {
				return false
			}
			// The state follows the command's name, which ends with ") ".
			i := strings.LastIndexByte(string(b), ')')
			if i < 0 || i+2 >= len(b) || b[i+2] != 'T' {
				return false
			}
		}
		return true
	})
}

// A reply that answers a call with another rpc's number ends the
// connection with ErrProtocol, whether the caller reads it itself or
// another goroutine reads it and hands it over: the caller never waits
// for a reply that will not come.
func TestReplyToAnotherRPC(t *testing.T) {
	for _, handedOver := range []bool{false, true} {
		t.Run(fmt.Sprintf("handed over %v", handedOver), func(t *testing.T) {
			x, y, err := chanos.UMPPair(pingpong.Interface)
			if err != nil {
				t.Fatal(err)
			}
			defer x.Close()
			defer y.Close()
			c := pingpong.NewConn(x)
			ctx := testkit.Context(t)
			// The peer answers the echo call with a bounce reply of the
			// same call id.
			go y.ReceiveFunc(ctx, func(in *chanos.Incoming) error {
				var b wire.Buffer
				if err := (&pingpong.BounceReply{}).Encode(&b); err != nil {
					return err
				}
				wire.SetCallID(b.B, in.Header.CallID)
				return genrt.Engine(y).SendFrame(ctx, b.B)
			})
			if handedOver {
				// Another goroutine holds the reading turn, waiting.
				wctx := testkit.NewWaitContext()
				defer wctx.Cancel()
				go c.Receive(wctx)
				wctx.Waiting(t)
			}
			err = testkit.Within(t, 10*time.Second, "the echo call", func() error {
				_, err := c.Echo(ctx, 1)
				return err
			})
			if !errors.Is(err, chanos.ErrProtocol) || !errors.Is(x.Err(), chanos.ErrProtocol) {
				t.Fatalf("Echo = %v, connection %v; want ErrProtocol", err, x.Err())
			}
		})
	}
}

// A monitor killed with SIGKILL and started again in its directory: the
// domains notice the loss at once (OnMonitor), the connections bound
// before go on, and the domains rejoin and export their names again by
// themselves, so that a new client reaches the old server by name.
func TestMonitorRestartRejoins(t *testing.T) {
	dir := testkit.ShortDir(t)
	mon := testkit.Start(t, testkit.Self("monitor", dir))
	mon.Expect(t, "ready")
	child(t, dir, "server", "steady", "ready")
	ctx := testkit.Context(t)
	d, events := joinHearing(t, ctx, dir)
	l, err := pingpong.Export(ctx, d, "mine")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := pingpong.Connect(ctx, d, "steady")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if v, err := c.Echo(ctx, 1); err != nil || v != 2 {
		t.Fatalf("echo = %d, %v", v, err)
	}
	oldID := d.ID()
	mon.Kill()
	ev := testkit.Await(t, "the domain noticing the monitor's death", events)
	if !ev.Lost || !errors.Is(ev.Err, chanos.ErrMonitorLost) {
		t.Fatalf("event %+v, want Lost with ErrMonitorLost", ev)
	}
	select {
	case <-d.Done():
		t.Fatal("a domain that rejoins ended with its monitor")
	default:
	}
	if v, err := c.Echo(ctx, 2); err != nil || v != 3 {
		t.Fatalf("echo without a monitor = %d, %v", v, err)
	}

	mon2 := testkit.Start(t, testkit.Self("monitor", dir))
	mon2.Expect(t, "ready")
	start := time.Now()
	d2, err := chanos.Join(ctx, chanos.WithDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	bctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c2, err := pingpong.Connect(bctx, d2, "steady")
	if err != nil {
		t.Fatalf("a new client binding the old server by name after the restart: %v", err)
	}
	defer c2.Close()
	if v, err := c2.Echo(ctx, 7); err != nil || v != 8 {
		t.Fatalf("echo to the old server through the new monitor = %d, %v", v, err)
	}
	t.Logf("the old server was reached through the new monitor %v after it started", time.Since(start))
	ev = testkit.Await(t, "the domain's rejoin", events)
	if ev.Lost || ev.Err != nil || ev.Domain == 0 || d.ID() != ev.Domain {
		t.Fatalf("event %+v (id %d, was %d), want a rejoin without errors", ev, d.ID(), oldID)
	}
	// This domain's own name is back, and its old connection still works.
	m2, err := pingpong.Connect(bctx, d2, "mine")
	if err != nil {
		t.Fatalf("connect to the rejoined domain's export: %v", err)
	}
	defer m2.Close()
	if _, err := l.Accept(bctx); err != nil {
		t.Fatalf("accept after the rejoin: %v", err)
	}
	if v, err := c.Echo(ctx, 3); err != nil || v != 4 {
		t.Fatalf("echo on the connection bound before = %d, %v", v, err)
	}
}

// A Connect that waits for its name waits for the monitor too: one that
// was waiting when the monitor stopped, and one made while no monitor
// ran, both bind once the domain has rejoined the next monitor and the
// name is exported there. One whose deadline passes first fails with
// ErrMonitorLost and ErrNotFound; under WithoutRejoin, one fails at once.
func TestConnectWaitsForRejoin(t *testing.T) {
	dir := testkit.ShortDir(t)
	stop := testmonitor.Serve(t, dir)
	ctx := testkit.Context(t)
	d, err := chanos.Join(ctx, chanos.WithDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	lone, err := chanos.Join(ctx, chanos.WithDir(dir), chanos.WithoutRejoin())
	if err != nil {
		t.Fatal(err)
	}
	defer lone.Close()
	type result struct {
		c   *pingpong.Conn
		err error
	}
	connect := func() chan result {
		ch := make(chan result, 1)
		go func() {
			bctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			c, err := pingpong.Connect(bctx, d, "later")
			ch <- result{c, err}
		}()
		return ch
	}
	waiting := connect()
	testkit.Eventually(t, "the bind waiting for its name", func() bool {
		ps, err := d.Ps(ctx)
		return err == nil && ps.Monitor.Limits.PendingBinds == 1
	})
	stop()
	testkit.Eventually(t, "the domain without rejoin ending", func() bool { return lone.Err() != nil })
	if _, err := pingpong.Connect(ctx, lone, "later"); !errors.Is(err, chanos.ErrMonitorLost) {
		t.Fatalf("connect of a domain without rejoin, no monitor = %v, want ErrMonitorLost", err)
	}
	sctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err = pingpong.Connect(sctx, d, "later")
	cancel()
	if !errors.Is(err, chanos.ErrMonitorLost) || !errors.Is(err, chanos.ErrNotFound) {
		t.Fatalf("connect with no monitor until its deadline = %v, want ErrMonitorLost and ErrNotFound", err)
	}
	unmonitored := connect()

	testmonitor.Serve(t, dir)
	srv, err := chanos.Join(ctx, chanos.WithDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	l, err := pingpong.Export(ctx, srv, "later")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go pingpong.Serve(ctx, l, exampleServer{})
	for what, ch := range map[string]chan result{"waiting when the monitor stopped": waiting, "made with no monitor": unmonitored} {
		r := testkit.Await(t, "the connect "+what, ch)
		if r.err != nil {
			t.Fatalf("the connect %s: %v", what, r.err)
		}
		if v, err := r.c.Echo(ctx, 5); err != nil || v != 5 {
			t.Fatalf("the connect %s: echo = %d, %v", what, v, err)
		}
		r.c.Close()
	}
}

// A name another domain took while the domain had no monitor is not
// exported again: the rejoin says so, and the listener stops with why.
func TestRejoinNameTaken(t *testing.T) {
	dir := testkit.ShortDir(t)
	stop := testmonitor.Serve(t, dir)
	ctx := testkit.Context(t)
	proceed := make(chan struct{})
	events := make(chan chanos.MonitorEvent, 2)
	d, err := chanos.Join(ctx, chanos.WithDir(dir), chanos.OnMonitor(func(ev chanos.MonitorEvent) {
		if ev.Lost {
			<-proceed // the rejoin waits for this function
		}
		events <- ev
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	l, err := pingpong.Export(ctx, d, "contested")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	stop()
	testmonitor.Serve(t, dir)
	other, err := chanos.Join(ctx, chanos.WithDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := pingpong.Export(ctx, other, "contested"); err != nil {
		t.Fatal(err)
	}
	close(proceed)
	if ev := testkit.Await(t, "the loss", events); !ev.Lost {
		t.Fatalf("event %+v, want the loss", ev)
	}
	ev := testkit.Await(t, "the rejoin", events)
	if ev.Lost || !errors.Is(ev.Err, chanos.ErrNameTaken) {
		t.Fatalf("event %+v, want a rejoin with ErrNameTaken", ev)
	}
	if _, err := l.Accept(ctx); !errors.Is(err, chanos.ErrNameTaken) {
		t.Fatalf("Accept on the listener whose name was taken = %v", err)
	}
}

// A domain rejoins only a monitor it would join: while the directory of
// its lost monitor is open to others, whatever listens on the socket gets
// no connection; once the directory is private again, the rejoin goes on.
func TestRejoinChecksTheDirectory(t *testing.T) {
	dir := testkit.ShortDir(t)
	mon := testkit.Start(t, testkit.Self("monitor", dir))
	mon.Expect(t, "ready")
	ctx := testkit.Context(t)
	_, events := joinHearing(t, ctx, dir)
	mon.Kill()
	if ev := testkit.Await(t, "the domain noticing the monitor's death", events); !ev.Lost {
		t.Fatalf("event %+v, want Lost", ev)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	accepted := listenAsMonitor(t, dir)
	select {
	case c := <-accepted:
		c.Close()
		t.Fatal("the domain connected to a monitor in a directory open to others")
	case <-time.After(time.Second): // four rejoin attempts at least
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	c := testkit.Await(t, "the rejoin's connection once the directory is private", accepted)
	c.Close()
}

// Join refuses a monitor socket whose listener runs as another user, even
// in a directory of the right owner and mode: the kernel's record of the
// listener (SO_PEERCRED) is checked, not the file system alone. Needs
// root, to start that listener as nobody.
func TestJoinRefusesAnotherUsersMonitor(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to listen as another user")
	}
	dir := testkit.ShortDir(t)
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	sock := os.NewFile(uintptr(fd), "monitor socket")
	defer sock.Close()
	if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: rundir.Socket(dir)}); err != nil {
		t.Fatal(err)
	}
	cmd := testkit.Self("listen-as-nobody")
	cmd.ExtraFiles = []*os.File{sock}
	lis := testkit.Start(t, cmd)
	lis.Expect(t, "ready")
	_, err = chanos.Join(testkit.Context(t), chanos.WithDir(dir), chanos.WithCallTimeout(time.Second))
	if !errors.Is(err, chanos.ErrUntrustedMonitor) || !strings.Contains(err.Error(), "uid 65534") {
		t.Fatalf("Join = %v, want ErrUntrustedMonitor naming uid 65534", err)
	}
}

// roleListenAsNobody, in a child process started as root, becomes nobody
// (65534) and listens on the bound socket it was given as descriptor 3,
// says "ready", and waits to be killed.
func roleListenAsNobody([]string) error {
	if err := syscall.Setgid(65534); err != nil {
		return err
	}
	if err := syscall.Setuid(65534); err != nil {
		return err
	}
	if err := syscall.Listen(3, 8); err != nil {
		return err
	}
	fmt.Println("ready")
	select {}
}

// A client that sends what the interface does not have (here, a call of
// an rpc number it lacks) sees its connection close; the server says why
// in its log, with the client's pid and program, and serves on.
func TestListenerLogsProtocolViolation(t *testing.T) {
	dir, _ := testkit.StartMonitor(t)
	ctx := testkit.Context(t)
	var logs testkit.Output
	sd, err := chanos.Join(ctx, chanos.WithDir(dir), chanos.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer sd.Close()
	l, err := pingpong.Export(ctx, sd, "violated")
	if err != nil {
		t.Fatal(err)
	}
	go pingpong.Serve(ctx, l, childServer{})
	cd, err := chanos.Join(ctx, chanos.WithDir(dir), chanos.WithProgram("broken-client"))
	if err != nil {
		t.Fatal(err)
	}
	defer cd.Close()
	c, err := pingpong.Connect(ctx, cd, "violated")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var call wire.Buffer
	if err := (&pingpong.EchoCall{Val: 7}).Encode(&call); err != nil {
		t.Fatal(err)
	}
	wire.SetCallID(call.B, 1)
	binary.LittleEndian.PutUint16(call.B[4:], 999) // no rpc of pingpong
	if err := genrt.Engine(c.Raw()).SendFrame(ctx, call.B); err != nil {
		t.Fatal(err)
	}
	logs.Wait(t, "level=WARN", "broke the protocol", "name=violated", "program=broken-client", fmt.Sprintf("pid=%d", os.Getpid()))
	// The next client is served as ever.
	c2, err := pingpong.Connect(ctx, cd, "violated")
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if v, err := c2.Echo(ctx, 1); err != nil || v != 2 {
		t.Fatalf("echo from the next client = %d, %v", v, err)
	}
}

// A call whose reply waits behind more one-way messages than the
// connection's inbox holds fails at its deadline saying so: the caller
// must also receive what the peer sends it.
func TestCallBehindAFullInbox(t *testing.T) {
	x, y, err := chanos.UMPPair(pingpong.Interface)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	defer y.Close()
	c, s := pingpong.NewConn(x), pingpong.NewConn(y)
	ctx := testkit.Context(t)
	go func() {
		for i := range 2000 {
			if s.Send(ctx, &pingpong.Ping{MsgID: uint32(i)}) != nil {
				return
			}
		}
		s.Serve(ctx, childServer{})
	}()
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err = c.Echo(cctx, 1)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "fill this connection's inbox: receive them") {
		t.Fatalf("a call behind 2000 unread messages = %v, want the deadline, saying that the inbox is full", err)
	}
	// Once they are received, calls go through.
	for range 2000 {
		if _, err := c.Receive(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if v, err := c.Echo(ctx, 1); err != nil || v != 2 {
		t.Fatalf("echo after the messages were received = %d, %v", v, err)
	}
}

// A name that the nameservice would refuse (a space, a NUL, a byte past
// ASCII, one byte too many) fails Export and Connect at once with
// ErrInvalidName, before any call to the monitor; the domain goes on.
func TestInvalidNames(t *testing.T) {
	dir := testmonitor.Start(t)
	ctx := testkit.Context(t)
	d, err := chanos.Join(ctx, chanos.WithDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, name := range []string{"a b", "a\x00b", "caf\u00e9", "tab\there", strings.Repeat("n", 257)} {
		if l, err := pingpong.Export(ctx, d, name); !errors.Is(err, chanos.ErrInvalidName) {
			if err == nil {
				l.Close()
			}
			t.Errorf("Export(%q) = %v, want ErrInvalidName", name, err)
		}
		if c, err := pingpong.Connect(ctx, d, name); !errors.Is(err, chanos.ErrInvalidName) {
			if err == nil {
				c.Close()
			}
			t.Errorf("Connect(%q) = %v, want ErrInvalidName", name, err)
		}
	}
	l, err := pingpong.Export(ctx, d, "fine.name-1_2")
	if err != nil {
		t.Fatalf("Export of a valid name after the refusals: %v", err)
	}
	l.Close()
}

// The monitor's refusal reads as its kind and its detail once each, and
// still matches the kind and gives its code.
func TestMonitorRefusalText(t *testing.T) {
	dir := testmonitor.Start(t)
	ctx := testkit.Context(t)
	d, err := chanos.Join(ctx, chanos.WithDir(dir), chanos.WithCallTimeout(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	_, err = pingpong.Connect(context.Background(), d, "nobody.here")
	if !errors.Is(err, chanos.ErrNotFound) || chanos.CodeOf(err) != chanos.CodeNotFound {
		t.Fatalf("Connect of a name nobody exports = %v (code %v), want ErrNotFound, not found", err, chanos.CodeOf(err))
	}
	if want := `name not found: bind "nobody.here": the name did not appear`; !strings.Contains(err.Error(), want) ||
		strings.Count(err.Error(), "not found") != 1 || strings.Contains(err.Error(), "monitor.bind") {
		t.Errorf("error text %q, want %q in it and not found said once", err, want)
	}
}
