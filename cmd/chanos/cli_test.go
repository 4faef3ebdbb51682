package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/internal/testkit"
)

// The command line's conventions (the package comment), each checked by
// running the built command as a process.

func TestMain(m *testing.M) {
	code := m.Run()
	testkit.CleanPrograms()
	os.Exit(code)
}

// result is what one run of a command gave.
type result struct {
	stdout, stderr string
	status         int
}

// runCmd runs the program at path with args, CHANOS_DIR set to dir, and
// returns what it printed and its exit status.
func runCmd(t *testing.T, path, dir string, args ...string) result {
	t.Helper()
	cmd := exec.Command(path, args...)
	cmd.Env = append(os.Environ(), "CHANOS_DIR="+dir)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := testkit.Within(t, testkit.Limit, strings.Join(cmd.Args, " "), cmd.Run)
	r := result{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.status = ee.ExitCode()
	case err != nil:
		t.Fatalf("%s: %v", strings.Join(cmd.Args, " "), err)
	}
	return r
}

func chanosBin(t *testing.T) string {
	return testkit.GoProgram(t, "github.com/chanos/chanos/cmd/chanos")
}

// oneJSON checks that out is exactly one JSON document on one line, and
// decodes it into v.
func oneJSON(t *testing.T, what, out string, v any) {
	t.Helper()
	if !strings.HasSuffix(out, "\n") || strings.Count(out, "\n") != 1 {
		t.Fatalf("%s: want one JSON document on one line, got %q", what, out)
	}
	dec := json.NewDecoder(strings.NewReader(out))
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v in %q", what, err, out)
	}
	if dec.More() {
		t.Fatalf("%s: more than one JSON document in %q", what, out)
	}
}

// TestVersion: chanos --version, chanos version and chanos version --json
// print the version and the Go version; chanosc --version too.
func TestVersion(t *testing.T) {
	bin := chanosBin(t)
	line := regexp.MustCompile(`^chanos (\S+) ` + regexp.QuoteMeta(runtime.Version()) + "\n$")
	var versions []string
	for _, args := range [][]string{{"--version"}, {"-version"}, {"version"}} {
		r := runCmd(t, bin, "", args...)
		m := line.FindStringSubmatch(r.stdout)
		if r.status != 0 || m == nil {
			t.Fatalf("chanos %s: status %d, printed %q (stderr %q); want %q", args[0], r.status, r.stdout, r.stderr, line)
		}
		versions = append(versions, m[1])
	}
	var v struct{ Program, Version, Go string }
	r := runCmd(t, bin, "", "version", "--json")
	oneJSON(t, "chanos version --json", r.stdout, &v)
	if v.Program != "chanos" || v.Version != versions[0] || v.Go != runtime.Version() {
		t.Errorf("chanos version --json: %+v, want chanos %s %s", v, versions[0], runtime.Version())
	}
	if versions[1] != versions[0] || versions[2] != versions[0] {
		t.Errorf("versions differ: %q", versions)
	}

	chanosc := testkit.GoProgram(t, "github.com/chanos/chanos/cmd/chanosc")
	r = runCmd(t, chanosc, "", "--version")
	if want := "chanosc " + versions[0] + " " + runtime.Version() + "\n"; r.status != 0 || r.stdout != want {
		t.Errorf("chanosc --version: status %d, printed %q, want %q", r.status, r.stdout, want)
	}
	r = runCmd(t, chanosc, "", "--no-such-flag")
	if r.status != 2 || !strings.Contains(r.stderr, "usage: chanosc") {
		t.Errorf("chanosc --no-such-flag: status %d, stderr %q", r.status, r.stderr)
	}
}

