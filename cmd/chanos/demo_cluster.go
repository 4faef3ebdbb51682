package main

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/chanos/chanos/cluster"
	hostnet "github.com/chanos/chanos/internal/netns"
)

const demoMachinesUsage = `
With --machines N (2 to 8), runs the cluster demo instead: N machines,
each a network namespace on a bridge with its own monitor in cluster
mode, a three-member etcd running on the machines, the pingpong server
shipped from machine 2 to machine 1 and spawned there through machine
1's spawn service (chanos spawn --ship --on m1), exporting a name seen
from every other machine, a client
on machine 2 sending it messages and rpcs over the net interconnect
(encrypted, with credentials the two monitors made for that one
connection), another client whose connection lives through a cut of
machine 1's link, then machine 1's monitor killed with SIGKILL and its
name gone from the others. Each step prints the time it took. It needs root
(for the namespaces) and etcd (scripts/install-deps.sh), and removes
everything it made.
`

// demoLease is the lease of the cluster demo's monitors: short, so that
// the death of a machine shows within seconds.
const (
	demoLease     = "2s"
	demoKeepAlive = "500ms"
	demoCluster   = "demo"
	demoName      = "demo.pingpong"
	demoCut       = 700 * time.Millisecond // a third of the lease
)

// clusterDemo is the state of 'chanos demo --machines N', torn down by
// close.
type clusterDemo struct {
	self, server string
	tmp          string
	net          *hostnet.Cluster
	dirs         []string
	procs        []*exec.Cmd // everything started, stopped in reverse
	monitors     []*exec.Cmd
	begin, step  time.Time
	quiet        bool // say prints nothing
}

// say prints one step of the story with the time since the last one.
func (d *clusterDemo) say(format string, args ...any) {
	if d.quiet {
		return
	}
	now := time.Now()
	fmt.Printf("[%6.2fs +%5.2fs] %s\n", now.Sub(d.begin).Seconds(), now.Sub(d.step).Seconds(), fmt.Sprintf(format, args...))
	d.step = now
}

