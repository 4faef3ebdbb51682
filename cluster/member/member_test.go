package member

import (
	"context"
	"crypto/ed25519"
	"errors"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chanos/chanos/cluster"
	"github.com/chanos/chanos/cluster/etcd"
	"github.com/chanos/chanos/interconnect"
	"github.com/chanos/chanos/internal/testkit"
	"github.com/chanos/chanos/internal/testkit/etcdtest"
	"github.com/chanos/chanos/monitor"
)

// admitted returns the identity of a machine name that root admitted.
func admitted(t *testing.T, root *cluster.Root, name string) *cluster.Identity {
	t.Helper()
	return admittedUntil(t, root, name, time.Now().Add(time.Hour))
}

// admittedUntil is admitted with a credential good until notAfter.
func admittedUntil(t *testing.T, root *cluster.Root, name string, notAfter time.Time) *cluster.Identity {
	t.Helper()
	dir := filepath.Join(testkit.ShortDir(t), "m")
	if err := monitor.PrepareDir(dir); err != nil {
		t.Fatal(err)
	}
	key, err := cluster.LoadOrCreateKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	cred, err := root.Admit(key.Public().(ed25519.PublicKey), name, time.Now().Add(-time.Minute), notAfter)
	if err != nil {
		t.Fatal(err)
	}
	id, err := cluster.Join(dir, root.Bundle(cred), nil)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestDialChecksMachineID: a dialled machine whose key is the one its
// record names, but whose key gives another id than the record's, is
// refused: its link would otherwise carry the binds meant for the
// machine of that id.
func TestDialChecksMachineID(t *testing.T) {
	root, err := cluster.InitRoot(filepath.Join(t.TempDir(), "root"), "lab", 0)
	if err != nil {
		t.Fatal(err)
	}
	a, b := admitted(t, root, "alpha"), admitted(t, root, "beta")
	c := testMember(t, a)
	ln, err := cluster.Listen("127.0.0.1:0", b, &cluster.Options{Logger: c.log})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // keeps what it accepts open until the listener closes
		var links []*cluster.Link
		for {
			l, err := ln.Accept(context.Background())
			if err != nil {
				for _, l := range links {
					l.Close()
				}
				return
			}
			links = append(links, l)
		}
	}()

	// The record names b's key and address, under an id b's key does not
	// give.
	other := MachineIDOf(a) ^ 1
	mi := etcd.MachineInfo{ID: other, Name: "beta", Addr: ln.Addr().String(), Identity: b.KeyID()}
	res := make(chan error, 1)
	c.wg.Add(1)
	go func() { res <- c.dial(mi) }()
	var got error
	testkit.Eventually(t, "the dial to end, or its link to be taken", func() bool {
		select {
		case got = <-res:
			return true
		default:
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.links[other] != nil
	})
	if got == nil {
		t.Errorf("a link to %q was taken as machine %016x, which its key does not give", b.Machine(), other)
		close(c.stop)
		<-res
		return
	}
	if !errors.Is(got, cluster.ErrWrongMachine) {
		t.Errorf("dial = %v, want ErrWrongMachine", got)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.links) != 0 {
		t.Errorf("links after a refused dial: %v", c.links)
	}
}

// testMember is a member of machine id, as far as links go: no etcd
// unless the test gives it one.
func testMember(t *testing.T, id *cluster.Identity) *Member {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	mon, err := monitor.New(monitor.Config{Dir: filepath.Join(testkit.ShortDir(t), "mon"), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mon.Close() })
	return &Member{id: id, self: MachineIDOf(id), log: log, mon: mon, links: map[uint64]*cluster.Link{},
		accepted: map[uint64]*cluster.Link{}, stop: make(chan struct{})}
}

// stopLinks ends the member's links and waits for their goroutines.
func (c *Member) stopLinks() {
	close(c.stop)
	if c.listen != nil {
		c.listen.Close()
	}
	c.wg.Wait()
}

// ended returns a channel that is closed when l's Receive fails: the link
// ended.
func ended(l *cluster.Link) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		var in interconnect.Incoming
		for l.Receive(context.Background(), &in) == nil {
		}
	}()
	return ch
}

// TestOneInboundLinkPerMachine: a machine that opens a second control
// link to this one has its first closed: the monitor bounds the binds in
// progress per link, so a machine must not have more than one.
func TestOneInboundLinkPerMachine(t *testing.T) {
	root, err := cluster.InitRoot(filepath.Join(t.TempDir(), "root"), "lab", 0)
	if err != nil {
		t.Fatal(err)
	}
	a, b := admitted(t, root, "alpha"), admitted(t, root, "beta")
	c := testMember(t, a)
	var logs testkit.Output
	c.log = slog.New(slog.NewTextHandler(&logs, nil))
	if c.listen, err = cluster.Listen("127.0.0.1:0", a, &cluster.Options{Logger: c.log}); err != nil {
		t.Fatal(err)
	}
	c.wg.Add(1)
	go c.accept()
	defer c.stopLinks()

	ctx := testkit.Context(t)
	first, err := cluster.Dial(ctx, c.listen.Addr().String(), b, &cluster.Options{Logger: c.log})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	firstEnded := ended(first)
	testkit.Eventually(t, "the first link to be accepted", func() bool {
		return strings.Contains(logs.String(), "control link accepted")
	})
	second, err := cluster.Dial(ctx, c.listen.Addr().String(), b, &cluster.Options{Logger: c.log})
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	testkit.Await(t, "the first link to be closed once the second is accepted", firstEnded)
	select {
	case <-ended(second):
		t.Fatal("the second link ended too")
	default:
	}
}

