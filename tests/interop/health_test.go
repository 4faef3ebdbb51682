package interop

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/interfaces/health"
	"github.com/chanos/chanos/interfaces/pingpong"
	"github.com/chanos/chanos/internal/testkit"
)

// chanosCmd runs `chanos ARGS` against the monitor in dir and returns
// its exit status and what it printed on stdout and stderr.
func chanosCmd(t *testing.T, dir string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(goBin(t, "chanos"), args...)
	cmd.Env = cEnv(dir)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := testkit.Within(t, testkit.Limit, "chanos "+strings.Join(args, " "), cmd.Run)
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("chanos %s: %v", strings.Join(args, " "), err)
	}
	return exitCode(err), out.String(), errb.String()
}

// healthCmd runs `chanos health ARGS`, as chanosCmd.
func healthCmd(t *testing.T, dir string, args ...string) (int, string, string) {
	t.Helper()
	return chanosCmd(t, dir, append([]string{"health"}, args...)...)
}

// A C domain serving libchanos's health statuses beside a service of its
// own, both on one thread in one chanos_server
// (examples/c/health_server.c), answers the Go `chanos health` as a Go
// domain does (cmd/chanos's TestHealth): the domain serving, a service
// without a status unknown, each status as the C domain sets it (from a
// thread other than the one that serves), --json, --watch with each
// change, and shutdown and resume; a Go client's check of a service with
// no status fails with not found, in the words of Go's health.Statuses;
// and a Go client of the service is answered meanwhile.
func TestHealthCServer(t *testing.T) {
	prog := cProg(t, "health_server")
	dir := startMonitor(t)
	srv := start(t, dir, "serving c c.health c.reflection", prog, "c")
	set := func(cmd string) {
		t.Helper()
		if _, err := srv.stdin.Write([]byte(cmd + "\n")); err != nil {
			t.Fatal(err)
		}
		srv.Expect(t, "ok")
	}
	probe := func(wantStatus int, wantOut string, args ...string) {
		t.Helper()
		if status, out, errs := healthCmd(t, dir, args...); status != wantStatus || out != wantOut {
			t.Errorf("chanos health %s: status %d, %q (stderr %q); want %d, %q", strings.Join(args, " "), status, out, errs, wantStatus, wantOut)
		}
	}

	probe(0, "serving\n", "c")
	probe(1, "service_unknown\n", "c", "kv")
	set("set kv serving")
	probe(0, "serving\n", "c", "kv")
	probe(0, "serving\n", "c.health", "kv")
	probe(0, `{"name":"c","service":"kv","status":"serving"}`+"\n", "--json", "c", "kv")
	set("set kv not_serving")
	probe(1, "not_serving\n", "c", "kv")

	ctx, cancel := context.WithTimeout(context.Background(), testkit.Limit)
	defer cancel()
	c, err := health.Connect(ctx, join(t, dir), health.NameOf("c"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Check(ctx, "none")
	var re *chanos.RemoteError
	if !errors.Is(err, chanos.CodeNotFound) || !errors.As(err, &re) || re.Detail != `no status for service "none"` {
		t.Errorf("check of a service with no status = %v, want not found: no status for service \"none\"", err)
	}
	svc, err := pingpong.Connect(ctx, join(t, dir), "c")
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	if got, err := svc.Echo(ctx, 77); err != nil || got != 77 {
		t.Errorf("echo(77) of the C domain's service = %d, %v; want 77", got, err)
	}

	watch := exec.Command(goBin(t, "chanos"), "health", "--watch", "c", "kv")
	watch.Env = cEnv(dir)
	w := testkit.Start(t, watch)
	w.Expect(t, "not_serving")
	set("set kv serving")
	w.Expect(t, "serving")
	set("set kv unknown")
	w.Expect(t, "unknown")
	if err := watch.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := w.Wait(t); err != nil {
		t.Errorf("chanos health --watch, interrupted: %v; want exit 0", err)
	}

	set("set kv serving")
	set("shutdown")
	probe(1, "not_serving\n", "c")
	probe(1, "not_serving\n", "c", "kv")
	set("set kv serving") // ignored until resume
	probe(1, "not_serving\n", "c", "kv")
	set("resume")
	probe(0, "serving\n", "c")
	probe(0, "serving\n", "c", "kv")
}
