// Package bench holds the benchmark suites of `chanos bench`. A suite runs
// its cases, each in fresh processes where the case involves more than one,
// and reports one Result per case. Results are printed as a table for
// people or, with --json, one JSON object per line for machines.
//
// The machines are shared and noisy: a suite measures its baselines in the
// same run as its subjects, and claims are ratios against them.
package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"text/tabwriter"
)

// Result is one measured case. Fields that do not apply are left unset and
// omitted from the JSON.
type Result struct {
	Suite     string `json:"suite"`
	Case      string `json:"case"`
	Transport string `json:"transport"`
	Peers     string `json:"peers"`
	Size      int    `json:"size"`
	Clients   int    `json:"clients,omitempty"` // client processes sharing Iters (suite clients)
	Stages    int    `json:"stages,omitempty"`  // stages of the ring, stage 0 included (suite ring)
	Iters     int    `json:"iters"`
	TotalNS   int64  `json:"total_ns,omitempty"` // wall time of the whole measured run
	// InProcess is set when both sides of the case run in one process
	// (chanos's local interconnect, a Go channel, a copy in memory): such
	// a case is compared with other in-process cases only, never with
	// one that crosses between processes.
	InProcess bool `json:"in_process,omitempty"`
	// Runs is how many times the case ran; the figures are those of the
	// median run.
	Runs int `json:"runs,omitempty"`
	// RunFigures is each run's primary figure (the one runs are ranked
	// by: the window, else p50, else the rate), in the order the runs
	// ran, when there were several: how far apart they came out, which
	// the median alone hides. On a 2-vCPU machine a case can come out in
	// two modes, a connection at a time (docs/benchmarks.md, "Output").
	RunFigures []float64 `json:"run_figures,omitempty"`
	RTTp50     *float64  `json:"rtt_ns_p50,omitempty"`
	RTTp99     *float64  `json:"rtt_ns_p99,omitempty"`
	RTTMean    *float64  `json:"rtt_ns_mean,omitempty"`
	// RTTWindow is the median, over windows of RTTWindow consecutive round
	// trips, of each window's time per round trip. The clock of a virtual
	// machine may move in steps (10 ns on the one chanos is built on), and
	// p50 moves with them; a window's mean resolves a tenth of a
	// nanosecond, and a preemption spoils one window, not the median. The
	// ump and rpc suites time their windows whole, in a run of round trips
	// of their own, with no clock read in between (a read costs a Go and a
	// C client differently; see docs/ump.md, "Performance"); the others
	// add up round trips timed one by one.
	RTTWindow *float64 `json:"rtt_ns_window_p50,omitempty"`
	MsgsPerS  *float64 `json:"msgs_per_s,omitempty"`
	BytesPerS *float64 `json:"bytes_per_s,omitempty"`
	// CPUPercent is the CPU time that both sides of the case used over
	// the measured phase, as a percentage of wall time (100 is one core
	// busy, 200 two): this process and the server process, or the
	// children's whole lives where both sides are children (the ump
	// suite). A ring that spins while it waits pays for its round trip
	// here. For idle-cpu it is the case's figure: the parked side's CPU.
	CPUPercent *float64 `json:"cpu_percent,omitempty"`
	// PairedRatio is the median over the rounds of this case's figure over
	// its baseline's in the same round: in the clients suite, total time
	// against C/C with as many clients; in the ump suite, for the rtt-spin
	// cases over ump, the window figure against C/C's (for C/C, against
	// the raw cache line's); in the rpc suite, for the rpc over ump, the
	// window figure against the raw ring's (the same two processes, just
	// before). Each run is set against the baseline run next to it in
	// time, so that a change in the machine's speed from one round to the
	// next stays out of the ratio.
	PairedRatio *float64 `json:"paired_ratio,omitempty"`
	// Runtime, Workers, N and TimeS are the task suite's: the runtime
	// (chanos, serial, openmp, ump-raw), its workers, the problem's size
	// and the median time of a run in seconds (docs/tasks.md).
	Runtime string   `json:"runtime,omitempty"`
	Workers int      `json:"workers,omitempty"`
	N       int64    `json:"n,omitempty"`
	TimeS   *float64 `json:"time_s,omitempty"`
	// Path is the network path of the net suite's cases: NetPathVeth
	// between two network namespaces, or NetPathLoopback.
	Path string `json:"path,omitempty"`
}

// Key names the case of a result: case/transport/peers/size.
func (r *Result) Key() string {
	return fmt.Sprintf("%s/%s/%s/%d", r.Case, r.Transport, r.Peers, r.Size)
}

// primary returns the figure by which runs of a case are ordered: the
// case's own figure. The CPU a case costs comes last, as the figure of the
// cases that measure nothing else (idle-cpu).
func (r *Result) primary() float64 {
	for _, p := range []*float64{r.RTTWindow, r.RTTp50, r.BytesPerS, r.MsgsPerS, r.CPUPercent} {
		if p != nil {
			return *p
		}
	}
	return 0
}

// Median returns the run whose primary figure is the median of runs,
// marked with the number of runs and, if there were several, each run's
// primary figure.
func Median(runs []Result) Result {
	s := append([]Result(nil), runs...)
	sort.SliceStable(s, func(i, j int) bool { return s[i].primary() < s[j].primary() })
	m := s[(len(s)-1)/2]
	m.Runs = len(runs)
	m.RunFigures = nil
	if len(runs) > 1 {
		for _, r := range runs {
			m.RunFigures = append(m.RunFigures, r.primary())
		}
	}
	return m
}

// WriteJSON writes r as one line of JSON.
func WriteJSON(w io.Writer, r Result) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// WriteTable writes results as an aligned table.
func WriteTable(w io.Writer, results []Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "case\ttransport\tpeers\tsize\titers\trtt p50\trtt p99\trtt mean\trtt window\tmsgs/s\tbytes/s\tcpu\t")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n",
			r.Case, r.Transport, r.Peers, r.Size, r.Iters,
			ns(r.RTTp50), ns(r.RTTp99), ns(r.RTTMean), nsTenth(r.RTTWindow), si(r.MsgsPerS, ""), si(r.BytesPerS, "B"), pct(r.CPUPercent))
	}
	return tw.Flush()
}

func ns(p *float64) string {
	switch {
	case p == nil:
		return "-"
	case *p >= 1e6:
		return fmt.Sprintf("%.2f ms", *p/1e6)
	case *p >= 1e4:
		return fmt.Sprintf("%.1f µs", *p/1e3)
	}
	return fmt.Sprintf("%.0f ns", *p)
}

// nsTenth is ns with a tenth of a nanosecond below 10 µs, for figures
// that resolve it.
func nsTenth(p *float64) string {
	if p != nil && *p < 1e4 {
		return fmt.Sprintf("%.1f ns", *p)
	}
	return ns(p)
}

func si(p *float64, unit string) string {
	if p == nil {
		return "-"
	}
	v, prefix := *p, ""
	for _, u := range []string{"k", "M", "G", "T"} {
		if math.Abs(v) < 1000 {
			break
		}
		v, prefix = v/1000, u
	}
	return strings.TrimSpace(fmt.Sprintf("%.2f %s%s", v, prefix, unit))
}

// pct writes a CPU percentage: to a thousandth below 10 (an idle
// connection's), else to a tenth (a case's busy sides).
func pct(p *float64) string {
	switch {
	case p == nil:
		return "-"
	case *p < 10:
		return fmt.Sprintf("%.3f%%", *p)
	}
	return fmt.Sprintf("%.1f%%", *p)
}

func f64(v float64) *float64 { return &v }
