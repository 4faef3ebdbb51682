// Package testkit is for tests only: what the tests of several packages
// share, so that each piece exists once.
//
//   - Context, Within, Await and Eventually bound a test's waits, so that
//     a hang fails the test instead of using up the test binary's timeout.
//   - WaitContext tells when a call has begun to wait on it, so that a
//     test ends a waiting call rather than one that had not yet waited.
//   - ShortDir makes a private directory whose socket paths fit.
//   - Serve runs a server (a monitor) until the test ends and checks how
//     it stopped; the package testmonitor below builds the monitor.
//     Output collects its logs, or what a process prints.
//   - Main, Command, Self and Start let a test binary play roles in child
//     processes.
//
// Its subfolders hold the other test tools: cvectors (the wire vectors
// as C tests), wiretest (the wire vectors against generated Go code) and
// testmonitor. Nothing but tests may import any of it.
package testkit

import (
	"context"
	"net"
	"os"
	"runtime"
	"testing"
	"time"
)

// Limit bounds every wait of the kit. What a test checks is the state it
// waits for; the bound only turns a hang into a failure.
const Limit = 60 * time.Second

// Context returns a context that ends when the test does, or after Limit.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), Limit)
	t.Cleanup(cancel)
	return ctx
}

// Within returns what fn returns, and fails the test if fn has not
// returned after d: a fault must be noticed promptly, and a hang must not
// use up the test's whole timeout.
func Within(t testing.TB, d time.Duration, what string, fn func() error) error {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- fn() }()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case err := <-errc:
		return err
	case <-timer.C:
		t.Fatalf("%s: no result within %v", what, d)
		return nil
	}
}

// Await returns the next value from ch (the zero value once ch is
// closed), and fails the test if none comes within Limit: a hook or a
// handler says on ch that the test has reached the point it names.
func Await[T any](t testing.TB, what string, ch <-chan T) T {
	t.Helper()
	timer := time.NewTimer(Limit)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("gave up waiting for %s", what)
		var zero T
		return zero
	}
}

// Eventually polls cond until it holds, and fails the test if it still
// does not after Limit.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	limit := time.Now().Add(Limit)
	for !cond() {
		if time.Now().After(limit) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// ShortDir returns a new private directory (mode 0700), removed when the
// test ends. Its path is short: a socket's path is limited to 107 bytes,
// which t.TempDir's long names can exceed.
func ShortDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("", "ck")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// OpenFDs counts the descriptors this process has open: what a test
// compares before and after to find a leak.
func OpenFDs(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// NoLeaks checks, when the test ends (after the cleanups registered
// later, which close what the test made), that the process's goroutines
// and descriptors are back to what they were, giving them 5 s to go; it
// reports the goroutines' stacks if not.
func NoLeaks(t testing.TB) {
	t.Helper()
	// The runtime's network poller opens descriptors of its own at the
	// process's first network use, and keeps them: that is before the
	// count.
	if ln, err := net.Listen("tcp", "127.0.0.1:0"); err == nil {
		ln.Close()
	}
	g0, f0 := runtime.NumGoroutine(), OpenFDs(t)
	t.Cleanup(func() {
		if t.Failed() {
			return
		}
		deadline := time.Now().Add(5 * time.Second)
		for (runtime.NumGoroutine() > g0 || OpenFDs(t) > f0) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if g, f := runtime.NumGoroutine(), OpenFDs(t); g > g0 || f > f0 {
			buf := make([]byte, 1<<16)
			t.Errorf("leak: %d goroutines and %d descriptors, %d and %d before\n%s", g, f, g0, f0, buf[:runtime.Stack(buf, true)])
		}
	})
}
