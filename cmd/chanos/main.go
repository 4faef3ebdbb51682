// Command chanos is the chanos command line: the monitor, inspection
// commands and the benchmark suites.
//
// Usage:
//
//	chanos monitor [--dir DIR]   run this machine's monitor
//	chanos names [PREFIX]        list names (--json)
//	chanos ps                    list domains, exports, connections (--json)
//	chanos spawn -- PROGRAM      start a program through the spawn service (also wait, kill, logs)
//	chanos health NAME           ask a service's health (exit 0 when serving)
//	chanos call NAME RPC         call an rpc with JSON arguments, no generated code
//	chanos describe NAME         print a service's interface, from its reflection service
//	chanos demo                  monitor, server and client as separate processes
//	chanos cluster COMMAND       machine identity and admission (init, admit, join, revoke, show)
//	chanos bench SUITE [flags]   run a benchmark suite (see docs/benchmarks.md)
//	chanos version               print the version (also chanos --version)
//
// Conventions: a mistake on the command line prints the usage of the
// command it concerns on stderr and exits 2; any other failure exits 1.
// With --json, stdout carries exactly one JSON document per invocation
// (names, ps, version), or one JSON object per line for a stream (bench),
// and a failure is a JSON object too: {"error": MESSAGE, "code": CODE},
// the only document of the invocation, or the stream's last line.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/internal/buildinfo"
)

const usage = `usage: chanos COMMAND [ARGS]

commands:
  monitor [--dir DIR]   run this machine's monitor (one per user by default)
  names [PREFIX]        list the nameservice's names (--json for JSON)
  ps                    list domains with their exports and connections (--json)
  machines              list the machines of the monitor's cluster (--json)
  demo                  run a monitor, a server and a client as separate processes
  cluster COMMAND       machine identity: init, admit, join, revoke, show
  bench SUITE [flags]   run a benchmark suite; 'chanos bench -h' lists suites
  spawn -- PROGRAM ARGS  start a program through the spawn service; then
  wait ID, kill ID, logs ID  wait for it, signal it, read its output (ps --all lists them)
  health NAME [SERVICE]  print a service's health; exit 0 when it is serving
  call [FILE.if] NAME RPC [ARGS]  call an rpc, arguments and results in JSON
  describe NAME         print the interface of a service, as its domain describes it
  version               print the version (also: chanos --version)

'chanos COMMAND -h' prints a command's usage. With --json, stdout holds one
JSON document (a stream, bench, one per line), a failure included:
{"error": MESSAGE, "code": CODE}.
`

const versionUsage = `usage: chanos version [--json]

Prints the version of chanos this program was built from (a module
version, else the commit of the checkout, else "devel") and the Go version
that built it. --json prints {"program", "version", "go"}.
`

// usageError is a mistake on the command line: main prints it with the
// usage of the command it concerns (cmd, "" for chanos itself) and exits
// 2.
type usageError struct {
	cmd string
	msg string
}

func (e *usageError) Error() string { return e.msg }

// usagef returns a usageError of command cmd.
func usagef(cmd, format string, args ...any) error {
	return &usageError{cmd: cmd, msg: fmt.Sprintf(format, args...)}
}

// usageText returns the usage of command cmd ("" for chanos itself).
func usageText(cmd string) string {
	if u, ok := clusterUsageText(cmd); ok {
		return u
	}
	switch cmd {
	case "bench":
		var b strings.Builder
		printBenchUsage(&b)
		return b.String()
	case "demo":
		return demoUsage + demoMachinesUsage
	case "monitor":
		return monitorUsageText() + spawnMonitorUsage
	case "names":
		return namesUsage
	case "machines":
		return machinesUsage
	case "ps":
		return psUsage
	case "spawn":
		return spawnUsage
	case "wait":
		return waitUsage
	case "kill":
		return killUsage
	case "logs":
		return logsUsage
	case "health":
		return healthUsage
	case "call":
		return callUsage
	case "describe":
		return describeUsage
	case "version":
		return versionUsage
	}
	return usage
}

// parseArgs is parseFlags for a command whose flags may come before,
// between or after its arguments, which it returns in order.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := parseFlags(fs, args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// parseFlags parses args with fs, a command's flags: -h prints the
// command's usage on stdout (errHelp: exit 0), a bad flag returns a
// usageError of the command.
func parseFlags(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Print(usageText(fs.Name()))
			return errHelp
		}
		return usagef(fs.Name(), "%v", err)
	}
	return nil
}

// errHelp ends a command whose usage was asked for and printed.
var errHelp = errors.New("help printed")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	args := os.Args[1:]
	err := run(ctx, args)
	stop()
	os.Exit(report(err, jsonRequested(args), os.Stdout, os.Stderr))
}

