package bench

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chanos/chanos/internal/testkit"
)

// The test binary plays the processes the suites start: the Go peer of
// the ump suite, the comparison suites' server and the ring's stages.
const (
	rolePeer          = "peer"
	roleCompareServer = "compare-server"
	roleRPCServer     = "rpc-server"
	roleRingStage     = "ring-stage"
	roleNetServer     = "net-server"
)

func TestMain(m *testing.M) {
	ctx := context.Background()
	testkit.Main(m, testkit.Roles{
		rolePeer:          func(args []string) error { return Peer(ctx, args, os.Stdout) },
		roleCompareServer: func(args []string) error { return CompareServer(ctx, args) },
		roleRPCServer:     func(args []string) error { return RPCServer(ctx, args) },
		roleRingStage:     func(args []string) error { return RingStage(ctx, args) },
		roleCapsPeer:      func(args []string) error { return CapsPeer(ctx, args) },
		roleNetServer:     func(args []string) error { return NetServer(ctx, args) },
	})
}

// TestRunUMP runs a few cases with few iterations and checks the shape of
// the results (figures are benchmarks, not pass conditions).
func TestRunUMP(t *testing.T) {
	cases := []string{"rtt-spin/ump/go-go", "rtt-parked/ump/go-go", "path/ump/go-go", "path-locked/ump/go-go", "stream/ump/go-go/65536", "stream/memcpy/go/64"}
	if _, err := FindCTool("chanos-ump-bench"); err == nil {
		cases = append(cases, "path/ump/c-c", "rtt-spin/ump/c-c", "rtt-spin/ump/c-go", "rtt-spin/ump/go-c", "rtt-spin/raw-spin", "rtt-spin/raw-pair", "rtt-parked/uds", "stream/shm-memcpy/c-c/65536")
	} else if os.Getenv("CI") != "" {
		t.Fatalf("C bench peer missing (CI is set): %v", err)
	} else {
		t.Logf("C cases skipped: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var results []Result
	err := RunUMP(ctx, UMPConfig{
		Quick:     true,
		Repeat:    1,
		RTTRepeat: 2, // the Go tax's cases run twice, the rest once
		Scale:     0.01,
		Cases:     cases,
		GoPeer:    testkit.Command(rolePeer),
	}, func(r Result) error {
		results = append(results, r)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != len(cases) {
		t.Fatalf("%d results for %d cases", len(results), len(cases))
	}
	for i, r := range results {
		wantRuns := 1
		if r.Case == "rtt-spin" {
			wantRuns = 2
		}
		if r.Suite != "ump" || r.Iters <= 0 || r.Runs != wantRuns {
			t.Errorf("bad result %+v (want %d runs)", r, wantRuns)
		}
		checkCPU(t, r)
		// Paired against c-c's runs when c-c ran: the Go tax's cases
		// with a Go side; c-c against the raw line's.
		paired := strings.HasPrefix(r.Key(), "rtt-spin/ump/") && slices.Contains(cases, "rtt-spin/ump/c-c") &&
			(r.Peers != "c-c" || slices.Contains(cases, "rtt-spin/raw-spin"))
		if (r.PairedRatio != nil) != paired {
			t.Errorf("%s: paired ratio %v, want one: %v", r.Key(), r.PairedRatio, paired)
		}
		if i > 0 && slices.IndexFunc(umpCases(true), func(c umpCase) bool { return c.key() == r.Key() }) <
			slices.IndexFunc(umpCases(true), func(c umpCase) bool { return c.key() == results[i-1].Key() }) {
			t.Errorf("%s reported after %s: not in the suite's order", r.Key(), results[i-1].Key())
		}
		switch {
		case strings.HasPrefix(r.Case, "rtt"):
			if r.RTTp50 == nil || r.RTTp99 == nil || *r.RTTp50 <= 0 || *r.RTTp99 < *r.RTTp50 {
				t.Errorf("%s: bad round-trip figures", r.Key())
			}
			if r.RTTWindow == nil || *r.RTTWindow <= 0 {
				t.Errorf("%s: no window figure", r.Key())
			}
		case strings.HasPrefix(r.Case, "path"):
			if r.RTTWindow == nil || r.RTTMean == nil || *r.RTTWindow <= 0 || *r.RTTMean <= 0 {
				t.Errorf("%s: bad code path figures", r.Key())
			}
		case r.Case == "stream":
			if r.MsgsPerS == nil || r.BytesPerS == nil || *r.MsgsPerS <= 0 {
				t.Errorf("%s: bad stream figures", r.Key())
			}
		}
	}
	var b strings.Builder
	if err := WriteTable(&b, results); err != nil {
		t.Fatal(err)
	}
	UMPSummary(&b, results)
	if err := WriteJSON(&b, results[0]); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + b.String())
}
