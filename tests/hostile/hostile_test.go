// Package hostile is the hostile-peer suite: every attack of
// docs/security.md's table, each against the victims it applies to (the
// monitor, a Go domain, a C domain), run as real processes over a real
// monitor. Each test asserts that its victim keeps serving its other
// clients within a second of the attack, and records the victim's
// resident memory and descriptors before and after.
//
// `make test-hostile` runs the suite alone, with the monitor's quota
// attacks (package monitor), and prints the table of attacks, victims
// and outcomes that the tests write to the file named by
// CHANOS_HOSTILE_TABLE (testkit.HostileRow). It exits non-zero if any
// victim stopped serving. The C victims come from the C build directory
// named by CHANOS_C_BUILD (skipped without it, unless CI is set).
package hostile

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/interfaces/pingpong"
	"github.com/chanos/chanos/internal/testkit"
)

func TestMain(m *testing.M) {
	code := testkit.Run(m, roles)
	testkit.CleanPrograms()
	os.Exit(code)
}

var roles = testkit.Roles{
	"wake-attacker": wakeAttacker,
	"victim-client": victimClient,
}

// usage is what a victim process holds.
type usage = testkit.Usage

// measure reads what pid holds.
func measure(t *testing.T, pid int) usage { return testkit.Measure(t, pid) }

// record adds the test's row to the suite's table when the test ends.
func record(t *testing.T, attack, victim string, before, after *usage) {
	testkit.HostileRow(t, attack, victim, before, after)
}

// join joins the monitor in dir as a domain of the test process.
func join(t *testing.T, dir string) *chanos.Domain {
	t.Helper()
	d, err := chanos.Join(testkit.Context(t), chanos.WithDir(dir), chanos.WithProgram("hostile-bystander"),
		chanos.WithCallTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// serves checks that the pingpong service name answers an echo within a
// second, over a fresh connection: the victim still accepts and serves
// other clients.
func serves(ctx context.Context, d *chanos.Domain, name string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	c, err := pingpong.Connect(ctx, d, name)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", name, err)
	}
	defer c.Close()
	v, err := c.Echo(ctx, 42)
	if err != nil {
		return fmt.Errorf("echo on %s: %w", name, err)
	}
	if v != 42 {
		return fmt.Errorf("echo on %s returned %d", name, v)
	}
	return nil
}

// monitorServes checks that the monitor serves its other clients within a
// second: a new domain joins, and ps answers.
func monitorServes(ctx context.Context, dir string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	d, err := chanos.Join(ctx, chanos.WithDir(dir), chanos.WithProgram("hostile-newcomer"))
	if err != nil {
		return fmt.Errorf("join: %w", err)
	}
	defer d.Close()
	if _, err := d.Ps(ctx); err != nil {
		return fmt.Errorf("ps: %w", err)
	}
	return nil
}

// keepsServing runs check every 100 ms for d, and fails the test at the
// first failure.
func keepsServing(t *testing.T, d time.Duration, check func(context.Context) error) {
	t.Helper()
	ctx := testkit.Context(t)
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if err := check(ctx); err != nil {
			t.Fatalf("the victim stopped serving: %v", err)
		}
	}
}

// victim is a server process under attack.
type victim struct {
	name string // its pingpong export
	proc *testkit.Child
}

// server starts the pingpong example server of lang, "go" or "c", as
// name.
func server(t *testing.T, lang, dir, name string) victim {
	t.Helper()
	if lang == "go" {
		return goServer(t, dir, name)
	}
	return cServer(t, dir, name)
}

// goServer starts the Go pingpong example server as name.
func goServer(t *testing.T, dir, name string) victim {
	t.Helper()
	return startServer(t, dir, name, testkit.GoProgram(t, "github.com/chanos/chanos/examples/pingpong/server"), "-name", name)
}

// cServer starts the C pingpong example server as name.
func cServer(t *testing.T, dir, name string) victim {
	t.Helper()
	build := testkit.CBuild(t, "examples/pingpong_server")
	return startServer(t, dir, name, filepath.Join(build, "examples", "pingpong_server"), "-name", name)
}

func startServer(t *testing.T, dir, name, prog string, args ...string) victim {
	t.Helper()
	p := testkit.Start(t, execIn(dir, prog, args...))
	d := join(t, dir)
	testkit.Eventually(t, name+" to serve", func() bool { return serves(testkit.Context(t), d, name) == nil })
	return victim{name, p}
}

// execIn returns the command running prog as a domain of the monitor in
// dir.
func execIn(dir, prog string, args ...string) *exec.Cmd {
	cmd := exec.Command(prog, args...)
	cmd.Env = append(os.Environ(), "CHANOS_DIR="+dir)
	return cmd
}
