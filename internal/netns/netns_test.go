package netns_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chanos/chanos/internal/netns"
	"github.com/chanos/chanos/internal/testkit"
	tnetns "github.com/chanos/chanos/internal/testkit/netns"
)

func TestMain(m *testing.M) {
	code := testkit.Run(m, testkit.Roles{
		"echo":  echoRole,
		"park":  parkRole,
		"check": checkRole,
	})
	testkit.CleanPrograms()
	os.Exit(code)
}

// echoRole serves TCP on args[0], echoing every connection, after
// printing "listening".
func echoRole(args []string) error {
	l, err := net.Listen("tcp", args[0])
	if err != nil {
		return err
	}
	fmt.Println("listening")
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer c.Close()
			io.Copy(c, c)
		}()
	}
}

// parkRole prints "parked" and waits to be killed.
func parkRole([]string) error {
	fmt.Println("parked")
	select {}
}

// checkRole prints what Check says.
func checkRole([]string) error {
	err := netns.Check()
	fmt.Printf("check: %v; unavailable=%t not_privileged=%t no_ip=%t\n", err,
		errors.Is(err, netns.ErrUnavailable), errors.Is(err, netns.ErrNotPrivileged), errors.Is(err, netns.ErrNoIP))
	return nil
}

// park starts parkRole in m, not reaped by anyone but the cluster's
// teardown, and returns its pid once it runs.
func park(m *netns.Machine) (int, error) {
	cmd := m.Command(testkit.Command("park")[0], testkit.Command("park")[1:]...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "parked\n" {
		return 0, fmt.Errorf("park printed %q: %v", line, err)
	}
	return cmd.Process.Pid, nil
}

// inMachine starts this test binary in role inside m.
func inMachine(t *testing.T, m *netns.Machine, role string, args ...string) *testkit.Child {
	argv := testkit.Command(role, args...)
	cmd := m.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0")
	return testkit.Start(t, cmd)
}

func echo(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	c.SetDeadline(time.Now().Add(testkit.Limit))
	if _, err := io.WriteString(c, msg); err != nil {
		t.Fatalf("write: %v", err)
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != msg {
		t.Fatalf("echo: got %q (%v), want %q", buf, err, msg)
	}
}

// dialWithin dials addr from m, giving up after d.
func dialWithin(m *netns.Machine, addr string, d time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return m.Dial(ctx, "tcp", addr)
}

func TestMachinesReachEachOther(t *testing.T) {
	c := tnetns.New(t, 3)
	m1, m2, m3 := c.Machines[0], c.Machines[1], c.Machines[2]
	if !c.Subnet.Contains(m1.Addr) || m1.Addr == m2.Addr || m2.Addr == m3.Addr {
		t.Fatalf("addresses %v %v %v in %v", m1.Addr, m2.Addr, m3.Addr, c.Subnet)
	}
	addr := netip.AddrPortFrom(m1.Addr, 7000).String()
	srv := inMachine(t, m1, "echo", addr)
	srv.Expect(t, "listening")

	for _, m := range []*netns.Machine{m2, m3} {
		conn, err := m.Dial(testkit.Context(t), "tcp", addr)
		if err != nil {
			t.Fatalf("dial %s from %s: %v", addr, m.Name, err)
		}
		echo(t, conn, "hello from "+m.Name)
		if got := conn.LocalAddr().(*net.TCPAddr).AddrPort().Addr(); got != m.Addr {
			t.Errorf("%s dialled from %v, want its own address %v", m.Name, got, m.Addr)
		}
		conn.Close()
	}
	// The host link: this process reaches the machine without entering.
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s from the host: %v", addr, err)
	}
	echo(t, conn, "hello from the host")
	conn.Close()

	// The server runs in machine 1: its network namespace is m1's.
	if ns := nsOf(t, srv.Cmd.Process.Pid); ns != nsOf(t, "/run/netns/"+m1.NS) {
		t.Errorf("server's namespace %v, machine 1's %v", ns, nsOf(t, "/run/netns/"+m1.NS))
	}
}

func TestCutAndRestore(t *testing.T) {
	c := tnetns.New(t, 3)
	m1, m2, m3 := c.Machines[0], c.Machines[1], c.Machines[2]
	addr := netip.AddrPortFrom(m1.Addr, 7000).String()
	srv := inMachine(t, m1, "echo", addr)
	srv.Expect(t, "listening")
	ln, err := m2.Listen(testkit.Context(t), "tcp", netip.AddrPortFrom(m2.Addr, 7001).String())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()

	// A connection made before the cut outlives it.
	held, err := m2.Dial(testkit.Context(t), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	echo(t, held, "before")

	if err := m1.Cut(testkit.Context(t)); err != nil {
		t.Fatal(err)
	}
	const bound = 500 * time.Millisecond
	for _, m := range []*netns.Machine{m2, m3} {
		conn, err := dialWithin(m, addr, bound)
		if err == nil {
			conn.Close()
			t.Fatalf("%s reached machine 1 while it was cut off", m.Name)
		}
		// A pulled cable drops packets silently: no reset, no error
		// from the network, only the dialler's own limit.
		if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
			t.Errorf("dial from %s while cut off: %v, want a timeout", m.Name, err)
		}
	}
	if conn, err := dialWithin(m1, ln.Addr().String(), bound); err == nil {
		conn.Close()
		t.Fatal("machine 1 reached machine 2 while it was cut off")
	}
	if _, err := net.DialTimeout("tcp", addr, bound); err == nil {
		t.Fatal("the host reached machine 1 while it was cut off")
	}
	// Sent during the cut: delivered once the link is back.
	held.SetDeadline(time.Now().Add(testkit.Limit))
	if _, err := io.WriteString(held, "during"); err != nil {
		t.Fatal(err)
	}

	if err := m1.Restore(testkit.Context(t)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len("during"))
	if _, err := io.ReadFull(held, buf); err != nil || string(buf) != "during" {
		t.Fatalf("after restore, the held connection read %q: %v", buf, err)
	}
	for _, m := range []*netns.Machine{m2, m3} {
		conn, err := m.Dial(testkit.Context(t), "tcp", addr)
		if err != nil {
			t.Fatalf("dial from %s after restore: %v", m.Name, err)
		}
		echo(t, conn, "after")
		conn.Close()
	}
}

// nsOf returns the network namespace (device and inode) of a pid or of
// a namespace file.
func nsOf(t *testing.T, of any) [2]uint64 {
	t.Helper()
	path := fmt.Sprint(of)
	if pid, ok := of.(int); ok {
		path = fmt.Sprintf("/proc/%d/ns/net", pid)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatalf("namespace of %v: %v", of, err)
	}
	return [2]uint64{st.Dev, st.Ino}
}

// ipList returns the lines of `ip ARGS` that contain sub.
func ipList(t *testing.T, sub string, args ...string) []string {
	t.Helper()
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip %v: %v: %s", args, err, out)
	}
	var found []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, sub) {
			found = append(found, l)
		}
	}
	return found
}

