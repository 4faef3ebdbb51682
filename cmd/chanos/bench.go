package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"slices"
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
	// table, if set, prints the results instead of the table and summary.
	table func(w io.Writer, results []bench.Result)
	// cases: the suite runs only the cases --cases selects; the others
	// refuse the flag rather than run everything.
	cases bool
}

type benchOptions struct {
	quick  bool
	repeat int
	// serverProfile: --server-cpuprofile, for the net suite's server.
	serverProfile string
	cases         []string
	progress      io.Writer
}

var benchSuites = map[string]benchSuite{
	"ump": {
		help: "shared-memory rings: round trips, parked wake-ups, streaming, idle CPU (docs/ump.md)",
		run: func(ctx context.Context, o benchOptions, emit func(bench.Result) error) error {
			return bench.RunUMP(ctx, bench.UMPConfig{Quick: o.quick, Repeat: o.repeat, Cases: o.cases, Progress: o.progress}, emit)
		},
		summary: bench.UMPSummary,
		cases:   true,
	},
	"rpc": {
		help: "rpcs through generated stubs over ump and local, beside the raw ring; local messages vs a Go channel; the peers' rpc (gRPC, net/rpc, ...)",
		run: func(ctx context.Context, o benchOptions, emit func(bench.Result) error) error {
			return bench.RunRPCCompare(ctx, o.compare(), emit)
		},
		summary: bench.RPCCompareSummary,
	},
	"pingpong": {
		help: "round trip by payload size (8 B to 64 KiB): chanos's bounce rpc over ump and local vs the peers (docs/bench-compare.md)",
		run: func(ctx context.Context, o benchOptions, emit func(bench.Result) error) error {
			return bench.RunPingpong(ctx, o.compare(), emit)
		},
		summary: bench.CompareSummary,
	},
	"stream": {
		help: "one-way msgs/s and bytes/s by size (64 B to 1 MiB): chanos's data messages over ump and local vs the peers",
		run: func(ctx context.Context, o benchOptions, emit func(bench.Result) error) error {
			return bench.RunStream(ctx, o.compare(), emit)
		},
		summary: bench.CompareSummary,
	},
	"clients": {
		help: "seed 000's Figure 4.18: Go/C server and 1-4 Go/C client processes share 1,000,000 ping-pongs (docs/benchmarks.md)",
		run: func(ctx context.Context, o benchOptions, emit func(bench.Result) error) error {
			return bench.RunClients(ctx, bench.ClientsConfig{Quick: o.quick, Repeat: o.repeat, Cases: o.cases, Progress: o.progress}, emit)
		},
		summary: bench.ClientsSummary,
		cases:   true,
	},
	"ring": {
		help: "seed 000's goroutine ring (§4.2) across processes: 2, 4, 8 stages over ump, local, Go channels and pipes (docs/benchmarks.md)",
		run: func(ctx context.Context, o benchOptions, emit func(bench.Result) error) error {
			return bench.RunRing(ctx, bench.RingConfig{Quick: o.quick, Repeat: o.repeat, Cases: o.cases, Progress: o.progress}, emit)
		},
		summary: bench.RingSummary,
		cases:   true,
	},
	"tasks": {
		help: "the C task runtime: fib, merge sort, N-Queens, task messaging, worker removal, against serial C and OpenMP (docs/tasks.md)",
		run: func(ctx context.Context, o benchOptions, emit func(bench.Result) error) error {
			return bench.RunTasks(ctx, bench.TasksConfig{Quick: o.quick, Repeat: o.repeat, Cases: o.cases, Progress: o.progress}, emit)
		},
		table: bench.TasksTable,
		cases: true,
	},
	"caps": {
		help: "descriptors, endpoints and events in messages against raw SCM_RIGHTS, Connect and eventfd; seed 002's keyboard driver in Go and C (docs/benchmarks.md)",
		run: func(ctx context.Context, o benchOptions, emit func(bench.Result) error) error {
			return bench.RunCaps(ctx, bench.CapsConfig{Quick: o.quick, Repeat: o.repeat, Cases: o.cases, Progress: o.progress}, emit)
		},
		summary: bench.CapsSummary,
		cases:   true,
	},
	"names": {
		help: "issue 20's figures: a domain's get, set and wait_for in cluster mode against a raw etcd client, get on the embedded store, the time to detect a dead machine (needs etcd; docs/cluster.md)",
		run: func(ctx context.Context, o benchOptions, emit func(bench.Result) error) error {
			self, _ := os.Executable()
			return bench.RunNames(ctx, bench.NamesConfig{Quick: o.quick, Repeat: o.repeat, Progress: o.progress, Chanos: self}, emit)
		},
		summary: bench.NamesSummary,
	},
	"net": {
		help: "the net interconnect between two network namespaces over veth (loopback where none can be built): round trips and streams, encrypted, authenticated-only and plain, against raw TCP in Go and C and gRPC-Go; resume after a cut (docs/benchmarks.md)",
		run: func(ctx context.Context, o benchOptions, emit func(bench.Result) error) error {
			return bench.RunNet(ctx, bench.NetConfig{Quick: o.quick, Repeat: o.repeat, Cases: o.cases, Progress: o.progress, Note: os.Stderr, ServerProfile: o.serverProfile}, emit)
		},
		summary: bench.NetSummary,
		cases:   true,
	},
	"bind": {
		help: "connect-by-name latency (lookup, bind, ring setup) and nameservice get",
		run: func(ctx context.Context, o benchOptions, emit func(bench.Result) error) error {
			return bench.RunBind(ctx, bench.DomainConfig{Quick: o.quick, Repeat: o.repeat, Progress: o.progress}, emit)
		},
	},
}

