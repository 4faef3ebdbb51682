package bench

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/chanos/chanos/monitor"
)

// privateMonitor starts a monitor of the suite's own in a new temporary
// directory named after prefix, so that a run neither needs nor disturbs
// the user's, and returns the directory and the function that stops the
// monitor and removes the directory.
func privateMonitor(ctx context.Context, prefix string) (dir string, stop func(), err error) {
	dir, err = os.MkdirTemp("", prefix)
	if err != nil {
		return "", nil, fmt.Errorf("monitor directory: %w", err)
	}
	m, err := monitor.New(monitor.Config{Dir: dir, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("private monitor: %w", err)
	}
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { m.Serve(mctx); close(done) }()
	return dir, func() { cancel(); <-done; os.RemoveAll(dir) }, nil
}
