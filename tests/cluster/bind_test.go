package cluster

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/interfaces/pingpong"
	spawnif "github.com/chanos/chanos/interfaces/spawn"
	"github.com/chanos/chanos/internal/testkit"
	"github.com/chanos/chanos/wire"
)

// echoServer answers echo with val+1 and counts the data messages it is
// sent, which it checks arrive numbered 1, 2, 3, ... on each connection.
type echoServer struct {
	pingpong.UnimplementedServer
	next atomic.Uint64
	bad  atomic.Int64
}

func (s *echoServer) Echo(_ context.Context, val uint64) (uint64, error) { return val + 1, nil }

func (s *echoServer) Data(_ context.Context, _ *pingpong.Client, m pingpong.Data) error {
	if m.Seq != s.next.Add(1) {
		s.bad.Add(1)
	}
	return nil
}

// ppServer joins the monitor in args[0] and exports pingpong under the
// name args[1] (args[2] "private" makes it private), printing
// "exported IREF"; it then serves echo, prints the peer of each
// connection ("peer machine=ID program=P") and, when a client closes,
// "data N bad B": the messages received and how many were out of order.
func ppServer(args []string) error {
	dir, name := args[0], args[1]
	ctx := context.Background()
	d, err := chanos.Join(ctx, chanos.WithDir(dir), chanos.WithProgram("pp-server"))
	if err != nil {
		return err
	}
	var opts []chanos.ExportOption
	if len(args) > 2 && args[2] == "private" {
		opts = append(opts, chanos.Private())
	}
	l, err := pingpong.Export(ctx, d, name, opts...)
	if err != nil {
		return err
	}
	fmt.Printf("exported %s\n", l.Ref())
	for {
		c, err := l.Accept(ctx)
		if err != nil {
			return err
		}
		go func() {
			p, _ := c.Raw().Peer()
			fmt.Printf("peer machine=%016x program=%s via=%s\n", p.Machine, p.Program, c.Raw().Interconnect())
			srv := &echoServer{}
			err := c.Serve(ctx, srv)
			fmt.Printf("data %d bad %d closed %v\n", srv.next.Load(), srv.bad.Load(), err == nil || errors.Is(err, chanos.ErrClosed))
		}()
	}
}

// ppClient joins the monitor in args[0], connects to the pingpong export
// named args[1] and, for args[2] (a duration), sends numbered data
// messages and makes echo rpcs, checking every answer. It prints
// "connected via=V", "ps via=V machine=M" from the monitor's ps, then
// "done rpcs=N data=N maxpause=D" or "failed: ERR". With a bind error it
// prints "bind: KIND: ERR".
func ppClient(args []string) error {
	dir, name := args[0], args[1]
	ctx := context.Background()
	d, err := chanos.Join(ctx, chanos.WithDir(dir), chanos.WithProgram("pp-client"))
	if err != nil {
		return err
	}
	defer d.Close()
	if args[2] == "hold" {
		return holdClient(ctx, d, name)
	}
	dur, err := time.ParseDuration(args[2])
	if err != nil {
		return err
	}
	var c *pingpong.Conn
	if f := strings.Split(name, "/"); len(f) == 3 {
		var ref wire.Iref
		ref.Machine, _ = strconv.ParseUint(f[0], 10, 64)
		ref.Export, _ = strconv.ParseUint(f[1], 10, 64)
		tok, _ := hex.DecodeString(f[2])
		copy(ref.Token[:], tok)
		c, err = pingpong.ConnectRef(ctx, d, ref)
	} else {
		c, err = pingpong.Connect(ctx, d, name)
	}
	if err != nil {
		kind := "other"
		switch {
		case errors.Is(err, chanos.ErrDenied):
			kind = "denied"
		case errors.Is(err, chanos.ErrNoRoute):
			kind = "no route"
		case errors.Is(err, chanos.ErrInterfaceMismatch):
			kind = "mismatch"
		}
		fmt.Printf("bind: %s: %v\n", kind, err)
		return nil
	}
	defer c.Close()
	fmt.Printf("connected via=%s\n", c.Raw().Interconnect())
	snap, err := d.Ps(ctx)
	if err != nil {
		return err
	}
	for _, dom := range snap.Domains {
		if dom.ID != d.ID() {
			continue
		}
		for _, ci := range dom.Connections {
			fmt.Printf("ps via=%s machine=%s role=%s\n", ci.Via, ci.Machine, ci.Role)
		}
	}
	var rpcs, data uint64
	var maxPause time.Duration
	end := time.Now().Add(dur)
	for time.Now().Before(end) {
		t0 := time.Now()
		data++
		if err := c.Send(ctx, &pingpong.Data{Seq: data, Payload: []byte("x")}); err != nil {
			fmt.Printf("failed: data %d: %v\n", data, err)
			return nil
		}
		r, err := c.Echo(ctx, rpcs)
		if err != nil || r != rpcs+1 {
			fmt.Printf("failed: echo %d: %d, %v\n", rpcs, r, err)
			return nil
		}
		rpcs++
		maxPause = max(maxPause, time.Since(t0))
	}
	fmt.Printf("done rpcs=%d data=%d maxpause=%v\n", rpcs, data, maxPause.Round(time.Millisecond))
	return nil
}

