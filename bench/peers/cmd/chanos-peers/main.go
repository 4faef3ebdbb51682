// Command chanos-peers measures the IPC systems chanos is compared with
// (Unix and TCP sockets, pipes, Go channels, gRPC, shmipc-go, net/rpc) on
// the workloads of `chanos bench`, which runs it and merges its results.
//
// Usage:
//
//	chanos-peers SUITE [--json] [--quick] [--transports uds,tcp,...] [--sizes 8,4K,...]
//	                   [--clients 1,2,3,4] [--warmup D] [--duration D]
//
// SUITE is pingpong, stream, rpc, clients or all. By default it prints a
// table; with --json it prints one JSON object per measurement and line.
// Progress goes to stderr when that is a terminal. The exit status is 2 for
// bad usage and 1 if any measurement failed (the others are still
// reported).
//
// The clients of `chanos bench net`'s gRPC-Go baselines, which that
// suite starts in a network namespace, are commands of their own:
//
//	chanos-peers net-rtt grpc-tcp ADDR ITERS
//	chanos-peers net-stream grpc-tcp ADDR N SIZE
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/chanos/chanos/bench/peers"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == peers.ServeCommand {
		os.Exit(peers.ServeMain(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == peers.NetRTTCommand {
		os.Exit(peers.NetRTTMain(os.Args[2:], os.Stdout))
	}
	if len(os.Args) > 1 && os.Args[1] == peers.NetStreamCommand {
		os.Exit(peers.NetStreamMain(os.Args[2:], os.Stdout))
	}
	// Results own stdout; whatever a library prints there goes to stderr.
	out, err := peers.ReserveStdout()
	if err != nil {
		fmt.Fprintln(os.Stderr, "chanos-peers:", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], out, os.Stderr, isTerminal(os.Stderr))
	stop()
	out.Close()
	os.Exit(code)
}

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

const usage = `usage: chanos-peers SUITE [flags]

Measures the IPC systems chanos is compared with, on chanos bench's workloads.

suites:
  pingpong   round trip of a payload echoed back (case rtt): p50/p99
  stream     one-way messages, acknowledged at the end: msgs/s, bytes/s
  rpc        request/response through each peer's RPC layer, 8 B: p50/p99
  clients    one server, N clients splitting a fixed number of round trips
  all        all of the above

transports: %s

flags:
`

func run(ctx context.Context, args []string, stdout, stderr io.Writer, progress bool) int {
	fs := flag.NewFlagSet("chanos-peers", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, usage, strings.Join(peers.Transports(), ", "))
		fs.PrintDefaults()
	}
	jsonOut := fs.Bool("json", false, "print one JSON object per line instead of a table")
	quick := fs.Bool("quick", false, "short measurements (all suites in well under a minute)")
	transports := fs.String("transports", "", "comma-separated transports to measure (default all)")
	sizes := fs.String("sizes", "", "comma-separated sizes for pingpong and stream, e.g. 8,4K,1M (default per suite)")
	clients := fs.String("clients", "", "comma-separated client counts for clients (default 1,2,3,4)")
	warmup := fs.Duration("warmup", 0, "warm-up before each measurement (default 100ms, quick 20ms)")
	duration := fs.Duration("duration", 0, "length of each measurement (default 500ms, quick 80ms)")

	if err := fs.Parse(args); err != nil {
		return 2
	}
	rest := fs.Args()
	if len(rest) == 0 {
		fs.Usage()
		return 2
	}
	suite := rest[0]
	if err := fs.Parse(rest[1:]); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "chanos-peers: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if !peers.KnownSuite(suite) {
		fmt.Fprintf(stderr, "chanos-peers: unknown suite %q (have %s, all)\n", suite, strings.Join(peers.Suites(), ", "))
		return 2
	}

	o := peers.DefaultOptions()
	if *quick {
		o = peers.QuickOptions()
	}
	if suite != "all" {
		o.Suites = []string{suite}
	}
	if *transports != "" {
		for _, t := range strings.Split(*transports, ",") {
			t = strings.TrimSpace(t)
			if _, err := peers.Lookup(t); err != nil {
				fmt.Fprintln(stderr, "chanos-peers:", err)
				return 2
			}
			o.Transports = append(o.Transports, t)
		}
	}
	if *sizes != "" {
		s, err := peers.ParseSizes(*sizes)
		if err != nil {
			fmt.Fprintln(stderr, "chanos-peers:", err)
			return 2
		}
		o.PingSizes, o.StreamSizes = s, s
	}
	if *clients != "" {
		o.Clients = nil
		for _, f := range strings.Split(*clients, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 || n > 64 {
				fmt.Fprintf(stderr, "chanos-peers: bad client count %q (1 to 64)\n", f)
				return 2
			}
			o.Clients = append(o.Clients, n)
		}
	}
	if *warmup > 0 {
		o.Warmup = *warmup
	}
	if *duration > 0 {
		o.Duration = *duration
	}

	clearLine := func() {}
	if progress {
		clearLine = func() { fmt.Fprint(stderr, "\r\x1b[K") }
		o.Progress = func(p peers.Progress) {
			fmt.Fprintf(stderr, "\r\x1b[K[%d/%d] %s", p.Done+1, p.Total, p.What)
		}
	}

	var table []peers.Result
	flush := func() {
		if len(table) > 0 {
			clearLine()
			peers.WriteTable(stdout, table)
			fmt.Fprintln(stdout)
			table = nil
		}
	}
	err := peers.Run(ctx, o, func(r peers.Result) {
		if *jsonOut {
			r.WriteJSON(stdout)
			return
		}
		if len(table) > 0 && table[0].Suite != r.Suite {
			flush()
		}
		table = append(table, r)
	})
	flush()
	clearLine()
	if err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			fmt.Fprintln(stderr, "chanos-peers:", line)
		}
		if errors.Is(err, context.Canceled) {
			return 130
		}
		return 1
	}
	return 0
}
