// Package testmonitor is for tests only: it serves a monitor in the
// test's process, in a private directory, for tests of the domains that
// join it. The monitor package's own tests serve theirs with
// testkit.Serve directly, since they cannot import this package.
package testmonitor

import (
	"log/slog"
	"testing"

	"github.com/chanos/chanos/internal/testkit"
	"github.com/chanos/chanos/monitor"
)

// Start serves a monitor in a new private directory until the test ends,
// and returns the directory (for chanos.WithDir, or CHANOS_DIR in a
// child's environment).
func Start(t testing.TB) string {
	t.Helper()
	dir := testkit.ShortDir(t)
	Serve(t, dir)
	return dir
}

// Serve serves a monitor in dir until stop is called or the test ends;
// after stop another may serve in the same directory. The test fails if
// the monitor does not stop cleanly, and then shows its logs.
func Serve(t testing.TB, dir string) (stop func()) {
	t.Helper()
	logs := &testkit.Output{}
	m, err := monitor.New(monitor.Config{Dir: dir, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return testkit.Serve(t, m, logs)
}