// holdClient connects to name, prints "connected via=V", then makes an
// echo rpc every 10 ms until one fails, and prints "ended KIND after D",
// KIND being "peer died", "network lost" or the error, D the time since
// the last rpc that succeeded.
func holdClient(ctx context.Context, d *chanos.Domain, name string) error {
	c, err := pingpong.Connect(ctx, d, name)
	if err != nil {
		return err
	}
	defer c.Close()
	fmt.Printf("connected via=%s\n", c.Raw().Interconnect())
	last := time.Now()
	for i := uint64(0); ; i++ {
		if _, err := c.Echo(ctx, i); err != nil {
			kind := err.Error()
			switch {
			case errors.Is(err, chanos.ErrPeerDied):
				kind = "peer died"
			case errors.Is(err, chanos.ErrNetworkLost):
				kind = "network lost"
			}
			fmt.Printf("ended %s after %v\n", kind, time.Since(last).Round(time.Millisecond))
			return nil
		}
		last = time.Now()
		time.Sleep(10 * time.Millisecond)
	}
}

// psJSON is what the test reads of 'chanos ps --json'.
type psJSON struct {
	Domains []struct {
		Program string `json:"program"`
		Conns   []struct {
			Via      string `json:"via"`
			Machine  string `json:"machine"`
			Role     string `json:"role"`
			AuthOnly bool   `json:"auth_only"`
		} `json:"connections"`
	} `json:"domains"`
}

