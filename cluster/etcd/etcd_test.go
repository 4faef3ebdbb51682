package etcd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chanos/chanos/internal/testkit"
	"github.com/chanos/chanos/internal/testkit/etcdtest"
	"github.com/chanos/chanos/names"
	"github.com/chanos/chanos/names/storetest"
	"github.com/chanos/chanos/wire"
)

// Short leases keep the tests that wait for one to expire fast: 2 s is
// etcd's practical minimum. The other tests keep the defaults, which a
// loaded host cannot make a healthy machine lose.
const (
	testTTL       = 2 * time.Second
	testKeepAlive = 500 * time.Millisecond
)

func TestMain(m *testing.M) {
	testkit.Main(m, testkit.Roles{"machine": machineRole})
}

// machineRole is a machine in a child process: it joins the cluster,
// sets the names it is given, prints "ready" and runs until killed.
// Arguments: endpoints (comma-separated), cluster, machine id, TTL,
// keep-alive interval, names.
func machineRole(args []string) error {
	id, err := strconv.ParseUint(args[2], 10, 64)
	if err != nil {
		return err
	}
	ttl, err := time.ParseDuration(args[3])
	if err != nil {
		return err
	}
	keepAlive, err := time.ParseDuration(args[4])
	if err != nil {
		return err
	}
	ctx := context.Background()
	m, err := Open(ctx, Config{
		Endpoints: strings.Split(args[0], ","), Cluster: args[1], Machine: id,
		TTL: ttl, KeepAlive: keepAlive,
	})
	if err != nil {
		return err
	}
	for i, name := range args[5:] {
		if err := m.Names().Set(ctx, name, wire.Iref{Machine: id, Export: uint64(i + 1)}, 1); err != nil {
			return err
		}
	}
	fmt.Println("ready")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt)
	<-sig
	return m.Close()
}

var clusterSeq atomic.Int64

// freshCluster returns a cluster name no other test uses, so that tests
// can share one etcd.
func freshCluster() string { return fmt.Sprintf("t%d-%d", os.Getpid(), clusterSeq.Add(1)) }

