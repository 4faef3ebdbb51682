package net_test

import (
	"errors"
	"testing"
	"time"

	"github.com/chanos/chanos/interconnect"
	cnet "github.com/chanos/chanos/interconnect/net"
	"github.com/chanos/chanos/internal/testkit"
)

// Grants: one listener accepts each granted connection once, with its
// own certificate; a grant not yet made is waited for a moment; the
// oldest grants go beyond the bound, and unused ones after their time to
// live.
func TestGrants(t *testing.T) {
	testkit.NoLeaks(t)
	ctx := testkit.Context(t)
	g := cnet.NewGrants(time.Hour, 2, time.Second)
	defer g.Close()
	L := listen(t, &cnet.Options{TLS: g.TLS()})
	newID := func() *cnet.Identity {
		id, err := cnet.NewIdentity()
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	srv, cli := newID(), newID()
	dial := func(name string, cli, srv *cnet.Identity) (*cnet.Link, error) {
		return cnet.Dial(ctx, L.Addr().String(), &cnet.Options{TLS: &cnet.TLS{Identity: cli, Peer: srv.Fingerprint, ServerName: name}})
	}

	// Granted after the client dials: the handshake waits for it.
	type dialed struct {
		l   *cnet.Link
		err error
	}
	done := make(chan dialed, 1)
	go func() {
		cl, err := dial("a", cli, srv)
		done <- dialed{cl, err}
	}()
	time.Sleep(100 * time.Millisecond)
	g.Add("a", srv, cli.Fingerprint, false, 7)
	r := <-done
	if r.err != nil {
		t.Fatalf("a dial before its grant: %v", r.err)
	}
	sl, err := L.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := g.Take(sl.ServerName()); !ok || v != 7 {
		t.Errorf("Take(%q) = %v, %v; want 7", sl.ServerName(), v, ok)
	}
	r.l.Close()
	sl.Close()
	// Once only.
	if _, err := dial("a", cli, srv); !errors.Is(err, cnet.ErrAuth) && err == nil {
		t.Error("a grant used twice")
	}

	// Beyond the bound, the oldest goes.
	ids := map[string][2]*cnet.Identity{}
	for _, name := range []string{"b", "c", "d"} {
		s, c := newID(), newID()
		ids[name] = [2]*cnet.Identity{s, c}
		g.Add(name, s, c.Fingerprint, false, name)
	}
	if _, err := dial("b", ids["b"][1], ids["b"][0]); err == nil {
		t.Error("the oldest grant beyond the bound was kept")
	}
	cl, err := dial("d", ids["d"][1], ids["d"][0])
	if err != nil {
		t.Fatalf("the newest grant: %v", err)
	}
	if sl, err = L.Accept(ctx); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	sl.Close()

	// Unused past its time to live, a grant goes (at the next Add).
	g2 := cnet.NewGrants(10*time.Millisecond, 10, 0)
	defer g2.Close()
	g2.Add("old", srv, cli.Fingerprint, false, 1)
	time.Sleep(20 * time.Millisecond)
	g2.Add("new", srv, cli.Fingerprint, false, 2)
	if _, ok := g2.Take("old"); ok {
		t.Error("an expired grant was kept")
	}
	if v, ok := g2.Take("new"); !ok || v != 2 {
		t.Errorf("Take(new) = %v, %v", v, ok)
	}
}

// A granted connection resumes after its TCP connection breaks: the
// identity of its name outlives its admission, until the link is gone.
func TestGrantsResume(t *testing.T) {
	testkit.NoLeaks(t)
	ctx := testkit.Context(t)
	g := cnet.NewGrants(time.Hour, 16, time.Second)
	defer g.Close()
	o := &cnet.Options{TLS: g.TLS(), RedialMin: time.Millisecond, RedialMax: 10 * time.Millisecond}
	L := listen(t, o)
	p := proxy(t, L)
	srv, _ := cnet.NewIdentity()
	cli, _ := cnet.NewIdentity()
	g.Add("r", srv, cli.Fingerprint, false, nil)
	cl, err := cnet.Dial(ctx, p.Addr(), &cnet.Options{TLS: &cnet.TLS{Identity: cli, Peer: srv.Fingerprint, ServerName: "r"},
		RedialMin: time.Millisecond, RedialMax: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	sl, err := L.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := g.Take(sl.ServerName()); !ok {
		t.Fatal("no grant")
	}
	g.ForgetWhenGone(sl)
	p.CutRandom(8<<10, 64<<10)
	streamBothWays(t, cl, sl, 200, 2000)
	if cl.Resumes() == 0 {
		t.Error("no resume happened")
	}
	t.Logf("%d resumes, %d cuts, err %v %v", cl.Resumes(), p.Cuts(), cl.Err(), sl.Err())
	cl.Close()
	sl.Close()
}

// A connection the accepting side ended while the dialing side could not
// hear of it (the network stalled) is refused as unknown at the dialing
// side's first redial once the network is back: the forgotten grant's
// identity still completes the handshake, so the refusal comes inside
// TLS, and the link ends at once rather than when its grace runs out.
func TestGrantsForgottenResumeRefused(t *testing.T) {
	testkit.NoLeaks(t)
	ctx := testkit.Context(t)
	g := cnet.NewGrants(time.Hour, 16, time.Second)
	defer g.Close()
	L := listen(t, &cnet.Options{TLS: g.TLS()})
	p := proxy(t, L)
	srv, _ := cnet.NewIdentity()
	cli, _ := cnet.NewIdentity()
	g.Add("f", srv, cli.Fingerprint, false, nil)
	const grace = time.Minute
	cl, err := cnet.Dial(ctx, p.Addr(), &cnet.Options{TLS: &cnet.TLS{Identity: cli, Peer: srv.Fingerprint, ServerName: "f"},
		Grace: grace, RedialMin: time.Millisecond, RedialMax: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	sl, err := L.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := g.Take(sl.ServerName()); !ok {
		t.Fatal("no grant")
	}
	p.Stall()
	sl.End(errors.New("the dialing machine left the cluster"))
	<-sl.Gone()
	g.Forget(sl.ServerName())
	p.Resume()
	start := time.Now()
	p.Cut()
	select {
	case <-cl.Gone():
	case <-time.After(grace / 2):
		t.Fatalf("the dialing side still redials %v after the cut (err %v)", time.Since(start), cl.Err())
	}
	if err := cl.Err(); !errors.Is(err, interconnect.ErrPeerDied) {
		t.Errorf("the dialing side ended with %v, want peer died", err)
	}
	t.Logf("ended %v after the cut: %v", time.Since(start), cl.Err())
}

// Forgotten grants are kept within the grants' bound, the oldest going
// first: of three connections forgotten in turn under a bound of two,
// the two forgotten last are refused as unknown at their first resume,
// as TestGrantsForgottenResumeRefused's is, while the first, whose
// identity has gone, fails its resumes' handshakes and redials until its
// grace runs out: it ends as network lost, the listener goes on serving
// the others, and nothing breaks.
func TestGrantsForgottenBounded(t *testing.T) {
	testkit.NoLeaks(t)
	ctx := testkit.Context(t)
	g := cnet.NewGrants(time.Hour, 2, 50*time.Millisecond)
	defer g.Close()
	L := listen(t, &cnet.Options{TLS: g.TLS()})
	p := proxy(t, L)
	type conn struct{ cl, sl *cnet.Link }
	names := []string{"oldest", "middle", "newest"}
	conns := map[string]conn{}
	for _, name := range names {
		srv, cli, _, _ := identities(t)
		g.Add(name, srv, cli.Fingerprint, false, nil)
		// The evicted one's resumes can only fail: a short grace ends
		// it. The others' is long, so that only their refusal ends them.
		grace := time.Minute
		if name == "oldest" {
			grace = 500 * time.Millisecond
		}
		cl, err := cnet.Dial(ctx, p.Addr(), &cnet.Options{TLS: &cnet.TLS{Identity: cli, Peer: srv.Fingerprint, ServerName: name},
			Grace: grace, RedialMin: time.Millisecond, RedialMax: 10 * time.Millisecond})
		if err != nil {
			t.Fatalf("dial %s: %v", name, err)
		}
		defer cl.Close()
		sl, err := L.Accept(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := g.Take(sl.ServerName()); !ok || sl.ServerName() != name {
			t.Fatalf("accepted %q, want the grant of %q", sl.ServerName(), name)
		}
		conns[name] = conn{cl, sl}
	}
	p.Stall()
	for _, name := range names {
		sl := conns[name].sl
		sl.End(errors.New("the dialing machine left the cluster"))
		<-sl.Gone()
		g.Forget(name)
	}
	p.Resume()
	p.Cut()
	for _, c := range []struct {
		name string
		want error
	}{
		{"newest", interconnect.ErrPeerDied},
		{"middle", interconnect.ErrPeerDied},
		{"oldest", interconnect.ErrNetworkLost},
	} {
		cl := conns[c.name].cl
		testkit.Await(t, c.name+"'s end", cl.Gone())
		if err := cl.Err(); !errors.Is(err, c.want) {
			t.Errorf("%s ended with %v, want %v", c.name, err, c.want)
		}
	}
}