// TestUsage: a bad flag or argument prints the usage of the command it
// was given to, not chanos's own, and exits 2; -h prints it on stdout
// and exits 0.
func TestUsage(t *testing.T) {
	bin := chanosBin(t)
	dir := testkit.ShortDir(t) // no monitor: nothing may get as far as joining one
	for _, c := range []struct {
		args []string
		cmd  string // the command whose usage comes
		msg  string
	}{
		{[]string{"ps", "--no-such-flag"}, "ps", "flag provided but not defined: -no-such-flag"},
		{[]string{"ps", "extra"}, "ps", `unexpected argument "extra"`},
		{[]string{"names", "--no-such-flag"}, "names", "flag provided but not defined"},
		{[]string{"names", "a", "b"}, "names", "one prefix at most"},
		{[]string{"monitor", "--no-such-flag"}, "monitor", "flag provided but not defined"},
		{[]string{"monitor", "--max-domains", "0"}, "monitor", "--max-domains must be positive"},
		{[]string{"demo", "--no-such-flag"}, "demo", "flag provided but not defined"},
		{[]string{"bench", "ump", "--no-such-flag"}, "bench", "flag provided but not defined"},
		{[]string{"bench", "no-such-suite"}, "bench", `unknown suite "no-such-suite"`},
		{[]string{"bench", "rpc", "--cases", "rpc/ump"}, "bench", "the rpc suite runs all its cases: --cases works with caps, clients, net, ring, tasks, ump"},
		{[]string{"bench", "ump", "--server-cpuprofile", "x.prof"}, "bench", "--server-cpuprofile is for the net suite"},
		{[]string{"bench", "check"}, "bench", "no results file given"},
		{[]string{"version", "--no-such-flag"}, "version", "flag provided but not defined"},
		{[]string{"call", "kv"}, "call", "give [FILE.if] NAME RPC and at most ARGS"},
		{[]string{"call", "-i", "types.if", "kv", "get"}, "call", "-i is for FILE.if's include files"},
		{[]string{"call", "kv", "get", "{", "extra"}, "call", "give [FILE.if] NAME RPC and at most ARGS"},
		{[]string{"describe"}, "describe", "give NAME"},
		{[]string{"describe", "--timeout", "0", "kv"}, "describe", "--timeout must be positive"},
		{[]string{"--no-such-flag"}, "", "unknown flag --no-such-flag"},
		{[]string{"no-such-command"}, "", `unknown command "no-such-command"`},
		{nil, "", "no command given"},
	} {
		r := runCmd(t, bin, dir, c.args...)
		name := strings.TrimSpace("chanos " + c.cmd)
		wantFirst := name + ": "
		if r.status != 2 || !strings.HasPrefix(r.stderr, wantFirst) || !strings.Contains(r.stderr, c.msg) || r.stdout != "" {
			t.Errorf("chanos %q: status %d, stdout %q, stderr %q; want status 2 and %q...%q", c.args, r.status, r.stdout, r.stderr, wantFirst, c.msg)
			continue
		}
		usage := "\nusage: " + name + " "
		if !strings.Contains(r.stderr, usage) {
			t.Errorf("chanos %q: stderr lacks %q:\n%s", c.args, usage, r.stderr)
		}
		if c.cmd != "" && strings.Contains(r.stderr, "commands:") {
			t.Errorf("chanos %q: prints chanos's own usage:\n%s", c.args, r.stderr)
		}
	}
	for _, cmd := range []string{"ps", "names", "monitor", "demo", "bench", "version", "call", "describe", "health"} {
		r := runCmd(t, bin, dir, cmd, "-h")
		if r.status != 0 || !strings.HasPrefix(r.stdout, "usage: chanos "+cmd+" ") {
			t.Errorf("chanos %s -h: status %d, stdout %q", cmd, r.status, r.stdout)
		}
	}
}

// jsonError is the JSON object of a failure.
type jsonError struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}

// TestJSONErrors: with --json a failure is a JSON object on stdout, the
// only document of the invocation, and the exit status is not 0.
func TestJSONErrors(t *testing.T) {
	bin := chanosBin(t)
	dir := testkit.ShortDir(t) // no monitor runs there
	for _, c := range []struct {
		args   []string
		status int
		code   string
	}{
		{[]string{"ps", "--json"}, 1, "no_monitor"},
		{[]string{"names", "--json"}, 1, "no_monitor"},
		{[]string{"names", "--json", "some.prefix"}, 1, "no_monitor"},
		{[]string{"ps", "--json", "--no-such-flag"}, 2, "usage"},
		{[]string{"bench", "no-such-suite", "--json"}, 2, "usage"},
		{[]string{"version", "--json", "extra"}, 2, "usage"},
	} {
		r := runCmd(t, bin, dir, c.args...)
		var e jsonError
		oneJSON(t, fmt.Sprintf("chanos %q", c.args), r.stdout, &e)
		if r.status != c.status || e.Code != c.code || !strings.HasPrefix(e.Error, "chanos") {
			t.Errorf("chanos %q: status %d, %+v; want status %d, code %q", c.args, r.status, e, c.status, c.code)
		}
		if c.code == "no_monitor" && (!strings.Contains(e.Error, dir) || r.stderr != "") {
			t.Errorf("chanos %q: error %q, stderr %q: want the directory named, and nothing on stderr", c.args, e.Error, r.stderr)
		}
	}
	// Without --json, the same failure is text on stderr.
	r := runCmd(t, bin, dir, "ps")
	if r.status != 1 || r.stdout != "" || !strings.HasPrefix(r.stderr, "chanos: no monitor running") {
		t.Errorf("chanos ps: status %d, stdout %q, stderr %q", r.status, r.stdout, r.stderr)
	}
}

