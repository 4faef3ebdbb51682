// Package cluster tests chanos machines in a cluster end to end: the real
// chanos binary runs a monitor in each machine (a network namespace on a
// bridge, internal/testkit/netns), against a real etcd whose members run
// in the machines too; domains are this test binary in roles. Everything
// (processes, namespaces, directories) is removed when a test ends.
//
// The tests need root and etcd; without them they skip, except under CI,
// where they fail.
package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chanos/chanos/chanos"
	hostnet "github.com/chanos/chanos/internal/netns"
	"github.com/chanos/chanos/internal/testkit"
	"github.com/chanos/chanos/internal/testkit/etcdtest"
	"github.com/chanos/chanos/internal/testkit/netns"
)

func TestMain(m *testing.M) {
	code := testkit.Run(m, roles)
	testkit.CleanPrograms()
	os.Exit(code)
}

// roles are the parts this test binary plays in the machines' processes.
var roles = testkit.Roles{"server": server, "client": client, "ppserver": ppServer, "ppclient": ppClient, "shipper": shipper}

// svc is the interface the test's server exports.
var svc = chanos.Interface{Name: "clustertest", MaxFrameSize: 256}

// server joins the monitor in args[0], exports the name args[1], prints
// "exported", then prints a line for every change in its session with
// the monitor ("lost: ERR", "rejoined: ERR") until it is killed.
func server(args []string) error {
	dir, name := args[0], args[1]
	events := make(chan chanos.MonitorEvent, 16)
	d, err := chanos.Join(context.Background(), chanos.WithDir(dir), chanos.WithProgram("clustertest-server"),
		chanos.OnMonitor(func(ev chanos.MonitorEvent) { events <- ev }))
	if err != nil {
		return err
	}
	if _, err := chanos.Export(context.Background(), d, name, svc); err != nil {
		return err
	}
	fmt.Println("exported")
	for ev := range events {
		if ev.Lost {
			fmt.Printf("lost: %v\n", ev.Err)
		} else {
			fmt.Printf("rejoined: %v\n", ev.Err)
		}
	}
	return nil
}

// client joins the monitor in args[0], connects to the name args[1] and
// prints the outcome: "no route: ERR", or "other: ERR", or "connected".
func client(args []string) error {
	dir, name := args[0], args[1]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := chanos.Join(ctx, chanos.WithDir(dir), chanos.WithProgram("clustertest-client"))
	if err != nil {
		return err
	}
	defer d.Close()
	c, err := chanos.Connect(ctx, d, name, svc)
	switch {
	case errors.Is(err, chanos.ErrNoRoute):
		fmt.Printf("no route: %v\n", err)
	case err != nil:
		fmt.Printf("other: %v\n", err)
	default:
		c.Close()
		fmt.Println("connected")
	}
	return nil
}

// Lease settings of the tests' monitors: short, so that the tests that
// wait one out stay short (etcd refuses TTLs much below 2 s).
const (
	leaseTTL  = 2 * time.Second
	keepAlive = 500 * time.Millisecond
)

// world is a test's cluster: machines, etcd, the cluster's root and a
// monitor per machine.
type world struct {
	t        *testing.T
	bin      string
	net      *hostnet.Cluster
	etcd     *etcdtest.Cluster
	root     string
	name     string
	dirs     []string          // each machine's monitor directory
	monitors []*testkit.Child  // each machine's monitor, nil if none runs
	logs     []*testkit.Output // each machine's monitor log
}

