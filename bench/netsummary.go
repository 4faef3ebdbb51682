package bench

import (
	"fmt"
	"io"
	"strings"
)

// Seed 004's figures for EMP between two machines on gigabit Ethernet,
// beside which NetSummary puts the net suite's (docs/benchmarks.md).
const (
	seedEMPRTTNS     = 130e3
	seedEMPBytesPerS = 5.57e6
)

// NetSummary prints the net suite's ratios against its baselines of the
// same run, with issue 21's goals, and the seed's figures beside ours.
// A ratio to the tcp baseline is the median of the rounds' ratios
// (Result.PairedRatio) where there were several rounds.
func NetSummary(w io.Writer, results []Result) {
	find := func(kase, transport string, size int) *Result {
		for i := range results {
			r := &results[i]
			if r.Case == kase && r.Transport == transport && (size == 0 || r.Size == size) {
				return r
			}
		}
		return nil
	}
	if len(results) > 0 {
		fmt.Fprintf(w, "path: %s\n", results[0].Path)
	}
	tcp := find("rtt", "tcp", 8)
	for _, g := range []struct {
		tr   string
		goal float64
	}{{"net", 1.15}, {"net-auth", 1.05}, {"net-plain", 0}} {
		r := find("rtt", g.tr, 8)
		if r == nil || tcp == nil || r.RTTp50 == nil || tcp.RTTp50 == nil || *tcp.RTTp50 == 0 {
			continue
		}
		p50 := pairedOr(r, *r.RTTp50 / *tcp.RTTp50)
		fmt.Fprintf(w, "rtt %s / tcp: %.2f p50", g.tr, p50)
		if g.goal > 0 {
			fmt.Fprintf(w, " (goal <= %.2f: %s)", g.goal, verdict(p50 <= g.goal))
		}
		fmt.Fprintln(w)
	}
	if c, g := find("rtt", "tcp-c", 8), tcp; c != nil && g != nil {
		fmt.Fprintf(w, "rtt tcp (Go) / tcp-c (C): %.2f p50\n", 1/pairedOr(c, *c.RTTp50 / *g.RTTp50))
	}
	if g, n := find("rtt", "grpc-tcp", 8), find("rtt", "net", 8); g != nil && n != nil {
		r := *g.RTTp50 / *n.RTTp50
		if g.PairedRatio != nil && n.PairedRatio != nil {
			r = *g.PairedRatio / *n.PairedRatio
		}
		fmt.Fprintf(w, "rtt grpc-tcp / net: %.2f p50 (goal >= 3: %s)\n", r, verdict(r >= 3))
	}
	for _, tr := range []string{"net", "net-auth", "net-plain", "tcp", "grpc-tcp"} {
		if r := find("stream", tr, 64); r != nil && r.MsgsPerS != nil {
			fmt.Fprintf(w, "stream 64 B %s: %.0f msgs/s", tr, *r.MsgsPerS)
			if strings.HasPrefix(tr, "net") {
				fmt.Fprintf(w, " (goal >= 1e6: %s)", verdict(*r.MsgsPerS >= 1e6))
			}
			fmt.Fprintln(w)
		}
	}
	big := find("stream", "tcp", 65536)
	for _, g := range []struct {
		tr   string
		goal float64
	}{{"net", 0.8}, {"net-auth", 0.9}, {"net-plain", 0.9}, {"grpc-tcp", 0}} {
		if r := find("stream", g.tr, 65536); r != nil && big != nil && *big.BytesPerS != 0 {
			x := pairedOr(r, *r.BytesPerS / *big.BytesPerS)
			fmt.Fprintf(w, "stream 64 KiB %s / tcp: %.2f bytes/s", g.tr, x)
			if g.goal > 0 {
				fmt.Fprintf(w, " (goal >= %.1f: %s)", g.goal, verdict(x >= g.goal))
			}
			fmt.Fprintln(w)
		}
	}
	if r := find("resume", "net", 0); r != nil && r.RTTp50 != nil {
		fmt.Fprintf(w, "resume after a cut: p50 %.0f µs, p99 %.0f µs\n", *r.RTTp50/1e3, *r.RTTp99/1e3)
	}
	if r := find("rtt", "net", 8); r != nil {
		fmt.Fprintf(w, "seed 004's EMP: %.0f µs round trip, %.2f MB/s; net here: %.0f µs p50", seedEMPRTTNS/1e3, seedEMPBytesPerS/1e6, *r.RTTp50/1e3)
		if b := find("stream", "net", 65536); b != nil {
			fmt.Fprintf(w, ", %.0f MB/s (64 KiB messages)", *b.BytesPerS/1e6)
		}
		fmt.Fprintln(w)
	}
}

// pairedOr is r's paired ratio to its baseline (the median of the
// rounds' ratios) where there is one, else ratio, that of the medians.
func pairedOr(r *Result, ratio float64) float64 {
	if r.PairedRatio != nil {
		return *r.PairedRatio
	}
	return ratio
}