// TestErrorCodes: the JSON error's code names what went wrong, an error
// reply's status code and the command's own deadline as gRPC names them.
func TestErrorCodes(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("call: %w", context.DeadlineExceeded), "deadline_exceeded"},
		{fmt.Errorf("call: %w", chanos.Errorf(chanos.CodeResourceExhausted, "full")), "resource_exhausted"},
		{fmt.Errorf("connect: %w", chanos.ErrNotFound), "not_found"},
		{fmt.Errorf("x: %w", context.Canceled), "interrupted"},
		{errors.New("something else"), "failed"},
	} {
		if got := errorCode(c.err); got != c.want {
			t.Errorf("errorCode(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}

// TestJSONOutput: names and ps print one JSON document on one line, and
// ps's table counts what its document counts.
func TestJSONOutput(t *testing.T) {
	bin := chanosBin(t)
	dir, _ := testkit.StartMonitor(t)
	server := exec.Command(testkit.GoProgram(t, "github.com/chanos/chanos/examples/pingpong/server"), "-name", "cli.pingpong")
	server.Env = append(os.Environ(), "CHANOS_DIR="+dir)
	testkit.Start(t, server)

	var names []nameEntry
	// The example server exports its reflection service beside it.
	testkit.Eventually(t, "cli.pingpong and its reflection in chanos names", func() bool {
		r := runCmd(t, bin, dir, "names", "--json", "cli.")
		names = nil
		oneJSON(t, "chanos names --json", r.stdout, &names)
		return len(names) == 2
	})
	if n := names[0]; n.Name != "cli.pingpong" || n.Iface != "pingpong" || n.Program != "pingpong-server" {
		t.Errorf("chanos names --json cli.: %+v", n)
	}
	if n := names[1]; n.Name != "cli.pingpong.reflection" || n.Iface != "reflection" || n.Program != "pingpong-server" {
		t.Errorf("chanos names --json cli.: %+v", n)
	}
	r := runCmd(t, bin, dir, "names", "--json", "no.such.prefix")
	if r.status != 0 || r.stdout != "[]\n" {
		t.Errorf("chanos names --json no.such.prefix: status %d, %q; want []", r.status, r.stdout)
	}

	// The counts of the table and of the document agree. Each run is a
	// session of its own; a run's session may still be open when the
	// next begins, so both are read until they settle on the same count:
	// the server and the command itself.
	header := regexp.MustCompile(`(?m)^monitor [0-9a-f]{16}  pid \d+  socket \S+  sessions (\d+) of (\d+) \(every domain but the monitor's own\)$`)
	deadline := time.Now().Add(testkit.Limit)
	for {
		var snap chanos.Snapshot
		r := runCmd(t, bin, dir, "ps", "--json")
		oneJSON(t, "chanos ps --json", r.stdout, &snap)
		table := runCmd(t, bin, dir, "ps")
		m := header.FindStringSubmatch(table.stdout)
		if r.status != 0 || table.status != 0 || m == nil {
			t.Fatalf("chanos ps: status %d, %d; printed:\n%s", r.status, table.status, table.stdout)
		}
		rows := strings.Count(table.stdout, "\n") - 3 // the header, a blank line, the column names
		lim := snap.Monitor.Limits
		if m[1] == "2" && lim.Domains == 2 && rows == 3 && len(snap.Domains) == 3 {
			if m[2] != fmt.Sprint(lim.MaxDomains) {
				t.Errorf("chanos ps: %s sessions at most, its JSON %d", m[2], lim.MaxDomains)
			}
			if !strings.Contains(table.stdout, "chanos ps (this command)") {
				t.Errorf("chanos ps does not show its own session:\n%s", table.stdout)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("chanos ps: the table says %s sessions in %d rows, the JSON %d in %d domains; want 2 in 3 (the monitor, the server, ps):\n%s\n%s",
				m[1], rows, lim.Domains, len(snap.Domains), table.stdout, r.stdout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
