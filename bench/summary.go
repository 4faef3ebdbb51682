package bench

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// UMPSummary prints the ratios that the ump suite's goals are stated in
// (docs/ump.md), computed from results of the same run.
func UMPSummary(w io.Writer, results []Result) {
	find := func(kase, transport, peers string, size int) *Result {
		for i := range results {
			r := &results[i]
			if r.Case == kase && r.Transport == transport && r.Peers == peers && r.Size == size {
				return r
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ratio\tvalue\tgoal\t")
	line := func(name string, v float64, ok bool, goal string, cmp func(float64) bool) {
		if !ok {
			return
		}
		if cmp == nil { // a figure to read, not a goal
			fmt.Fprintf(tw, "%s\t%.2f\t%s\t\n", name, v, goal)
			return
		}
		verdict := "met"
		if !cmp(v) {
			verdict = "NOT met"
		}
		fmt.Fprintf(tw, "%s\t%.2f\t%s (%s)\t\n", name, v, goal, verdict)
	}
	ratio := func(a, b *Result, get func(*Result) *float64) (float64, bool) {
		if a == nil || b == nil || get(a) == nil || get(b) == nil || *get(b) == 0 {
			return 0, false
		}
		return *get(a) / *get(b), true
	}
	p50 := func(r *Result) *float64 { return r.RTTp50 }
	window := func(r *Result) *float64 { return r.RTTWindow }
	mean := func(r *Result) *float64 { return r.RTTMean }
	bps := func(r *Result) *float64 { return r.BytesPerS }
	le := func(x float64) func(float64) bool { return func(v float64) bool { return v <= x } }
	ge := func(x float64) func(float64) bool { return func(v float64) bool { return v >= x } }

	raw := find("rtt-spin", "raw-spin", "c-c", 8)
	for _, p := range []struct {
		peers string
		goal  float64
	}{{"go-go", 2.5}, {"c-c", 1.5}, {"go-c", 2.5}, {"c-go", 2.5}} {
		ump := find("rtt-spin", "ump", p.peers, 8)
		v, ok := ratio(ump, raw, p50)
		line("rtt-spin ump "+p.peers+" / raw-spin c-c, p50", v, ok, fmt.Sprintf("<= %.1f", p.goal), le(p.goal))
		v, ok = ratio(ump, raw, window)
		line("rtt-spin ump "+p.peers+" / raw-spin c-c, window", v, ok, fmt.Sprintf("<= %.1f", p.goal), le(p.goal))
	}
	if r := find("rtt-spin", "ump", "c-c", 8); r != nil && r.PairedRatio != nil {
		line("rtt-spin ump c-c / raw-spin c-c, window, paired by round", *r.PairedRatio, true, "<= 1.5", le(1.5))
	}
	// Against the floor of any pair of one-way rings: two cache lines,
	// one per direction.
	v, ok := ratio(find("rtt-spin", "ump", "c-c", 8), find("rtt-spin", "raw-pair", "c-c", 8), window)
	line("rtt-spin ump c-c / raw-pair c-c, window (two lines' floor)", v, ok, "(no goal)", nil)
	v, ok = ratio(find("rtt-spin", "raw-pair", "c-c", 8), raw, window)
	line("rtt-spin raw-pair c-c / raw-spin c-c, window (a second line)", v, ok, "(no goal)", nil)
	// The Go tax, measured as Biscuit did (issue 5): the same ping-pong on
	// the same ring in Go and in C.
	gogo, cc := find("rtt-spin", "ump", "go-go", 8), find("rtt-spin", "ump", "c-c", 8)
	v, ok = ratio(gogo, cc, p50)
	line("rtt-spin ump go-go / ump c-c, p50 (Go tax)", v, ok, "<= 1.15", le(1.15))
	v, ok = ratio(gogo, cc, window)
	line("rtt-spin ump go-go / ump c-c, window (Go tax)", v, ok, "<= 1.15", le(1.15))
	if gogo != nil && gogo.PairedRatio != nil {
		// Each round's go-go run against the c-c run beside it: the VM
		// moves its vCPUs between speeds every few seconds.
		line("rtt-spin ump go-go / ump c-c, window, paired by round (Go tax)", *gogo.PairedRatio, true, "<= 1.15", le(1.15))
	}
	// The same round trip's code alone, in one thread: what the language
	// and the API cost where nothing waits (docs/benchmarks.md, "The Go
	// tax").
	v, ok = ratio(find("path", "ump", "go-go", 8), find("path", "ump", "c-c", 8), window)
	line("path ump go-go / ump c-c, window (code path)", v, ok, "(no goal)", nil)
	v, ok = ratio(find("path-locked", "ump", "go-go", 8), find("path", "ump", "go-go", 8), window)
	line("path-locked ump go-go / path ump go-go, window (Go's locks)", v, ok, "(no goal)", nil)
	uds := find("rtt-parked", "uds", "c-c", 8)
	for _, peers := range []string{"go-go", "c-c"} {
		parked := find("rtt-parked", "ump", peers, 8)
		v, ok := ratio(parked, uds, p50)
		line("rtt-parked ump "+peers+" / uds c-c, p50", v, ok, "<= 1.5", le(1.5))
		v, ok = ratio(parked, uds, mean)
		line("rtt-parked ump "+peers+" / uds c-c, mean", v, ok, "<= 1.5", le(1.5))
	}
	if r := find("stream", "ump", "go-go", 64); r != nil && r.MsgsPerS != nil {
		line("stream ump go-go 64 B, million msgs/s", *r.MsgsPerS/1e6, true, ">= 10", ge(10))
	}
	for _, size := range []int{65536, 1 << 20} {
		g := find("stream", "ump", "go-go", size)
		v, ok := ratio(g, find("stream", "memcpy", "go", size), bps)
		line(fmt.Sprintf("stream ump go-go %d B / memcpy", size), v, ok, ">= 0.40", ge(0.4))
		v, ok = ratio(g, find("stream", "shm-memcpy", "c-c", size), bps)
		line(fmt.Sprintf("stream ump go-go %d B / shm-memcpy c-c", size), v, ok, "(ceiling, no goal)", nil)
	}
	if r := find("idle-cpu", "ump", "go-go", 0); r != nil && r.CPUPercent != nil {
		line("idle-cpu ump go-go, percent", *r.CPUPercent, true, "~ 0 (< 0.5)", le(0.5))
	}
	tw.Flush()
}