// etcdPair starts etcd and admits two machines of one root: alpha, as a
// member in the registry, and beta, whose identity is returned with the
// function that opens a machine of the registry for it (closed with the
// test).
func etcdPair(t *testing.T) (*Member, *cluster.Identity, func(*cluster.Identity) *etcd.Machine) {
	t.Helper()
	c, root, open := etcdCluster(t)
	return c, admitted(t, root, "beta"), open
}

// etcdCluster is etcdPair with the cluster's root to admit more machines
// with, rather than beta.
func etcdCluster(t *testing.T) (*Member, *cluster.Root, func(*cluster.Identity) *etcd.Machine) {
	t.Helper()
	ec := etcdtest.Start(t, etcdtest.Options{})
	root, err := cluster.InitRoot(filepath.Join(t.TempDir(), "root"), "lab", 0)
	if err != nil {
		t.Fatal(err)
	}
	a := admitted(t, root, "alpha")
	ctx := testkit.Context(t)
	c := testMember(t, a)
	open := func(id *cluster.Identity) *etcd.Machine {
		m, err := etcd.Open(ctx, etcd.Config{Endpoints: ec.Endpoints(), Cluster: "lab", Machine: MachineIDOf(id),
			TTL: 2 * time.Second, KeepAlive: 500 * time.Millisecond, Logger: c.log})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		return m
	}
	c.machine = open(a)
	return c, root, open
}

// TestMachinesShowRevokedAndExpired: a machine whose credential a
// revocation list names is listed "revoked" from then on, one whose
// credential's time is up "expired"; the others stay "up".
func TestMachinesShowRevokedAndExpired(t *testing.T) {
	c, root, open := etcdCluster(t)
	ctx := testkit.Context(t)
	ids := map[string]*cluster.Identity{
		"beta":  admitted(t, root, "beta"),
		"gamma": admittedUntil(t, root, "gamma", time.Now().Add(2*time.Second)),
		"delta": admitted(t, root, "delta"),
	}
	for name, id := range ids {
		if err := open(id).Registry().Register(ctx, etcd.MachineInfo{Name: name, Addr: "127.0.0.1:1", Identity: id.KeyID()}); err != nil {
			t.Fatal(err)
		}
		// What a control link with the machine would have shown.
		c.noteCredential(MachineIDOf(id), id.Certificate())
	}
	states := func() map[string]string {
		m := map[string]string{}
		for _, mi := range c.machines() {
			m[mi.Name] = mi.State
		}
		return m
	}
	testkit.Eventually(t, "the three machines listed up", func() bool {
		s := states()
		return s["beta"] == "up" && s["gamma"] == "up" && s["delta"] == "up"
	})
	c.wg.Add(1)
	go c.enforceRevocations()
	defer c.stopLinks()
	list, err := root.Revoke(ids["beta"].Certificate().SerialNumber)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.id.Revocations.Update(list); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "beta revoked, gamma expired, delta up", func() bool {
		s := states()
		return s["beta"] == "revoked" && s["gamma"] == "expired" && s["delta"] == "up"
	})
}

// TestLeftMachineLinksClosed: when a machine leaves the registry (its
// lease ends), the control link to it is closed.
func TestLeftMachineLinksClosed(t *testing.T) {
	c, b, open := etcdPair(t)
	ctx := testkit.Context(t)

	// b: a listener whose links the test keeps, and its record.
	ln, err := cluster.Listen("127.0.0.1:0", b, &cluster.Options{Logger: c.log})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	links := make(chan *cluster.Link, 4)
	go func() {
		for {
			l, err := ln.Accept(context.Background())
			if err != nil {
				return
			}
			t.Cleanup(func() { l.Close() })
			links <- l
		}
	}()
	mb := open(b)
	if err := mb.Registry().Register(ctx, etcd.MachineInfo{Name: "beta", Addr: ln.Addr().String(), Identity: b.KeyID()}); err != nil {
		t.Fatal(err)
	}

	c.wg.Add(1)
	go c.dialPeers()
	defer c.stopLinks()
	link := testkit.Await(t, "alpha to dial beta", links)
	linkEnded := ended(link)
	mb.Close() // revokes beta's lease: its record goes
	testkit.Await(t, "alpha to close its link to beta, which left", linkEnded)
}

// TestNoRedialOnLoad: a machine whose dial failed is dialled again after
// the redial interval, or as soon as its address or key changes, but not
// each time its record's load changes (every few seconds).
func TestNoRedialOnLoad(t *testing.T) {
	c, b, open := etcdPair(t)
	ctx := testkit.Context(t)
	// Beta's address takes TCP connections and closes them: every dial
	// fails, and each is counted.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var dials atomic.Int32
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			dials.Add(1)
			conn.Close()
		}
	}()
	mb := open(b)
	if err := mb.Registry().Register(ctx, etcd.MachineInfo{Name: "beta", Addr: ln.Addr().String(), Identity: b.KeyID()}); err != nil {
		t.Fatal(err)
	}
	c.wg.Add(1)
	go c.dialPeers()
	defer c.stopLinks()
	testkit.Eventually(t, "alpha to dial beta", func() bool { return dials.Load() > 0 })
	for i := range 8 {
		if err := mb.Registry().SetLoad(ctx, etcd.Load{Domains: i + 1}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(150 * time.Millisecond)
	}
	if n := dials.Load(); n != 1 {
		t.Fatalf("beta dialled %d times within %v of its first failure, as its load changed; want once", n, redialInterval)
	}
}