// TestBindAcrossMachines: a client on machine 2 binds a pingpong export of
// machine 1 by name and by iref, over the net interconnect that its
// monitor picks by itself; the server learns the client's machine; ps on
// both machines shows the connection with the other machine; rpcs and
// numbered messages run across a cut of the link between the machines,
// losing, duplicating and reordering nothing. A private export refuses a
// bind by name from another machine, as on one machine.
func TestBindAcrossMachines(t *testing.T) {
	// etcd runs on machines 2 to 4, so that cutting machine 1 leaves it
	// its quorum.
	w := newWorld(t, 4, 3)
	for i := range 2 {
		w.admit(i, w.root)
		// A lease that outlives the cut below with room to spare: the
		// test is of the link, and under load machine 1's etcd client
		// may take most of the default TTL to reconnect after a 1 s cut
		// (then the machine leaves, and the connection rightly ends).
		w.startWith(i, "--lease-ttl", (3 * leaseTTL).String())
	}
	id1 := w.machineID(0)
	id2 := w.machineID(1)
	argv := testkit.Command("ppserver", w.dirs[0], "pp")
	srv := testkit.Start(t, w.net.Machines[0].Command(argv[0], argv[1:]...))
	exported := srv.Line(t)
	if !strings.HasPrefix(exported, "exported ") {
		t.Fatalf("server: %q", exported)
	}
	testkit.Eventually(t, "pp seen from machine 2", func() bool {
		r, ok := w.names(1)["pp"]
		return ok && r.MachineID == id1
	})
	w.awaitLink(1, 0)

	// By name, with a cut of the link in the middle.
	argv = testkit.Command("ppclient", w.dirs[1], "pp", "5s")
	cl := testkit.Start(t, w.net.Machines[1].Command(argv[0], argv[1:]...))
	if l := cl.Line(t); l != "connected via=net" {
		t.Fatalf("client: %q, want connected via=net", l)
	}
	if l := cl.Line(t); l != "ps via=net machine="+id1+" role=client" {
		t.Fatalf("client's ps: %q", l)
	}
	if l := srv.Line(t); l != fmt.Sprintf("peer machine=%s program=pp-client via=net", id2) {
		t.Fatalf("server: %q", l)
	}
	var ps psJSON
	out, err := w.net.Machines[0].Command(w.bin, "ps", "--json", "--dir", w.dirs[0]).Output()
	if err != nil {
		t.Fatalf("chanos ps on machine 1: %v", err)
	}
	if err := json.Unmarshal(out, &ps); err != nil {
		t.Fatalf("chanos ps --json: %v: %s", err, out)
	}
	found := false
	for _, d := range ps.Domains {
		for _, c := range d.Conns {
			found = found || d.Program == "pp-server" && c.Via == "net" && c.Machine == id2 && c.Role == "server"
		}
	}
	if !found {
		t.Errorf("chanos ps on machine 1 does not show the connection from machine 2: %s", out)
	}
	// ps --cluster on machine 2 shows machine 1's server too.
	var cps struct {
		Machines []struct {
			ID string  `json:"id"`
			Ps *psJSON `json:"ps"`
		} `json:"machines"`
	}
	out, err = w.net.Machines[1].Command(w.bin, "ps", "--cluster", "--json", "--dir", w.dirs[1]).Output()
	if err != nil {
		t.Fatalf("chanos ps --cluster on machine 2: %v", err)
	}
	if err := json.Unmarshal(out, &cps); err != nil {
		t.Fatalf("chanos ps --cluster --json: %v: %s", err, out)
	}
	seen := map[string]bool{}
	for _, m := range cps.Machines {
		for _, d := range m.Ps.Domains {
			seen[m.ID+"/"+d.Program] = true
		}
	}
	if !seen[id1+"/pp-server"] || !seen[id2+"/pp-client"] {
		t.Errorf("chanos ps --cluster on machine 2: %v, want pp-server on machine 1 and pp-client on machine 2", seen)
	}
	ctx := testkit.Context(t)
	time.Sleep(500 * time.Millisecond)
	m1 := w.net.Machines[0]
	if err := m1.Cut(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if err := m1.Restore(ctx); err != nil {
		t.Fatal(err)
	}
	done := cl.Line(t)
	var rpcs, data int
	var pause string
	if _, err := fmt.Sscanf(done, "done rpcs=%d data=%d maxpause=%s", &rpcs, &data, &pause); err != nil || rpcs == 0 {
		t.Fatalf("client: %q", done)
	}
	t.Logf("client across a 1 s cut of machine 1: %s", done)
	cl.Wait(t)
	if l := srv.Line(t); l != fmt.Sprintf("data %d bad 0 closed true", data) {
		t.Fatalf("server after the client closed: %q, want all %d messages in order", l, data)
	}

	// By iref: the same, without waiting.
	argv = testkit.Command("ppclient", w.dirs[1], strings.TrimPrefix(exported, "exported "), "100ms")
	cl = testkit.Start(t, w.net.Machines[1].Command(argv[0], argv[1:]...))
	if l := cl.Line(t); l != "connected via=net" {
		t.Fatalf("client by iref: %q, want connected via=net", l)
	}
	cl.Wait(t)

	// A private export refuses a bind by name from another machine with
	// the error a local bind gets.
	argv = testkit.Command("ppserver", w.dirs[0], "secret", "private")
	priv := testkit.Start(t, w.net.Machines[0].Command(argv[0], argv[1:]...))
	if l := priv.Line(t); !strings.HasPrefix(l, "exported ") {
		t.Fatalf("private server: %q", l)
	}
	argv = testkit.Command("ppclient", w.dirs[1], "secret", "100ms")
	cl = testkit.Start(t, w.net.Machines[1].Command(argv[0], argv[1:]...))
	if l := cl.Line(t); !strings.HasPrefix(l, "bind: denied: ") {
		t.Fatalf("bind by name of a private export on another machine: %q, want denied", l)
	} else {
		t.Logf("client: %s", l)
	}
	cl.Wait(t)
}

// TestPeerGoneAcrossMachines: when the server domain on machine 1 is
// killed with -9, the client on machine 2 learns through the two
// monitors that its peer died, well before the net link's grace period
// (10 s); when machine 1 leaves the cluster (its monitor killed, its lease
// expired), a client's connection to it ends with "network lost".
func TestPeerGoneAcrossMachines(t *testing.T) {
	w := newWorld(t, 3, 3)
	for i := range 2 {
		w.admit(i, w.root)
		w.start(i)
	}
	w.awaitLink(1, 0)
	serve := func(name string) *testkit.Child {
		argv := testkit.Command("ppserver", w.dirs[0], name)
		srv := testkit.Start(t, w.net.Machines[0].Command(argv[0], argv[1:]...))
		if l := srv.Line(t); !strings.HasPrefix(l, "exported ") {
			t.Fatalf("server: %q", l)
		}
		return srv
	}
	hold := func(name string) *testkit.Child {
		argv := testkit.Command("ppclient", w.dirs[1], name, "hold")
		cl := testkit.Start(t, w.net.Machines[1].Command(argv[0], argv[1:]...))
		if l := cl.Line(t); l != "connected via=net" {
			t.Fatalf("client: %q", l)
		}
		return cl
	}

	srv := serve("pp1")
	cl := hold("pp1")
	srv.Line(t) // its peer line
	time.Sleep(100 * time.Millisecond)
	killed := time.Now()
	srv.Kill()
	l := cl.Line(t)
	if !strings.HasPrefix(l, "ended peer died after ") {
		t.Fatalf("client after its server was killed: %q, want peer died", l)
	}
	t.Logf("client on machine 2, its server on machine 1 killed with -9: %s; %v after the kill (the link's grace is 10 s)", l, time.Since(killed).Round(time.Millisecond))
	cl.Wait(t)

	serve("pp2")
	cl = hold("pp2")
	killed = time.Now()
	w.monitors[0].Cmd.Process.Kill()
	l = cl.Line(t)
	if !strings.HasPrefix(l, "ended network lost after ") {
		t.Fatalf("client after the server's machine left the cluster: %q, want network lost", l)
	}
	t.Logf("client on machine 2, machine 1's monitor killed (lease %v): %s; %v after the kill", leaseTTL, l, time.Since(killed).Round(time.Millisecond))
	cl.Wait(t)
}

// TestAuthOnlyAcrossMachines: with --net-auth-only on both machines, a
// bind between them is authenticated only (ps says so), and rpcs and
// messages run; with it on one machine only, connections stay encrypted.
// The same holds for C domains on either side.
func TestAuthOnlyAcrossMachines(t *testing.T) {
	w := newWorld(t, 3, 3)
	for i := range 3 {
		w.admit(i, w.root)
	}
	w.startWith(0, "--net-auth-only")
	w.startWith(1, "--net-auth-only")
	w.start(2)
	for _, i := range []int{1, 2} {
		w.awaitLink(i, 0)
	}
	argv := testkit.Command("ppserver", w.dirs[0], "pp")
	srv := testkit.Start(t, w.net.Machines[0].Command(argv[0], argv[1:]...))
	if l := srv.Line(t); !strings.HasPrefix(l, "exported ") {
		t.Fatalf("server: %q", l)
	}
	for i, want := range map[int]bool{1: true, 2: false} {
		argv := testkit.Command("ppclient", w.dirs[i], "pp", "2s") // long enough for a ps on a loaded machine
		cl := testkit.Start(t, w.net.Machines[i].Command(argv[0], argv[1:]...))
		if l := cl.Line(t); l != "connected via=net" {
			t.Fatalf("client on machine %d: %q", i+1, l)
		}
		// While it runs, machine 1's ps shows the connection's mode.
		var ps psJSON
		out, err := w.net.Machines[0].Command(w.bin, "ps", "--json", "--dir", w.dirs[0]).Output()
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(out, &ps); err != nil {
			t.Fatal(err)
		}
		var modes []bool
		for _, d := range ps.Domains {
			for _, c := range d.Conns {
				if c.Machine == w.machineID(i) {
					modes = append(modes, c.AuthOnly)
				}
			}
		}
		if len(modes) == 0 || modes[len(modes)-1] != want {
			t.Fatalf("machine %d's connection: authenticated only %v, want %v (ps: %s)", i+1, modes, want, out)
		}
		cl.Line(t) // ps line
		if l := cl.Line(t); !strings.HasPrefix(l, "done ") {
			t.Fatalf("client on machine %d: %q", i+1, l)
		} else {
			t.Logf("client on machine %d (authenticated only %v): %s", i+1, want, l)
		}
		cl.Wait(t)
	}

	// C domains with libchanos_net's binder: a C client of the Go server,
	// from the authenticated-only machine 2 and the encrypting machine 3;
	// and a C server on machine 1, whose one listener takes a Go client of
	// each mode.
	peer := filepath.Join(testkit.CBuild(t, filepath.Join("tools", "chanos-net-peer")), "tools", "chanos-net-peer")
	for _, i := range []int{1, 2} {
		out, err := w.net.Machines[i].Command(peer, "bind", w.dirs[i], "pp", "200").CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "echo ok 200" {
			t.Fatalf("C client on machine %d: %v: %s", i+1, err, out)
		}
	}
	cs := testkit.Start(t, w.net.Machines[0].Command(peer, "export", w.dirs[0], "cpp"))
	if l := cs.Line(t); l != "exported cpp" {
		t.Fatalf("C server: %q", l)
	}
	for _, i := range []int{1, 2} {
		argv := testkit.Command("ppclient", w.dirs[i], "cpp", "200ms")
		cl := testkit.Start(t, w.net.Machines[i].Command(argv[0], argv[1:]...))
		if l := cl.Line(t); l != "connected via=net" {
			t.Fatalf("Go client on machine %d of the C server: %q", i+1, l)
		}
		cl.Line(t) // ps line
		if l := cl.Line(t); !strings.HasPrefix(l, "done ") {
			t.Fatalf("Go client on machine %d of the C server: %q", i+1, l)
		}
		cl.Wait(t)
	}
}

// TestCAcrossMachines: C domains, given libchanos_net's binder, on both
// sides of connections between machines. A C client on machine 2 binds a
// Go server's pingpong export on machine 1 through the monitors and makes
// echo calls with the generated C stubs over net; a C server on machine 1
// (chanos_serve_export) takes a Go client's rpcs and messages and a C
// client's calls from machine 2. Peer death reaches each side through the
// monitors: the Go client of the C server killed with -9, and the C
// client of a Go server killed with -9, both see "peer died", well within
// the link's 10 s grace.
func TestCAcrossMachines(t *testing.T) {
	peer := filepath.Join(testkit.CBuild(t, filepath.Join("tools", "chanos-net-peer")), "tools", "chanos-net-peer")
	w := newWorld(t, 3, 3)
	for i := range 2 {
		w.admit(i, w.root)
		w.start(i)
	}
	w.awaitLink(1, 0)
	argv := testkit.Command("ppserver", w.dirs[0], "pp")
	srv := testkit.Start(t, w.net.Machines[0].Command(argv[0], argv[1:]...))
	if l := srv.Line(t); !strings.HasPrefix(l, "exported ") {
		t.Fatalf("server: %q", l)
	}
	out, err := w.net.Machines[1].Command(peer, "bind", w.dirs[1], "pp", "500").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "echo ok 500" {
		t.Fatalf("C client on machine 2: %v: %s", err, out)
	}
	if l := srv.Line(t); !strings.HasPrefix(l, "peer machine="+w.machineID(1)+" program=net-peer-bind via=net") {
		t.Errorf("server: %q", l)
	}

	// A C server on machine 1: a Go client and a C client from machine 2.
	cs := testkit.Start(t, w.net.Machines[0].Command(peer, "export", w.dirs[0], "cpp"))
	if l := cs.Line(t); l != "exported cpp" {
		t.Fatalf("C server: %q", l)
	}
	argv = testkit.Command("ppclient", w.dirs[1], "cpp", "300ms")
	cl := testkit.Start(t, w.net.Machines[1].Command(argv[0], argv[1:]...))
	if l := cl.Line(t); l != "connected via=net" {
		t.Fatalf("a Go client of a C server on another machine: %q, want connected via=net", l)
	}
	var done string
	for {
		l := cl.Line(t)
		if strings.HasPrefix(l, "done ") || strings.HasPrefix(l, "failed") {
			done = l
			break
		}
	}
	if !strings.HasPrefix(done, "done rpcs=") {
		t.Fatalf("a Go client of a C server on another machine: %q", done)
	}
	t.Logf("Go client on machine 2 of a C server on machine 1: %s", done)
	cl.Wait(t)
	out, err = w.net.Machines[1].Command(peer, "bind", w.dirs[1], "cpp", "500").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "echo ok 500" {
		t.Fatalf("C client on machine 2 of the C server on machine 1: %v: %s", err, out)
	}

	// The C server killed with -9: its Go client learns it from the monitors.
	argv = testkit.Command("ppclient", w.dirs[1], "cpp", "hold")
	cl = testkit.Start(t, w.net.Machines[1].Command(argv[0], argv[1:]...))
	if l := cl.Line(t); l != "connected via=net" {
		t.Fatalf("client: %q", l)
	}
	time.Sleep(100 * time.Millisecond)
	killed := time.Now()
	cs.Kill()
	if l := cl.Line(t); !strings.HasPrefix(l, "ended peer died after ") {
		t.Fatalf("Go client after its C server was killed: %q, want peer died", l)
	} else {
		t.Logf("Go client, its C server on another machine killed with -9: %s; %v after the kill", l, time.Since(killed).Round(time.Millisecond))
	}
	cl.Wait(t)

	// A Go server killed with -9: its C client learns it from the monitors.
	cw := testkit.Start(t, w.net.Machines[1].Command(peer, "bind-wait", w.dirs[1], "pp"))
	if l := cw.Line(t); l != "bound" {
		t.Fatalf("C client: %q", l)
	}
	srv.Line(t) // its peer line
	killed = time.Now()
	srv.Kill()
	if l := cw.Line(t); !strings.HasPrefix(l, "ended -4204 ") {
		t.Fatalf("C client after its Go server was killed: %q, want peer died (-4204)", l)
	} else {
		t.Logf("C client, its Go server on another machine killed with -9: %s; %v after the kill", l, time.Since(killed).Round(time.Millisecond))
	}
	cw.Wait(t)

	// A C domain on machine 2 ships a program of its own to machine 1's
	// spawn service over net and runs it there.
	ship := filepath.Join(testkit.CBuild(t, filepath.Join("examples", "ship_test")), "examples", "ship_test")
	prog := paddedEcho(t, t.TempDir(), "cshipped")
	hash, size, err := spawnif.HashFile(prog)
	if err != nil {
		t.Fatal(err)
	}
	cmd := w.net.Machines[1].Command(ship, "-on", w.machineID(0), prog, "shipped from C")
	cmd.Env = append(cmd.Environ(), "CHANOS_DIR="+w.dirs[1])
	out, err = cmd.CombinedOutput()
	want := strings.Join([]string{"sha256 " + hash, "uploaded " + strconv.FormatInt(size, 10), "exit 0", "output shipped from C"}, "\n")
	if err != nil || strings.TrimSpace(string(out)) != want {
		t.Fatalf("C ship from machine 2 to machine 1: %v:\n%s\nwant\n%s", err, out, want)
	}
}
