// Command chanos is the chanos command line: the monitor, inspection
// commands and the benchmark suites.
//
// Usage:
//
//	chanos monitor [--dir DIR]   run this machine's monitor
//	chanos names [PREFIX]        list names (--json)
//	chanos ps                    list domains, exports, connections (--json)
//	chanos demo                  monitor, server and client as separate processes
//	chanos bench SUITE [flags]   run a benchmark suite (see docs/benchmarks.md)
//	chanos version               print the version
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

const version = "0.1.0-dev"

// errUsage marks a command-line mistake; main prints usage and exits 2.
var errUsage = errors.New("usage")

const usage = `usage: chanos COMMAND [ARGS]

commands:
  monitor [--dir DIR]   run this machine's monitor (one per user by default)
  names [PREFIX]        list the nameservice's names (--json for JSON)
  ps                    list domains with their exports and connections (--json)
  demo                  run a monitor, a server and a client as separate processes
  bench SUITE [flags]   run a benchmark suite; 'chanos bench -h' lists suites
  version               print the version
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err == nil {
		return
	}
	if errors.Is(err, errUsage) {
		fmt.Fprintf(os.Stderr, "chanos: %v\n%s", err, usage)
		os.Exit(2)
	}
	fmt.Fprintf(os.Stderr, "chanos: %v\n", err)
	os.Exit(1)
}

func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: no command given", errUsage)
	}
	switch args[0] {
	case "bench":
		return runBench(ctx, args[1:])
	case "demo":
		return runDemo(ctx, args[1:])
	case "monitor":
		return runMonitor(ctx, args[1:])
	case "names":
		return runNames(ctx, args[1:])
	case "ps":
		return runPs(ctx, args[1:])
	case "version":
		fmt.Println("chanos", version)
		return nil
	case "help", "-h", "--help":
		fmt.Print(usage)
		return nil
	}
	return fmt.Errorf("%w: unknown command %q", errUsage, args[0])
}