// quiet is a logger that drops the warnings faults provoke on purpose.
func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// open opens a machine on the test's etcd; it is closed when the test
// ends.
func open(t *testing.T, endpoints []string, cluster string, machine uint64, adjust ...func(*Config)) *Machine {
	t.Helper()
	cfg := Config{
		Endpoints: endpoints, Cluster: cluster, Machine: machine,
		Logger: quiet(),
	}
	for _, fn := range adjust {
		fn(&cfg)
	}
	m, err := Open(testkit.Context(t), cfg)
	if err != nil {
		t.Fatalf("open machine %d: %v", machine, err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// short gives a machine the tests' short lease.
func short(c *Config) { c.TTL, c.KeepAlive = testTTL, testKeepAlive }

// machineStore is a machine as a storetest.Store: closing it leaves the
// cluster.
type machineStore struct {
	*Names
	m *Machine
}

func (s machineStore) Close() error { return s.m.Close() }

// TestStoreBehaviour runs the behaviour every names.Store shares (the
// table names.Memory runs too) against the etcd store.
func TestStoreBehaviour(t *testing.T) {
	t.Parallel() // each test has its own etcd
	ec := etcdtest.Start(t, etcdtest.Options{})
	storetest.Run(t, func(t *testing.T) storetest.Store {
		m := open(t, ec.Endpoints(), freshCluster(), 1)
		return machineStore{m.Names(), m}
	})
}

// TestNamesAcrossMachines: what one machine sets, removes and releases,
// another sees, with the machine the name lives on; and a machine may not
// remove another's name, even for an owner of the same number.
func TestNamesAcrossMachines(t *testing.T) {
	t.Parallel() // each test has its own etcd
	ec := etcdtest.Start(t, etcdtest.Options{})
	ctx := testkit.Context(t)
	cluster := freshCluster()
	a := open(t, ec.Endpoints(), cluster, 1)
	b := open(t, ec.Endpoints(), cluster, 2)
	w, err := b.Names().Watch(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	refA := wire.Iref{Machine: 1, Export: 5, Token: [16]byte{5}}
	waited := make(chan wire.Iref, 1)
	go func() {
		r, _ := b.Names().WaitFor(ctx, "svc")
		waited <- r
	}()
	if err := a.Names().Set(ctx, "svc", refA, 7); err != nil {
		t.Fatal(err)
	}
	if r := testkit.Await(t, "b's WaitFor", waited); r != refA {
		t.Fatalf("b waited %v, want %v", r, refA)
	}
	if ev := testkit.Await(t, "b's watch", w.C); ev != (names.Event{Name: "svc", Ref: refA}) {
		t.Fatalf("b's watch: %+v", ev)
	}
	ref, machine, owner, err := b.Names().Lookup(ctx, "svc")
	if err != nil || ref != refA || machine != 1 || owner != 7 {
		t.Fatalf("b's lookup = %v, machine %d, owner %d, %v", ref, machine, owner, err)
	}
	if n, err := b.Names().Count(ctx, "svc"); n != 1 || err != nil {
		t.Fatalf("b's count = %d, %v", n, err)
	}
	if err := b.Names().Remove(ctx, "svc", 7); !errors.Is(err, names.ErrNotOwner) {
		t.Fatalf("b removes a's name: %v, want ErrNotOwner", err)
	}
	if err := b.Names().Release(ctx, 7); err != nil {
		t.Fatal(err)
	}
	if r, err := a.Names().Get(ctx, "svc"); err != nil || r != refA {
		t.Fatalf("a's name after b released its own owner 7: %v, %v", r, err)
	}
	if err := a.Names().Release(ctx, 7); err != nil {
		t.Fatal(err)
	}
	if ev := testkit.Await(t, "b's watch", w.C); ev != (names.Event{Name: "svc", Ref: refA, Removed: true}) {
		t.Fatalf("b's watch: %+v", ev)
	}
	if _, err := b.Names().Get(ctx, "svc"); !errors.Is(err, names.ErrNotFound) {
		t.Fatalf("b's get after a's release: %v", err)
	}
}

// TestReleaseMany: Release removes more names than one transaction holds.
func TestReleaseMany(t *testing.T) {
	t.Parallel() // each test has its own etcd
	ec := etcdtest.Start(t, etcdtest.Options{})
	ctx := testkit.Context(t)
	m := open(t, ec.Endpoints(), freshCluster(), 1)
	const n = 3*releaseBatch + 5
	for i := 0; i < n; i++ {
		if err := m.Names().Set(ctx, fmt.Sprintf("many.%d", i), storetest.Ref(1), 3); err != nil {
			t.Fatal(err)
		}
	}
	m.Names().Set(ctx, "keep", storetest.Ref(2), 4)
	if c, _ := m.Names().Count(ctx, "many"); c != n {
		t.Fatalf("count = %d, want %d", c, n)
	}
	if err := m.Names().Release(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if c, err := m.Names().Count(ctx, "many"); c != 0 || err != nil {
		t.Fatalf("count after release = %d, %v", c, err)
	}
	if all, _, _ := m.Names().List(ctx, "", "", 10); fmt.Sprint(all) != "[keep]" {
		t.Fatalf("names left: %v", all)
	}
}

// TestRaceSet: two machines race to set one name, 1,000 times: exactly
// one wins each time, and both then see the winner's iref.
func TestRaceSet(t *testing.T) {
	t.Parallel() // each test has its own etcd
	ec := etcdtest.Start(t, etcdtest.Options{})
	ctx := testkit.Context(t)
	cluster := freshCluster()
	ms := []*Machine{open(t, ec.Endpoints(), cluster, 1), open(t, ec.Endpoints(), cluster, 2)}
	const rounds, workers = 1000, 16
	var wins [2]atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for wkr := 0; wkr < workers; wkr++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := wkr; r < rounds; r += workers {
				name := fmt.Sprintf("race.%d", r)
				var errs [2]error
				var inner sync.WaitGroup
				for i := range ms {
					inner.Add(1)
					go func() {
						defer inner.Done()
						errs[i] = ms[i].Names().Set(ctx, name, wire.Iref{Machine: uint64(i + 1), Export: uint64(r)}, 1)
					}()
				}
				inner.Wait()
				winner := -1
				for i, err := range errs {
					switch {
					case err == nil && winner < 0:
						winner = i
					case err == nil:
						errc <- fmt.Errorf("%s: both machines won", name)
						return
					case !errors.Is(err, names.ErrExists):
						errc <- fmt.Errorf("%s: machine %d: %v", name, i+1, err)
						return
					}
				}
				if winner < 0 {
					errc <- fmt.Errorf("%s: nobody won", name)
					return
				}
				wins[winner].Add(1)
				want := wire.Iref{Machine: uint64(winner + 1), Export: uint64(r)}
				for i := range ms {
					// The loser's cache caught up when it was refused.
					if got, err := ms[i].Names().Get(ctx, name); err != nil || got != want {
						errc <- fmt.Errorf("%s: machine %d reads %v, %v; want %v", name, i+1, got, err, want)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	t.Logf("wins: machine 1 %d, machine 2 %d", wins[0].Load(), wins[1].Load())
	if got := wins[0].Load() + wins[1].Load(); got != rounds && !t.Failed() {
		t.Fatalf("%d rounds won, want %d", got, rounds)
	}
}

// TestQuorumLoss: with three etcd members, losing one changes nothing;
// losing two makes operations fail promptly with names.ErrUnavailable;
// bringing them back brings naming back, in the same store.
func TestQuorumLoss(t *testing.T) {
	t.Parallel() // it mostly waits out leases and elections
	ec := etcdtest.Start(t, etcdtest.Options{Members: 3})
	ctx := testkit.Context(t)
	const opTimeout = time.Second
	m := open(t, ec.Endpoints(), freshCluster(), 1, func(c *Config) {
		c.OpTimeout = opTimeout
		c.TTL = 4 * time.Second
		c.KeepAlive = time.Second
	})
	s := m.Names()
	if err := s.Set(ctx, "before", storetest.Ref(1), 1); err != nil {
		t.Fatal(err)
	}

	ec.Kill(0)
	// If the member was the leader, the others elect a new one first (a
	// second or two), and a set meanwhile may time out; after that,
	// naming carries on.
	killed := time.Now()
	testkit.Eventually(t, "a set with one member of three down", func() bool {
		err := s.Set(ctx, "one-down.0", storetest.Ref(2), 1)
		if err != nil {
			t.Logf("a set right after the kill: %v", err)
		}
		return err == nil || errors.Is(err, names.ErrExists)
	})
	t.Logf("the first set after the kill succeeded %v after it", time.Since(killed).Round(time.Millisecond))
	// Reads come from the watched cache, which a loaded machine may still
	// be resyncing (its watch moved to another member) and keep-alive
	// that may still be catching up: they come back by themselves. A
	// renewal in flight at the kill may still time out and stop them for
	// a moment, until one sent after the kill is confirmed.
	testkit.Eventually(t, "reads with one member of three down", func() bool {
		_, err := s.Get(ctx, "before")
		return err == nil && m.Session().LastRenewed().After(killed)
	})
	t.Logf("reads available %v after the kill", time.Since(killed).Round(time.Millisecond))
	for i := 1; i < 20; i++ {
		name := fmt.Sprintf("one-down.%d", i)
		if err := s.Set(ctx, name, storetest.Ref(2), 1); err != nil {
			t.Fatalf("set %s with one member of three down: %v", name, err)
		}
		if _, err := s.Get(ctx, name); err != nil {
			t.Fatalf("get %s with one member of three down: %v", name, err)
		}
	}

	ec.Kill(1)
	start := time.Now()
	err := testkit.Within(t, 4*opTimeout, "a set without quorum", func() error {
		return s.Set(ctx, "no-quorum", storetest.Ref(3), 1)
	})
	if !errors.Is(err, names.ErrUnavailable) {
		t.Fatalf("set without quorum: %v, want ErrUnavailable", err)
	}
	t.Logf("set without quorum failed after %v: %v", time.Since(start).Round(time.Millisecond), err)
	testkit.Eventually(t, "reads to report etcd unavailable", func() bool {
		_, err := s.Get(ctx, "before")
		return errors.Is(err, names.ErrUnavailable)
	})
	t.Logf("reads unavailable after %v", time.Since(start).Round(time.Millisecond))
	for _, op := range []func() error{
		func() error { return s.Remove(ctx, "before", 1) },
		func() error { _, err := s.Count(ctx, "one-down"); return err },
		func() error { _, _, err := s.List(ctx, "", "", 10); return err },
		func() error { return s.Release(ctx, 1) },
	} {
		if err := testkit.Within(t, 4*opTimeout, "an operation without quorum", op); !errors.Is(err, names.ErrUnavailable) {
			t.Fatalf("operation without quorum: %v, want ErrUnavailable", err)
		}
	}

	ec.Restart(0)
	ec.Restart(1)
	ec.WaitHealthy()
	start = time.Now()
	testkit.Eventually(t, "naming to recover", func() bool {
		err := s.Set(ctx, "after", storetest.Ref(4), 1)
		if err != nil && !errors.Is(err, names.ErrExists) {
			return false
		}
		r, err := s.Get(ctx, "after")
		return err == nil && r == storetest.Ref(4)
	})
	t.Logf("naming recovered %v after the members were healthy", time.Since(start).Round(time.Millisecond))
	if _, err := s.Get(ctx, "one-down.3"); err != nil {
		t.Fatalf("a name set before the outage: %v", err)
	}
}

// TestDeadMachine: a machine's monitor is killed with SIGKILL; its names
// vanish from the other machines once its lease expires: with the tests'
// short lease, and with the defaults, which must detect a dead machine
// within 10 s. The time it took is logged; the figure belongs to the
// benchmarks, not to the pass condition.
func TestDeadMachine(t *testing.T) {
	t.Parallel() // it mostly waits out leases and elections
	ec := etcdtest.Start(t, etcdtest.Options{})
	for _, tc := range []struct {
		name           string
		ttl, keepAlive time.Duration
	}{
		{"short", testTTL, testKeepAlive},
		{"defaults", DefaultTTL, DefaultKeepAlive},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := testkit.Context(t)
			cluster := freshCluster()
			b := open(t, ec.Endpoints(), cluster, 2)
			w, err := b.Names().Watch(ctx, "dead.")
			if err != nil {
				t.Fatal(err)
			}
			child := testkit.Start(t, testkit.Self("machine", strings.Join(ec.Endpoints(), ","), cluster, "1",
				tc.ttl.String(), tc.keepAlive.String(), "dead.a", "dead.b"))
			child.Expect(t, "ready")
			for _, want := range []string{"dead.a", "dead.b"} {
				if ev := testkit.Await(t, "the child's names", w.C); ev.Name != want || ev.Removed || ev.Ref.Machine != 1 {
					t.Fatalf("event %+v, want the set of %s on machine 1", ev, want)
				}
			}
			child.Kill()
			killed := time.Now()
			for range 2 {
				if ev := testkit.Await(t, "the dead machine's names to go", w.C); !ev.Removed {
					t.Fatalf("event %+v, want a removal", ev)
				}
			}
			took := time.Since(killed)
			t.Logf("a dead machine's names vanished %v after its kill (TTL %v, keep-alive %v: bound %v)",
				took.Round(time.Millisecond), tc.ttl, tc.keepAlive, tc.ttl+tc.keepAlive)
			if n, err := b.Names().Count(ctx, "dead"); n != 0 || err != nil {
				t.Fatalf("count = %d, %v", n, err)
			}
		})
	}
}

// TestFencing: a machine frozen past its lease's TTL loses its names;
// another takes one; when the first comes back it is told, does not get
// the name back, and both machines read the new holder's iref.
func TestFencing(t *testing.T) {
	t.Parallel() // it mostly waits out leases and elections
	ec := etcdtest.Start(t, etcdtest.Options{})
	ctx := testkit.Context(t)
	cluster := freshCluster()
	type loss struct {
		owner names.Owner
		name  string
	}
	lost := make(chan loss, 16)
	a := open(t, ec.Endpoints(), cluster, 1, short, func(c *Config) {
		c.OnLost = func(o names.Owner, n string) { lost <- loss{o, n} }
	})
	b := open(t, ec.Endpoints(), cluster, 2)
	refA := wire.Iref{Machine: 1, Export: 1, Token: [16]byte{0xa}}
	refB := wire.Iref{Machine: 2, Export: 1, Token: [16]byte{0xb}}
	if err := a.Names().Set(ctx, "fenced", refA, 7); err != nil {
		t.Fatal(err)
	}
	if err := a.Names().Set(ctx, "fenced.other", refA, 8); err != nil {
		t.Fatal(err)
	}
	oldLease := a.Session().Lease()
	// b's view has both names before its watch starts, so the watch shows
	// their removal.
	for _, name := range []string{"fenced", "fenced.other"} {
		if _, err := b.Names().WaitFor(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	w, err := b.Names().Watch(ctx, "fenced")
	if err != nil {
		t.Fatal(err)
	}

	a.Session().setPaused(true) // a freezes: no more renewals
	paused := time.Now()
	for range 2 {
		if ev := testkit.Await(t, "a's names to expire", w.C); !ev.Removed {
			t.Fatalf("event %+v, want a removal", ev)
		}
	}
	t.Logf("a's names expired %v after its renewals stopped", time.Since(paused).Round(time.Millisecond))
	if err := b.Names().Set(ctx, "fenced", refB, 9); err != nil {
		t.Fatalf("b takes the name: %v", err)
	}
	a.Session().setPaused(false)

	got := map[loss]bool{}
	for range 2 {
		got[testkit.Await(t, "a's OnLost", lost)] = true
	}
	if !got[loss{7, "fenced"}] || !got[loss{8, "fenced.other"}] {
		t.Fatalf("OnLost told %v", got)
	}
	testkit.Eventually(t, "a fresh lease for a", func() bool {
		l := a.Session().Lease()
		return l != 0 && l != oldLease && a.Session().Healthy()
	})
	for _, m := range []*Machine{a, b} {
		testkit.Eventually(t, "b's iref read everywhere", func() bool {
			r, err := m.Names().Get(ctx, "fenced")
			return err == nil && r == refB
		})
	}
	if err := a.Names().Remove(ctx, "fenced", 7); !errors.Is(err, names.ErrNotOwner) {
		t.Fatalf("a removes the name it lost: %v, want ErrNotOwner", err)
	}
	if err := a.Names().Release(ctx, 7); err != nil {
		t.Fatal(err)
	}
	if r, err := b.Names().Get(ctx, "fenced"); err != nil || r != refB {
		t.Fatalf("b's name after a's release = %v, %v", r, err)
	}
	if _, err := b.Names().Get(ctx, "fenced.other"); !errors.Is(err, names.ErrNotFound) {
		t.Fatalf("a's other lost name: %v, want ErrNotFound", err)
	}
	// a works again, under its fresh lease; and it was told of each loss
	// once.
	if err := a.Names().Set(ctx, "fenced.again", refA, 7); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-lost:
		t.Fatalf("OnLost told again: %+v", l)
	default:
	}
}

// TestOpenUnavailable: a machine that cannot reach etcd fails to open with
// names.ErrUnavailable, promptly.
func TestOpenUnavailable(t *testing.T) {
	t.Parallel() // it mostly waits out leases and elections
	etcdtest.Need(t)
	ctx := testkit.Context(t)
	err := testkit.Within(t, 10*time.Second, "open without etcd", func() error {
		_, err := Open(ctx, Config{
			Endpoints: []string{"http://127.0.0.1:1"}, Cluster: "c", Machine: 1,
			DialTimeout: time.Second, OpTimeout: time.Second, Logger: quiet(),
		})
		return err
	})
	if !errors.Is(err, names.ErrUnavailable) {
		t.Fatalf("open = %v, want ErrUnavailable", err)
	}
}

// TestConfig: bad configurations are refused before any connection.
func TestConfig(t *testing.T) {
	ctx := testkit.Context(t)
	for _, cfg := range []Config{
		{Cluster: "c", Machine: 1},
		{Endpoints: []string{"x"}, Cluster: "a/b", Machine: 1},
		{Endpoints: []string{"x"}, Cluster: "c"},
		{Endpoints: []string{"x"}, Cluster: "c", Machine: 1, TTL: 1500 * time.Millisecond},
		{Endpoints: []string{"x"}, Cluster: "c", Machine: 1, TTL: 4 * time.Second, KeepAlive: 3 * time.Second},
	} {
		if _, err := Open(ctx, cfg); err == nil || errors.Is(err, names.ErrUnavailable) {
			t.Errorf("Open(%+v) = %v, want a configuration error", cfg, err)
		}
	}
}

// TestRestartedMonitor: a monitor restarted under the same machine id
// numbers its owners afresh, so it may not remove the names its previous
// run left (they expire with that run's lease), even for an owner of the
// same number.
func TestRestartedMonitor(t *testing.T) {
	t.Parallel() // each test has its own etcd
	ec := etcdtest.Start(t, etcdtest.Options{})
	ctx := testkit.Context(t)
	cluster := freshCluster()
	before := open(t, ec.Endpoints(), cluster, 1)
	if err := before.Names().Set(ctx, "old", storetest.Ref(1), 1); err != nil {
		t.Fatal(err)
	}
	after := open(t, ec.Endpoints(), cluster, 1)
	if err := after.Names().Remove(ctx, "old", 1); !errors.Is(err, names.ErrNotOwner) {
		t.Fatalf("remove by the restarted monitor: %v, want ErrNotOwner", err)
	}
	if err := after.Names().Release(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if r, err := after.Names().Get(ctx, "old"); err != nil || r != storetest.Ref(1) {
		t.Fatalf("the old name after the new run's release = %v, %v", r, err)
	}
}

// TestTLS: against an etcd that serves TLS and requires client
// certificates, a machine with the cluster's CA and a client certificate
// names as usual; one without a certificate is refused, promptly.
func TestTLS(t *testing.T) {
	t.Parallel() // each test has its own etcd
	ec := etcdtest.Start(t, etcdtest.Options{TLS: true})
	ctx := testkit.Context(t)
	cluster := freshCluster()
	m := open(t, ec.Endpoints(), cluster, 1, func(c *Config) { c.TLS = ec.ClientTLS() })
	if err := m.Names().Set(ctx, "secure", storetest.Ref(1), 1); err != nil {
		t.Fatal(err)
	}
	if r, err := m.Names().Get(ctx, "secure"); err != nil || r != storetest.Ref(1) {
		t.Fatalf("get = %v, %v", r, err)
	}
	noCert := ec.ClientTLS()
	noCert.Certificates = nil
	err := testkit.Within(t, 10*time.Second, "open without a client certificate", func() error {
		_, err := Open(ctx, Config{
			Endpoints: ec.Endpoints(), TLS: noCert, Cluster: cluster, Machine: 2,
			DialTimeout: time.Second, OpTimeout: time.Second, Logger: quiet(),
		})
		return err
	})
	if !errors.Is(err, names.ErrUnavailable) {
		t.Fatalf("open without a client certificate = %v, want ErrUnavailable", err)
	}
	t.Logf("refused: %v", err)
}