// checkGone fails the test unless nothing of cluster id remains, as ip
// and /proc tell, and the processes pids have ended. It waits for a
// while: another test binary's sweeper may be removing the cluster (and
// makes a lock file while it does), or may briefly lock an id that is
// free.
func checkGone(t *testing.T, id int, pids ...int) {
	t.Helper()
	var left []string
	limit := time.Now().Add(testkit.Limit)
	for {
		left = remainsOf(t, id, pids)
		if len(left) == 0 {
			return
		}
		if time.Now().After(limit) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Errorf("left of cluster %d: %q", id, left)
}

func remainsOf(t *testing.T, id int, pids []int) []string {
	t.Helper()
	prefix := fmt.Sprintf("%s-%d-", netns.Prefix, id)
	link := fmt.Sprintf("%s%dh", netns.Prefix, id)
	var left []string
	left = append(left, ipList(t, prefix, "netns", "list")...)
	left = append(left, ipList(t, link+"@", "link")...)
	if _, err := os.Stat(filepath.Join(netns.LockDir, fmt.Sprintf("%d.lock", id))); !errors.Is(err, os.ErrNotExist) {
		left = append(left, fmt.Sprintf("lock file (%v)", err))
	}
	for _, pid := range pids {
		if alive(pid) {
			left = append(left, fmt.Sprintf("process %d", pid))
		}
	}
	return left
}

// alive reports whether pid runs: it exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command's name, which is in parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

func TestCloseRemovesEverything(t *testing.T) {
	c := tnetns.New(t, 3)
	sw := c.SwitchNS()
	if l := ipList(t, c.Prefix(), "netns", "list"); len(l) != 4 {
		t.Fatalf("namespaces of the cluster: %q, want 3 machines and the switch", l)
	}
	if l := ipList(t, c.HostLink()+"@", "link"); len(l) != 1 {
		t.Fatalf("host link: %q", l)
	}
	if l := ipList(t, "br0", "-n", sw, "link", "show", "type", "bridge"); len(l) != 1 {
		t.Fatalf("bridge in %s: %q", sw, l)
	}
	var kids []*testkit.Child
	for _, m := range c.Machines {
		k := inMachine(t, m, "park")
		k.Expect(t, "parked")
		kids = append(kids, k)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for _, k := range kids {
		killedByClose(t, k)
	}
	checkGone(t, c.ID)
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := c.Machines[0].Cut(testkit.Context(t)); !errors.Is(err, netns.ErrClosed) {
		t.Errorf("Cut on a closed cluster: %v, want ErrClosed", err)
	}
}

// killedByClose fails the test unless k has ended, killed by the
// cluster's Close.
func killedByClose(t *testing.T, k *testkit.Child) {
	t.Helper()
	select {
	case <-k.Done():
	case <-time.After(testkit.Limit):
		t.Fatal("a process in a machine runs after Close")
	}
	if ws, ok := k.Cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
		t.Errorf("%v ended with %v, want killed by Close", k.Cmd.Args, k.Cmd.ProcessState)
	}
}

func TestClustersDoNotShare(t *testing.T) {
	a, b := tnetns.New(t, 1), tnetns.New(t, 1)
	if a.ID == b.ID || a.Subnet.Overlaps(b.Subnet) || a.Machines[0].NS == b.Machines[0].NS {
		t.Fatalf("two clusters share: ids %d %d, subnets %v %v", a.ID, b.ID, a.Subnet, b.Subnet)
	}
	// One cluster's machines do not reach the other's.
	srv := inMachine(t, a.Machines[0], "echo", netip.AddrPortFrom(a.Machines[0].Addr, 7000).String())
	srv.Expect(t, "listening")
	if conn, err := dialWithin(b.Machines[0], netip.AddrPortFrom(a.Machines[0].Addr, 7000).String(), 500*time.Millisecond); err == nil {
		conn.Close()
		t.Fatal("a machine of one cluster reached a machine of another")
	}
}

// failEnv, in a child running TestFailOnPurpose, says how it fails.
const failEnv = "CHANOS_NETNS_FAIL"

// TestFailOnPurpose builds machines, starts a process in one, and fails
// as failEnv says: it runs only as the child of
// TestFailingTestLeavesNothing.
func TestFailOnPurpose(t *testing.T) {
	how := os.Getenv(failEnv)
	if how == "" {
		t.Skip("runs only as a child of TestFailingTestLeavesNothing")
	}
	c := tnetns.New(t, 2)
	pid, err := park(c.Machines[1])
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("cluster %d %d\n", c.ID, pid)
	switch how {
	case "fatal":
		t.Fatal("failing on purpose")
	case "panic":
		panic("failing on purpose")
	}
}

func TestFailingTestLeavesNothing(t *testing.T) {
	tnetns.Require(t)
	for _, how := range []string{"fatal", "panic"} {
		t.Run(how, func(t *testing.T) {
			self, err := os.Executable()
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(self, "-test.run=^TestFailOnPurpose$", "-test.count=1")
			cmd.Env = append(os.Environ(), failEnv+"="+how)
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || !strings.Contains(string(out), "failing on purpose") {
				t.Fatalf("the child did not fail on purpose (%v):\n%s", err, out)
			}
			var id, pid int
			for _, l := range strings.Split(string(out), "\n") {
				if _, err := fmt.Sscanf(l, "cluster %d %d", &id, &pid); err == nil {
					break
				}
			}
			if pid == 0 {
				t.Fatalf("the child built no cluster:\n%s", out)
			}
			checkGone(t, id, pid)
		})
	}
}

// holdEnv, in a child running TestHoldUntilKilled, says to run it.
const holdEnv = "CHANOS_NETNS_HOLD"

// TestHoldUntilKilled builds machines with the test kit, parks a process
// in machine 1, prints "cluster ID PID" and waits to be killed: a test
// binary killed mid-run, whose cleanups never run. It runs only as the
// child of holder.
func TestHoldUntilKilled(t *testing.T) {
	if os.Getenv(holdEnv) == "" {
		t.Skip("runs only as a child of the tests of sweeping")
	}
	c := tnetns.New(t, 2)
	pid, err := park(c.Machines[0])
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("cluster %d %d\n", c.ID, pid)
	select {}
}

// holder runs this test binary's TestHoldUntilKilled and kills it with
// -9 once its cluster is built, and returns the cluster's id and the pid
// of the process it left in machine 1, after checking that what the
// killed binary built outlived it.
func holder(t *testing.T) (id, pid int) {
	tnetns.Require(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run=^TestHoldUntilKilled$", "-test.count=1")
	cmd.Env = append(os.Environ(), holdEnv+"=1")
	h := testkit.Start(t, cmd)
	if _, err := fmt.Sscanf(h.Line(t), "cluster %d %d", &id, &pid); err != nil {
		t.Fatal(err)
	}
	h.Cmd.Process.Signal(syscall.SIGKILL)
	h.Wait(t)
	// If the test fails before it sweeps, what the binary left goes.
	t.Cleanup(func() {
		if _, err := netns.Sweep(context.Background(), nil); err != nil {
			t.Errorf("sweeping after the test: %v", err)
		}
	})
	// What the binary built is still there, its process too.
	if l := ipList(t, fmt.Sprintf("%s-%d-", netns.Prefix, id), "netns", "list"); len(l) != 3 {
		t.Errorf("after kill -9, namespaces: %q, want the two machines and the switch", l)
	}
	if !alive(pid) {
		t.Errorf("after kill -9, the process in machine 1 is gone")
	}
	return id, pid
}

func TestSweepRemovesRemainsOfKilledRun(t *testing.T) {
	id, pid := holder(t)
	removed, err := netns.Sweep(testkit.Context(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("swept: %q", removed)
	// Run alone, this Sweep is the one that removes them; beside other
	// test binaries, one of theirs may have come first.
	if want := fmt.Sprintf("%s-%d-m1", netns.Prefix, id); !slices.Contains(removed, want) {
		t.Logf("Sweep removed %q, not %s: another process swept it", removed, want)
	}
	checkGone(t, id, pid)
}

func TestNextStartSweeps(t *testing.T) {
	id, pid := holder(t)
	c := tnetns.New(t, 1)
	if c.ID != id {
		checkGone(t, id, pid)
		return
	}
	// The same id again: only the new cluster's single machine is there.
	if l := ipList(t, fmt.Sprintf("%s-%d-m2", netns.Prefix, id), "netns", "list"); len(l) > 0 {
		t.Errorf("the dead run's machine 2 is left: %q", l)
	}
	testkit.Eventually(t, "the end of the dead run's process", func() bool { return !alive(pid) })
}

func TestChanosMonitorInMachine(t *testing.T) {
	c := tnetns.New(t, 2)
	bin := testkit.GoProgram(t, "github.com/chanos/chanos/cmd/chanos")
	dir := testkit.ShortDir(t)
	log := &testkit.Output{}
	cmd := c.Machines[0].Command(bin, "monitor", "--dir", dir)
	cmd.Stderr = log
	mon := testkit.Start(t, cmd)
	testkit.Eventually(t, "the monitor's start", func() bool { return log.Count("monitor started") > 0 })
	if ns := nsOf(t, mon.Cmd.Process.Pid); ns != nsOf(t, "/run/netns/"+c.Machines[0].NS) {
		t.Errorf("the monitor is not in machine 1's namespace")
	}
	// Its socket is in the file system, which the machines share.
	ps, err := c.Machines[1].Command(bin, "ps", "--json", "--dir", dir).CombinedOutput()
	if err != nil || !strings.Contains(string(ps), `"domains"`) {
		t.Fatalf("chanos ps from machine 2: %v\n%s\nmonitor log:\n%s", err, ps, log)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	killedByClose(t, mon)
	checkGone(t, c.ID)
}

func TestCheckSaysWhy(t *testing.T) {
	tnetns.Require(t)
	// This binary, where the unprivileged user can run it.
	dir, err := os.MkdirTemp("", "netns-check")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	self, _ := os.Executable()
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "netns.test")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	nobody := &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}

	run := func(env []string, attr *syscall.SysProcAttr, args ...string) string {
		cmd := exec.Command(bin, args...)
		cmd.Env, cmd.SysProcAttr, cmd.Dir = env, attr, dir
		out, _ := cmd.CombinedOutput()
		return string(out)
	}
	role := append([]string{}, testkit.Command("check")[1:]...)
	if out := run(os.Environ(), nobody, role...); !strings.Contains(out, "not_privileged=true") || !strings.Contains(out, "needs root") {
		t.Errorf("unprivileged: %s", out)
	}
	if out := run([]string{"PATH=" + dir}, nil, role...); !strings.Contains(out, "no_ip=true") || !strings.Contains(out, "iproute2") {
		t.Errorf("without ip: %s", out)
	}
	if out := run(os.Environ(), nil, role...); !strings.Contains(out, "check: <nil>") {
		t.Errorf("as root: %s", out)
	}
	// The test kit: a skip with the reason, or a failure under CI.
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "CI=") {
			env = append(env, e)
		}
	}
	test := []string{"-test.run=^TestMachinesReachEachOther$", "-test.v", "-test.count=1"}
	if out := run(env, nobody, test...); !strings.Contains(out, "--- SKIP") || !strings.Contains(out, "needs root") {
		t.Errorf("unprivileged test without CI: %s", out)
	}
	if out := run(append(env, "CI=1"), nobody, test...); !strings.Contains(out, "--- FAIL") || !strings.Contains(out, "needs root") {
		t.Errorf("unprivileged test with CI=1: %s", out)
	}
}

func TestCleanScript(t *testing.T) {
	live := tnetns.New(t, 1)
	id, pid := holder(t)
	out, err := exec.Command("bash", "../../scripts/netns-clean.sh").CombinedOutput()
	t.Logf("netns-clean.sh:\n%s", out)
	if err != nil {
		t.Fatalf("netns-clean.sh: %v", err)
	}
	checkGone(t, id, pid)
	// A live cluster is left alone.
	if l := ipList(t, live.Prefix(), "netns", "list"); len(l) != 2 {
		t.Errorf("the live cluster's namespaces after netns-clean.sh: %q", l)
	}
}

// BenchmarkCluster times building and removing a cluster, and cutting a
// machine off and back.
func BenchmarkCluster(b *testing.B) {
	if err := netns.Check(); err != nil {
		b.Skip(err)
	}
	for _, n := range []int{1, 3, 10} {
		b.Run(fmt.Sprintf("new-close/machines=%d", n), func(b *testing.B) {
			for b.Loop() {
				c, err := netns.New(context.Background(), netns.Options{Machines: n, HostLink: true})
				if err != nil {
					b.Fatal(err)
				}
				if err := c.Close(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("cut-restore", func(b *testing.B) {
		c, err := netns.New(context.Background(), netns.Options{Machines: 1})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		m := c.Machines[0]
		for b.Loop() {
			if err := m.Cut(context.Background()); err != nil {
				b.Fatal(err)
			}
			if err := m.Restore(context.Background()); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func TestDo(t *testing.T) {
	c := tnetns.New(t, 1)
	m := c.Machines[0]
	host := nsOf(t, "/proc/thread-self/ns/net")
	var inside [2]uint64
	errX := errors.New("x")
	if err := m.Do(func() error {
		inside = nsOf(t, "/proc/thread-self/ns/net")
		return errX
	}); !errors.Is(err, errX) {
		t.Errorf("Do returned %v, want fn's error", err)
	}
	if inside != nsOf(t, "/run/netns/"+m.NS) {
		t.Errorf("fn ran in namespace %v, not the machine's", inside)
	}
	func() {
		defer func() {
			if v := recover(); v != "boom" {
				t.Errorf("recovered %v, want fn's panic", v)
			}
		}()
		m.Do(func() error { panic("boom") })
	}()
	// Every thread of this process is back in the host's namespace.
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		if ns := nsOf(t, "/proc/self/task/"+task.Name()+"/ns/net"); ns != host {
			t.Errorf("thread %s is left in namespace %v", task.Name(), ns)
		}
	}
}

// A command in a machine sees the host's mounts, the cgroup hierarchies
// among them: a monitor started there offers its spawn service cgroups
// as it would on the host.
func TestCommandSeesTheHostsMounts(t *testing.T) {
	if _, err := exec.LookPath("nsenter"); err != nil {
		t.Skip("no nsenter: a machine's commands get a /sys of their own (ip netns exec)")
	}
	host, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	c := tnetns.New(t, 1)
	out, err := c.Machines[0].Command("cat", "/proc/self/mountinfo").Output()
	if err != nil {
		t.Fatal(err)
	}
	cgroups := func(mountinfo []byte) []string {
		var mounts []string
		for _, l := range strings.Split(string(mountinfo), "\n") {
			if f := strings.Fields(l); len(f) > 4 && strings.Contains(l, " - cgroup") {
				mounts = append(mounts, f[4])
			}
		}
		return mounts
	}
	if want, got := cgroups(host), cgroups(out); !slices.Equal(want, got) {
		t.Fatalf("cgroup mounts in the machine %v, on the host %v", got, want)
	}
}
