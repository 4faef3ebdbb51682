package chanos_test

// Names as capabilities (docs/security.md): reading a name shows no token;
// a private export is bound by its iref only; an export's allow-lists
// refuse the others; an iref passed in a message grants access.

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/interfaces/grant"
	"github.com/chanos/chanos/interfaces/nameservice"
	"github.com/chanos/chanos/interfaces/pingpong"
	"github.com/chanos/chanos/internal/testkit"
	"github.com/chanos/chanos/internal/testkit/testmonitor"
	"github.com/chanos/chanos/wire"
)

// joinAs makes a domain of the monitor in dir named program, until the
// test ends.
func joinAs(t *testing.T, dir, program string) *chanos.Domain {
	t.Helper()
	d, err := chanos.Join(testkit.Context(t), chanos.WithDir(dir), chanos.WithProgram(program))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// serveEcho serves pingpong on l (echo answers v+1) until the test ends.
func serveEcho(t *testing.T, l *pingpong.Listener) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		pingpong.Serve(ctx, l, childServer{})
	}()
	t.Cleanup(func() { cancel(); <-done })
}

// echo checks that c answers an echo.
func echo(t *testing.T, what string, c *pingpong.Conn, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	defer c.Close()
	if v, err := c.Echo(testkit.Context(t), 41); err != nil || v != 42 {
		t.Fatalf("%s: echo = %d, %v", what, v, err)
	}
}

func wantDenied(t *testing.T, what string, c *pingpong.Conn, err error) {
	t.Helper()
	if err == nil {
		c.Close()
	}
	if !errors.Is(err, chanos.ErrDenied) || !errors.Is(err, chanos.CodePermissionDenied) {
		t.Fatalf("%s: %v, want ErrDenied and CodePermissionDenied", what, err)
	}
}

// nsGet reads name from d's nameservice.
func nsGet(t *testing.T, d *chanos.Domain, name string) wire.Iref {
	t.Helper()
	ctx := testkit.Context(t)
	ns, err := nameservice.Connect(ctx, d, nameservice.ServiceName)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	ref, code, err := ns.Get(ctx, name)
	if err != nil || code != 0 {
		t.Fatalf("get %s: %d, %v", name, code, err)
	}
	return ref
}

