package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"slices"
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
// runtime and on its baselines (serial C, OpenMP, oneTBB where installed,
// a raw ump round trip) in one process run and prints a JSON object per
// figure, then the same workloads as Go goroutines. With Quick the
// problems are small: the run checks that every case runs, and its times
// say little.
func RunTasks(ctx context.Context, cfg TasksConfig, emit func(Result) error) error {
	prog, err := FindCProgram("tasks/bench/tasks_bench")
	if err != nil {
		return err
	}
	fib, msortN, nq, reps := int64(35), 100_000_000, 12, 5
	if cfg.Quick {
		fib, msortN, nq, reps = 25, 200_000, 9, 1
	}
	if cfg.Repeat > 0 {
		reps = cfg.Repeat
	}
	args := []string{"--fib", fmt.Sprint(fib), "--msort", fmt.Sprint(msortN), "--nqueens", fmt.Sprint(nq), "--reps", fmt.Sprint(reps)}
	if cfg.Quick {
		args = append(args, "--rtt-iters", "2000")
	}
	cases := cfg.Cases
	if len(cases) == 0 {
		cases = []string{"all"}
	}
	for _, c := range cases {
		if err := runTasksProgram(ctx, prog, append([]string{"--case", c}, args...), cfg.Progress, emit); err != nil {
			return err
		}
	}
	var goCases []string
	if len(cfg.Cases) > 0 {
		goCases = cfg.Cases
	}
	return runGoTasks(fib, msortN, nq, reps, goCases, emit)
}

// runTasksProgram runs tasks_bench with args and emits what it prints.
func runTasksProgram(ctx context.Context, prog string, args []string, progress io.Writer, emit func(Result) error) error {
	cmd := exec.CommandContext(ctx, prog, args...)
	if progress != nil {
		cmd.Stderr = progress
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
// overhead T1/T_serial, the speed-up T1/T2, and the time of each
// baseline (OpenMP's tasks, oneTBB's task_group, goroutines) over
// chanos's at 2 workers; for fib, whose chanos rows are the fast path,
// the same two ratios of the general form (runtime chanos-general).
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
		serial, t1, t2, omp2, tbb2, go2 := find(c, "serial", 0), find(c, "chanos", 1), find(c, "chanos", 2), find(c, "openmp", 2), find(c, "tbb", 2), find(c, "go", 2)
		if t1 != nil && serial != nil {
			fmt.Fprintf(w, "%s: T1/T_serial %.2f%s\n", c, *t1.TimeS / *serial.TimeS, byRound(t1, serial, 1))
		}
		if t1 != nil && t2 != nil {
			fmt.Fprintf(w, "%s: T1/T2 %.2f%s\n", c, *t1.TimeS / *t2.TimeS, byRound(t1, t2, 1))
		}
		// The same two timed on one runtime (chanos_tasks_set_workers), so
		// that both see the same memory layout.
		o1, o2 := find(c, "chanos-one-rt", 1), find(c, "chanos-one-rt", 2)
		if o1 != nil && o2 != nil {
			fmt.Fprintf(w, "%s: T1/T2 on one runtime %.2f%s\n", c, *o1.TimeS / *o2.TimeS, byRound(o1, o2, 1))
		}
		// One and two copies of the serial program at once, timed in the
		// rounds of the chanos rows: what the machine gave two threads
		// that share nothing, the bound of any speed-up of this work then.
		if s1, s2 := find(c, "serial-copies", 1), find(c, "serial-copies", 2); s1 != nil && s2 != nil {
			fmt.Fprintf(w, "%s: two serial copies at once, 2 x one / two (the machine's speed-up for two threads) %.2f%s\n",
				c, 2*(*s1.TimeS)/(*s2.TimeS), byRound(s1, s2, 2))
			if t1 != nil {
				fmt.Fprintf(w, "%s: T1 / one serial copy on a pinned thread %.2f%s\n", c, *t1.TimeS / *s1.TimeS, byRound(t1, s1, 1))
			}
		}
		// fib's chanos rows are its fast path (chanos_fspawn); the
		// general form (chanos_spawn) is measured beside it.
		g1, g2 := find(c, "chanos-general", 1), find(c, "chanos-general", 2)
		if g1 != nil && serial != nil {
			fmt.Fprintf(w, "%s: general form, T1/T_serial %.2f%s\n", c, *g1.TimeS / *serial.TimeS, byRound(g1, serial, 1))
		}
		if g1 != nil && g2 != nil {
			fmt.Fprintf(w, "%s: general form, T1/T2 %.2f%s\n", c, *g1.TimeS / *g2.TimeS, byRound(g1, g2, 1))
		}
		for _, b := range []struct {
			name string
			r    *Result
		}{{"OpenMP", omp2}, {"oneTBB", tbb2}, {"Go", go2}} {
			if t2 != nil && b.r != nil {
				fmt.Fprintf(w, "%s: %s / chanos, 2 workers %.2f\n", c, b.name, *b.r.TimeS / *t2.TimeS)
			}
		}
	}
	ci := slices.IndexFunc(results, func(r Result) bool { return r.Case == "msg-rtt" && r.Runtime == "chanos" && r.RTTp50 != nil })
	ri := slices.IndexFunc(results, func(r Result) bool { return r.Case == "msg-rtt" && r.Runtime == "ump-raw" && r.RTTp50 != nil })
	if ci >= 0 && ri >= 0 {
		fmt.Fprintf(w, "msg-rtt: chanos tasks / raw ump p50 %.2f\n", *results[ci].RTTp50 / *results[ri].RTTp50)
	}
}

// byRound returns ", by round: M (L to H)": the median, least and
// greatest over the rounds of scale * a's time over b's time in the same
// round (Result.RunFigures); "" unless both have the same rounds.
func byRound(a, b *Result, scale float64) string {
	n := len(a.RunFigures)
	if n < 2 || len(b.RunFigures) != n {
		return ""
	}
	ratios := make([]float64, 0, n)
	for i := range n {
		if b.RunFigures[i] > 0 {
			ratios = append(ratios, scale*a.RunFigures[i]/b.RunFigures[i])
		}
	}
	if len(ratios) < 2 {
		return ""
	}
	m := sortMedian(ratios)
	return fmt.Sprintf(", by round: %.2f (%.2f to %.2f)", m, ratios[0], ratios[len(ratios)-1])
}

func opt(p *float64, format string) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprintf(format, *p)
}
