package interop

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/interfaces/health"
	"github.com/chanos/chanos/interfaces/pingpong"
	"github.com/chanos/chanos/interfaces/reflection"
	"github.com/chanos/chanos/internal/testkit"
)

// A C domain's reflection service (chanos_server_add_reflection,
// examples/c/health_server.c) answers the Go CLI as a Go domain's does
// (cmd/chanos's TestCallByReflection): `chanos describe` prints the
// definition the generated C carries, the same as Go's, and `chanos
// call` with no .if calls the C service through it; a Go client is told
// the health export's interface, and not found, in Go's words, for a
// name the domain does not export.
func TestReflectionCServer(t *testing.T) {
	prog := cProg(t, "health_server")
	dir := startMonitor(t)
	start(t, dir, "serving c c.health c.reflection", prog, "c")

	for _, tc := range []struct {
		args   []string
		status int
		stdout string
	}{
		{[]string{"describe", "c"}, 0, pingpong.Definition},
		{[]string{"call", "c", "echo", `{"val": 5}`}, 0, `{"result":5}` + "\n"},
		{[]string{"call", "--json", "c", "bounce", `{}`}, 1, `{"error":"chanos: call: pingpong.bounce: unimplemented: the server has no handler for pingpong.bounce","code":"unimplemented"}` + "\n"},
	} {
		status, out, errs := chanosCmd(t, dir, tc.args...)
		if status != tc.status || out != tc.stdout {
			t.Errorf("chanos %s: status %d, stdout %q, stderr %q; want %d, %q", strings.Join(tc.args, " "), status, out, errs, tc.status, tc.stdout)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), testkit.Limit)
	defer cancel()
	c, err := reflection.Connect(ctx, join(t, dir), reflection.NameOf("c"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if iface, fp, def, err := c.Describe(ctx, "c.health"); err != nil || iface != "health" || fp != health.Fingerprint || def != health.Definition {
		t.Errorf("describe c.health = %q, %016x, %d bytes, %v; want health's", iface, fp, len(def), err)
	}
	_, _, _, err = c.Describe(ctx, "nothing")
	var re *chanos.RemoteError
	if !errors.Is(err, chanos.CodeNotFound) || !errors.As(err, &re) || re.Detail != `this domain exports no "nothing"` {
		t.Errorf("describe of a name the C domain does not export = %v, want not found: this domain exports no \"nothing\"", err)
	}
}
