package monitor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/interconnect"
	"github.com/chanos/chanos/interconnect/seqpacket"
	proto "github.com/chanos/chanos/internal/protocol/monitor"
	"github.com/chanos/chanos/internal/testkit"
	"github.com/chanos/chanos/wire"
)

// The attacks of issue 18 on the monitor's resources (docs/quotas.md),
// each at a small scale against a monitor in a child process of its own,
// so that its memory and descriptors are its alone: every refusal says
// "resource exhausted" and names its quota, the other domains are served
// within a second, and the monitor's memory and descriptors stay bounded.

var (
	chanosOnce sync.Once
	chanosBin  string
	chanosErr  error
)

// chanosCommand builds the chanos command once per test run, without the
// race detector whatever the tests run with (its memory is what the
// tests measure), and returns its path.
func chanosCommand(t *testing.T) string {
	t.Helper()
	chanosOnce.Do(func() {
		dir, err := os.MkdirTemp("", "monitor-bin")
		if err != nil {
			chanosErr = err
			return
		}
		chanosBin = filepath.Join(dir, "chanos")
		cmd := exec.Command("go", "build", "-o", chanosBin, "github.com/chanos/chanos/cmd/chanos")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			chanosErr = fmt.Errorf("go build cmd/chanos: %v\n%s", err, out)
		}
	})
	if chanosErr != nil {
		t.Fatal(chanosErr)
	}
	return chanosBin
}

// monitorFlags returns the flags of `chanos monitor` that set cfg's
// quotas (those it leaves zero keep their defaults).
func monitorFlags(cfg Config) []string {
	var args []string
	for _, f := range []struct {
		name string
		v    int
	}{
		{"max-domains", cfg.MaxDomains},
		{"max-ns-conns", cfg.MaxNSConns},
		{"max-total-ns-conns", cfg.MaxTotalNSConns},
		{"max-names", cfg.MaxNames},
		{"max-total-names", cfg.MaxTotalNames},
		{"max-exports", cfg.MaxExports},
		{"max-total-exports", cfg.MaxTotalExports},
		{"max-pending-binds", cfg.MaxPendingBinds},
		{"max-total-pending-binds", cfg.MaxTotalPendingBinds},
		{"max-total-watches", cfg.MaxTotalWatches},
		{"max-conn-records", cfg.MaxConnRecords},
		{"max-reply-queue", cfg.MaxReplyQueue},
		{"max-reply-memory", cfg.MaxReplyMemory},
		{"max-total-reply-memory", cfg.MaxTotalReplyMemory},
	} {
		if f.v > 0 {
			args = append(args, fmt.Sprintf("--%s=%d", f.name, f.v))
		}
	}
	for _, f := range []struct {
		name string
		v    time.Duration
	}{{"hello-timeout", cfg.HelloTimeout}, {"idle-timeout", cfg.IdleTimeout}, {"ping-timeout", cfg.PingTimeout}} {
		if f.v > 0 {
			args = append(args, fmt.Sprintf("--%s=%v", f.name, f.v))
		}
	}
	return args
}

// roleSleeper is a Go domain that joins the monitor in args[0], says
// "joined ID" and sleeps: its program does nothing more, as a legitimate
// domain between uses may.
const roleSleeper = "sleeper"

func helperSleeper(args []string) error {
	d, err := chanos.Join(context.Background(), chanos.WithDir(args[0]), chanos.WithProgram("sleeper"))
	if err != nil {
		return err
	}
	fmt.Println("joined", d.ID())
	time.Sleep(time.Hour)
	return nil
}

// monitorProc is a monitor in a child process.
type monitorProc struct {
	dir   string
	cfg   Config
	child *testkit.Child
	logs  *testkit.Output
}

// startMonitorProc runs `chanos monitor` with cfg's quotas in a new
// directory, until the test ends.
func startMonitorProc(t *testing.T, cfg Config) *monitorProc {
	t.Helper()
	dir := testkit.ShortDir(t)
	logs := &testkit.Output{}
	cmd := exec.Command(chanosCommand(t), append([]string{"monitor", "--dir", dir}, monitorFlags(cfg)...)...)
	cmd.Stderr = logs
	p := &monitorProc{dir: dir, cfg: cfg.WithDefaults(), child: testkit.Start(t, cmd), logs: logs}
	t.Cleanup(func() {
		p.child.Cmd.Process.Signal(syscall.SIGTERM)
		if err := p.child.Wait(t); err != nil {
			t.Errorf("the monitor: %v", err)
		}
		if t.Failed() {
			t.Logf("the monitor's log:\n%s", logs)
		}
	})
	testkit.Eventually(t, "the monitor's socket", func() bool {
		_, err := os.Stat(SocketPath(dir))
		return err == nil
	})
	return p
}

