package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chanos/chanos/bench"
)

// TestBenchCheck runs `chanos bench check` on a run's lines, as they
// are and with rpc over ump ten times slower against its raw ring.
func TestBenchCheck(t *testing.T) {
	const raw = `{"suite":"rpc","case":"rtt-spin","transport":"ump","peers":"go-go","size":8,"iters":20000,"rtt_ns_p50":230,"rtt_ns_window_p50":206.5}
{"suite":"rpc","case":"send-receive","transport":"local","peers":"go","size":8,"iters":100000,"msgs_per_s":8376705.1,"in_process":true}
{"suite":"rpc","case":"send-receive","transport":"go-chan","peers":"go","size":8,"iters":100000,"msgs_per_s":16140945.3,"in_process":true}
`
	dir := t.TempDir()
	good := filepath.Join(dir, "good.jsonl")
	slow := filepath.Join(dir, "slow.jsonl")
	rpc := func(window, paired string) string {
		return `{"suite":"rpc","case":"rpc","transport":"ump","peers":"go-go","size":8,"iters":20000,"rtt_ns_p50":271,"rtt_ns_window_p50":` + window + `,"paired_ratio":` + paired + "}\n"
	}
	if err := os.WriteFile(good, []byte(raw+rpc("256.4", "1.24")), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(slow, []byte(raw+rpc("2564", "12.4")), 0o644); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := runBenchCheck([]string{good}, nil, &out); err != nil {
		t.Errorf("check of a normal run: %v\n%s", err, out.String())
	}
	out.Reset()
	if err := runBenchCheck([]string{slow}, nil, &out); err == nil || !strings.Contains(err.Error(), "rpc/ump/go-go/8") {
		t.Errorf("check of rpc ten times slower: %v\n%s", err, out.String())
	}
	if err := runBenchCheck([]string{"-"}, strings.NewReader(raw+rpc("256.4", "1.24")), &out); err != nil {
		t.Errorf("check of standard input: %v", err)
	}
	if err := runBenchCheck(nil, nil, &out); err == nil {
		t.Error("check of no file: no error")
	}
}

// `bench all` prints each suite as the suite alone does: the tasks
// suite's own table (runtime, workers, time), not the common one, whose
// columns it does not fill.
func TestBenchAllPrintsEachSuitesTable(t *testing.T) {
	sec := 0.0123
	results := []bench.Result{
		{Suite: "tasks", Case: "fib", Runtime: "chanos", Workers: 2, N: 35, TimeS: &sec},
	}
	var all, alone strings.Builder
	benchSuites["all"].table(&all, results)
	benchSuites["tasks"].print(&alone, results)
	if !strings.Contains(all.String(), "== tasks\n"+alone.String()) {
		t.Fatalf("bench all printed:\n%s\nwant the tasks suite's own table:\n%s", all.String(), alone.String())
	}
	if !strings.Contains(alone.String(), "0.0123") {
		t.Fatalf("the tasks table lacks the time:\n%s", alone.String())
	}
}
