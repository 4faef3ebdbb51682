package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/chanos/chanos/bench"
)

// benchSuite runs one suite: it reports each result to emit.
type benchSuite struct {
	help string
	run  func(ctx context.Context, o benchOptions, emit func(bench.Result) error) error
	// summary, if set, prints the suite's ratios under the table.
	summary func(w io.Writer, results []bench.Result)
}

type benchOptions struct {
	quick    bool
	repeat   int
	cases    []string
	progress io.Writer
}

var benchSuites = map[string]benchSuite{
	"ump": {
		help: "shared-memory rings: round trips, parked wake-ups, streaming, idle CPU (docs/ump.md)",
		run: func(ctx context.Context, o benchOptions, emit func(bench.Result) error) error {
			return bench.RunUMP(ctx, bench.UMPConfig{Quick: o.quick, Repeat: o.repeat, Cases: o.cases, Progress: o.progress}, emit)
		},
		summary: bench.UMPSummary,
	},
	"rpc": {
		help: "rpcs through generated stubs over ump and local, beside the raw ring; local messages vs a Go channel",
		run: func(ctx context.Context, o benchOptions, emit func(bench.Result) error) error {
			return bench.RunRPC(ctx, bench.DomainConfig{Quick: o.quick, Repeat: o.repeat, Progress: o.progress}, emit)
		},
		summary: bench.DomainSummary,
	},
	"bind": {
		help: "connect-by-name latency (lookup, bind, ring setup) and nameservice get",
		run: func(ctx context.Context, o benchOptions, emit func(bench.Result) error) error {
			return bench.RunBind(ctx, bench.DomainConfig{Quick: o.quick, Repeat: o.repeat, Progress: o.progress}, emit)
		},
	},
}

const benchUsage = `usage: chanos bench SUITE [flags]

Runs a benchmark suite and prints a table, or with --json one JSON object
per line (fields suite, case, transport, peers, size, iters, rtt_ns_p50,
rtt_ns_p99, rtt_ns_mean, msgs_per_s, bytes_per_s, cpu_percent, runs, as
they apply). Figures are medians over --repeat runs; compare them with the
baselines of the same run, not across runs.

flags:
  --json         one JSON object per result line
  --quick        fewer iterations (seconds rather than minutes)
  --repeat N     runs per case, interleaved (default 3, 1 with --quick)
  --cases LIST   comma-separated substrings of case keys
                 (case/transport/peers/size), e.g. rtt-spin,stream/ump/go-go

suites:
`

// runBench implements `chanos bench`.
func runBench(ctx context.Context, args []string) error {
	if len(args) > 0 && args[0] == bench.PeerCommand {
		return bench.Peer(ctx, args[1:], os.Stdout)
	}
	if len(args) > 0 && args[0] == bench.RPCServerCommand {
		return bench.RPCServer(ctx, args[1:])
	}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	jsonOut := fs.Bool("json", false, "")
	quick := fs.Bool("quick", false, "")
	repeat := fs.Int("repeat", 0, "")
	cases := fs.String("cases", "", "")
	// Accept the suite before or after the flags.
	var suiteName string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		suiteName, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printBenchUsage(os.Stdout)
			return nil
		}
		return fmt.Errorf("%w: bench: %v", errUsage, err)
	}
	if suiteName == "" && fs.NArg() > 0 {
		suiteName = fs.Arg(0)
		if err := fs.Parse(fs.Args()[1:]); err != nil {
			return fmt.Errorf("%w: bench: %v", errUsage, err)
		}
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: bench: unexpected arguments %q", errUsage, fs.Args())
	}
	if suiteName == "" || suiteName == "help" {
		printBenchUsage(os.Stderr)
		return fmt.Errorf("%w: bench: no suite given", errUsage)
	}
	suite, ok := benchSuites[suiteName]
	if !ok {
		printBenchUsage(os.Stderr)
		return fmt.Errorf("%w: bench: unknown suite %q", errUsage, suiteName)
	}
	o := benchOptions{quick: *quick, repeat: *repeat}
	if *cases != "" {
		o.cases = strings.Split(*cases, ",")
	}
	if isTerminal(os.Stderr) {
		o.progress = os.Stderr
	}
	var results []bench.Result
	err := suite.run(ctx, o, func(r bench.Result) error {
		results = append(results, r)
		if *jsonOut {
			return bench.WriteJSON(os.Stdout, r)
		}
		return nil
	})
	if !*jsonOut && len(results) > 0 {
		bench.WriteTable(os.Stdout, results)
		if suite.summary != nil {
			fmt.Println()
			suite.summary(os.Stdout, results)
		}
	}
	return err
}

func printBenchUsage(w io.Writer) {
	fmt.Fprint(w, benchUsage)
	names := make([]string, 0, len(benchSuites))
	for n := range benchSuites {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-6s %s\n", n, benchSuites[n].help)
	}
}

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
