// Package netns is for tests only: it builds a cluster of machines on
// one host (package internal/netns) for a test, and removes it when the
// test ends, whether the test passed, failed or panicked.
//
// A test that needs machines calls New. Where they cannot be built (not
// root, no 'ip netns') the test is skipped with the reason, or fails
// when CI is set: CI must run every test.
package netns

import (
	"os"
	"testing"

	hostnet "github.com/chanos/chanos/internal/netns"
	"github.com/chanos/chanos/internal/testkit"
)

// Require skips the test, or fails it when CI is set, unless clusters
// can be built here.
func Require(t testing.TB) {
	t.Helper()
	err := hostnet.Check()
	if err == nil {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%v: CI runs the tests of machines as root", err)
	}
	t.Skipf("%v: run the tests as root to build machines", err)
}

// New builds a cluster of n machines, with a host link (the test's own
// process reaches the machines at their addresses), and removes it when
// the test ends: the processes in its machines are killed, and the test
// fails if anything of it is left. Machines[0] is machine 1.
func New(t testing.TB, n int) *hostnet.Cluster {
	t.Helper()
	return NewWith(t, hostnet.Options{Machines: n, HostLink: true})
}

// NewWith is New with options.
func NewWith(t testing.TB, opts hostnet.Options) *hostnet.Cluster {
	t.Helper()
	Require(t)
	c, err := hostnet.New(testkit.Context(t), opts)
	if err != nil {
		t.Fatalf("building %d machines: %v", opts.Machines, err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("removing the machines: %v", err)
		}
		if left, err := c.Leftovers(); err != nil || len(left) > 0 {
			t.Errorf("left after removing the machines: %v (%v)", left, err)
		}
	})
	return c
}
