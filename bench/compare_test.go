package bench

import (
	"context"
	"os"
	"path/filepath"
	"slices"
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
		RPCServer:  testkit.Command(roleRPCServer),
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
		default:
			checkCPU(t, r)
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
				checkCPU(t, r)
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

// TestCompareSummaryLikeWithLike checks that chanos's local interconnect,
// within one process, is set against the in-process peer only, and ump,
// between processes, against the peers between processes only.
func TestCompareSummaryLikeWithLike(t *testing.T) {
	rtt := func(transport string, inProcess bool, p50 float64) Result {
		return Result{Suite: "pingpong", Case: "rtt", Transport: transport, Peers: "go-go", Size: 8, Iters: 1, RTTp50: f64(p50), InProcess: inProcess}
	}
	stream := func(transport string, inProcess bool, bps float64) Result {
		return Result{Suite: "stream", Case: "stream", Transport: transport, Peers: "go-go", Size: 64, Iters: 1, MsgsPerS: f64(bps / 64), BytesPerS: f64(bps), InProcess: inProcess}
	}
	call := func(transport string, inProcess bool, p50 float64) Result {
		return Result{Suite: "rpc", Case: "rpc", Transport: transport, Peers: "go-go", Size: 8, Iters: 1, RTTp50: f64(p50), InProcess: inProcess}
	}
	rs := []Result{
		rtt("ump", false, 1000), rtt("local", true, 4000), rtt("uds", false, 30000), rtt("go-chan", true, 500),
		stream("ump", false, 1e9), stream("local", true, 2e9), stream("uds", false, 1e8), stream("go-chan", true, 4e9),
		call("ump", false, 1000), call("local", true, 4000), call("uds", false, 30000), call("go-chan", true, 500),
	}
	var b strings.Builder
	CompareSummary(&b, rs)
	out := b.String()
	t.Log("\n" + out)
	// Each section is a header line and the peers' lines under it.
	sections := map[string][]string{}
	var cur string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 0:
		case strings.Contains(line, "chanos"):
			cur = strings.TrimSpace(line)
			sections[cur] = nil
		default:
			sections[cur] = append(sections[cur], f[0])
		}
	}
	if len(sections) != 6 {
		t.Fatalf("%d sections, want 6 (pingpong, stream and rpc, each for ump and local):\n%s", len(sections), out)
	}
	for head, peers := range sections {
		want := "uds"
		if strings.Contains(head, "local") {
			want = "go-chan"
		}
		if !slices.Equal(peers, []string{want}) {
			t.Errorf("%q: peers %q, want %s only", head, peers, want)
		}
	}
	// The ratios are of like cases: uds's 30 µs over ump's 1 µs, the Go
	// channel's 0.5 µs over local's 4 µs.
	for _, want := range []string{"uds 30.0", "go-chan 0.12"} {
		found := false
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(strings.Join(strings.Fields(line), " "), want) {
				found = true
			}
		}
		if !found {
			t.Errorf("summary lacks a line %q", want)
		}
	}
}

// TestPeersSampledAsChanos checks that the peers run as many rounds as
// chanos's cases, each round after chanos's cases of the same round, and
// that every case, chanos's and the peers', reports its median of them.
func TestPeersSampledAsChanos(t *testing.T) {
	cfg := smokeConfig(t, 64)
	cfg.Repeat = 2
	var progress strings.Builder
	cfg.Progress = &progress
	got := collectRun(t, RunStream, cfg)
	for _, k := range []string{"stream/ump/go-go/64", "stream/local/go/64", "stream/go-chan/go-go/64", "stream/uds/go-go/64"} {
		if r, ok := got[k]; !ok || r.Runs != 2 {
			t.Errorf("%s: %d runs, want 2 (%v)", k, r.Runs, ok)
		}
	}
	var order []string
	for _, line := range strings.Split(progress.String(), "\n") {
		for _, step := range []string{"run 1/2 case", "run 1/2: the peers", "run 2/2 case", "run 2/2: the peers"} {
			if strings.HasPrefix(line, "stream: "+step) && !slices.Contains(order, step) {
				order = append(order, step)
			}
		}
	}
	want := []string{"run 1/2 case", "run 1/2: the peers", "run 2/2 case", "run 2/2: the peers"}
	if !slices.Equal(order, want) {
		t.Errorf("rounds in the order %q, want %q; progress:\n%s", order, want, progress.String())
	}
}

// TestRPCCompareSmoke checks the rpc suite with its peers: every case
// there, each with its CPU and its two runs, in one process or not as it
// is.
func TestRPCCompareSmoke(t *testing.T) {
	cfg := smokeConfig(t)
	cfg.Repeat = 2
	got := collectRun(t, RunRPCCompare, cfg)
	for k, inProcess := range map[string]bool{
		"rtt-spin/ump/go-go/8": false, "rpc/ump/go-go/8": false, "rpc/local/go/8": true,
		"send-receive/local/go/8": true, "send-receive/go-chan/go/8": true,
		"rpc/uds/go-go/8": false, "rpc/go-chan/go-go/8": true,
	} {
		r, ok := got[k]
		switch {
		case !ok:
			t.Errorf("no result %s", k)
		case r.Runs != 2 || r.InProcess != inProcess:
			t.Errorf("%s: %d runs (want 2), in_process %v (want %v)", k, r.Runs, r.InProcess, inProcess)
		default:
			checkCPU(t, r)
		}
	}
	if r := got["rpc/ump/go-go/8"]; r.PairedRatio == nil {
		t.Error("rpc over ump has no paired ratio")
	}
}