// A private export is bound by its iref only; A passes its iref to B in a
// message over a chanos connection, and B binds with it, while C, who
// knows only the name (and what the nameservice shows of the iref), is
// refused. The iref is a bearer capability: B may pass it on. Withdrawing
// the export revokes it.
func TestCapabilityPassing(t *testing.T) {
	dir := testmonitor.Start(t)
	ctx := testkit.Context(t)
	a, b, c := joinAs(t, dir, "a"), joinAs(t, dir, "b"), joinAs(t, dir, "c")

	// A exports its service privately.
	secret, err := pingpong.Export(ctx, a, "secret", chanos.Private())
	if err != nil {
		t.Fatal(err)
	}
	serveEcho(t, secret)
	ref := secret.Ref()
	if !ref.HasToken() {
		t.Fatalf("the listener's iref %v has no token", ref)
	}

	// C knows the name, and what the nameservice shows: not enough.
	conn, err := pingpong.Connect(ctx, c, "secret")
	wantDenied(t, "C binds the private export by name", conn, err)
	seen := nsGet(t, c, "secret")
	if seen != ref.WithoutToken() {
		t.Fatalf("the nameservice shows %v, want %v", seen, ref.WithoutToken())
	}
	conn, err = pingpong.ConnectRef(ctx, c, seen)
	wantDenied(t, "C binds by the iref the nameservice shows", conn, err)
	forged := seen
	forged.Token[0] = 1
	conn, err = pingpong.ConnectRef(ctx, c, forged)
	wantDenied(t, "C binds by a forged iref", conn, err)
	// So does A, by name: private means by iref, for everyone.
	conn, err = pingpong.Connect(ctx, a, "secret")
	wantDenied(t, "A binds its own private export by name", conn, err)

	// B's inbox is a public export of the grant interface; A sends the
	// iref there, in a message like any other.
	inbox, err := grant.Export(ctx, b, "b.inbox")
	if err != nil {
		t.Fatal(err)
	}
	defer inbox.Close()
	toB, err := grant.Connect(ctx, a, "b.inbox")
	if err != nil {
		t.Fatal(err)
	}
	defer toB.Close()
	if err := toB.Send(ctx, &grant.Give{What: "secret", Ref: ref}); err != nil {
		t.Fatal(err)
	}
	fromA, err := inbox.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer fromA.Close()
	m, err := fromA.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	give, ok := m.(*grant.Give)
	if !ok || give.What != "secret" || give.Ref != ref {
		t.Fatalf("B received %+v", m)
	}
	conn, err = pingpong.ConnectRef(ctx, b, give.Ref)
	echo(t, "B binds by the iref A gave it", conn, err)
	// The iref binds again, as often as its holder likes.
	conn, err = pingpong.ConnectRef(ctx, b, give.Ref)
	echo(t, "B binds by the iref a second time", conn, err)
	// A bound by ref to its own export connects in its process.
	conn, err = pingpong.ConnectRef(ctx, a, ref)
	echo(t, "A binds its own private export by ref", conn, err)

	// A token is a bearer capability, not a kernel handle: whoever holds
	// it may bind, however it came. Had B given it to C, C would bind.
	conn, err = pingpong.ConnectRef(ctx, c, give.Ref)
	echo(t, "C binds by the iref B could have passed on", conn, err)

	// Withdrawing the export revokes every copy of its iref.
	if err := secret.Close(); err != nil {
		t.Fatal(err)
	}
	conn, err = pingpong.ConnectRef(ctx, b, give.Ref)
	if err == nil {
		conn.Close()
	}
	if !errors.Is(err, chanos.ErrNotFound) || !errors.Is(err, chanos.CodeNotFound) || chanos.CodeOf(err) != chanos.CodeNotFound {
		t.Fatalf("bind by the iref of a withdrawn export: %v, want ErrNotFound and CodeNotFound", err)
	}
}

// broker answers grant requests with the irefs it holds.
type broker struct {
	grant.UnimplementedServer
	refs map[string]wire.Iref
}

func (s broker) Request(ctx context.Context, what string) (wire.Iref, wire.Errval, error) {
	ref, ok := s.refs[what]
	if !ok {
		return wire.Iref{}, 1, nil
	}
	return ref, 0, nil
}