// newWorld builds n machines, etcd members on the last members of them
// (so that a test may cut machine 1 off without cutting etcd in two), and
// a cluster root; it admits no machine yet.
func newWorld(t *testing.T, n, members int) *world {
	t.Helper()
	etcdtest.Need(t)
	w := &world{t: t, name: "ct", bin: testkit.GoProgram(t, "github.com/chanos/chanos/cmd/chanos")}
	w.net = netns.New(t, n)
	hosts := make([]string, members)
	prefixes := make([][]string, members)
	for i := range members {
		m := w.net.Machines[n-members+i]
		hosts[i] = m.Addr.String()
		prefixes[i] = []string{"ip", "netns", "exec", m.NS}
	}
	w.etcd = etcdtest.Start(t, etcdtest.Options{Members: members, Hosts: hosts, Prefixes: prefixes})
	w.root = filepath.Join(t.TempDir(), "root")
	w.cli("cluster", "init", "--root", w.root, "--name", w.name)
	w.dirs = make([]string, n)
	w.monitors = make([]*testkit.Child, n)
	w.logs = make([]*testkit.Output, n)
	for i := range n {
		w.dirs[i] = testkit.ShortDir(t)
	}
	return w
}

// cli runs the chanos binary on the host and returns its stdout.
func (w *world) cli(args ...string) string {
	w.t.Helper()
	out, err := exec.Command(w.bin, args...).Output()
	if err != nil {
		w.t.Fatalf("chanos %s: %v\n%s", strings.Join(args, " "), err, stderrOf(err))
	}
	return string(out)
}

func stderrOf(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(ee.Stderr)
	}
	return ""
}

// admit has root admit machine i (0-based) under the name mach<i+1>, and
// installs the credential in its directory. It returns the credential's
// serial.
func (w *world) admit(i int, root string) string {
	w.t.Helper()
	req := filepath.Join(w.t.TempDir(), "req")
	cred := filepath.Join(w.t.TempDir(), "cred")
	name := fmt.Sprintf("mach%d", i+1)
	w.cli("cluster", "show", "--dir", w.dirs[i], "--request", req, "--name", name)
	var out struct {
		Serial string `json:"serial"`
	}
	if err := json.Unmarshal([]byte(w.cli("cluster", "admit", "--root", root, "--name", name, "--out", cred, "--json", req)), &out); err != nil {
		w.t.Fatal(err)
	}
	w.cli("cluster", "join", "--dir", w.dirs[i], cred)
	return out.Serial
}

// start runs machine i's monitor in the cluster, its control link on
// port 7070 of the machine's address.
func (w *world) start(i int) { w.startWith(i) }

// startWith is start with more flags for the monitor.
func (w *world) startWith(i int, flags ...string) {
	w.t.Helper()
	m := w.net.Machines[i]
	cmd := m.Command(w.bin, append([]string{"monitor", "--dir", w.dirs[i], "--cluster", w.name,
		"--etcd", strings.Join(w.etcd.Endpoints(), ","), "--listen", m.Addr.String() + ":7070",
		"--lease-ttl", leaseTTL.String(), "--keep-alive", keepAlive.String()}, flags...)...)
	log := &testkit.Output{}
	cmd.Stderr = log
	c := testkit.Start(w.t, cmd)
	w.monitors[i], w.logs[i] = c, log
	w.t.Cleanup(func() {
		c.Cmd.Process.Signal(syscall.SIGCONT)
		c.Cmd.Process.Signal(syscall.SIGTERM)
		c.Wait(w.t)
		if w.t.Failed() {
			w.t.Logf("monitor of %s:\n%s", m.Name, log)
		}
	})
	log.Wait(w.t, "monitor started")
}

// serve runs a server domain on machine i exporting name; it returns once
// the export is made.
func (w *world) serve(i int, name string) *testkit.Child {
	w.t.Helper()
	argv := testkit.Command("server", w.dirs[i], name)
	c := testkit.Start(w.t, w.net.Machines[i].Command(argv[0], argv[1:]...))
	c.Expect(w.t, "exported")
	return c
}

// nameRow is a line of 'chanos names --json'.
type nameRow struct {
	Name      string `json:"name"`
	MachineID string `json:"machine_id"`
	Machine   string `json:"machine"`
}

