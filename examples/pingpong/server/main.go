// Command pingpong-server exports the bundled pingpong interface under a
// name and serves it: it answers each ping with a pong, echo with its
// argument, and bounce with its payload. Beside it, it serves reflection
// under NAME.reflection, so that tools such as chanos call need no copy
// of pingpong.if (docs/reflection.md).
//
// Run a monitor first (chanos monitor), then:
//
//	pingpong-server -name pingsvc
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/interfaces/pingpong"
	"github.com/chanos/chanos/interfaces/reflection"
)

// server implements pingpong.Server. Its methods run in the goroutine that
// reads the connection, so a reply costs no goroutine hop.
type server struct {
	pingpong.UnimplementedServer
}

func (server) Ping(ctx context.Context, from *pingpong.Client, m pingpong.Ping) error {
	return from.Send(ctx, &pingpong.Pong{ClientID: m.ClientID, MsgID: m.MsgID})
}

func (server) Data(ctx context.Context, from *pingpong.Client, m pingpong.Data) error {
	return nil // a sink for streaming
}

func (server) Echo(ctx context.Context, val uint64) (uint64, error) { return val, nil }

func (server) Bounce(ctx context.Context, payload []byte) ([]byte, error) { return payload, nil }

func main() {
	name := flag.String("name", "pingsvc", "name to export the service under")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *name); err != nil {
		fmt.Fprintln(os.Stderr, "pingpong-server:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, name string) error {
	// If the monitor dies, the domain says so here, waits for a new one
	// in the same directory, rejoins it and exports name again; the
	// clients already connected are served throughout.
	d, err := chanos.Join(ctx, chanos.WithProgram("pingpong-server"), chanos.OnMonitor(func(ev chanos.MonitorEvent) {
		if ev.Lost {
			slog.Warn("pingpong-server: lost the monitor; waiting for a new one", "err", ev.Err)
		} else {
			slog.Info("pingpong-server: rejoined the monitor", "domain", ev.Domain, "err", ev.Err)
		}
	}))
	if err != nil {
		return err
	}
	defer d.Close()
	l, err := pingpong.Export(ctx, d, name)
	if err != nil {
		return err
	}
	defer l.Close()
	rl, err := reflection.Export(ctx, d, reflection.NameOf(name))
	if err != nil {
		return err
	}
	defer rl.Close()
	go reflection.Serve(ctx, rl, reflection.NewExports(d))
	slog.Info("pingpong-server: serving", "name", name, "domain", d.ID())
	// Serve returns when ctx ends (SIGINT, SIGTERM).
	return pingpong.Serve(ctx, l, server{})
}
