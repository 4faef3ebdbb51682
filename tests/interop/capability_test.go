package interop

// Names as capabilities across C and Go (docs/security.md): private
// exports bound by iref only, allow-lists by program and uid, and irefs
// passed in grant messages between C and Go domains.

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/interfaces/grant"
	"github.com/chanos/chanos/interfaces/pingpong"
	"github.com/chanos/chanos/internal/testkit"
	"github.com/chanos/chanos/wire"
)

// plusOne answers echo with its argument plus one.
type plusOne struct{ pingpong.UnimplementedServer }

func (plusOne) Echo(ctx context.Context, v uint64) (uint64, error) { return v + 1, nil }

// mirror serves pingpong as the example server does, for the C client.
type mirror struct{ pingpong.UnimplementedServer }

func (mirror) Ping(ctx context.Context, from *pingpong.Client, m pingpong.Ping) error {
	return from.Send(ctx, &pingpong.Pong{ClientID: m.ClientID, MsgID: m.MsgID})
}
func (mirror) Echo(ctx context.Context, v uint64) (uint64, error)         { return v, nil }
func (mirror) Bounce(ctx context.Context, payload []byte) ([]byte, error) { return payload, nil }

// parseRef reads an iref as chanos_iref_format writes it.
func parseRef(t *testing.T, s string) wire.Iref {
	t.Helper()
	parts := strings.Split(s, ":")
	var r wire.Iref
	if len(parts) != 3 || len(parts[0]) != 16 || len(parts[1]) != 16 || len(parts[2]) != 32 {
		t.Fatalf("not an iref: %q", s)
	}
	var err error
	if r.Machine, err = strconv.ParseUint(parts[0], 16, 64); err != nil {
		t.Fatal(err)
	}
	if r.Export, err = strconv.ParseUint(parts[1], 16, 64); err != nil {
		t.Fatal(err)
	}
	if _, err := hex.Decode(r.Token[:], []byte(parts[2])); err != nil {
		t.Fatal(err)
	}
	return r
}

// joinAs makes the test a domain of the monitor in dir named program.
func joinAs(t *testing.T, dir, program string) *chanos.Domain {
	t.Helper()
	d, err := chanos.Join(context.Background(), chanos.WithDir(dir), chanos.WithProgram(program))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// echoes checks that c, with err, answers an echo (the C server answers
// its argument).
func echoes(t *testing.T, what string, c *pingpong.Conn, err error, want uint64) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Limit)
	defer cancel()
	if v, err := c.Echo(ctx, 41); err != nil || v != want {
		t.Fatalf("%s: echo 41 = %d, %v; want %d", what, v, err, want)
	}
}

func denied(t *testing.T, what string, c *pingpong.Conn, err error) {
	t.Helper()
	if err == nil {
		c.Close()
	}
	if !errors.Is(err, chanos.ErrDenied) {
		t.Fatalf("%s: %v, want ErrDenied", what, err)
	}
}

// A C server exports privately: binds by name are denied to Go and C
// clients alike, the nameservice shows its iref without the token, and
// its iref (handed over as text on stdin) binds from Go and from C; the
// iref without its token binds nothing.
func TestCPrivateExport(t *testing.T) {
	srv, cli := cProg(t, "pingpong_server"), cProg(t, "pingpong_client")
	dir := startMonitor(t)
	p := start(t, dir, "serving", srv, "-name", "csecret", "-private", "-print-ref")
	text, ok := strings.CutPrefix(p.Line(t), "iref ")
	if !ok {
		t.Fatal("the C server printed no iref")
	}
	ref := parseRef(t, text)
	ctx := context.Background()
	d := join(t, dir)

	c, err := pingpong.Connect(ctx, d, "csecret")
	denied(t, "Go binds the C server's private export by name", c, err)
	if out := runExit(t, dir, 1, cli, "-name", "csecret", "-n", "10"); !strings.Contains(out, "pingpong_client: connect csecret: monitor: denied") {
		t.Errorf("C client by name: the output names no denial:\n%s", out)
	}
	ns := nsClient(t, dir)
	seen, code, err := ns.Get(ctx, "csecret")
	if err != nil || code != 0 || seen != ref.WithoutToken() {
		t.Fatalf("get csecret = %v, %d, %v; want %v", seen, code, err, ref.WithoutToken())
	}
	c, err = pingpong.ConnectRef(ctx, d, seen)
	denied(t, "Go binds by the iref the nameservice shows", c, err)

	c, err = pingpong.ConnectRef(ctx, d, ref)
	echoes(t, "Go binds the C server's private export by its iref", c, err, 41)

	byRef := spawn(t, dir, cli, "-ref-stdin", "-n", "10")
	fmt.Fprintln(byRef.stdin, text)
	if l := byRef.Line(t); !strings.HasPrefix(l, "connected to (by iref)") {
		t.Fatalf("the C client by iref printed %q", l)
	}
	if !byRef.wait(t, 0) {
		t.FailNow()
	}
	forged := spawn(t, dir, cli, "-ref-stdin", "-n", "10")
	fmt.Fprintln(forged.stdin, withoutToken(text))
	forged.stdin.Close()
	if !forged.wait(t, 1) {
		t.FailNow()
	}
	if s := forged.stderr.String(); !strings.Contains(s, "monitor: denied") {
		t.Errorf("C client by a token-less iref: stderr names no denial:\n%s", s)
	}
}