// names runs 'chanos names --json' inside machine i, against its own
// monitor, and returns the machines each name lives on, by name (nil
// when the monitor cannot answer).
func (w *world) names(i int) map[string]nameRow {
	w.t.Helper()
	out, err := w.net.Machines[i].Command(w.bin, "names", "--json", "--dir", w.dirs[i]).Output()
	if err != nil {
		return nil
	}
	var rows []nameRow
	if err := json.Unmarshal(out, &rows); err != nil {
		w.t.Fatalf("chanos names --json: %v: %s", err, out)
	}
	m := map[string]nameRow{}
	for _, r := range rows {
		m[r.Name] = r
	}
	return m
}

// awaitLink waits until machine from's monitor has dialled its control
// link to machine to, over which it routes binds there.
func (w *world) awaitLink(from, to int) {
	w.t.Helper()
	id := w.machineID(to)
	testkit.Eventually(w.t, fmt.Sprintf("machine %d's control link to machine %d", from+1, to+1), func() bool {
		return w.logs[from].Count("control link up", "machine="+id) > 0
	})
}

// machineID returns machine i's id as its monitor logged it.
func (w *world) machineID(i int) string {
	w.t.Helper()
	for _, l := range strings.Split(w.logs[i].String(), "\n") {
		if strings.Contains(l, `msg="joined the cluster"`) {
			for _, f := range strings.Fields(l) {
				if v, ok := strings.CutPrefix(f, "machine="); ok {
					return v
				}
			}
		}
	}
	w.t.Fatalf("machine %d logged no id", i+1)
	return ""
}

// TestNamesAcrossMachines: a name exported on machine 1 is seen from
// machines 2 and 3, with its machine; a Connect from machine 2 reaches it
// (over the net interconnect, bind_test.go); when machine 1's monitor is killed with -9, its
// name vanishes from the others within the lease's TTL and one keep-alive
// interval; restarted, its server exports the name again, also when the
// restart comes before the killed run's lease has expired.
func TestNamesAcrossMachines(t *testing.T) {
	w := newWorld(t, 3, 3)
	for i := range 3 {
		w.admit(i, w.root)
		w.start(i)
	}
	srv := w.serve(0, "kv")
	id1 := w.machineID(0)
	for _, i := range []int{1, 2} {
		testkit.Eventually(t, fmt.Sprintf("kv seen from machine %d", i+1), func() bool {
			r, ok := w.names(i)["kv"]
			return ok && r.MachineID == id1 && r.Machine == "mach1"
		})
	}
	argv := testkit.Command("client", w.dirs[1], "kv")
	c := testkit.Start(t, w.net.Machines[1].Command(argv[0], argv[1:]...))
	if l := c.Line(t); l != "connected" {
		t.Fatalf("connect from machine 2 to a name of machine 1: %s; want connected", l)
	}
	c.Wait(t)

	killed := time.Now()
	w.monitors[0].Cmd.Process.Signal(syscall.SIGKILL)
	gone := make([]time.Duration, 2)
	for k, i := range []int{1, 2} {
		testkit.Eventually(t, fmt.Sprintf("kv gone from machine %d", i+1), func() bool {
			names := w.names(i)
			_, ok := names["kv"]
			return names != nil && !ok
		})
		gone[k] = time.Since(killed)
	}
	t.Logf("machine 1 killed (-9): its name gone from machine 2 after %v, from machine 3 after %v (TTL %v, keep-alive %v)",
		gone[0].Round(time.Millisecond), gone[1].Round(time.Millisecond), leaseTTL, keepAlive)

	// Restarted at once, machine 1 waits for its previous run's lease to
	// go; its server, which waited for a new monitor, exports kv again.
	w.start(0)
	for _, i := range []int{0, 1, 2} {
		testkit.Eventually(t, fmt.Sprintf("kv back, seen from machine %d", i+1), func() bool {
			r, ok := w.names(i)["kv"]
			return ok && r.MachineID == id1
		})
	}
	if l := srv.Line(t); !strings.HasPrefix(l, "lost: ") {
		t.Fatalf("machine 1's server: %q, want its session lost", l)
	}
	if l := srv.Line(t); l != "rejoined: <nil>" {
		t.Fatalf("machine 1's server: %q, want a rejoin with its name exported again", l)
	}

	// Killed and restarted at once: the new run waits until the previous
	// run's lease has expired, then the server exports kv again.
	w.monitors[0].Cmd.Process.Signal(syscall.SIGKILL)
	// At once, but after the process is gone: a loaded machine may take
	// a moment to close a killed process's socket, and the new monitor
	// rightly refuses a socket something still listens on.
	<-w.monitors[0].Done()
	w.start(0)
	if w.logs[0].Count("waiting for that lease to expire") != 1 {
		t.Fatalf("the restarted monitor did not wait for its previous run's lease:\n%s", w.logs[0])
	}
	if l := srv.Line(t); !strings.HasPrefix(l, "lost: ") {
		t.Fatalf("machine 1's server: %q, want its session lost", l)
	}
	if l := srv.Line(t); l != "rejoined: <nil>" {
		t.Fatalf("machine 1's server after a quick restart: %q, want a rejoin with its name exported again", l)
	}
	testkit.Eventually(t, "kv back after a quick restart, seen from machine 2", func() bool {
		r, ok := w.names(1)["kv"]
		return ok && r.MachineID == id1
	})
}

