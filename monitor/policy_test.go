package monitor

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	proto "github.com/chanos/chanos/internal/protocol/monitor"
	"github.com/chanos/chanos/internal/testkit"
	"github.com/chanos/chanos/names"
	"github.com/chanos/chanos/wire"
)

// bound checks a successful bind of srv's export: the reply names the
// export without its token, and srv gets the incoming connection. The
// descriptors of both are closed.
func bound(t *testing.T, what string, r *proto.BindReply, err error, srv *Client, ref wire.Iref) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	closeCaps(r.Fds)
	if r.Ref != ref.WithoutToken() || r.Ref.HasToken() {
		t.Fatalf("%s: the reply's iref is %v, want the export's without its token", what, r.Ref)
	}
	if r.Via == proto.InterconnectUMP {
		in := <-srv.Incoming()
		closeCaps(in.Fds)
		if in.ConnID != r.ConnID || in.Ref != ref {
			t.Fatalf("%s: incoming %+v, reply %+v", what, in, r)
		}
	}
}

// denied checks that a bind was refused with status denied, and that the
// error says why (want), and names no token.
func denied(t *testing.T, what string, r *proto.BindReply, err error, want string, tokens ...wire.Iref) {
	t.Helper()
	if err == nil {
		closeCaps(r.Fds)
	}
	wantStatus(t, what, err, proto.StatusDenied)
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("%s: %v; want it to say %q", what, err, want)
	}
	for _, ref := range tokens {
		if strings.Contains(err.Error(), hex.EncodeToString(ref.Token[:])) {
			t.Fatalf("%s: the error shows a token: %v", what, err)
		}
	}
}

