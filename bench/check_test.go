package bench

import (
	"strings"
	"testing"
)

// goodRun is a run's lines as `chanos bench all --quick --json` writes
// them (trimmed to the fields the bounds read, and to some cases), with
// ratios as a loaded 2-core VM gives them: ump C/C 2.4 times the raw
// line, rpc 1.2 times the raw ring, local 1.9 times a Go channel.
const goodRun = `{"suite":"pingpong","case":"rtt","transport":"ump","peers":"go-go","size":8,"iters":5571,"runs":1,"rtt_ns_p50":10800,"cpu_percent":100.7}
{"suite":"rpc","case":"rtt-spin","transport":"ump","peers":"go-go","size":8,"iters":20000,"runs":1,"rtt_ns_p50":230,"rtt_ns_window_p50":206.5,"cpu_percent":199.1}
{"suite":"rpc","case":"rpc","transport":"ump","peers":"go-go","size":8,"iters":20000,"runs":1,"rtt_ns_p50":271,"rtt_ns_window_p50":256.4,"paired_ratio":1.24,"cpu_percent":199.5}
{"suite":"rpc","case":"rpc","transport":"local","peers":"go","size":8,"iters":20000,"runs":1,"rtt_ns_p50":541,"rtt_ns_window_p50":570.3,"in_process":true}

{"suite":"rpc","case":"send-receive","transport":"local","peers":"go","size":8,"iters":100000,"runs":1,"msgs_per_s":8376705.1,"in_process":true}
{"suite":"rpc","case":"send-receive","transport":"go-chan","peers":"go","size":8,"iters":100000,"runs":1,"msgs_per_s":16140945.3,"in_process":true}
{"suite":"rpc","case":"rpc","transport":"uds","peers":"go-go","size":8,"iters":3874,"rtt_ns_p50":18117,"cpu_percent":105.7}
{"suite":"ump","case":"rtt-spin","transport":"ump","peers":"c-c","size":8,"iters":100000,"runs":3,"rtt_ns_p50":180,"rtt_ns_window_p50":148.7,"paired_ratio":2.4,"cpu_percent":198}
{"suite":"ump","case":"rtt-spin","transport":"raw-spin","peers":"c-c","size":8,"iters":100000,"runs":3,"rtt_ns_p50":140,"rtt_ns_window_p50":65.4,"cpu_percent":199}
`

func readRun(t *testing.T, lines string) []Result {
	t.Helper()
	rs, err := ReadResults(strings.NewReader(lines))
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// edit returns rs with f applied to the result of key in suite.
func edit(rs []Result, suite, key string, f func(*Result)) []Result {
	out := make([]Result, len(rs))
	copy(out, rs)
	for i := range out {
		if out[i].Suite == suite && out[i].Key() == key {
			f(&out[i])
		}
	}
	return out
}

func times(p *float64, k float64) *float64 {
	if p == nil {
		return nil
	}
	return f64(*p * k)
}

func TestCheckPassesANormalRun(t *testing.T) {
	rs := readRun(t, goodRun)
	if len(rs) != 9 {
		t.Fatalf("read %d results, want 9", len(rs))
	}
	var b strings.Builder
	if err := Check(&b, rs, Bounds); err != nil {
		t.Errorf("a normal run fails: %v\n%s", err, b.String())
	}
	if n := strings.Count(b.String(), "ok "); n != len(Bounds) {
		t.Errorf("%d bounds passed, want all %d:\n%s", n, len(Bounds), b.String())
	}
}

// TestCheckFailsTenfoldRegressions makes chanos's side of each bound ten
// times slower, in every figure the bound may read, and checks that the
// run then fails, on that bound.
func TestCheckFailsTenfoldRegressions(t *testing.T) {
	good := readRun(t, goodRun)
	for _, b := range Bounds {
		rs := edit(good, b.Suite, b.Subject, func(r *Result) {
			r.RTTp50, r.RTTWindow, r.PairedRatio = times(r.RTTp50, 10), times(r.RTTWindow, 10), times(r.PairedRatio, 10)
			r.MsgsPerS = times(r.MsgsPerS, 0.1)
		})
		var out strings.Builder
		err := Check(&out, rs, Bounds)
		if err == nil || !strings.Contains(err.Error(), b.Subject) {
			t.Errorf("%s ten times slower: %v\n%s", b.Subject, err, out.String())
		}
		if n := strings.Count(out.String(), "FAIL"); n != 1 {
			t.Errorf("%s ten times slower: %d failures, want 1:\n%s", b.Subject, n, out.String())
		}
	}
	// Without a paired ratio the window figures, then p50, are checked.
	for _, drop := range []func(*Result){
		func(r *Result) { r.PairedRatio = nil },
		func(r *Result) { r.PairedRatio, r.RTTWindow = nil, nil },
	} {
		rs := edit(good, "rpc", "rpc/ump/go-go/8", func(r *Result) {
			drop(r)
			r.RTTp50, r.RTTWindow = times(r.RTTp50, 10), times(r.RTTWindow, 10)
		})
		if err := Check(&strings.Builder{}, rs, Bounds); err == nil {
			t.Error("rpc ten times slower, without a paired ratio: passes")
		}
	}
}

func TestCheckMissingFigures(t *testing.T) {
	good := readRun(t, goodRun)
	// The suite ran without a baseline: a failure, not a skip.
	var noBase []Result
	for _, r := range good {
		if r.Key() != "rtt-spin/raw-spin/c-c/8" {
			noBase = append(noBase, r)
		}
	}
	if err := Check(&strings.Builder{}, noBase, Bounds); err == nil || !strings.Contains(err.Error(), "no result for rtt-spin/raw-spin/c-c/8") {
		t.Errorf("without the raw line: %v", err)
	}
	noRate := edit(good, "rpc", "send-receive/go-chan/go/8", func(r *Result) { r.MsgsPerS = nil })
	if err := Check(&strings.Builder{}, noRate, Bounds); err == nil {
		t.Error("a Go channel without msgs/s: passes")
	}
	// A suite that did not run is left out: the suite list is checked
	// apart (bench-smoke's grep).
	var onlyRPC []Result
	for _, r := range good {
		if r.Suite == "rpc" {
			onlyRPC = append(onlyRPC, r)
		}
	}
	var out strings.Builder
	if err := Check(&out, onlyRPC, Bounds); err != nil || !strings.Contains(out.String(), "skip  ump") {
		t.Errorf("an rpc run alone: %v\n%s", err, out.String())
	}
	// Nothing to check at all fails.
	if err := Check(&strings.Builder{}, readRun(t, `{"suite":"bind","case":"connect","transport":"ump","peers":"go-go","size":0,"iters":1}`), Bounds); err == nil {
		t.Error("a run with no bound's suite: passes")
	}
	if _, err := ReadResults(strings.NewReader("{\"suite\":\n")); err == nil {
		t.Error("a broken line reads")
	}
}