// TestCut: a machine cut off for less than the lease's TTL loses nothing;
// cut off for longer, its names go, another machine takes one of them,
// and once it is back no name is held twice and the domain whose name was
// taken is told.
func TestCut(t *testing.T) {
	// etcd runs on machines 2 to 4: cutting machine 1 cuts it from etcd,
	// and etcd keeps its quorum.
	w := newWorld(t, 4, 3)
	for i := range 4 {
		w.admit(i, w.root)
		w.start(i)
	}
	srv := w.serve(0, "kv")
	id1 := w.machineID(0)
	seen := func(i int, id string) func() bool {
		return func() bool { r, ok := w.names(i)["kv"]; return ok && r.MachineID == id }
	}
	testkit.Eventually(t, "kv of machine 1 seen from machine 2", seen(1, id1))
	ctx := testkit.Context(t)
	m1 := w.net.Machines[0]

	// Shorter than the TTL: a renewal or two fail, none is missed for
	// good.
	if err := m1.Cut(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(leaseTTL / 3)
	if err := m1.Restore(ctx); err != nil {
		t.Fatal(err)
	}
	// Long enough for the lease to have expired, had it not been renewed.
	time.Sleep(2 * leaseTTL)
	if !seen(1, id1)() || !seen(0, id1)() {
		t.Fatalf("after a cut of %v (TTL %v), kv is gone: machine 1 sees %v, machine 2 %v", leaseTTL/3, leaseTTL, w.names(0), w.names(1))
	}
	if n := w.logs[0].Count("a name was lost"); n != 0 {
		t.Fatalf("machine 1 lost names after a short cut:\n%s", w.logs[0])
	}

	// Longer than the TTL.
	cut := time.Now()
	if err := m1.Cut(ctx); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "kv gone from machine 2 while machine 1 is cut off", func() bool {
		names := w.names(1)
		_, ok := names["kv"]
		return names != nil && !ok
	})
	t.Logf("machine 1 cut off: its name gone from machine 2 after %v (TTL %v)", time.Since(cut).Round(time.Millisecond), leaseTTL)
	w.serve(1, "kv")
	id2 := w.machineID(1)
	if err := m1.Restore(ctx); err != nil {
		t.Fatal(err)
	}
	// The domain that held kv on machine 1 is told: its session ends,
	// and exporting again on the rejoin finds kv taken.
	if l := srv.Line(t); !strings.HasPrefix(l, "lost: ") {
		t.Fatalf("machine 1's server: %q, want its session lost", l)
	}
	if l := srv.Line(t); !strings.HasPrefix(l, "rejoined: ") || !strings.Contains(l, "kv") {
		t.Fatalf("machine 1's server: %q, want a rejoin whose export of kv failed", l)
	} else {
		t.Logf("machine 1's server: %s", l)
	}
	for i := range 4 {
		testkit.Eventually(t, fmt.Sprintf("kv of machine 2 seen from machine %d", i+1), seen(i, id2))
	}
	if w.logs[0].Count("a name was lost", `name=kv`) == 0 {
		t.Fatalf("machine 1 did not log the loss of kv:\n%s", w.logs[0])
	}
}