// report tells of err, run's result, and returns the exit status: 0, 1,
// or 2 for a mistake on the command line. With asJSON the failure goes to
// stdout as a JSON object (the usage, for people, still to stderr).
func report(err error, asJSON bool, stdout, stderr io.Writer) int {
	if err == nil || errors.Is(err, errHelp) {
		return 0
	}
	var pe *programExit
	if errors.As(err, &pe) {
		return pe.status // how the program ended is printed already
	}
	status, code, msg := 1, errorCode(err), err.Error()
	var ue *usageError
	if errors.As(err, &ue) {
		status = 2
		prefix := "chanos"
		if ue.cmd != "" {
			prefix += " " + ue.cmd
		}
		msg = prefix + ": " + ue.msg
		fmt.Fprintf(stderr, "%s\n%s", msg, usageText(ue.cmd))
		if !asJSON {
			return status
		}
	} else {
		// One "chanos: " in front: each layer of the library that wraps
		// the error names its package again, which a person reading the
		// line needs once.
		msg = "chanos: " + strings.ReplaceAll(strings.TrimPrefix(msg, "chanos: "), ": chanos: ", ": ")
	}
	if asJSON {
		b, _ := json.Marshal(struct {
			Error string `json:"error"`
			Code  string `json:"code"`
		}{msg, code})
		fmt.Fprintf(stdout, "%s\n", b)
	} else {
		fmt.Fprintln(stderr, msg)
	}
	return status
}

// errorCode names the kind of err for the JSON error object.
func errorCode(err error) string {
	var ue *usageError
	switch {
	case errors.As(err, &ue):
		return "usage"
	case errors.Is(err, chanos.ErrNoMonitor):
		return "no_monitor"
	case errors.Is(err, chanos.ErrMonitorTimeout):
		return "monitor_timeout"
	case errors.Is(err, chanos.ErrMonitorFull):
		return "monitor_full"
	case errors.Is(err, chanos.ErrMonitorLost):
		return "monitor_lost"
	case errors.Is(err, chanos.ErrDenied):
		return "denied"
	case errors.Is(err, context.Canceled):
		return "interrupted"
	case errors.Is(err, chanos.ErrNotFound):
		return "not_found"
	}
	var re *chanos.RemoteError
	if errors.As(err, &re) || errors.Is(err, context.DeadlineExceeded) {
		// An error reply's status code, or the command's own deadline
		// (--timeout), named as gRPC names its codes.
		return strings.ReplaceAll(chanos.CodeOf(err).String(), " ", "_")
	}
	return "failed"
}

// jsonRequested reports whether args ask for JSON output: a --json flag
// (or -json, --json=true) anywhere before "--". It is read before the
// flags are parsed, so that a mistake on the command line is reported as
// JSON too.
func jsonRequested(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-json", "--json", "-json=true", "--json=true", "-json=1", "--json=1":
			return true
		}
	}
	return false
}

func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return usagef("", "no command given")
	}
	switch args[0] {
	case "bench":
		return runBench(ctx, args[1:])
	case "cluster":
		return runCluster(ctx, args[1:])
	case "demo":
		return runDemo(ctx, args[1:])
	case "monitor":
		return runMonitor(ctx, args[1:])
	case "names":
		return runNames(ctx, args[1:])
	case "machines":
		return runMachines(ctx, args[1:])
	case "ps":
		return runPs(ctx, args[1:])
	case "spawn":
		return runSpawn(ctx, args[1:])
	case "wait":
		return runWait(ctx, args[1:])
	case "kill":
		return runKill(ctx, args[1:])
	case "logs":
		return runLogs(ctx, args[1:])
	case "health":
		return runHealth(ctx, args[1:])
	case "call":
		return runCall(ctx, args[1:])
	case "describe":
		return runDescribe(ctx, args[1:])
	case "version":
		return runVersion(args[1:], os.Stdout)
	case "-version", "--version", "-v":
		if len(args) > 1 {
			return usagef("", "%s takes no arguments", args[0])
		}
		return runVersion(nil, os.Stdout)
	case "help", "-h", "-help", "--help":
		fmt.Print(usage)
		return nil
	}
	if strings.HasPrefix(args[0], "-") {
		return usagef("", "unknown flag %s: give a command first", args[0])
	}
	return usagef("", "unknown command %q", args[0])
}

// runVersion runs 'chanos version'.
func runVersion(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("version", "unexpected argument %q", fs.Arg(0))
	}
	if *asJSON {
		return writeJSON(stdout, struct {
			Program string `json:"program"`
			Version string `json:"version"`
			Go      string `json:"go"`
		}{"chanos", buildinfo.Version(), runtime.Version()})
	}
	_, err := fmt.Fprintln(stdout, buildinfo.Line("chanos"))
	return err
}

// writeJSON writes v as one JSON document on one line: the form of every
// --json output that is not a stream.
func writeJSON(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}
