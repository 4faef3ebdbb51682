package bench

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chanos/chanos/internal/testkit"
)

// smokeConfig returns a config with tiny counts whose processes are this
// test binary, or skips the test if chanos-peers is not built (and fails
// it if CI is set).
func smokeConfig(t *testing.T, sizes ...int) CompareConfig {
	t.Helper()
	peers, err := FindPeers()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI is set and the peers are missing: %v", err)
		}
		t.Skipf("skipped: %v", err)
	}
	return CompareConfig{
		Quick:      true,
		Warmup:     time.Millisecond,
		Duration:   5 * time.Millisecond,
		Sizes:      sizes,
		Transports: []string{"go-chan", "uds"},
		Peers:      peers,
		Server:     testkit.Command(roleCompareServer),
		GoPeer:     testkit.Command(rolePeer),
		UMPScale:   0.01,
	}
}

// collectRun runs a suite and returns its results by key.
func collectRun(t *testing.T, run func(context.Context, CompareConfig, func(Result) error) error, cfg CompareConfig) map[string]Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	got := map[string]Result{}
	var list []Result
	err := run(ctx, cfg, func(r Result) error {
		if _, dup := got[r.Key()]; dup {
			t.Errorf("result %s twice", r.Key())
		}
		got[r.Key()] = r
		list = append(list, r)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	WriteTable(&b, list)
	b.WriteString("\n")
	CompareSummary(&b, list)
	t.Log("\n" + b.String())
	return got
}

// TestPingpongSmoke checks the shape of the pingpong suite's results, not
// their figures.
func TestPingpongSmoke(t *testing.T) {
	cfg := smokeConfig(t, 8, 4096)
	got := collectRun(t, RunPingpong, cfg)
	want := []string{"rtt-spin/ump/go-go/8"}
	for _, size := range []string{"8", "4096"} {
		for _, tp := range []string{"ump/go-go", "local/go", "go-chan/go-go", "uds/go-go"} {
			want = append(want, "rtt/"+tp+"/"+size)
		}
	}
	for _, k := range want {
		r, ok := got[k]
		switch {
		case !ok:
			t.Errorf("no result %s", k)
		case r.Suite != "pingpong" || r.Iters <= 0:
			t.Errorf("%s: bad result %+v", k, r)
		case r.RTTp50 == nil || *r.RTTp50 <= 0 || r.RTTp99 == nil || *r.RTTp99 < *r.RTTp50:
			t.Errorf("%s: bad round-trip figures", k)
		}
	}
	var b strings.Builder
	var rs []Result
	for _, r := range got {
		rs = append(rs, r)
	}
	CompareSummary(&b, rs)
	if !strings.Contains(b.String(), ">= 50 (") || !strings.Contains(b.String(), "met)") {
		t.Errorf("summary lacks the uds goal's verdict:\n%s", b.String())
	}
}

// TestStreamSmoke checks that every stream result counts what was sent.
func TestStreamSmoke(t *testing.T) {
	cfg := smokeConfig(t, 64, 1<<20)
	got := collectRun(t, RunStream, cfg)
	for _, size := range []string{"64", "1048576"} {
		for _, tp := range []string{"ump/go-go", "local/go", "go-chan/go-go", "uds/go-go"} {
			k := "stream/" + tp + "/" + size
			r, ok := got[k]
			switch {
			case !ok:
				t.Errorf("no result %s", k)
			case r.Suite != "stream" || r.Iters < 20:
				t.Errorf("%s: bad result %+v", k, r)
			case r.MsgsPerS == nil || r.BytesPerS == nil || *r.MsgsPerS <= 0:
				t.Errorf("%s: bad throughput figures", k)
			default:
				if d := *r.BytesPerS / *r.MsgsPerS / float64(r.Size); d < 0.99 || d > 1.01 {
					t.Errorf("%s: bytes/s is %.3f times msgs/s times size", k, d)
				}
			}
		}
	}
}

// TestPlotPipe checks that Plot hands results to chanos-peers plot.
func TestPlotPipe(t *testing.T) {
	cfg := smokeConfig(t)
	out := filepath.Join(t.TempDir(), "chart.svg")
	rs := []Result{
		{Suite: "pingpong", Case: "rtt", Transport: "ump", Peers: "go-go", Size: 8, Iters: 1, RTTp50: f64(1500.5)},
		{Suite: "pingpong", Case: "rtt", Transport: "uds", Peers: "go-go", Size: 8, Iters: 1, RTTp50: f64(30000)},
	}
	if err := Plot(context.Background(), cfg.Peers, rs, out); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(out); err != nil || fi.Size() == 0 {
		t.Fatalf("no chart: %v", err)
	}
	if err := Plot(context.Background(), cfg.Peers, rs, out+".gif"); err == nil || !strings.Contains(err.Error(), ".png or .svg") {
		t.Errorf("plot to a .gif: %v", err)
	}
}

func TestRatioString(t *testing.T) {
	for v, want := range map[float64]string{250: "250", 23.456: "23.5", 1.234: "1.23", 0.0123: "0.012"} {
		if got := ratioString(v); got != want {
			t.Errorf("ratioString(%v) = %q, want %q", v, got, want)
		}
	}
}
