package bench

import (
	"bytes"
	"strings"
	"testing"
)

// TasksTable prints each ratio from the rows it has, the one-runtime
// speed-up and the serial copies' included, round by round where the rows
// have their rounds, and none whose rows are missing.
func TestTasksTableRatios(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	rows := []Result{
		{Suite: "tasks", Case: "fib", Runtime: "serial", Workers: 1, TimeS: f(0.010)},
		{Suite: "tasks", Case: "fib", Runtime: "chanos", Workers: 1, TimeS: f(0.020), RunFigures: []float64{0.020, 0.026, 0.028}},
		{Suite: "tasks", Case: "fib", Runtime: "chanos", Workers: 2, TimeS: f(0.016), RunFigures: []float64{0.016, 0.013, 0.020}},
		{Suite: "tasks", Case: "fib", Runtime: "chanos-one-rt", Workers: 1, TimeS: f(0.024), RunFigures: []float64{0.024, 0.030, 0.026}},
		{Suite: "tasks", Case: "fib", Runtime: "chanos-one-rt", Workers: 2, TimeS: f(0.012), RunFigures: []float64{0.012, 0.020, 0.013}},
		{Suite: "tasks", Case: "fib", Runtime: "serial-copies", Workers: 1, TimeS: f(0.013), RunFigures: []float64{0.013, 0.013, 0.014}},
		{Suite: "tasks", Case: "fib", Runtime: "serial-copies", Workers: 2, TimeS: f(0.020), RunFigures: []float64{0.020, 0.026, 0.014}},
		{Suite: "tasks", Case: "mergesort", Runtime: "chanos", Workers: 1, TimeS: f(1.0)},
	}
	var b bytes.Buffer
	TasksTable(&b, rows)
	out := b.String()
	for _, want := range []string{"fib: T1/T_serial 2.00\n", "fib: T1/T2 1.25, by round: 1.40 (1.25 to 2.00)\n", "fib: T1/T2 on one runtime 2.00, by round: 2.00 (1.50 to 2.00)\n",
		"fib: two serial copies at once, 2 x one / two (the machine's speed-up for two threads) 1.30, by round: 1.30 (1.00 to 2.00)\n",
		"fib: T1 / one serial copy on a pinned thread 1.54, by round: 2.00 (1.54 to 2.00)\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("TasksTable lacks %q:\n%s", want, out)
		}
	}
	for _, absent := range []string{"mergesort: T1/T2", "mergesort: T1/T_serial", "mergesort: T1/T2 on one runtime", "mergesort: two serial copies"} {
		if strings.Contains(out, absent) {
			t.Errorf("TasksTable printed %q without its rows:\n%s", absent, out)
		}
	}
}