func (p *monitorProc) pid() int { return p.child.Cmd.Process.Pid }

// row adds the test's row to the hostile-peer suite's table
// (testkit.HostileRow), with the monitor as the victim: what it holds now,
// and when the test ends.
func (p *monitorProc) row(t *testing.T, attack string) {
	t.Helper()
	before := testkit.Measure(t, p.pid())
	var after testkit.Usage
	testkit.HostileRow(t, attack, "monitor", &before, &after)
	t.Cleanup(func() { after = testkit.Measure(t, p.pid()) }) // runs first

}

// status returns a field of the monitor's /proc/PID/status in bytes
// (VmRSS, VmHWM).
func (p *monitorProc) status(t *testing.T, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.pid()))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no %s in the monitor's status", field)
	return 0
}

// fds returns how many descriptors the monitor holds.
func (p *monitorProc) fds(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", p.pid()))
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func (p *monitorProc) dial(t *testing.T, program string) *Client {
	t.Helper()
	c, err := Dial(testkit.Context(t), p.dir, program)
	if err != nil {
		t.Fatalf("dial as %s: %v", program, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// rawSession says hello on a connection of its own and then sends what
// the test wants, reading nothing unless told.
func (p *monitorProc) raw(t *testing.T) *rawConn {
	t.Helper()
	r := rawDial(t, SocketPath(p.dir))
	r.hello()
	return r
}

// served checks that a domain is served promptly: it joins, exports,
// binds its own export and asks for ps, each within a second (with full,
// where every quota is full, it only joins and asks for ps).
func served(t *testing.T, dir, what string, full ...bool) {
	t.Helper()
	ctx := testkit.Context(t)
	var c *Client
	testkit.Within(t, time.Second, what+": join", func() (err error) {
		c, err = Dial(ctx, dir, "bystander")
		if err != nil {
			t.Fatalf("%s: join: %v", what, err)
		}
		return nil
	})
	defer c.Close()
	name := fmt.Sprintf("bystander.%d", c.DomainID())
	steps := []struct {
		name string
		fn   func() error
	}{
		{"export", func() error { _, err := c.Export(ctx, name, "kv", 1024); return err }},
		{"bind", func() error {
			r, err := c.Bind(ctx, name, "kv", false)
			if err == nil {
				closeCaps(r.Fds)
			}
			return err
		}},
		{"ps", func() error { _, err := c.Ps(ctx); return err }},
	}
	if len(full) > 0 && full[0] {
		steps = steps[2:]
	}
	for _, step := range steps {
		if err := testkit.Within(t, time.Second, what+": "+step.name, step.fn); err != nil {
			t.Fatalf("%s: %s: %v", what, step.name, err)
		}
	}
}

// wantExhausted checks that err is a limit error reply whose detail says
// "resource exhausted" and names the quota's flag.
func wantExhausted(t *testing.T, what string, err error, flag string) {
	t.Helper()
	var re *chanos.RemoteError
	if StatusOf(err) != proto.StatusLimit || !errors.As(err, &re) ||
		!strings.HasPrefix(re.Detail, "resource exhausted: ") || !strings.Contains(re.Detail, flag) {
		t.Fatalf("%s: %v; want a limit error reply \"resource exhausted: ...\" naming %s", what, err, flag)
	}
}

// B1: one domain opening nameservice connections by the thousand ran the
// monitor out of descriptors. Now each domain has MaxNSConns, the monitor
// MaxTotalNSConns, and the descriptors they cost stay bounded.
func TestAttackNameserviceConnections(t *testing.T) {
	p := startMonitorProc(t, Config{MaxNSConns: 4, MaxTotalNSConns: 6})
	p.row(t, "B1: nameservice connections from two domains until refused, then 200 more")
	ctx := testkit.Context(t)
	base := p.fds(t)
	var held []*NSClient
	defer func() {
		for _, ns := range held {
			ns.Close()
		}
	}()
	attack := func(c *Client, want int, flag string) {
		for i := 0; ; i++ {
			ns, err := c.Nameservice(ctx)
			if err != nil {
				if i != want {
					t.Fatalf("nameservice connection %d refused: %v; want %d before the refusal", i+1, err, want)
				}
				wantExhausted(t, "a nameservice connection beyond the quota", err, flag)
				return
			}
			held = append(held, ns)
		}
	}
	a1, a2 := p.dial(t, "attacker"), p.dial(t, "attacker")
	attack(a1, 4, "--max-ns-conns")
	attack(a2, 2, "--max-total-ns-conns")
	// Again and again: nothing more is held.
	for range 200 {
		if _, err := a1.Nameservice(ctx); err == nil {
			t.Fatal("a nameservice connection beyond the quota was bound")
		}
	}
	if n, most := p.fds(t), base+2+6*UMPFDs; n > most {
		t.Fatalf("the monitor holds %d descriptors, %d before the attack: want at most %d", n, base, most)
	}
	if n, most := p.fds(t), p.cfg.FDBound(); n > most {
		t.Fatalf("the monitor holds %d descriptors, more than its bound %d", n, most)
	}
	served(t, p.dir, "during the attack")
	// The refusals were logged at a limited rate.
	if n := p.logs.Count("request refused", "max-ns-conns"); n == 0 || n > 5 {
		t.Fatalf("%d lines of refusals, want 1 to 5", n)
	}
	// A connection closed is one to take again.
	held[0].Close()
	held = held[1:]
	testkit.Eventually(t, "a nameservice connection to be free", func() bool {
		ns, err := a2.Nameservice(ctx)
		if err != nil {
			return false
		}
		held = append(held, ns)
		return true
	})
}

// B2: ps calls whose replies are never read grew the monitor's memory by
// the size of a reply each. Now a ps reserves the worst case of its reply
// before it is built, against the domain's reply memory and the
// monitor's, and keeps the reply's bytes reserved until the domain has
// read it: the unread replies of a domain are one at most, and the
// others' requests are refused, "resource exhausted".
func TestAttackPsAmplification(t *testing.T) {
	cfg := Config{MaxTotalReplyMemory: 16 << 20}
	p := startMonitorProc(t, cfg)
	ctx := testkit.Context(t)
	// 10 domains with 256 long exports each: a ps of about 1 MB.
	for i := range 10 {
		c := p.dial(t, "exporter")
		for j := range 256 {
			name := fmt.Sprintf("d%d.%s.%d", i, strings.Repeat("x", 200), j)
			if _, err := c.Export(ctx, name, strings.Repeat("i", 100), 64); err != nil {
				t.Fatal(err)
			}
		}
	}
	before := p.status(t, "VmRSS")
	p.row(t, "B2: ps amplification: 8 sessions x 80 ps calls, replies never read (10 x 256 long exports)")
	// 8 sessions send 80 ps calls each and never read.
	var attackers []*rawConn
	for range 8 {
		r := p.raw(t)
		attackers = append(attackers, r)
		for k := range 80 {
			r.uc.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
			if _, _, err := r.uc.WriteMsgUnix(encode(t, &proto.PsCall{}, uint32(k+2)), nil, nil); err != nil {
				break // the monitor stopped reading this session: its replies are unread
			}
		}
	}
	time.Sleep(500 * time.Millisecond)
	served(t, p.dir, "during the attack")
	after := p.status(t, "VmRSS")
	// Each attacker holds one unread reply at most, in its socket; what
	// building them took is within the reply memory.
	if grew, most := after-before, int64(cfg.MaxTotalReplyMemory); grew > most {
		t.Fatalf("the monitor's memory grew from %d to %d bytes (by more than %d)", before, after, most)
	}
	if hwm, bound := p.status(t, "VmHWM"), cfg.MemoryBound(); hwm > bound {
		t.Fatalf("the monitor's peak memory %d exceeds its bound %d", hwm, bound)
	}
	// What the attackers got before they read anything: one ps document
	// at most (a second ps finds the first reply unread), and refusals
	// that say why.
	for i, r := range attackers {
		buf := make([]byte, proto.MaxFrameSize)
		r.uc.SetReadDeadline(time.Now().Add(10 * time.Second))
		docs := 0
		for range 2 {
			n, err := r.uc.Read(buf)
			if err != nil {
				t.Fatalf("attacker %d: read: %v", i, err)
			}
			if _, st, err := wire.ParseErrorReply(buf[:n]); err != nil {
				docs++
			} else if !strings.HasPrefix(st.Detail, "resource exhausted: ") {
				t.Fatalf("attacker %d: error reply %q, want \"resource exhausted: ...\"", i, st.Detail)
			}
		}
		if docs > 1 {
			t.Fatalf("attacker %d: two ps documents sent with the first unread", i)
		}
	}
	if n := p.logs.Count("request refused", "call=monitor.ps"); n == 0 || n > 10 {
		t.Fatalf("%d lines of refused ps calls, want 1 to 10", n)
	}
}

// B3: one connection set names by the hundred thousand. Now a domain
// holds at most MaxNames through the nameservice and the monitor
// MaxTotalNames; a set beyond is NSQuota, and removing or leaving gives
// the names back.
func TestAttackNames(t *testing.T) {
	p := startMonitorProc(t, Config{MaxNames: 100, MaxTotalNames: 150})
	p.row(t, "B3: names set by the thousand through one connection")
	ctx := testkit.Context(t)
	fill := func(c *Client, prefix string, want int) *NSClient {
		ns, err := c.Nameservice(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ns.Close() })
		for i := 0; ; i++ {
			code, err := ns.Set(ctx, fmt.Sprintf("%s.%d", prefix, i), iref(byte(i%250+1)))
			if err != nil {
				t.Fatal(err)
			}
			if code == NSQuota {
				if i != want {
					t.Fatalf("%s: NSQuota after %d names, want %d", prefix, i, want)
				}
				if !errors.Is(NSError(code), ErrNSQuota) {
					t.Fatalf("NSError(NSQuota) = %v", NSError(code))
				}
				return ns
			}
			if code != NSOK {
				t.Fatalf("set %d: code %d", i, code)
			}
		}
	}
	a1, a2 := p.dial(t, "attacker"), p.dial(t, "attacker")
	ns1 := fill(a1, "a1", 100)
	fill(a2, "a2", 50)
	for range 1000 {
		if code, err := ns1.Set(ctx, "one.more", iref(7)); err != nil || code != NSQuota {
			t.Fatalf("a set beyond the quota: %d, %v", code, err)
		}
	}
	served(t, p.dir, "during the attack")
	snap, err := a1.Ps(ctx)
	if err != nil || snap.Monitor.Limits.Names != 150 {
		t.Fatalf("ps: %+v, %v; want 150 names", snap.Monitor.Limits, err)
	}
	// A name removed is one to set again; a domain that leaves gives its
	// names back.
	if code, err := ns1.Remove(ctx, "a1.0"); err != nil || code != NSOK {
		t.Fatalf("remove: %d, %v", code, err)
	}
	if code, err := ns1.Set(ctx, "a1.again", iref(9)); err != nil || code != NSOK {
		t.Fatalf("set after a remove: %d, %v", code, err)
	}
	a1.Close()
	c := p.dial(t, "newcomer")
	testkit.Eventually(t, "the names of the departed domain to be given back", func() bool {
		snap, err := c.Ps(ctx)
		return err == nil && snap.Monitor.Limits.Names == 50
	})
	if n := p.logs.Count("request refused", "max-names"); n == 0 || n > 5 {
		t.Fatalf("%d lines of refused sets, want 1 to 5", n)
	}
}

// C: sessions that say hello and never read filled the monitor for good,
// and a domain refused saw its connection break. Now a join beyond the
// cap is told "monitor full: N of N sessions"; once the squatters have
// left the monitor's ping unread, each join takes the place of one of
// them; a legitimate domain whose program sleeps keeps answering, and its
// place.
func TestAttackIdleSessions(t *testing.T) {
	const cap = 8
	p := startMonitorProc(t, Config{MaxDomains: cap, IdleTimeout: 100 * time.Millisecond, PingTimeout: 500 * time.Millisecond})
	p.row(t, "C: sessions that say hello and idle, to the session cap")
	ctx := testkit.Context(t)
	sleeper := testkit.Start(t, testkit.Self(roleSleeper, p.dir))
	sleeperID, _ := strings.CutPrefix(sleeper.Line(t), "joined ")
	for range cap - 1 {
		p.raw(t) // hello, then nothing read ever
	}
	// Full: the join is refused, and says why.
	_, err := chanos.Join(ctx, chanos.WithDir(p.dir), chanos.WithProgram("late"))
	if !errors.Is(err, chanos.ErrMonitorFull) || !strings.Contains(err.Error(), fmt.Sprintf("monitor full: %d of %d sessions", cap, cap)) {
		t.Fatalf("join to a full monitor: %v; want ErrMonitorFull, \"monitor full: %d of %d sessions\"", err, cap, cap)
	}
	// The squatters leave their pings unread: once they count as
	// unresponsive, each join evicts one, within a second.
	var joined []*chanos.Domain
	defer func() {
		for _, d := range joined {
			d.Close()
		}
	}()
	testkit.Eventually(t, "a join to take the place of a squatter", func() bool {
		d, err := chanos.Join(ctx, chanos.WithDir(p.dir), chanos.WithProgram("newcomer"))
		if err != nil && !errors.Is(err, chanos.ErrMonitorFull) {
			t.Fatalf("join: %v", err)
		}
		if err == nil {
			joined = append(joined, d)
		}
		return err == nil
	})
	// The squatters joined a few ms apart, and each is found unresponsive
	// on its own ping's timeout: a join may come a moment before the next
	// one is, and is then refused; within a second it takes its place.
	for i := range cap - 2 {
		deadline := time.Now().Add(time.Second)
		for {
			d, err := chanos.Join(ctx, chanos.WithDir(p.dir), chanos.WithProgram("newcomer"))
			if err == nil {
				joined = append(joined, d)
				break
			}
			if !errors.Is(err, chanos.ErrMonitorFull) || time.Now().After(deadline) {
				t.Fatalf("join %d once the squatters are unresponsive: %v", i, err)
			}
			time.Sleep(time.Millisecond)
		}
	}
	// Now every place is held by a domain that reads: the sleeper (which
	// answers its pings though its program sleeps) and the newcomers.
	time.Sleep(p.cfg.IdleTimeout + p.cfg.PingTimeout + 200*time.Millisecond)
	if _, err := chanos.Join(ctx, chanos.WithDir(p.dir)); !errors.Is(err, chanos.ErrMonitorFull) {
		t.Fatalf("join to a monitor full of responsive domains: %v; want ErrMonitorFull", err)
	}
	snap, err := joined[0].Ps(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, d := range snap.Domains {
		if strconv.FormatUint(d.ID, 10) == sleeperID {
			found = true
			if d.Unresponsive {
				t.Fatal("the sleeping domain counts as unresponsive")
			}
		}
		if d.Program == "raw" {
			t.Fatalf("a squatter is still there: %+v", d)
		}
	}
	if !found {
		t.Fatalf("the sleeping domain %s is gone: %+v", sleeperID, snap.Domains)
	}
	if snap.Monitor.Limits.Unresponsive != 0 {
		t.Fatalf("%d unresponsive sessions", snap.Monitor.Limits.Unresponsive)
	}
	if n := p.logs.Count("session evicted"); n == 0 || n > cap-1 {
		t.Fatalf("%d lines of evictions, want 1 to %d", n, cap-1)
	}
}

// Every attack at once, at the default quotas: 1,024 sessions (the cap)
// fill every quota the monitor has (exports, nameservice connections,
// names, watches, binds waiting), squatters flood it with ps calls whose
// replies they never read, and more connections knock while it is full.
// The monitor's resident memory, at its peak, stays under the bound
// Config.MemoryBound computes from the quotas (docs/quotas.md), and so do
// its descriptors; once the squatters have left their pings unread, a
// newcomer is served within a second.
func TestMemoryBoundUnderAttack(t *testing.T) {
	if testing.Short() {
		t.Skip("fills every quota of a monitor: seconds of work")
	}
	cfg := Config{IdleTimeout: time.Second, PingTimeout: time.Second}
	p := startMonitorProc(t, cfg)
	p.row(t, "all of B and C at once: 1,024 sessions fill every quota at the defaults")
	c := p.cfg
	ctx := testkit.Context(t)
	long := strings.Repeat("x", 230)
	var clients []*Client
	dial := func(program string) *Client {
		cl := p.dial(t, program)
		clients = append(clients, cl)
		return cl
	}
	// Exports: every one the monitor allows, with long names.
	for d := range c.MaxTotalExports / c.MaxExports {
		cl := dial("exporter")
		for i := range c.MaxExports {
			if _, err := cl.Export(ctx, fmt.Sprintf("e%d.%d.%s", d, i, long), strings.Repeat("i", 100), 64); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Nameservice connections: every one; names: every one, long.
	var nss []*NSClient
	defer func() {
		for _, ns := range nss {
			ns.Close()
		}
	}()
	namers := c.MaxTotalNames / c.MaxNames // each holding its quota of names
	for range namers {
		cl := dial("namer")
		for range c.MaxTotalNSConns / namers {
			ns, err := cl.Nameservice(ctx)
			if err != nil {
				t.Fatal(err)
			}
			nss = append(nss, ns)
		}
	}
	per := c.MaxTotalNames / len(nss)
	errc := make(chan error, len(nss))
	for k, ns := range nss {
		go func() {
			for i := range per {
				if code, err := ns.Set(ctx, fmt.Sprintf("n%d.%d.%s", k, i, long), iref(1)); err != nil || code != NSOK {
					errc <- fmt.Errorf("set: %d, %v", code, err)
					return
				}
			}
			errc <- nil
		}()
	}
	for range nss {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	// Watches: every one (64 a connection).
	for _, ns := range nss[:c.MaxTotalWatches/64] {
		for range 64 {
			if err := ns.Watch(ctx, "w"); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Binds waiting for names that never come: every one.
	bctx, cancelBinds := context.WithCancel(ctx)
	defer cancelBinds()
	for range c.MaxTotalPendingBinds / c.MaxPendingBinds {
		cl := dial("binder")
		for i := range c.MaxPendingBinds {
			go cl.Bind(bctx, fmt.Sprintf("never.%d", i), "kv", true)
		}
	}
	// The rest of the sessions: squatters, each asking for ps twice and
	// reading nothing, ever.
	for range c.MaxDomains - p.sessions(t, clients[0]) {
		r := rawDial(t, SocketPath(p.dir))
		r.send(encode(t, &proto.HelloCall{Version: proto.ProtocolVersion, Program: "squatter"}, 1))
		r.send(encode(t, &proto.PsCall{}, 2))
		r.send(encode(t, &proto.PsCall{}, 3))
	}
	// More knock while the monitor is full.
	for range 200 {
		r := rawDial(t, SocketPath(p.dir))
		r.send(encode(t, &proto.HelloCall{Version: proto.ProtocolVersion, Program: "knocker"}, 1))
		r.uc.Close()
	}
	fds := p.fds(t)
	// The squatters leave their pings unread: a newcomer takes the place
	// of one, and is served.
	time.Sleep(c.IdleTimeout + c.PingTimeout + 500*time.Millisecond)
	served(t, p.dir, "with every quota full", true)
	snap, err := clients[0].Ps(ctx)
	if err != nil {
		t.Fatal(err)
	}
	l := snap.Monitor.Limits
	t.Logf("quotas in use: %d sessions, %d exports, %d nameservice connections, %d names, %d watches, %d waits, %d bytes of reply memory, %d unresponsive",
		l.Domains, l.Exports, l.NSConns, l.Names, l.Watches, l.PendingBinds, l.ReplyMemory, l.Unresponsive)
	rss, hwm, bound := p.status(t, "VmRSS"), p.status(t, "VmHWM"), c.MemoryBound()
	t.Logf("the monitor's memory: %d MiB resident, %d MiB at its peak; its bound: %d MiB; %d descriptors (bound %d)", rss>>20, hwm>>20, bound>>20, fds, c.FDBound())
	if hwm > bound {
		t.Fatalf("the monitor's peak resident memory, %d bytes, exceeds its bound, %d", hwm, bound)
	}
	if fds > c.FDBound() {
		t.Fatalf("the monitor holds %d descriptors, more than its bound %d", fds, c.FDBound())
	}
	if l.Names != c.MaxTotalNames || l.NSConns != c.MaxTotalNSConns || l.Watches != c.MaxTotalWatches || l.Exports != c.MaxTotalExports+1 {
		t.Fatalf("the quotas were not all filled: %+v", l)
	}
}

// sessions returns the monitor's sessions, as ps counts them.
func (p *monitorProc) sessions(t *testing.T, c *Client) int {
	t.Helper()
	snap, err := c.Ps(testkit.Context(t))
	if err != nil {
		t.Fatal(err)
	}
	return snap.Monitor.Limits.Domains
}

// A refused connection's hello is answered whether the monitor waits for
// it or takes only what is there already; a connection that sends
// nothing is closed, having cost one bounded read.
func TestRefuse(t *testing.T) {
	for _, wait := range []time.Duration{0, time.Second} {
		a, b, err := seqpacket.Pair()
		if err != nil {
			t.Fatal(err)
		}
		pc, err := seqpacket.FromFile(a, MaxCallFrame)
		a.Close()
		if err != nil {
			t.Fatal(err)
		}
		peer, err := seqpacket.FromFile(b, proto.MaxFrameSize)
		b.Close()
		if err != nil {
			t.Fatal(err)
		}
		if err := peer.Send(encode(t, &proto.HelloCall{Version: proto.ProtocolVersion, Program: "late"}, 7), nil); err != nil {
			t.Fatal(err)
		}
		released := false
		refuse(pc, "monitor full: 3 of 3 sessions", wait, func() { released = true })
		pc.Close()
		if released != (wait > 0) {
			t.Errorf("wait %v: done called: %v", wait, released)
		}
		frame, _, err := peer.Receive()
		if err != nil {
			t.Fatalf("wait %v: %v", wait, err)
		}
		var in interconnect.Incoming
		_, st, perr := wire.ParseErrorReply(frame)
		if in.SetFrame(frame, nil) != nil || in.Header.CallID != 7 || perr != nil || st.Detail != "monitor full: 3 of 3 sessions" {
			t.Fatalf("wait %v: %x: %+v, %v", wait, frame, st, perr)
		}
		if _, _, err := peer.Receive(); err == nil {
			t.Fatalf("wait %v: the refused connection is still open", wait)
		}
		peer.Close()
	}
}

// An evicted session leaves ps at once, while its goroutine may still be
// cleaning up: its place is the newcomer's already. Here the squatter's
// cleanup is held until the test ends.
func TestPsLeavesOutEvicted(t *testing.T) {
	release := make(chan struct{})
	tm := startMonitor(t, Config{MaxDomains: 2, IdleTimeout: 50 * time.Millisecond, PingTimeout: 100 * time.Millisecond}, func(m *Monitor) {
		m.testBeforeCleanup = func(s *session) {
			m.mu.Lock()
			program := s.program
			m.mu.Unlock()
			if program == "raw" {
				<-release
			}
		}
	})
	defer close(release)
	ctx := testkit.Context(t)
	tm.dial(t, "keeper")
	rawDial(t, SocketPath(tm.dir)).hello() // hello, then nothing read ever
	var newcomer *Client
	testkit.Eventually(t, "a newcomer to take the squatter's place", func() bool {
		c, err := Dial(ctx, tm.dir, "newcomer")
		if err != nil && !strings.Contains(err.Error(), "monitor full") {
			t.Fatalf("join: %v", err)
		}
		newcomer = c
		return err == nil
	})
	defer newcomer.Close()
	snap, err := newcomer.Ps(ctx)
	if err != nil {
		t.Fatal(err)
	}
	listed := 0
	for _, d := range snap.Domains {
		if d.Program == "raw" {
			t.Fatalf("the evicted squatter is listed: %+v", d)
		}
		if d.ID != SelfDomainID {
			listed++
		}
	}
	if listed != snap.Monitor.Limits.Domains || snap.Monitor.Limits.Unresponsive != 0 {
		t.Fatalf("%d domains listed, %d sessions counted, %d unresponsive; want 2, 2, 0", listed, snap.Monitor.Limits.Domains, snap.Monitor.Limits.Unresponsive)
	}
}
