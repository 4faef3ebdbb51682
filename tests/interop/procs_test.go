package interop

// The programs a test starts, and how they must end. Every program gets
// the sanitizers' options of cEnv, so that a sanitizer's report has an
// exit status no program chooses for itself (sanitizerExit); a test fails
// on it even where it expects the program to fail. A server started with
// start is stopped with SIGTERM at cleanup and must exit 0: a fault in its
// teardown (a use-after-free, a leak) then fails the test.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chanos/chanos/internal/testkit"
)

// sanitizerExit is the exit status of a program in which AddressSanitizer
// (LeakSanitizer included) or UndefinedBehaviorSanitizer reported an
// error. No program of the tests exits with it otherwise.
const sanitizerExit = 23

// sanitizerOptions are given to every program a test starts. They follow
// the caller's own, so that they win.
var sanitizerOptions = []struct{ name, opts string }{
	{"ASAN_OPTIONS", fmt.Sprintf("exitcode=%d:abort_on_error=0:detect_leaks=1", sanitizerExit)},
	{"UBSAN_OPTIONS", fmt.Sprintf("halt_on_error=1:exitcode=%d:abort_on_error=0:print_stacktrace=1", sanitizerExit)},
}

// cEnv is the environment of a program run as a domain of the monitor in
// dir ("" for none).
func cEnv(dir string) []string {
	env := os.Environ()
	if dir != "" {
		env = append(env, "CHANOS_DIR="+dir)
	}
	for _, o := range sanitizerOptions {
		v := o.opts
		if old := os.Getenv(o.name); old != "" {
			v = old + ":" + v
		}
		env = append(env, o.name+"="+v)
	}
	return env
}

// exitCode returns the exit status of a program whose Wait returned err,
// or -1 if a signal ended it.
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

// checkExit fails the test unless a program that ended with err (the
// result of its Wait) exited with status want; output is what it printed,
// for the report. A sanitizer's status fails the test whatever want is.
func checkExit(t *testing.T, name string, err error, output string, want int) bool {
	t.Helper()
	switch code := exitCode(err); {
	case code == sanitizerExit:
		t.Errorf("%s: a sanitizer reported an error (exit status %d):\n%s", name, sanitizerExit, output)
	case code != want:
		t.Errorf("%s ended with %v, want exit status %d:\n%s", name, err, want, output)
	default:
		return true
	}
	return false
}

// runExit runs a program as a domain of the monitor in dir to its end,
// fails the test unless it exits with status want, and returns its output
// (stdout and stderr together).
func runExit(t *testing.T, dir string, want int, prog string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Env = cEnv(dir)
	out, err := cmd.CombinedOutput()
	name := strings.Join(append([]string{filepath.Base(prog)}, args...), " ")
	if !checkExit(t, name, err, string(out), want) {
		t.FailNow()
	}
	t.Logf("%s:\n%s", name, out)
	return string(out)
}

// run runs a client program to its end and checks that it succeeded.
func run(t *testing.T, dir string, prog string, args ...string) string {
	t.Helper()
	return runExit(t, dir, 0, prog, args...)
}

// proc is a program running as a domain, its stdout read line by line.
type proc struct {
	*testkit.Child
	name   string
	stdin  io.WriteCloser
	stderr *testkit.Output
	// server: stopped with SIGTERM at cleanup, which must end it with
	// status 0.
	server bool
	// checked: the test has looked at how the program ended; reported:
	// and failed, with the program's stderr.
	checked, reported bool
}

// spawn starts a program as a domain of the monitor in dir, with a pipe to
// its stdin. At cleanup, unless the test looked at how it ended, its stdin
// is closed and it must end with status 0.
func spawn(t *testing.T, dir, prog string, args ...string) *proc {
	t.Helper()
	return spawnProc(t, false, dir, prog, args...)
}

// start runs a server as a domain of the monitor in dir and waits until
// it prints a line beginning with want. At cleanup, unless the test ended
// it, it is stopped with SIGTERM and must exit with status 0.
func start(t *testing.T, dir, want string, prog string, args ...string) *proc {
	t.Helper()
	p := spawnProc(t, true, dir, prog, args...)
	if line := p.Line(t); !strings.HasPrefix(line, want) {
		t.Fatalf("%s printed %q, want %q...", p.name, line, want)
	}
	return p
}

func spawnProc(t *testing.T, server bool, dir, prog string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(prog, args...)
	cmd.Env = cEnv(dir)
	p := &proc{name: filepath.Base(prog), stderr: &testkit.Output{}, server: server}
	cmd.Stderr = p.stderr
	var err error
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	p.Child = testkit.Start(t, cmd)
	t.Cleanup(func() { p.cleanup(t) })
	return p
}

func (p *proc) cleanup(t *testing.T) {
	t.Helper()
	p.stdin.Close()
	switch {
	case p.checked:
	case p.server:
		p.stop(t)
	default:
		select {
		case <-p.Done():
			p.reported = !checkExit(t, p.name, p.Wait(t), p.stderr.String(), 0)
		case <-time.After(5 * time.Second):
			p.Kill()
			if !t.Failed() {
				t.Errorf("%s was still running at the end of the test", p.name)
			}
		}
	}
	if s := p.stderr.String(); s != "" && !p.reported {
		t.Logf("%s's stderr:\n%s", p.name, s)
	}
}

// stop sends the program SIGTERM and fails the test unless it exits with
// status 0.
func (p *proc) stop(t *testing.T) {
	t.Helper()
	p.checked = true
	p.Cmd.Process.Signal(syscall.SIGTERM)
	p.reported = !checkExit(t, p.name+" stopped with SIGTERM", p.Wait(t), p.stderr.String(), 0)
}

// kill kills the program with -9, waits for its end and fails the test
// unless the signal ended it.
func (p *proc) kill(t *testing.T) {
	t.Helper()
	p.checked = true
	p.Cmd.Process.Signal(syscall.SIGKILL)
	err := p.Wait(t)
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			return
		}
	}
	p.reported = true
	if exitCode(err) == sanitizerExit {
		t.Errorf("%s: a sanitizer reported an error (exit status %d) before kill -9:\n%s", p.name, sanitizerExit, p.stderr.String())
		return
	}
	t.Errorf("%s ended with %v, not by kill -9:\n%s", p.name, err, p.stderr.String())
}

// wait waits for the end of the program, logs the output the test has not
// read, and fails the test unless it exited with status want.
func (p *proc) wait(t *testing.T, want int) bool {
	t.Helper()
	p.checked = true
	err := p.Wait(t)
	for _, l := range p.Remaining() {
		t.Logf("%s: %s", p.name, l)
	}
	ok := checkExit(t, p.name, err, p.stderr.String(), want)
	p.reported = !ok
	return ok
}
