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
func Serve(t testing.TB, s Server, logs *Output) (stop func()) {
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

// Output collects what a server logs (give it to a slog handler) or a
// process prints, for the test to inspect; it is safe for concurrent use.
type Output struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (o *Output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.Write(p)
}

func (o *Output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// Count returns how many lines contain every one of subs.
func (o *Output) Count(subs ...string) int {
	n := 0
	for _, line := range strings.Split(o.String(), "\n") {
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
func (o *Output) Wait(t testing.TB, subs ...string) {
	t.Helper()
	Eventually(t, "a line with "+strings.Join(subs, ", "), func() bool { return o.Count(subs...) > 0 })
}
