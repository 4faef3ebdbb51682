package etcd

import (
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/chanos/chanos/internal/testkit"
	"github.com/chanos/chanos/internal/testkit/etcdtest"
	"github.com/chanos/chanos/names"
	"github.com/chanos/chanos/wire"
)

// link is a TCP relay between one machine and an etcd member that the
// test can cut: every connection through it is closed, and new ones are
// refused, until it is restored. The machine sees what a broken network
// shows it: connections that end, and dials that fail. It can also
// stall: the bytes in both directions are dropped, and nothing ends, as
// over a link that went dark without a reset.
type link struct {
	l      net.Listener
	target string

	mu      sync.Mutex
	cut     bool
	stalled bool
	conns   map[net.Conn]bool
	wg      sync.WaitGroup
}

func newLink(t *testing.T, target string) *link {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	k := &link{l: l, target: target, conns: map[net.Conn]bool{}}
	k.wg.Add(1)
	go k.accept()
	t.Cleanup(k.close)
	return k
}

// endpoint is the URL the machine dials instead of the member's.
func (k *link) endpoint() string { return "http://" + k.l.Addr().String() }

func (k *link) accept() {
	defer k.wg.Done()
	for {
		c, err := k.l.Accept()
		if err != nil {
			return
		}
		k.mu.Lock()
		if k.cut {
			k.mu.Unlock()
			c.Close()
			continue
		}
		k.mu.Unlock()
		up, err := net.Dial("tcp", k.target)
		if err != nil {
			c.Close()
			continue
		}
		k.mu.Lock()
		k.conns[c], k.conns[up] = true, true
		k.mu.Unlock()
		k.wg.Add(2)
		go k.pipe(c, up)
		go k.pipe(up, c)
	}
}

