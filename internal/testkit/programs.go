package testkit

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// The programs of the repository a test runs as real processes: the Go
// commands (built once per test binary) and the C programs of the C build
// directory.

var programs struct {
	mu    sync.Mutex
	dir   string
	built map[string]string // import path -> executable
}

// GoProgram builds the main package pkg (an import path of this module)
// once per test binary and returns the executable's path. CleanPrograms,
// from TestMain, removes what it built.
func GoProgram(t testing.TB, pkg string) string {
	t.Helper()
	programs.mu.Lock()
	defer programs.mu.Unlock()
	if p, ok := programs.built[pkg]; ok {
		return p
	}
	if programs.dir == "" {
		d, err := os.MkdirTemp("", "testkit-bin")
		if err != nil {
			t.Fatal(err)
		}
		programs.dir, programs.built = d, map[string]string{}
	}
	// A directory per package keeps the command's own name (chanos,
	// server, ...) without two packages of one base name meeting.
	out := filepath.Join(programs.dir, strings.ReplaceAll(pkg, "/", "_"), filepath.Base(pkg))
	if b, err := exec.Command("go", "build", "-o", out, pkg).CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	programs.built[pkg] = out
	return out
}

// CleanPrograms removes the executables GoProgram built.
func CleanPrograms() {
	programs.mu.Lock()
	defer programs.mu.Unlock()
	if programs.dir != "" {
		os.RemoveAll(programs.dir)
		programs.dir, programs.built = "", nil
	}
}

// CBuild returns the C build directory named by CHANOS_C_BUILD (made
// absolute), after checking that it holds rel. Without it the test is
// skipped, or fails when CI is set: CI must run every test.
func CBuild(t testing.TB, rel string) string {
	t.Helper()
	dir := os.Getenv("CHANOS_C_BUILD")
	why := ""
	if dir == "" {
		why = "CHANOS_C_BUILD is not set"
	} else if _, err := os.Stat(filepath.Join(dir, rel)); err != nil {
		why = fmt.Sprintf("%s is not built in %s (%v)", rel, dir, err)
	}
	if why != "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s: run 'make c' and set CHANOS_C_BUILD=build/c", why)
		}
		t.Skipf("%s: run 'make c' and set CHANOS_C_BUILD=build/c", why)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

// StartMonitor runs `chanos monitor --dir DIR` with extra flags in a new
// private directory and returns DIR and the process, once the monitor's
// socket is there. At the test's end it stops the monitor with SIGTERM,
// and shows its log if the test failed.
func StartMonitor(t testing.TB, flags ...string) (string, *Child) {
	t.Helper()
	dir := ShortDir(t)
	return dir, StartMonitorIn(t, dir, flags...)
}

// StartMonitorIn is StartMonitor in dir, which may have had a monitor
// before (one killed, whose socket file is left): a restart.
func StartMonitorIn(t testing.TB, dir string, flags ...string) *Child {
	t.Helper()
	cmd := exec.Command(GoProgram(t, "github.com/chanos/chanos/cmd/chanos"), append([]string{"monitor", "--dir", dir}, flags...)...)
	log := &Output{}
	cmd.Stderr = log
	m := Start(t, cmd)
	t.Cleanup(func() {
		m.Cmd.Process.Signal(syscall.SIGCONT) // a test may have stopped it
		m.Cmd.Process.Signal(syscall.SIGTERM)
		m.Wait(t)
		if t.Failed() {
			t.Logf("monitor log:\n%s\n%s", strings.Join(m.Remaining(), "\n"), log)
		}
	})
	sock := filepath.Join(dir, "monitor.sock")
	// A restart finds the socket file of the monitor before: the new one
	// says when it listens.
	Eventually(t, "the monitor's socket "+sock, func() bool {
		_, err := os.Stat(sock)
		return err == nil && log.Count("monitor started") > 0
	})
	return m
}
