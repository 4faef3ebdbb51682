package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"text/tabwriter"
)

// TasksConfig configures RunTasks.
type TasksConfig struct {
	Quick    bool
	Repeat   int      // runs per figure (their median); 0: the program's default, 5
	Cases    []string // fib, mergesort, nqueens, msg-rtt, remove-worker; none: all
	Progress io.Writer
}

// RunTasks runs the task runtime's figures (docs/tasks.md): the C program
// tasks_bench of the C build, which runs each workload on chanos's
// runtime and on its baselines (serial C, OpenMP, a raw ump round trip)
// in one process run and prints a JSON object per figure. With Quick the
// problems are small: the run checks that every case runs, and its times
// say little.
func RunTasks(ctx context.Context, cfg TasksConfig, emit func(Result) error) error {
	prog, err := FindCProgram("tasks/bench/tasks_bench")
	if err != nil {
		return err
	}
	args := []string{"--case", "all"}
	if len(cfg.Cases) > 0 {
		args = []string{"--case", strings.Join(cfg.Cases, ",")}
	}
	if cfg.Repeat > 0 {
		args = append(args, "--reps", fmt.Sprint(cfg.Repeat))
	}
	if cfg.Quick {
		args = append(args, "--fib", "25", "--msort", "200000", "--nqueens", "9", "--rtt-iters", "2000")
		if cfg.Repeat == 0 {
			args = append(args, "--reps", "1")
		}
	}
	cmd := exec.CommandContext(ctx, prog, args...)
	if cfg.Progress != nil {
		cmd.Stderr = cfg.Progress
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("tasks: %w", err)
	}
	sc := bufio.NewScanner(out)
	var emitErr error
	for sc.Scan() {
		var r Result
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil || r.Suite != "tasks" {
			emitErr = fmt.Errorf("tasks: %s printed %q, not a result", prog, sc.Text())
			break
		}
		if r.Runtime == "" {
			r.Runtime = r.Transport
		}
		r.Transport, r.Peers = r.Runtime, fmt.Sprintf("workers=%d", r.Workers)
		if emitErr = emit(r); emitErr != nil {
			break
		}
	}
	if emitErr != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return emitErr
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("tasks: %s: %w", prog, err)
	}
	return nil
}

// TasksTable prints the task suite's results and its ratios: the work
// overhead T1/T_serial, the speed-up T1/T2, and the time of OpenMP's
// tasks over chanos's at the same number of workers.
func TasksTable(w io.Writer, results []Result) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "case\truntime\tworkers\tn\ttime_s\trtt_ns_p50\trtt_ns_p99")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\n", r.Case, r.Runtime, r.Workers, r.N, opt(r.TimeS, "%.4f"), opt(r.RTTp50, "%.0f"), opt(r.RTTp99, "%.0f"))
	}
	tw.Flush()
	find := func(c, rt string, workers int) *Result {
		i := slices.IndexFunc(results, func(r Result) bool {
			return r.Case == c && r.Runtime == rt && (workers == 0 || r.Workers == workers) && r.TimeS != nil
		})
		if i < 0 {
			return nil
		}
		return &results[i]
	}
	for _, c := range []string{"fib", "mergesort", "nqueens"} {
		serial, t1, t2, omp2 := find(c, "serial", 0), find(c, "chanos", 1), find(c, "chanos", 2), find(c, "openmp", 2)
		if t1 != nil && serial != nil {
			fmt.Fprintf(w, "%s: T1/T_serial %.2f\n", c, *t1.TimeS / *serial.TimeS)
		}
		if t1 != nil && t2 != nil {
			fmt.Fprintf(w, "%s: T1/T2 %.2f\n", c, *t1.TimeS / *t2.TimeS)
		}
		if t2 != nil && omp2 != nil {
			fmt.Fprintf(w, "%s: OpenMP / chanos, 2 workers %.2f\n", c, *omp2.TimeS / *t2.TimeS)
		}
	}
	ci := slices.IndexFunc(results, func(r Result) bool { return r.Case == "msg-rtt" && r.Runtime == "chanos" && r.RTTp50 != nil })
	ri := slices.IndexFunc(results, func(r Result) bool { return r.Case == "msg-rtt" && r.Runtime == "ump-raw" && r.RTTp50 != nil })
	if ci >= 0 && ri >= 0 {
		fmt.Fprintf(w, "msg-rtt: chanos tasks / raw ump p50 %.2f\n", *results[ci].RTTp50 / *results[ri].RTTp50)
	}
}

func opt(p *float64, format string) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprintf(format, *p)
}
