package bench

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chanos/chanos/internal/testkit"
)

// roleCapsPeer is the test binary playing CapsPeer.
const roleCapsPeer = "caps-peer"

// TestRunCaps runs every case of the caps suite with few iterations and
// checks the shape of the results and of the summary (figures are
// benchmarks, not pass conditions).
func TestRunCaps(t *testing.T) {
	var cases []string // all
	_, err := FindCTool("chanos-caps-bench")
	if err == nil {
		_, err = FindCProgram(filepath.Join("examples", "kbd_driver"))
	}
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("C programs missing (CI is set): %v", err)
		}
		t.Logf("C cases skipped: %v", err)
		cases = []string{"rtt-fd", "endpoint", "event-wake/chanos/", "event-wake/eventfd/", "driver/go"}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var results []Result
	err = RunCaps(ctx, CapsConfig{Quick: true, Repeat: 2, Scale: 0.1, Cases: cases, Peer: testkit.Command(roleCapsPeer)},
		func(r Result) error {
			results = append(results, r)
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{
		"rtt-fd/uds-scm/go-go/0": true, "rtt-fd/ump/go-go/0": true,
		"endpoint/connect/go-go/0": true, "endpoint/ump/go-go/0": true,
		"event-wake/eventfd/parked/0": true, "event-wake/chanos/parked/0": true,
		"event-wake/eventfd/spin/0": true, "event-wake/chanos/spin/0": true,
		"driver/go/parked/0": true, "driver/go/spin/0": true,
	}
	if cases == nil {
		want["driver/c/parked/0"], want["driver/c/spin/0"] = true, true
		want["event-wake/chanos-c/parked/0"], want["event-wake/chanos-c/spin/0"] = true, true
		want["event-wake/eventfd-c/parked/0"], want["event-wake/eventfd-c/spin/0"] = true, true
	}
	for _, r := range results {
		if !want[r.Key()] {
			t.Errorf("unexpected case %s", r.Key())
			continue
		}
		delete(want, r.Key())
		if r.Suite != "caps" || r.Runs != 2 || r.Iters <= 0 {
			t.Errorf("%s: suite %q, %d runs, %d iterations", r.Key(), r.Suite, r.Runs, r.Iters)
		}
		if r.RTTp50 == nil || *r.RTTp50 <= 0 || r.RTTp99 == nil || *r.RTTp99 < *r.RTTp50 {
			t.Errorf("%s: p50 %v, p99 %v", r.Key(), r.RTTp50, r.RTTp99)
		}
		if strings.Contains(r.Key(), "/ump/") || strings.Contains(r.Key(), "/chanos/") || strings.Contains(r.Key(), "/chanos-c/") {
			if r.PairedRatio == nil || *r.PairedRatio <= 0 {
				t.Errorf("%s: no ratio against its baseline", r.Key())
			}
		}
	}
	for k := range want {
		t.Errorf("case %s missing", k)
	}
	var sum bytes.Buffer
	CapsSummary(&sum, results)
	lines := []string{"rtt-fd ump / uds-scm", "endpoint ump / connect", "event-wake chanos / eventfd, parked", "event-wake chanos / eventfd, spin"}
	if cases == nil {
		lines = append(lines, "event-wake chanos-c / eventfd-c, parked", "event-wake chanos-c / eventfd-c, spin")
	}
	for _, s := range lines {
		if !strings.Contains(sum.String(), s) {
			t.Errorf("summary lacks %q:\n%s", s, sum.String())
		}
	}
}
