package testkit

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
)

// A Server is what Serve runs: a monitor. The kit takes it as an
// interface so that the monitor package's own tests, which testmonitor
// cannot serve without an import cycle, use the same Serve.
type Server interface {
	// Serve serves until ctx ends, and returns nil if it stopped cleanly.
	Serve(ctx context.Context) error
	// Socket is the path of the socket it listens on, which it must
	// remove when it stops.
	Socket() string
}

// Serve runs s in a new goroutine until stop is called or the test ends,
// then fails the test unless s.Serve returned nil and removed its socket.
// Calling stop again does nothing. logs, if not nil, holds what s logged,
// which the test's output shows if the test failed.
func Serve(t testing.TB, s Server, logs *Logs) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-served; err != nil {
				t.Errorf("Serve: %v", err)
			}
			if _, err := os.Lstat(s.Socket()); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("socket left behind after shutdown: %v", err)
			}
		})
	}
	t.Cleanup(func() {
		stop()
		if logs != nil && t.Failed() {
			t.Logf("server logs:\n%s", logs)
		}
	})
	return stop
}

// Logs collects a server's log output (give it to a slog handler) for
// the test to inspect.
type Logs struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *Logs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *Logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// Count returns how many lines contain every one of subs.
func (l *Logs) Count(subs ...string) int {
	n := 0
	for _, line := range strings.Split(l.String(), "\n") {
		ok := line != ""
		for _, s := range subs {
			ok = ok && strings.Contains(line, s)
		}
		if ok {
			n++
		}
	}
	return n
}

// Wait waits until a line contains every one of subs.
func (l *Logs) Wait(t testing.TB, subs ...string) {
	t.Helper()
	Eventually(t, "a log line with "+strings.Join(subs, ", "), func() bool { return l.Count(subs...) > 0 })
}
