package bench

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/cluster"
	"github.com/chanos/chanos/cluster/etcd"
	"github.com/chanos/chanos/interfaces/nameservice"
	"github.com/chanos/chanos/monitor"
	"github.com/chanos/chanos/wire"
)

// NamesConfig configures the names suite.
type NamesConfig struct {
	Quick    bool
	Repeat   int
	Progress io.Writer
	// Chanos is the chanos executable, which the detect-dead case runs as
	// a machine's monitor and kills; "" leaves that case out.
	Chanos string
}

func (cfg *NamesConfig) progress(format string, args ...any) {
	if cfg.Progress != nil {
		fmt.Fprintf(cfg.Progress, format+"\n", args...)
	}
}

// ErrNoEtcd: the names suite needs etcd's server, which is not installed.
var ErrNoEtcd = errors.New("etcd is not installed (scripts/install-deps.sh installs it)")

// namesWorld is what the names suite runs against: a one-member etcd on
// loopback, two machines of a cluster on it (this one, with a monitor in
// cluster mode and a domain joined to it, and a remote one that sets
// names), and a lone monitor with its embedded store, with a domain too.
type namesWorld struct {
	tmp            string
	etcd           *exec.Cmd
	local, remote  *etcd.Machine
	stopCluster    func()
	stopEmbedded   func()
	d, de          *chanos.Domain
	ns, nse        *nameservice.Conn
	raw, rawRemote *etcd.Baseline
	endpoint       string
	root           *cluster.Root
}

func newNamesWorld(ctx context.Context) (w *namesWorld, err error) {
	bin, lerr := exec.LookPath("etcd")
	if lerr != nil {
		return nil, ErrNoEtcd
	}
	w = &namesWorld{}
	defer func() {
		if err != nil {
			w.close()
		}
	}()
	if w.tmp, err = os.MkdirTemp("", "chanos-bench-names-"); err != nil {
		return nil, err
	}
	client, peer, err := freePorts()
	if err != nil {
		return nil, err
	}
	cu, pu := fmt.Sprintf("http://127.0.0.1:%d", client), fmt.Sprintf("http://127.0.0.1:%d", peer)
	w.etcd = exec.Command(bin, "--name", "bench", "--data-dir", filepath.Join(w.tmp, "etcd"),
		"--listen-client-urls", cu, "--advertise-client-urls", cu, "--listen-peer-urls", pu,
		"--initial-advertise-peer-urls", pu, "--initial-cluster", "bench="+pu)
	if err := w.etcd.Start(); err != nil {
		return nil, fmt.Errorf("start etcd: %w", err)
	}
	if err := waitHealthy(ctx, cu); err != nil {
		return nil, err
	}
	w.endpoint = cu
	quiet := slog.New(slog.DiscardHandler)
	open := func(id uint64) (*etcd.Machine, error) {
		return etcd.Open(ctx, etcd.Config{Endpoints: []string{cu}, Cluster: "bench", Machine: id, Logger: quiet})
	}
	if w.local, err = open(1); err != nil {
		return nil, err
	}
	if w.remote, err = open(2); err != nil {
		return nil, err
	}
	w.raw, w.rawRemote = w.local.Baseline(), w.remote.Baseline()
	dir := filepath.Join(w.tmp, "cluster")
	w.stopCluster, err = startMonitor(ctx, monitor.Config{Dir: dir, MachineID: 1, Store: w.local.Names(), SharedStore: true, Logger: quiet})
	if err != nil {
		return nil, err
	}
	if w.d, w.ns, err = joinNS(ctx, dir); err != nil {
		return nil, err
	}
	edir := filepath.Join(w.tmp, "embedded")
	if w.stopEmbedded, err = startMonitor(ctx, monitor.Config{Dir: edir, Logger: quiet}); err != nil {
		return nil, err
	}
	if w.de, w.nse, err = joinNS(ctx, edir); err != nil {
		return nil, err
	}
	return w, nil
}