func (k *link) pipe(dst, src net.Conn) {
	defer k.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		k.mu.Lock()
		stalled := k.stalled
		k.mu.Unlock()
		if n > 0 && !stalled {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	dst.Close()
	src.Close()
	k.mu.Lock()
	delete(k.conns, dst)
	delete(k.conns, src)
	k.mu.Unlock()
}

// setCut cuts the link (every connection closed, new ones refused) or
// restores it.
func (k *link) setCut(cut bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.cut = cut
	if cut {
		for c := range k.conns {
			c.Close()
		}
	}
}

// setStalled stalls the link or ends the stall. The connections that
// stalled lost bytes, so they are closed as it ends, and the machine
// dials again.
func (k *link) setStalled(stalled bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.stalled = stalled
	if !stalled {
		for c := range k.conns {
			c.Close()
		}
	}
}

func (k *link) close() {
	k.l.Close()
	k.setCut(true)
	k.wg.Wait()
}

// TestCutShort: a machine cut off from etcd for less than its lease's TTL
// loses nothing: the same lease, its names, and no OnLost.
func TestCutShort(t *testing.T) {
	t.Parallel() // it mostly waits out leases and elections
	ec := etcdtest.Start(t, etcdtest.Options{})
	ctx := testkit.Context(t)
	cluster := freshCluster()
	k := newLink(t, ec.Endpoint(0)[len("http://"):])
	lost := make(chan string, 16)
	a := open(t, []string{k.endpoint()}, cluster, 1, func(c *Config) {
		c.TTL, c.KeepAlive, c.OpTimeout = 6*time.Second, 500*time.Millisecond, time.Second
		c.OnLost = func(_ names.Owner, n string) { lost <- n }
	})
	b := open(t, ec.Endpoints(), cluster, 2)
	ref := wire.Iref{Machine: 1, Export: 1}
	if err := a.Names().Set(ctx, "short", ref, 1); err != nil {
		t.Fatal(err)
	}
	lease := a.Session().Lease()

	k.setCut(true)
	testkit.Eventually(t, "a to notice the cut", func() bool { return !a.Session().Healthy() })
	if _, err := a.Names().Get(ctx, "short"); !errors.Is(err, names.ErrUnavailable) {
		t.Fatalf("a's get while cut off: %v, want ErrUnavailable", err)
	}
	if r, err := b.Names().Get(ctx, "short"); err != nil || r != ref {
		t.Fatalf("b's get while a is cut off = %v, %v", r, err)
	}
	k.setCut(false)
	restored := time.Now()
	testkit.Eventually(t, "a to be back", func() bool {
		_, err := a.Names().Get(ctx, "short")
		return err == nil
	})
	t.Logf("a was back %v after the link was restored", time.Since(restored).Round(time.Millisecond))
	if l := a.Session().Lease(); l != lease {
		t.Fatalf("a's lease changed from %x to %x", lease, l)
	}
	if r, err := b.Names().Get(ctx, "short"); err != nil || r != ref {
		t.Fatalf("b's get after the cut = %v, %v", r, err)
	}
	select {
	case n := <-lost:
		t.Fatalf("OnLost told of %s", n)
	default:
	}
}

// TestStalledLinkStopsReads: a machine whose link to etcd stalls, so that
// its renewals hang rather than fail (their OpTimeout here far past the
// TTL), stops serving its cached names once its lease has gone
// unconfirmed for the TTL: past that, the lease may have expired, and
// the names with it.
func TestStalledLinkStopsReads(t *testing.T) {
	t.Parallel() // it mostly waits out leases
	ec := etcdtest.Start(t, etcdtest.Options{})
	ctx := testkit.Context(t)
	k := newLink(t, ec.Endpoint(0)[len("http://"):])
	const opTimeout = 20 * time.Second
	a := open(t, []string{k.endpoint()}, freshCluster(), 1, short, func(c *Config) { c.OpTimeout = opTimeout })
	if err := a.Names().Set(ctx, "stalled", wire.Iref{Machine: 1, Export: 1}, 1); err != nil {
		t.Fatal(err)
	}
	k.setStalled(true)
	stalled := time.Now()
	testkit.Eventually(t, "a's reads to stop", func() bool {
		_, err := a.Names().Get(ctx, "stalled")
		return errors.Is(err, names.ErrUnavailable)
	})
	took := time.Since(stalled)
	t.Logf("a's reads stopped %v after the stall (TTL %v)", took.Round(time.Millisecond), testTTL)
	// The TTL from the last renewal sent, itself at most a keep-alive
	// interval before the stall; a renewal that failed would take the
	// OpTimeout.
	if took > opTimeout/2 {
		t.Errorf("a served its names %v into the stall, past its lease's TTL of %v", took.Round(time.Millisecond), testTTL)
	}
	// Back, without its name if the lease did expire meanwhile.
	k.setStalled(false)
	testkit.Eventually(t, "a to be back", func() bool {
		_, err := a.Names().Get(ctx, "stalled")
		return err == nil || errors.Is(err, names.ErrNotFound)
	})
}

// TestCutLong: a machine cut off for longer than its TTL loses its names;
// another machine takes one; when the link is back the first is told of
// each loss once, holds none of them, and both read the new holder.
func TestCutLong(t *testing.T) {
	t.Parallel() // it mostly waits out leases and elections
	ec := etcdtest.Start(t, etcdtest.Options{})
	ctx := testkit.Context(t)
	cluster := freshCluster()
	k := newLink(t, ec.Endpoint(0)[len("http://"):])
	lost := make(chan string, 16)
	a := open(t, []string{k.endpoint()}, cluster, 1, short, func(c *Config) {
		c.OnLost = func(_ names.Owner, n string) { lost <- n }
	})
	b := open(t, ec.Endpoints(), cluster, 2)
	refA := wire.Iref{Machine: 1, Export: 1}
	refB := wire.Iref{Machine: 2, Export: 1}
	for _, n := range []string{"long.a", "long.b"} {
		if err := a.Names().Set(ctx, n, refA, 1); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Names().WaitFor(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	lease := a.Session().Lease()

	k.setCut(true)
	cut := time.Now()
	testkit.Eventually(t, "a's names to expire", func() bool {
		n, err := b.Names().Count(ctx, "long.a")
		m, _ := b.Names().Count(ctx, "long.b")
		return err == nil && n == 0 && m == 0
	})
	t.Logf("a's names were gone %v after the cut (TTL %v)", time.Since(cut).Round(time.Millisecond), testTTL)
	if err := b.Names().Set(ctx, "long.a", refB, 1); err != nil {
		t.Fatal(err)
	}
	k.setCut(false)

	got := map[string]bool{}
	for range 2 {
		got[testkit.Await(t, "a's OnLost", lost)] = true
	}
	if !got["long.a"] || !got["long.b"] {
		t.Fatalf("OnLost told %v", got)
	}
	testkit.Eventually(t, "a to read b's iref", func() bool {
		r, err := a.Names().Get(ctx, "long.a")
		return err == nil && r == refB
	})
	if l := a.Session().Lease(); l == lease || l == 0 {
		t.Fatalf("a's lease after the loss: %x (was %x)", l, lease)
	}
	if _, err := a.Names().Get(ctx, "long.b"); !errors.Is(err, names.ErrNotFound) {
		t.Fatalf("a's lost name long.b: %v, want ErrNotFound", err)
	}
	if err := a.Names().Remove(ctx, "long.a", 1); !errors.Is(err, names.ErrNotOwner) {
		t.Fatalf("a removes b's name: %v, want ErrNotOwner", err)
	}
	if err := a.Names().Set(ctx, "long.b", refA, 1); err != nil {
		t.Fatalf("a sets its free name again: %v", err)
	}
	select {
	case n := <-lost:
		t.Fatalf("OnLost told again: %s", n)
	default:
	}
}
