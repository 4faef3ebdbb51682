// Package etcdtest starts real etcd clusters, as separate etcd processes,
// for tests: one or three members on free ports, each with its own data
// directory under the test's temporary directory. Members can be killed
// with SIGKILL and restarted on the same data and ports, where they rejoin.
// Everything a cluster started is killed and reaped when the test ends,
// whether it passed or not, and the members' output goes to the test log
// only when the test failed.
//
// The etcd binary comes from PATH (scripts/install-deps.sh installs it).
// Without it, tests skip, except under CI=1, where they fail: CI must run
// them. Nothing but tests may import this package.
package etcdtest

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Options says how to start a cluster. The zero value starts one member on
// 127.0.0.1.
type Options struct {
	// Members is 1 or 3 (0 means 1).
	Members int
	// Hosts, when set, is each member's listen and advertise address
	// (one per member), for example an address inside a network
	// namespace. It defaults to 127.0.0.1.
	Hosts []string
	// Prefixes, when set, is each member's command prefix (one per
	// member; nil for none), for example {"ip", "netns", "exec", "m1"}.
	Prefixes [][]string
	// Binary is the etcd executable; it defaults to "etcd" from PATH.
	Binary string
	// HeartbeatMs and ElectionMs are etcd's raft timers; they default to
	// etcd's own (100 and 1000 ms), which stay stable on a loaded host.
	HeartbeatMs, ElectionMs int
	// TLS serves the client port over TLS with a test CA made for the
	// cluster, and requires client certificates from it (etcd's
	// --client-cert-auth); ClientTLS returns a client's configuration.
	TLS bool
}

// Cluster is a running etcd cluster.
type Cluster struct {
	t       testing.TB
	opt     Options
	members []*member
	token   string
	pki     *pki // with Options.TLS
}

type member struct {
	name       string
	host       string
	prefix     []string
	clientPort int
	peerPort   int
	dir        string
	tls        bool

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{} // closed once the current process is reaped
	out    *syncBuffer
	starts int
}

// Need returns the etcd binary's path, or skips the test when there is
// none (and fails it under CI=1).
func Need(t testing.TB) string {
	t.Helper()
	path, err := exec.LookPath("etcd")
	if err == nil {
		return path
	}
	if os.Getenv("CI") == "1" {
		t.Fatalf("etcd is not installed (CI=1 requires it): run scripts/install-deps.sh")
	}
	t.Skip("etcd is not installed: run scripts/install-deps.sh to run the tests against real etcd")
	return ""
}

// Start starts a cluster and waits until every member is healthy. It
// fails the test if that does not happen within a minute.
func Start(t testing.TB, opt Options) *Cluster {
	t.Helper()
	if opt.Binary == "" {
		opt.Binary = Need(t)
	}
	if opt.Members == 0 {
		opt.Members = 1
	}
	if opt.Members != 1 && opt.Members != 3 {
		t.Fatalf("etcdtest: %d members; 1 or 3", opt.Members)
	}
	if opt.Hosts != nil && len(opt.Hosts) != opt.Members {
		t.Fatalf("etcdtest: %d hosts for %d members", len(opt.Hosts), opt.Members)
	}
	if opt.Prefixes != nil && len(opt.Prefixes) != opt.Members {
		t.Fatalf("etcdtest: %d prefixes for %d members", len(opt.Prefixes), opt.Members)
	}
	if opt.HeartbeatMs == 0 {
		opt.HeartbeatMs = 100
	}
	if opt.ElectionMs == 0 {
		opt.ElectionMs = 1000
	}
	base := t.TempDir()
	c := &Cluster{t: t, opt: opt}
	if opt.TLS {
		hosts := opt.Hosts
		if hosts == nil {
			hosts = []string{"127.0.0.1"}
		}
		c.pki = newPKI(t, base, hosts)
	}
	t.Cleanup(c.stopAll)
	// A free port may be taken by someone else between our probe and
	// etcd's bind; such a start is retried on fresh ports.
	for try := 0; ; try++ {
		c.token = fmt.Sprintf("chanos-test-%d-%d", os.Getpid(), time.Now().UnixNano())
		c.members = c.members[:0]
		for i := 0; i < opt.Members; i++ {
			m := &member{name: fmt.Sprintf("m%d", i), host: "127.0.0.1", dir: filepath.Join(base, fmt.Sprintf("try%d-m%d", try, i))}
			if opt.Hosts != nil {
				m.host = opt.Hosts[i]
			}
			if opt.Prefixes != nil {
				m.prefix = opt.Prefixes[i]
			}
			m.tls = opt.TLS
			m.clientPort, m.peerPort = freePort(t), freePort(t)
			c.members = append(c.members, m)
		}
		for i := range c.members {
			c.start(i, "new")
		}
		err := c.waitHealthy(time.Minute, allIndexes(opt.Members))
		if err == nil {
			return c
		}
		inUse := false
		for _, m := range c.members {
			if strings.Contains(m.out.String(), "address already in use") {
				inUse = true
			}
		}
		if !inUse || try == 2 {
			t.Fatalf("etcdtest: cluster did not become healthy: %v\n%s", err, c.logs())
		}
		c.stopAll()
	}
}

func allIndexes(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// freePort returns a TCP port that was free on 127.0.0.1 a moment ago.
// Members in other network namespaces use the same numbers: a fresh
// namespace has all its ports free.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("etcdtest: free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func (m *member) clientURL() string {
	scheme := "http://"
	if m.tls {
		scheme = "https://"
	}
	return scheme + net.JoinHostPort(m.host, strconv.Itoa(m.clientPort))
}