func startMonitor(ctx context.Context, cfg monitor.Config) (stop func(), err error) {
	m, err := monitor.New(cfg)
	if err != nil {
		return nil, err
	}
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { m.Serve(mctx); close(done) }()
	return func() { cancel(); <-done }, nil
}

func joinNS(ctx context.Context, dir string) (*chanos.Domain, *nameservice.Conn, error) {
	d, err := chanos.Join(ctx, chanos.WithDir(dir), chanos.WithProgram("chanos bench names"))
	if err != nil {
		return nil, nil, err
	}
	ns, err := nameservice.Connect(ctx, d, nameservice.ServiceName)
	if err != nil {
		d.Close()
		return nil, nil, err
	}
	return d, ns, nil
}

// freePorts returns two TCP ports free on loopback now.
func freePorts() (int, int, error) {
	var ports [2]int
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, 0, err
		}
		defer l.Close()
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports[0], ports[1], nil
}

func waitHealthy(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c := &http.Client{Timeout: time.Second}
	for {
		if resp, err := c.Get(url + "/health"); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.Contains(string(b), `"health":"true"`) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("etcd at %s not healthy: %w", url, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (w *namesWorld) close() {
	for _, c := range []io.Closer{w.ns, w.nse} {
		if c != nil {
			c.Close()
		}
	}
	for _, d := range []*chanos.Domain{w.d, w.de} {
		if d != nil {
			d.Close()
		}
	}
	for _, stop := range []func(){w.stopCluster, w.stopEmbedded} {
		if stop != nil {
			stop()
		}
	}
	for _, m := range []*etcd.Machine{w.local, w.remote} {
		if m != nil {
			m.Close()
		}
	}
	if w.etcd != nil && w.etcd.Process != nil {
		w.etcd.Process.Kill()
		w.etcd.Wait()
	}
	if w.tmp != "" {
		os.RemoveAll(w.tmp)
	}
}

// RunNames runs the names suite (issue 20's figures): a domain's get,
// set and wait_for through a monitor in cluster mode, beside a raw etcd
// client's Get, Txn and watch on the same etcd (a one-member cluster on
// loopback), and get through a lone monitor's embedded store. Without
// etcd it fails with ErrNoEtcd.
func RunNames(ctx context.Context, cfg NamesConfig, emit func(Result) error) error {
	iters, warmup, waits := 2000, 200, 200
	if cfg.Quick {
		iters, warmup, waits = 300, 30, 30
	}
	// Sets count against a domain's names quota (1024 by default).
	setIters, setWarmup := min(iters, 500), min(warmup, 50)
	repeat := max(cfg.Repeat, 1)
	w, err := newNamesWorld(ctx)
	if err != nil {
		return fmt.Errorf("names: %w", err)
	}
	defer w.close()
	ref := wire.Iref{Machine: 2, Export: 9}
	// The remote machine's owners: one holds bench.get, the other the
	// names the wait-for cases set, released after each run.
	const getOwner, waitOwner = 1, 2
	if err := w.remote.Names().Set(ctx, "bench.get", ref, getOwner); err != nil {
		return fmt.Errorf("names: %w", err)
	}
	if err := w.raw.Put(ctx, "bench.get", "x"); err != nil {
		return fmt.Errorf("names: %w", err)
	}
	if code, err := w.nse.Set(ctx, "bench.get", ref); err != nil || code != 0 {
		return fmt.Errorf("names: embedded set: %d %v", code, err)
	}
	// The remote set is in this machine's cache once wait_for sees it.
	if _, _, err := w.ns.WaitFor(ctx, "bench.get"); err != nil {
		return fmt.Errorf("names: %w", err)
	}
	nsGet := func(ns *nameservice.Conn) func(int) error {
		return func(int) error {
			_, code, err := ns.Get(ctx, "bench.get")
			if err == nil && code != 0 {
				err = fmt.Errorf("get: code %d", code)
			}
			return err
		}
	}
	cases := []struct {
		kase, transport string
		run             func(round int) (Result, error)
	}{
		{"get", "chanos", func(int) (Result, error) { return timeRTT(warmup, iters, 0, nsGet(w.ns)) }},
		{"get", "etcd", func(int) (Result, error) {
			return timeRTT(warmup, iters, 0, func(int) error { return w.raw.Get(ctx, "bench.get") })
		}},
		{"get", "embedded", func(int) (Result, error) { return timeRTT(warmup, iters, 0, nsGet(w.nse)) }},
		{"set", "chanos", func(round int) (Result, error) {
			names := make([]string, 0, setIters+setWarmup)
			defer func() {
				for _, n := range names {
					w.ns.Remove(ctx, n)
				}
			}()
			return timeOnce(setWarmup, setIters, func(i int) error {
				n := fmt.Sprintf("bench.set.%d.%d", round, i)
				names = append(names, n)
				code, err := w.ns.Set(ctx, n, ref)
				if err == nil && code != 0 {
					err = fmt.Errorf("set: code %d", code)
				}
				return err
			})
		}},
		{"set", "etcd", func(round int) (Result, error) {
			defer w.raw.DeleteAll(ctx)
			return timeOnce(setWarmup, setIters, func(i int) error {
				return w.raw.Create(ctx, fmt.Sprintf("bench.set.%d.%d", round, i), "x")
			})
		}},
		{"wait-for", "chanos", func(round int) (Result, error) {
			return timeWakeups(waits, func(i int) (func() error, func() (int64, error), error) {
				n := fmt.Sprintf("bench.wait.%d.%d", round, i)
				done := make(chan woken, 1)
				go func() {
					_, code, err := w.ns.WaitFor(ctx, n)
					at := nanotime()
					if err == nil && code != 0 {
						err = fmt.Errorf("wait_for: code %d", code)
					}
					done <- woken{at, err}
				}()
				// wait_for's registration has no answer of its own: give the
				// call time to reach the monitor.
				time.Sleep(waitForSettle)
				set := func() error { return w.remote.Names().Set(ctx, n, ref, waitOwner) }
				wait := func() (int64, error) { r := <-done; return r.at, r.err }
				return set, wait, nil
			}, func() { w.remote.Names().Release(ctx, waitOwner) })
		}},
		{"wait-for", "etcd-set", func(round int) (Result, error) {
			// The same remote set as the chanos case, the store's, seen by
			// a raw watch of its key: the two differ in the wake-up path
			// alone.
			return timeWakeups(waits, rawWake(ctx, fmt.Sprintf("bench.waitraw.%d", round), w.raw.WatchName,
				func(n string) error { return w.remote.Names().Set(ctx, n, ref, waitOwner) }),
				func() { w.remote.Names().Release(ctx, waitOwner) })
		}},
		{"wait-for", "etcd", func(round int) (Result, error) {
			// A raw transaction, without the store's lease, seen by a raw
			// watch: both the set and the wake-up are etcd's alone.
			return timeWakeups(waits, rawWake(ctx, fmt.Sprintf("bench.wait.%d", round), w.raw.Watch,
				func(n string) error { return w.rawRemote.Create(ctx, n, "x") }),
				func() { w.raw.DeleteAll(ctx) })
		}},
	}
	runs := make([][]Result, len(cases))
	for round := range repeat {
		for i, c := range cases {
			cfg.progress("names: run %d/%d: %s/%s", round+1, repeat, c.kase, c.transport)
			r, err := c.run(round)
			if err != nil {
				return fmt.Errorf("names case %s/%s: %w", c.kase, c.transport, err)
			}
			r.Suite, r.Case, r.Transport, r.Peers = "names", c.kase, c.transport, "go"
			r.Runs = repeat
			runs[i] = append(runs[i], r)
		}
	}
	for i := range cases {
		if err := emit(Median(runs[i])); err != nil {
			return err
		}
	}
	if cfg.Chanos == "" {
		return nil
	}
	// The default lease, as a user runs it; 2 s in a quick run.
	ttl := etcd.DefaultTTL
	if cfg.Quick {
		ttl = 2 * time.Second
	}
	samples := make([]int64, 0, repeat)
	for round := range repeat {
		cfg.progress("names: run %d/%d: detect-dead/chanos (lease %v)", round+1, repeat, ttl)
		d, err := w.detectDead(ctx, cfg.Chanos, ttl, round)
		if err != nil {
			return fmt.Errorf("names case detect-dead: %w", err)
		}
		samples = append(samples, d.Nanoseconds())
	}
	r := rttResult(samples, 0, nil)
	r.RTTMean = nil
	r.Suite, r.Case, r.Transport, r.Peers, r.Runs = "names", "detect-dead", "chanos", "go", repeat
	return emit(r)
}

// detectDead runs a machine's monitor (the chanos executable, in cluster
// mode, with a lease of ttl), waits until this machine's registry lists
// it, kills it with SIGKILL and returns how long its record took to
// vanish from the registry: the time to detect a dead machine.
func (w *namesWorld) detectDead(ctx context.Context, chanosBin string, ttl time.Duration, round int) (time.Duration, error) {
	dir := filepath.Join(w.tmp, fmt.Sprintf("dead%d", round))
	if err := w.admit(dir); err != nil {
		return 0, err
	}
	cmd := exec.Command(chanosBin, "monitor", "--dir", dir, "--cluster", "bench", "--etcd", w.endpoint,
		"--lease-ttl", ttl.String(), "--log-level", "error")
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	reg := w.local.Registry()
	listed := func() (uint64, bool) {
		for _, m := range reg.Machines() {
			if m.ID != 1 && m.ID != 2 {
				return m.ID, true
			}
		}
		return 0, false
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second+2*ttl)
	defer cancel()
	for {
		changed := reg.Changed()
		if _, ok := listed(); ok {
			break
		}
		select {
		case <-changed:
		case <-wctx.Done():
			return 0, fmt.Errorf("the machine did not register: %w", wctx.Err())
		}
	}
	cmd.Process.Kill()
	t0 := time.Now()
	for {
		changed := reg.Changed()
		if _, ok := listed(); !ok {
			return time.Since(t0), nil
		}
		select {
		case <-changed:
		case <-wctx.Done():
			return 0, fmt.Errorf("the dead machine's record did not vanish: %w", wctx.Err())
		}
	}
}

// admit gives dir a machine key and a credential of the bench's own
// cluster root, made on first use.
func (w *namesWorld) admit(dir string) error {
	if w.root == nil {
		root, err := cluster.InitRoot(filepath.Join(w.tmp, "root"), "bench", 24*time.Hour)
		if err != nil {
			return err
		}
		w.root = root
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	key, err := cluster.LoadOrCreateKey(dir)
	if err != nil {
		return err
	}
	now := time.Now()
	cred, err := w.root.Admit(key.Public().(ed25519.PublicKey), filepath.Base(dir), now.Add(-time.Minute), now.Add(23*time.Hour))
	if err != nil {
		return err
	}
	_, err = cluster.Join(dir, w.root.Bundle(cred), w.root.Certificate())
	return err
}

// timeOnce runs op warmup times, then iters times, timing each: for
// operations that cannot be repeated in windows (each set makes a name).
func timeOnce(warmup, iters int, op func(i int) error) (Result, error) {
	for i := range warmup {
		if err := op(iters + i); err != nil {
			return Result{}, err
		}
	}
	samples := make([]int64, iters)
	t0 := nanotime()
	for i := range samples {
		t := nanotime()
		if err := op(i); err != nil {
			return Result{}, err
		}
		samples[i] = nanotime() - t
	}
	return rttResult(samples, nanotime()-t0, nil), nil
}

// woken is when a waiter woke, read by the waiter itself.
type woken struct {
	at  int64
	err error
}

// waitForSettle is the pause between arming a wake-up and the set that
// triggers it, in every wait-for case alike.
const waitForSettle = 2 * time.Millisecond

// rawWake is timeWakeups' prepare for a raw etcd watch: wake i watches the
// name prefix.i with watch, from before set sets it.
func rawWake(ctx context.Context, prefix string, watch func(context.Context, string) (<-chan struct{}, error),
	set func(name string) error) func(i int) (func() error, func() (int64, error), error) {
	return func(i int) (func() error, func() (int64, error), error) {
		n := fmt.Sprintf("%s.%d", prefix, i)
		wctx, cancel := context.WithCancel(ctx)
		ch, err := watch(wctx, n)
		if err != nil {
			cancel()
			return nil, nil, err
		}
		done := make(chan woken, 1)
		go func() {
			_, ok := <-ch
			at := nanotime()
			if !ok {
				done <- woken{at, errors.New("watch ended")}
				return
			}
			done <- woken{at, nil}
		}()
		// As long a pause before the set as the chanos case makes for its
		// wait_for to reach the monitor: both sets then start from a
		// machine equally idle (on an idle VM, the first wake-up after a
		// pause waits for a halted vCPU).
		time.Sleep(waitForSettle)
		wait := func() (int64, error) { defer cancel(); r := <-done; return r.at, r.err }
		return func() error { return set(n) }, wait, nil
	}
}

// timeWakeups times n wake-ups: prepare arms a waiter and returns the
// set that wakes it and the wait for it, which returns when the waiter
// woke; each sample runs from just before the set to the waiter's
// wake-up, whether or not the set has returned by then. cleanup runs at
// the end.
func timeWakeups(n int, prepare func(i int) (set func() error, wait func() (int64, error), err error), cleanup func()) (Result, error) {
	defer cleanup()
	samples := make([]int64, n)
	var total int64
	for i := range samples {
		set, wait, err := prepare(i)
		if err != nil {
			return Result{}, err
		}
		t := nanotime()
		if err := set(); err != nil {
			return Result{}, err
		}
		at, err := wait()
		if err != nil {
			return Result{}, err
		}
		samples[i] = at - t
		total += samples[i]
	}
	return rttResult(samples, total, nil), nil
}

// NamesSummary prints the ratios issue 20's figures are stated in.
func NamesSummary(w io.Writer, results []Result) {
	find := func(kase, transport string) *float64 {
		for i := range results {
			if results[i].Case == kase && results[i].Transport == transport {
				return results[i].RTTp50
			}
		}
		return nil
	}
	for _, g := range []struct {
		kase, base string
		goal       float64
		note       string
	}{
		{"get", "etcd", 0.2, "a domain's get, served from the watched cache, / a raw etcd Get"},
		{"set", "etcd", 1.3, "a domain's set / a raw etcd Txn"},
		{"wait-for", "etcd-set", 1.3, "a domain's wait_for wake-up after a remote set / a raw etcd watch event after the same set"},
		{"wait-for", "etcd", 0, "a domain's wait_for wake-up after a remote set / a raw etcd watch event after a raw Txn"},
	} {
		c, e := find(g.kase, "chanos"), find(g.kase, g.base)
		if c == nil || e == nil || *e == 0 {
			continue
		}
		r := *c / *e
		if g.goal == 0 {
			fmt.Fprintf(w, "%s (p50): %.2f\n", g.note, r)
			continue
		}
		fmt.Fprintf(w, "%s (p50): %.2f (goal <= %.1f: %s)\n", g.note, r, g.goal, verdict(r <= g.goal))
	}
	if c, e := find("get", "chanos"), find("get", "embedded"); c != nil && e != nil && *e != 0 {
		fmt.Fprintf(w, "a domain's get, cluster mode / embedded store (p50): %.2f\n", *c / *e)
	}
	if d := find("detect-dead", "chanos"); d != nil {
		fmt.Fprintf(w, "time to detect a dead machine (p50): %.2f s (goal <= 10 s: %s)\n", *d/1e9, verdict(*d <= 10e9))
	}
}