// TestAdmission: the control link between admitted machines comes up; a
// machine whose credential another root issued is refused, and the
// refusal is logged with its reason; one whose credential was revoked is
// let in by no machine, and stops once it learns of it.
func TestAdmission(t *testing.T) {
	w := newWorld(t, 4, 1)
	w.admit(0, w.root)
	w.admit(1, w.root)
	// Machine 3: admitted by a root of its own, for a cluster of the same
	// name.
	other := filepath.Join(t.TempDir(), "other")
	w.cli("cluster", "init", "--root", other, "--name", w.name)
	w.admit(2, other)
	// Machine 4: admitted, then revoked; machines 1 and 2 learn of it.
	w.admit(3, w.root)
	crl := filepath.Join(t.TempDir(), "revoked.crl")
	w.cli("cluster", "revoke", "--root", w.root, "--machine", "mach4", "--out", crl)
	for _, i := range []int{0, 1} {
		w.cli("cluster", "join", "--dir", w.dirs[i], "--revocations", crl)
	}
	for i := range 4 {
		w.start(i)
	}
	w.logs[0].Wait(t, "control link up", "peer=mach2")
	w.logs[1].Wait(t, "control link up", "peer=mach1")
	// TLS 1.3 checks the listener's credential first: each side refuses
	// the other on whichever side of the handshake it finds out.
	w.logs[0].Wait(t, "cluster link refused", `reason="unknown root"`, "remote="+w.net.Machines[2].Addr.String())
	w.logs[2].Wait(t, "control link to a machine failed", "name=mach1")
	// Machine 4 learns of its revocation through etcd (machines 1 and 2
	// publish their list) and stops; whether it dialled machine 1 first
	// is a race, refused either way (the link's own tests see to that).
	w.logs[3].Wait(t, "this machine's credential is revoked")
	for i, l := range w.logs {
		for _, line := range strings.Split(l.String(), "\n") {
			if strings.Contains(line, "refused") || strings.Contains(line, "link up") {
				t.Logf("machine %d: %s", i+1, line)
			}
		}
	}
	if n := w.logs[0].Count("control link up", "peer=mach3") + w.logs[0].Count("control link up", "peer=mach4") +
		w.logs[0].Count("control link accepted", "peer=mach3") + w.logs[0].Count("control link accepted", "peer=mach4"); n != 0 {
		t.Fatalf("machine 1 let an unadmitted or revoked machine in:\n%s", w.logs[0])
	}
}