// Allow-lists between C and Go: a C server that lets one program bind
// refuses the others, C or Go; a Go server that lets the C client's
// program bind refuses a Go domain; a uid that is not the caller's
// refuses everyone.
func TestCAllowLists(t *testing.T) {
	srv, cli := cProg(t, "pingpong_server"), cProg(t, "pingpong_client")
	dir := startMonitor(t)
	ctx := context.Background()
	uid := os.Getuid()

	start(t, dir, "serving", srv, "-name", "cfriends", "-allow-program", "interop friend")
	c, err := pingpong.Connect(ctx, joinAs(t, dir, "interop friend"), "cfriends")
	echoes(t, "a listed Go program binds the C server", c, err, 41)
	c, err = pingpong.Connect(ctx, joinAs(t, dir, "interop stranger"), "cfriends")
	denied(t, "a Go program not listed binds the C server", c, err)
	if out := runExit(t, dir, 1, cli, "-name", "cfriends", "-n", "10"); !strings.Contains(out, "monitor: denied") {
		t.Errorf("a C client not listed: the output names no denial:\n%s", out)
	}

	gd := join(t, dir)
	l, err := pingpong.Export(ctx, gd, "gofriends", chanos.AllowPrograms("pingpong_client (C)"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go pingpong.Serve(ctx, l, mirror{})
	checkClientOutput(t, run(t, dir, cli, "-name", "gofriends", "-n", "1000"))
	c, err = pingpong.Connect(ctx, joinAs(t, dir, "interop go client"), "gofriends")
	denied(t, "a Go program not listed binds the Go server", c, err)

	start(t, dir, "serving", srv, "-name", "cuid", "-allow-uid", strconv.Itoa(uid))
	checkClientOutput(t, run(t, dir, cli, "-name", "cuid", "-n", "1000"))
	start(t, dir, "serving", srv, "-name", "cotheruid", "-allow-uid", strconv.Itoa(uid+1))
	c, err = pingpong.Connect(ctx, gd, "cotheruid")
	denied(t, "Go binds a C server that lists another uid", c, err)
}

// Irefs passed in messages between C and Go: a Go domain gives a C domain
// the iref of its private export in a grant message, and the C domain
// binds with it (and not by name, nor by the iref without its token); a C
// domain gives a Go domain the iref of its own private export the same
// way.
func TestCCapabilityPassing(t *testing.T) {
	prog := cProg(t, "grant_test")
	dir := startMonitor(t)
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Limit)
	defer cancel()
	d := join(t, dir)

	// Go to C.
	secret, err := pingpong.Export(ctx, d, "gsecret", chanos.Private())
	if err != nil {
		t.Fatal(err)
	}
	defer secret.Close()
	go pingpong.Serve(ctx, secret, plusOne{})
	inbox := spawn(t, dir, prog, "inbox", "c.inbox")
	if l := inbox.Line(t); l != "inbox c.inbox" {
		t.Fatalf("grant_test printed %q", l)
	}
	to, err := grant.Connect(ctx, d, "c.inbox")
	if err != nil {
		t.Fatal(err)
	}
	defer to.Close()
	if err := to.Send(ctx, &grant.Give{What: "gsecret", Ref: secret.Ref()}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"given gsecret",
		"by name: monitor: denied",
		"by token-less iref: monitor: denied",
		"by iref: echo 41 -> 42",
	} {
		if l := inbox.Line(t); !strings.HasPrefix(l, want) {
			t.Fatalf("grant_test printed %q, want %q...", l, want)
		}
	}
	if !inbox.wait(t, 0) {
		t.FailNow()
	}

	// C to Go.
	giver, g := receiveGive(t, d, dir, "go.inbox", prog, "give", "go.inbox", "csecret")
	if g.What != "csecret" || !g.Ref.HasToken() {
		t.Fatalf("received %+v", g)
	}
	if l := giver.Line(t); l != "gave csecret" {
		t.Fatalf("grant_test printed %q", l)
	}
	c, err := pingpong.Connect(ctx, d, "csecret")
	denied(t, "Go binds the C domain's private export by name", c, err)
	c, err = pingpong.ConnectRef(ctx, d, g.Ref)
	echoes(t, "Go binds by the iref the C domain gave", c, err, 42)
	giver.stdin.Close()
	if !giver.wait(t, 0) {
		t.FailNow()
	}
}

// Listeners as capabilities between C and Go (docs/capabilities.md,
// "Listeners"): a Go domain hands its export over and gives the grant to
// a C domain in a message, which adopts it (once: the grant used again
// is refused) and serves the Go clients that bind its name; a C domain
// hands its export over and gives the grant to Go, which adopts it, while
// the C listener accepts no more.
func TestCHandOver(t *testing.T) {
	prog := cProg(t, "grant_test")
	dir := startMonitor(t)
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Limit)
	defer cancel()
	d := join(t, dir)

	// Go to C.
	l, err := chanos.Export(ctx, d, "go.handed", pingpong.Interface)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	handed, err := l.HandOver(ctx)
	if err != nil {
		t.Fatal(err)
	}
	adopter := spawn(t, dir, prog, "adopt", "c.adopter")
	if l := adopter.Line(t); l != "inbox c.adopter" {
		t.Fatalf("grant_test printed %q", l)
	}
	to, err := grant.Connect(ctx, d, "c.adopter")
	if err != nil {
		t.Fatal(err)
	}
	defer to.Close()
	if err := to.Send(ctx, &grant.Give{What: "go.handed", Ref: handed}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"adopted go.handed as go.handed", "again: monitor: name not found"} {
		if l := adopter.Line(t); !strings.HasPrefix(l, want) {
			t.Fatalf("grant_test printed %q, want %q...", l, want)
		}
	}
	c, err := pingpong.Connect(ctx, d, "go.handed")
	echoes(t, "Go binds the export the C domain adopted", c, err, 42)
	adopter.stdin.Close()
	if !adopter.wait(t, 0) {
		t.FailNow()
	}

	// C to Go.
	giver, g := receiveGive(t, d, dir, "go.adopter", prog, "handover", "go.adopter", "c.handed")
	if g.What != "c.handed" {
		t.Fatalf("received %+v", g)
	}
	for _, want := range []string{"handed over c.handed", "accept: the export was handed over to another domain"} {
		if l := giver.Line(t); l != want {
			t.Fatalf("grant_test printed %q, want %q", l, want)
		}
	}
	adopted, err := chanos.Adopt(ctx, d, g.Ref, pingpong.Interface)
	if err != nil {
		t.Fatal(err)
	}
	defer adopted.Close()
	go adopted.Serve(ctx, func(ctx context.Context, c *chanos.Conn) error {
		return pingpong.NewConn(c).Serve(ctx, plusOne{})
	})
	c, err = pingpong.Connect(ctx, d, "c.handed")
	echoes(t, "Go binds the export it adopted from the C domain", c, err, 42)
	giver.stdin.Close()
	if !giver.wait(t, 0) {
		t.FailNow()
	}
}

// receiveGive exports a grant inbox under name, starts prog with args (a
// C domain that gives the inbox an iref), and returns the program and the
// one give message it sent.
func receiveGive(t *testing.T, d *chanos.Domain, dir, name, prog string, args ...string) (*proc, *grant.Give) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Limit)
	defer cancel()
	inbox, err := grant.Export(ctx, d, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inbox.Close() })
	giver := spawn(t, dir, prog, args...)
	from, err := inbox.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer from.Close()
	m, err := from.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	g, ok := m.(*grant.Give)
	if !ok {
		t.Fatalf("received %+v", m)
	}
	return giver, g
}
