package bench

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chanos/chanos/internal/testkit"
	"github.com/chanos/chanos/internal/testkit/testmonitor"
)

// children returns the processes whose parent is this one, zombies
// included: what a run that cleaned up after itself leaves none of.
func children(t *testing.T) []string {
	t.Helper()
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		t.Fatal(err)
	}
	me := strconv.Itoa(os.Getpid())
	var out []string
	for _, path := range stats {
		b, err := os.ReadFile(path)
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid ...; comm may hold spaces and parentheses.
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 1 && f[1] == me {
			out = append(out, strings.TrimSpace(s[:strings.LastIndexByte(s, ')')+1])+" "+f[0])
		}
	}
	return out
}

// runRing runs the ring suite with cfg and returns its results, checking
// those every case must satisfy.
func runRing(t *testing.T, cfg RingConfig) []Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var results []Result
	err := RunRing(ctx, cfg, func(r Result) error {
		results = append(results, r)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := len(cfg.Sizes) * len(cfg.Transports)
	if len(results) != want {
		t.Fatalf("%d results, want %d: %+v", len(results), want, results)
	}
	seen := map[string]bool{}
	for _, r := range results {
		k := r.Transport + "/" + strconv.Itoa(r.Stages)
		if seen[k] {
			t.Errorf("%s reported twice", k)
		}
		seen[k] = true
		if r.Suite != "ring" || r.Case != "ring" || r.Peers != "go" || r.Size != 8 ||
			!slices.Contains(cfg.Transports, r.Transport) || !slices.Contains(cfg.Sizes, r.Stages) {
			t.Errorf("bad result %+v", r)
		}
		if r.Iters < cfg.MinTrips || r.Runs != max(cfg.Repeat, 1) || r.TotalNS <= 0 {
			t.Errorf("%s: iters %d (want >= %d), runs %d (want %d), total %d ns", k, r.Iters, cfg.MinTrips, r.Runs, max(cfg.Repeat, 1), r.TotalNS)
		}
		if r.RTTp50 == nil || r.RTTp99 == nil || r.RTTMean == nil || *r.RTTp50 <= 0 || *r.RTTp99 < *r.RTTp50 {
			t.Errorf("%s: bad figures %+v", k, r)
		}
		checkCPU(t, r)
	}
	var b strings.Builder
	if err := WriteTable(&b, results); err != nil {
		t.Fatal(err)
	}
	b.WriteString("\n")
	RingSummary(&b, results)
	if !strings.Contains(b.String(), "per hop p50") {
		t.Errorf("summary lacks per-hop times:\n%s", b.String())
	}
	if err := WriteJSON(&b, results[0]); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), `"stages":`) {
		t.Errorf("JSON lacks stages:\n%s", b.String())
	}
	t.Log("\n" + b.String())
	return results
}

// TestRunRingProcesses runs the quick ring with 3 stages, two of them
// processes (this test binary), over ump and over pipes, and checks the
// results' shape (figures are benchmarks, not pass conditions) and that
// no stage process outlives the suite.
func TestRunRingProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	before := children(t) // not ours to check
	runRing(t, RingConfig{
		Quick:      true,
		Sizes:      []int{3},
		Transports: []string{"ump", "pipe"},
		Warmup:     5 * time.Millisecond,
		Duration:   20 * time.Millisecond,
		MinTrips:   20,
		Stage:      testkit.Command(roleRingStage),
	})
	if left := slices.DeleteFunc(children(t), func(c string) bool { return slices.Contains(before, c) }); len(left) > 0 {
		t.Errorf("stage processes left after the run: %v", left)
	}
}

// TestRunRingInProcess runs the rings within this process, local
// connections and Go channels, twice each, and checks their shape.
func TestRunRingInProcess(t *testing.T) {
	runRing(t, RingConfig{
		Sizes:      []int{2, 3, 5},
		Transports: []string{"go-chan", "local"},
		Repeat:     2,
		Warmup:     2 * time.Millisecond,
		Duration:   10 * time.Millisecond,
		MinTrips:   50,
	})
}

func TestRunRingBadConfig(t *testing.T) {
	for _, cfg := range []RingConfig{
		{Sizes: []int{1}},
		{Sizes: []int{ringMaxStages + 1}},
		{Transports: []string{"carrier-pigeon"}},
		{Cases: []string{"no-such-case"}},
	} {
		if err := RunRing(context.Background(), cfg, func(Result) error { return nil }); err == nil {
			t.Errorf("RunRing(%+v) succeeded", cfg)
		}
	}
}

// TestMeasureRingChecksPayload checks that a trip whose payload does not
// come back as the ring size fails the case.
func TestMeasureRingChecksPayload(t *testing.T) {
	timing := ringTiming{warmup: time.Millisecond, dur: time.Millisecond, minTrips: 5}
	_, err := measureRing(context.Background(), 4, timing, nil, func(k uint32) (uint64, error) {
		if k == 15 {
			return 3, nil // a stage that did not increment
		}
		return 4, nil
	})
	if err == nil || !strings.Contains(err.Error(), "want the ring size 4") {
		t.Errorf("measureRing with a wrong payload: %v", err)
	}
	r, err := measureRing(context.Background(), 4, timing, nil, func(uint32) (uint64, error) { return 4, nil })
	if err != nil || r.Iters < 5 {
		t.Errorf("measureRing: %+v, %v", r, err)
	}
}

// TestRingStageExitsOnStdinClose checks that a stage, in either mode,
// ends when its standard input closes even though its ring never forms
// (the next stage never appears, the pipe never ends): what keeps stages
// from outliving a bench process that died.
func TestRingStageExitsOnStdinClose(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := testmonitor.Start(t)

	var fd [2]int
	if err := syscall.Pipe2(fd[:], syscall.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	r, w := os.NewFile(uintptr(fd[0]), "r"), os.NewFile(uintptr(fd[1]), "w")
	defer r.Close()
	defer w.Close() // held open: the stage's input never ends

	for _, tc := range []struct {
		mode  string
		args  []string
		files []*os.File
	}{
		{"ump", []string{"--mode", "ump", "--dir", dir, "--name", "ring.t.1", "--next", "ring.t.never"}, nil},
		{"pipe", []string{"--mode", "pipe"}, []*os.File{r, w}},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			cmd := testkit.Self(roleRingStage, tc.args...)
			cmd.ExtraFiles = tc.files
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			stage := testkit.Start(t, cmd)
			stage.Expect(t, "ready")
			time.Sleep(50 * time.Millisecond) // into its wait for the next stage or its input
			stdin.Close()
			if err := stage.Wait(t); err != nil {
				t.Errorf("stage: %v", err)
			}
		})
	}
}