func runClusterDemo(ctx context.Context, n int) (err error) {
	if n < 2 || n > 8 {
		return usagef("demo", "--machines %d: from 2 to 8", n)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	server := filepath.Join(filepath.Dir(self), "pingpong-server")
	if _, err := os.Stat(server); err != nil {
		return fmt.Errorf("demo: pingpong-server is missing: build the examples with `make` (they go beside chanos in %s)", filepath.Dir(self))
	}
	d, err := startMachines(ctx, n, false)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	d.server = server
	defer func() {
		if cerr := d.close(); err == nil {
			err = cerr
		}
	}()
	d.say("a monitor in cluster mode on each machine (lease %s, keep-alive %s); machine 2 sees:", demoLease, demoKeepAlive)
	if out, err := d.cli(1, "machines"); err == nil {
		fmt.Print(indent(string(out)))
	}

	// The server runs on machine 1, started from machine 2 through
	// machine 1's spawn service, shipped: machine 1 runs it from its
	// cache, checked against its SHA-256.
	spawn := d.net.Machines[1].Command(d.self, "spawn", "--ship", "--on", "m1", "--monitor-dir", d.dirs[1],
		"--name", "pingpong-server", "--json", "--", d.server, "-name", demoName)
	var spawnErr strings.Builder
	spawn.Stderr = &spawnErr
	out, err := spawn.Output()
	if err != nil {
		return fmt.Errorf("demo: chanos spawn --ship --on m1 (on machine 2): %w: %s", err, spawnErr.String())
	}
	var st struct {
		ID     uint64 `json:"id"`
		PID    int    `json:"pid"`
		SHA256 string `json:"sha256"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return fmt.Errorf("demo: chanos spawn: %w: %s", err, out)
	}
	d.say("machine 2 ran 'chanos spawn --ship --on m1 -- pingpong-server': shipped over net into machine 1's cache (sha256 %.12s...), spawned on machine m1 through its spawn service (id %d, pid %d)",
		st.SHA256, st.ID, st.PID)
	if err := d.waitFor(ctx, demoName+" on machine 1", func() (bool, error) { return d.hasName(0) }); err != nil {
		return err
	}
	d.say("pingpong-server exports %q on machine 1", demoName)

	for i := 1; i < n; i++ {
		if err := d.waitFor(ctx, fmt.Sprintf("%s seen from machine %d", demoName, i+1), func() (bool, error) { return d.hasName(i) }); err != nil {
			return err
		}
		d.say("machine %d sees %q, on machine m1 ('chanos names' inside m%d)", i+1, demoName, i+1)
	}
	if out, err := d.cli(1, "names"); err == nil {
		fmt.Print(indent(string(out)))
	}
	client := filepath.Join(filepath.Dir(self), "pingpong-client")
	cl := d.net.Machines[1].Command(client, "-name", demoName, "-n", "2000")
	cl.Env = append(os.Environ(), "CHANOS_DIR="+d.dirs[1])
	var cerr error
	out, cerr = cl.CombinedOutput()
	if cerr != nil {
		return fmt.Errorf("the client on machine 2: %w: %s", cerr, out)
	}
	d.say("a client on machine 2 sends pings, echo rpcs and a 64 KiB bounce to machine 1, over the net interconnect:")
	fmt.Print(indent(string(out)))

	// A connection that lives through a cut: shorter than the lease, so
	// that machine 1 keeps its names, and the client's frames wait and
	// go on.
	cl = d.net.Machines[1].Command(client, "-name", demoName, "-n", "20000")
	cl.Env = append(os.Environ(), "CHANOS_DIR="+d.dirs[1])
	var cout strings.Builder
	cl.Stdout, cl.Stderr = &cout, &cout
	if err := cl.Start(); err != nil {
		return err
	}
	time.Sleep(200 * time.Millisecond)
	if err := d.net.Machines[0].Cut(ctx); err != nil {
		cl.Process.Kill()
		cl.Wait()
		return err
	}
	d.say("machine 1's link cut while a client on machine 2 runs 20000 pings and 20000 rpcs")
	time.Sleep(demoCut)
	if err := d.net.Machines[0].Restore(ctx); err != nil {
		cl.Process.Kill()
		cl.Wait()
		return err
	}
	d.say("machine 1's link restored after %v", demoCut)
	if err := cl.Wait(); err != nil {
		return fmt.Errorf("the client across the cut: %w: %s", err, cout.String())
	}
	d.say("the client's connection lived through the cut: every pong and reply came, in order:")
	fmt.Print(indent(cout.String()))

	killed := time.Now()
	d.monitors[0].Process.Kill()
	d.say("machine 1's monitor killed with SIGKILL")
	for i := 1; i < n; i++ {
		if err := d.waitFor(ctx, fmt.Sprintf("%s gone from machine %d", demoName, i+1), func() (bool, error) {
			ok, err := d.hasName(i)
			return err == nil && !ok, nil
		}); err != nil {
			return err
		}
		d.say("machine %d: %q is gone, %.2fs after the kill (lease %s)", i+1, demoName, time.Since(killed).Seconds(), demoLease)
	}
	fmt.Println("cluster demo: done; removing the machines")
	return nil
}

// startMachines builds n machines, each a network namespace, starts a
// three-member etcd on them and a monitor in cluster mode on each, and
// waits until every machine is registered; quiet keeps the story to
// itself. It needs root and etcd, and says so. The caller's close
// removes everything; on an error, startMachines does.
func startMachines(ctx context.Context, n int, quiet bool) (d *clusterDemo, err error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	etcdBin, err := exec.LookPath("etcd")
	if err != nil {
		return nil, errors.New("etcd is not installed: run scripts/install-deps.sh")
	}
	if err := hostnet.Check(); err != nil {
		return nil, fmt.Errorf("%w (the machines are network namespaces: run it as root)", err)
	}
	d = &clusterDemo{self: self, begin: time.Now(), quiet: quiet}
	d.step = d.begin
	if d.tmp, err = os.MkdirTemp("", "chanos-cluster-demo-"); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			d.close()
			d = nil
		}
	}()
	if !quiet {
		fmt.Printf("cluster demo: %d machines, working directory %s\n", n, d.tmp)
	}

	d.net, err = hostnet.New(ctx, hostnet.Options{Machines: n, HostLink: true})
	if err != nil {
		return d, fmt.Errorf("build the machines: %w", err)
	}
	var addrs []string
	for _, m := range d.net.Machines {
		addrs = append(addrs, m.Name+" "+m.Addr.String())
	}
	d.say("built %d machines on a bridge, each a network namespace: %s", n, strings.Join(addrs, ", "))

	endpoints, err := d.startEtcd(ctx, etcdBin)
	if err != nil {
		return d, err
	}
	d.say("etcd: 3 members running on the machines, healthy (%s)", strings.Join(endpoints, ","))

	if err := d.admit(n); err != nil {
		return d, err
	}
	d.say("cluster %q: a root made, and each machine admitted with a credential of its own key", demoCluster)

	for i, m := range d.net.Machines {
		cmd := m.Command(self, "monitor", "--dir", d.dirs[i], "--cluster", demoCluster, "--etcd", strings.Join(endpoints, ","),
			"--listen", m.Addr.String()+":7070", "--lease-ttl", demoLease, "--keep-alive", demoKeepAlive)
		if err := d.start(cmd, filepath.Join(d.tmp, m.Name+"-monitor.log")); err != nil {
			return d, err
		}
		d.monitors = append(d.monitors, cmd)
	}
	for i := range d.net.Machines {
		if err := waitForMonitor(ctx, d.dirs[i]); err != nil {
			return d, err
		}
	}
	err = d.waitFor(ctx, "every machine registered", func() (bool, error) {
		out, err := d.cli(1, "machines", "--json")
		if err != nil {
			return false, nil
		}
		var list struct {
			Machines []json.RawMessage `json:"machines"`
		}
		return json.Unmarshal(out, &list) == nil && len(list.Machines) == n, nil
	})
	return d, err
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ") + "\n"
}

// startEtcd starts a three-member etcd on the machines (member k on
// machine k mod N) and waits until it is healthy; it returns the
// client URLs.
func (d *clusterDemo) startEtcd(ctx context.Context, bin string) ([]string, error) {
	var peers, clients []string
	type member struct{ name, host, client, peer string }
	var members []member
	for k := range 3 {
		m := d.net.Machines[k%len(d.net.Machines)]
		host := m.Addr.String()
		mb := member{fmt.Sprintf("e%d", k), host, fmt.Sprintf("http://%s:%d", host, 2379+10*k), fmt.Sprintf("http://%s:%d", host, 2380+10*k)}
		members = append(members, mb)
		peers = append(peers, mb.name+"="+mb.peer)
		clients = append(clients, mb.client)
	}
	for k, mb := range members {
		m := d.net.Machines[k%len(d.net.Machines)]
		cmd := m.Command(bin, "--name", mb.name, "--data-dir", filepath.Join(d.tmp, mb.name),
			"--listen-client-urls", mb.client, "--advertise-client-urls", mb.client,
			"--listen-peer-urls", mb.peer, "--initial-advertise-peer-urls", mb.peer,
			"--initial-cluster", strings.Join(peers, ","), "--initial-cluster-state", "new",
			"--initial-cluster-token", filepath.Base(d.tmp))
		if err := d.start(cmd, filepath.Join(d.tmp, mb.name+".log")); err != nil {
			return nil, err
		}
	}
	client := &http.Client{Timeout: time.Second}
	err := d.waitFor(ctx, "etcd healthy", func() (bool, error) {
		for _, u := range clients {
			resp, err := client.Get(u + "/health")
			if err != nil {
				return false, nil
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if !strings.Contains(string(b), `"health":"true"`) {
				return false, nil
			}
		}
		return true, nil
	})
	return clients, err
}

// admit makes the cluster's root and admits every machine.
func (d *clusterDemo) admit(n int) error {
	root, err := cluster.InitRoot(filepath.Join(d.tmp, "root"), demoCluster, 24*time.Hour)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	for i := range n {
		dir := filepath.Join(d.tmp, fmt.Sprintf("m%d", i+1))
		if err := os.Mkdir(dir, 0o700); err != nil {
			return err
		}
		key, err := cluster.LoadOrCreateKey(dir)
		if err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		now := time.Now()
		cred, err := root.Admit(key.Public().(ed25519.PublicKey), fmt.Sprintf("m%d", i+1), now.Add(-time.Minute), now.Add(23*time.Hour))
		if err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		if _, err := cluster.Join(dir, root.Bundle(cred), root.Certificate()); err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		d.dirs = append(d.dirs, dir)
	}
	return nil
}

// start starts cmd with its output in the file log.
func (d *clusterDemo) start(cmd *exec.Cmd, log string) error {
	f, err := os.Create(log)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = f, f
	err = cmd.Start()
	f.Close()
	if err != nil {
		return fmt.Errorf("demo: start %s: %w", filepath.Base(cmd.Args[len(cmd.Args)-1]), err)
	}
	d.procs = append(d.procs, cmd)
	return nil
}

// cli runs 'chanos ARGS --dir' inside machine i, against its monitor.
func (d *clusterDemo) cli(i int, args ...string) ([]byte, error) {
	return d.net.Machines[i].Command(d.self, append(args, "--dir", d.dirs[i])...).Output()
}

// hasName reports whether machine i's monitor lists demoName.
func (d *clusterDemo) hasName(i int) (bool, error) {
	out, err := d.cli(i, "names", "--json", demoName)
	if err != nil {
		return false, err
	}
	var rows []struct {
		Name string `json:"name"`
	}
	if err := json.Unmarshal(out, &rows); err != nil {
		return false, err
	}
	for _, r := range rows {
		if r.Name == demoName {
			return true, nil
		}
	}
	return false, nil
}

// waitFor polls cond until it holds, for at most 30 s.
func (d *clusterDemo) waitFor(ctx context.Context, what string, cond func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		ok, err := cond()
		if err != nil {
			return fmt.Errorf("demo: %s: %w", what, err)
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("demo: %s: not within 30 s (logs in %s)", what, d.tmp)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// close stops every process (SIGTERM, then SIGKILL after 5 s), removes
// the machines and the working directory.
func (d *clusterDemo) close() error {
	for i := len(d.procs) - 1; i >= 0; i-- {
		p := d.procs[i]
		p.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { p.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			p.Process.Kill()
			<-done
		}
	}
	var errs []error
	if d.net != nil {
		errs = append(errs, d.net.Close())
	}
	errs = append(errs, os.RemoveAll(d.tmp))
	return errors.Join(errs...)
}
