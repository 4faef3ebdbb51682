package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chanos/chanos/internal/testkit"
)

// chanosIn runs the chanos binary inside machine i against its monitor
// and returns its stdout, failing the test on an error.
func (w *world) chanosIn(i int, args ...string) string {
	w.t.Helper()
	out, err := w.chanosTry(i, args...)
	if err != nil {
		w.t.Fatalf("chanos %s (machine %d): %v\n%s", strings.Join(args, " "), i+1, err, out)
	}
	return out
}

// chanosExiting is chanosIn of a command that exits with status want:
// wait, whose status is the program's.
func (w *world) chanosExiting(i, want int, args ...string) string {
	w.t.Helper()
	out, err := w.chanosTry(i, args...)
	status := 0
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			w.t.Fatalf("chanos %s (machine %d): %v", strings.Join(args, " "), i+1, err)
		}
		status = ee.ExitCode()
	}
	if status != want {
		w.t.Fatalf("chanos %s (machine %d): exit status %d, want %d\n%s", strings.Join(args, " "), i+1, status, want, out)
	}
	return out
}

// chanosTry is chanosIn that returns the error and stderr too.
func (w *world) chanosTry(i int, args ...string) (string, error) {
	w.t.Helper()
	cmd := w.net.Machines[i].Command(w.bin, args...)
	cmd.Env = append(cmd.Environ(), "CHANOS_DIR="+w.dirs[i])
	out, err := cmd.Output()
	return string(out) + stderrOf(err), err
}

// spawned is 'chanos spawn --json' and 'chanos wait --json'.
type spawned struct {
	ID       uint64 `json:"id"`
	Machine  string `json:"machine"`
	ExitCode int    `json:"exit_code"`
	Signal   int    `json:"signal"`
}

func decode[T any](t *testing.T, s string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("%v: %q", err, s)
	}
	return v
}

// TestSpawnAcrossMachines: from machine 2, the CLI spawns programs on
// machines 1 and 3 through their spawn services, over the net
// interconnect: their output, exit status and a kill come back; a
// spawned server exports a name that a client of machine 2 binds;
// --on any spreads spawns over the machines by the programs they run;
// ps --all lists them with their machines; a machine whose policy refuses other
// machines says so; the wait of a program whose machine's monitor is
// killed returns "network lost".
func TestSpawnAcrossMachines(t *testing.T) {
	w := newWorld(t, 3, 3)
	for i := range 3 {
		w.admit(i, w.root)
	}
	w.start(0)
	w.start(1)
	w.startWith(2, "--spawn-no-remote")
	id1, id3 := w.machineID(0), w.machineID(2)
	w.awaitLink(1, 0)
	w.awaitLink(1, 2)

	// Output and exit status.
	s := decode[spawned](t, w.chanosIn(1, "spawn", "--on", "mach1", "--json", "--", "/bin/sh", "-c", "echo hello from $(hostname -I); exit 3"))
	if s.Machine != id1 {
		t.Fatalf("spawned on %s, want machine 1 (%s)", s.Machine, id1)
	}
	id := strconv.FormatUint(s.ID, 10)
	if e := decode[spawned](t, w.chanosExiting(1, 3, "wait", "--on", "mach1", "--json", id)); e.ExitCode != 3 {
		t.Fatalf("wait: %+v, want exit code 3", e)
	}
	if out := w.chanosIn(1, "logs", "--on", id1, id); !strings.Contains(out, "hello from "+w.net.Machines[0].Addr.String()) {
		t.Fatalf("logs: %q, want the program's output from machine 1's address", out)
	}

	// A kill.
	s = decode[spawned](t, w.chanosIn(1, "spawn", "--on", "mach1", "--json", "--", "sleep", "30"))
	id = strconv.FormatUint(s.ID, 10)
	w.chanosIn(1, "kill", "--on", "mach1", "--signal", "KILL", id)
	if e := decode[spawned](t, w.chanosExiting(1, 128+9, "wait", "--on", "mach1", "--json", id)); e.Signal != 9 {
		t.Fatalf("wait after kill: %+v, want signal 9", e)
	}

	// A spawned server, and a client on machine 2.
	argv := testkit.Command("ppserver", w.dirs[0], "spawned.pp")
	w.chanosIn(1, append([]string{"spawn", "--on", "mach1", "--"}, argv...)...)
	argv = testkit.Command("ppclient", w.dirs[1], "spawned.pp", "100ms")
	cl := testkit.Start(t, w.net.Machines[1].Command(argv[0], argv[1:]...))
	if l := cl.Line(t); l != "connected via=net" {
		t.Fatalf("client of the spawned server: %q", l)
	}
	cl.Wait(t)

	// Machine 3 refuses spawns from other machines.
	out, err := w.chanosTry(1, "spawn", "--on", "mach3", "--", "true")
	if err == nil || !strings.Contains(out, "refuses spawns from other machines") {
		t.Fatalf("spawn on machine 3, whose policy is --spawn-no-remote: %v: %s", err, out)
	}
	t.Logf("machine 3: %s", strings.TrimSpace(out))
	// --on any from machine 2 spreads over the machines that take its
	// spawns, machines 1 and 2, by the programs each runs: machine 1
	// runs the spawned server already.
	id2 := w.machineID(1)
	for range 5 {
		w.chanosIn(1, "spawn", "--on", "any", "--", "sleep", "30")
	}
	var ps struct {
		Spawned []struct {
			Machine string `json:"machine"`
			State   string `json:"state"`
		} `json:"spawned"`
	}
	if err := json.Unmarshal([]byte(w.chanosIn(1, "ps", "--all", "--json")), &ps); err != nil {
		t.Fatal(err)
	}
	running := map[string]int{}
	for _, p := range ps.Spawned {
		if p.State == "running" {
			running[p.Machine]++
		}
	}
	t.Logf("ps --all from machine 2, after 5 spawns --on any: running %v", running)
	if running[id1] != 3 || running[id2] != 3 || running[id3] != 0 {
		t.Fatalf("ps --all: running %v; want 3 on machine 1 (the server and 2 sleeps), 3 on machine 2, none on machine 3", running)
	}

	// The wait of a program whose machine's monitor dies.
	s = decode[spawned](t, w.chanosIn(1, "spawn", "--on", "mach1", "--json", "--", "sleep", "30"))
	wait := w.net.Machines[1].Command(w.bin, "wait", "--on", "mach1", strconv.FormatUint(s.ID, 10))
	wait.Env = append(wait.Environ(), "CHANOS_DIR="+w.dirs[1])
	done := make(chan string, 1)
	go func() {
		out, err := wait.CombinedOutput()
		done <- fmt.Sprintf("%v: %s", err, out)
	}()
	time.Sleep(300 * time.Millisecond)
	killed := time.Now()
	w.monitors[0].Cmd.Process.Kill()
	select {
	case out := <-done:
		if !strings.Contains(out, "network lost") {
			t.Fatalf("wait after the target's monitor was killed: %s; want network lost", out)
		}
		t.Logf("wait, its target's monitor killed: %v later: %s", time.Since(killed).Round(time.Millisecond), strings.TrimSpace(out))
	case <-time.After(20 * time.Second):
		t.Fatal("wait did not return 20 s after its target's monitor was killed")
	}
}