// print writes the suite's results as a person reads them: its own table
// if it has one, else the common table and its ratios.
func (s benchSuite) print(w io.Writer, results []bench.Result) {
	if s.table != nil {
		s.table(w, results)
		return
	}
	bench.WriteTable(w, results)
	if s.summary != nil {
		fmt.Fprintln(w)
		s.summary(w, results)
	}
}

// casesSuiteNames returns the suites that take --cases, sorted.
func casesSuiteNames() []string {
	var names []string
	for name, s := range benchSuites {
		if s.cases {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names
}

// compare returns the options of the comparison suites.
func (o benchOptions) compare() bench.CompareConfig {
	return bench.CompareConfig{Quick: o.quick, Repeat: o.repeat, Progress: o.progress}
}

// allOrder is the order in which `chanos bench all` runs the suites; any
// other registered suite runs after these, by name.
var allOrder = []string{"pingpong", "stream", "rpc", "ump", "bind", "clients", "ring"}

// The suite all runs every other suite: registered here, as its run
// refers to benchSuites.
func init() {
	benchSuites["all"] = benchSuite{
		help: "every suite, one after another, a table and ratios per suite",
		run: func(ctx context.Context, o benchOptions, emit func(bench.Result) error) error {
			var errs []error
			for _, name := range allSuiteNames() {
				if o.progress != nil {
					fmt.Fprintf(o.progress, "all: suite %s\n", name)
				}
				if err := benchSuites[name].run(ctx, o, emit); err != nil {
					if ctx.Err() != nil {
						return err
					}
					if errors.Is(err, bench.ErrNoEtcd) {
						fmt.Fprintf(os.Stderr, "all: suite %s skipped: %v\n", name, err)
						continue
					}
					errs = append(errs, fmt.Errorf("suite %s: %w", name, err))
				}
			}
			return errors.Join(errs...)
		},
		table: func(w io.Writer, results []bench.Result) {
			for i, name := range allSuiteNames() {
				var rs []bench.Result
				for _, r := range results {
					if r.Suite == name {
						rs = append(rs, r)
					}
				}
				if len(rs) == 0 {
					continue
				}
				if i > 0 {
					fmt.Fprintln(w)
				}
				fmt.Fprintf(w, "== %s\n", name)
				benchSuites[name].print(w, rs)
			}
		},
	}
}

// allSuiteNames returns the suites that all runs, in order.
func allSuiteNames() []string {
	var names []string
	for _, n := range allOrder {
		if _, ok := benchSuites[n]; ok {
			names = append(names, n)
		}
	}
	var rest []string
	for n := range benchSuites {
		if n != "all" && !slices.Contains(allOrder, n) {
			rest = append(rest, n)
		}
	}
	sort.Strings(rest)
	return append(names, rest...)
}

const benchUsage = `usage: chanos bench SUITE [flags]
       chanos bench check FILE.jsonl...

Runs a benchmark suite and prints a table, or with --json one JSON object
per line (fields suite, case, transport, peers, size, clients, stages,
iters, total_ns, rtt_ns_p50, rtt_ns_p99, rtt_ns_mean, msgs_per_s,
bytes_per_s, cpu_percent, runs, as they apply). Figures are medians over
--repeat runs; compare them with the baselines of the same run, not across
runs.

flags:
  --json         one JSON object per result line; a failure ends the
                 lines with {"error": MESSAGE, "code": CODE}
  --quick        fewer iterations (seconds rather than minutes)
  --repeat N     runs per case, interleaved round-robin (default 3)
  --cpuprofile F write a CPU profile of this process (the measuring side) to F
  --server-cpuprofile F
                 net suite: the server process (the receiving side of
                 the streams) writes its CPU profile to F
  --cases LIST   comma-separated substrings of case keys
                 (case/transport/peers/size), e.g. rtt-spin,stream/ump/go-go;
                 suites ump, clients, ring, tasks, caps and net
  --plot FILE    also write a chart of the results, PNG or SVG by FILE's
                 extension, one panel per kind of figure (needs
                 bin/chanos-peers; see docs/benchmarks.md)

check reads the JSON lines of a run (FILE "-" is standard input) and fails
if chanos comes out slower than its own raw baseline of the same run by
more than a wide bound (ump C/C against the raw cache line, rpc over ump
against the raw ring, local send+receive against a Go channel; see
docs/bench-compare.md, "Regression bounds"): a regression of ten times
fails, noise does not.

The suites pingpong, stream, rpc and all run the peers (gRPC, shmipc-go,
Unix sockets, ...) with bin/chanos-peers, found beside this executable
(build it with make bin/chanos-peers); see docs/bench-compare.md.

suites:
`

// runBench implements `chanos bench`.
func runBench(ctx context.Context, args []string) error {
	if len(args) > 0 && args[0] == bench.PeerCommand {
		return bench.Peer(ctx, args[1:], os.Stdout)
	}
	if len(args) > 0 && args[0] == bench.SpawnChildCommand {
		return bench.SpawnChild(ctx, args[1:])
	}
	if len(args) > 0 && args[0] == bench.RPCServerCommand {
		return bench.RPCServer(ctx, args[1:])
	}
	if len(args) > 0 && args[0] == bench.NetServerCommand {
		return bench.NetServer(ctx, args[1:])
	}
	if len(args) > 0 && args[0] == bench.CompareServerCommand {
		return bench.CompareServer(ctx, args[1:])
	}
	if len(args) > 0 && args[0] == bench.RingStageCommand {
		return bench.RingStage(ctx, args[1:])
	}
	if len(args) > 0 && args[0] == bench.CapsPeerCommand {
		return bench.CapsPeer(ctx, args[1:])
	}
	if len(args) > 0 && args[0] == "check" {
		return runBenchCheck(args[1:], os.Stdin, os.Stdout)
	}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	jsonOut := fs.Bool("json", false, "")
	quick := fs.Bool("quick", false, "")
	repeat := fs.Int("repeat", 0, "")
	cases := fs.String("cases", "", "")
	cpuProfile := fs.String("cpuprofile", "", "")
	serverProfile := fs.String("server-cpuprofile", "", "")
	plotFile := fs.String("plot", "", "")
	// Accept the suite before or after the flags.
	var suiteName string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		suiteName, args = args[0], args[1:]
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if suiteName == "" && fs.NArg() > 0 {
		suiteName = fs.Arg(0)
		if err := parseFlags(fs, fs.Args()[1:]); err != nil {
			return err
		}
	}
	if fs.NArg() > 0 {
		return usagef("bench", "unexpected arguments %q", fs.Args())
	}
	if suiteName == "help" {
		fmt.Print(usageText("bench"))
		return nil
	}
	if suiteName == "" {
		return usagef("bench", "no suite given")
	}
	suite, ok := benchSuites[suiteName]
	if !ok {
		return usagef("bench", "unknown suite %q", suiteName)
	}
	if *cpuProfile != "" {
		// Profiles this process: the measuring side of each case.
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if *serverProfile != "" && suiteName != "net" {
		return usagef("bench", "--server-cpuprofile is for the net suite, which has a server process to profile")
	}
	o := benchOptions{quick: *quick, repeat: *repeat, serverProfile: *serverProfile}
	if *cases != "" {
		if !suite.cases {
			return usagef("bench", "the %s suite runs all its cases: --cases works with %s", suiteName, strings.Join(casesSuiteNames(), ", "))
		}
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
		suite.print(os.Stdout, results)
	}
	if *plotFile != "" && len(results) > 0 {
		if perr := bench.Plot(ctx, "", results, *plotFile); perr != nil {
			err = errors.Join(err, perr)
		} else if o.progress != nil {
			fmt.Fprintf(o.progress, "bench: wrote %s\n", *plotFile)
		}
	}
	return err
}

// runBenchCheck implements `chanos bench check FILE...`: the results of
// the files, together, against bench.Bounds.
func runBenchCheck(files []string, stdin io.Reader, stdout io.Writer) error {
	if len(files) == 0 {
		return usagef("bench", "check: no results file given (- for standard input)")
	}
	var results []bench.Result
	for _, name := range files {
		r := stdin
		if name != "-" {
			f, err := os.Open(name)
			if err != nil {
				return fmt.Errorf("bench check: %w", err)
			}
			defer f.Close()
			r = f
		}
		rs, err := bench.ReadResults(r)
		if err != nil {
			return fmt.Errorf("bench check: %s: %w", name, err)
		}
		results = append(results, rs...)
	}
	if err := bench.Check(stdout, results, bench.Bounds); err != nil {
		return fmt.Errorf("bench check: chanos against its own baselines:\n%w", err)
	}
	return nil
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
