package bench

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParsePingPhase(t *testing.T) {
	for _, tc := range []struct {
		out  string
		n    int
		want time.Duration
	}{
		{"connected to \"x\" over ump (domain 3)\nping/pong messages: 250000 round trips in 1.234s; round trip p50 4µs, p99 9µs\necho rpcs: ...\n", 250000, 1234 * time.Millisecond},
		{"ping/pong messages: 10 round trips in 12ms; round trip p50 1µs, p99 2µs\n", 10, 12 * time.Millisecond},
		{"ping/pong messages: 10 round trips in 0s; round trip p50 1µs, p99 2µs\n", 10, 0},
		{"connected to x (domain 4)\nping/pong messages: 5000 round trips in 0.002 s\necho rpcs: 5000 calls in 0.003 s\n", 5000, 2 * time.Millisecond},
	} {
		n, d, err := parsePingPhase(tc.out)
		if err != nil || n != tc.n || d != tc.want {
			t.Errorf("parsePingPhase(%q) = %d, %v, %v; want %d, %v", tc.out, n, d, err, tc.n, tc.want)
		}
	}
	if _, _, err := parsePingPhase("connected\n"); err == nil {
		t.Error("parsePingPhase accepted output without a ping/pong line")
	}
}

// TestRunClients runs every combination with one and two client
// processes and few round trips, and checks the shape of the results
// (figures are benchmarks, not pass conditions). The Go examples are
// built here; the C ones come from the C build.
func TestRunClients(t *testing.T) {
	if testing.Short() {
		t.Skip("starts many processes")
	}
	bin := t.TempDir()
	for name, pkg := range map[string]string{"pingpong-server": "./examples/pingpong/server", "pingpong-client": "./examples/pingpong/client"} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(bin, name), pkg)
		cmd.Dir = ".."
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, out)
		}
	}
	cfg := ClientsConfig{
		Total:   20000, // enough for the clients' 1 ms clock, even C/C
		Clients: []int{1, 2},
		Repeat:  2,
		// One client: a third round, of those cases alone.
		OneClientRepeat: 3,
		GoServer:        filepath.Join(bin, "pingpong-server"),
		GoClient:        filepath.Join(bin, "pingpong-client"),
	}
	want := 2 // go-go with 1 and 2 clients
	cServer, errS := FindExample(true, "pingpong_server")
	cClient, errC := FindExample(true, "pingpong_client")
	switch {
	case errS == nil && errC == nil:
		cfg.CServer, cfg.CClient = cServer, cClient
		want = 8 // the four combinations
	case os.Getenv("CI") != "":
		t.Fatalf("C examples missing (CI is set): %v %v", errS, errC)
	default:
		t.Logf("C cases skipped: C examples missing: %v %v", errS, errC)
		cfg.Cases = []string{"/go-go/"}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var results []Result
	err := RunClients(ctx, cfg, func(r Result) error {
		results = append(results, r)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != want {
		t.Fatalf("%d results, want %d: %+v", len(results), want, results)
	}
	seen := map[string]bool{}
	for _, r := range results {
		k := fmt.Sprintf("%s/%d", r.Key(), r.Clients)
		if seen[k] {
			t.Errorf("%s reported twice", k)
		}
		seen[k] = true
		if r.Suite != "clients" || r.Case != "clients" || r.Transport != "ump" || r.Size != 8 ||
			r.Iters != cfg.Total || r.Runs != map[int]int{1: 3, 2: 2}[r.Clients] || (r.Clients != 1 && r.Clients != 2) {
			t.Errorf("bad result %+v", r)
		}
		checkCPU(t, r)
		if !strings.Contains("go-go go-c c-go c-c", r.Peers) {
			t.Errorf("bad peers %q", r.Peers)
		}
		if r.TotalNS <= 0 || r.RTTMean == nil || r.MsgsPerS == nil || *r.RTTMean <= 0 ||
			*r.RTTMean != float64(r.TotalNS)/float64(r.Iters) {
			t.Errorf("%s: bad figures %+v", k, r)
		}
		// Set against C/C's runs of the same rounds, when C/C ran.
		switch {
		case want == 2 && r.PairedRatio != nil:
			t.Errorf("%s: a paired ratio without C/C: %v", k, *r.PairedRatio)
		case want == 8 && (r.PairedRatio == nil || *r.PairedRatio <= 0):
			t.Errorf("%s: no paired ratio", k)
		case r.Peers == "c-c" && *r.PairedRatio != 1:
			t.Errorf("%s: C/C's paired ratio to itself is %v", k, *r.PairedRatio)
		}
	}
	var b strings.Builder
	if err := WriteTable(&b, results); err != nil {
		t.Fatal(err)
	}
	ClientsSummary(&b, results)
	if err := WriteJSON(&b, results[0]); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), `"clients":`) || !strings.Contains(b.String(), `"total_ns":`) {
		t.Errorf("JSON lacks clients or total_ns:\n%s", b.String())
	}
	t.Log("\n" + b.String())
}

func TestRunClientsMissingProgram(t *testing.T) {
	err := RunClients(context.Background(), ClientsConfig{
		Total:    10,
		Cases:    []string{"go-go/8/1"},
		GoServer: "/nonexistent/pingpong-server",
		GoClient: "/nonexistent/pingpong-client",
	}, func(Result) error { return nil })
	if err == nil {
		t.Fatal("RunClients with missing programs succeeded")
	}
}

// The paired ratio is the median of the ratios of the runs of each round.
func TestPairedRatio(t *testing.T) {
	total := func(r *Result) float64 { return float64(r.TotalNS) }
	runs := func(totals ...int64) []Result {
		var rs []Result
		for _, n := range totals {
			rs = append(rs, Result{TotalNS: n})
		}
		return rs
	}
	for _, tc := range []struct {
		runs, base []Result
		want       float64
	}{
		{runs(110, 300, 120), runs(100, 100, 100), 1.2},
		{runs(200, 330), runs(100, 300), 1.55},
		{runs(150, 250, 600), runs(100, 250, 500), 1.2},
	} {
		got := pairedRatio(tc.runs, tc.base, total)
		if got == nil || math.Abs(*got-tc.want) > 1e-9 {
			t.Errorf("pairedRatio(%v, %v) = %v, want %v", tc.runs, tc.base, got, tc.want)
		}
	}
	if got := pairedRatio(runs(1), runs(0), total); got != nil {
		t.Errorf("pairedRatio with a zero baseline = %v, want nil", *got)
	}
}
