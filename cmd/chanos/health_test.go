package main

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/chanos/chanos/interfaces/health"
	"github.com/chanos/chanos/internal/testkit"
)

// TestHealth: chanos health prints the status of a service, or of the
// domain, and exits 0 only when it is serving; --json prints one
// document; a name that nobody exports fails within --timeout; --watch
// prints each change until interrupted.
func TestHealth(t *testing.T) {
	bin, dir, ctx, d := cliServer(t)
	st := health.NewStatuses()
	l, err := health.Export(ctx, d, health.NameOf("svc"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go health.Serve(ctx, l, st)
	st.Set("svc", health.ServingStatusServing)

	for _, tc := range []struct {
		args   []string
		status int
		out    string
	}{
		{[]string{"health", "svc"}, 0, "serving\n"},
		{[]string{"health", "svc", "svc"}, 0, "serving\n"},
		{[]string{"health", "svc.health", "svc"}, 0, "serving\n"},
		{[]string{"health", "svc", "other"}, 1, "service_unknown\n"},
		{[]string{"health", "--json", "svc", "svc"}, 0, `{"name":"svc","service":"svc","status":"serving"}` + "\n"},
	} {
		if r := runCmd(t, bin, dir, tc.args...); r.status != tc.status || r.stdout != tc.out {
			t.Errorf("chanos %s: status %d, %q (stderr %q); want %d, %q", strings.Join(tc.args, " "), r.status, r.stdout, r.stderr, tc.status, tc.out)
		}
	}
	st.Set("svc", health.ServingStatusNotServing)
	if r := runCmd(t, bin, dir, "health", "svc", "svc"); r.status != 1 || r.stdout != "not_serving\n" {
		t.Errorf("chanos health svc svc, not serving: status %d, %q", r.status, r.stdout)
	}
	// --timeout bounds the whole probe, the join to the monitor included,
	// with a second more for the answer: ample on a loaded machine, so
	// that what ends the wait is the name's absence, which is what this
	// checks, rather than a slow join.
	r := runCmd(t, bin, dir, "health", "--timeout", "2s", "nobody")
	if r.status != 1 || r.stdout != "" || !strings.Contains(r.stderr, "not found") {
		t.Errorf("chanos health nobody: status %d, stdout %q, stderr %q; want 1, nothing and not found", r.status, r.stdout, r.stderr)
	}

	cmd := exec.Command(bin, "health", "--watch", "svc", "svc")
	cmd.Env = append(os.Environ(), "CHANOS_DIR="+dir)
	child := testkit.Start(t, cmd)
	child.Expect(t, "not_serving")
	st.Set("svc", health.ServingStatusServing)
	child.Expect(t, "serving")
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := child.Wait(t); err != nil {
		t.Errorf("chanos health --watch, interrupted: %v; want exit 0", err)
	}
}
