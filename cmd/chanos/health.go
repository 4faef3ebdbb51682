package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/interfaces/health"
)

const healthUsage = `usage: chanos health [--watch] [--json] [--timeout D] [--dir DIR] NAME [SERVICE]

Asks the health service of the domain that exports NAME (the name
NAME.health: docs/health.md) for the status of SERVICE, or of the domain
as a whole without one, and prints it: serving, not_serving, unknown or
service_unknown. Exits 0 when it is serving and 1 otherwise, so that a
probe can run it as is. NAME may be given as NAME.health too.

  --watch      print the status, then each change, until interrupted
  --json       one JSON document on one line: {"name", "service", "status"}
               (with --watch, one per line); a failure prints
               {"error": MESSAGE, "code": CODE} instead
  --timeout D  how long to wait for NAME.health to exist and for the
               answer (a Go duration; default 3s)
`

// runHealth runs 'chanos health'.
func runHealth(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("health", flag.ContinueOnError)
	dir := fs.String("dir", "", "")
	asJSON := fs.Bool("json", false, "")
	watch := fs.Bool("watch", false, "")
	timeout := fs.Duration("timeout", 3*time.Second, "")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() < 1 || fs.NArg() > 2 {
		return usagef("health", "give NAME and at most a SERVICE")
	}
	name := strings.TrimSuffix(fs.Arg(0), ".health")
	service := fs.Arg(1)
	if len(service) > health.MaxCheckServiceLen {
		return usagef("health", "SERVICE is %d bytes; at most %d", len(service), health.MaxCheckServiceLen)
	}
	if *timeout <= 0 {
		return usagef("health", "--timeout must be positive")
	}
	// The domain's call timeout is how long Connect waits for the name:
	// a probe of a service that is not there fails at once with "not
	// found", rather than when the context ends.
	cctx, cancel := context.WithTimeout(ctx, *timeout+time.Second)
	defer cancel()
	d, err := dialMonitor(cctx, *dir, "chanos health", chanos.WithCallTimeout(*timeout))
	if err != nil {
		return err
	}
	defer d.Close()
	c, err := health.Connect(cctx, d, health.NameOf(name))
	if err != nil {
		return fmt.Errorf("health %s: %w", name, err)
	}
	defer c.Close()
	print := func(st health.ServingStatus) error {
		if *asJSON {
			return writeJSON(os.Stdout, struct {
				Name    string `json:"name"`
				Service string `json:"service"`
				Status  string `json:"status"`
			}{name, service, st.String()})
		}
		_, err := fmt.Println(st)
		return err
	}
	if !*watch {
		st, err := c.Check(cctx, service)
		if errors.Is(err, chanos.CodeNotFound) {
			st, err = health.ServingStatusServiceUnknown, nil
		}
		if err != nil {
			return fmt.Errorf("health %s: %w", name, err)
		}
		if err := print(st); err != nil {
			return err
		}
		if st != health.ServingStatusServing {
			return &programExit{status: 1}
		}
		return nil
	}
	if err := c.Send(cctx, &health.Watch{Service: service}); err != nil {
		return fmt.Errorf("health %s: %w", name, err)
	}
	for {
		m, err := c.Receive(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil // interrupted: the watch's normal end
			}
			return fmt.Errorf("health %s: %w", name, err)
		}
		if ch, ok := m.(*health.Changed); ok && ch.Service == service {
			if err := print(ch.Status); err != nil {
				return err
			}
		}
	}
}