func (m *member) peerURL() string {
	return "http://" + net.JoinHostPort(m.host, strconv.Itoa(m.peerPort))
}

func (c *Cluster) initialCluster() string {
	var parts []string
	for _, m := range c.members {
		parts = append(parts, m.name+"="+m.peerURL())
	}
	return strings.Join(parts, ",")
}

// start starts member i's process; state is "new" or "existing".
func (c *Cluster) start(i int, state string) {
	c.t.Helper()
	m := c.members[i]
	args := append([]string{}, m.prefix...)
	args = append(args, c.opt.Binary,
		"--name", m.name,
		"--data-dir", m.dir,
		"--listen-client-urls", m.clientURL(),
		"--advertise-client-urls", m.clientURL(),
		"--listen-peer-urls", m.peerURL(),
		"--initial-advertise-peer-urls", m.peerURL(),
		"--initial-cluster", c.initialCluster(),
		"--initial-cluster-state", state,
		"--initial-cluster-token", c.token,
		"--heartbeat-interval", strconv.Itoa(c.opt.HeartbeatMs),
		"--election-timeout", strconv.Itoa(c.opt.ElectionMs),
		"--logger", "zap",
		"--log-outputs", "stderr",
	)
	if c.pki != nil {
		args = append(args,
			"--cert-file", c.pki.serverCert, "--key-file", c.pki.serverKey,
			"--trusted-ca-file", c.pki.caFile, "--client-cert-auth")
	}
	cmd := exec.Command(args[0], args[1:]...)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.out == nil {
		m.out = &syncBuffer{}
	}
	m.starts++
	fmt.Fprintf(m.out, "--- start %d: %s\n", m.starts, strings.Join(args, " "))
	cmd.Stdout, cmd.Stderr = m.out, m.out
	// Its own process group, so that a kill reaches whatever a prefix
	// started; and killed with the test binary, should that die first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("etcdtest: start member %d: %v", i, err)
	}
	done := make(chan struct{})
	m.cmd, m.done = cmd, done
	go func() {
		err := cmd.Wait()
		fmt.Fprintf(m.out, "--- exited: %v\n", err)
		close(done)
	}()
}

// Endpoints returns the members' client URLs, for an etcd client.
func (c *Cluster) Endpoints() []string {
	var out []string
	for _, m := range c.members {
		out = append(out, m.clientURL())
	}
	return out
}

// Endpoint returns member i's client URL.
func (c *Cluster) Endpoint(i int) string { return c.members[i].clientURL() }

// Members returns the number of members.
func (c *Cluster) Members() int { return len(c.members) }

// Kill kills member i with SIGKILL and waits until it is reaped.
func (c *Cluster) Kill(i int) {
	c.t.Helper()
	c.members[i].kill()
}

func (m *member) kill() {
	m.mu.Lock()
	cmd, done := m.cmd, m.done
	m.cmd = nil
	m.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-done
}

// Restart starts member i again, on its data directory and ports, after
// Kill; it rejoins the cluster. It does not wait for the member to be
// healthy, which needs a quorum: see WaitHealthy.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	m := c.members[i]
	m.mu.Lock()
	running := m.cmd != nil
	m.mu.Unlock()
	if running {
		c.t.Fatalf("etcdtest: restart of member %d, which is running", i)
	}
	c.start(i, "existing")
}

// WaitHealthy waits until every running member reports itself healthy
// (it has a leader), and fails the test if that takes over a minute.
func (c *Cluster) WaitHealthy() {
	c.t.Helper()
	var running []int
	for i, m := range c.members {
		m.mu.Lock()
		if m.cmd != nil {
			running = append(running, i)
		}
		m.mu.Unlock()
	}
	if err := c.waitHealthy(time.Minute, running); err != nil {
		c.t.Fatalf("etcdtest: %v\n%s", err, c.logs())
	}
}

// ClientTLS returns the configuration of a client the cluster admits:
// the test CA and a client certificate it signed. It is nil without
// Options.TLS.
func (c *Cluster) ClientTLS() *tls.Config {
	if c.pki == nil {
		return nil
	}
	return c.pki.client.Clone()
}

func (c *Cluster) waitHealthy(limit time.Duration, which []int) error {
	deadline := time.Now().Add(limit)
	client := &http.Client{Timeout: time.Second}
	if c.pki != nil {
		client.Transport = &http.Transport{TLSClientConfig: c.ClientTLS()}
	}
	for _, i := range which {
		m := c.members[i]
		for {
			m.mu.Lock()
			done := m.done
			m.mu.Unlock()
			select {
			case <-done:
				return fmt.Errorf("member %d exited", i)
			default:
			}
			if healthy(client, m.clientURL()) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("member %d not healthy after %v", i, limit)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

func healthy(client *http.Client, url string) bool {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url+"/health", nil)
	if err != nil {
		return false
	}
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	return resp.StatusCode == http.StatusOK && strings.Contains(buf.String(), `"health":"true"`)
}

// stopAll kills and reaps every member, and logs their output if the test
// failed.
func (c *Cluster) stopAll() {
	for _, m := range c.members {
		m.kill()
	}
	if c.t.Failed() {
		c.t.Logf("etcd members' output:\n%s", c.logs())
	}
}

func (c *Cluster) logs() string {
	var b strings.Builder
	for i, m := range c.members {
		if m.out == nil {
			continue
		}
		fmt.Fprintf(&b, "=== etcd member %d (%s)\n%s", i, m.clientURL(), m.out.String())
	}
	return b.String()
}

// syncBuffer is a buffer that two processes' output and the test may use
// at once.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