// Reading a name never shows the token that binds it: get, wait_for, a
// watch's changed messages, list, the bind reply and ps give the iref
// without its token, which binds nothing.
func TestNamesShowNoToken(t *testing.T) {
	tm := startMonitor(t, Config{})
	ctx := testkit.Context(t)
	srv := tm.dial(t, "server")
	other := tm.dial(t, "other")
	ns, err := other.Nameservice(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	if err := ns.Watch(ctx, "svc"); err != nil {
		t.Fatal(err)
	}
	waited := make(chan wire.Iref, 1)
	go func() {
		r, code, err := ns.WaitFor(ctx, "svc")
		if err != nil || code != NSOK {
			t.Errorf("wait_for: %d, %v", code, err)
		}
		waited <- r
	}()
	testkit.Eventually(t, "wait_for to wait", func() bool { return nsPending(tm.Monitor, other.DomainID()) == 1 })

	ref, err := srv.Export(ctx, "svc", "kv", 1024)
	if err != nil {
		t.Fatal(err)
	}
	if !ref.HasToken() {
		t.Fatalf("export gave %v: an iref without its token", ref)
	}
	tok := hex.EncodeToString(ref.Token[:])
	want := ref.WithoutToken()
	got, code, err := ns.Get(ctx, "svc")
	if err != nil || code != NSOK || got != want {
		t.Fatalf("get: %v, %d, %v; want %v", got, code, err, want)
	}
	if got := <-waited; got != want {
		t.Fatalf("wait_for: %v, want %v", got, want)
	}
	if ch := <-ns.Changed(); ch.Name != "svc" || ch.Ref != want || ch.Removed {
		t.Fatalf("changed %+v, want svc %v", ch, want)
	}
	list, err := ns.Names(ctx, "")
	// The monitor owns two names: its nameservice's and its spawn service's.
	if err != nil || strings.Join(list, ",") != "nameservice,"+tm.spawnd.name+",svc" {
		t.Fatalf("list: %q, %v", list, err)
	}
	// The monitor's own nameservice's iref carries no token either.
	nsRef, _, _ := ns.Get(ctx, "nameservice")
	if nsRef.HasToken() {
		t.Fatalf("get nameservice: %v", nsRef)
	}

	// What get gave binds nothing.
	r, err := other.BindRef(ctx, got, "kv")
	denied(t, "bind by the iref get gave", r, err, "wrong token", ref)
	r, err = other.Bind(ctx, "svc", "kv", false)
	bound(t, "bind by name", r, err, srv, ref)

	// ps names the export, and never its token.
	js, err := other.PsJSON(ctx)
	if err != nil || bytes.Contains(js, []byte(tok)) || !bytes.Contains(js, []byte(`"name":"svc"`)) {
		t.Fatalf("ps: %s, %v", js, err)
	}

	// The removal's changed message has no token either.
	if err := srv.Withdraw(ctx, "svc"); err != nil {
		t.Fatal(err)
	}
	if ch := <-ns.Changed(); ch.Name != "svc" || ch.Ref != want || !ch.Removed {
		t.Fatalf("changed %+v, want svc %v removed", ch, want)
	}
	if strings.Contains(tm.logs.String(), tok) {
		t.Fatalf("the monitor's log shows the token %s", tok)
	}
}

// A bind by name of a public export works as ever; a bind by its iref
// too. A bind by a forged iref (its token zeroed, changed, or that of
// another export) is denied; one of an export that is not there is
// not_found.
func TestBindByRef(t *testing.T) {
	tm := startMonitor(t, Config{})
	ctx := testkit.Context(t)
	srv := tm.dial(t, "server")
	cli := tm.dial(t, "client")
	ref, err := srv.Export(ctx, "pub", "kv", 1024)
	if err != nil {
		t.Fatal(err)
	}
	ref2, err := srv.Export(ctx, "pub2", "kv", 1024)
	if err != nil {
		t.Fatal(err)
	}
	r, err := cli.Bind(ctx, "pub", "kv", false)
	bound(t, "bind by name", r, err, srv, ref)
	r, err = cli.BindRef(ctx, ref, "kv")
	bound(t, "bind by ref", r, err, srv, ref)
	r, err = srv.BindRef(ctx, ref, "kv")
	if err != nil || r.Via != proto.InterconnectLocal || r.Ref != ref.WithoutToken() {
		t.Fatalf("bind by ref to the domain's own export: %+v, %v", r, err)
	}
	_, err = cli.BindRef(ctx, ref, "pingpong")
	wantStatus(t, "bind by ref with the wrong interface", err, proto.StatusMismatch)

	flipped := ref
	flipped.Token[15] ^= 1
	swapped := ref
	swapped.Token = ref2.Token
	for _, c := range []struct {
		what string
		ref  wire.Iref
	}{
		{"the token zeroed", ref.WithoutToken()},
		{"a bit of the token flipped", flipped},
		{"another export's token", swapped},
	} {
		r, err := cli.BindRef(ctx, c.ref, "kv")
		denied(t, "bind by an iref with "+c.what, r, err, "wrong token", ref, ref2)
	}
	gone := ref
	gone.Export = 999
	_, err = cli.BindRef(ctx, gone, "kv")
	wantStatus(t, "bind by the iref of no export", err, proto.StatusNotFound)
	elsewhere := ref
	elsewhere.Machine++
	_, err = cli.BindRef(ctx, elsewhere, "kv")
	wantStatus(t, "bind by an iref of another machine", err, proto.StatusNoRoute)
	err = cli.call(ctx, &proto.BindCall{Name: "pub", Iface: "kv", Target: ref}, &proto.BindReply{})
	wantStatus(t, "bind by name and iref at once", err, proto.StatusInvalid)
	err = cli.call(ctx, &proto.BindCall{Iface: "kv"}, &proto.BindReply{})
	wantStatus(t, "bind by neither", err, proto.StatusInvalid)

	// An alias set through the nameservice binds only if whoever set it
	// held the iref: the token-less iref get gives makes a name that
	// binds nothing; the whole iref, a name that binds.
	ns, err := cli.Nameservice(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	read, _, _ := ns.Get(ctx, "pub")
	if code, err := ns.Set(ctx, "alias.read", read); err != nil || code != NSOK {
		t.Fatalf("set alias.read: %d, %v", code, err)
	}
	r, err = cli.Bind(ctx, "alias.read", "kv", false)
	denied(t, "bind by an alias of the iref get gave", r, err, "wrong token", ref)
	if code, err := ns.Set(ctx, "alias.held", ref); err != nil || code != NSOK {
		t.Fatalf("set alias.held: %d, %v", code, err)
	}
	r, err = cli.Bind(ctx, "alias.held", "kv", false)
	bound(t, "bind by an alias of the whole iref", r, err, srv, ref)

	// Withdrawing the export revokes its iref.
	if err := srv.Withdraw(ctx, "pub"); err != nil {
		t.Fatal(err)
	}
	_, err = cli.BindRef(ctx, ref, "kv")
	wantStatus(t, "bind by the iref of a withdrawn export", err, proto.StatusNotFound)
}

// A private export is bound by its iref only: by name, it is denied, even
// to its exporter and through an alias that carries the whole iref.
func TestPrivateExport(t *testing.T) {
	tm := startMonitor(t, Config{})
	ctx := testkit.Context(t)
	srv := tm.dial(t, "server")
	cli := tm.dial(t, "client")
	ref, err := srv.ExportCall(ctx, &proto.ExportCall{Name: "secret", Iface: "kv", MaxFrame: 1024, Private: true})
	if err != nil {
		t.Fatal(err)
	}
	r, err := cli.Bind(ctx, "secret", "kv", false)
	denied(t, "bind of a private export by name", r, err, "private", ref)
	r, err = cli.Bind(ctx, "secret", "pingpong", false)
	denied(t, "bind of a private export by name, with another interface", r, err, "private", ref)
	r, err = srv.Bind(ctx, "secret", "kv", false)
	denied(t, "bind of its own private export by name", r, err, "private", ref)
	r, err = cli.BindRef(ctx, ref, "kv")
	bound(t, "bind of a private export by ref", r, err, srv, ref)
	r, err = cli.BindRef(ctx, ref.WithoutToken(), "kv")
	denied(t, "bind of a private export by its iref without the token", r, err, "wrong token", ref)

	ns, err := srv.Nameservice(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	if code, err := ns.Set(ctx, "secret.alias", ref); err != nil || code != NSOK {
		t.Fatalf("set secret.alias: %d, %v", code, err)
	}
	r, err = cli.Bind(ctx, "secret.alias", "kv", false)
	denied(t, "bind of a private export by an alias", r, err, "private", ref)

	snap, err := cli.Ps(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range snap.Domains {
		if d.ID == srv.DomainID() && (len(d.Exports) != 1 || !d.Exports[0].Private) {
			t.Fatalf("ps: %+v", d.Exports)
		}
	}
}

// An export's allow-lists let only the listed programs and uids bind it,
// by name or by iref.
func TestAllowLists(t *testing.T) {
	tm := startMonitor(t, Config{})
	ctx := testkit.Context(t)
	srv := tm.dial(t, "server")
	friend := tm.dial(t, "friend")
	stranger := tm.dial(t, "stranger")
	uid := uint32(os.Getuid())

	progRef, err := srv.ExportCall(ctx, &proto.ExportCall{Name: "byprog", Iface: "kv", MaxFrame: 1024, Programs: []byte("someone\nfriend")})
	if err != nil {
		t.Fatal(err)
	}
	r, err := friend.Bind(ctx, "byprog", "kv", false)
	bound(t, "bind by a listed program", r, err, srv, progRef)
	r, err = stranger.Bind(ctx, "byprog", "kv", false)
	denied(t, "bind by a program not listed", r, err, `program "stranger" is not among`, progRef)
	r, err = stranger.BindRef(ctx, progRef, "kv")
	denied(t, "bind by ref by a program not listed", r, err, `program "stranger" is not among`, progRef)

	uidRef, err := srv.ExportCall(ctx, &proto.ExportCall{Name: "byuid", Iface: "kv", MaxFrame: 1024, Uids: []uint32{uid}})
	if err != nil {
		t.Fatal(err)
	}
	r, err = stranger.Bind(ctx, "byuid", "kv", false)
	bound(t, "bind by a listed uid", r, err, srv, uidRef)
	otherRef, err := srv.ExportCall(ctx, &proto.ExportCall{Name: "otheruid", Iface: "kv", MaxFrame: 1024, Uids: []uint32{uid + 1}})
	if err != nil {
		t.Fatal(err)
	}
	r, err = friend.Bind(ctx, "otheruid", "kv", false)
	denied(t, "bind by a uid not listed", r, err, "is not among the export's allowed uids", otherRef)
	r, err = friend.BindRef(ctx, otherRef, "kv")
	denied(t, "bind by ref by a uid not listed", r, err, "is not among the export's allowed uids", otherRef)

	// Both lists, and private: all must let the caller through.
	allRef, err := srv.ExportCall(ctx, &proto.ExportCall{Name: "all", Iface: "kv", MaxFrame: 1024, Private: true, Uids: []uint32{uid}, Programs: []byte("friend")})
	if err != nil {
		t.Fatal(err)
	}
	r, err = friend.Bind(ctx, "all", "kv", false)
	denied(t, "bind by name of a private export with lists", r, err, "private", allRef)
	r, err = stranger.BindRef(ctx, allRef, "kv")
	denied(t, "bind by ref by a program not listed", r, err, "not among the export's allowed programs", allRef)
	r, err = friend.BindRef(ctx, allRef, "kv")
	bound(t, "bind by ref by a listed program", r, err, srv, allRef)

	for _, bad := range []string{"a\n\nb", "\nx", "x\n", strings.Repeat("p", proto.MaxHelloProgramLen+1)} {
		_, err := srv.ExportCall(ctx, &proto.ExportCall{Name: "bad", Iface: "kv", MaxFrame: 1024, Programs: []byte(bad)})
		wantStatus(t, "export with programs "+bad, err, proto.StatusInvalid)
	}

	snap, err := friend.Ps(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range snap.Domains {
		if d.ID != srv.DomainID() {
			continue
		}
		for _, e := range d.Exports {
			if e.Name == "byprog" && strings.Join(e.AllowPrograms, ",") != "someone,friend" {
				t.Fatalf("ps: byprog %+v", e)
			}
			if e.Name == "byuid" && (len(e.AllowUIDs) != 1 || e.AllowUIDs[0] != uid || e.Private) {
				t.Fatalf("ps: byuid %+v", e)
			}
		}
	}
}

func TestSameToken(t *testing.T) {
	a := iref(1)
	b := a
	if !sameToken(a, b) {
		t.Fatal("equal tokens differ")
	}
	for i := range b.Token {
		c := a
		c.Token[i] ^= 0x80
		if sameToken(a, c) {
			t.Fatalf("tokens differing in byte %d are the same", i)
		}
	}
}

// An export without a name must be private; it enters no names store, is
// bound by its iref only, and is withdrawn by "#ID".
func TestAnonymousExport(t *testing.T) {
	tm := startMonitor(t, Config{Logger: discardLogger()})
	ctx := testkit.Context(t)
	srv := tm.dial(t, "server")
	defer srv.Close()
	cli := tm.dial(t, "client")
	defer cli.Close()
	_, err := srv.ExportCall(ctx, &proto.ExportCall{Iface: "kv", MaxFrame: 1024})
	wantStatus(t, "an export without a name, public", err, proto.StatusInvalid)
	ref, err := srv.ExportCall(ctx, &proto.ExportCall{Iface: "kv", MaxFrame: 1024, Private: true})
	if err != nil {
		t.Fatal(err)
	}
	if names, _, err := tm.store.List(ctx, "", "", 100); err != nil || len(names) != 2 { // the nameservice and spawnd
		t.Errorf("names after an anonymous export: %v, %v", names, err)
	}
	if _, err := cli.BindRef(ctx, ref, "kv"); err != nil {
		t.Fatalf("bind by the anonymous export's iref: %v", err)
	}
	if err := srv.Withdraw(ctx, fmt.Sprintf("#%d", ref.Export)); err != nil {
		t.Fatalf("withdraw #%d: %v", ref.Export, err)
	}
	_, err = cli.BindRef(ctx, ref, "kv")
	wantStatus(t, "bind of a withdrawn anonymous export", err, proto.StatusNotFound)
}

// An export handed over and not adopted within Config.HandOverTTL is
// withdrawn with its name, and the bind that waited for its adopter fails
// with not_found; the domain that handed it over can no longer withdraw
// it, and a grant for it adopts nothing.
func TestHandOverExpires(t *testing.T) {
	tm := startMonitor(t, Config{Logger: discardLogger(), HandOverTTL: 200 * time.Millisecond})
	ctx := testkit.Context(t)
	srv := tm.dial(t, "server")
	defer srv.Close()
	cli := tm.dial(t, "client")
	defer cli.Close()
	ref, err := srv.Export(ctx, "gate", "kv", 1024)
	if err != nil {
		t.Fatal(err)
	}
	var r proto.HandOverReply
	if err := srv.call(ctx, &proto.HandOverCall{Export: ref.Export}, &r); err != nil {
		t.Fatal(err)
	}
	var again proto.HandOverReply
	wantStatus(t, "a second hand_over", srv.call(ctx, &proto.HandOverCall{Export: ref.Export}, &again), proto.StatusNotFound)
	_, err = cli.Bind(ctx, "gate", "kv", false)
	wantStatus(t, "a bind that waited for an adopter that never came", err, proto.StatusNotFound)
	if _, err := tm.store.Get(ctx, "gate"); !errors.Is(err, names.ErrNotFound) {
		t.Errorf("the name after the hand-over expired: %v, want not found", err)
	}
	var ar proto.AdoptReply
	wantStatus(t, "adopt after expiry", cli.call(ctx, &proto.AdoptCall{Grant: r.Grant, Iface: "kv"}, &ar), proto.StatusNotFound)
}
