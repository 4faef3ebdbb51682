package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/chanos/chanos/monitor"
)

const monitorUsage = `usage: chanos monitor [--dir DIR] [--max-domains N] [--log-level LEVEL]

Runs this user's monitor: domains export and bind services through it, and
it hosts the nameservice. It serves until SIGINT or SIGTERM.

  --dir DIR          the monitor's directory (default: $CHANOS_DIR, else
                     $XDG_RUNTIME_DIR/chanos, else $TMPDIR/chanos-UID)
  --max-domains N    most domains connected at once (default %d)
  --log-level LEVEL  debug, info, warn or error (default info)
`

// runMonitor runs 'chanos monitor'.
func runMonitor(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("monitor", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	dir := fs.String("dir", "", "")
	maxDomains := fs.Int("max-domains", monitor.DefaultMaxDomains, "")
	logLevel := fs.String("log-level", "info", "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Printf(monitorUsage, monitor.DefaultMaxDomains)
			return nil
		}
		return fmt.Errorf("%w: monitor: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: monitor: unexpected argument %q", errUsage, fs.Arg(0))
	}
	if *maxDomains <= 0 {
		return fmt.Errorf("%w: monitor: --max-domains must be positive, not %d", errUsage, *maxDomains)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("%w: monitor: --log-level %q: want debug, info, warn or error", errUsage, *logLevel)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	return monitor.Run(ctx, monitor.Config{
		Dir:        *dir,
		MaxDomains: *maxDomains,
		Logger:     log,
	})
}