// Allow-lists: a public export stays bindable by name by anyone (the
// default), one with AllowPrograms or AllowUIDs refuses the others, by
// name or by iref. A broker whose own export is allow-listed hands a
// private export's iref to the programs it lists, and to no one else.
func TestAllowLists(t *testing.T) {
	dir := testmonitor.Start(t)
	ctx := testkit.Context(t)
	srv, friend, stranger := joinAs(t, dir, "server"), joinAs(t, dir, "friend"), joinAs(t, dir, "stranger")
	uid := uint32(os.Getuid())

	pub, err := pingpong.Export(ctx, srv, "public")
	if err != nil {
		t.Fatal(err)
	}
	serveEcho(t, pub)
	conn, err := pingpong.Connect(ctx, stranger, "public")
	echo(t, "bind of a public export by name", conn, err)
	conn, err = pingpong.ConnectRef(ctx, stranger, pub.Ref())
	echo(t, "bind of a public export by ref", conn, err)
	if seen := nsGet(t, stranger, "public"); seen.HasToken() {
		t.Fatalf("the nameservice shows a token for a public export too: %v", seen)
	}

	friends, err := pingpong.Export(ctx, srv, "friends", chanos.AllowPrograms("friend"))
	if err != nil {
		t.Fatal(err)
	}
	serveEcho(t, friends)
	conn, err = pingpong.Connect(ctx, friend, "friends")
	echo(t, "bind by a listed program", conn, err)
	conn, err = pingpong.Connect(ctx, stranger, "friends")
	wantDenied(t, "bind by a program not listed", conn, err)
	conn, err = pingpong.ConnectRef(ctx, stranger, friends.Ref())
	wantDenied(t, "bind by ref by a program not listed", conn, err)

	mine, err := pingpong.Export(ctx, srv, "mine", chanos.AllowUIDs(uid))
	if err != nil {
		t.Fatal(err)
	}
	serveEcho(t, mine)
	conn, err = pingpong.Connect(ctx, stranger, "mine")
	echo(t, "bind by a listed uid", conn, err)
	theirs, err := pingpong.Export(ctx, srv, "theirs", chanos.AllowUIDs(uid+1, uid+2))
	if err != nil {
		t.Fatal(err)
	}
	conn, err = pingpong.Connect(ctx, friend, "theirs")
	wantDenied(t, "bind by a uid not listed", conn, err)
	theirs.Close()

	// The broker: its export lets only "friend" bind; it hands out the
	// iref of a private export.
	vault, err := pingpong.Export(ctx, srv, "vault", chanos.Private())
	if err != nil {
		t.Fatal(err)
	}
	serveEcho(t, vault)
	bl, err := grant.Export(ctx, srv, "broker", chanos.AllowPrograms("friend"))
	if err != nil {
		t.Fatal(err)
	}
	go grant.Serve(ctx, bl, broker{refs: map[string]wire.Iref{"vault": vault.Ref()}})
	defer bl.Close()
	if _, err := grant.Connect(ctx, stranger, "broker"); !errors.Is(err, chanos.ErrDenied) {
		t.Fatalf("a stranger binds the broker: %v, want ErrDenied", err)
	}
	gc, err := grant.Connect(ctx, friend, "broker")
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	ref, code, err := gc.Request(ctx, "vault")
	if err != nil || code != 0 {
		t.Fatalf("request vault: %d, %v", code, err)
	}
	conn, err = pingpong.ConnectRef(ctx, friend, ref)
	echo(t, "bind by the iref the broker gave", conn, err)
	conn, err = pingpong.Connect(ctx, friend, "vault")
	wantDenied(t, "bind of the private vault by name", conn, err)

	// Options that break the bounds fail before the monitor is asked.
	many := make([]uint32, 17)
	if _, err := pingpong.Export(ctx, srv, "x", chanos.AllowUIDs(many...)); err == nil {
		t.Fatal("an export with 17 allowed uids")
	}
	for _, p := range []string{"", "a\nb", string(make([]byte, 257))} {
		if _, err := pingpong.Export(ctx, srv, "x", chanos.AllowPrograms(p)); err == nil {
			t.Fatalf("an export allowing program %q", p)
		}
	}
	if _, err := chanos.ConnectRef(ctx, srv, wire.Iref{}, pingpong.Interface); !errors.Is(err, chanos.ErrInvalidName) {
		t.Fatalf("ConnectRef of the null iref: %v", err)
	}

	// ps shows the policy.
	snap, err := srv.Ps(ctx)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]chanos.ExportInfo{}
	for _, d := range snap.Domains {
		if d.ID == srv.ID() {
			for _, e := range d.Exports {
				seen[e.Name] = e
			}
		}
	}
	if e := seen["vault"]; !e.Private || len(e.AllowPrograms) != 0 {
		t.Fatalf("ps: vault %+v", e)
	}
	if e := seen["friends"]; e.Private || len(e.AllowPrograms) != 1 || e.AllowPrograms[0] != "friend" {
		t.Fatalf("ps: friends %+v", e)
	}
	if e := seen["public"]; e.Private || e.AllowPrograms != nil || e.AllowUIDs != nil {
		t.Fatalf("ps: public %+v", e)
	}
}