// TestRevocationShared: a revocation list installed on one machine
// reaches the others through etcd. Machine 2 ends its link and its
// domains' connections with the revoked machine at once, and lists it as
// revoked; the revoked machine stops, its names go with its lease, and it
// refuses to start again.
func TestRevocationShared(t *testing.T) {
	w := newWorld(t, 3, 1)
	for i := range 3 {
		w.admit(i, w.root)
		w.start(i)
	}
	w.logs[1].Wait(t, "control link up", "peer=mach3")
	w.logs[0].Wait(t, "control link up", "peer=mach3")
	// A connection from machine 2 to a server of machine 3.
	argv := testkit.Command("ppserver", w.dirs[2], "pp3")
	srv := testkit.Start(t, w.net.Machines[2].Command(argv[0], argv[1:]...))
	if l := srv.Line(t); !strings.HasPrefix(l, "exported ") {
		t.Fatalf("machine 3's server: %q", l)
	}
	testkit.Eventually(t, "pp3 seen from machine 2", func() bool { _, ok := w.names(1)["pp3"]; return ok })
	argv = testkit.Command("ppclient", w.dirs[1], "pp3", "hold")
	cli := testkit.Start(t, w.net.Machines[1].Command(argv[0], argv[1:]...))
	if l := cli.Line(t); l != "connected via=net" {
		t.Fatalf("machine 2's client: %q", l)
	}
	id3 := w.machineID(2)

	// Machine 3's monitor is paused meanwhile, so that it cannot learn
	// of its revocation first and stop (its server's connection would
	// then end on its own).
	w.monitors[2].Cmd.Process.Signal(syscall.SIGSTOP)
	crl := filepath.Join(t.TempDir(), "revoked.crl")
	w.cli("cluster", "revoke", "--root", w.root, "--machine", "mach3", "--out", crl)
	w.cli("cluster", "join", "--dir", w.dirs[0], "--revocations", crl)
	w.logs[0].Wait(t, "revocation list published to etcd")
	w.logs[1].Wait(t, "revocation list updated from etcd")
	w.logs[1].Wait(t, "credential is no longer valid", "machine="+id3, "reason=revoked")
	if l := cli.Line(t); !strings.HasPrefix(l, "ended network lost") {
		t.Fatalf("machine 2's client to machine 3 after the revocation: %q, want network lost", l)
	}
	w.logs[1].Wait(t, "control link ended", "peer=mach3")
	// Machine 3 takes the list too, and stops with an error.
	w.monitors[2].Cmd.Process.Signal(syscall.SIGCONT)
	w.logs[2].Wait(t, "this machine's credential is revoked")
	select {
	case <-w.monitors[2].Done():
	case <-time.After(testkit.Limit):
		t.Fatal("the revoked machine's monitor did not stop")
	}
	w.logs[2].Wait(t, "revoked")
	// Its lease went with it: its name too.
	testkit.Eventually(t, "pp3 gone from machine 2", func() bool {
		names := w.names(1)
		_, ok := names["pp3"]
		return names != nil && !ok
	})
	// It refuses to start again, saying why.
	out, err := w.net.Machines[2].Command(w.bin, "monitor", "--dir", w.dirs[2], "--cluster", w.name,
		"--etcd", strings.Join(w.etcd.Endpoints(), ","), "--listen", w.net.Machines[2].Addr.String()+":7070").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "unusable credential") || !strings.Contains(string(out), "revoked") {
		t.Fatalf("the revoked machine's monitor started again: %v\n%s", err, out)
	}
	// The list is installed on machine 2 too, for its next start.
	var show struct {
		Revoked []string `json:"revoked"`
	}
	if err := json.Unmarshal([]byte(w.cli("cluster", "show", "--dir", w.dirs[1], "--json")), &show); err != nil {
		t.Fatal(err)
	}
	if len(show.Revoked) != 1 {
		t.Fatalf("machine 2 holds a list that revokes %v, want mach3's credential", show.Revoked)
	}
}

// TestCopiedKey: a monitor started on machine 2 with a copy of machine
// 1's key and credential finds machine 1's id held by a live monitor, and
// says so at once rather than waiting for a lease that never expires.
func TestCopiedKey(t *testing.T) {
	w := newWorld(t, 2, 1)
	w.admit(0, w.root)
	w.start(0)
	copied := testkit.ShortDir(t)
	for _, f := range []string{"machine.key", "machine.crt", "cluster-root.crt"} {
		b, err := os.ReadFile(filepath.Join(w.dirs[0], f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(copied, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	out, err := w.net.Machines[1].Command(w.bin, "monitor", "--dir", copied, "--cluster", w.name,
		"--etcd", strings.Join(w.etcd.Endpoints(), ","), "--listen", w.net.Machines[1].Addr.String()+":7070",
		"--lease-ttl", leaseTTL.String(), "--keep-alive", keepAlive.String()).CombinedOutput()
	took := time.Since(start)
	if err == nil || !strings.Contains(string(out), "a live monitor holds it") || !strings.Contains(string(out), w.net.Machines[0].Addr.String()+":7070") {
		t.Fatalf("a monitor with a copied key: %v\n%s", err, out)
	}
	if took > 10*time.Second {
		t.Fatalf("the copied key was refused after %v, want at once", took)
	}
	t.Logf("refused after %v: %s", took.Round(time.Millisecond), strings.TrimSpace(string(out)))
}
